"""What a person looks at: the rollouts table (schema ROLLOUTS) and an HTML token-reward heatmap.

The heatmap shows each sampled token coloured by the task reward it received (green = good span, red = poor span,
intensity = magnitude) with the critique beside it, so one can see what the critique pushed on.
"""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd
from torch import Tensor

from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.scoring import ScoredResponse
from t2g_core.schemas import ROLLOUTS
from t2g_core.store import write_parquet


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


def write_heatmap(path: Path, step: int, samples: list[dict]) -> Path:
    """``samples``: dicts with prompt, text, offsets, rewards (task reward per sampled token), critique, status."""
    rows = []
    for s in samples:
        critique = html.escape(s.get("critique") or f"[{s.get('status')}] {s.get('error') or ''}")
        rows.append(
            "<tr><td class=p>"
            + html.escape(s["prompt"][-400:])
            + "</td><td class=r>"
            + _tokens_html(s["text"], s["offsets"], s["rewards"])
            + f"</td><td class=c>{critique}</td></tr>"
        )
    page = (
        f"<!doctype html><meta charset=utf-8><title>token rewards, step {step}</title>"
        "<style>body{font-family:sans-serif}td{vertical-align:top;padding:6px;border-bottom:1px solid #ddd}"
        ".p{color:#666;font-size:12px;max-width:28em}.r{font-family:monospace;white-space:pre-wrap;max-width:40em}"
        f".c{{max-width:28em}}</style><h2>Token rewards at step {step}</h2>"
        "<p>Each token is coloured by its task reward: green positive (good span), red negative (poor span). "
        "Hover a token for its value.</p><table><tr><th>prompt</th><th>response</th><th>critique</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


INDEX = "index.html"


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
        "a good span, red for a poor one.</p><ul>" + links + "</ul>"
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
    step: int, ro: Rollout, scored: list[ScoredResponse], task: Tensor, terminal: Tensor, kl: Tensor, rewards: Tensor
) -> tuple[list[dict], list[dict]]:
    """One step's samples as ROLLOUTS rows (the reward PPO saw per token, KL included) and as heatmap samples (the
    task reward per sampled token, the terminal reward on the last one)."""
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
                "critique": fb.critique,
                "good_spans": list(fb.good_spans),
                "poor_spans": list(fb.poor_spans),
                "token_rewards": rewards[b, :n].tolist(),
                "reward": float(rewards[b].sum()),
                "kl": float(kl[b].sum()),
                "status": fb.status,
                "error": fb.error,
            }
        )
        samples.append(
            {
                "prompt": ro.rows[b]["prompt"],
                "text": s.text,
                "offsets": s.offsets,
                "rewards": token_task.tolist(),
                "critique": fb.critique,
                "status": fb.status,
                "error": fb.error,
            }
        )
    return records, samples
