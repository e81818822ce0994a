"""A span tagger trained in seconds on annotated demo summaries (the reference critic's labels, omissions included),
for tests of the reward model's use: its folder, the rm_data it was trained on and the feedback holding the
responses."""

from __future__ import annotations

from pathlib import Path

from t2g_core.config import AnnotateConfig, RewardModelConfig


def tagger_cfg(**kw) -> RewardModelConfig:
    base = {"kind": "tagger", "finetune": "lora", "learning_rate": 1e-2, "batch_size": 8, "save_steps": 1000}
    return RewardModelConfig(**{**base, "val_fraction": 0.0, **kw})


def demo_tagger(model_dir, out: Path, *, n_items: int = 48, steps: int = 20, seed: int = 0, **cfg):
    """(tagger folder, rm_data, feedback) of a tagger trained for ``steps`` steps on ``n_items`` demo items."""
    from transformers import AutoTokenizer

    from t2g_core.annotators import annotate
    from t2g_core.demo import make_demo_feedback
    from t2g_core.reward_model.data import build_rm_data
    from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples

    fb = make_demo_feedback("summarization", n_items, seed=seed)
    annotations = annotate(fb, AnnotateConfig(annotator="reference"), progress=False).frame
    rm_cfg = tagger_cfg(max_steps=steps, **cfg)
    rm_df, _ = build_rm_data(fb, annotations, AutoTokenizer.from_pretrained(str(model_dir)), rm_cfg)
    result = fit_tagger(rm_cfg, model_dir, tagger_examples(rm_df, fb), out, resume=False)
    return result.adapter_dir, rm_df, fb
