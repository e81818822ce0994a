"""Each CPU-sized recipe runs the whole pipeline end to end on its fixture slice (tiny models, offline critics)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from t2g_core.config import load_config
from t2g_core.store import read_artifact

ROOT = Path(__file__).resolve().parents[2]
FULL = ["summarization-slf5k", "code-kodcode", "qa-ultrafeedback"]


@pytest.mark.parametrize("name", FULL)
def test_full_recipes_validate_completely(name):
    cfg = load_config(ROOT / "recipes" / f"{name}.yaml")
    assert (
        cfg.data.dataset
        and cfg.models.policy.startswith("meta-llama/")
        and cfg.models.reward_model_base.startswith("meta-llama/")
    )
    assert cfg.annotate.annotator == "llm" and cfg.annotate.base_url
    assert cfg.placement.pool("ppo") == "t2g-gpu" and cfg.placement.pool("reward_model") == "t2g-gpu"
    assert cfg.models.dtype == "bfloat16" and cfg.ppo.learning_rate == 1e-6  # bf16 weights: bf16 reward-model autocast


def test_every_shipped_recipe_and_preset_is_checked_as_shipped():
    """The recipes are each validated above (the full ones: no GPU or Hub here) or run end to end below (the tiny
    ones); the presets: tiny runs end to end in tests/cli/test_run_tiny.py, small and full validate as shipped."""
    from t2g_core.config.presets import PRESETS

    shipped = {path.stem for path in (ROOT / "recipes").glob("*.yaml")}
    assert shipped == {*FULL, *(f"{name}-tiny" for name in FULL), "summarization-smollm2"}
    assert set(PRESETS) == {"tiny", "small", "full"}
    small = load_config(None, [], "small")
    assert (small.ppo.steps, small.evaluate.max_prompts, small.data.n_items) == (20, 64, load_config().data.n_items)
    assert load_config(None, [], "full") == load_config()


def test_the_smollm2_recipe_warms_up_and_trains_a_frozen_tagger_on_the_untouched_model():
    cfg = load_config(ROOT / "recipes" / "summarization-smollm2.yaml")
    assert cfg.models.policy == cfg.models.reward_model_base == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert cfg.warmup.enabled and cfg.data.source == "demo" and cfg.annotate.annotator == "reference"
    assert (cfg.reward_model.kind, cfg.reward_model.finetune, cfg.reward_model.init_from) == (
        "tagger",
        "frozen",
        "reward_model_base",
    )
    assert (cfg.ppo.reward_mode, cfg.ppo.reward_source, cfg.ppo.value_model) == ("span", "reward_model", "head")


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory, prefect_harness):
    """``recipe_run(name)``: (config, outputs) of the tiny recipe's pipeline, run once per module from a folder that is
    not the repository root (the recipe's data path is relative to the recipe): the refresh test starts from the run
    the end-to-end test checked instead of training the same pipeline again."""
    from flows.text2grad import text2grad

    runs = {}

    def run(name: str):
        if name not in runs:
            folder = tmp_path_factory.mktemp(name)
            with pytest.MonkeyPatch.context() as mp:
                mp.chdir(folder)
                mp.delenv("MLFLOW_TRACKING_URI", raising=False)
                cfg = load_config(ROOT / "recipes" / f"{name}.yaml", [f"workspace.root={folder / 'ws'}"])
                runs[name] = cfg, text2grad(config=cfg)
        return runs[name]

    return run


@pytest.mark.slow
@pytest.mark.xdist_group("recipe-runs")  # on the worker that holds the module's runs
@pytest.mark.parametrize("name", [f"{n}-tiny" for n in FULL])
def test_tiny_recipe_runs_end_to_end(name, recipe_run):
    cfg, out = recipe_run(name)
    feedback = read_artifact(out["feedback"].path, "feedback")
    assert len(feedback) >= 24 and set(feedback["task"]) == {cfg.data.task}
    annotations = read_artifact(out["annotate"].path, "annotations")
    assert len(annotations) == len(feedback) and (annotations["status"] == "ok").mean() > 0.9
    assert out["reward_model"].version and Path(out["reward_model"].model_dir).is_dir()
    assert Path(out["ppo"].adapter_dir, "adapter_config.json").exists() and out["ppo"].version
    history = json.loads(Path(out["ppo"].history_path).read_text())
    assert len(history) >= cfg.ppo.steps
    assert out["evaluate"].n_rows > 0


@pytest.mark.slow
@pytest.mark.xdist_group("recipe-runs")
def test_refresh_recomputes_ppo_and_evaluation_but_not_the_reward_model(recipe_run, tmp_path, monkeypatch):
    """``--refresh ppo`` must train again (not resume the finished run folder) and evaluate again; upstream stays."""
    from flows.text2grad import text2grad

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg, out = recipe_run("qa-ultrafeedback-tiny")
    folders = {
        "ppo": Path(out["ppo"].run_dir),
        "evaluate": Path(out["evaluate"].path),
        "reward_model": Path(out["reward_model"].model_dir).parent,
    }
    for folder in folders.values():
        (folder / "left-by-the-first-run").write_text("x")
    summary_written = Path(out["evaluate"].summary).stat().st_mtime_ns
    again = text2grad(config=cfg, refresh=["ppo"])
    assert not (folders["ppo"] / "left-by-the-first-run").exists()  # a fresh run folder, trained from the start
    assert len(json.loads(Path(again["ppo"].history_path).read_text())) >= cfg.ppo.steps
    assert Path(again["evaluate"].summary).stat().st_mtime_ns > summary_written  # scored again
    assert (folders["reward_model"] / "left-by-the-first-run").exists()  # upstream of ppo: cached, untouched
    assert again["reward_model"] == out["reward_model"]


def test_input_paths_in_a_recipe_are_relative_to_the_recipe_and_overrides_to_the_current_folder(tmp_path, monkeypatch):
    recipe_dir = tmp_path / "recipes"
    (recipe_dir / "data").mkdir(parents=True)
    (recipe_dir / "data" / "feedback.parquet").write_bytes(b"")
    (recipe_dir / "my-policy").mkdir()
    (recipe_dir / "r.yaml").write_text(
        "workspace: {root: ws}\n"
        "data: {source: data/feedback.parquet}\n"
        "models: {policy: ./my-policy, reward_model_base: meta-llama/Llama-3.1-8B-Instruct@main}\n"
        "ppo: {reward_model_path: ../rm}\n"
    )
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    cfg = load_config(recipe_dir / "r.yaml")
    assert cfg.data.source == str(recipe_dir / "data" / "feedback.parquet")
    assert cfg.models.policy == str(recipe_dir / "my-policy")
    assert cfg.models.reward_model_base == "meta-llama/Llama-3.1-8B-Instruct@main"  # a Hub id is not a path
    assert cfg.ppo.reward_model_path == str(tmp_path / "rm")
    assert cfg.workspace.root == "ws"  # outputs: relative to where the command runs
    again = load_config(recipe_dir / "r.yaml", ["data.source=other.parquet", "models.policy=tiny"])
    assert again.data.source == "other.parquet" and again.models.policy == "tiny"
    assert load_config(ROOT / "recipes" / "summarization-slf5k-tiny.yaml").data.source == str(
        ROOT / "tests" / "fixtures" / "datasets" / "tiny" / "slf5k"
    )


@pytest.mark.parametrize("name", FULL)
def test_placed_stage_groups_have_a_deployment_on_their_pool(name):
    """The recipes, docs and deployments/prefect.yaml name the same pools (before: t2g-gpu vs t2g-gpu-k8s)."""
    import yaml

    placement = load_config(ROOT / "recipes" / f"{name}.yaml").placement.model_dump()
    deployments = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())["deployments"]
    on_pool = {(d["entrypoint"].rsplit(":", 1)[1], d["work_pool"]["name"]) for d in deployments}
    placed = {(group, pool) for group, pool in placement.items() if pool}
    assert placed and placed <= on_pool
