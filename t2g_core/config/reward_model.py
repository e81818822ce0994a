"""Reward model: generative (writes the critique, then the span JSON; the paper's) or a span tagger (labels tokens);
``docs/reward_model.md`` compares them and explains each setting."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from t2g_core.config import lora
from t2g_core.config.base import StageConfig
from t2g_core.config.lora import LoRA

RENAMED = {
    **lora.RENAMED,
    "save_total_limit": "`fixed at 2 checkpoints (the one resumed from and the one being written)`",
    "eval_examples": "`fixed at 5 rendered examples in the evaluation report`",
}


class EndpointConfig(StageConfig):
    """A reward model served over HTTP (``ppo.reward_source=endpoint``): any OpenAI-compatible server."""

    base_url: str | None = Field(None, description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
    model: str = Field(
        "text2grad-reward-model", description="Model name sent (vLLM: the adapter's --lora-modules name)."
    )
    prompt: Literal["reward_model", "annotator"] = Field(
        "reward_model", description="The reward model's own prompt, or the annotation stage's (an LLM as critic)."
    )
    prompt_version: str = Field("v1", description="Annotator prompt version (prompt=annotator).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Environment variable holding the API key (never logged).")
    concurrency: int = Field(16, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(3, ge=0, description="Retries on 429/5xx/timeouts (the openai client's own).")
    max_tokens: int = Field(512, ge=16, description="Maximum completion tokens per request.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature (0 = greedy).")
    http_backend: Literal["aiohttp", "httpx"] = Field("aiohttp", description="Transport under the openai client.")


class RewardModelConfig(StageConfig):
    SECTION = "reward_model"
    RENAMED = RENAMED
    kind: Literal["generative", "tagger"] = Field(
        "tagger",
        description="generative = writes the critique, then the quoted spans as JSON (the paper's); tagger = labels "
        "each token in one pass.",
    )
    init_from: Literal["reward_model_base", "policy"] = Field(
        "policy", description="Start from models.reward_model_base, or from the policy before PPO."
    )
    finetune: Literal["lora", "full", "frozen"] = Field(
        "lora", description="Train a LoRA adapter, every weight, or (tagger only) the head alone on frozen features."
    )
    tagger_head_size: int = Field(0, ge=0, description="Tagger: width of the head's hidden layer (0 = model width).")
    tagger_heads: int = Field(
        1, ge=1, le=16, description="Tagger: span heads on the shared features; above 1, disputed labels pay less."
    )
    tagger_max_omissions: int = Field(
        8, ge=0, description="Tagger: most missing items it can report before one token (0 = no omission head)."
    )
    max_prompt_tokens: int = Field(
        384, ge=32, description="Token budget of the rendered prompt; the content is truncated, never the template."
    )
    max_target_tokens: int = Field(
        192, ge=16, description="Token budget of the target (critique + span JSON + EOS); longer ones are dropped."
    )
    val_fraction: float = Field(0.1, ge=0, lt=1, description="Fraction of items in the validation split (by id hash).")
    lora: LoRA = Field(
        default_factory=lambda: LoRA(dropout=0.05, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]),
        description="The LoRA adapter (finetune=lora).",
    )
    learning_rate: float = Field(5e-3, gt=0, description="Learning rate (the default suits the tiny demo models).")
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="Learning-rate schedule after warm-up."
    )
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Fraction of the steps warming the learning rate up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    epochs: float = Field(3.0, gt=0, description="Training epochs (ignored when max_steps > 0).")
    max_steps: int = Field(-1, description="Optimizer steps; -1 = derive from epochs.")
    batch_size: int = Field(
        16,
        ge=1,
        description="Examples per forward pass; a step takes batch_size x grad_accum, shared by a layout's processes.",
    )
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps.")
    save_steps: int = Field(50, ge=1, description="Checkpoint every N optimizer steps (training resumes from it).")
    logging_steps: int = Field(1, ge=1, description="Log loss, learning rate and grad norm every N steps.")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory.")
    seed: int = Field(0, description="Training seed.")
    max_new_tokens: int = Field(192, ge=8, description="Generative kind: generation budget when scoring.")
    temperature: float = Field(0.0, ge=0, description="Generative kind: 0 = greedy when scoring, else sampling.")
    score_batch_size: int = Field(16, ge=1, description="Batch size when scoring.")
    grounded_decoding: bool = Field(
        True, description="Generative kind: while a quote is written, allow only tokens that keep it a substring."
    )
    eval_max_items: int = Field(0, ge=0, description="Evaluate on at most this many validation items (0 = all).")
    endpoint: EndpointConfig = Field(
        default_factory=EndpointConfig, description="The reward model served over HTTP (ppo.reward_source=endpoint)."
    )
    registered_name: str = Field("text2grad-reward-model", description="MLflow registered model name.")
    promote_metric: str = Field(
        "span_f1", description="Evaluation metric that decides promotion to champion (higher is better)."
    )

    @model_validator(mode="after")
    def _frozen_is_a_tagger(self) -> RewardModelConfig:
        if self.finetune == "frozen" and self.kind != "tagger":
            raise ValueError(
                "reward_model.finetune=frozen trains only a tagger's head; a generative reward model would learn "
                "nothing (use finetune=lora or full, or kind=tagger)"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _no_precision(cls, data: Any) -> Any:
        if isinstance(data, dict) and "precision" in data:
            raise ValueError(
                f"reward_model.precision ({data['precision']!r}) is not a setting: the reward model trains in "
                "models.dtype, the one dtype knob (bfloat16 weights train under bf16 autocast on a GPU); write "
                "models.dtype: bfloat16 for bf16, float32 for fp32, auto for auto, and remove reward_model.precision"
            )
        return data
