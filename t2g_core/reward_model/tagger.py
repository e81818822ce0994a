"""A span-tagger reward model: one label per response token (neutral / good / poor) in one forward pass.

Its features, omission head, training and folder layout: docs/reward_model.md, "The span tagger".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from t2g_core.config.reward_model import RewardModelConfig
from t2g_core.models.loading import embeddings_trained, load_causal_lm, load_tokenizer, weights_dtype
from t2g_core.policy_prompts import render_policy_prompt
from t2g_core.rl.logprobs import position_ids_from_mask
from t2g_core.sft import lora_config
from t2g_core.spans import NEGATIVE, POSITIVE, AlignedSpan, ParsedFeedback, anchor_token, labels_for_offsets, tokens_in
from t2g_core.store import write_text_atomic

NEUTRAL, GOOD, POOR = 0, 1, 2
CLASS_LABELS = {GOOD: POSITIVE, POOR: NEGATIVE}
IGNORE = -100  # cross-entropy ignore index: prompt and padding tokens
TAGGER_META = "tagger.json"
LM_FOLDERS = {"lora": "adapter", "full": "lm"}  # where a tagger folder keeps its language model, per finetune
HEAD_FILE = "head.safetensors"
MEMBERS_FILE = "heads.safetensors"  # the span heads after the first (tagger_heads > 1)
OMISSION_FILE = "omission.safetensors"


# --- the model


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


def _mlp(features: int, width: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(features, width), nn.GELU(), nn.Linear(width, outputs))


class SpanTagger(nn.Module):
    """A causal LM (maybe LoRA-wrapped), the shift head, ``heads - 1`` more span heads on the same features (an
    ensemble, each from its own initialisation) and (``max_omissions`` > 0) the omission head; ``forward`` returns
    per-token class logits (B, L, 3) of the first head, those of every head (K, B, L, 3) and omission-count logits
    (B, L, max_omissions + 1)."""

    def __init__(self, lm: nn.Module, hidden_size: int, head_size: int | None = None, max_omissions=0, heads=1):
        super().__init__()
        self.lm = lm
        head_size = head_size or hidden_size
        self.head = _mlp(2 * hidden_size + 2, head_size, 3)
        self.members = nn.ModuleList(_mlp(2 * hidden_size + 2, head_size, 3) for _ in range(heads - 1))
        self.max_omissions = max_omissions
        self.omission = _mlp(2 * hidden_size + 2, head_size, max_omissions + 1) if max_omissions else None

    def features(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:  # (B, L) -> (B, L, 2d + 2)
        """The heads' input per position, in the heads' dtype (:func:`shift_features` of the language model)."""
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            output_hidden_states=True,
        )
        return shift_features(out.hidden_states[-1], out.logits, input_ids).to(self.head[0].weight.dtype)

    def heads(
        self, feats: Tensor, labels: Tensor | None = None, omissions: Tensor | None = None
    ) -> dict[str, Tensor]:  # (..., 2d + 2) features, (...) classes and omission counts (IGNORE: not scored)
        """Class logits (the first span head's, and every span head's), omission-count logits and (with ``labels``) the
        cross-entropy of the omission head plus the mean of the span heads'."""
        every = torch.stack([self.head(feats), *(m(feats) for m in self.members)])  # (K, ..., 3)
        result = {"logits": every[0], "member_logits": every}
        if self.omission is not None:
            result["omission_logits"] = self.omission(feats)  # (..., max_omissions + 1)
        if labels is not None:
            loss = nn.functional.cross_entropy(
                every.reshape(-1, 3).float(), labels.reshape(-1).repeat(len(every)), ignore_index=IGNORE
            )
            if self.omission is not None and omissions is not None:
                counts = omissions.clamp(max=self.max_omissions).masked_fill(omissions == IGNORE, IGNORE)
                loss = loss + nn.functional.cross_entropy(
                    result["omission_logits"].reshape(-1, self.max_omissions + 1).float(),
                    counts.reshape(-1),
                    ignore_index=IGNORE,
                )
            result["loss"] = loss
        return result

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor, labels: Tensor | None = None, omissions: Tensor | None = None
    ) -> dict[str, Tensor]:  # (B, L) ids, mask, classes, omission counts (IGNORE off the response)
        return self.heads(self.features(input_ids, attention_mask), labels, omissions)


