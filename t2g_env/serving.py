"""The serve-time policy of the process that runs deployment flow runs, read from its environment.

``deployments/serve.py`` puts the policy (:class:`t2g_core.serving.ServePolicy`, JSON) in ``T2G_SERVE_POLICY``
before it serves; the flow runs it starts inherit it, and no flow-run parameter can change a process's environment.
A worker of a work pool gets the same variable from whoever starts it. ``T2G_ALLOW_UNSANDBOXED=1`` in that
environment is the only way to allow ``annotate.sandbox_isolation=none``.

The flows annotate their parameters with :data:`ServedConfig` (the stage-group flows their references with
:data:`ServedRef`, the sensor's with :data:`ServedWorkspace` / :data:`ServedInbox`): Prefect validates a run's
parameters before the run does anything, so a run that breaks the policy fails at once, its message naming each
field, before any file is read or request sent. Without a policy (``t2g run``, tests) nothing is restricted: the
settings are the user's own.
"""

from __future__ import annotations

import json
import os
from typing import Annotated, TypeVar

from pydantic import AfterValidator

from t2g_core.config import PipelineConfig, WorkspaceConfig
from t2g_core.serving import (
    POLICY_VARIABLE,
    UNSANDBOXED_VARIABLE,
    ServePolicy,
    inbox_violations,
    reference_violations,
    violations,
    workspace_violations,
)

R = TypeVar("R")


class PolicyError(ValueError):
    """A deployment run's settings break the serve-time policy; the message names every offending field."""


def serve_policy() -> ServePolicy | None:
    """The policy this process serves under, or None when it is not a served process."""
    raw = os.environ.get(POLICY_VARIABLE)
    if not raw:
        return None
    policy = ServePolicy.model_validate(json.loads(raw))
    return policy.model_copy(update={"allow_unsandboxed": os.environ.get(UNSANDBOXED_VARIABLE) == "1"})


def _refuse(problems: list[str]) -> None:
    if problems:
        raise PolicyError("refused by the serve-time policy: " + "; ".join(problems))


def check_config(config: PipelineConfig) -> PipelineConfig:
    """``config`` unchanged, or :class:`PolicyError` when a served process may not run it."""
    policy = serve_policy()
    if policy is not None:
        _refuse(violations(config, policy))
    return config


def check_workspace(workspace: WorkspaceConfig) -> WorkspaceConfig:
    policy = serve_policy()
    if policy is not None:
        _refuse(workspace_violations(workspace.root, workspace.mlflow_tracking_uri, policy))
    return workspace


def check_inbox(inbox: str | None) -> str | None:
    policy = serve_policy()
    if policy is not None:
        _refuse(inbox_violations(inbox, policy))
    return inbox


def check_reference(ref: R) -> R:
    """A stage reference (or None) unchanged, or :class:`PolicyError` when it names a file outside the workspace and
    the input roots (a stage-group flow run as a deployment receives its references from whoever calls it)."""
    policy = serve_policy()
    if policy is not None and ref is not None:
        _refuse(reference_violations(ref, policy))
    return ref


def allowed(config: PipelineConfig) -> bool:
    """Whether this process may run ``config`` (the flow hooks skip their bookkeeping for a refused run)."""
    policy = serve_policy()
    return policy is None or not violations(config, policy)


ServedConfig = Annotated[PipelineConfig, AfterValidator(check_config)]
ServedWorkspace = Annotated[WorkspaceConfig, AfterValidator(check_workspace)]
ServedInbox = Annotated[str | None, AfterValidator(check_inbox)]
ServedRef = Annotated[R, AfterValidator(check_reference)]  # ServedRef[ArtifactRef]
