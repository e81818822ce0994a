"""Benchmark: span alignment + token labelling vs the floor (batch tokenization with offsets).

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import platform
import random
import re
import statistics
import time
from pathlib import Path

from testbed import parser, results_dir, save_json

from t2g_core.spans import align_feedback, labels_for_offsets, token_labels_batch
from t2g_core.spans.locate import _collapse  # noqa: E402  (the matcher's own word-level normal form)

FUNCTION_WORDS = (
    "the a an of to in and or but is was are were be been it its this that these those he she they we you his her "
    "their our not no with for on at by from as than then so if when while because after before into over under "
    "about between says said also only very more most some any each every all both few many much"
).split()
SYLLABLES = "ka lo mi ne ra su ti vo ze pa do fi gu he ja ku le mo nu po qu ri sa te ul va wi xo ya zu".split()


def make_vocab(rng: random.Random, n: int = 3000) -> list[str]:
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


def make_response(rng: random.Random, vocab: list[str], cum_weights: list[float], n_words: int) -> str:
    """Prose with capitals, punctuation, apostrophes, quotes, markdown and the odd indented line.

    35% function words, the rest content words with Zipf-like frequencies (weight 1 / (rank + 10)).
    """
    out: list[str] = []
    start = True
    for i in range(n_words):
        w = rng.choice(FUNCTION_WORDS) if rng.random() < 0.35 else rng.choices(vocab, cum_weights=cum_weights)[0]
        if start:
            w = w.capitalize()
            start = False
        r = rng.random()
        if r < 0.03:
            w = w + "'s"
        elif r < 0.05:
            w = f'"{w}"'
        elif r < 0.06:
            w = f"**{w}**"
        out.append(w)
        if rng.random() < 0.08 and i < n_words - 1:
            out[-1] += rng.choice([".", ".", ",", ";", "!", "?"])
            start = out[-1][-1] in ".!?"
            if rng.random() < 0.2:
                out[-1] += "\n" + ("    " if rng.random() < 0.3 else "")
    return " ".join(out).replace("\n ", "\n") + "."


CURLY = {"'": "\u2019", '"': "\u201c"}


def perturb(rng: random.Random, span: str) -> str:
    """Change case, whitespace, quote style or markdown so the span is no longer a verbatim substring."""
    words = span.split(" ")
    kinds = rng.sample(["case", "space", "quote", "markdown"], k=2)
    if "case" in kinds:
        words = [w.upper() if rng.random() < 0.5 else w.lower() for w in words]
    if "quote" in kinds:
        words = ["".join(CURLY.get(c, c) for c in w) for w in words]
    if "markdown" in kinds and len(words) > 2:  # interior word: whether a quote "vole" means "**vole**" is moot
        k = rng.randrange(1, len(words) - 1)
        words[k] = words[k].strip("*") if "**" in words[k] else f"*{words[k]}*"
    seps = [rng.choice([" ", "  ", "\n", " \n  "]) if "space" in kinds else " " for _ in words[1:]]
    out = words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True))
    if out == span:  # the draw changed nothing visible (e.g. already lower case): force a change
        out = span.swapcase()
    return out


def word_window(rng: random.Random, text: str, lo: int = 3, hi: int = 10) -> tuple[int, int]:
    """Char offsets of a lo..hi-word window on word boundaries (no leading/trailing space)."""
    bounds = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    n = rng.randint(lo, hi)
    k = rng.randrange(0, max(1, len(bounds) - n))
    return bounds[k][0], bounds[min(k + n, len(bounds)) - 1][1]


def unique_window(rng: random.Random, text: str, folded: str) -> tuple[int, int]:
    """A window whose normalised words occur once in the text, so "the original offsets" are unambiguous
    (repeated phrases and the first-unclaimed rule are covered by the golden tests, not by this recovery figure)."""
    for _ in range(20):
        s, e = word_window(rng, text)
        if folded.count(_collapse(text[s:e])) == 1:
            break
    return s, e


def absent_window(rng: random.Random, texts: list[str], i: int, folded: str) -> str:
    """4..10 words quoted from another response that do not occur (normalised) in response i."""
    while True:
        other = texts[(i + rng.randrange(1, len(texts))) % len(texts)]
        s, e = word_window(rng, other, 4, 10)
        if _collapse(other[s:e]) not in folded:
            return other[s:e]


def build_workload(n: int, seed: int):
    rng = random.Random(seed)
    vocab = make_vocab(rng)
    cum = list(itertools.accumulate(1.0 / (rank + 10) for rank in range(len(vocab))))
    texts = [make_response(rng, vocab, cum, rng.randint(95, 125)) for _ in range(n)]
    items = []  # per response: list of (kind, span_text, label, expected (start, end) or None)
    for i, text in enumerate(texts):
        spans = []
        folded = _collapse(text)
        for _ in range(3):
            kind = rng.choices(["exact", "perturbed", "absent"], weights=[0.57, 0.33, 0.10])[0]
            label = rng.choice(["positive", "negative"])
            if kind == "absent":
                spans.append((kind, absent_window(rng, texts, i, folded), label, None))
                continue
            s, e = unique_window(rng, text, folded)
            quote = text[s:e] if kind == "exact" else perturb(rng, text[s:e])
            spans.append((kind, quote, label, (s, e)))
        items.append(spans)
    return texts, items


def train_tokenizer(texts: list[str], vocab_size: int = 4000):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


CLOCK = time.process_time  # CPU seconds of this process; --wall switches to time.perf_counter


def best_of(repeats: int, fn):
    """Best wall time of ``repeats`` calls. Objects alive before the call are frozen out of the cyclic GC so that
    the workload's own millions of small objects do not make later measurements pay for earlier ones."""
    times, out = [], None
    for _ in range(repeats):
        out = None
        gc.collect()
        gc.freeze()
        t0 = CLOCK()
        out = fn()
        times.append(CLOCK() - t0)
        gc.unfreeze()
    return min(times), out


