"""Evaluate the reward model on held-out ``rm_data`` rows, with the same prompts it was trained on.

What each metric measures: docs/reward_model.md, "Reward-model metrics"; other predictions (a baseline, an LLM
annotator) are scored with :func:`score_predictions`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from t2g_core.alignment import micro_prf, span_prf, token_prf
from t2g_core.demo.summarization import typed_spans
from t2g_core.reward_model.data import parse_rm_target
from t2g_core.reward_model.scoring import generate_texts, load_reward_model, parse_generation
from t2g_core.spans import ParsedFeedback, align_feedback, anchor_token, token_labels
from t2g_core.store import write_frame_atomic, write_text_atomic

if TYPE_CHECKING:
    import torch

EXAMPLES = 5  # rendered examples the evaluation report keeps
LABELS = ("positive", "negative")
_LABEL_NAMES = {"positive": "positive", "good": "positive", "negative": "negative", "poor": "negative"}


@dataclass(frozen=True)
class EvalItem:
    """One held-out item: what the RM saw and what it should have said."""

    id: str
    rm_prompt: str
    response: str
    gold: ParsedFeedback
    truth: list[tuple] | None = None  # demo ground truth (start, end, label[, flaw type]), if known


@dataclass
class RMEvalReport:
    metrics: dict[str, float]
    rows: pd.DataFrame
    examples: list[dict] = field(default_factory=list)

    def to_markdown(self) -> str:
        lines = ["# Reward model evaluation", "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v:.4g} |" for k, v in sorted(self.metrics.items())]
        for ex in self.examples:
            lines += ["", f"## {ex['id']} ({ex['status']})", ""]
            for title, key in (("Response", "response"), ("Gold", "gold"), ("Generated", "generated")):
                lines += [f"{title}:", "```", ex[key], "```"]
        return "\n".join(lines) + "\n"


def write_eval_report(report: RMEvalReport, out_dir: str | Path) -> dict[str, Path]:
    """``metrics.json``, ``report.md`` (metrics + rendered examples) and ``items.parquet`` (per-item results)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"metrics": out / "metrics.json", "markdown": out / "report.md", "items": out / "items.parquet"}
    write_frame_atomic(report.rows, paths["items"])
    write_text_atomic(paths["markdown"], report.to_markdown())
    write_text_atomic(paths["metrics"], json.dumps(report.metrics, indent=2, sort_keys=True))
    return paths


def strict_json_valid(text: str) -> bool:
    """True when ``text`` is exactly one JSON object with list-of-string good_spans and poor_spans."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(obj, dict):
        return False
    return all(
        isinstance(obj.get(k), list) and all(isinstance(s, str) for s in obj[k]) for k in ("good_spans", "poor_spans")
    )


def _truth_from_meta(meta: object, response: str | None = None) -> list[tuple] | None:
    """Ground-truth spans of a demo item: typed by flaw when the item has its facts (summaries), else as stored."""
    if meta is None or (isinstance(meta, float) and pd.isna(meta)):
        return None
    obj = json.loads(meta) if isinstance(meta, str) else meta
    if isinstance(obj, dict) and isinstance(obj.get("facts"), dict) and response is not None:
        return [(s["start"], s["end"], s["label"], s["type"]) for s in typed_spans(response, obj["facts"])]
    spans = obj.get("gold_spans") if isinstance(obj, dict) else None
    if spans is None:
        return None
    return [(int(s["start"]), int(s["end"]), _LABEL_NAMES[str(s["label"])]) for s in spans]


def eval_items(
    rm_df: pd.DataFrame, feedback_df: pd.DataFrame, eos: str | None, *, split: str = "validation"
) -> list[EvalItem]:
    """Held-out rows joined with their responses; gold spans come from the row's target."""
    fb = feedback_df.set_index("id")
    items = []
    for row in rm_df[rm_df["split"] == split].itertuples(index=False):
        if row.id not in fb.index:
            raise ValueError(f"rm_data row {row.id!r} has no feedback item (response) to evaluate against")
        item = fb.loc[row.id]
        gold = parse_rm_target(row.rm_target, eos)
        truth = _truth_from_meta(item.get("meta"), item["response"])
        items.append(EvalItem(row.id, row.rm_prompt, item["response"], gold, truth))
    return items


