"""Quiet, helpful output: did-you-mean for config keys, recipes listed for a missing `-c` file, `t2g config show
--section`, presets and settings that cannot work together, plot titles in words, one heatmap index page, library
deprecation warnings filtered at the CLI entry, clean package metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from t2g_cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_an_unknown_key_gets_a_did_you_mean():
    result = runner.invoke(app, ["config", "show", "--set", "ppo.step=10"])
    assert result.exit_code == 2
    assert "ppo.step: Extra inputs are not permitted (did you mean ppo.steps?)" in result.output
    section = runner.invoke(app, ["config", "show", "--set", "ppp.steps=10"])
    assert "(did you mean ppo?)" in section.output


def test_a_missing_config_file_lists_the_recipes(tmp_path):
    result = runner.invoke(app, ["config", "show", "-c", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "no such configuration file" in result.output
    assert "summarization-slf5k-tiny.yaml" in result.output and str(ROOT / "recipes") in result.output


def test_config_show_prints_one_section():
    result = runner.invoke(app, ["config", "show", "--section", "holdout"])
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.output) == {"eval_fraction": 0.25, "seed": 0}
    nested = runner.invoke(app, ["config", "show", "--section", "ppo.sampling", "--preset", "tiny"])
    assert yaml.safe_load(nested.output)["max_new_tokens"] == 12
    unknown = runner.invoke(app, ["config", "show", "--section", "ppoo"])
    assert unknown.exit_code == 2 and "sections here:" in unknown.output and "ppo" in unknown.output


def test_a_tagger_on_too_few_items_is_refused_with_the_way_out():
    result = runner.invoke(app, ["config", "show", "--set", "data.n_items=128"])
    assert result.exit_code == 2
    assert "data.n_items=128 is too few for reward_model.kind=tagger" in result.output
    assert "checks.small_tagger_data=true" in result.output
    accepted = ["--set", "data.n_items=128", "--set", "checks.small_tagger_data=true", "--section", "data"]
    assert runner.invoke(app, ["config", "show", *accepted]).exit_code == 0
    generative = ["--set", "data.n_items=128", "--set", "reward_model.kind=generative", "--section", "data"]
    assert runner.invoke(app, ["config", "show", *generative]).exit_code == 0


def test_presets_apply_before_the_file_and_the_overrides(tmp_path):
    from t2g_core.config import PipelineConfig, load_config
    from t2g_core.config.presets import with_preset

    recipe = tmp_path / "r.yaml"
    recipe.write_text("ppo:\n  steps: 7\n")
    cfg = load_config(recipe, ["ppo.batch_size=8"], preset="tiny")
    assert (cfg.data.n_items, cfg.ppo.steps, cfg.ppo.batch_size) == (24, 7, 8)
    assert load_config(None, [], preset="full") == PipelineConfig()
    with pytest.raises(ValueError, match="no preset 'huge'"):
        load_config(None, [], preset="huge")
    # the run form's preset: every field left at its default takes the preset's value, a changed one is kept
    formed = with_preset(PipelineConfig.model_validate({"ppo": {"steps": 7}}), "tiny")
    assert (formed.data.n_items, formed.ppo.steps, formed.ppo.batch_size) == (24, 7, 4)
    assert with_preset(PipelineConfig(), "small").ppo.steps == 20


def test_a_value_given_on_the_command_line_wins_over_the_preset_even_when_it_is_the_default(tmp_path):
    """`t2g run --preset tiny --set ppo.steps=40` (the same configuration as `t2g config show`) trains 40 steps, the
    default, not the preset's 4; so does a -c file that says 40."""
    shown = runner.invoke(app, ["config", "show", "--preset", "tiny", "--set", "ppo.steps=40", "--section", "ppo"])
    assert shown.exit_code == 0 and yaml.safe_load(shown.output)["steps"] == 40
    recipe = tmp_path / "r.yaml"
    recipe.write_text("ppo:\n  steps: 40\n")
    from_file = runner.invoke(app, ["config", "show", "--preset", "tiny", "-c", str(recipe), "--section", "ppo"])
    assert yaml.safe_load(from_file.output)["steps"] == 40 and yaml.safe_load(from_file.output)["batch_size"] == 4


def test_plot_titles_are_words_with_units_and_direction():
    from t2g_core.evaluation.titles import is_percent, title

    assert title("fact_error") == "fact error (%, lower is better)"
    assert title("eval/task_fact_error") == "held-out fact error (%, lower is better)"
    assert title("kl/mean") == "KL from the policy before PPO (nats per response)"
    assert is_percent("fact_error") and not is_percent("bleu")


def test_the_metric_bars_show_titles_in_words(tmp_path, monkeypatch):
    import matplotlib.axes

    from t2g_core.evaluation.report import metric_bars

    titles: list[str] = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, text, **kw: titles.append(text))
    summary = {
        "task": "summarization",
        "baseline": "warm_start",
        "policies": {p: {"metrics": {"fact_error": v}} for p, v in (("warm_start", 0.4), ("ppo", 0.05))},
        "comparisons": [{"policy": "ppo", "metric": "fact_error", "low": -0.4, "high": -0.3, "diff": -0.35}],
    }
    metric_bars(summary, tmp_path / "m.png")
    assert titles == ["fact error (%, lower is better)"]


def test_one_index_page_links_every_heatmap(tmp_path):
    from t2g_core.ppo.report import write_heatmap, write_heatmap_index

    assert write_heatmap_index(tmp_path / "none") is None
    sample = {"prompt": "p", "text": "ab", "offsets": [(0, 1), (1, 2)], "rewards": [1.0, -1.0], "critique": "c"}
    for step in (0, 5, 10):
        write_heatmap(tmp_path / f"step-{step:06d}.html", step, [sample])
    index = write_heatmap_index(tmp_path).read_text()
    assert [f'href="step-{s:06d}.html"' in index for s in (0, 5, 10)] == [True] * 3


def test_the_cli_entry_filters_library_deprecation_warnings_only():
    code = (
        "import warnings, t2g_cli.runtime as r; r.quiet_libraries()\n"
        "warnings.warn_explicit('from a library', FutureWarning, 'x.py', 1, module='transformers.utils')\n"
        "warnings.warn_explicit('from us', FutureWarning, 'x.py', 1, module='t2g_core.stages')\n"
        "import os; print(os.environ['HF_HUB_DISABLE_PROGRESS_BARS'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "from us" in out.stderr and "from a library" not in out.stderr
    assert out.stdout.strip() == "1"


def test_package_metadata_raises_no_setuptools_deprecation(monkeypatch):
    import warnings

    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Distribution().parse_config_files()
    assert [str(w.message)[:80] for w in caught if "Deprecat" in w.category.__name__] == []
