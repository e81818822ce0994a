"""Reference critic for summarization and QA: compare the response with the reference answer (no model, fast).

What it marks and why (key facts, contradicted / invented / redundant clauses, omissions, word labels, the cost
bounds): docs/annotation.md, "Reference critic".
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from t2g_core.spans import ParsedFeedback

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?|[^\sA-Za-z0-9]")
_CLAUSE_END = {".", "!", "?", ";", ":"}
MAX_SPANS = 32  # quoted spans of each kind per item
MAX_NOTES = 12  # critique sentences about errors per item
STOPWORDS = frozenset(
    "a an the and or but also this that these those is are was were be been it its i me my we our you your he she "
    "him her his they them their who which what of in on at to for with by from as so very too just then there here "
    "not no yes do does did has have had will would can could i'm i've i'll i'd".split()
)


@dataclass(frozen=True)
class Tok:
    text: str
    start: int
    end: int

    @property
    def low(self) -> str:
        return self.text.lower()

    @property
    def content(self) -> bool:
        return self.text[0].isalnum() and self.low not in STOPWORDS


def tokenize(text: str) -> list[Tok]:
    return [Tok(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def _entities(toks: list[Tok]) -> list[Tok]:
    """Numbers, and capitalised words that do not start a sentence."""
    out = []
    for i, t in enumerate(toks):
        sentence_start = i == 0 or toks[i - 1].text in _CLAUSE_END
        if t.text[0].isdigit() or (t.text[0].isupper() and not sentence_start and t.low not in STOPWORDS):
            out.append(t)
    return out


def _meta(row: dict[str, Any]) -> dict[str, Any]:
    meta = row.get("meta")
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    return meta if isinstance(meta, dict) else {}  # None, or NaN from an all-null Parquet column: no meta


def _facts(meta: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in meta["facts"].items()} if isinstance(meta.get("facts"), dict) else {}


def key_facts(row: dict[str, Any], ref_toks: list[Tok]) -> dict[str, tuple[str, str]]:
    """lower-cased key word -> (slot, full value); every content word of a multi-word value maps to it."""
    meta = _meta(row)
    facts = _facts(meta)
    if meta.get("answer"):
        facts["answer"] = meta["answer"]
    keys: dict[str, tuple[str, str]] = {}
    for slot, value in facts.items():
        words = [t for t in tokenize(str(value)) if t.content] or tokenize(str(value))
        for t in words:
            keys.setdefault(t.low, (str(slot), str(value)))
    if keys:
        return keys
    question = (row.get("prompt") or "").lower() if row.get("task") == "qa" else ""
    return {t.low: ("", t.text) for t in _entities(ref_toks) if t.low not in question}  # no slot names without meta


def _describe(key: tuple[str, str]) -> str:
    slot, value = key
    return f"the {slot} ({value})" if slot else f"'{value}'"


@dataclass
class Findings:
    good: list[tuple[int, int]] = field(default_factory=list)  # char ranges in the response
    poor: list[tuple[int, int]] = field(default_factory=list)
    correct: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    omitted: list[str] = field(default_factory=list)
    omitted_at: list[int] = field(default_factory=list)  # char offset where each omitted fact belonged
    supported: list[tuple[int, int]] = field(default_factory=list)  # response token ranges matching the reference


def _pieces(toks: list[Tok]) -> list[list[Tok]]:
    """Split a run of tokens into clauses at sentence punctuation; keep only pieces with content words."""
    out, cur = [], []
    for t in toks:
        if t.text in _CLAUSE_END:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    out.append(cur)
    return [p for p in out if any(t.content for t in p)]


def _trim(piece: list[Tok]) -> list[Tok]:
    """Drop leading/trailing stopwords and punctuation."""
    idx = [i for i, t in enumerate(piece) if t.content]
    return piece[idx[0] : idx[-1] + 1]


class ReferenceCritic:
    """``critique(row) -> ParsedFeedback`` for summarization / QA rows with a ``reference``."""

    def critique(self, row: dict[str, Any]) -> ParsedFeedback:
        response, reference = row.get("response") or "", row.get("reference")
        reference = reference if isinstance(reference, str) else ""  # None, or NaN from a Parquet null
        if not reference.strip():
            return ParsedFeedback(
                None, status="missing_input", error=f"item {row.get('id')!r} has no reference to compare with"
            )
        ref, resp = tokenize(reference), tokenize(response)
        keys = key_facts(row, ref)
        source = {t.low for t in tokenize((row.get("prompt") or "") + " " + reference)}
        reading = fact_reading(row, response)  # read once: it also decides how the response is compared
        if reading is None or template_like(reading, response):
            found = self._compare(ref, resp, keys, source, response)
            reading = reading if reading is not None and misread_template(reading, found) else None
        if reading is not None:
            found = _read_facts_findings(reading, resp, source, response)
        bounds = ([t.start for t in resp], [t.end for t in resp])
        poor_ranges = [r for r in (_unique_range(response, bounds, s, e) for s, e in found.poor[:MAX_SPANS]) if r]
        good_ranges = [r for r in (_unique_range(response, bounds, s, e) for s, e in found.good[:MAX_SPANS]) if r]
        good_ranges = [g for g in good_ranges if not any(g[0] < p[1] and p[0] < g[1] for p in poor_ranges)]
        good, poor = (_dedupe([response[a:b] for a, b in rs]) for rs in (good_ranges, poor_ranges))
        first_at = dict(zip(reversed(found.omitted), reversed(found.omitted_at), strict=True))  # first mention
        missing = tuple(dict.fromkeys(found.omitted))  # each left-out key fact, for omission-aware rewards
        return ParsedFeedback(
            self._text(row, found),
            good,
            poor,
            missing=missing,
            missing_at=tuple(first_at[m] for m in missing),
            word_scores=_word_scores(resp, found),
        )

    def critique_batch(self, rows: list[dict[str, Any]]) -> list[ParsedFeedback]:
        """The reward-source protocol (PPO's oracle): one ParsedFeedback per row, in order."""
        return [self.critique(row) for row in rows]

    def _compare(
        self, ref: list[Tok], resp: list[Tok], keys: dict[str, tuple[str, str]], source: set[str], text: str
    ) -> Findings:
        found, said = Findings(), set()  # said: content words of the response so far (grows as it is read)
        sm = SequenceMatcher(None, [t.low for t in ref], [t.low for t in resp], autojunk=False)
        opcodes = sm.get_opcodes()
        matched = {t.low for tag, _, _, j1, j2 in opcodes if tag == "equal" for t in resp[j1:j2] if t.content}
        for tag, i1, i2, j1, j2 in opcodes:
            if tag == "equal":
                self._correct(ref[i1:i2], resp[j1:j2], keys, found)
                said.update(t.low for t in resp[j1:j2] if t.content)
                found.supported.append((j1, j2))
                continue
            expected = list(dict.fromkeys(keys[t.low] for t in ref[i1:i2] if t.low in keys))
            pieces = _pieces(resp[j1:j2])
            expected = self._judge_pieces(pieces, expected, said, matched, keys, source, found, text)
            found.omitted += [_describe(k) for k in expected]
            found.omitted_at += [resp[j2].start if j2 < len(resp) else len(text)] * len(expected)
        return found

    @staticmethod
    def _correct(ref: list[Tok], resp: list[Tok], keys: dict[str, tuple[str, str]], found: Findings) -> None:
        """Key words inside a matching block: good spans, adjacent words of one value merged into one span."""
        last = None
        for t, r in zip(ref, resp, strict=True):
            key = keys.get(t.low)
            if key is None:
                last = None
                continue
            if key == last:
                found.good[-1] = (found.good[-1][0], r.end)
            else:
                found.good.append((r.start, r.end))
                found.correct.append(_describe(key))
            last = key

    def _judge_pieces(self, pieces, expected, said, matched, keys, source, found, text) -> list[tuple[str, str]]:  # noqa: PLR0913
        """Poor spans for the response pieces of one non-matching block; returns the expected facts left unsaid.
        ``matched`` holds every matching passage's words, so a value repeated *before* its matching mention is
        redundant."""
        for piece in pieces:
            core = _trim(piece)
            text_lows = [t.low for t in core if t.content]
            span = (core[0].start, core[-1].end)
            quote = text[span[0] : span[1]]
            if expected and not set(text_lows) <= said | STOPWORDS:
                slot, value = expected.pop(0)
                found.poor.append(span)
                found.notes.append(f"It says '{quote}' where {{src}} says '{value}'" + (f" ({slot})." if slot else "."))
            elif set(text_lows) <= said | matched:
                found.poor.append((piece[0].start, piece[-1].end))
                found.notes.append(f"It repeats itself: '{text[piece[0].start : piece[-1].end]}'.")
            else:
                invented = [t for t in _entities(core) + [t for t in core if t.low in keys] if t.low not in source]
                for t in dict.fromkeys(invented):
                    found.poor.append((t.start, t.end))
                    found.notes.append(f"It mentions '{t.text}', which {{src}} does not.")
            said.update(text_lows)
        return expected

    @staticmethod
    def _text(row: dict[str, Any], found: Findings) -> str:
        src = "the reference answer" if row.get("task") == "qa" else "the post"
        parts = [n.replace("{src}", src) for n in found.notes[:MAX_NOTES]]
        if len(found.notes) > MAX_NOTES:
            parts.append(f"And {len(found.notes) - MAX_NOTES} more such problems.")
        if found.omitted:
            parts.append(f"It leaves out {_join(found.omitted)}.")
        if found.correct:
            parts.insert(0, f"It correctly reports {_join(list(dict.fromkeys(found.correct)))}.")
        if not found.notes and not found.omitted:
            parts.append("It is accurate and complete with respect to " + src + ".")
        return " ".join(parts)


# --------------------------------------------------------------------------------------------- free text
def fact_reading(row: dict[str, Any], response: str):
    """:func:`t2g_core.demo.facts.read_facts` of ``response`` against the item's ``meta.facts``; None without facts
    or without the demo's vocabularies (clause-by-clause comparison only)."""
    facts = _facts(_meta(row))
    if not facts:
        return None
    try:
        from t2g_core.demo.facts import read_facts
    except ImportError:  # the demo's vocabularies are not installed
        return None
    return read_facts(response, facts)


def template_like(reading, response: str) -> bool:
    """A response that opens like the template, or whose every stated value sits in a template clause, is compared
    with the reference clause by clause; any other is read fact by fact."""
    from t2g_core.demo.summarization import OPENING

    return response.lstrip().startswith(OPENING) or bool(reading.template_only and reading.mentions)


def misread_template(reading, found: Findings) -> bool:
    """Whether the clause-by-clause comparison reports a fact left out whose value the response states (and no other
    value of it): then the fact reading is used instead. The comparison follows the reference's order, so a response
    that opens like the template but reorders or rewords its clauses reads as leaving out facts it states."""
    stated = {_describe((slot, value)) for slot, value in reading.facts.items() if reading.status(slot) == "present"}
    return bool(stated & set(found.omitted))


def _read_facts_findings(reading, resp: list[Tok], source: set[str], text: str) -> Findings:
    """Findings from a fact reading: the post's values are good spans, foreign values and repeated clauses poor
    (with a note naming the post's value), facts never mentioned are missing (at the end of the response, where
    they were never said), and numbers or capitalised names found nowhere in the source are invented."""
    found, notes = Findings(), []  # notes: (char offset, sentence), sorted into reading order
    covered: list[tuple[int, int]] = []
    for slot, value in reading.facts.items():
        said = reading.stated(slot)
        if not said:
            found.omitted.append(_describe((slot, value)))
            found.omitted_at.append(len(text))
        for m in said:
            covered.append((m.start, m.end))
            if reading.correct(m):
                found.good.append((m.start, m.end))
                found.correct.append(_describe((slot, value)))
            else:
                found.poor.append((m.start, m.end))
                notes.append((m.start, f"It says '{text[m.start : m.end]}' where {{src}} says '{value}' ({slot})."))
    for _, start, end in reading.repeats:
        covered.append((start, end))
        found.poor.append((start, end))
        notes.append((start, f"It repeats itself: '{text[start:end]}'."))
    for t in dict.fromkeys(_entities(resp)):
        if t.low not in source and not any(a <= t.start < b for a, b in covered):
            found.poor.append((t.start, t.end))
            notes.append((t.start, f"It mentions '{t.text}', which {{src}} does not."))
    found.poor.sort()
    found.notes = [n for _, n in sorted(notes, key=lambda x: x[0])]
    starts = [t.start for t in resp]
    found.supported = [(bisect.bisect_left(starts, a), bisect.bisect_left(starts, b)) for a, b in sorted(found.good)]
    return found


def _word_scores(resp: list[Tok], found: Findings) -> tuple[tuple[str, float], ...]:
    """+1 / -1 / 0 per response word (docs/annotation.md); linear in the response plus the poor spans."""
    status = [0.0] * len(resp)
    for j1, j2 in found.supported:
        status[j1:j2] = [1.0] * (j2 - j1)
    starts, ends = [t.start for t in resp], [t.end for t in resp]
    for a, b in found.poor:  # tokens overlapping a poor range
        for j in range(bisect.bisect_right(ends, a), bisect.bisect_left(starts, b)):
            status[j] = -1.0
    return tuple((t.text, status[j]) for j, t in enumerate(resp) if t.text[0].isalnum())


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _dedupe(items: list[str | None]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _unique_range(text: str, bounds: tuple[list[int], list[int]], start: int, end: int) -> tuple[int, int] | None:
    """``(start, end)`` widened by the fewest whole tokens that make ``text[start:end]`` occur once in ``text``:
    leftward first (context before a value reads naturally), else rightward, else both. Uniqueness only grows with
    widening, so the fewest is found by doubling then bisecting: a logarithmic number of searches, each linear."""
    if start >= end:
        return None
    if _once(text, start, end):
        return start, end
    starts, ends = bounds  # of the text's tokens
    first, last = bisect.bisect_left(starts, start), bisect.bisect_left(ends, end)
    widenings = (
        (first, lambda w: (starts[first - w], end)),  # w tokens to the left
        (len(ends) - 1 - last, lambda w: (start, ends[last + w])),  # w tokens to the right
        (
            max(first, len(ends) - 1 - last),  # both ways, up to the whole text (which occurs once)
            lambda w: (starts[max(0, first - w)], ends[min(len(ends) - 1, last + w)]),
        ),
    )
    for most, span in widenings:
        width = _fewest(text, most, span)
        if width is not None:
            return span(width)
    return start, end


def _fewest(text: str, most: int, span) -> int | None:
    """The smallest ``w`` in 1..most with ``span(w)`` unique in ``text``, or None."""
    if most < 1 or not _once(text, *span(most)):
        return None
    lo, hi = 0, 1  # span(lo) is not unique (or lo == 0); find hi with span(hi) unique
    while hi < most and not _once(text, *span(hi)):
        lo, hi = hi, min(most, hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _once(text, *span(mid)) else (mid, hi)
    return hi


def _once(text: str, start: int, end: int) -> bool:
    """``text[start:end]`` occurs exactly once in ``text`` (two searches, no count of every occurrence)."""
    piece = text[start:end]
    first = text.find(piece)
    return text.find(piece, first + 1) == -1