# --- examples: (prompt text, response) -> ids and per-token classes through the offset mapping


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
    """Ids of the rendered prompt followed by the response (tokenized on its own, so its offsets index it). Over
    budget the prompt keeps its *last* tokens (the assistant header) and the response its first."""
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


def omission_counts(offsets: Sequence[tuple[int, int]], missing_at: Sequence[int | None]) -> list[int]:
    """How many missing items belong just before each response token: each at the token holding (or first after)
    its char offset, an item at the end (or with no place) on the last token (:func:`t2g_core.spans.anchor_token`)."""
    counts = [0] * len(offsets)
    for at in missing_at if offsets else ():
        counts[anchor_token(offsets, at)] += 1
    return counts


def missing_from_counts(
    response: str, offsets: Sequence[tuple[int, int]], counts: Sequence[int]
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(missing items, their char offsets) from per-token omission counts: before token k is its start, except that
    the last token stands for the end of the response (where a left-out item most often belongs)."""
    last = anchor_token(offsets, None)
    items: list[str] = []
    at: list[int] = []
    for k, n in enumerate(counts):
        if n <= 0:
            continue
        word = json.dumps(response[offsets[k][0] : offsets[k][1]].strip(), ensure_ascii=False)
        item = "something required, at the end" if k == last else f"something required, before {word}"
        items += [item] * n
        at += [len(response) if k == last else offsets[k][0]] * n
    return tuple(items), tuple(at)


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


def critique_from_spans(response: str, spans: Sequence[tuple[int, int, str]], missing: Sequence[str] = ()) -> str:
    """A templated critique from the tagger's labels (it writes none of its own)."""
    poor = [response[s:e].strip() for s, e, lab in spans if lab == NEGATIVE]
    good = [response[s:e].strip() for s, e, lab in spans if lab == POSITIVE]
    left_out = f" Leaves out {len(missing)} required item(s): {'; '.join(missing)}." if missing else ""
    head = f"Wrong or unsupported: {_quoted(poor)}." if poor else "No wrong or unsupported content found."
    return head + (f" Supported: {_quoted(good)}." if good else "") + left_out


def _quoted(texts: Sequence[str]) -> str:
    return ", ".join(json.dumps(t, ensure_ascii=False) for t in texts)


def span_agreement(
    offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]], agreement: Tensor
) -> tuple[float, ...]:
    """Per span, the mean over its tokens of the share of span heads that vote for the ensemble's label."""
    inside = [tokens_in(offsets, s, e) for s, e, _ in spans]
    return tuple(float(agreement[k].mean()) if k else 1.0 for k in inside)


def feedback_from_spans(
    response: str,
    spans: Sequence[tuple[int, int, str]],
    missing: tuple[tuple[str, ...], tuple[int, ...]] = ((), ()),
    confidence: float | None = None,
    agreement: tuple[float, ...] = (),
) -> ParsedFeedback:
    """The tagger's answer in the one feedback shape: quotes, a templated critique, the exact offsets (with the heads'
    agreement on each), the missing items with their offsets (:func:`missing_from_counts`) and the confidence."""
    return ParsedFeedback(
        critique=critique_from_spans(response, spans, missing[0]),
        good_spans=[response[s:e] for s, e, lab in spans if lab == POSITIVE],
        poor_spans=[response[s:e] for s, e, lab in spans if lab == NEGATIVE],
        located=tuple(spans),
        located_weights=agreement,
        missing=missing[0],
        missing_at=missing[1],
        confidence=confidence,
    )


def prediction_feedback(response: str, encoded: Encoded, pred: TokenPrediction) -> ParsedFeedback:
    """One response's :class:`TokenPrediction` as feedback (spans, omissions, confidence; with several span heads,
    their agreement on each span, which shrinks its reward)."""
    spans = spans_from_classes(encoded.offsets, pred.classes)
    agreement = () if pred.agreement is None else span_agreement(encoded.offsets, spans, pred.agreement)
    missing = missing_from_counts(response, encoded.offsets, pred.omissions)
    return feedback_from_spans(response, spans, missing, pred.confidence, agreement)


# --- building, saving, loading


