"""Which policies a pipeline evaluates: the policy before PPO (the baseline) and every PPO-trained adapter.

The evaluation stage gets the base model folders (``{"base": ..., "policy": ...}``) and the PPO stage's reference,
which names an adapter folder (``adapter_dir``, ``adapter`` or ``path``) or several arms (``arms: {name: reference}``).
A reference may carry a metric history (``history``, or ``run_dir/history.json``: the report's learning curve) and
``run_dir/eval.parquet``, the held-out prompts that are evaluated.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

ADAPTER_KEYS = ("adapter_dir", "adapter", "policy_dir", "path")


def _loadable(folder: Path) -> Path | None:
    """``folder`` if it holds a model or adapter, else its ``adapter`` subfolder if that does (a PPO run folder)."""
    for candidate in (folder, folder / "adapter"):
        if (candidate / "adapter_config.json").is_file() or (candidate / "config.json").is_file():
            return candidate
    return None


def _folder(ref: Mapping[str, Any], what: str) -> Path:
    for key in ADAPTER_KEYS:
        value = ref.get(key)
        if isinstance(value, (str, Path)) and Path(value).is_dir() and (found := _loadable(Path(value))):
            return found
    raise ValueError(f"{what}: no model or adapter folder under any of {', '.join(ADAPTER_KEYS)} in {dict(ref)!r:.300}")


def policy_refs(
    models: Mapping[str, Any], trained: Mapping[str, Any], *, include_base: bool = False, trained_name: str = "ppo"
) -> dict[str, Path]:
    """Ordered {name: folder}: ``warm_start`` (baseline), optionally the untrained ``base``, then the trained arm(s)."""
    out: dict[str, Path] = {}
    if "policy" not in models:
        raise ValueError(f"models reference has no 'policy' (the policy before PPO): {dict(models)!r:.300}")
    out["warm_start"] = Path(models["policy"])
    if include_base and models.get("base"):
        out["base"] = Path(models["base"])
    arms = trained.get("arms")
    if isinstance(arms, Mapping):
        for name, ref in arms.items():
            out[str(name)] = _folder(ref, f"PPO arm {name!r}")
    else:
        out[trained_name] = _folder(trained, "PPO reference")
    return out


def _history(ref: Mapping[str, Any]) -> pd.DataFrame | None:
    from t2g_core.evaluation.report import load_history

    value = ref.get("history")
    if isinstance(value, list) and value:
        df = pd.DataFrame(value)
        return df if "step" in df.columns else df.reset_index(names="step")
    for candidate in (
        value,
        ref.get("history_path"),
        Path(ref["run_dir"]) / "history.json" if ref.get("run_dir") else None,
    ):
        if isinstance(candidate, (str, Path)) and Path(candidate).is_file():
            return load_history(candidate)
    return None


def histories(trained: Mapping[str, Any], trained_name: str = "ppo") -> dict[str, pd.DataFrame]:
    """PPO metric histories found in the trained reference(s), by arm name (empty when none are recorded)."""
    arms = trained.get("arms") if isinstance(trained.get("arms"), Mapping) else {trained_name: trained}
    found = {str(name): _history(ref) for name, ref in arms.items() if isinstance(ref, Mapping)}
    return {name: df for name, df in found.items() if df is not None}


def held_out_ids(trained: Mapping[str, Any]) -> list[str] | None:
    """The ids PPO held out from training (``<run_dir>/eval.parquet`` of the first arm that wrote one), else None."""
    arms = trained.get("arms") if isinstance(trained.get("arms"), Mapping) else {"ppo": trained}
    for ref in arms.values():
        run_dir = ref.get("run_dir") if isinstance(ref, Mapping) else None
        if run_dir and (Path(run_dir) / "eval.parquet").is_file():
            return pd.read_parquet(Path(run_dir) / "eval.parquet", columns=["id"])["id"].tolist()
    return None
