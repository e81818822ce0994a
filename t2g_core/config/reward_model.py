"""Reward model: generative (writes the critique, then the span JSON; the paper's) or a span tagger (labels tokens)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig


class EndpointConfig(StageConfig):
    """A reward model served over HTTP (``ppo.reward_source=endpoint``): any OpenAI-compatible server."""

    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM serving the registered adapter, "
        "see docs/reward_model.md) or a hosted LLM acting as online critic.",
    )
    model: str = Field(
        "text2grad-reward-model",
        description="Model name sent to the endpoint (vLLM: the --lora-modules name of the adapter).",
    )
    prompt: Literal["reward_model", "annotator"] = Field(
        "reward_model",
        description="reward_model = the reward model's own prompt (what a served adapter was trained on); annotator "
        "= the annotation stage's critique prompt (a strong LLM as critic).",
    )
    prompt_version: str = Field("v1", description="Annotator prompt version (prompt=annotator).")
    api_key_env: str = Field(
        "OPENAI_API_KEY", description="Environment variable holding the API key (read by the task/CLI, never logged)."
    )
    concurrency: int = Field(16, ge=1, description="Requests in flight at once.")
    timeout_s: float = Field(60.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(3, ge=0, description="Retries on 429/5xx/timeouts (the openai client's own).")
    max_tokens: int = Field(512, ge=16, description="Maximum completion tokens per request.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature (0 = greedy).")
    http_backend: Literal["aiohttp", "httpx"] = Field("aiohttp", description="Transport under the openai client.")


class RewardModelConfig(StageConfig):
    kind: Literal["generative", "tagger"] = Field(
        "tagger",
        description="generative = a causal LM fine-tuned to write the critique and then the quoted spans as JSON (the "
        "paper's); tagger = a token-classification head (neutral / good / poor per token) on a causal LM, one forward "
        "pass per response, no generation (at the demo's scale only the tagger localises errors: "
        "benchmarks/bench_rm.py).",
    )
    init_from: Literal["reward_model_base", "policy"] = Field(
        "policy",
        description="Model the reward model starts from: models.reward_model_base, or the policy before PPO (which "
        "already knows the task: a tagger on it compares each token with the policy's own prediction).",
    )
    finetune: Literal["lora", "full", "frozen"] = Field(
        "lora",
        description="Train LoRA adapters (the lora_* fields) or every weight of the language model; the tagger's "
        "head is always trained in full. frozen (tagger only) trains the head alone on the base's own features: a "
        "forward pass per step and no language model saved, for a pretrained base that can already look a value up.",
    )
    tagger_head_size: int = Field(0, ge=0, description="Tagger: width of the head's hidden layer (0 = model width).")
    # data
    max_prompt_tokens: int = Field(
        384, ge=32, description="Token budget of the rendered prompt; the content is truncated, never the template."
    )
    max_target_tokens: int = Field(
        192,
        ge=16,
        description="Token budget of the target (critique + span JSON + EOS); longer targets are dropped from "
        "training.",
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=1, description="Fraction of items in the validation split (deterministic by id hash)."
    )
    # LoRA
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha.")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="LoRA dropout.")
    lora_target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], description="Modules that get LoRA adapters."
    )
    # optimisation
    learning_rate: float = Field(
        5e-3,
        gt=0,
        description="Learning rate; the default suits the tiny demo models (benchmarks/bench_rm.py); use 1e-5..2e-5 "
        "for 8B bases.",
    )
    lr_scheduler: Literal["constant", "linear", "cosine"] = Field(
        "linear", description="Learning-rate schedule after warm-up."
    )
    warmup_ratio: float = Field(
        0.05, ge=0, lt=1, description="Fraction of the steps spent warming the learning rate up."
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    epochs: float = Field(
        3.0,
        gt=0,
        description="Training epochs (ignored when max_steps > 0); 3 x 922 demo training items = 173 steps at batch "
        "16.",
    )
    max_steps: int = Field(-1, description="Optimizer steps; -1 = derive from epochs.")
    batch_size: int = Field(16, ge=1, description="Per-device batch size.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps.")
    save_steps: int = Field(
        50, ge=1, description="Checkpoint every N optimizer steps (training resumes from the last one)."
    )
    save_total_limit: int = Field(2, ge=1, description="Checkpoints kept on disk.")
    logging_steps: int = Field(1, ge=1, description="Log metrics (loss, learning rate, grad norm) every N steps.")
    gradient_checkpointing: bool = Field(
        False, description="Trade compute for memory (useful for large bases on a GPU)."
    )
    seed: int = Field(0, description="Training seed.")
    # generation (evaluation and PPO-time scoring)
    max_new_tokens: int = Field(192, ge=8, description="Generation budget when scoring.")
    temperature: float = Field(0.0, ge=0, description="0 = greedy decoding when scoring; else sampling temperature.")
    score_batch_size: int = Field(16, ge=1, description="Batch size of generation when scoring.")
    grounded_decoding: bool = Field(
        True,
        description="Generative kind: while a quote is written, allow only tokens that keep it a substring of the "
        "response (and the span list valid), so every quote matches by construction.",
    )
    eval_max_items: int = Field(0, ge=0, description="Evaluate on at most this many validation items (0 = all).")
    eval_examples: int = Field(5, ge=0, description="Rendered examples kept in the evaluation report.")
    endpoint: EndpointConfig = Field(
        default_factory=EndpointConfig, description="The reward model served over HTTP (ppo.reward_source=endpoint)."
    )
    # registry
    registered_name: str = Field("text2grad-reward-model", description="MLflow registered model name of the adapter.")
    promote_metric: str = Field(
        "span_f1", description="Evaluation metric that decides promotion from candidate to champion (higher is better)."
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
