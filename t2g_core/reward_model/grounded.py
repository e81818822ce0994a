"""Grounded decoding: while the generative reward model writes a quoted span, it may only choose tokens that keep the
quote a substring of the response, inside a valid list structure, so every quote it writes matches by construction.

The reward model's target is one JSON object (``prompts.build_rm_target``, ``json.dumps`` separators):

    {"critique": "<free text>", "good_spans": ["<quote>", ...], "poor_spans": ["<quote>", ...]}<eos>

A byte-level automaton follows what has been generated: the skeleton (keys, brackets, separators) is forced, the
critique is any JSON string, and a quote's *unescaped* bytes must stay a non-empty substring of the response's
UTF-8 bytes and close on a whole character. A token is allowed when every one of its bytes is accepted, so tokens
that cross a quote's end (``."``, ``"]``, ``", "``) or a multi-byte character are judged exactly; EOS only after the
closing brace. The structure is constrained too, not only the quote's characters: otherwise a model closes a quote
early on a space and escapes the constraint (``shared/reference/reward_model_findings.md``).

Cost: candidate tokens are indexed by their first byte, so a step inside a quote only runs the automaton over the
tokens that can continue one of the quote's occurrences (plus the closing and escape tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_HEX = frozenset(b"0123456789abcdefABCDEF")
_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b", ord("f"): b"\f", ord("n"): b"\n"}
_ESCAPES |= {ord("r"): b"\r", ord("t"): b"\t"}
OPEN = b'{"critique": "'
AFTER_CRITIQUE = b', "good_spans": ['
BETWEEN_LISTS = b', "poor_spans": ['
CLOSE = b"}"
NEXT_QUOTE = b', "'


@dataclass(frozen=True)
class State:
    """Where the generated text is. ``mode``: ``lit`` (forced bytes ``lit[pos:]``, then ``then``), ``critique``,
    ``list`` (after ``[``: a quote or ``]``), ``quote``, ``after`` (after a quote: ``, "`` or ``]``), ``end``."""

    mode: str
    which: str = "good"  # the list being written: good, then poor
    lit: bytes = b""
    pos: int = 0
    then: str = ""
    content: bytes = b""  # the quote so far, unescaped
    esc: bytes = b""  # a pending escape sequence (starts with a backslash)
    partial: bytes = b""  # the critique's bytes of a character not complete yet


START = State("lit", lit=OPEN, then="critique")


def _after_literal(state: State) -> State:
    if state.then == "critique":
        return State("critique")
    if state.then == "list":
        return State("list", which=state.which)
    if state.then == "quote":
        return State("quote", which=state.which)
    return State("end")


def _literal(text: bytes, then: str, which: str = "good") -> State:
    return State("lit", which=which, lit=text, then=then)


def _close_list(state: State) -> State:
    if state.which == "good":
        return _literal(BETWEEN_LISTS, "list", "poor")
    return _literal(CLOSE, "end", "poor")


def _escape(esc: bytes) -> tuple[bool, bytes | None]:
    """(still valid, decoded bytes once complete) of a pending escape such as ``\\n`` or ``\\u00e9``."""
    if len(esc) < 2:
        return True, None
    kind = esc[1]
    if kind in _ESCAPES:
        return True, _ESCAPES[kind]
    if kind != ord("u") or not all(c in _HEX for c in esc[2:]):
        return False, None
    if len(esc) < 6:
        return True, None
    code = int(esc[2:6], 16)
    if 0xD800 <= code <= 0xDFFF:  # surrogates: a quote writes such a character as raw UTF-8 instead
        return False, None
    return True, chr(code).encode("utf-8")


class Grounding:
    """The automaton for one response: ``step(state, byte)`` is the next state, or None when the byte is not allowed."""

    def __init__(self, response: str):
        self.response = response.encode("utf-8")

    def step(self, s: State, b: int) -> State | None:  # noqa: PLR0911 (one return per transition)
        if s.mode == "lit":
            if b != s.lit[s.pos]:
                return None
            nxt = State("lit", which=s.which, lit=s.lit, pos=s.pos + 1, then=s.then)
            return _after_literal(nxt) if nxt.pos == len(s.lit) else nxt
        if s.mode == "critique":
            return self._critique(s, b)
        if s.mode == "list":
            if b == ord('"') and self.response:
                return State("quote", which=s.which)
            return _close_list(s) if b == ord("]") else None
        if s.mode == "quote":
            return self._quote(s, b)
        if s.mode == "after":
            if b == ord(","):
                return State("lit", which=s.which, lit=NEXT_QUOTE, pos=1, then="quote")
            return _close_list(s) if b == ord("]") else None
        return None  # end: only EOS

    def _critique(self, s: State, b: int) -> State | None:
        if s.esc:
            ok, decoded = _escape(s.esc + bytes([b]))
            if not ok:
                return None
            return State("critique") if decoded is not None else State("critique", esc=s.esc + bytes([b]))
        if s.partial or b >= 0x80:  # raw UTF-8: only whole, valid characters
            status = _utf8(s.partial + bytes([b]))
            if status == "invalid":
                return None
            return State("critique", partial=s.partial + bytes([b]) if status == "partial" else b"")
        if b == ord("\\"):
            return State("critique", esc=b"\\")
        if b == ord('"'):
            return _literal(AFTER_CRITIQUE, "list")
        return None if b < 0x20 else s

    def _quote(self, s: State, b: int) -> State | None:
        if s.esc:
            esc = s.esc + bytes([b])
            ok, decoded = _escape(esc)
            if not ok:
                return None
            if decoded is not None:
                return self._extend(s, decoded)
            return State("quote", which=s.which, content=s.content, esc=esc) if self._can_finish(s, esc) else None
        if b == ord("\\"):
            ok = self._can_finish(s, b"\\")
            return State("quote", which=s.which, content=s.content, esc=b"\\") if ok else None
        if b == ord('"'):
            return State("after", which=s.which) if s.content and _whole_characters(s.content) else None
        return None if b < 0x20 else self._extend(s, bytes([b]))

    def _extend(self, s: State, more: bytes) -> State | None:
        content = s.content + more
        if not s.content and 0x80 <= content[0] < 0xC0:  # a quote starts on a character, not inside one
            return None
        return State("quote", which=s.which, content=content) if content in self.response else None

    def _next_characters(self, content: bytes) -> set[str]:
        """The characters that follow an occurrence of ``content`` (at a character boundary) in the response."""
        out, i = set(), self.response.find(content)
        while i != -1:
            rest = self.response[i + len(content) : i + len(content) + 4]
            for n in range(1, len(rest) + 1):
                if _utf8(rest[:n]) == "complete":
                    out.add(rest[:n].decode("utf-8"))
                    break
            i = self.response.find(content, i + 1)
        return out

    def _can_finish(self, s: State, esc: bytes) -> bool:
        """Whether the pending escape ``esc`` can still complete into a character that continues the quote."""
        tail = esc[1:].lower()
        return any(
            f.lower().startswith(tail)
            for ch in self._next_characters(s.content)
            for f in _escaped_forms(ch)
            if not (not s.content and 0xD800 <= ord(ch) <= 0xDFFF)
        )

    def next_bytes(self, s: State) -> set[int] | None:
        """The bytes that can come next (None: too many to list, in a critique or an escape)."""
        if s.mode == "lit":
            return {s.lit[s.pos]}
        if s.mode in ("list", "after"):
            return {ord('"'), ord("]")} if s.mode == "list" else {ord(","), ord("]")}
        if s.mode == "critique" and s.partial:
            return set(range(0x80, 0xC0))
        if s.mode != "quote" or s.esc:
            return None
        out, i = {ord('"'), ord("\\")}, self.response.find(s.content)
        while i != -1:
            j = i + len(s.content)
            if j < len(self.response):
                out.add(self.response[j])
            i = self.response.find(s.content, i + 1)
        return out

    def walk(self, s: State, data: bytes) -> State | None:
        for b in data:
            s = self.step(s, b)
            if s is None:
                return None
        return s


def _whole_characters(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _utf8(pending: bytes) -> str:
    """``complete``, ``partial`` (a valid start of a character) or ``invalid``."""
    try:
        pending.decode("utf-8")
    except UnicodeDecodeError as exc:
        return "partial" if exc.reason == "unexpected end of data" and exc.end == len(pending) else "invalid"
    return "complete"


def _escaped_forms(ch: str) -> list[bytes]:
    """How a character can be written after a backslash in a JSON string (short escape, ``uXXXX``)."""
    short = [bytes([k]) for k, v in _ESCAPES.items() if v == ch.encode("utf-8")]
    code = ord(ch)
    return short + ([f"u{code:04x}".encode(), f"u{code:04X}".encode()] if code <= 0xFFFF else [])


# ----------------------------------------------------------------------------------------------------------------
# tokens as bytes
# ----------------------------------------------------------------------------------------------------------------


def token_bytes(tokenizer) -> list[bytes | None]:
    """The bytes each token id stands for (None for special tokens): byte-level BPE (GPT-2, Llama 3) through its
    byte alphabet, SentencePiece through its ``▁`` space and ``<0xNN>`` byte pieces."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    decoder = {c: b for b, c in bytes_to_unicode().items()}
    special = set(tokenizer.all_special_ids) | {i for i in getattr(tokenizer, "added_tokens_decoder", {})}
    pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    byte_level = all(p is None or all(c in decoder for c in p) for i, p in enumerate(pieces) if i not in special)
    out: list[bytes | None] = []
    for i, piece in enumerate(pieces):
        if i in special or piece is None:
            out.append(None)
        elif byte_level:
            out.append(bytes(decoder[c] for c in piece))
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append(piece.replace("\u2581", " ").encode("utf-8"))
    return out


class TokenIndex:
    """Token bytes, the non-empty tokens grouped by their first byte, and the "plain" tokens (whole characters, no
    quote, backslash or control byte: always allowed inside a critique between characters)."""

    def __init__(self, tokenizer):
        self.bytes = token_bytes(tokenizer)
        self.by_first: dict[int, list[int]] = {}
        self.plain: list[int] = []
        self.special: list[int] = []
        for i, b in enumerate(self.bytes):
            if b:
                self.by_first.setdefault(b[0], []).append(i)
                is_plain = b'"' not in b and b"\\" not in b and min(b) >= 0x20 and _utf8(b) == "complete"
                (self.plain if is_plain else self.special).append(i)
        self.eos = tokenizer.eos_token_id

    def allowed(self, grounding: Grounding, state: State) -> list[int]:
        """Token ids whose bytes the automaton accepts from ``state`` (EOS alone at the end)."""
        if state.mode == "end":
            return [self.eos]
        if state.mode == "critique" and not state.esc and not state.partial:
            return self.plain + [i for i in self.special if grounding.walk(state, self.bytes[i]) is not None]
        firsts = grounding.next_bytes(state)
        candidates = (
            [i for b in firsts for i in self.by_first.get(b, ())]
            if firsts is not None
            else [i for ids in self.by_first.values() for i in ids]
        )
        return [i for i in candidates if grounding.walk(state, self.bytes[i]) is not None]


# ----------------------------------------------------------------------------------------------------------------
# the logits processor
# ----------------------------------------------------------------------------------------------------------------


class GroundedSpansProcessor:
    """A ``transformers`` logits processor: row b's next token must keep its output a grounded span JSON for
    ``responses[b]``. ``prompt_length`` is the (left-padded) input width, where generation starts."""

    def __init__(self, index: TokenIndex, responses: Sequence[str], prompt_length: int):
        self.index, self.prompt_length = index, prompt_length
        self.groundings = [Grounding(r) for r in responses]
        self.states: list[State | None] = [START] * len(responses)
        self.seen = [0] * len(responses)

    def __call__(self, input_ids, scores):
        import torch

        mask = torch.full_like(scores, float("-inf"))
        for b, grounding in enumerate(self.groundings):
            self._advance(b, input_ids[b, self.prompt_length :].tolist())
            state = self.states[b]
            if state is None:  # finished (EOS written) or off the grammar: leave the row alone
                mask[b] = 0.0
                continue
            allowed = self.index.allowed(grounding, state)
            mask[b, allowed or [self.index.eos]] = 0.0
        return scores + mask

    def _advance(self, b: int, generated: list[int]) -> None:
        for token in generated[self.seen[b] :]:
            state = self.states[b]
            if state is None:
                break
            data = self.index.bytes[token] if token < len(self.index.bytes) else None
            self.states[b] = None if data is None else self.groundings[b].walk(state, data)
        self.seen[b] = len(generated)
