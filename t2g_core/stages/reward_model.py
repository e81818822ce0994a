"""Reward-model stage: validated annotations -> rm_data -> fine-tuning -> held-out evaluation.

Both kinds (``reward_model.kind``) run through the same steps: a generative model (TRL SFT, the paper's) or a span
tagger (a token-classification head, ``t2g_core.reward_model.tagger``). The model starts from
``models.reward_model_base`` or from the policy before PPO (``reward_model.init_from``).

:func:`train` is the stage (what the pipeline runs); :func:`build_data`, :func:`fit` and :func:`evaluate` are its
steps, which ``t2g rm build-data | train | eval`` also run one at a time. Registration in a model registry is the
tracking layer's job: the returned reference says what to register. The steps that load a model resolve
``models.dtype`` for the device they run on (:func:`weights_dtype`) and hand that ``torch.dtype`` down.
"""

from __future__ import annotations

import math
from pathlib import Path

from t2g_core.config.stages import RewardModelSettings
from t2g_core.feedback import sampled_from
from t2g_core.reward_model.train import train_rm
from t2g_core.stages.context import StageContext
from t2g_core.stages.io import read
from t2g_core.stages.refs import (
    ArtifactRef,
    ModelsRef,
    PolicySamplesRef,
    RewardModelRef,
    ValidationRef,
    folder_digest,
)


def add_samples(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    samples: PolicySamplesRef,
    settings: RewardModelSettings,
    ctx: StageContext,
) -> tuple[ArtifactRef, ArtifactRef, set[str]]:
    """The dataset's items and annotations with the policy's samples added (``rm_feedback``, ``rm_annotations``),
    and the ids of the samples, which train only. A sample of a prompt in the reward model's validation split is left
    out, so the held-out figures stay on unseen prompts."""
    import pandas as pd

    from t2g_core.reward_model.data import split_for_id

    items, labels = read(samples.feedback, "feedback"), read(samples.annotations, "annotations")
    keep = sampled_from(items).map(lambda i: split_for_id(i, settings.reward_model.val_fraction) == "train")
    items = items[keep.to_numpy()]
    labels = labels[labels["id"].isin(set(items["id"]))]
    left_out = int((~keep).sum())
    ctx.log(f"policy samples: {len(items)} train the reward model ({left_out} of validation prompts left out)")
    ctx.tracker.log_input(samples.annotations, "policy_sample_annotations", "training")
    both = [
        ctx.out.artifact(name, pd.concat([read(ref, schema), extra], ignore_index=True), schema)
        for name, ref, extra, schema in (
            ("rm_feedback", feedback, items, "feedback"),
            ("rm_annotations", annotations, labels, "annotations"),
        )
    ]
    return both[0], both[1], set(items["id"])


def build_data(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    spans: ArtifactRef | None,
    base: str,
    settings: RewardModelSettings,
    ctx: StageContext,
    *,
    train_only: set[str] = frozenset(),
) -> ArtifactRef:
    """``rm_data`` rows (prompt rendered with ``base``'s tokenizer, critique + span JSON target, split by id; the ids
    in ``train_only`` always train)."""
    from t2g_core.models.loading import load_tokenizer
    from t2g_core.reward_model.data import build_rm_data

    spans_df = read(spans, "spans") if spans is not None else None
    df, stats = build_rm_data(
        read(feedback, "feedback"),
        read(annotations, "annotations"),
        load_tokenizer(base, padding_side=None),
        settings.reward_model,
        spans_df=spans_df,
        align_cfg=settings.align,
    )
    if train_only:
        df.loc[df["id"].isin(train_only), "split"] = "train"
        stats.n_train = int((df["split"] == "train").sum())
        stats.n_validation = len(df) - stats.n_train
    if stats.n_train == 0:  # say why, rather than letting the trainer fail on an empty split
        raise ValueError(
            f"rm_data: no training rows from {stats.n_items} items ({stats.as_metrics()}); "
            "raise reward_model.max_target_tokens / max_prompt_tokens or check the annotations"
        )
    extra = {"stats": stats.as_metrics(), "skipped_ids": stats.skipped_ids[:200]}
    ref = ctx.out.artifact("rm_data", df, "rm_data", extra=extra)
    ctx.tracker.log_input(annotations, "annotations", "annotation")
    ctx.tracker.log_input(ref, "rm_data", "training")
    ctx.tracker.log_metrics({f"rm_data.{k}": v for k, v in stats.as_metrics().items()})
    return ref