def _located(response: str, feedback: ParsedFeedback, align_cfg) -> tuple[list[tuple[int, int, str]], int, list]:
    aligned = align_feedback(response, feedback, align_cfg) if feedback.ok else []
    spans = [(s.start, s.end, s.label) for s in aligned if s.start is not None]
    return spans, len(aligned) - len(spans), [s for s in aligned if s.start is not None]


def _rouge_l(scorer, gold: str | None, pred: str | None) -> float:
    if not pred or not gold:
        return float(not pred and not gold)
    return scorer.score(gold, pred)["rougeL"].fmeasure


FLAW_TYPES = ("invented", "swapped", "redundant")


def omission_tokens(offsets: Sequence[tuple[int, int]], feedback: ParsedFeedback) -> list[int]:
    """The token each missing item of ``feedback`` is anchored at (no place given: the last token)."""
    at = list(feedback.missing_at)[: len(feedback.missing)]
    at += [None] * (len(feedback.missing) - len(at))
    return [anchor_token(offsets, a) for a in at] if offsets else []


def omission_matches(offsets, pred: ParsedFeedback, gold: ParsedFeedback) -> tuple[int, int, int]:
    """(matched, predicted, gold) omissions of one response: a predicted and a gold item match one to one when they
    are anchored at the same token."""
    p, g = omission_tokens(offsets, pred), omission_tokens(offsets, gold)
    matched = sum(min(p.count(t), g.count(t)) for t in set(p))
    return matched, len(p), len(g)


def _chars(spans, label: str = "negative") -> set[int]:
    return {c for s in spans if s[2] == label for c in range(s[0], s[1])}


def _prf(tp: int, n_pred: int, n_true: int) -> tuple[float | None, float | None, float | None]:
    """Micro precision, recall and F1 from counts (all None when there is nothing predicted or true)."""
    if not n_pred and not n_true:
        return None, None, None
    p, r = (tp / n_pred if n_pred else 0.0), (tp / n_true if n_true else 0.0)
    return p, r, 2 * p * r / (p + r) if p + r else 0.0


def _named(name: str, p, r, f1) -> dict[str, float]:
    return {f"{name}_precision": p, f"{name}_recall": r, f"{name}_f1": f1}


class _Totals:
    """Per-item results accumulated for micro-averaging."""

    def __init__(self):
        self.span = {k: [] for k in ("all", *LABELS)}
        self.token = {k: [] for k in ("all", *LABELS)}
        self.truth = {k: [] for k in ("all", *LABELS)}
        self.poor_chars = [0, 0, 0]  # true positives, predicted, true
        self.by_type = {t: [0, 0] for t in FLAW_TYPES}  # characters caught, characters of that type
        self.omissions = [0, 0, 0]  # matched, predicted, gold

    def add_omissions(self, counts: tuple[int, int, int]) -> None:
        self.omissions = [a + b for a, b in zip(self.omissions, counts, strict=True)]

    def omission_metrics(self) -> dict[str, float]:
        p, r, f1 = _prf(*self.omissions)
        return {} if p is None else {**_named("omission", p, r, f1), "omission_gold": float(self.omissions[2])}

    def add_truth_chars(self, pred, truth) -> None:
        predicted, true = _chars(pred), _chars(truth)
        counts = (len(predicted & true), len(predicted), len(true))
        self.poor_chars = [a + b for a, b in zip(self.poor_chars, counts, strict=True)]
        for span in truth:
            if len(span) > 3 and span[3] in self.by_type:
                chars = set(range(span[0], span[1]))
                self.by_type[span[3]][0] += len(chars & predicted)
                self.by_type[span[3]][1] += len(chars)

    def truth_char_metrics(self) -> dict[str, float]:
        p, r, f1 = _prf(*self.poor_chars)
        if p is None:
            return {}
        return _named("truth_poor_char", p, r, f1) | {
            f"truth_recall_{t}": hit / n for t, (hit, n) in self.by_type.items() if n
        }

    def add_spans(self, bucket: dict, pred, gold, threshold: float) -> dict:
        out = span_prf(pred, gold, iou_threshold=threshold)
        bucket["all"].append(out)
        for lab in LABELS:
            bucket[lab].append(
                span_prf([p for p in pred if p[2] == lab], [g for g in gold if g[2] == lab], iou_threshold=threshold)
            )
        return out

    def add_tokens(self, pred_labels, gold_labels) -> None:
        out = token_prf(pred_labels, gold_labels)
        self.token["all"].append(out)
        for lab in LABELS:
            self.token[lab].append(out[lab])

    def metrics(self) -> dict[str, float]:
        m: dict[str, float] = {}
        for prefix, bucket in (("span", self.span), ("token", self.token), ("truth_span", self.truth)):
            for lab, results in bucket.items():
                if not results:
                    continue
                agg = micro_prf(results)
                m |= _named(prefix if lab == "all" else f"{prefix}_{lab}", agg["precision"], agg["recall"], agg["f1"])
        return m | self.truth_char_metrics() | self.omission_metrics()


