"""A 2-process run started by ``accelerate launch`` (DDP over gloo on the CPU) equals the 1-process run with the same
global batch (whitening and KL stats are reduced across processes, gradients by DDP; each sample's random stream
depends on its global index, not on the process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.core._launch import accelerate_launch

WORKER = textwrap.dedent("""
    import json
    import sys
    import pandas as pd
    import torch
    torch.set_num_threads(1)
    from t2g_core.config.ppo import PPOConfig
    from t2g_core.ppo import CriticSource, train
    from t2g_core.spans import ParsedFeedback

    model_dir, cases, root = sys.argv[1:4]

    class EdgeWordsCritic:
        def critique(self, row):
            words = row["response"].split()
            if len(words) < 2:
                return ParsedFeedback(critique="short", poor_spans=words)
            return ParsedFeedback(critique="edges", good_spans=[words[-1]], poor_spans=[words[0]])

    prompts = pd.DataFrame({"id": [f"p{i}" for i in range(8)], "task": "summarization",
                            "prompt": [f"Post {i}: " + "Cai lives in Quito " * (1 + i % 3) for i in range(8)]})
    def metrics(rows, texts):  # several named metrics; one eval prompt leaves rank 1 without rows (must not hang)
        return {"words": [float(len(t.split())) for t in texts], "chars": [float(len(t)) for t in texts]}

    for case, (batch_size, minibatches, extra) in enumerate(json.loads(cases)):  # one launch runs every case in turn
        out = f"{root}/case-{case}"
        cfg = PPOConfig(steps=2, batch_size=batch_size, minibatches=minibatches, ppo_epochs=2,
                        sampling={"max_new_tokens": 10}, log_every=1, save_every=100, value_model="head",
                        learning_rate=1e-2, grad_accum=1, **extra)
        res = train(cfg, model_dir, prompts, out, reward_source=CriticSource(EdgeWordsCritic()),
                    eval_df=prompts.head(1), task_metric=metrics)
        info = json.loads(open(out + "/models.json").read())
        if res.steps_done and info["processes"] > 1:
            assert info["distributed"] == "MULTI_CPU", info
        if info["processes"] == 1 or torch.distributed.get_rank() == 0:
            torch.save(res.history, out + "/history.pt")
""")


def _run(command: list[str], tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([*command, str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return out


CASES = [  # (batch_size, minibatches, PPOConfig settings)
    (4, 2, {}),
    (5, 1, {}),  # the processes hold 3 and 2 prompts
    # a group baseline: the 2 samples of each prompt stay on one process, and the critic-free update matches
    (4, 2, {"advantage_estimator": "rloo", "group_size": 2, "max_grad_norm": 0.5}),
]


@pytest.mark.slow
def test_accelerate_launched_two_processes_equal_one_process(tiny_model_dir, tmp_path):
    """Every case of CASES, in one launch of each kind (the processes start once, not once per case)."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    args = [str(script), str(tiny_model_dir), json.dumps(CASES)]
    ones = _run([sys.executable, *args], tmp_path, "one")
    twos = _run([*accelerate_launch(2), *args], tmp_path, "two")
    for case in range(len(CASES)):
        one, two = ones / f"case-{case}", twos / f"case-{case}"
        assert json.loads((two / "models.json").read_text())["processes"] == 2
        a = load_file(str(one / "adapter" / "adapter_model.safetensors"))
        b = load_file(str(two / "adapter" / "adapter_model.safetensors"))
        assert any(float(v.abs().sum()) > 0 for k, v in a.items() if "lora_B" in k), CASES[case]
        # Adam's first updates are ~lr (1e-2) per weight and amplify summation-order noise in near-zero gradients (seen
        # up to 1.6e-4 on some CPUs); a per-process (not global) whitening or gradient mean moves weights by ~7e-2.
        for k in a:
            assert torch.allclose(a[k], b[k], atol=2e-3), (CASES[case], k, float((a[k] - b[k]).abs().max()))
        h1, h2 = torch.load(one / "history.pt"), torch.load(two / "history.pt")
        for x, y in zip(h1, h2, strict=True):
            for key in (
                "reward/span_mean",
                "kl/mean",
                "loss/policy",
                "ppo/approx_kl",
                "reward/positive_frac",
                "task/words",
                "eval/task_chars",
            ):
                assert x[key] == pytest.approx(y[key], abs=1e-5), (CASES[case], key)


@pytest.mark.parametrize("name, kind", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP")])
def test_the_committed_accelerate_configs_load(name, kind):
    """The 8-GPU configurations docs/gpu.md launches with are valid accelerate configs."""
    from accelerate.commands.config.config_args import load_config_from_file

    root = Path(__file__).resolve().parents[2]
    cfg = load_config_from_file(str(root / "deployments" / "accelerate" / f"{name}.yaml"))
    assert cfg.distributed_type.name == kind and cfg.num_processes == 8 and cfg.mixed_precision == "no"
    if kind == "FSDP":
        assert cfg.fsdp_config["fsdp_use_orig_params"] and cfg.fsdp_config["fsdp_version"] == 1
