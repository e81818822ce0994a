"""docs/own-data.md runs as written: every ``t2g`` command of its ``bash`` blocks, in order, in one folder, on tiny
models; a command marked ``# exits 2`` must fail with exactly the message of the ``text`` block after it.

The test brings what a user brings: ``raw.jsonl``, 30 human critiques that only name what is wrong (praise quotes no
words: "Correct.", "Good, nothing missing."), and a GGUF file ``my-model.gguf`` of a tiny model. The guide's first
small run (``--preset tiny``, ``annotate.annotator=ground``) takes that file to a trained, evaluated policy as
written; to the run that names the user's model the test adds ``--preset tiny``, the preset as shipped.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "own-data.md"


def guide_commands(text: str) -> list[tuple[list[str], int, str | None]]:
    """(argv, expected exit code, expected message) of every ``t2g`` command in the guide's ``bash`` blocks."""
    blocks = re.findall(r"```(\w+)\n(.*?)```", text, re.S)
    out: list[tuple[list[str], int, str | None]] = []
    for i, (lang, body) in enumerate(blocks):
        if lang != "bash":
            continue
        for line in body.replace("\\\n", " ").splitlines():
            command, _, comment = line.partition("#")
            if command.strip().startswith("t2g "):
                fails = "exits 2" in comment
                message = blocks[i + 1][1] if fails and i + 1 < len(blocks) and blocks[i + 1][0] == "text" else None
                out.append((shlex.split(command), 2 if fails else 0, message))
    return out


def test_the_guide_has_the_commands_it_promises():
    commands = [" ".join(argv[:3]) for argv, _, _ in guide_commands(GUIDE.read_text(encoding="utf-8"))]
    assert commands == [
        "t2g ingest --dataset",
        "t2g data demo",
        "t2g feedback check",
        "t2g run -w",
        "t2g run -w",
        "t2g models import-gguf",
        "t2g run -w",
        "t2g lineage candidate",
    ]
    first_run = guide_commands(GUIDE.read_text(encoding="utf-8"))[4][0]
    assert "--preset" in first_run and "annotate.annotator=ground" in first_run  # the first small command


def _inputs(folder: Path, tiny_model_dir: Path) -> None:
    """What a user brings: a raw file of critiques with their own column names, and a model as a GGUF file."""
    from tests.core._gguf import write_tiny_gguf
    from tests.core._human_critiques import complaints_only

    raw = complaints_only(30).rename(columns={"prompt": "question", "response": "answer", "critique": "comment"})
    raw[["question", "answer", "comment"]].to_json(folder / "raw.jsonl", orient="records", lines=True)
    write_tiny_gguf(tiny_model_dir, folder / "my-model.gguf", quant="Q8_0")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_command_of_the_guide_runs_on_tiny_models(tmp_path, tiny_model_dir):
    pytest.importorskip("gguf")
    _inputs(tmp_path, tiny_model_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PREFECT_HOME")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "COLUMNS": "1000",  # one message on one line
    }
    t2g = str(Path(sys.executable).parent / "t2g")
    for argv, code, message in guide_commands(GUIDE.read_text(encoding="utf-8")):
        extra = ["--preset", "tiny"] if argv[1] == "run" and "--preset" not in argv and code == 0 else []
        proc = subprocess.run(
            [t2g, *argv[1:], *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode == code, f"{' '.join(argv)}\n{output[-6000:]}"
        if message is not None:
            assert " ".join(message.split()) in " ".join(output.split()), output[-3000:]
            assert output.count("error:") == 1 and not (tmp_path / "ws" / "models").exists()

    # the first small run: human critiques that only name what is wrong, to a trained and evaluated policy
    assert list(tmp_path.glob("first/checkpoints/ppo/*/adapter/adapter_config.json"))
    assert list(tmp_path.glob("first/reports/evaluate/*/summary.json"))
    from t2g_core.store import read_artifact

    (first,) = tmp_path.glob("first/artifacts/annotations/annotate-*")
    spans = read_artifact(first, "annotations")
    assert spans["good_spans"].map(len).sum() == 0 and spans["poor_spans"].map(len).sum() > 0

    (summary,) = tmp_path.glob("ws/reports/evaluate/*/summary.json")
    metrics = json.loads(summary.read_text())["policies"]["ppo"]["metrics"]
    assert {"rm_reward", "rm_poor_spans"} <= set(metrics) and "rouge1" not in metrics  # judged without references
    (run,) = tmp_path.glob("ws/checkpoints/ppo/*/models.json")
    assert json.loads(run.read_text())["policy"]["name"] == "me/my-model"  # the user's model, by its id
    (annotations,) = tmp_path.glob("ws/artifacts/annotations/annotate-*")
    frame = read_artifact(annotations, "annotations")
    assert set(frame["annotator"]) == {"ground"} and frame["poor_spans"].map(len).sum() > 0
