"""A span-tagger reward model: one label per response token (neutral / good / poor) in one forward pass.

For the response token y_i at input position i the head reads

    f_i = [ h_i ; h_{i-1} ; log p(y_i | y_<i) ; max_v log p(v | y_<i) ]        (2d + 2 features)

where h is the language model's last hidden state and the two log-probabilities come from its own LM head at
position i-1 (what the model itself predicted there), and a two-layer MLP maps f_i to three logits. Training is
cross-entropy over the response tokens against the labels alignment produces (validated spans placed on tokens
through the tokenizer's offset mapping, poor winning on overlap as ``align.overlap`` says); the language model is
fine-tuned with it (LoRA or fully, ``reward_model.finetune``) or kept frozen (the head alone learns); the training
loop is :mod:`t2g_core.reward_model.tagger_train`.

Why this head: measured at demo scale (``docs/reward_model.md``), a tagger only catches invented
values when it starts from a model that can look the value up (the policy) *and* its head compares the token with
that model's own prediction; either part alone gave invented-value recall 0. Deviation from the paper: the paper's
reward model is generative (it writes the critique and then the spans); the tagger writes no critique, so a templated
one is made from its labels (:func:`critique_from_spans`).

Saved as a folder: ``tagger.json`` (what it is and how it was built), ``head.safetensors``, the tokenizer, and the
fine-tuned language model (``lm/``, a full model folder, or ``adapter/``, a LoRA adapter on ``base_model``; none for
a frozen one, which loads ``base_model`` itself).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from t2g_core.rl.logprobs import position_ids_from_mask
from t2g_core.spans import NEGATIVE, POSITIVE, AlignedSpan, ParsedFeedback, labels_for_offsets
from t2g_core.store import write_text_atomic

NEUTRAL, GOOD, POOR = 0, 1, 2
CLASS_LABELS = {GOOD: POSITIVE, POOR: NEGATIVE}
IGNORE = -100  # cross-entropy ignore index: prompt and padding tokens
TAGGER_META = "tagger.json"
LM_FOLDERS = {"lora": "adapter", "full": "lm"}  # where a tagger folder keeps its language model, per finetune
HEAD_FILE = "head.safetensors"


# ----------------------------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------------------------


def shift_features(
    hidden: Tensor, logits: Tensor, input_ids: Tensor
) -> Tensor:  # (B,L,d), (B,L,V), (B,L) -> (B,L,2d+2)
    """[h_i, h_{i-1}, log p(y_i | y_<i), max log p(. | y_<i)]; position 0 has no predecessor (zeros)."""
    b, _, d = hidden.shape
    lse = torch.logsumexp(logits[:, :-1].float(), dim=-1)  # (B, L-1), no (B, L, V) fp32 log-softmax
    actual = logits[:, :-1].gather(-1, input_ids[:, 1:, None]).squeeze(-1).float() - lse
    top = logits[:, :-1].amax(dim=-1).float() - lse
    zero = hidden.new_zeros(b, 1)
    logp = torch.cat([zero.float(), actual.clamp(min=-30.0)], dim=1)
    top_logp = torch.cat([zero.float(), top], dim=1)
    prev = torch.cat([hidden.new_zeros(b, 1, d), hidden[:, :-1]], dim=1)
    return torch.cat([hidden.float(), prev.float(), logp[..., None], top_logp[..., None]], dim=-1)


class SpanTagger(nn.Module):
    """A causal LM (maybe LoRA-wrapped) and the shift head; ``forward`` returns per-token class logits (B, L, 3)."""

    def __init__(self, lm: nn.Module, hidden_size: int, head_size: int | None = None):
        super().__init__()
        self.lm = lm
        head_size = head_size or hidden_size
        self.head = nn.Sequential(nn.Linear(2 * hidden_size + 2, head_size), nn.GELU(), nn.Linear(head_size, 3))

    def forward(self, input_ids: Tensor, attention_mask: Tensor, labels: Tensor | None = None) -> dict[str, Tensor]:
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            output_hidden_states=True,
        )
        feats = shift_features(out.hidden_states[-1], out.logits, input_ids)
        tag_logits = self.head(feats.to(self.head[0].weight.dtype))  # (B, L, 3)
        result = {"logits": tag_logits}
        if labels is not None:
            result["loss"] = nn.functional.cross_entropy(
                tag_logits.reshape(-1, 3).float(), labels.reshape(-1), ignore_index=IGNORE
            )
        return result


# ----------------------------------------------------------------------------------------------------------------
# examples: (prompt text, response) -> ids and per-token classes through the offset mapping
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Encoded:
    """Prompt + response ids; ``start`` is where the response begins, ``offsets`` its tokens' char intervals."""

    input_ids: list[int]
    start: int
    offsets: list[tuple[int, int]]
    truncated: bool