def weights_dtype(settings: RewardModelSettings):
    """``models.dtype`` as a ``torch.dtype`` for the device the reward model trains and scores on (the GPU if any)."""
    from t2g_core.models.loading import default_device, resolve_dtype

    return resolve_dtype(settings.models.dtype, default_device())


def start_model(models: ModelsRef, settings: RewardModelSettings) -> str:
    """The model the reward model is fine-tuned from (``reward_model.init_from``)."""
    return models.policy if settings.reward_model.init_from == "policy" else models.base


def fit(
    rm_data: ArtifactRef,
    base: str,
    settings: RewardModelSettings,
    ctx: StageContext,
    feedback: ArtifactRef | None = None,
):
    """Fine-tune on the train split into ``<checkpoints/reward_model>/<key>``; resumes a killed run, retrains a
    forced one. Returns the training result (``adapter_dir`` = the folder to load, ``global_step``,
    ``train_seconds``...). A tagger needs the ``feedback`` its rows were built from (the responses)."""
    with ctx.own_folder("checkpoints/reward_model", fresh=True) as run_dir:
        return _fit(rm_data, base, settings, ctx, feedback, run_dir)


def _fit(rm_data, base, settings: RewardModelSettings, ctx: StageContext, feedback, run_dir):
    cfg = settings.reward_model
    if cfg.kind == "tagger":
        from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples

        if feedback is None:
            raise ValueError("a tagger reward model is trained on rm_data and the feedback it was built from")
        examples = tagger_examples(read(rm_data, "rm_data"), read(feedback, "feedback"))
        return fit_tagger(
            cfg,
            base,
            examples,
            run_dir,
            overlap=settings.align.overlap,
            tracker=ctx.tracker,
            progress=ctx.progress,
            dtype=weights_dtype(settings),
            on_progress=ctx.on_progress,
        )

    return train_rm(
        cfg,
        base,
        read(rm_data, "rm_data"),
        run_dir,
        tracker=ctx.tracker,
        progress=ctx.progress,
        dtype=weights_dtype(settings),
        on_progress=ctx.on_progress,
    )


def evaluate(
    model_dir: str | Path,
    rm_data: ArtifactRef,
    feedback: ArtifactRef,
    settings: RewardModelSettings,
    out: Path,
    *,
    split: str = "validation",
):
    """Held-out metrics (span P/R/F1 against the annotations and the truth, unmatched rate, JSON-valid rate of a
    generative model...) and the report in ``out``."""
    from t2g_core.reward_model.evaluate import evaluate_model, write_eval_report

    report = evaluate_model(
        model_dir,
        read(rm_data, "rm_data"),
        read(feedback, "feedback"),
        settings.reward_model,
        split=split,
        align_cfg=settings.align,
        dtype=weights_dtype(settings),
    )
    return report, write_eval_report(report, out)


def train(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    spans: ArtifactRef | None,
    validation: ValidationRef | None,
    models: ModelsRef,
    settings: RewardModelSettings,
    ctx: StageContext,
    samples: PolicySamplesRef | None = None,
) -> RewardModelRef:
    """The whole stage on the reward-model base of ``models``: data, fine-tuning, held-out evaluation; with
    ``samples``, the policy's own labelled responses train it too (:func:`add_samples`)."""
    if validation is not None and validation.status == "fail":
        raise ValueError(f"validation failed ({validation.report}): the reward model is not trained on this batch")
    base = start_model(models, settings)
    train_only: set[str] = set()
    if samples is not None:
        feedback, annotations, train_only = add_samples(feedback, annotations, samples, settings, ctx)
    data = build_data(feedback, annotations, spans, base, settings, ctx, train_only=train_only)
    result = fit(data, base, settings, ctx, feedback)
    report, paths = evaluate(result.adapter_dir, data, feedback, settings, Path(result.adapter_dir).parent / "eval")
    metrics = {k: float(v) for k, v in report.metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    ctx.tracker.log_metrics(
        {f"rm_eval.{k}": v for k, v in metrics.items()} | {"rm_train.seconds": result.train_seconds}
    )
    ctx.tracker.log_artifact(paths["markdown"].parent, "eval")
    return RewardModelRef(
        model_dir=str(result.adapter_dir),
        kind=settings.reward_model.kind,
        base=base,
        rm_data=data,
        feedback=feedback if samples is not None else None,
        digest=folder_digest(result.adapter_dir),
        metrics=metrics,
        report=str(paths["markdown"]),
        global_step=result.global_step,
    )