def build_tagger(base: str | Path, cfg, dtype: torch.dtype = torch.float32) -> tuple[SpanTagger, object]:
    """A fresh tagger on ``base`` (a folder or Hub id; LoRA-wrapped when ``cfg.finetune == "lora"``), initialised
    from ``cfg.seed``."""
    tokenizer = load_tokenizer(base, padding_side=None)  # a folder or Hub id; the shared pad-token policy
    lm = load_causal_lm(base, dtype=dtype, tokenizer=tokenizer, place=False)
    if cfg.gradient_checkpointing:
        lm.gradient_checkpointing_enable()
    torch.manual_seed(cfg.seed)  # LoRA's A matrices and the head are random: one seed, one initial model
    if cfg.finetune == "lora":
        from peft import get_peft_model

        lm = get_peft_model(lm, lora_config(cfg.lora))
    elif cfg.finetune == "frozen":
        lm.requires_grad_(False)
    hidden = lm.config.get_text_config().hidden_size if hasattr(lm.config, "get_text_config") else lm.config.hidden_size
    tagger = SpanTagger(lm, hidden, cfg.tagger_head_size or None, cfg.tagger_max_omissions, cfg.tagger_heads)
    return tagger, tokenizer  # the trained heads stay float32


def save_tagger(model: SpanTagger, tokenizer, out: Path, meta: dict) -> Path:
    """Write the tagger folder (its layout: docs/reward_model.md, "The span tagger")."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    folder = LM_FOLDERS.get(meta.get("finetune", "full"))
    if folder is not None:  # a frozen tagger's language model is its base_model, unchanged: nothing to save
        # a LoRA adapter: the base's embeddings are rebuilt at load unless they were trained
        peft = {"save_embedding_layers": embeddings_trained(model.lm)} if hasattr(model.lm, "peft_config") else {}
        model.lm.save_pretrained(str(out / folder), **peft)
    for head, name in ((model.head, HEAD_FILE), (model.members or None, MEMBERS_FILE), (model.omission, OMISSION_FILE)):
        if head is not None:
            save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(out / name))
    tokenizer.save_pretrained(str(out))
    write_text_atomic(out / TAGGER_META, json.dumps(meta, indent=2))
    return out


def is_tagger(path: str | Path) -> bool:
    return (Path(path) / TAGGER_META).is_file()


def tagger_meta(path: str | Path) -> dict:
    """What ``tagger.json`` of a tagger folder says (kind, base model, fine-tuning, sizes, how it was trained)."""
    path = Path(path)
    if not is_tagger(path):
        raise FileNotFoundError(f"{path}: not a tagger reward model (no {TAGGER_META})")
    return json.loads((path / TAGGER_META).read_text(encoding="utf-8"))


def load_tagger(
    path: str | Path, *, device: str | None = None, dtype: torch.dtype | None = None, trainable: bool = False
):
    """(SpanTagger, tokenizer) from a tagger folder in ``dtype`` (None: the ``auto`` rule). For scoring a LoRA adapter
    is merged; ``trainable`` keeps it (and a full model) trainable, in train mode, heads in float32."""
    from safetensors.torch import load_file

    path = Path(path)
    meta = tagger_meta(path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = weights_dtype(dtype, device)
    tokenizer = load_tokenizer(path, padding_side=None)
    if meta["finetune"] == "lora":
        from peft import PeftModel

        lm = load_causal_lm(meta["base_model"], dtype=dtype, tokenizer=tokenizer, place=False)
        lm = PeftModel.from_pretrained(lm, str(path / "adapter"), is_trainable=trainable)
        lm = lm if trainable else lm.merge_and_unload()
    else:
        lm_ref = path / "lm" if meta["finetune"] == "full" else meta["base_model"]
        lm = load_causal_lm(lm_ref, dtype=dtype, tokenizer=tokenizer, place=False)
        if meta["finetune"] == "frozen":  # a refresh trains the heads alone, as the first training did
            lm.requires_grad_(False)
    sizes = (int(meta[k]) for k in ("hidden_size", "head_size"))
    model = SpanTagger(lm, *sizes, int(meta.get("max_omissions", 0)), int(meta.get("heads", 1)))
    model.head.load_state_dict(load_file(str(path / HEAD_FILE)))
    if model.members:
        model.members.load_state_dict(load_file(str(path / MEMBERS_FILE)))
    if model.omission is not None:
        model.omission.load_state_dict(load_file(str(path / OMISSION_FILE)))
    if trainable:
        model.lm.to(device=device)
        return model.to(device=device).train(), tokenizer
    return model.to(device=device, dtype=dtype).eval(), tokenizer


# --- inference


def _left_padded(batch: list[Encoded], pad_id: int) -> tuple[Tensor, Tensor]:  # -> (B, L), (B, L)
    width = max(len(e.input_ids) for e in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for b, e in enumerate(batch):
        ids[b, width - len(e.input_ids) :] = torch.tensor(e.input_ids)
        mask[b, width - len(e.input_ids) :] = 1
    return ids, mask


@dataclass(frozen=True)
class TokenPrediction:
    """The tagger's belief about one response: per token, the class probabilities (n, 3; the span heads' mean), the
    probabilities of 0..N omissions just before it (n, N + 1; None without an omission head) and the share of span
    heads voting for the predicted class (n,; None with one head)."""

    probs: Tensor
    omission_probs: Tensor | None = None
    agreement: Tensor | None = None

    @property
    def classes(self) -> list[int]:
        return self.probs.argmax(dim=-1).tolist()

    @property
    def omissions(self) -> list[int]:
        if self.omission_probs is None:
            return [0] * self.probs.shape[0]
        return self.omission_probs.argmax(dim=-1).tolist()

    @property
    def confidence(self) -> float:
        """The probability of the least sure token's predicted label, of either head, or with several span heads the
        least share of them agreeing (1.0 for an empty response)."""
        if self.probs.shape[0] == 0:
            return 1.0
        sure = self.probs.amax(dim=-1) if self.agreement is None else self.agreement
        if self.omission_probs is not None:
            sure = torch.minimum(sure, self.omission_probs.amax(dim=-1))
        return float(sure.min())


@torch.inference_mode()
def predict(model: SpanTagger, encoded: Sequence[Encoded], pad_id: int, batch_size: int) -> list[TokenPrediction]:
    """Class (and omission-count) probabilities per response token of each encoded pair (batched, left-padded,
    lengths sorted)."""
    device = next(model.parameters()).device
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i].input_ids))
    out: list[TokenPrediction] = [TokenPrediction(torch.zeros(0, 3))] * len(encoded)
    for b in range(0, len(order), batch_size):
        idx = order[b : b + batch_size]
        ids, mask = _left_padded([encoded[i] for i in idx], pad_id)
        result = model(ids.to(device), mask.to(device))
        members = result["member_logits"].float().softmax(dim=-1).cpu()  # (K, B, L, 3)
        probs = members.mean(dim=0)  # (B, L, 3)
        votes = (members.argmax(dim=-1) == probs.argmax(dim=-1)).float().mean(dim=0) if len(members) > 1 else None
        omitted = result.get("omission_logits")
        omitted = omitted.float().softmax(dim=-1).cpu() if omitted is not None else None  # (B, L, N + 1)
        width = ids.shape[1]
        for j, i in enumerate(idx):
            n = len(encoded[i].input_ids) - encoded[i].start  # response tokens, right-aligned
            rows = slice(width - n, width) if n else slice(0, 0)
            agreement = votes[j, rows] if votes is not None else None
            out[i] = TokenPrediction(probs[j, rows], omitted[j, rows] if omitted is not None else None, agreement)
    return out


class TaggerScorer:
    """The tagger as a reward source for PPO and for evaluation: ``critique_batch(rows) -> list[ParsedFeedback]``
    (spans, omissions with their offsets, and a confidence per response); :meth:`predict_batch` gives the token
    probabilities behind them."""

    def __init__(self, path: str | Path, cfg=None, *, device: str | None = None, dtype: torch.dtype | None = None):
        self.cfg = cfg or RewardModelConfig()
        self.path = Path(path)
        self.model, self.tokenizer = load_tagger(path, device=device, dtype=dtype)

    def encode(self, task: str, prompt: str, response: str) -> Encoded:
        prompt_text = render_policy_prompt(self.tokenizer, task, prompt)
        return encode_pair(
            self.tokenizer, prompt_text, response, self.cfg.max_prompt_tokens, self.cfg.max_target_tokens
        )

    def predict_batch(self, rows: Sequence[dict]) -> tuple[list[Encoded], list[TokenPrediction]]:
        encoded = [self.encode(r["task"], r["prompt"], r["response"]) for r in rows]
        return encoded, predict(self.model, encoded, self.tokenizer.pad_token_id, self.cfg.score_batch_size)

    def critique_batch(self, rows: Sequence[dict]) -> list[ParsedFeedback]:
        encoded, preds = self.predict_batch(rows)
        return [prediction_feedback(r["response"], e, p) for r, e, p in zip(rows, encoded, preds, strict=True)]
