"""Responses written as text turned into a rollout as the trainer holds it: sampled ids plus EOS, right-padded by
one pad, an empty one-token query, every sample in group 0 (one prompt, for the group baselines)."""

from __future__ import annotations

import torch

from t2g_core.ppo.rollout import Rollout
from t2g_core.ppo.sampling import response_mask_after_eos


def text_rollout(tok, responses: list[str], rows: list[dict]) -> Rollout:
    ids = [tok(r, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for r in responses]
    width = max(map(len, ids)) + 1
    response_ids = torch.tensor([x + [tok.pad_token_id] * (width - len(x)) for x in ids])
    mask, has_eos = response_mask_after_eos(response_ids, tok.eos_token_id)
    q = torch.zeros(len(responses), 1, dtype=torch.long)
    group = torch.zeros(len(responses), dtype=torch.long)
    return Rollout(
        rows, list(range(len(rows))), q, torch.ones_like(q, dtype=torch.bool), response_ids, mask, has_eos, group
    )