def encode_pair(
    tokenizer, prompt_text: str, response: str, max_prompt_tokens: int, max_response_tokens: int
) -> Encoded:
    """Ids of the rendered prompt followed by the response (tokenized on its own, so its offsets index it).

    Over budget, the prompt keeps its *last* ``max_prompt_tokens`` tokens (its end, with the assistant header, is what
    the response follows) and the response its first ``max_response_tokens`` (later tokens are not scored).
    """
    p_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    enc = tokenizer(response, add_special_tokens=False, return_offsets_mapping=True)
    r_ids, offsets = enc["input_ids"], [tuple(o) for o in enc["offset_mapping"]]
    truncated = len(p_ids) > max_prompt_tokens or len(r_ids) > max_response_tokens
    p_ids, r_ids, offsets = p_ids[-max_prompt_tokens:], r_ids[:max_response_tokens], offsets[:max_response_tokens]
    return Encoded(p_ids + r_ids, len(p_ids), offsets, truncated)


def token_classes(offsets: Sequence[tuple[int, int]], spans: Sequence[AlignedSpan], overlap: str) -> list[int]:
    """NEUTRAL / GOOD / POOR per response token: the same offset mapping and overlap rule as alignment."""
    values = {POSITIVE: float(GOOD), NEGATIVE: float(POOR), "neutral": float(NEUTRAL)}
    return [int(v) for v in labels_for_offsets(offsets, spans, values, overlap=overlap)]


def spans_from_classes(offsets: Sequence[tuple[int, int]], classes: Sequence[int]) -> list[tuple[int, int, str]]:
    """Runs of consecutive tokens with the same non-neutral class, as (start, end, label) char spans."""
    spans: list[tuple[int, int, str]] = []
    run: list[int] | None = None  # [start, end, class]
    for (s, e), c in zip(offsets, classes, strict=True):
        if e <= s:  # zero-width (special) tokens neither open nor break a run
            continue
        if run is not None and c == run[2]:
            run[1] = e
            continue
        if run is not None and run[2] != NEUTRAL:
            spans.append((run[0], run[1], CLASS_LABELS[run[2]]))
        run = [s, e, int(c)]
    if run is not None and run[2] != NEUTRAL:
        spans.append((run[0], run[1], CLASS_LABELS[run[2]]))
    return spans


def critique_from_spans(response: str, spans: Sequence[tuple[int, int, str]]) -> str:
    """A templated critique from the tagger's labels (it writes none of its own)."""
    poor = [response[s:e].strip() for s, e, lab in spans if lab == NEGATIVE]
    good = [response[s:e].strip() for s, e, lab in spans if lab == POSITIVE]
    if not poor:
        return "No wrong or unsupported content found." + (f" Supported: {_quoted(good)}." if good else "")
    return f"Wrong or unsupported: {_quoted(poor)}." + (f" Supported: {_quoted(good)}." if good else "")


def _quoted(texts: Sequence[str]) -> str:
    return ", ".join(json.dumps(t, ensure_ascii=False) for t in texts)


def feedback_from_spans(response: str, spans: Sequence[tuple[int, int, str]]) -> ParsedFeedback:
    """The tagger's answer in the one feedback shape: quotes, a templated critique, and the exact offsets."""
    return ParsedFeedback(
        critique=critique_from_spans(response, spans),
        good_spans=[response[s:e] for s, e, lab in spans if lab == POSITIVE],
        poor_spans=[response[s:e] for s, e, lab in spans if lab == NEGATIVE],
        located=tuple(spans),
    )


# ----------------------------------------------------------------------------------------------------------------
# building, saving, loading
# ----------------------------------------------------------------------------------------------------------------


def build_tagger(base: str | Path, cfg, dtype: torch.dtype = torch.float32) -> tuple[SpanTagger, object]:
    """A fresh tagger on ``base`` (a folder or Hub id; LoRA-wrapped when ``cfg.finetune == "lora"``), initialised
    from ``cfg.seed``."""
    from t2g_core.models.loading import load_causal_lm, load_tokenizer

    tokenizer = load_tokenizer(base, padding_side=None)  # a folder or Hub id; the shared pad-token policy
    lm = load_causal_lm(base, dtype=dtype, tokenizer=tokenizer, place=False)
    if cfg.gradient_checkpointing:
        lm.gradient_checkpointing_enable()
    torch.manual_seed(cfg.seed)  # LoRA's A matrices and the head are random: one seed, one initial model
    if cfg.finetune == "lora":
        from peft import get_peft_model

        from t2g_core.reward_model.train import lora_config

        lm = get_peft_model(lm, lora_config(cfg))
    elif cfg.finetune == "frozen":
        lm.requires_grad_(False)
    hidden = lm.config.get_text_config().hidden_size if hasattr(lm.config, "get_text_config") else lm.config.hidden_size
    return SpanTagger(lm, hidden, cfg.tagger_head_size or None), tokenizer  # the trained head stays float32


