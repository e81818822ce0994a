"""Read a demo summary in any wording: for each fact of the post, is its value present, absent, or replaced by a
foreign value of the same type?

Evidence, in this order:

1. **Clause cues.** The template's keyword before a value ("named", "lives in", "with N pets", "all", "colored",
   "works as a", "rests on", "enjoys eating") and their free-text inflections ("name is", "called", "live in",
   "living in", "work as", "rest on", "eat", "eats", "eating"). The word after a cue is that fact's claim whatever its
   type, so a value in the wrong clause ("lives in Monday") is a wrong city, not a day. The word must look like a value:
   any demo value or one of the post's facts, a capitalised word after a name or city cue ("lives in Springfield": an
   invented city), a number after the count cue; "lives in a small town" claims nothing. The first cue of a fact is
   its claim; later ones are repeats ("Also, rests on Sunday"), as in the template.
2. **Words.** Outside the cues, a word of a fact type's vocabulary is a mention of that type, with its inflections
   and a few paraphrases ("dog" / "dogs" / "puppies", "grey", "Sundays", "three"). Names, cities and days count only
   capitalised. Numbers and colours say something about the pets only next to a pet word ("three gray dogs",
   "3 pets", "fur is gray"), so "2 years" and "black beans" are no count and no colour.

A fact is **present** if its value is among its mentions, **foreign** if another value of its type is, **absent**
if it has none. A word that is a value of several types goes to the type whose post value it is, else the first.

On a template summary (every value in its clause, nothing else) only the template's cues fire, where the template
parser fires, so the reading equals :func:`t2g_core.demo.summarization.parse_summary` (tested on generated items):
every existing figure on template summaries stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from t2g_core.demo.summarization import SLOTS, TEMPLATE, VOCAB

NUMBER_WORDS = {
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
    "eleven": "11",
    "twelve": "12",
}
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
WINDOW = 3  # words either side of a count or colour word where a pet word must be
STOPWORDS = frozenset("a an the this that my his her their our your its some several many".split())

_WORD_RE = re.compile(r"[A-Za-z]+|\d+")
_VALUE = r"([^\s,.]+)"
# free-text inflections of the template's cues (the template's own cues come from TEMPLATE, exactly as parsed there)
_FREE_CUES = {
    "name": (r"\bname is ", r"\bcalled "),
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


def _read_cues(response: str, facts: dict[str, str], reading: FactReading) -> list[tuple[int, int]]:
    """Clause cues: claims and repeats per fact (first cue by position = the claim); returns the value ranges."""
    found: dict[str, list[tuple]] = {}  # slot -> (value start, free cue?, value end, match start, match end, value, ..)
    for slot, pattern, template in _cues():
        if slot not in facts:
            continue
        for m in pattern.finditer(response):
            value = m.group(1) if template else _cue_value(slot, m.group(1), facts)
            if value is None or (template and _cue_value(slot, value, facts) is None):
                continue
            word = m.group(1).strip("!?;:)(\"'").removesuffix("'s")
            also = m.group(0).startswith("Also, ")
            hit = (m.start(1), not template, m.start(1) + len(word), m.start(), m.end(), value, also)
            found.setdefault(slot, []).append(hit)  # sorted: by position, a template cue first on the same word
    taken = []
    for slot, hits in found.items():
        seen: set[int] = set()
        for start, free, end, match_start, match_end, value, also in sorted(hits):
            if start in seen:  # two cue patterns of one fact on the same word
                continue
            seen.add(start)
            taken.append((start, end))
            if slot not in reading.mentions and not also:
                reading.mentions[slot] = [Mention(slot, value, start, end, "cue" if free else "template")]
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
    """Mentions of each of ``facts`` in ``response`` (module docstring: the rules)."""
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
