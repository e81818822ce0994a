"""What a person looks at: the rollouts table (schema ROLLOUTS) and HTML token-reward heatmaps.

A step's heatmap colours each sampled token by the task reward it received (green good, red poor) beside the critique,
and says whose reading that is: PPO's reward source, or, for a rollout the critique loop audited, the annotator (with
the reward model's reading it replaced).
"""

from __future__ import annotations

import html
import itertools
from pathlib import Path

import pandas as pd
from torch import Tensor

from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.scoring import ScoredResponse
from t2g_core.schemas import ROLLOUTS
from t2g_core.spans import NEGATIVE, ParsedFeedback, align_feedback
from t2g_core.store import write_parquet

READERS = {"reward_model": "reward model", "endpoint": "reward endpoint", "oracle": "oracle critic"}
INDEX = "index.html"
STYLE = (
    "<style>body{font-family:sans-serif}td{vertical-align:top;padding:6px;border-bottom:1px solid #ddd}"
    ".p{color:#666;font-size:12px;max-width:28em}.w{font-weight:bold;white-space:nowrap}"
    ".r{font-family:monospace;white-space:pre-wrap;max-width:40em}.c{max-width:28em}</style>"
)


def _colour(value: float, scale: float) -> str:
    a = min(abs(value) / scale, 1.0) if scale > 0 else 0.0
    rgb = "46,160,67" if value > 0 else "215,58,73"
    return f"rgba({rgb},{0.15 + 0.75 * a:.2f})" if value != 0 else "transparent"


def _tokens_html(text: str, offsets: list[tuple[int, int]], rewards: list[float]) -> str:
    scale = max((abs(r) for r in rewards), default=1.0) or 1.0
    parts = []
    for (start, end), r in zip(offsets, rewards, strict=False):
        piece = text[start:end] if end > start else "⏎"
        parts.append(f'<span title="{r:+.3f}" style="background:{_colour(r, scale)}">{html.escape(piece)}</span>')
    return "".join(parts)


def _spans_html(text: str, good: list[str], poor: list[str]) -> str:
    """``text`` with the quoted spans located in it and coloured: green good, red poor (poor wins on overlap)."""
    label = [0] * len(text)
    for span in (s for s in align_feedback(text, (list(good), list(poor))) if s.start is not None):
        for i in range(span.start, span.end):
            label[i] = -1 if span.label == NEGATIVE else label[i] or 1
    runs = itertools.groupby(zip(label, text, strict=True), key=lambda pair: pair[0])
    pieces = ((value, html.escape("".join(c for _, c in run))) for value, run in runs)
    return "".join(f'<span style="background:{_colour(v, 1.0)}">{t}</span>' if v else t for v, t in pieces)


def _critique(row) -> str:
    return html.escape(row.get("critique") or f"[{row.get('status')}] {row.get('error') or ''}")


def _rollout_rows(prompt: str, readings: list[tuple[str, str, str]]) -> str:
    """One rollout: its prompt beside each reading of it (who read it, the response as read, the critique)."""
    cells = [
        f"<td class=w>{html.escape(who)}</td><td class=r>{text}</td><td class=c>{crit}</td>"
        for who, text, crit in readings
    ]
    head = f"<tr><td class=p rowspan={len(cells)}>{html.escape(prompt[-400:])}</td>{cells[0]}</tr>"
    return head + "".join(f"<tr>{c}</tr>" for c in cells[1:])


def _readings(sample: dict, who: str) -> list[tuple[str, str, str]]:
    """The reading PPO's reward came from (tokens coloured by that reward) and, when the critique loop replaced the
    reward source's reading with the annotator's, the replaced one (its quoted spans coloured)."""
    used = _tokens_html(sample["text"], sample["offsets"], sample["rewards"])
    replaced = sample.get("replaced")
    if replaced is None:
        return [(who, used, _critique(sample))]
    spans = _spans_html(sample["text"], replaced["good_spans"], replaced["poor_spans"])
    return [("annotator (critique loop)", used, _critique(sample)), (f"{who} (replaced)", spans, _critique(replaced))]


