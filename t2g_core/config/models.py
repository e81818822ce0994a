"""Base models: a Hugging Face id or folder, or the tiny local models the project builds itself."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from t2g_core.config.base import StageConfig, recipe_path


class TinyModelConfig(StageConfig):
    architecture: Literal["llama", "gpt2"] = Field(
        "llama", description="Architecture of the tiny model built from scratch."
    )
    vocab_size: int = Field(1024, ge=64, description="Byte-level BPE vocabulary size trained on the demo corpus.")
    hidden_size: int = Field(128, ge=16, description="Model width.")
    intermediate_size: int | None = Field(
        256, ge=16, description="MLP width of the Llama blocks (None = 4 x hidden_size)."
    )
    num_layers: int = Field(2, ge=1, description="Number of transformer blocks.")
    num_heads: int = Field(4, ge=1, description="Attention heads.")
    max_positions: int = Field(
        2048, ge=64, description="Maximum sequence length (RoPE: no parameters depend on it for llama)."
    )
    warm_start_steps: int = Field(
        300,
        ge=0,
        description="Language-model pretraining steps on the demo corpus (0 = random init); the reward model is "
        "LoRA-tuned on "
        "this base, and with 60 x 32 it never learnt the JSON format (0% valid) where 300 x 64 gives 100%.",
    )
    warm_start_lr: float = Field(2e-3, gt=0, description="Learning rate of the warm start.")
    warm_start_batch_size: int = Field(64, ge=1, description="Batch size of the warm start.")
    warm_start_block_size: int = Field(128, ge=8, description="Tokens per packed window of the LM warm start.")
    policy_sft_steps: int = Field(
        600,
        ge=0,
        description="Supervised steps of the policy on (rendered prompt -> correct response): learns the task.",
    )
    policy_noise_steps: int = Field(
        60,
        ge=0,
        description="Then supervised steps on summaries with each fact wrong at p_halluc, so the policy makes errors "
        "PPO can fix.",
    )
    policy_noise_lr: float = Field(1e-3, gt=0, description="Learning rate of the noisy phase.")
    policy_sft_lr: float = Field(3e-3, gt=0, description="Learning rate of the policy's supervised warm start.")
    policy_sft_batch_size: int = Field(32, ge=1, description="Batch size of the policy's supervised warm start.")
    policy_sft_examples: int = Field(
        4096, ge=1, description="Synthetic (post, noisy summary) pairs drawn for the policy warm start (summarization)."
    )
    p_halluc: float = Field(
        0.35,
        ge=0.0,
        le=1.0,
        description="Probability that each fact of a warm-start summary is replaced by a wrong value, so the policy "
        "makes errors PPO can fix.",
    )
    seed: int = Field(0, description="Seed for initialisation and warm start.")
    checkpoint_every: int = Field(
        50,
        ge=1,
        description="Checkpoint each training phase of the build every N steps: a build stopped by a time limit or "
        "a kill resumes from its last checkpoint, with the same result as an uninterrupted one (not part of the "
        "models' identity).",
    )


class ModelsConfig(StageConfig):
    policy: str = Field(
        "tiny",
        description="Policy base model: 'tiny' (built locally), a folder, or a Hugging Face id, optionally pinned as "
        "ORG/NAME@REVISION (branch, tag or commit; resolved through the local Hugging Face cache when offline).",
        json_schema_extra=recipe_path("tiny"),
    )
    reward_model_base: str = Field(
        "tiny",
        description="Reward-model base: 'tiny' (built locally), a folder, or a Hugging Face id ORG/NAME[@REVISION].",
        json_schema_extra=recipe_path("tiny"),
    )
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="How the tiny local models are built.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Weights dtype of every stage that loads a model (PPO policy, value and reference; reward-model "
        "training and scoring, both kinds; evaluation; vLLM rollouts): auto = bfloat16 on a GPU that supports it, "
        "float32 on CPU; resolved once per stage for its device. Trainable LoRA, value-head and tagger-head weights "
        "stay float32; bfloat16 weights train the generative reward model under bf16 autocast on a GPU. "
        "ppo.generation_backend=vllm refuses float32.",
    )
