"""What a person looks at: the rollouts table (schema ROLLOUTS) and HTML token-reward heatmaps.

A step's heatmap shows each sampled token coloured by the task reward it received (green = good span, red = poor
span, intensity = magnitude) with the critique beside it: the reading of PPO's reward source (``ppo.reward_source``),
which is not the annotator's and can be wrong. Where the critique loop audited a step's rollouts
(``critique_loop/round-NNN``: the rollouts it chose and the annotator's labels), an audit page shows each of them read
twice, by the reward model (as the rollouts table recorded it) and by the annotator, so the two can be compared.
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
from t2g_core.spans import NEGATIVE, align_feedback
from t2g_core.store import write_parquet

READERS = {"reward_model": "reward model", "endpoint": "reward endpoint", "oracle": "oracle critic"}
INDEX, STEP_PAGE, AUDIT_PAGE = "index.html", "step-{step:06d}.html", "audit-step-{step:06d}.html"
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


def _write_page(path: Path, title: str, intro: str, rows: list[str]) -> Path:
    page = (
        f"<!doctype html><meta charset=utf-8><title>{title}</title>{STYLE}<h2>{title[0].upper()}{title[1:]}</h2>"
        f"<p>{intro}</p><table><tr><th>prompt</th><th>read by</th><th>response</th><th>critique</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_heatmap(path: Path, step: int, samples: list[dict], reader: str = "reward_model") -> Path:
    """``samples``: dicts with prompt, text, offsets, rewards (task reward per sampled token), critique, status;
    ``reader``: PPO's reward source, whose reading the page shows."""
    who = READERS.get(reader, reader)
    rows = [
        _rollout_rows(s["prompt"], [(who, _tokens_html(s["text"], s["offsets"], s["rewards"]), _critique(s))])
        for s in samples
    ]
    intro = (
        f"Each token is coloured by the task reward the {who} gave it (PPO's reward source at this step, not the "
        "annotator): green positive (good span), red negative (poor span). Hover a token for its value. Where the "
        "critique loop audited a step, the index links the annotator's reading beside the reward model's."
    )
    return _write_page(path, f"token rewards at step {step}", intro, rows)


def write_audit_pages(loop_dir: Path, rollouts_path: Path, folder: Path) -> list[Path]:
    """``folder/audit-step-<s>.html`` for each round of the critique loop in ``loop_dir``: every rollout it audited
    after step s, read by the reward model (its row of the rollouts table, which keeps the steps ``ppo.log_every``
    names) and by the annotator (the round's labels)."""
    rollouts = Path(rollouts_path)
    recorded = pd.read_parquet(rollouts) if rollouts.is_file() else pd.DataFrame(columns=ROLLOUTS.names)
    pages = []
    for round_dir in sorted(Path(loop_dir).glob("round-*")):
        labels_file = round_dir / "annotations.parquet"
        items = pd.read_parquet(round_dir / "feedback.parquet") if labels_file.is_file() else pd.DataFrame()
        if items.empty:
            continue
        labels = pd.read_parquet(labels_file).set_index("id")
        step = _audited(items["id"].iloc[0])[1]
        rows = [_audit_rows(item, labels.loc[item["id"]].to_dict(), recorded) for item in items.to_dict("records")]
        intro = (
            f"The rollouts the critique loop audited after step {step}, each read twice: by the reward model PPO "
            "scored them with, and by the annotator (the labels the loop checks and refreshes the reward model on)."
        )
        pages.append(_write_page(folder / AUDIT_PAGE.format(step=step), f"audit after step {step}", intro, rows))
    return pages


def _audited(item_id: str) -> tuple[str, int]:
    """(row id, step) of an audited rollout's id ``<row id>@<step>.<sample>``."""
    row_id, _, where = item_id.rpartition("@")
    return row_id, int(where.split(".")[0])


def _audit_rows(item: dict, label: dict, recorded: pd.DataFrame) -> str:
    text, (row_id, step) = item["response"], _audited(item["id"])
    same = recorded[(recorded["step"] == step) & (recorded["id"] == row_id) & (recorded["response"] == text)]
    model = same.iloc[0].to_dict() if len(same) else None
    readings = [
        ("reward model", _spans_html(text, model["good_spans"], model["poor_spans"]), _critique(model))
        if model
        else (
            "reward model",
            html.escape(text),
            "not recorded (the rollouts table keeps the steps ppo.log_every names)",
        ),
        (
            f"annotator ({label['annotator']})",
            _spans_html(text, label["good_spans"], label["poor_spans"]),
            _critique(label),
        ),
    ]
    return _rollout_rows(item["prompt"], readings)


def write_heatmap_index(folder: Path) -> Path | None:
    """``folder/index.html``: one page linking every step's heatmap in ``folder`` and, beside it, the critique loop's
    audit of that step (None when there is no page)."""
    steps = sorted({int(p.stem.rpartition("-")[2]) for p in folder.glob("*step-*.html")}) if folder.is_dir() else []
    if not steps:
        return None
    items = []
    for step in steps:
        pages = [
            (STEP_PAGE.format(step=step), f"step {step}", "PPO's reward source"),
            (AUDIT_PAGE.format(step=step), f"audit after step {step}", "the reward model beside the annotator"),
        ]
        links = [f'<a href="{name}">{text}</a>: {what}' for name, text, what in pages if (folder / name).exists()]
        items.append(f"<li>{' · '.join(links)}</li>")
    page = (
        "<!doctype html><meta charset=utf-8><title>token-reward heatmaps</title>"
        "<style>body{font-family:sans-serif}li{margin:4px 0}</style><h2>Token-reward heatmaps by PPO step</h2>"
        "<p>Each step's page shows sampled responses with every token coloured by the task reward PPO's reward "
        "source gave it: green for a good span, red for a poor one. An audit page shows the rollouts the critique "
        "loop chose, read by the reward model and by the annotator.</p><ul>" + "".join(items) + "</ul>"
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
