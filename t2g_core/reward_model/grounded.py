"""Grounded decoding: while the generative reward model writes a quoted span, it may only choose tokens that keep the
quote a substring of the response, inside a valid list structure, so every quote it writes matches by construction.

The automaton and its cost: docs/reward_model.md, "The grounded-decoding automaton".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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
    done: tuple[str, ...] = ()  # the quotes written so far, stripped (as the aligner searches them)


START = State("lit", lit=OPEN, then="critique")


def _literal(s: State, text: bytes, then: str, which: str, pos: int = 0) -> State:
    return replace(s, mode="lit", which=which, lit=text, pos=pos, then=then, content=b"", esc=b"", partial=b"")


def _close_list(s: State) -> State:
    return _literal(s, BETWEEN_LISTS, "list", "poor") if s.which == "good" else _literal(s, CLOSE, "end", "poor")


def _escape(esc: bytes) -> tuple[bool, bytes | None]:
    """(still valid, decoded bytes once complete) of a pending escape such as ``\\n`` or ``\\u00e9``."""
    if len(esc) < 2:
        return True, None
    kind = esc[1]
    if kind in _ESCAPES:
        return True, _ESCAPES[kind]
    if kind != ord("u") or not all(c in _HEX for c in esc[2:]):
        return False, None
    if len(esc) >= 4 and esc[2] in b"dD" and esc[3] in b"89abcdefABCDEF":
        return False, None  # a surrogate (refused below): refused at its second digit, before it is a dead end
    if len(esc) < 6:
        return True, None
    code = int(esc[2:6], 16)
    if 0xD800 <= code <= 0xDFFF:  # surrogates: a quote writes such a character as raw UTF-8 instead
        return False, None
    return True, chr(code).encode("utf-8")


class Grounding:
    """The automaton for one response: ``step(state, byte)`` is the next state, or None when the byte is not allowed.

    A quote may close only where the aligner can place it (whole characters, not blank, an occurrence not claimed by an
    earlier quote); states from which no closable quote is reachable are refused too (:meth:`viable`): no dead ends."""

    def __init__(self, response: str):
        self.text, self.response = response, response.encode("utf-8")
        self.allowed_cache: dict = {}  # TokenIndex.allowed's answers for this response, per state
        self.next_cache: dict[bytes, set[str]] = {}

    def step(self, s: State, b: int) -> State | None:  # noqa: PLR0911 (one return per transition)
        if s.mode == "lit":
            if b != s.lit[s.pos]:
                return None
            if s.pos + 1 < len(s.lit):
                return replace(s, pos=s.pos + 1)
            return replace(s, mode=s.then, lit=b"", pos=0, then="")
        if s.mode == "critique":
            return self._critique(s, b)
        if s.mode == "list":
            if b == ord('"') and self.response:
                return replace(s, mode="quote", content=b"")
            return _close_list(s) if b == ord("]") else None
        if s.mode == "quote":
            return self._quote(s, b)
        if s.mode == "after":
            if b == ord(","):
                return _literal(s, NEXT_QUOTE, "quote", s.which, pos=1)
            return _close_list(s) if b == ord("]") else None
        return None  # end: only EOS

    def _critique(self, s: State, b: int) -> State | None:
        if s.esc:
            ok, decoded = _escape(s.esc + bytes([b]))
            if not ok:
                return None
            return replace(s, esc=b"" if decoded is not None else s.esc + bytes([b]))
        if s.partial or b >= 0x80:  # raw UTF-8: only whole, valid characters
            status = _utf8(s.partial + bytes([b]))
            if status == "invalid":
                return None
            return replace(s, partial=s.partial + bytes([b]) if status == "partial" else b"")
        if b == ord("\\"):
            return replace(s, esc=b"\\")
        if b == ord('"'):
            return _literal(s, AFTER_CRITIQUE, "list", "good")
        return None if b < 0x20 else s

    def _quote(self, s: State, b: int) -> State | None:
        if s.esc:
            esc = s.esc + bytes([b])
            ok, decoded = _escape(esc)
            if not ok:
                return None
            if decoded is not None:
                return self._extend(replace(s, esc=b""), decoded)
            return replace(s, esc=esc) if self._can_finish(s, esc) else None
        if b == ord("\\"):
            return replace(s, esc=b"\\") if self._can_finish(s, b"\\") else None
        if b == ord('"'):
            quote = self._closable(s.content, s.done)
            return None if quote is None else replace(s, mode="after", content=b"", done=(*s.done, quote))
        return None if b < 0x20 else self._extend(s, bytes([b]))

    def _extend(self, s: State, more: bytes) -> State | None:
        content = s.content + more
        if not s.content and 0x80 <= content[0] < 0xC0:  # a quote starts on a character, not inside one
            return None
        return replace(s, content=content) if content in self.response else None

    def _closable(self, content: bytes, done: tuple[str, ...]) -> str | None:
        """The quote as the aligner will search it, when it can close here (see the class docstring), else None."""
        if not content or _utf8(content) != "complete":
            return None
        quote = content.decode("utf-8").strip()
        if not quote:
            return None
        n = sum(1 for _ in _find_all(self.text, quote))
        return quote if n > done.count(quote) else None

    def viable(self, s: State) -> bool:
        """Whether a closable quote can still be reached from ``s`` (always, outside a quote and its opening)."""
        if s.mode == "lit" and s.then == "quote":  # `, "` is being written: the next quote must be possible
            return self.quote_viable(b"", s.done)
        if s.mode != "quote":
            return True
        if s.esc:
            return self._can_finish(s, s.esc)
        return self.quote_viable(s.content, s.done)

    def quote_viable(self, content: bytes, done: tuple[str, ...]) -> bool:
        """Whether a quote holding ``content`` so far can still close (given the quotes ``done`` before it)."""
        if content and self._closable(content, done) is not None:  # it could close right here (the usual case)
            return True
        starts = (  # where the quote may be in the response: after each occurrence of what it holds so far
            (i for i in range(len(self.response)) if not 0x80 <= self.response[i] < 0xC0)
            if not content
            else _find_all(self.response, content)
        )
        for i in starts:
            for j in range(i + max(len(content), 1), len(self.response) + 1):
                if self._closable(self.response[i:j], done) is not None:
                    return True
        return False

    def _next_characters(self, content: bytes) -> set[str]:
        """The characters that follow an occurrence of ``content`` (at a character boundary) in the response."""
        if content not in self.next_cache:
            out = self.next_cache[content] = set()
            for i in _find_all(self.response, content):
                rest = self.response[i + len(content) : i + len(content) + 4]
                for n in range(1, len(rest) + 1):
                    if _utf8(rest[:n]) == "complete":
                        out.add(rest[:n].decode("utf-8"))
                        break
        return self.next_cache[content]

    def _can_finish(self, s: State, esc: bytes) -> bool:
        """Whether the pending escape ``esc`` can complete into a character that continues the quote viably."""
        tail = esc[1:].lower()
        return any(
            any(f.lower().startswith(tail) for f in _escaped_forms(ch))
            and self.viable(replace(s, content=s.content + ch.encode("utf-8"), esc=b""))
            for ch in self._next_characters(s.content)
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
        out = {ord('"'), ord("\\")}
        for i in _find_all(self.response, s.content):
            if i + len(s.content) < len(self.response):
                out.add(self.response[i + len(s.content)])
        return out

    def walk(self, s: State, data: bytes) -> State | None:
        for b in data:
            s = self.step(s, b)
            if s is None:
                return None
        return s


def _find_all(haystack: bytes | str, needle: bytes | str):
    i = haystack.find(needle)
    while i != -1:
        yield i
        i = haystack.find(needle, i + 1)


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


# --- tokens as bytes


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
        self.simple: set[int] = set()  # no quote, backslash or control byte: inside a quote, only its bytes matter
        for i, b in enumerate(self.bytes):
            if b:
                self.by_first.setdefault(b[0], []).append(i)
                simple = b'"' not in b and b"\\" not in b and min(b) >= 0x20
                (self.plain if simple and _utf8(b) == "complete" else self.special).append(i)
                if simple:
                    self.simple.add(i)
        self.eos = tokenizer.eos_token_id

    def allowed(self, grounding: Grounding, state: State) -> list[int]:
        """Token ids whose bytes the automaton accepts from ``state`` (EOS alone at the end); remembered per state
        (a critique is one state however long it grows)."""
        if state not in grounding.allowed_cache:
            grounding.allowed_cache[state] = self._allowed(grounding, state)
        return grounding.allowed_cache[state]

    def _allowed(self, grounding: Grounding, state: State) -> list[int]:
        if state.mode == "end":
            return [self.eos]
        if state.mode == "critique" and not state.esc and not state.partial:
            special = ((i, grounding.walk(state, self.bytes[i])) for i in self.special)
            return self.plain + [i for i, nxt in special if nxt is not None and grounding.viable(nxt)]
        firsts = grounding.next_bytes(state)
        candidates = (
            [i for b in firsts for i in self.by_first.get(b, ())]
            if firsts is not None
            else [i for ids in self.by_first.values() for i in ids]
        )
        if state.mode == "quote" and not state.esc:  # a plain token extends the quote: one substring test
            return [i for i in candidates if self._extends(grounding, state, i)]
        if state.mode == "lit":  # only tokens that agree with the forced bytes are worth walking
            rest = state.lit[state.pos :]
            candidates = [i for i in candidates if self.bytes[i][: len(rest)] == rest[: len(self.bytes[i])]]
        after = ((i, grounding.walk(state, self.bytes[i])) for i in candidates)
        return [i for i, nxt in after if nxt is not None and grounding.viable(nxt)]

    def _extends(self, grounding: Grounding, state: State, token: int) -> bool:
        if token not in self.simple:
            nxt = grounding.walk(state, self.bytes[token])
            return nxt is not None and grounding.viable(nxt)
        content = state.content + self.bytes[token]  # what _extend checks, without building the next state
        if not state.content and 0x80 <= content[0] < 0xC0 or content not in grounding.response:
            return False
        return grounding.quote_viable(content, state.done)


# --- the logits processor


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
            mask[b, self._allowed_ids(grounding, state)] = 0.0
        return scores + mask

    def _allowed_ids(self, grounding: Grounding, state: State):
        import torch

        key = ("ids", state)
        if key not in grounding.allowed_cache:
            allowed = self.index.allowed(grounding, state) or [self.index.eos]
            grounding.allowed_cache[key] = torch.tensor(allowed, dtype=torch.long)
        return grounding.allowed_cache[key]

    def _advance(self, b: int, generated: list[int]) -> None:
        for token in generated[self.seen[b] :]:
            state = self.states[b]
            if state is None:
                break
            data = self.index.bytes[token] if token < len(self.index.bytes) else None
            self.states[b] = None if data is None else self.groundings[b].walk(state, data)
        self.seen[b] = len(generated)