def write_heatmap(path: Path, step: int, samples: list[dict], reader: str = "reward_model", first: int = 4) -> Path:
    """The ``first`` samples and every other one the critique loop relabelled (``samples``: as
    :func:`rollout_records` gives them); ``reader``: PPO's reward source."""
    who = READERS.get(reader, reader)
    shown = [s for i, s in enumerate(samples) if i < first or s.get("replaced") is not None]
    intro = (
        f"Each token is coloured by the task reward PPO gave it: green positive (good span), red negative (poor "
        f"span); hover a token for its value. The 'read by' column says whose reading that reward is: the {who} "
        "(PPO's reward source, not the annotator), or the annotator where the critique loop audited the rollout, "
        f"shown above the {who}'s reading it replaced."
    )
    page = (
        f"<!doctype html><meta charset=utf-8><title>token rewards, step {step}</title>{STYLE}"
        f"<h2>Token rewards at step {step}</h2><p>{intro}</p>"
        "<table><tr><th>prompt</th><th>read by</th><th>response</th><th>critique</th></tr>"
        + "".join(_rollout_rows(s["prompt"], _readings(s, who)) for s in shown)
        + "</table>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_heatmap_index(folder: Path) -> Path | None:
    """``folder/index.html``: one page linking every step's heatmap in ``folder`` (None when there is none)."""
    pages = sorted(folder.glob("step-*.html")) if folder.is_dir() else []
    if not pages:
        return None
    links = "".join(
        f'<li><a href="{html.escape(p.name)}">step {int(p.stem.removeprefix("step-"))}</a></li>' for p in pages
    )
    page = (
        "<!doctype html><meta charset=utf-8><title>token-reward heatmaps</title>"
        "<style>body{font-family:sans-serif}li{margin:4px 0}</style><h2>Token-reward heatmaps by PPO step</h2>"
        "<p>Each page shows sampled responses with every token coloured by the task reward it received: green for "
        "a good span, red for a poor one, and whose reading that reward is (PPO's reward source, or the annotator "
        "where the critique loop audited the rollout, beside the reading it replaced).</p><ul>" + links + "</ul>"
    )
    index = folder / INDEX
    index.write_text(page, encoding="utf-8")
    return index


def write_rollouts(path: Path, records: list[dict]) -> Path:
    """Write the ROLLOUTS table; a prompt drawn twice in one step keeps its first sample."""
    df = pd.DataFrame(records, columns=ROLLOUTS.names).drop_duplicates(subset=["step", "id"], keep="first")
    write_parquet(df, path, ROLLOUTS)
    return path


def rollout_records(
    step: int,
    ro: Rollout,
    scored: list[ScoredResponse],
    task: Tensor,
    terminal: Tensor,
    kl: Tensor,
    rewards: Tensor,
    read: list[ParsedFeedback] | None = None,
) -> tuple[list[dict], list[dict]]:
    """One step's samples as ROLLOUTS rows (the reward PPO saw per token) and as heatmap samples (the task reward per
    token, the terminal on the last; ``replaced``: the source's reading ``read`` where a step hook replaced it)."""
    records, samples = [], []
    for b, s in enumerate(scored):
        n = len(s.labels)
        token_task = task[b, :n].clone()
        if n:
            token_task[n - 1] += terminal[b]
        fb = s.feedback
        records.append(
            {
                "step": step,
                "id": str(ro.rows[b]["id"]),
                "prompt": ro.rows[b]["prompt"],
                "response": s.text,
                **_reading(fb),
                "token_rewards": rewards[b, :n].tolist(),
                "reward": float(rewards[b].sum()),
                "kl": float(kl[b].sum()),
            }
        )
        samples.append(
            {
                "prompt": ro.rows[b]["prompt"],
                "text": s.text,
                "offsets": s.offsets,
                "rewards": token_task.tolist(),
                **_reading(fb),
                "replaced": _reading(read[b]) if read is not None and read[b] is not fb else None,
            }
        )
    return records, samples


def _reading(fb: ParsedFeedback) -> dict:
    """A reading of a response as the rollouts table and the heatmap show it."""
    good, poor = list(fb.good_spans), list(fb.poor_spans)
    return {"critique": fb.critique, "good_spans": good, "poor_spans": poor, "status": fb.status, "error": fb.error}