def score(items, aligned) -> dict[str, float]:
    counts = {"perturbed": [0, 0], "exact": [0, 0], "absent": [0, 0]}
    match_mix: dict[str, int] = {}
    failures = []
    for spans, got in zip(items, aligned, strict=True):
        for (kind, quote, _, expected), a in zip(spans, got, strict=True):
            counts[kind][1] += 1
            match_mix[f"{kind}:{a.match}"] = match_mix.get(f"{kind}:{a.match}", 0) + 1
            ok = (a.start is None) if kind == "absent" else ((a.start, a.end) == expected)
            counts[kind][0] += ok
            if not ok and len(failures) < 5:
                failures.append(
                    {"kind": kind, "quote": quote, "expected": expected, "got": [a.start, a.end, a.match, a.score]}
                )
    return {
        "perturbed_spans": counts["perturbed"][1],
        "perturbed_recovered_exact_offsets": counts["perturbed"][0] / max(1, counts["perturbed"][1]),
        "exact_spans": counts["exact"][1],
        "exact_at_offsets": counts["exact"][0] / max(1, counts["exact"][1]),
        "absent_spans": counts["absent"][1],
        "absent_false_matches": counts["absent"][1] - counts["absent"][0],
        "match_mix": match_mix,
        "failure_examples": failures,
    }


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", action="store_true", help="let the tokenizer batch use all cores (implies --wall)")
    ap.add_argument("--wall", action="store_true", help="time wall-clock instead of this process's CPU time")
    ap.add_argument("--out", type=Path, default=results_dir() / "bench_align.json")
    args = ap.parse_args()
    if args.smoke:
        args.n, args.repeats, args.out = 200, 1, results_dir(smoke=True) / "bench_align.json"
    os.environ["TOKENIZERS_PARALLELISM"] = "true" if args.threads else "false"
    global CLOCK
    if args.wall or args.threads:
        CLOCK = time.perf_counter

    texts, items = build_workload(args.n, args.seed)
    tok = train_tokenizer(texts)
    n_tokens = sum(len(x) for x in tok(texts, add_special_tokens=False)["input_ids"])
    n_spans = sum(len(s) for s in items)
    good_poor = [
        ([q for _, q, lab, _ in s if lab == "positive"], [q for _, q, lab, _ in s if lab == "negative"]) for s in items
    ]

    def floor():
        return tok(texts, add_special_tokens=False, return_offsets_mapping=True)

    def align():
        return [align_feedback(t, gp) for t, gp in zip(texts, good_poor, strict=True)]

    floor_t, align_t, label_t, label_only_t = [], [], [], []
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits all three alike
        t, enc = best_of(1, floor)
        floor_t.append(t)
        t, aligned = best_of(1, align)
        align_t.append(t)
        t, labels = best_of(1, lambda: token_labels_batch(texts, aligned, tok))  # noqa: B023 - used at once
        label_t.append(t)
        offsets = enc["offset_mapping"]
        pairs = list(zip(offsets, aligned, strict=True))
        label_only_t.append(best_of(1, lambda: [labels_for_offsets(o, a) for o, a in pairs])[0])  # noqa: B023
        enc = offsets = None
    floor_s, align_s, label_s, label_only_s = min(floor_t), min(align_t), min(label_t), min(label_only_t)
    # align_feedback returns good spans then poor spans: restore the workload's order for scoring
    reordered = []
    for spans, got in zip(items, aligned, strict=True):
        pos = iter([a for a in got if a.label == "positive"])
        neg = iter([a for a in got if a.label == "negative"])
        reordered.append([next(pos) if lab == "positive" else next(neg) for _, _, lab, _ in spans])
    quality = score(items, reordered)
    total = align_s + label_s
    result = {
        "responses": args.n,
        "tokens_per_response": n_tokens / args.n,
        "spans": n_spans,
        "floor_s": floor_s,
        "align_s": align_s,
        "label_s": label_s,
        "total_s": total,
        "ratio_to_floor": total / floor_s,
        "ratio_paired_median": statistics.median(
            (a + lab) / f for f, a, lab in zip(floor_t, align_t, label_t, strict=True)
        ),
        "label_only_s": label_only_s,
        "ratio_by_components": (floor_s + align_s + label_only_s) / floor_s,
        "target_ratio": 1.5,
        "spans_per_s": n_spans / total,
        "labelled_token_frac": sum(1 for ls in labels for x in ls if x) / max(1, n_tokens),
        **quality,
        "times_s": {"floor": floor_t, "align": align_t, "label": label_t, "label_only": label_only_t},
        "tokenizer_threads": "all" if args.threads else 1,
        "clock": "wall" if CLOCK is time.perf_counter else "process CPU time",
        "repeats": args.repeats,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, shared",
        "python": platform.python_version(),
    }
    save_json(args.out, result, indent=2)
    shown = "responses tokens_per_response spans floor_s align_s label_s ratio_to_floor ratio_paired_median"
    shown += " label_only_s ratio_by_components spans_per_s perturbed_recovered_exact_offsets exact_at_offsets"
    shown += " absent_spans absent_false_matches"
    for key in shown.split():
        v = result[key]
        print(f"{key:<36} {v:.4g}" if isinstance(v, float) else f"{key:<36} {v}")
    print(f"match mix: {quality['match_mix']}")
    for f in quality["failure_examples"]:
        print("  miss:", json.dumps(f, ensure_ascii=False))


if __name__ == "__main__":
    main()
