"""A small built-in QA set: questions, one-sentence reference answers and responses with a wrong entity or number.

Each question has an answer sentence with one slot, the right value and same-type distractors; a flawed response puts
a distractor in the slot. The value's character span is the ground truth (positive when right, negative when wrong).
"""

from __future__ import annotations

import random

# a question, then: its answer sentence with {} for the value | the right value | same-type distractors
# (the kind: "number" when the value is digits, else "entity")
_TABLE = """
What is the capital of France?
    The capital of France is {}. | Paris | Lyon, Berlin, Madrid
What is the capital of Japan?
    The capital of Japan is {}. | Tokyo | Kyoto, Osaka, Seoul
What is the capital of Italy?
    The capital of Italy is {}. | Rome | Milan, Naples, Paris
What is the capital of Canada?
    The capital of Canada is {}. | Ottawa | Toronto, Montreal, Vancouver
What is the capital of Australia?
    The capital of Australia is {}. | Canberra | Sydney, Melbourne, Perth
What is the capital of Egypt?
    The capital of Egypt is {}. | Cairo | Alexandria, Giza, Tunis
Which planet is closest to the Sun?
    The planet closest to the Sun is {}. | Mercury | Venus, Mars, Earth
Which planet is the largest in the solar system?
    The largest planet is {}. | Jupiter | Saturn, Neptune, Mars
Which planet is known as the red planet?
    The red planet is {}. | Mars | Venus, Jupiter, Mercury
Who wrote Hamlet?
    Hamlet was written by {}. | Shakespeare | Marlowe, Dickens, Milton
Who painted the Mona Lisa?
    The Mona Lisa was painted by {}. | Leonardo | Raphael, Michelangelo, Titian
Who proposed the theory of general relativity?
    General relativity was proposed by {}. | Einstein | Newton, Bohr, Planck
Which element has the chemical symbol O?
    The element with symbol O is {}. | oxygen | osmium, gold, hydrogen
Which element has the chemical symbol Fe?
    The element with symbol Fe is {}. | iron | fluorine, lead, tin
Which gas do plants absorb for photosynthesis?
    Plants absorb {} for photosynthesis. | carbon dioxide | oxygen, nitrogen, helium
What is the largest ocean on Earth?
    The largest ocean is the {} Ocean. | Pacific | Atlantic, Indian, Arctic
What is the longest river in South America?
    The longest river in South America is the {}. | Amazon | Orinoco, Parana, Nile
Which language has the most native speakers?
    The language with the most native speakers is {}. | Mandarin | English, Spanish, Hindi
In which country are the pyramids of Giza?
    The pyramids of Giza are in {}. | Egypt | Sudan, Mexico, Peru
What is the hardest natural mineral?
    The hardest natural mineral is {}. | diamond | quartz, topaz, granite
How many continents are there?
    There are {} continents. | 7 | 5, 6, 8
How many legs does a spider have?
    A spider has {} legs. | 8 | 6, 10, 4
How many days are in a leap year?
    A leap year has {} days. | 366 | 365, 364, 367
How many minutes are in an hour?
    An hour has {} minutes. | 60 | 100, 30, 90
At what temperature in Celsius does water boil at sea level?
    Water boils at {} degrees Celsius at sea level. | 100 | 90, 110, 212
How many sides does a hexagon have?
    A hexagon has {} sides. | 6 | 5, 7, 8
How many players are on a soccer team on the field?
    A soccer team has {} players on the field. | 11 | 10, 9, 12
How many bones are in the adult human body?
    The adult human body has {} bones. | 206 | 201, 212, 196
In which year did the Second World War end?
    The Second World War ended in {}. | 1945 | 1944, 1946, 1939
How many strings does a standard violin have?
    A standard violin has {} strings. | 4 | 5, 6, 3
How many planets are in the solar system?
    The solar system has {} planets. | 8 | 9, 7, 10
How many hours are in a day?
    A day has {} hours. | 24 | 12, 20, 36
"""
_LINES = _TABLE.strip().splitlines()
QUESTIONS: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = tuple(
    (question, sentence, answer, tuple(distractors.split(", ")), "number" if answer.isdigit() else "entity")
    for question, rest in zip(_LINES[::2], _LINES[1::2], strict=True)
    for sentence, answer, distractors in [rest.strip().split(" | ")]
)


def make_items(n_items: int, seed: int, p_correct: float = 0.3) -> list[dict]:
    """``n_items`` feedback rows (without ``id``/``task``), cycling over the questions in a seeded order."""
    rng = random.Random(seed)
    order = list(QUESTIONS)
    rng.shuffle(order)
    rows = []
    for i in range(n_items):
        question, sentence, answer, distractors, kind = order[i % len(order)]
        value = answer if rng.random() < p_correct else rng.choice(distractors)
        start = sentence.index("{}")
        label = "positive" if value == answer else "negative"
        flaws = [] if value == answer else [{"type": f"wrong_{kind}", "stated": value, "expected": answer}]
        rows.append(
            {
                "prompt": question,
                "response": sentence.format(value),
                "reference": sentence.format(answer),
                "tests": None,
                "entry_point": None,
                "meta": {
                    "answer": answer,
                    "gold_spans": [{"start": start, "end": start + len(value), "label": label, "slot": "answer"}],
                    "flaws": flaws,
                },
            }
        )
    return rows
