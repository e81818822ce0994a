"""Policy (base + LoRA), reference (the same base with the adapter disabled) and the value model, as one module.

One copy of the base weights, no (B, T, V) logits, and why the KL starts at exactly 0: docs/ppo.md, "Policy,
reference and value model in one module".
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from t2g_core.config.lora import LoRA
from t2g_core.rl.logprobs import (
    Sampling,
    as_sampling,
    position_ids_from_mask,
    selective_logprobs,
    selective_logprobs_and_entropy,
)

# peft adapter names: the policy's, the LoRA critic's, and the self-distillation teacher's (an EMA of the policy's)
POLICY_ADAPTER, CRITIC_ADAPTER, TEACHER_ADAPTER = "default", "critic", "teacher"


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    model.eval()


class ValueModel(nn.Module):
    """V(s_t) per response token: a zero-init head, on its own backbone or on hidden states handed to it.
    ``adapter``: the name of the LoRA adapter the critic's backbone pass runs with (on the policy's base)."""

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None, adapter: str | None = None):
        super().__init__()
        self.backbone, self.adapter = backbone, adapter
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, hidden: Tensor) -> Tensor:  # (B, T, d) -> (B, T)
        return self.head(hidden.float()).squeeze(-1)


@contextlib.contextmanager
def adapter_flags_kept(policy: nn.Module):
    """peft's adapter switches (``set_adapter``, leaving ``disable_adapter``) also freeze every adapter they leave
    inactive; with a LoRA critic both adapters train, so every adapter weight's ``requires_grad`` is put back."""
    flags = [(p, p.requires_grad) for n, p in policy.named_parameters() if "lora_" in n]
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


@contextlib.contextmanager
def active_adapter(policy: nn.Module, name: str):
    """Run the policy's LoRA layers with adapter ``name`` only, then with the policy's again."""
    with adapter_flags_kept(policy):
        policy.base_model.set_adapter(name)
        try:
            yield
        finally:
            policy.base_model.set_adapter(POLICY_ADAPTER)


@contextlib.contextmanager
def checkpointed_layers(model: nn.Module, on: bool):
    """Let transformers' gradient checkpointing act while every module stays in eval mode: it only fires on a
    layer whose own ``training`` flag is set, so that flag (and no submodule's) is raised for the forward."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)] if on else []
    for layer in layers:
        layer.training = True
    try:
        yield
    finally:
        for layer in layers:
            layer.training = False


def last_hidden(backbone: nn.Module, ids: Tensor, attn: Tensor, checkpointing: bool) -> Tensor:  # (B, L) -> (B, L, d)
    """The last hidden states of a decoder stack, its layers checkpointed (``checkpointing``) when gradients flow."""
    with checkpointed_layers(backbone, checkpointing and torch.is_grad_enabled()):
        out = backbone(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn), use_cache=False)
    return out.last_hidden_state


class ActorCritic(nn.Module):
    """The LoRA policy and the value model; ``forward`` gives response log-probs (and values) for one batch."""

    def __init__(self, policy: nn.Module, value: ValueModel, *, chunk_tokens: int = 1024, checkpointing: bool = False):
        super().__init__()
        self.policy, self.value = policy, value
        self.chunk_tokens, self.checkpointing = chunk_tokens, checkpointing

    @property
    def causal_lm(self) -> nn.Module:
        """The base causal LM with the LoRA layers injected (what ``policy.generate`` runs)."""
        return self.policy.get_base_model()

    def logits_head(self):
        """Hidden states (N, d) to logits (N, V): the LM head, and a final soft cap where the model has one."""
        lm = self.causal_lm
        head, cap = lm.get_output_embeddings(), getattr(lm.config.get_text_config(), "final_logit_softcapping", None)
        if not cap:
            return head
        return lambda h: torch.tanh(head(h) / cap) * cap  # Gemma-2/3 cap their logits after the head

    def forward(
        self,
        query_ids: Tensor,
        query_mask: Tensor,
        response_ids: Tensor,
        response_mask: Tensor,
        sampling: Sampling | float,
        reference: bool = False,
        with_values: bool = True,
        with_entropy: bool = False,
    ) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:
        """Log-probs of the response tokens (B, T) under ``sampling`` (a bare number: a temperature over the whole
        vocabulary) and values (B, T) or None, read at the position *before* each token (§5 A1); ``reference``: the
        base without the adapter, under the same ``sampling``; ``with_entropy`` adds a third item, the entropy of
        each position's sampling distribution (for logging, no gradient), read off the log-probs' logits."""
        sampling = as_sampling(sampling)
        input_ids = torch.cat([query_ids, response_ids], dim=1)
        attn = torch.cat([query_mask.long(), response_mask.long()], dim=1)
        lq = query_ids.shape[1]
        with self._adapter(reference):
            hidden = self._decoder_hidden(input_ids, attn)[:, lq - 1 : -1]  # (B, T, d)
            head = self.logits_head()
            if with_entropy:
                logprobs, *extra = selective_logprobs_and_entropy(
                    hidden, head, response_ids, sampling, self.chunk_tokens
                )
            else:
                logprobs, extra = selective_logprobs(hidden, head, response_ids, sampling, self.chunk_tokens), []
        if not with_values or reference:
            return (logprobs, None, *extra)
        if self.value.backbone is not None:
            hidden = last_hidden(self.value.backbone, input_ids, attn, self.checkpointing)[:, lq - 1 : -1]
        elif self.value.adapter is not None:
            with active_adapter(self.policy, self.value.adapter):
                hidden = self._decoder_hidden(input_ids, attn)[:, lq - 1 : -1]
        return (logprobs, self.value(hidden), *extra)

    def response_hidden(
        self,
        query_ids: Tensor,
        query_mask: Tensor,
        response_ids: Tensor,
        response_mask: Tensor,
        reference: bool = False,
    ) -> Tensor:  # (B, Lq), (B, Lq), (B, T), (B, T) -> (B, T, d)
        """The last hidden states before each response token, the policy's (its active adapter) or the reference's."""
        input_ids = torch.cat([query_ids, response_ids], dim=1)
        attn = torch.cat([query_mask.long(), response_mask.long()], dim=1)
        with self._adapter(reference):
            return self._decoder_hidden(input_ids, attn)[:, query_ids.shape[1] - 1 : -1]

    @contextlib.contextmanager
    def _adapter(self, reference: bool):
        """The reference (every adapter off, their trainable flags kept) or the policy as it is."""
        if not reference:
            yield
            return
        with adapter_flags_kept(self.policy), self.policy.disable_adapter():
            yield

    def _decoder_hidden(self, input_ids: Tensor, attn: Tensor) -> Tensor:  # (B, L) -> (B, L, d)
        """The policy's decoder stack (the LM without its head), with the active adapter."""
        return last_hidden(self.causal_lm.base_model, input_ids, attn, self.checkpointing)


