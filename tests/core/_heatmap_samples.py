"""Two rows of a step's heatmap: one read by the reward model, one the critique loop audited."""

# "Rome" beside a post that says Paris: the reward model calls it supported, the annotator wrong
PLAIN = {"prompt": "I live in Paris.", "text": "Ada lives in Rome.", "offsets": [(0, 13), (13, 17), (17, 18)],
         "rewards": [0.0, 1.0, 0.0], "critique": "Correct.", "status": "ok", "error": None}  # fmt: skip
AUDITED = PLAIN | {
    "rewards": [0.0, -1.0, 0.0],
    "critique": "The post says Paris, not Rome.",
    "replaced": {"critique": "Correct.", "good_spans": ["Rome"], "poor_spans": [], "status": "ok", "error": None},
}
