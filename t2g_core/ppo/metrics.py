"""What a PPO step logs: global means over every process's share of the batch (each process must call these: they
all-reduce), the task metric's values, the wall time of each phase of the step, and the few numbers a progress bar
shows."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from torch import Tensor

from t2g_core.ppo.distributed import all_reduce_sum, global_sum
from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.scoring import ScoredResponse
from t2g_core.rl import explained_variance

# (rows, responses) -> per-sample task error, or {name: per-sample values} logged as task/<name> and eval/task_<name>
TaskMetric = Callable[[list[dict], list[str]], "list[float] | dict[str, list[float]]"]


class StepTimer:
    """Wall-clock seconds of the named phases of one step (``with timer.phase("score"): ...``; a phase entered twice
    adds up). :meth:`metrics` gives ``time/<phase>`` for each and ``time/step`` for all of them together."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def metrics(self) -> dict[str, float]:
        return {f"time/{name}": s for name, s in self.seconds.items()} | {"time/step": sum(self.seconds.values())}


def step_metrics(ro: Rollout, scored: list[ScoredResponse], labels: Tensor, kl: Tensor, rewards: Tensor) -> dict:
    """Rewards, KL, parse failures, EOS and response length of the global batch (means per sample or per token)."""
    m = ro.response_mask.float()
    local = [
        float(len(scored)),
        float(m.sum()),
        float((labels * m).sum()),
        float(((labels > 0) * m).sum()),
        float(((labels < 0) * m).sum()),
        float((kl * m).sum()),
        float(rewards.sum()),
        float(sum(not s.feedback.ok for s in scored)),
        float(ro.has_eos.sum()),
        float(sum(s.n_spans for s in scored)),
        float(sum(s.n_unmatched for s in scored)),
        float(sum(len(s.missing_tokens) for s in scored if s.feedback.ok)),
    ]
    n, tokens, span_sum, pos, neg, kl_sum, r_sum, failed, eos, spans, unmatched, missing = global_sum(local)
    return {
        "reward/span_mean": span_sum / n,
        "reward/total_mean": r_sum / n,
        "reward/positive_frac": pos / tokens,
        "reward/negative_frac": neg / tokens,
        "reward/missing_mean": missing / n,
        "kl/mean": kl_sum / n,
        "kl/per_token": kl_sum / tokens,
        "parse/failure_rate": failed / n,
        "eos/rate": eos / n,
        "response/length": tokens / n,
        "spans/unmatched_rate": unmatched / spans if spans else 0.0,
    }


def critic_metrics(ro: Rollout, entropy: Tensor, values: Tensor, returns: Tensor, critic: bool) -> dict[str, float]:
    """Sampling entropy per token, and (``critic``) the critic's explained variance before its update."""
    m = ro.response_mask.float()
    entropy_sum, tokens = global_sum([float((entropy * m).sum()), float(m.sum())])
    out = {"policy/entropy": entropy_sum / tokens}
    if critic:
        out["value/explained_variance"] = explained_variance(values, returns, ro.response_mask, all_reduce_sum)
    return out


def task_metrics(task_metric: TaskMetric | None, rows: list[dict], texts: list[str], prefix: str) -> dict:
    """Global means of the task metric(s), as ``<prefix><name>``; every process calls this, rows or not."""
    if task_metric is None:
        return {}
    values = task_metric(rows, texts)  # also with no rows: every process must reduce the same names
    values = {"error": values} if isinstance(values, list) else values
    names = sorted(values)
    sums = global_sum([float(len(rows))] + [float(sum(values.get(k, []))) for k in names])
    return {f"{prefix}{k}": total / sums[0] for k, total in zip(names, sums[1:], strict=True)}


def progress_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The few numbers a progress bar shows for a PPO step."""
    names = {"reward/total_mean": "reward", "kl/mean": "kl", "task/error": "error", "time/step": "s/step"}
    return {short: metrics[k] for k, short in names.items() if k in metrics}
