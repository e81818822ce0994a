"""The stage table is the one list of stages: what is not derived from it is checked against it here."""

from __future__ import annotations

import typing
from pathlib import Path

import yaml

from t2g_core.config import PipelineConfig
from t2g_core.config.orchestration import Group, StageName
from t2g_core.stages import registry

ROOT = Path(__file__).resolve().parents[2]


def test_the_config_level_names_are_the_tables():
    assert typing.get_args(StageName) == registry.ORDER
    assert typing.get_args(Group) == registry.PLACEABLE
    assert set(registry.GROUPS) == set(registry.PLACEABLE) | set(registry.INLINE_GROUPS)


def test_every_optional_stage_has_its_switch():
    for stage in registry.STAGES:
        section = PipelineConfig.model_fields.get(stage.name)
        assert (section is not None and "enabled" in section.annotation.model_fields) == stage.optional, stage.name


def test_the_deployments_file_places_groups_of_the_table_by_their_names():
    deployments = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())["deployments"]
    placed = [d for d in deployments if d["entrypoint"].startswith("flows/stages.py:")]
    groups = {d["entrypoint"].rsplit(":", 1)[1] for d in placed}
    assert groups <= set(registry.PLACEABLE)
    on_gpu = {d["entrypoint"].rsplit(":", 1)[1] for d in placed if d["name"] == "gpu"}
    assert on_gpu == {s.group for s in registry.STAGES if s.system_metrics and s.group in registry.PLACEABLE}
    for d in placed:
        assert f"placement.{d['entrypoint'].rsplit(':', 1)[1]} = " in d["description"], d
