"""Policy-samples stage: the policy PPO starts from, sampled on training prompts and labelled by the annotator.

A reward model trained only on the dataset's responses meets the policy's own text first inside PPO. This stage
samples ``policy_samples.prompts`` training prompts (never held-out ones), ``per_prompt`` responses each as PPO's
rollouts sample, and has the annotator label them. It returns the responses as feedback rows (id
``<item id>@policy.<k>``, ``meta.sampled_from``) and the annotator's rows; the reward-model stage trains on them too.
A finished run's outputs under the same key are reused (unless forced).
"""

from __future__ import annotations

import json

import pandas as pd

from t2g_core.config.evaluate import EvaluateConfig
from t2g_core.config.sampling import Sampling
from t2g_core.config.stages import PolicySamplesSettings
from t2g_core.feedback import responses_frame
from t2g_core.stages.context import StageContext
from t2g_core.stages.holdout import training_rows
from t2g_core.stages.labelling import label
from t2g_core.stages.preflight import check
from t2g_core.stages.refs import ArtifactRef, ModelsRef, PolicySamplesRef

SAMPLE_ID = "{id}@policy.{k}"


def draw_prompts(feedback: ArtifactRef, settings: PolicySamplesSettings) -> pd.DataFrame:
    """``prompts`` training rows drawn at random by ``seed`` (all of them when there are fewer), in feedback order."""
    rows = training_rows(feedback, settings)
    n = min(settings.policy_samples.prompts, len(rows))
    return rows.sample(n=n, random_state=settings.policy_samples.seed).sort_index().reset_index(drop=True)


def sample_responses(policy: str, rows: pd.DataFrame, settings: PolicySamplesSettings, ctx: StageContext):
    """``per_prompt`` responses per row (a list per row, in row order), one model load, progress per batch; each
    row's prompt is rendered for its own task."""
    from t2g_core.evaluation.generate import generate_with, load_policy
    from t2g_core.models.loading import default_device, resolve_dtype

    cfg = settings.policy_samples
    device = default_device()
    model, tokenizer = load_policy(policy, device, resolve_dtype(settings.models.dtype, device))
    out: dict[int, list[str]] = {}
    batches = range(0, len(rows), cfg.batch_size)
    for b, start in enumerate(batches):
        decoding = EvaluateConfig(  # null sampling: PPO's, which settings_for puts in its place
            sampling=cfg.sampling or Sampling(),
            batch_size=cfg.batch_size,
            num_samples=cfg.per_prompt,
            seed=cfg.seed + b,
        )
        for task, chunk in rows.iloc[start : start + cfg.batch_size].groupby("task", sort=False):
            texts = generate_with(model, tokenizer, task, list(chunk["prompt"]), decoding)
            out |= dict(zip(chunk.index, texts, strict=True))
        ctx.on_progress("policy samples", b + 1, len(batches))
    return [out[i] for i in rows.index]


def samples_frame(rows: pd.DataFrame, responses: list[list[str]]) -> pd.DataFrame:
    """The responses as feedback rows (schema FEEDBACK): the item's prompt, reference and tests, a new id, no critique,
    ``meta`` naming the item sampled from and, where the item has them, the true facts of its prompt (demo data: the
    ground truth any response is measured against; the item's other meta describes the item's response, not this)."""

    def meta(row: dict, k: int) -> dict:
        facts = (json.loads(row["meta"]) if isinstance(row.get("meta"), str) else row.get("meta") or {}).get("facts")
        return {"sampled_from": row["id"], "sample": k} | ({"facts": facts} if facts else {})

    entries = (
        (row, SAMPLE_ID.format(id=row["id"], k=k), text, meta(row, k))
        for row, texts in zip(rows.to_dict("records"), responses, strict=True)
        for k, text in enumerate(texts)
    )
    return responses_frame(entries, "policy samples")


def sample(
    feedback: ArtifactRef,
    models: ModelsRef,
    settings: PolicySamplesSettings,
    ctx: StageContext,
    *,
    api_key: str | None = None,
) -> PolicySamplesRef:
    """Sample ``models.policy`` on training prompts; the annotator's labels of the responses (failures kept)."""
    done = [ctx.reusable(name) for name in ("policy_samples", "policy_sample_annotations")]
    if all(done):  # a finished run with the same key: sampling is the costly part (304 s on one core for SmolLM2)
        ctx.log(f"policy samples: {done[0].n_rows} responses of an earlier run with the same inputs reused")
        return PolicySamplesRef(feedback=done[0], annotations=done[1])
    cfg = settings.policy_samples
    rows = draw_prompts(feedback, settings)
    check(rows, settings.annotate, has_key=api_key is not None)  # before sampling: the rows must suit the annotator
    ctx.log(f"policy samples: {cfg.per_prompt} x {len(rows)} training prompts from {models.policy}")
    frame = samples_frame(rows, sample_responses(models.policy, rows, settings, ctx))
    samples = ctx.out.artifact("policy_samples", frame, "feedback", extra={"policy_digest": models.policy_digest})
    ctx.tracker.log_input(feedback, "feedback", "policy samples")
    ctx.tracker.log_output(samples, "policy_samples")
    labels = label(frame, settings, ctx, "policy_sample_annotations", "policy_samples", api_key=api_key)
    return PolicySamplesRef(feedback=samples, annotations=labels)
