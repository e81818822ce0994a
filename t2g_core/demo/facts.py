"""Read a demo summary in any wording: for each fact of the post, is its value present, absent, or replaced by a
foreign value of the same type? The rules (clause cues first, then vocabulary words; what counts as a value, a repeat,
a mention of several types): docs/real-model.md, "Task metrics and the reference critic on free text". On a template
summary only the template's cues fire, so the reading equals :func:`t2g_core.demo.summarization.parse_summary`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from t2g_core.demo.slots import SLOTS, TEMPLATE, VOCAB

_NUMBERS = "one two three four five six seven eight nine ten eleven twelve".split()
NUMBER_WORDS = {w: str(n) for n, w in enumerate(_NUMBERS, 1)} | {"pair": "2"}
# extra surface forms per value (plural / singular forms are added by rule)
PARAPHRASES = {
    "dogs": ("puppy", "puppies"),
    "cats": ("kitten", "kittens", "kitty"),
    "rabbits": ("bunny", "bunnies"),
    "mice": ("mouse",),
    "gray": ("grey",),
    "curry": ("curries",),
    "coach": ("coaches",),
}
PROPER = frozenset({"name", "city", "day"})  # counted only when capitalised
NEAR_PETS = frozenset({"count", "color"})  # counted only next to a pet word
PET_CONTEXT = frozenset({"pets", "pet", "animals", "animal", "colored", "coloured", "color", "colour", "fur", "coat"})
WINDOW = 4  # words either side of a count or colour word where a pet word must be
STOPWORDS = frozenset("a an the this that my his her their our your its some several many".split())

_WORD_RE = re.compile(r"[A-Za-z]+|\d+")
_NEXT_WORD = re.compile(r" ([A-Za-z]+)\b")
_VALUE = r"([^\s,.]+)"
# free-text inflections of the template's cues (the template's own cues come from TEMPLATE, exactly as parsed there)
_FREE_CUES = {
    "name": (r"\bname is ",),
    "city": (r"\blive in ", r"\bliving in "),
    "job": (r"\bworks? as an? ", r"\bworking as an? "),
    "day": (r"\brest on ", r"\bresting on "),
    "food": (r"\beats? ", r"(?<!enjoys )\beating "),
}


@dataclass(frozen=True)
class Mention:
    slot: str
    value: str  # canonical: the vocabulary's spelling ("dogs" for "puppy", "3" for "three")
    start: int  # char offsets of the value word in the response
    end: int
    via: str  # "template" (a template clause), "cue" (a free-text cue) or "word" (a vocabulary word)


@dataclass
class FactReading:
    """All mentions per fact, in text order; ``repeats`` are later clause cues of a fact ``(slot, start, end)``."""

    facts: dict[str, str]
    mentions: dict[str, list[Mention]] = field(default_factory=dict)
    repeats: list[tuple[str, int, int]] = field(default_factory=list)

    def stated(self, slot: str) -> list[Mention]:
        return self.mentions.get(slot, [])

    def correct(self, mention: Mention) -> bool:
        return same(mention.value, self.facts[mention.slot])

    def status(self, slot: str) -> str:
        """``present`` (only the post's value), ``foreign`` (another value of the type, the post's or not),
        ``absent`` (nothing)."""
        said = self.stated(slot)
        if not said:
            return "absent"
        return "present" if all(self.correct(m) for m in said) else "foreign"

    def found(self, slot: str) -> bool:
        """The post's value is stated (foreign values may be stated too)."""
        return any(self.correct(m) for m in self.stated(slot))

    @property
    def template_only(self) -> bool:
        """Every value stated sits in a template clause, as in a template summary (true when none is stated)."""
        return all(m.via == "template" for ms in self.mentions.values() for m in ms)


def same(a: str, b: str) -> bool:
    return canonical_value(a).casefold() == canonical_value(b).casefold()


def canonical_value(text: str) -> str:
    """A surface form's canonical value ("three" -> "3", "puppies" -> "dogs"); unknown text unchanged."""
    word = text.strip()
    entries = _lexicon().get(word.casefold())
    return entries[0][1] if entries else word


# --------------------------------------------------------------------------------------------- lexicon
INFLECTED = frozenset({"pet", "job", "day", "food"})  # nouns that take a plural or singular form


def _forms(slot: str, value: str) -> set[str]:
    """Surface forms of a vocabulary value: itself, its singular or plural (common nouns and days), its
    paraphrases."""
    low = value.casefold()
    forms = {low, *PARAPHRASES.get(low, ())}
    if slot not in INFLECTED:
        return forms
    if low.endswith("es") and low[:-2].endswith(("ch", "sh", "ss", "x")):
        forms.add(low[:-2])
    elif low.endswith("s") and not low.endswith("ss"):
        forms.add(low[:-1])
    else:
        forms.add(low + ("es" if low.endswith(("ch", "sh", "ss", "x")) else "s"))
    return forms


@lru_cache(maxsize=1)
def _lexicon() -> dict[str, tuple[tuple[str, str], ...]]:
    """lower-case surface form -> ((slot, canonical value), ...)."""
    table: dict[str, list[tuple[str, str]]] = {}
    for slot in SLOTS:
        for value in VOCAB[slot]:
            for form in _forms(slot, value):
                table.setdefault(form, []).append((slot, value))
    for word, digit in NUMBER_WORDS.items():
        table.setdefault(word, []).append(("count", digit))
    for n in range(1, 13):
        table.setdefault(str(n), []).append(("count", str(n)))
    return {form: tuple(entries) for form, entries in table.items()}


@lru_cache(maxsize=1)
def _pet_words() -> frozenset[str]:
    return frozenset(f for f, entries in _lexicon().items() if any(s == "pet" for s, _ in entries)) | PET_CONTEXT


