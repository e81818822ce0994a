"""Grounding annotator: tie a human critique to the words of the response it quotes or names, offline, no model.

How it reads a critique and what it cannot ground: docs/annotation.md, "The grounding annotator".
"""

from __future__ import annotations

import re
from typing import Any

from t2g_core.spans import ParsedFeedback

NAME = "ground"  # its annotations' ``annotator``
MAX_CRITIQUE_CHARS = 10_000  # far longer than a person's critique of one response
NEGATIVE_CUES = frozenset(
    "wrong wrongly incorrect incorrectly not no isn't isnt aren't doesn't don't didn't never should shouldn't instead "
    "missing misses miss omits omitted omission forgets forgot forgotten invented invents made makes hallucinated "
    "hallucinates hallucination error errors mistake mistaken off bad poor inaccurate false repeats repeated repeat "
    "redundant twice again confuses confused swapped mixed except unsupported nowhere where".split()
)
NEGATORS = frozenset("no not nothing never without isn't isnt aren't wasn't doesn't don't didn't".split())
POSITIVE_CUES = frozenset(
    "correct correctly right good accurate accurately well nice great fine faithful true ok okay perfect exact "
    "exactly matches agree agrees".split()
)
REPEAT_CUES = frozenset("repeats repeated repeat redundant twice again duplicate duplicated".split())
COMMON = (
    frozenset(
        """a an the and or but also this that these those is are was were be been it its i me my we our you your he
        she him her his they them their who which what of in on at to for with by from as so very too just then there
        here yes do does did has have had will would can could summary post response answer text reply model bit part
        it's says said say states stated writes wrote mentions mentioned claims claimed calls called gives lists puts
        all every everything nothing some none looks look add about where come comes does mention""".split()
    )
    | NEGATIVE_CUES
    | POSITIVE_CUES
)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
# Linear in any critique: a match starts only at the start of a whitespace run or a word (the lookbehinds), a curly
# quote ends at the next opening one and a "where does X come from" name has at most 80 characters; else every
# character of a long run, word or unclosed quote scans the rest of it again (quadratic).
_CLAUSE = re.compile(
    r",?(?<!\s)\s+(?:but|whereas|while|although|though|however)\s+|;\s*|,\s+(?=(?:the|it|its|and)\b)", re.I
)
_WORD = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^“”]+)”|‘([^‘’]+)’|`([^`]+)`|(?:^|(?<=[\s(\[:]))'([^']+?)'(?=[\s.,;:!?)\]]|$)")
_PAREN = re.compile(r"\(([^()]+)\)")
_REPORTED = re.compile(
    r"\b(?:says|said|say|states|stated|writes|wrote|mentions|mentioned|claims|claimed|calls it|gives|lists|puts)"
    r"\s+(?:that\s+|the\s+|a\s+|an\s+|they\s+|it\s+|he\s+|she\s+)*([^\s,;:.!?]+(?:\s+[^\s,;:.!?]+){0,2})",
    re.I,
)
_WHERE_FROM = re.compile(r"\bwhere (?:does|did|do) (.{1,80}?) come from", re.I)
_VERDICT = re.compile(r"(?<![^\s,;:.!?()])([^\s,;:.!?()]+)\s+(?:is|are|was|were|isn't|aren't)\s+(?:not\s+)?\w+", re.I)


def polarity(clause: str) -> str | None:
    """``negative`` (a complaint word or a question mark), ``positive`` (praise words, or a complaint word right after
    a negator: "nothing missing", "no errors", "not wrong") or None (neither)."""
    words = [w.lower().replace("’", "'") for w in _WORD.findall(clause)]
    negated = {i for i in range(1, len(words)) if words[i - 1] in NEGATORS and words[i] in NEGATIVE_CUES}
    plain = {w for i, w in enumerate(words) if i not in negated and i + 1 not in negated}
    if plain & NEGATIVE_CUES or "?" in clause:
        return "negative"
    return "positive" if plain & POSITIVE_CUES or negated else None


def praise_only(critique: str) -> bool:
    """Whether every clause of ``critique`` praises ("Correct.", "Good, nothing missing."): it names nothing wrong."""
    read = clauses(critique)
    return bool(read) and all(label == "positive" for _, label in read)


def clauses(critique: str) -> list[tuple[str, str]]:
    """(clause, polarity) in reading order; a clause without a cue takes its sentence's neighbours' (see above)."""
    out: list[tuple[str, str]] = []
    for sentence in (s for s in _SENTENCE.split(critique) if s.strip()):
        parts = [p for p in _CLAUSE.split(sentence) if p and p.strip()]
        said = [polarity(p) for p in parts]
        for i, part in enumerate(parts):
            later = next((x for x in said[i:] if x), None)
            earlier = next((x for x in reversed(said[:i]) if x), None)
            out.append((part, said[i] or later or earlier or "negative"))
    return out


def named(clause: str) -> list[str]:
    """What the clause quotes or names (docs/annotation.md, "The grounding annotator"), most specific first; may
    hold non-response text. Quotes are kept as written; other names lose the common words at their edges ("they are
    a coach" -> "coach")."""
    quoted = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(clause)]
    found = _PAREN.findall(clause)
    if ":" in clause:  # the text after the last colon
        found.append(clause.rpartition(":")[2].strip())
    for m in _REPORTED.finditer(clause):
        words = m.group(1).split()
        found += [
            " ".join(words[i:j]) for n in range(len(words), 0, -1) for i in range(len(words) - n + 1) for j in [i + n]
        ]
    found += [m.group(1) for m in _VERDICT.finditer(clause)] + _WHERE_FROM.findall(clause)
    if len(_WORD.findall(clause)) <= 3:  # a clause that is only a name: "pasta?", "wrong colour: green"
        found.append(clause)
    for i, m in enumerate(_WORD.finditer(clause)):
        word = m.group()
        if word[0].isdigit() or (word[0].isupper() and word.lower() not in COMMON and (i > 0 or len(word) > 1)):
            found.append(word)
    trimmed = [_trim(f) for f in found]
    return list(dict.fromkeys([q.strip() for q in quoted if q.strip()] + [t for t in trimmed if t]))


def _trim(text: str) -> str:
    """``text`` without the common words (and punctuation) at its edges."""
    words = text.strip(" '\"?!.,").split()
    while words and words[0].lower().strip(",.") in COMMON:
        words.pop(0)
    while words and words[-1].lower().strip(",.") in COMMON:
        words.pop()
    return " ".join(words).strip(" '\"?!.,")


def _occurrences(response: str, text: str) -> list[tuple[int, int]]:
    """Whole-word, case-insensitive occurrences of ``text`` in ``response``."""
    pattern = r"(?<![A-Za-z0-9])" + re.escape(text) + r"(?![A-Za-z0-9])"
    return [(m.start(), m.end()) for m in re.finditer(pattern, response, re.I)]


def _unique(response: str, start: int, end: int) -> tuple[int, int]:
    """``(start, end)`` widened by whole words until its text occurs once in ``response`` (as a substring, which is
    how the alignment searches): the shorter of the leftward and the rightward widening, else both ways."""
    bounds = [(m.start(), m.end()) for m in re.finditer(r"\S+", response)]
    lefts = [start] + [s for s, _ in reversed(bounds) if s < start]
    rights = [end] + [e for _, e in bounds if e > end]
    options = [next(((a, end) for a in lefts if response.count(response[a:end]) == 1), None)]
    options.append(next(((start, b) for b in rights if response.count(response[start:b]) == 1), None))
    found = [o for o in options if o is not None]
    if found:
        return min(found, key=lambda o: o[1] - o[0])
    return next(
        ((a, b) for a, b in zip(lefts, rights, strict=False) if response.count(response[a:b]) == 1), (start, end)
    )


def _clause_around(response: str, start: int, end: int) -> tuple[int, int]:
    """The sentence or clause of ``response`` holding ``[start, end)``, without its closing punctuation."""
    a = max((m.end() for m in re.finditer(r"[.!?;]\s*", response[:start])), default=0)
    b = next((start + m.start() for m in re.finditer(r"[.!?;]", response[start:])), len(response))
    return a, max(b, end)


def ground(response: str, critique: str) -> tuple[list[str], list[str], list[str]]:
    """(good spans, poor spans, named but not in the response) of ``critique`` about ``response``."""
    spans: dict[tuple[int, int], str] = {}
    absent: list[str] = []
    for clause, label in clauses(critique):
        repeat = bool({w.lower() for w in _WORD.findall(clause)} & REPEAT_CUES)
        taken: list[tuple[int, int]] = []
        for text in named(clause):
            where = _occurrences(response, text)
            if not where:
                absent.append(text)
                continue
            start, end = where[-1] if repeat and len(where) > 1 else where[0]
            if any(a <= start and end <= b for a, b in taken):
                continue  # inside a longer name of the same clause
            taken.append((start, end))
            span = _clause_around(response, start, end) if repeat and len(where) > 1 else _unique(response, start, end)
            if spans.get(span) != "negative":
                spans[span] = label
    poor = [response[a:b] for (a, b), lab in sorted(spans.items()) if lab == "negative"]
    good = [response[a:b] for (a, b), lab in sorted(spans.items()) if lab == "positive"]
    good = [g for g in good if not any(g in p or p in g for p in poor)]  # poor wins on the same words
    found = " ".join(good + poor).lower()
    salient = [t for t in absent if re.search(r"[0-9A-Z]", t) and t.lower() not in found]
    return good, poor, list(dict.fromkeys(salient))


class GroundingCritic:
    """``critique(row) -> ParsedFeedback`` from the row's own human ``critique`` (the critic protocol of
    :class:`~t2g_core.annotators.CriticAnnotator`)."""

    def critique(self, row: dict[str, Any]) -> ParsedFeedback:
        critique = row.get("critique")
        if not isinstance(critique, str) or not critique.strip():
            return ParsedFeedback(
                None, status="missing_input", error=f"item {row.get('id')!r} has no critique to ground"
            )
        if len(critique) > MAX_CRITIQUE_CHARS:
            return ParsedFeedback(
                None,
                status="refused",
                error=f"item {row.get('id')!r}: its critique has {len(critique):,} characters, more than the grounding "
                f"annotator reads (MAX_CRITIQUE_CHARS, {MAX_CRITIQUE_CHARS:,})",
            )
        good, poor, absent = ground(row.get("response") or "", critique)
        note = f"named but not in the response: {', '.join(absent[:8])}" if absent else None
        return ParsedFeedback(critique.strip(), good, poor, note)
