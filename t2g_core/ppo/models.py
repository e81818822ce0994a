"""Policy (base + LoRA), reference (the same base with the adapter disabled) and the value model.

One copy of the base weights: ``policy.disable_adapter()`` *is* the reference policy (§5 E21). The value model is
either a zero-initialised linear head on the policy's last hidden state (``value_model="head"``) or a separate
backbone loaded from the same folder with its own zero-initialised head (``"separate"``). Dropout is off everywhere
(every module stays in eval mode; gradients still flow).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from t2g_core.rl.logprobs import position_ids_from_mask, token_entropy, token_logprobs


def disable_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    model.eval()


class ValueModel(nn.Module):
    """V(s_t) per response token: a zero-init head, on its own backbone or on hidden states handed to it."""

    def __init__(self, hidden_size: int, backbone: nn.Module | None = None):
        super().__init__()
        self.backbone = backbone
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, hidden: Tensor) -> Tensor:  # (B, T, d) -> (B, T)
        return self.head(hidden.float()).squeeze(-1)

    def backbone_hidden(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L, d)
        out = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids_from_mask(attention_mask)
        )
        return out.last_hidden_state


@dataclass
class PolicyBundle:
    policy: nn.Module  # PeftModel
    value: ValueModel
    tokenizer: object

    def trainable_parameters(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        policy_params = [p for p in self.policy.parameters() if p.requires_grad]
        return policy_params, [p for p in self.value.parameters() if p.requires_grad]


def load_policy(
    policy_dir: str | Path, *, lora_r: int, lora_alpha: int, target_modules, value_model: str, seed: int
) -> PolicyBundle:
    """Load the base from ``policy_dir``, wrap it with a fresh LoRA adapter and build the value model."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(policy_dir)
    if tokenizer.pad_token_id is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        raise ValueError(f"{policy_dir}: the tokenizer needs a pad token distinct from EOS (checklist §5 A3)")
    tokenizer.padding_side = "left"
    base = AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32)
    disable_dropout(base)
    torch.manual_seed(seed)  # LoRA A matrices are randomly initialised
    lora = LoraConfig(
        r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules=target_modules, task_type="CAUSAL_LM"
    )
    policy = get_peft_model(base, lora)
    disable_dropout(policy)
    hidden = base.config.get_text_config().hidden_size
    backbone = None
    if value_model == "separate":
        backbone = AutoModel.from_pretrained(policy_dir, dtype=torch.float32)
        disable_dropout(backbone)
    value = ValueModel(hidden, backbone)
    value.eval()
    return PolicyBundle(policy, value, tokenizer)


def forward_response(
    bundle: PolicyBundle,
    query_ids: Tensor,
    query_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    *,
    with_values: bool = True,
    reference: bool = False,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None] | tuple[Tensor, Tensor | None, Tensor]:  # logprobs (B, T), values (B, T) | None
    """Log-probs of the response tokens (and values), reading logits/hidden states at the token *before* each one.

    ``with_entropy`` adds a third item: the entropy of each position's sampling distribution (B, T), for logging.
    """
    input_ids = torch.cat([query_ids, response_ids], dim=1)
    attn = torch.cat([query_mask.long(), response_mask.long()], dim=1)
    pos = position_ids_from_mask(attn)
    lq = query_ids.shape[1]
    need_hidden = with_values and bundle.value.backbone is None and not reference
    if reference:
        with bundle.policy.disable_adapter():
            out = bundle.policy(input_ids=input_ids, attention_mask=attn, position_ids=pos)
    else:
        out = bundle.policy(
            input_ids=input_ids, attention_mask=attn, position_ids=pos, output_hidden_states=need_hidden
        )
    logits = out.logits[:, lq - 1 : -1]
    logprobs = token_logprobs(logits, response_ids, temperature)
    values = None
    if with_values and not reference:
        hidden = out.hidden_states[-1] if need_hidden else bundle.value.backbone_hidden(input_ids, attn)
        values = bundle.value(hidden[:, lq - 1 : -1])
    if with_entropy:
        return logprobs, values, token_entropy(logits, temperature)
    return logprobs, values