@dataclass
class PolicyBundle:
    model: ActorCritic
    tokenizer: object
    loaded: dict  # what was loaded (name, revision, commit, dtype, pad token), for the run record
    dtype: torch.dtype  # the base weights' dtype (policy, reference and a separate critic backbone)

    @property
    def policy(self) -> nn.Module:  # PeftModel
        return self.model.policy

    @property
    def value(self) -> ValueModel:
        return self.model.value

    def trainable_parameters(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(the policy's, the critic's); a LoRA critic's adapter weights live in the policy's layers."""
        mine = [(n, p) for n, p in self.policy.named_parameters() if p.requires_grad]
        critic = [p for n, p in mine if _is_critic_adapter(n)]
        policy_params = [p for n, p in mine if not _is_critic_adapter(n)]
        return policy_params, critic + [p for p in self.value.parameters() if p.requires_grad]

    def adapter_state(self, name: str) -> dict | None:
        """The weights of adapter ``name`` (a LoRA critic's, an EMA teacher's); None when the run has none."""
        if name not in self.policy.peft_config:
            return None
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(self.policy, adapter_name=name)

    def load_adapter_state(self, name: str, state: dict | None) -> None:
        if name in self.policy.peft_config and state is not None:
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.policy, state, adapter_name=name)

    def save_policy_adapter(self, folder: Path) -> None:
        """The policy's adapter alone, in peft's format (a LoRA critic's adapter stays out)."""
        self.policy.save_pretrained(folder, selected_adapters=[POLICY_ADAPTER], save_embedding_layers=False)


def _is_critic_adapter(name: str) -> bool:
    return f".{CRITIC_ADAPTER}." in name


def adapter_pairs(policy: nn.Module, source: str, target: str) -> list[tuple[Tensor, Tensor]]:
    """(target weight, source weight) of every LoRA matrix that adapters ``source`` and ``target`` both have."""
    params = dict(policy.named_parameters())
    pairs = ((n.replace(f".{source}.", f".{target}."), p) for n, p in params.items() if f".{source}." in n)
    return [(params[t], p) for t, p in pairs if t in params]


@torch.no_grad()
def ema_adapter(policy: nn.Module, rate: float) -> None:
    """The teacher adapter moved ``rate`` of the way towards the policy's, matrix by matrix (A and B apart)."""
    for teacher, weight in adapter_pairs(policy, POLICY_ADAPTER, TEACHER_ADAPTER):
        teacher.lerp_(weight.to(teacher.dtype), rate)


def load_policy(
    policy_dir: str | Path,
    *,
    lora: LoRA,
    value_model: str,
    seed: int,
    dtype: torch.dtype | None = None,
    device=None,
    chunk_tokens: int = 1024,
    gradient_checkpointing: bool = False,
    teacher_adapter: bool = False,
) -> PolicyBundle:
    """Load the base (a folder or Hub id, in ``dtype``: the resolved ``models.dtype``; None: the ``auto`` rule), wrap
    it with a fresh LoRA adapter, build the value model (a separate backbone in the same ``dtype``); with
    ``teacher_adapter`` also a frozen copy of the policy's adapter, ``teacher`` (the EMA teacher: :func:`ema_adapter`).
    """
    from peft import LoraConfig, get_peft_model

    from t2g_core.models.loading import describe, load_causal_lm, load_tokenizer, split_revision, weights_dtype

    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(policy_dir)
    base = load_causal_lm(policy_dir, dtype=dtype, device=device, tokenizer=tokenizer)
    loaded = describe(base, tokenizer, policy_dir)
    disable_dropout(base)
    if gradient_checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(seed)  # LoRA A matrices are randomly initialised

    def lora_config() -> LoraConfig:  # one object per adapter: peft keeps and edits the config it is given
        cfg = LoraConfig(
            r=lora.r, lora_alpha=lora.alpha, lora_dropout=0.0, target_modules=lora.target_modules, task_type="CAUSAL_LM"
        )
        cfg.revision = split_revision(policy_dir)[1]
        return cfg

    policy = get_peft_model(base, lora_config())  # adapter weights stay float32 (peft's autocast_adapter_dtype)
    disable_dropout(policy)
    hidden = base.config.get_text_config().hidden_size
    backbone, adapter = None, None
    if value_model == "separate":
        backbone = load_causal_lm(policy_dir, dtype=dtype, device=device, tokenizer=tokenizer, backbone_only=True)
        disable_dropout(backbone)
        if gradient_checkpointing:
            backbone.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    elif value_model == "lora":
        adapter = CRITIC_ADAPTER
        policy.add_adapter(adapter, lora_config())  # starts as the base (B = 0); peft adds it frozen and inactive
        for n, p in policy.named_parameters():
            if _is_critic_adapter(n):
                p.requires_grad_(True)
        disable_dropout(policy)
    if teacher_adapter:  # added frozen and inactive; starts as the policy's adapter, so as the reference (B = 0)
        policy.add_adapter(TEACHER_ADAPTER, lora_config())
        with torch.no_grad():
            for teacher, weight in adapter_pairs(policy, POLICY_ADAPTER, TEACHER_ADAPTER):
                teacher.copy_(weight)
        disable_dropout(policy)
    value = ValueModel(hidden, backbone, adapter).to(base.device)
    value.head.float()
    value.eval()
    model = ActorCritic(policy, value, chunk_tokens=chunk_tokens, checkpointing=gradient_checkpointing)
    loaded |= {"trainable_dtype": str(value.head.weight.dtype).split(".")[-1]}
    return PolicyBundle(model, tokenizer, loaded, dtype)


@torch.no_grad()
def forward_in_micro_batches(
    model: nn.Module,
    query_ids: Tensor,
    query_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    sampling: Sampling | float,
    *,
    micro_batch_size: int | None,
    reference: bool = False,
    with_values: bool = True,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:  # as ActorCritic.forward
    """``model``'s forward over the batch, ``micro_batch_size`` rows at a time (None: all at once)."""
    n, tensors = query_ids.shape[0], (query_ids, query_mask, response_ids, response_mask)
    size = micro_batch_size or max(n, 1)
    flags = {"reference": reference, "with_values": with_values, "with_entropy": with_entropy}
    parts = [model(*(t[i : i + size] for t in tensors), sampling, **flags) for i in range(0, n, size)]
    if not parts:
        empty = response_ids.new_zeros(response_ids.shape, dtype=torch.float32)
        out = (empty, empty if with_values and not reference else None)
        return (*out, empty) if with_entropy else out
    return tuple(None if col[0] is None else torch.cat(col) for col in zip(*parts, strict=True))
