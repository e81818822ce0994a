"""Typed references between stages: what a stage returns and the next one takes.

Each reference is small, frozen, JSON-serialisable (Prefect persists and passes them), names where its output lives,
and has a ``fingerprint()``: the content identity in its consumers' cache keys (never a path or a run id; ``run_id``
is lineage only). ``problem()`` says why the files it names cannot be reused, so a cached reference is checked first.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from t2g_core.config.data import DataConfig
from t2g_core.store import ArtifactRef, file_problem, json_problem, owned, parquet_problem, sha256_file

__all__ = [
    "ArtifactRef",
    "EvaluationRef",
    "ModelsRef",
    "PolicyRef",
    "PolicySamplesRef",
    "PolicySet",
    "Ref",
    "ReviewSampleRef",
    "RewardModelRef",
    "SourceRef",
    "ValidationRef",
    "folder_digest",
]

_BIG_FILE = 64 << 20  # files above this are identified by (size, mtime) instead of their content
_MODEL_FILES = ("config.json", "adapter_config.json", "tokenizer.json", "tokenizer_config.json")


class Ref(BaseModel):
    """Base of the stage references."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str | None = None

    def fingerprint(self) -> Any:
        raise NotImplementedError

    def paths(self) -> tuple[str, ...]:
        """The files and folders (or Hugging Face ids, for models) this reference names: what a stage reads."""
        return ()

    def problem(self, within: Path | None = None) -> str | None:
        """Why the files this reference names cannot be reused, or None when they can; with ``within``, only its
        files under that folder (the workspace) are checked."""
        return None


def first_problem(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


def model_folder_problem(path: str, digest: str, within: Path | None = None) -> str | None:
    """A model given as a folder must still be one; a Hub id (digest ``id:...``) is resolved by its loader."""
    if digest.startswith("id:") or not owned(path, within):
        return None
    return None if Path(path).is_dir() and any(Path(path).iterdir()) else f"{path}: model folder missing or empty"


def folder_digest(path: str | Path) -> str:
    """sha256 of a file, or of a folder's (relative path, content hash) list; huge files by size and mtime."""
    path = Path(path)
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        h.update((f.name if f == path else str(f.relative_to(path))).encode())
        stat = f.stat()
        h.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode() if stat.st_size > _BIG_FILE else sha256_file(f).encode())
    return h.hexdigest()


def model_digest(name: str) -> str:
    """A model folder's content hash; a Hugging Face id (``@revision``) is identified by the commit it resolves to in
    the local cache (a moved branch re-runs what used it), else by its name."""
    from t2g_core.models.loading import cached_commit

    path = Path(name)
    if path.is_dir():
        return folder_digest(path)
    commit = cached_commit(name)
    return f"id:{name}@{commit}" if commit else f"id:{name}"


class SourceRef(Ref):
    """Where the feedback comes from and a digest of its content: the input of the feedback stage."""

    origin: str  # demo:<task>:<n>:<seed> | dataset:<name>:<location> | file:<path>
    digest: str

    def fingerprint(self) -> dict[str, str]:
        return {"source": self.digest}

    @classmethod
    def of(cls, data: DataConfig) -> SourceRef:
        """The content identity of ``data``'s source, computed without loading it (files are hashed)."""
        if data.columns is not None:  # any dataset through a column mapping: a local one by content, else its id
            local = Path(data.dataset).exists()
            location = str(Path(data.dataset).resolve()) if local else f"hub:{data.dataset}"
            return cls(origin=f"dataset:{location}", digest=folder_digest(location) if local else location)
        if data.dataset is not None:
            local = data.source not in ("hub", "demo")
            location = str(Path(data.source).resolve()) if local else "hub"
            return cls(origin=f"dataset:{data.dataset}:{location}", digest=folder_digest(location) if local else "hub")
        if data.source == "demo":
            origin = f"demo:{data.task}:{data.n_items}:{data.seed}"
            return cls(origin=origin, digest=hashlib.sha256(origin.encode()).hexdigest())
        path = Path(data.source).resolve()
        if not path.exists():
            raise FileNotFoundError(f"data.source {data.source}: no such file or folder")
        return cls(origin=f"file:{path}", digest=folder_digest(path))


class ModelsRef(Ref):
    """The reward-model base and the policy before PPO (folders, or Hugging Face ids), with content digests."""

    base: str
    policy: str
    base_digest: str
    policy_digest: str

    def fingerprint(self) -> dict[str, str]:
        return {"base": self.base_digest, "policy": self.policy_digest}

    def paths(self) -> tuple[str, ...]:
        return self.base, self.policy

    def problem(self, within: Path | None = None) -> str | None:
        return first_problem(
            model_folder_problem(self.base, self.base_digest, within),
            model_folder_problem(self.policy, self.policy_digest, within),
        )

    @classmethod
    def of(cls, base: str | Path, policy: str | Path) -> ModelsRef:
        base, policy = str(base), str(policy)
        return cls(base=base, policy=policy, base_digest=model_digest(base), policy_digest=model_digest(policy))


class ReviewSampleRef(Ref):
    """The stratified review sample: ``sample.json`` and the offline page and sheet beside it."""

    key: str
    n_items: int
    sample: str
    page: str | None = None
    sheet: str | None = None

    def fingerprint(self) -> dict[str, str]:
        return {"sample": sha256_file(self.sample)}

    def paths(self) -> tuple[str, ...]:
        return tuple(p for p in (self.sample, self.page, self.sheet) if p)

    def problem(self, within: Path | None = None) -> str | None:
        return json_problem(self.sample, within)


