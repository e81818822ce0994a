"""Placement: run a stage group inline, or as a deployment on the work pool ``config.placement`` names.

A stage group placed on pool ``P`` runs as the deployment of its flow whose work pool is ``P`` (for example
``ppo/gpu`` from ``deployments/prefect.yaml``, or one made with ``python deployments/serve.py --pool P``);
the orchestrating flow submits it as a subflow run and waits for its result, which lives on storage both sides see
(the workspace's ``prefect-results``). Without such a deployment the run fails at once, naming the command to create
one. ``config.placement`` is keyed by the stage groups of ``t2g_core.stages.registry``: each group's flow in
``flows/stages.py`` has its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class PlacementError(RuntimeError):
    """A stage group is placed on a work pool that has no deployment of its flow, or its run did not complete."""


def deployment_on_pool(flow_name: str, pool: str) -> str:
    """``<flow>/<deployment>`` of the one deployment of ``flow_name`` on work pool ``pool``."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName, WorkPoolFilter, WorkPoolFilterName

    with get_client(sync_client=True) as client:
        found = client.read_deployments(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
            work_pool_filter=WorkPoolFilter(name=WorkPoolFilterName(any_=[pool])),
        )
    if not found:
        raise PlacementError(
            f"placement puts flow {flow_name!r} on work pool {pool!r}, but no deployment of it runs on that pool; "
            f"create one with `python deployments/serve.py --pool {pool}` or `prefect deploy` from "
            "deployments/prefect.yaml"
        )
    names = sorted(d.name for d in found)
    if len(names) > 1:
        raise PlacementError(f"flow {flow_name!r} has several deployments on work pool {pool!r} ({names}); keep one")
    return f"{flow_name}/{names[0]}"


def placed(stage_flow: Any, pool: str | None, **params: Any) -> Any:
    """``stage_flow(**params)`` here when ``pool`` is None, else its deployment on ``pool`` (waiting for it)."""
    if pool is None:
        from prefect.settings import temporary_settings

        # an inline subflow lives and dies with this process, whose flow run sends the heartbeats; its own would only
        # make each stage's end wait for a heartbeat thread to wake (up to a second, eight stages a run)
        with temporary_settings(updates={"flows.heartbeat_frequency": None}):
            return stage_flow(**params)
    from prefect.deployments import run_deployment

    name = deployment_on_pool(stage_flow.name, pool)
    # coerced to the flow's declared types first: a result a retried run reloads may come back as the model's plain
    # fields (``schema_name``), which the deployment's parameter schema (``schema``) refuses
    typed = stage_flow.validate_parameters(params)
    jsonable = {k: _jsonable(v) for k, v in typed.items()}
    flow_run = run_deployment(name, parameters=jsonable, as_subflow=True)
    if not flow_run.state.is_completed():
        raise PlacementError(
            f"{name}: flow run {flow_run.id} on pool {pool!r} ended {flow_run.state.name}: "
            f"{flow_run.state.message or ''}"
        )
    return _typed(stage_flow, flow_run.state.result())


@dataclass(frozen=True)
class Placement:
    """The stage groups of one pipeline run: ``place(group, *inputs)`` is ``group(config, *inputs, forced=forced)``,
    run where ``config.placement`` puts it (a deployment receives the parameters by the names the flow gives them)."""

    config: Any  # PipelineConfig
    forced: list[str]

    def __call__(self, stage_flow: Any, *inputs: Any) -> Any:
        import inspect

        pool = self.config.placement.pool(stage_flow.name)
        params = inspect.signature(stage_flow.fn).bind(self.config, *inputs, forced=self.forced).arguments
        return placed(stage_flow, pool, **params)


def _jsonable(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True) if hasattr(value, "model_dump") else value


def _typed(stage_flow: Any, result: Any) -> Any:
    """The result as the flow's declared return type (typed references come back from storage as plain JSON)."""
    import typing

    from pydantic import TypeAdapter

    returns = typing.get_type_hints(stage_flow.fn).get("return", Any)
    return TypeAdapter(returns).validate_python(result)