def score_predictions(
    items: Sequence[EvalItem], preds: Sequence[ParsedFeedback], tokenizer, *, align_cfg=None, iou_threshold: float = 0.5
) -> tuple[dict[str, float], pd.DataFrame]:
    """Metrics of ``preds`` (one per item) against the items' gold spans and critiques; per-item rows too."""
    from rouge_score import rouge_scorer

    if len(items) != len(preds):
        raise ValueError(f"{len(items)} items but {len(preds)} predictions")
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    totals, labels, rows = _Totals(), _Totals(), []  # labels: the gold (the annotator's) against the truth
    n_pred_spans = n_unmatched = 0
    for item, pred in zip(items, preds, strict=True):
        gold_spans, _, gold_aligned = _located(item.response, item.gold, align_cfg)
        pred_spans, unmatched, pred_aligned = _located(item.response, pred, align_cfg)
        n_pred_spans += len(pred_spans) + unmatched
        n_unmatched += unmatched
        item_prf = totals.add_spans(totals.span, pred_spans, gold_spans, iou_threshold)
        totals.add_tokens(
            token_labels(item.response, pred_aligned, tokenizer), token_labels(item.response, gold_aligned, tokenizer)
        )
        offsets = tokenizer(item.response, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        totals.add_omissions(omission_matches(offsets, pred if pred.ok else ParsedFeedback(None), item.gold))
        if item.truth is not None:
            totals.add_spans(totals.truth, pred_spans, item.truth, iou_threshold)
            totals.add_truth_chars(pred_spans, item.truth)
            labels.add_truth_chars(gold_spans, item.truth)
        rouge = _rouge_l(scorer, item.gold.critique, pred.critique if pred.ok else None)
        rows.append(
            {
                "id": item.id,
                "status": pred.status,
                "error": pred.error,
                "n_pred_spans": len(pred_spans) + unmatched,
                "n_unmatched": unmatched,
                "span_f1": item_prf["f1"],
                "rouge_l": rouge,
            }
        )
    df = pd.DataFrame(rows)
    metrics = totals.metrics() | {f"annotator_{k}": v for k, v in labels.truth_char_metrics().items()}
    metrics["parse_ok_rate"] = float((df["status"] == "ok").mean()) if len(df) else 0.0
    metrics["unmatched_span_rate"] = n_unmatched / n_pred_spans if n_pred_spans else 0.0
    metrics["rouge_l"] = float(df["rouge_l"].mean()) if len(df) else 0.0
    metrics["n_items"] = float(len(df))
    return metrics, df


def evaluate_rm(model, tokenizer, items: Sequence[EvalItem], cfg, *, align_cfg=None) -> RMEvalReport:
    """Generate for each held-out item (its stored rm_prompt, i.e. the shared builder) and score the output."""
    if cfg.eval_max_items:
        items = list(items)[: cfg.eval_max_items]
    if not items:
        raise ValueError("no held-out items to evaluate (is reward_model.val_fraction 0?)")
    gen = generate_texts(model, tokenizer, [it.rm_prompt for it in items], cfg, [it.response for it in items])
    metrics_time = 1000 * gen.seconds / len(items)
    preds = [parse_generation(t, h, cfg.max_new_tokens) for t, h in zip(gen.texts, gen.hit_limit, strict=True)]
    metrics, rows = score_predictions(items, preds, tokenizer, align_cfg=align_cfg)
    rows["json_valid"] = [strict_json_valid(t) for t in gen.texts]
    rows["n_new_tokens"] = gen.n_new_tokens
    rows["generated"] = gen.texts
    metrics["json_valid_rate"] = float(rows["json_valid"].mean())
    metrics["eos_rate"] = 1.0 - sum(gen.hit_limit) / len(gen.hit_limit)
    metrics["gen_tokens_per_s"] = gen.tokens_per_second
    metrics["gen_seconds"] = gen.seconds
    metrics["score_ms_per_item"] = metrics_time
    examples = [_example(it, p, t) for it, p, t in list(zip(items, preds, gen.texts, strict=True))[:EXAMPLES]]
    return RMEvalReport(metrics, rows, examples)


def evaluate_tagger(model, tokenizer, items: Sequence[EvalItem], cfg, *, align_cfg=None) -> RMEvalReport:
    """Tag each held-out item's response (after its stored policy prompt) and score the labels as spans."""
    import time

    from t2g_core.reward_model.tagger import encode_pair, predict, prediction_feedback, token_classes

    items = list(items)[: cfg.eval_max_items] if cfg.eval_max_items else list(items)
    if not items:
        raise ValueError("no held-out items to evaluate (is reward_model.val_fraction 0?)")
    t0 = time.perf_counter()
    encoded = [
        encode_pair(tokenizer, it.rm_prompt, it.response, cfg.max_prompt_tokens, cfg.max_target_tokens) for it in items
    ]
    predictions = predict(model, encoded, tokenizer.pad_token_id, cfg.score_batch_size)
    preds = [prediction_feedback(it.response, e, p) for it, e, p in zip(items, encoded, predictions, strict=True)]
    seconds = time.perf_counter() - t0
    metrics, rows = score_predictions(items, preds, tokenizer, align_cfg=align_cfg)
    metrics["score_ms_per_item"] = 1000 * seconds / len(items)
    overlap = align_cfg.overlap if align_cfg is not None else "poor_wins"
    gold = [
        token_classes(e.offsets, _located(it.response, it.gold, align_cfg)[2], overlap)
        for it, e in zip(items, encoded, strict=True)
    ]
    metrics["token_ece"] = calibration_error([p.probs for p in predictions], gold)
    examples = [_example(it, p, _gold_json(p)) for it, p in list(zip(items, preds, strict=True))[:EXAMPLES]]
    return RMEvalReport(metrics, rows, examples)


def calibration_error(probs: Sequence[torch.Tensor], gold: Sequence[Sequence[int]], bins: int = 10) -> float:
    """Expected calibration error of per-token label probabilities ((n, C) each) against the gold labels: over
    ``bins`` equal-width bins of the predicted label's probability, the token-weighted mean |accuracy - confidence|."""
    import torch

    top = torch.cat([p.reshape(-1, p.shape[-1]) for p in probs]).max(dim=-1)
    right = (top.indices == torch.tensor([g for labels in gold for g in labels], dtype=torch.long)).float()
    which = (top.values * bins).long().clamp(max=bins - 1)
    gaps = [(right[which == b].mean() - top.values[which == b].mean()).abs() * (which == b).sum() for b in range(bins)]
    return float(sum(g for g in gaps if not g.isnan()) / max(1, len(right)))


def _example(item: EvalItem, pred: ParsedFeedback, generated: str) -> dict:
    return {
        "id": item.id,
        "status": pred.status,
        "response": item.response,
        "gold": _gold_json(item.gold),
        "generated": generated,
    }


def _gold_json(fb: ParsedFeedback) -> str:
    return json.dumps(
        {"critique": fb.critique, "good_spans": fb.good_spans, "poor_spans": fb.poor_spans}, ensure_ascii=False
    )


def evaluate_model(
    model_dir: str | Path,
    rm_df: pd.DataFrame,
    feedback_df: pd.DataFrame,
    cfg,
    *,
    split: str = "validation",
    base_model: str | None = None,
    device: str | None = None,
    align_cfg=None,
    dtype: torch.dtype | None = None,
) -> RMEvalReport:
    """Load a trained RM (tagger folder, LoRA adapter or full model folder; base weights in ``dtype``, the resolved
    ``models.dtype``; None: the ``auto`` rule) and evaluate it on ``split`` of ``rm_df``."""
    from t2g_core.reward_model.tagger import is_tagger, load_tagger

    if is_tagger(model_dir):
        model, tokenizer = load_tagger(model_dir, device=device, dtype=dtype)
        items = eval_items(rm_df, feedback_df, None, split=split)
        return evaluate_tagger(model, tokenizer, items, cfg, align_cfg=align_cfg)

    model, tokenizer = load_reward_model(model_dir, base_model=base_model, device=device, dtype=dtype)
    items = eval_items(rm_df, feedback_df, tokenizer.eos_token, split=split)
    return evaluate_rm(model, tokenizer, items, cfg, align_cfg=align_cfg)