def save_tagger(model: SpanTagger, tokenizer, out: Path, meta: dict) -> Path:
    """Write the tagger folder (see the module docstring)."""
    from safetensors.torch import save_file

    from t2g_core.models.loading import embeddings_trained

    out.mkdir(parents=True, exist_ok=True)
    folder = LM_FOLDERS.get(meta.get("finetune", "full"))
    if folder is not None:  # a frozen tagger's language model is its base_model, unchanged: nothing to save
        # a LoRA adapter: the base's embeddings are rebuilt at load unless they were trained
        peft = {"save_embedding_layers": embeddings_trained(model.lm)} if hasattr(model.lm, "peft_config") else {}
        model.lm.save_pretrained(str(out / folder), **peft)
    save_file({k: v.detach().contiguous().cpu() for k, v in model.head.state_dict().items()}, str(out / HEAD_FILE))
    tokenizer.save_pretrained(str(out))
    write_text_atomic(out / TAGGER_META, json.dumps(meta, indent=2))
    return out


def is_tagger(path: str | Path) -> bool:
    return (Path(path) / TAGGER_META).is_file()


def load_tagger(path: str | Path, *, device: str | None = None, dtype: torch.dtype | None = None):
    """(SpanTagger in eval mode, tokenizer) from a tagger folder, language model and head in ``dtype`` (the resolved
    ``models.dtype``; None: the ``auto`` rule for ``device``)."""
    from safetensors.torch import load_file

    from t2g_core.models.loading import load_causal_lm, load_tokenizer, weights_dtype

    path = Path(path)
    if not is_tagger(path):
        raise FileNotFoundError(f"{path}: not a tagger reward model (no {TAGGER_META})")
    meta = json.loads((path / TAGGER_META).read_text(encoding="utf-8"))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(path, padding_side=None)
    if meta["finetune"] == "lora":
        from peft import PeftModel

        lm = load_causal_lm(meta["base_model"], dtype=dtype, tokenizer=tokenizer, place=False)
        lm = PeftModel.from_pretrained(lm, str(path / "adapter")).merge_and_unload()
    else:
        lm_ref = path / "lm" if meta["finetune"] == "full" else meta["base_model"]
        lm = load_causal_lm(lm_ref, dtype=dtype, tokenizer=tokenizer, place=False)
    model = SpanTagger(lm, int(meta["hidden_size"]), int(meta["head_size"]))
    model.head.load_state_dict(load_file(str(path / HEAD_FILE)))
    return model.to(device=device, dtype=dtype).eval(), tokenizer


# ----------------------------------------------------------------------------------------------------------------
# inference
# ----------------------------------------------------------------------------------------------------------------


def _left_padded(batch: list[Encoded], pad_id: int) -> tuple[Tensor, Tensor]:  # -> (B, L), (B, L)
    width = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for b, e in enumerate(batch):
        ids[b, width - len(e.input_ids) :] = torch.tensor(e.input_ids)
        mask[b, width - len(e.input_ids) :] = 1
    return ids, mask


@torch.inference_mode()
def predict_classes(model: SpanTagger, encoded: Sequence[Encoded], pad_id: int, batch_size: int) -> list[list[int]]:
    """Argmax class per response token of each encoded pair (batched, left-padded, lengths sorted)."""
    device = next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].input_ids))
    out: list[list[int]] = [[] for _ in encoded]
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        ids, mask = _left_padded([encoded[i] for i in idx], pad_id)
        classes = model(ids.to(device), mask.to(device))["logits"].argmax(dim=-1).cpu()  # (B, L)
        width = ids.shape[1]
        for j, i in enumerate(idx):
            n = len(encoded[i].input_ids) - encoded[i].start  # response tokens, right-aligned
            out[i] = classes[j, width - n :].tolist() if n else []
    return out


class TaggerScorer:
    """The tagger as a reward source for PPO and for evaluation: ``critique_batch(rows) -> list[ParsedFeedback]``."""

    def __init__(self, path: str | Path, cfg=None, *, device: str | None = None, dtype: torch.dtype | None = None):
        from t2g_core.config.reward_model import RewardModelConfig

        self.cfg = cfg or RewardModelConfig()
        self.model, self.tokenizer = load_tagger(path, device=device, dtype=dtype)

    def encode(self, task: str, prompt: str, response: str) -> Encoded:
        from t2g_core.policy_prompts import render_policy_prompt

        prompt_text = render_policy_prompt(self.tokenizer, task, prompt)
        return encode_pair(
            self.tokenizer, prompt_text, response, self.cfg.max_prompt_tokens, self.cfg.max_target_tokens
        )

    def critique_batch(self, rows: Sequence[dict]) -> list[ParsedFeedback]:
        encoded = [self.encode(r["task"], r["prompt"], r["response"]) for r in rows]
        classes = predict_classes(self.model, encoded, self.tokenizer.pad_token_id, self.cfg.score_batch_size)
        return [
            feedback_from_spans(r["response"], spans_from_classes(e.offsets, c))
            for r, e, c in zip(rows, encoded, classes, strict=True)
        ]
