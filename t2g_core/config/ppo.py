"""Span-reward PPO: one trainer, four reward modes, five advantage estimators."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from t2g_core.config.base import StageConfig, recipe_path
from t2g_core.config.critique_loop import CritiqueLoopConfig
from t2g_core.config.sampling import Sampling

HYBRID_MODES = ("span", "dense")  # reward modes where a terminal scalar adds information (terminal_coef)
WORD_LABEL_MODES = ("dense",)  # reward modes whose labels are the critic's word-level scores
CRITIC_FREE = ("rloo", "grpo")  # advantage estimators with a group baseline instead of a value model


class RewardModelGate(StageConfig):
    """How good the trained reward model must be on held-out items before PPO learns from it."""

    min_poor_f1: float = Field(
        0.5,
        ge=0,
        le=1,
        description="With ground truth (demo data): the least character F1 of its poor spans against the true flaws "
        "(truth_poor_char_f1; the demo's tagger reaches 0.98).",
    )
    min_flaw_recall: float = Field(
        0.25,
        ge=0,
        le=1,
        description="With ground truth: the least share of each kind of flaw it marks poor (truth_recall_invented / "
        "_swapped / _redundant; the demo's tagger catches 0.86 of the invented values). A reward model that catches "
        "none of a kind rewards it: PPO would learn to make that error.",
    )
    min_agreement_f1: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Without ground truth: the least span F1 of its spans against the annotator's on held-out items "
        "(span_f1: same label, overlap IoU >= 0.5).",
    )
    allow_weak: bool = Field(
        False, description="Train PPO on a reward model below these floors anyway (the shortfall is logged)."
    )


class PPOConfig(StageConfig):
    reward_mode: Literal["span", "scalar", "uniform", "dense"] = Field(
        "span",
        description="span = Text2Grad token rewards from the critic's spans; scalar = their sum on the last token; "
        "uniform = that sum / T on every token (the scalar's information, spread); dense = the paper's ablation, the "
        "critic's word-level labels on every word's tokens.",
    )
    advantage: Literal["gae", "span_local", "span_bootstrap", "rloo", "grpo"] = Field(
        "gae",
        description="Credit assignment (t2g_core.rl.advantages): gae; span_local = each token gets the rewards up to "
        "the token after its span (a later span's reward never reaches it); span_bootstrap = GAE whose trace stops "
        "there, bootstrapping the critic's value; both add the terminal reward (a verdict, failure penalties) to "
        "every token with a leave-one-out baseline; rloo / grpo = critic-free group baselines over group_size "
        "samples per prompt, span rewards kept per token.",
    )
    grpo_scale: Literal["none", "position_std"] = Field(
        "none",
        description="What grpo divides its per-position group-centred reward-to-go by: none = nothing (Dr. GRPO; the "
        "batch whitening sets the scale, and grpo equals rloo up to (k-1)/k); position_std = the group's standard "
        "deviation at that token position, floored at grpo_std_floor.",
    )
    grpo_std_floor: float = Field(
        1.0,
        gt=0,
        description="grpo_scale=position_std: the least scale, in reward units (1 = one label at span_coef 1), so "
        "positions where the group's returns (nearly) tie are not blown up.",
    )
    group_size: int = Field(
        1, ge=1, description="Samples per prompt in a batch (k); rloo and grpo need k >= 2 and batch_size % k == 0."
    )
    omission_penalty: float = Field(
        1.0,
        ge=0,
        description="Reward -p per item the critic reports missing (a left-out fact, unimplemented behaviour), in "
        "label units: at 1 a missing fact costs what a wrong one does, so omitting never pays.",
    )
    omission_placement: Literal["anchor", "end"] = Field(
        "anchor",
        description="Where an omission's penalty goes: anchor = the token where the content belonged (the last token "
        "when the critic gives no place); end = the last token.",
    )
    reward_source: Literal["reward_model", "endpoint", "oracle"] = Field(
        "reward_model",
        description="reward_model = the reward model the pipeline trained (the paper's loop; a tagger or a generative "
        "model, reward_model.kind); endpoint = a reward model served over HTTP (reward_model.endpoint: vLLM serving "
        "the adapter, or an LLM as online critic); oracle = the task's programmatic critic (reference or code "
        "critic), for benchmarks.",
    )
    steps: int = Field(40, ge=1, description="PPO steps (rollout batches).")
    batch_size: int = Field(64, ge=1, description="Prompts per rollout batch (global).")
    minibatches: int = Field(2, ge=1, description="Minibatches per PPO epoch.")
    grad_accum: int = Field(1, ge=1, description="Gradient accumulation steps per minibatch.")
    ppo_epochs: int = Field(4, ge=1, description="Passes over each rollout batch.")
    learning_rate: float = Field(1e-3, gt=0, description="Policy (LoRA) learning rate.")
    value_learning_rate: float = Field(3e-4, gt=0, description="Value model learning rate.")
    lora_r: int = Field(16, ge=1, description="Policy LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="Policy LoRA alpha.")
    lora_target_modules: list[str] | str = Field(
        "all-linear",
        description="Modules that get LoRA adapters in the policy: a list of names or peft's 'all-linear'.",
    )
    value_model: Literal["head", "separate", "lora"] = Field(
        "separate",
        description="head = zero-init value head on the policy's hidden states; separate = a copy of the base with "
        "its own head, fully trained; lora = a second LoRA adapter (lora_r, lora_alpha, lora_target_modules) on the "
        "policy's frozen base with its own head: no second copy of the base weights.",
    )
    kl_coef: float = Field(0.05, ge=0, description="Initial KL coefficient beta.")
    kl_estimator: Literal["k1", "k3"] = Field("k1", description="Per-token KL estimator.")
    adaptive_kl: bool = Field(False, description="Adapt beta towards target_kl.")
    target_kl: float = Field(6.0, gt=0, description="Target KL (nats per sequence) of the adaptive controller.")
    kl_horizon: int = Field(10000, ge=1, description="Horizon of the adaptive KL controller.")
    span_coef: float = Field(1.0, description="c in r_t = m_t (c*delta_t - beta*KL_t).")
    terminal_coef: float = Field(
        0.0,
        description="Weight of an optional terminal scalar (the sum of the labels) added to span or dense rewards "
        "(hybrid); refused in scalar and uniform modes, where it would count the same score twice.",
    )
    outcome_coef: float = Field(
        1.0,
        ge=0,
        description="Weight of a critic's overall verdict v in [-1, 1] (the code critic: 2 * pass rate - 1), added at "
        "the last token in every reward mode; a critique with a verdict has its good and poor labels scaled to sum "
        "+1 and -1, so the verdict orders responses: passes all > passes some > fails (t2g_core.rl.rewards).",
    )
    degenerate_margin: float = Field(
        1.0,
        gt=0,
        description="A response that made no real attempt (empty, crashes its harness or while loading, hangs past "
        "its timer) gets, instead of its labels, the worst real attempt's reward minus this margin: "
        "-(span_coef * (1 + omission_penalty) + outcome_coef) - margin (-4 with the defaults).",
    )

    @property
    def degenerate_reward(self) -> float:
        """Below every real attempt: a failing attempt with every label poor and its implementation missing."""
        return -(abs(self.span_coef) * (1 + self.omission_penalty) + self.outcome_coef) - self.degenerate_margin

    @property
    def sampling(self) -> Sampling:
        """The rollouts' sampling distribution (temperature, top_k, top_p), as every log-prob pass applies it."""
        return Sampling(self.temperature, self.top_k, self.top_p)

    parse_failure_reward: float = Field(
        0.0, description="Reward of a sample whose critique failed (the reward source's fault, not the sample's)."
    )
    max_reward_failure_rate: float = Field(
        0.5,
        ge=0,
        le=1,
        description="PPO stops with an error (the run does not finish) when the reward source fails on more than "
        "this share of a step's rollouts (no answer, an error, an answer that does not parse) for "
        "reward_failure_patience steps in a row; 1 = never.",
    )
    reward_failure_patience: int = Field(
        3, ge=1, description="Consecutive steps over max_reward_failure_rate after which PPO stops."
    )
    missing_eos_penalty: float | None = Field(
        None, description="Reward replacing the score of a response without EOS (None = off)."
    )
    gamma: float = Field(1.0, ge=0, le=1, description="GAE discount.")
    lam: float = Field(0.95, ge=0, le=1, description="GAE lambda.")
    cliprange: float = Field(0.2, gt=0, description="Policy ratio clip.")
    cliprange_value: float = Field(0.2, gt=0, description="Value clip around the old values.")
    vf_coef: float = Field(0.1, ge=0, description="Value loss coefficient.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient-norm clip of the policy (actor) parameters.")
    value_max_grad_norm: float = Field(
        1.0, gt=0, description="Gradient-norm clip of the value model (critic), separate from the policy's."
    )
    critic_warmup_steps: int = Field(
        0,
        ge=0,
        description="First PPO steps that train only the critic (the policy stays frozen; their rollouts count as "
        "steps), so a value-based estimator starts from a competent critic.",
    )
    max_approx_kl: float | None = Field(
        0.03,
        gt=0,
        description="Early stop: once the approximate KL(old || new) of the policy after an actor update exceeds "
        "this, that update is undone (the step's first is scaled back onto the bound instead) and the batch's "
        "remaining updates are skipped. None = off: no snapshot before each update and no KL check.",
    )
    temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of rollouts (also applied when recomputing log-probs)."
    )
    top_k: int = Field(
        0,
        ge=0,
        description="Rollouts sample from the top_k most likely tokens only (0 = all), after the temperature; the "
        "policy's log-probs (old and new) and the reference's are computed under the same truncated, renormalised "
        "distribution, each over its own set (docs/ppo.md, sampling).",
    )
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Rollouts sample from the smallest most-likely set of tokens whose probability reaches top_p (1 = "
        "all), after temperature and top_k; log-probs as for top_k.",
    )
    max_new_tokens: int = Field(48, ge=1, description="Maximum response tokens.")
    generation_backend: Literal["exact", "hf", "vllm"] = Field(
        "exact",
        description="How rollouts are sampled: exact = per-sample float64 noise streams (CPU; a sample does not depend "
        "on its batch or process); hf = transformers' batched generate on the device, seeded per step and process (the "
        "GPU choice); vllm = a colocated vLLM engine with the LoRA adapter synchronised every step (the vllm extra).",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Share of the GPU's memory vLLM may take (generation_backend=vllm)."
    )
    micro_batch_size: int | None = Field(
        None,
        ge=1,
        description="Rows per forward pass of the old-log-prob, reference and value passes (None = the whole local "
        "batch at once); lower it when those passes run out of memory.",
    )
    logprob_chunk_tokens: int = Field(
        1024,
        ge=1,
        description="Token positions whose full-vocabulary logits exist at once when log-probs are computed (the "
        "(B, T, V) logits are never built: 1024 x 128k float32 is 0.5 GB).",
    )
    gradient_checkpointing: bool = Field(
        False,
        description="Recompute the transformer layers' activations in the backward pass: less memory, ~30% "
        "more compute.",
    )
    eval_every: int = Field(10, ge=1, description="Evaluate the task score on held-out prompts every N steps.")
    log_every: int = Field(5, ge=1, description="Write rollouts and the token-reward heatmap every N steps.")
    save_every: int = Field(10, ge=1, description="Checkpoint every N steps.")
    warmup_steps: int = Field(
        0, ge=0, description="Linear learning-rate warmup over this many optimizer updates actually taken."
    )
    lr_schedule: Literal["constant", "linear"] = Field(
        "linear",
        description="After warm-up: constant, or linear decay to 0 with training progress (PPO step and planned "
        "update within it), so updates skipped by the early stop never leave the rate higher.",
    )
    reward_model_gate: RewardModelGate = Field(
        default_factory=RewardModelGate,
        description="Quality floors the reward model must meet on held-out items before PPO starts on it.",
    )
    reward_model_path: str | None = Field(
        None,
        description="Reward-model folder or adapter for reward_source=reward_model (None = the workspace's latest).",
        json_schema_extra=recipe_path(),
    )
    critique_loop: CritiqueLoopConfig = Field(
        default_factory=CritiqueLoopConfig,
        description="The on-policy critique loop: audit and refresh the reward model on the policy's rollouts.",
    )
    heatmap_samples: int = Field(4, ge=0, description="Samples shown in the token-reward heatmap per logging interval.")
    run_name: str | None = Field(
        None,
        description="Run folder name under `WORKSPACE/checkpoints/ppo` for `t2g ppo train` (None = derived from "
        "mode and "
        "seed).",
    )
    seed: int = Field(
        0,
        description="Seed: data order, LoRA init, minibatch order; each sample's stream derives from (seed, step, "
        "index).",
    )

    @model_validator(mode="after")
    def _check_combinations(self) -> PPOConfig:
        if self.terminal_coef and self.reward_mode not in HYBRID_MODES:
            raise ValueError(
                f"terminal_coef applies to {' and '.join(HYBRID_MODES)} rewards only; with reward_mode="
                f"{self.reward_mode} the sequence score is already the reward (set terminal_coef to 0)"
            )
        if self.batch_size % self.group_size:
            raise ValueError(f"batch_size {self.batch_size} must be a multiple of group_size {self.group_size}")
        if self.advantage in CRITIC_FREE and self.group_size < 2:
            raise ValueError(f"advantage={self.advantage} needs group_size >= 2 samples per prompt")
        if self.advantage in CRITIC_FREE and self.critic_warmup_steps:
            raise ValueError(f"advantage={self.advantage} has no critic to warm up (set critic_warmup_steps to 0)")
        if self.critique_loop.enabled is True and self.critique_loop.budget > self.batch_size:
            raise ValueError(
                f"critique_loop.budget {self.critique_loop.budget} exceeds the batch ({self.batch_size}): a round "
                "annotates rollouts of one step"
            )
        if self.critic_warmup_steps >= self.steps:
            raise ValueError(f"critic_warmup_steps {self.critic_warmup_steps} leaves none of the {self.steps} steps")
        return self