@lru_cache(maxsize=1)
def _cues() -> tuple[tuple[str, re.Pattern, bool], ...]:
    """(slot, pattern with the value as group 1, is-template-cue), template cues first."""
    out = []
    for slot, before, after in TEMPLATE:  # the template parser's own patterns (parse_summary)
        cue = before.lstrip(", ").removeprefix("and ")
        out.append((slot, re.compile(r"(?:\bAlso, )?\b" + re.escape(cue) + _VALUE + re.escape(after)), True))
    for slot, patterns in _FREE_CUES.items():
        out += [(slot, re.compile(p + r"(?:the |a |an )?" + _VALUE), False) for p in patterns]
    return tuple(out)


# --------------------------------------------------------------------------------------------- reading
def _cue_value(slot: str, word: str, facts: dict[str, str]) -> str | None:
    """The canonical value a cue's word claims for ``slot``, or None when the word is no value."""
    word = word.strip("!?;:)(\"'").removesuffix("'s")
    low = word.casefold()
    if not word or low in STOPWORDS:
        return None
    if low in _lexicon() or any(same(word, v) for v in facts.values()):
        return canonical_value(word) if slot == "count" else word
    if slot in ("name", "city") and word[0].isupper():
        return word
    return None


def _noun_after(response: str, slot: str, end: int) -> re.Match | None:
    """The word right after a cue's word when it is a value of the cue's type: the cue's word was an adjective
    ("enjoys eating white bread" claims bread). In the template a value is followed by punctuation or a keyword."""
    m = _NEXT_WORD.match(response, end)
    return m if m and any(s == slot for s, _ in _lexicon().get(m.group(1).casefold(), ())) else None


def _cue_hits(response: str, facts: dict[str, str]) -> dict[str, list[tuple]]:
    """slot -> [(value start, free cue?, value end, match start, match end, value, after "Also, "?)]."""
    found: dict[str, list[tuple]] = {}
    for slot, pattern, template in _cues():
        if slot not in facts:
            continue
        for m in pattern.finditer(response):
            value = m.group(1) if template else _cue_value(slot, m.group(1), facts)
            if value is None or (template and _cue_value(slot, value, facts) is None):
                continue
            start, word = m.start(1), m.group(1).strip("!?;:)(\"'").removesuffix("'s")
            noun = _noun_after(response, slot, start + len(word))
            if noun is not None:
                start, word, value = noun.start(1), noun.group(1), canonical_value(noun.group(1))
            hit = (start, not template, start + len(word), m.start(), max(m.end(), start + len(word)), value)
            found.setdefault(slot, []).append((*hit, m.group(0).startswith("Also, ")))
    return found


def _read_cues(response: str, facts: dict[str, str], reading: FactReading) -> list[tuple[int, int]]:
    """Clause cues per fact, by position (a template cue first on the same word): the first is the claim, a later
    one with another value a further mention (it contradicts the claim), one with the same value or after "Also, "
    a repeat. Returns the char ranges the cues cover, which the word reading skips."""
    taken = []
    for slot, hits in _cue_hits(response, facts).items():
        seen: set[int] = set()
        for start, free, end, match_start, match_end, value, also in sorted(hits):
            if start in seen:  # two cue patterns of one fact on the same word
                continue
            seen.add(start)
            taken.append((match_start, match_end))
            claim = reading.mentions.get(slot)
            mention = Mention(slot, value, start, end, "cue" if free else "template")
            if claim is None and not also:
                reading.mentions[slot] = [mention]
            elif claim is not None and not also and not same(value, claim[0].value):
                claim.append(mention)
            else:
                reading.repeats.append((slot, match_start, match_end))
    return taken


def _about_pets(words: list[tuple[str, int, int]], i: int) -> bool:
    """A pet word within ``WINDOW`` words of word ``i``, and ``i`` does not qualify the next word's other noun
    ("black beans", "two coaches")."""
    nxt = _lexicon().get(words[i + 1][0].casefold(), ()) if i + 1 < len(words) else ()
    if any(s not in ("pet", "count", "color") for s, _ in nxt):
        return False
    pets = _pet_words()
    lo, hi = max(0, i - WINDOW), min(len(words), i + WINDOW + 1)
    return any(words[j][0].casefold() in pets for j in range(lo, hi) if j != i)


def _attribute(word: str, facts: dict[str, str]) -> tuple[str, str] | None:
    entries = [(s, v) for s, v in _lexicon().get(word.casefold(), ()) if s in facts]
    entries += [(s, v) for s, v in facts.items() if word.casefold() == v.casefold() and (s, v) not in entries]
    if not entries:
        return None
    return next(((s, v) for s, v in entries if same(v, facts[s])), entries[0])


def read_facts(response: str, facts: dict[str, str]) -> FactReading:
    """Mentions of each of ``facts`` in ``response`` (docs/real-model.md: the rules)."""
    reading = FactReading(dict(facts))
    taken = _read_cues(response, facts, reading)
    words = [(m.group(), m.start(), m.end()) for m in _WORD_RE.finditer(response)]
    for i, (word, start, end) in enumerate(words):
        if any(a <= start < b for a, b in taken):
            continue
        hit = _attribute(word, facts)
        if hit is None:
            continue
        slot, value = hit
        if (slot in PROPER and not word[0].isupper()) or (slot in NEAR_PETS and not _about_pets(words, i)):
            continue
        reading.mentions.setdefault(slot, []).append(Mention(slot, value, start, end, "word"))
    for slot in reading.mentions:
        reading.mentions[slot].sort(key=lambda m: m.start)
    return reading