class ValidationRef(Ref):
    """The validation verdict and its report files."""

    status: str  # pass | pending | fail
    report: str
    chart: str
    json_path: str

    def fingerprint(self) -> dict[str, str]:
        return {"status": self.status, "report": sha256_file(self.json_path)}

    def paths(self) -> tuple[str, ...]:
        return self.report, self.chart, self.json_path

    def problem(self, within: Path | None = None) -> str | None:
        return first_problem(json_problem(self.json_path, within), file_problem(self.report, within))


class PolicySamplesRef(Ref):
    """The policy's own responses to training prompts (feedback rows) and the annotator's labels of them."""

    feedback: ArtifactRef
    annotations: ArtifactRef

    def fingerprint(self) -> dict[str, Any]:
        return {"feedback": self.feedback.fingerprint(), "annotations": self.annotations.fingerprint()}

    def paths(self) -> tuple[str, ...]:
        return self.feedback.paths() + self.annotations.paths()

    def problem(self, within: Path | None = None) -> str | None:
        return first_problem(self.feedback.problem(within), self.annotations.problem(within))


class RewardModelRef(Ref):
    """A trained reward model: its folder (a LoRA adapter for the generative kind, a tagger folder for the tagger),
    data, metrics, registry version."""

    model_dir: str
    kind: str = "generative"
    base: str
    rm_data: ArtifactRef
    digest: str
    # the items rm_data was built from when they are more than the pipeline's feedback (the policy's own samples)
    feedback: ArtifactRef | None = None
    metrics: dict[str, float] = {}
    report: str | None = None
    global_step: int = 0
    version: str | None = None  # registered model version, when a tracking layer registered it
    champion: bool | None = None

    def fingerprint(self) -> dict[str, str]:
        return {"reward_model": self.digest}

    def paths(self) -> tuple[str, ...]:
        own = tuple(p for p in (self.model_dir, self.base, self.report) if p)
        return own + self.rm_data.paths() + (self.feedback.paths() if self.feedback else ())

    def problem(self, within: Path | None = None) -> str | None:
        return model_folder_problem(self.model_dir, self.digest, within)


class PolicyRef(Ref):
    """A PPO-trained policy adapter and its run folder (history, rollouts, heatmaps, held-out prompts)."""

    adapter_dir: str
    run_dir: str
    digest: str
    steps: int
    history_path: str
    rollouts_path: str | None = None
    metrics: dict[str, float] = {}
    version: str | None = None
    reward_model_version: str | None = None  # the registered reward model PPO started from
    # the critique loop's last refresh, registered: PPO's last rewards
    refreshed_reward_model_version: str | None = None
    # what PPO's reward came from: source (and reward-model kind), the reward model's held-out quality, the share of
    # a PPO step spent scoring, the share of the rollouts' quotes that matched no text
    reward: dict[str, float | str] = {}
    # reward models the critique loop refreshed: folder, round, step, the audit metrics of that round
    reward_models: list[dict] = []

    def fingerprint(self) -> dict[str, str]:
        eval_file = Path(self.run_dir) / "eval.parquet"
        held_out = sha256_file(eval_file) if eval_file.is_file() else "none"
        return {"policy": self.digest, "held_out": held_out}

    def paths(self) -> tuple[str, ...]:
        folders = tuple(str(m["folder"]) for m in self.reward_models if m.get("folder"))
        return tuple(p for p in (self.adapter_dir, self.run_dir, self.history_path, self.rollouts_path) if p) + folders

    def problem(self, within: Path | None = None) -> str | None:
        adapter = Path(self.adapter_dir)
        return first_problem(
            json_problem(adapter / "adapter_config.json", within),
            file_problem(adapter / "adapter_model.safetensors", within),
            json_problem(self.history_path, within),
            parquet_problem(self.rollouts_path, within) if self.rollouts_path else None,
        )


class EvaluationRef(Ref):
    """An evaluation: results folder, summary and report."""

    path: str
    summary: str
    report: str
    n_rows: int
    task: str

    def fingerprint(self) -> dict[str, str]:
        return {"summary": sha256_file(self.summary)}

    def paths(self) -> tuple[str, ...]:
        return self.path, self.summary, self.report

    def problem(self, within: Path | None = None) -> str | None:
        from t2g_core.evaluation.results import results_problem

        return first_problem(results_problem(self.path, within), file_problem(self.report, within))


class PolicySet(Ref):
    """The policies one evaluation compares: ordered name -> model folder or id (the first is the baseline unless
    ``baseline`` says otherwise), the held-out item ids to use (None: every item) and metric histories to plot."""

    models: dict[str, str]
    baseline: str | None = None
    held_out: list[str] | None = None
    histories: dict[str, str] = {}
    registered: dict[str, str] = {}  # name -> registered model version, for promotion
    reward: dict[str, float | str] = {}  # the reward the trained policies learnt from (PolicyRef.reward), reported

    def fingerprint(self) -> dict:
        return {
            "models": {n: model_digest(m) for n, m in self.models.items()},
            "baseline": self.baseline,
            "held_out": self.held_out,
        }
