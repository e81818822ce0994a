"""What a run started through a deployment may set: the serve-time policy and the check of a run's settings.

Whoever reaches the Prefect API sets a deployment's parameters, so where a key is sent, which key, where outputs go
and whether untrusted code runs unisolated are fixed when the deployments are served (``deployments/serve.py``):

- every endpoint URL is one of ``endpoints``; every key variable one of ``key_envs``;
- ``workspace.root``, ``workspace.mlflow_tracking_uri`` and the inbox are the served ones;
- ``annotate.sandbox_isolation=none`` needs ``allow_unsandboxed``, an opt-in of the process running the flow;
- every input path setting (:func:`~t2g_core.config.base.recipe_path` fields) resolves, symlinks followed, under one
  of ``input_roots``; a Hub id (``ORG/NAME[@REV]``) needs ``hub_ids``;
- every file or folder a stage reference names resolves under the workspace or an input root.

:func:`violations` lists what a run's settings break, each naming the field; the adapters refuse such a run before it
sends any request (``t2g_env.serving``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from t2g_core.config import PipelineConfig, StageConfig
from t2g_core.config.stages import AnnotateSettings, EvaluateSettings, PPOSettings, StageSettings

POLICY_VARIABLE = "T2G_SERVE_POLICY"  # the served process's environment holds the policy as JSON (t2g_env.serving)
UNSANDBOXED_VARIABLE = "T2G_ALLOW_UNSANDBOXED"  # "1" in that environment allows sandbox_isolation=none

# the settings of a stage that calls an outside service -> (its endpoint URL field, its key-variable field), as
# `--set` spells them
ENDPOINT_FIELDS: dict[type[StageSettings], tuple[str, str]] = {
    AnnotateSettings: ("annotate.base_url", "annotate.api_key_env"),
    PPOSettings: ("reward_model.endpoint.base_url", "reward_model.endpoint.api_key_env"),
    EvaluateSettings: ("evaluate.judge_base_url", "evaluate.judge_api_key_env"),
}


class ServePolicy(StageConfig):
    """The settings fixed when the deployments are served; a deployment run may not change them."""

    workspace_root: str = Field(description="The served workspace folder (absolute).")
    mlflow_tracking_uri: str | None = Field(None, description="The served MLflow tracking URI (None: the default).")
    inbox: str = Field(description="The inbox folder the feedback sensor watches (absolute).")
    endpoints: tuple[str, ...] = Field((), description="Endpoint base URLs a run may send requests (and keys) to.")
    key_envs: tuple[str, ...] = Field((), description="Environment variables a run may read an API key from.")
    input_roots: tuple[str, ...] = Field(
        (), description="Folders (absolute, resolved) a run may read input files and model folders from."
    )
    hub_ids: bool = Field(False, description="A run may name Hugging Face model and dataset ids (ORG/NAME[@REV]).")
    allow_unsandboxed: bool = Field(
        False, description="annotate.sandbox_isolation=none is allowed (set by the serving process's environment)."
    )

    def environment(self) -> dict[str, str]:
        """The environment entry that makes this the policy of a process and of the flow runs it starts."""
        return {POLICY_VARIABLE: self.model_dump_json(exclude={"allow_unsandboxed"})}


def input_fields(model: type[StageConfig] = PipelineConfig, prefix: str = "") -> dict[str, tuple[str, ...]]:
    """The settings that name an input file or folder (as ``--set`` spells them) -> their values that are no path."""
    out: dict[str, tuple[str, ...]] = {}
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        if isinstance(field.annotation, type) and issubclass(field.annotation, StageConfig):
            out |= input_fields(field.annotation, f"{prefix}{name}.")
        elif "recipe_path" in extra:
            out[f"{prefix}{name}"] = tuple(extra["recipe_path"])
    return out


INPUT_FIELDS = input_fields()


def under(path: str | Path, roots: tuple[str, ...]) -> bool:
    """Whether ``path``, resolved (symlinks followed, ``..`` removed), lies under one of ``roots``."""
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(Path(root).resolve()) for root in roots)


def input_violation(name: str, value: str, roots: tuple[str, ...], policy: ServePolicy) -> str | None:
    """Why a run may not read ``value`` (a file or folder, or a Hugging Face id) named by ``name``; None when it may."""
    from t2g_core.models.loading import is_hub_id  # the package t2g_core.models loads torch

    if is_hub_id(value):
        if policy.hub_ids:
            return None
        return f"{name}: {value!r} is a Hugging Face id; served runs may name one only with --allow-hub-ids"
    if under(value, roots):
        return None
    return f"{name}: {value!r} is not under a folder runs may read at serve time ({list(roots)})"


def input_violations(config: PipelineConfig, policy: ServePolicy) -> list[str]:
    out = []
    for name, keywords in INPUT_FIELDS.items():
        value = _field(config, name)
        if name == "data.dataset" and config.data.columns is None:
            continue  # the name of a dataset adapter (its files are data.source)
        if value is not None and value not in keywords:
            out.append(input_violation(name, value, policy.input_roots, policy))
    return [problem for problem in out if problem]


def reference_violations(ref: Any, policy: ServePolicy) -> list[str]:
    """What files or folders a stage reference (``ref.paths()``) names outside the workspace and the input roots."""
    roots = (policy.workspace_root, *(r for r in policy.input_roots if not under(r, (policy.workspace_root,))))
    found = (input_violation(type(ref).__name__, path, roots, policy) for path in ref.paths())
    return [problem for problem in found if problem]


def _field(config: PipelineConfig, dotted: str):
    value = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def same_url(a: str, b: str) -> bool:
    """Endpoint URLs compared without a trailing slash or case differences in scheme and host."""
    return a.rstrip("/").lower() == b.rstrip("/").lower()


def workspace_violations(root: str, mlflow_tracking_uri: str | None, policy: ServePolicy) -> list[str]:
    from pathlib import Path

    out = []
    if Path(root).resolve() != Path(policy.workspace_root).resolve():
        out.append(
            f"workspace.root: {root!r} is not the served workspace {policy.workspace_root!r} (fixed at serve time)"
        )
    if mlflow_tracking_uri != policy.mlflow_tracking_uri:
        out.append(
            f"workspace.mlflow_tracking_uri: {mlflow_tracking_uri!r} is not the served one "
            f"{policy.mlflow_tracking_uri!r} (fixed at serve time)"
        )
    return out


def inbox_violations(inbox: str | None, policy: ServePolicy) -> list[str]:
    from pathlib import Path

    if inbox is None or ("://" not in inbox and Path(inbox).resolve() == Path(policy.inbox).resolve()):
        return []
    return [f"inbox: {inbox!r} is not the served inbox {policy.inbox!r} (fixed at serve time)"]


def violations(config: PipelineConfig, policy: ServePolicy) -> list[str]:
    """What ``config`` sets that ``policy`` does not allow a deployment run to set; [] when nothing."""
    out = workspace_violations(config.workspace.root, config.workspace.mlflow_tracking_uri, policy)
    for settings, (url_field, key_field) in ENDPOINT_FIELDS.items():
        url = _field(config, url_field)
        if url is not None and not any(same_url(url, allowed) for allowed in policy.endpoints):
            out.append(f"{url_field}: {url!r} is not an endpoint allowed at serve time ({list(policy.endpoints)})")
        key_env = settings.from_pipeline(config).api_key_env
        if key_env is not None and key_env not in policy.key_envs:
            out.append(
                f"{key_field}: {key_env!r} is not a key variable allowed at serve time ({list(policy.key_envs)})"
            )
    if config.annotate.sandbox_isolation == "none" and not policy.allow_unsandboxed:
        out.append(
            "annotate.sandbox_isolation: 'none' runs untrusted code without isolation; only the serving process's "
            "environment can allow it"
        )
    return out + input_violations(config, policy)
