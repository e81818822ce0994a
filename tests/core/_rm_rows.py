"""Four summaries with their critiques and spans, as reward-model rows under a tokenizer: the reward-model training,
tagger and registry tests' data."""

from __future__ import annotations

import pandas as pd

from t2g_core.reward_model.data import build_rm_data

ITEMS = [  # (post, summary, good spans, poor spans, critique)
    (
        "I am Cai. I live in Quito. I work as a coach.",
        "Cai lives in Paris and works as a coach.",
        ["Cai", "coach"],
        ["Paris"],
        "Paris is wrong.",
    ),
    (
        "I am Bo. I live in Lima. I work as a baker.",
        "Bo lives in Lima and works as a judge.",
        ["Bo", "Lima"],
        ["judge"],
        "judge is wrong.",
    ),
    (
        "I am Ana. I live in Oslo. I work as a nurse.",
        "Ana lives in Oslo and works as a nurse.",
        ["Ana", "Oslo", "nurse"],
        [],
        "All correct.",
    ),
    (
        "I am Eli. I live in Rome. I work as a coach.",
        "Dee lives in Rome and works as a coach.",
        ["Rome", "coach"],
        ["Dee"],
        "Dee is wrong.",
    ),
]


def rm_rows(tok, cfg, items=ITEMS) -> pd.DataFrame:
    fb = pd.DataFrame(
        [
            {
                "id": f"sum-{i}",
                "task": "summarization",
                "prompt": p,
                "response": r,
                "critique": None,
                "reference": None,
                "tests": None,
                "entry_point": None,
                "meta": None,
            }
            for i, (p, r, *_rest) in enumerate(items)
        ]
    )
    ann = pd.DataFrame(
        [
            {
                "id": f"sum-{i}",
                "annotator": "reference",
                "critique": c,
                "good_spans": g,
                "poor_spans": b,
                "reasoning": None,
                "status": "ok",
                "error": None,
                "raw": None,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "latency_s": 0.0,
            }
            for i, (_p, _r, g, b, c) in enumerate(items)
        ]
    )
    df, _ = build_rm_data(fb, ann, tok, cfg)
    return df


def lora_bytes(adapter_dir) -> tuple[int, int, list[str]]:
    """(bytes of the adapter file on disk, numel * itemsize of its LoRA tensors, its other tensors' names)."""
    from safetensors.torch import load_file

    path = adapter_dir / "adapter_model.safetensors"
    state = load_file(str(path))
    lora = sum(t.numel() * t.element_size() for k, t in state.items() if "lora_" in k)
    return path.stat().st_size, lora, [k for k in state if "lora_" not in k]
