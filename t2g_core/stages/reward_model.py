"""Reward-model stage: validated annotations -> rm_data -> fine-tuning -> held-out evaluation.

Both kinds (``reward_model.kind``: a generative model, the paper's, or a span tagger) run the same steps, starting
from ``models.reward_model_base`` or the policy before PPO (``reward_model.init_from``). :func:`train` is the stage;
:func:`build_data`, :func:`fit` and :func:`evaluate` are its steps, which ``t2g rm build-data | train | eval`` also
run. Registration is the tracking layer's job: the returned reference says what to register.
"""

from __future__ import annotations

import math
from pathlib import Path

from t2g_core.config.stages import RewardModelSettings
from t2g_core.feedback import sampled_from
from t2g_core.reward_model.train import train_rm
from t2g_core.stages.context import StageContext, first_process
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
) -> tuple[ArtifactRef, ArtifactRef, set[str], set[str]]:
    """The dataset's items and annotations with the policy's samples added (``rm_feedback``, ``rm_annotations``),
    and the ids of the samples that train and of those held out: a sample of a prompt in the reward model's
    validation split is held out (split ``test``), so the figures on the policy's own text are on unseen prompts."""
    import pandas as pd

    from t2g_core.reward_model.data import split_for_id

    items, labels = read(samples.feedback, "feedback"), read(samples.annotations, "annotations")
    trains = sampled_from(items).map(lambda i: split_for_id(i, settings.reward_model.val_fraction) == "train")
    held_out = set(items.loc[~trains.to_numpy(), "id"])
    ctx.log(
        f"policy samples: {int(trains.sum())} train the reward model, {len(held_out)} of validation prompts test it"
    )
    ctx.tracker.log_input(samples.annotations, "policy_sample_annotations", "training")
    both = [
        ctx.out.artifact(name, pd.concat([read(ref, schema), extra], ignore_index=True), schema)
        for name, ref, extra, schema in (
            ("rm_feedback", feedback, items, "feedback"),
            ("rm_annotations", annotations, labels, "annotations"),
        )
    ]
    return both[0], both[1], set(items["id"]) - held_out, held_out


def build_data(
    feedback: ArtifactRef,
    annotations: ArtifactRef,
    spans: ArtifactRef | None,
    base: str,
    settings: RewardModelSettings,
    ctx: StageContext,
    *,
    train_only: set[str] = frozenset(),
    held_out: set[str] = frozenset(),
) -> ArtifactRef:
    """``rm_data`` rows (prompt rendered with ``base``'s tokenizer, critique + span JSON target, split by id; the ids
    in ``train_only`` always train, those in ``held_out`` are the ``test`` split)."""
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
    if train_only or held_out:
        df.loc[df["id"].isin(train_only), "split"] = "train"
        df.loc[df["id"].isin(held_out), "split"] = "test"
        stats.n_train = int((df["split"] == "train").sum())
        stats.n_validation = int((df["split"] == "validation").sum())
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


def _finite(metrics: dict) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def policy_text_gap(model_dir, feedback_df, annotations: ArtifactRef, ids: set[str], settings) -> dict[str, float]:
    """On the held-out policy samples ``ids``: the mean task reward the reward model gives and the annotator gives,
    under PPO's labelling rules (omission penalty 1), and their gap (``reward_gap``: what it pays beyond the
    annotator, the over-optimisation signature), with the agreement on the same responses."""
    from t2g_core.critique_loop.audit import agreement, annotation_feedback
    from t2g_core.ppo.rollout import row_dict
    from t2g_core.reward_model.scoring import load_scorer

    labels = read(annotations, "annotations")
    labels = labels[labels["id"].isin(ids) & (labels["status"] == "ok")].sort_values("id").reset_index(drop=True)
    items = feedback_df.set_index("id").loc[labels["id"]].reset_index()
    rows = [row_dict(r) for _, r in items.iterrows()]
    scorer = load_scorer(model_dir, settings.reward_model, dtype=weights_dtype(settings))
    offsets = scorer.tokenizer([r["response"] for r in rows], add_special_tokens=False, return_offsets_mapping=True)
    decoded = [
        (r["response"], [tuple(o) for o in offs]) for r, offs in zip(rows, offsets["offset_mapping"], strict=True)
    ]
    found = agreement(
        decoded, scorer.critique_batch(rows), annotation_feedback(labels), scorer.tokenizer, settings.align, 1.0
    )
    return {k: found[k] for k in ("rm_reward", "annotator_reward")} | {
        "reward_gap": found["rm_reward"] - found["annotator_reward"]
    }


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
    from t2g_core.ppo.distributed import rank_and_world

    cfg = settings.reward_model
    if cfg.kind == "tagger" and rank_and_world()[1] > 1:  # its own loop trains alone: each process would repeat it
        raise ValueError(
            "reward_model.kind=tagger trains in one process, not under accelerate: set layout.reward_model.processes "
            "to 1 (or remove layout.reward_model), or train reward_model.kind=generative in several processes"
        )
    run = {"tracker": ctx.tracker, "progress": ctx.progress, "dtype": weights_dtype(settings)}
    with ctx.own_folder("checkpoints/reward_model", fresh=True) as run_dir:
        if cfg.kind != "tagger":
            return train_rm(cfg, base, read(rm_data, "rm_data"), run_dir, **run, on_progress=ctx.on_progress)
        from t2g_core.reward_model.tagger_train import fit_tagger, tagger_examples

        if feedback is None:
            raise ValueError("a tagger reward model is trained on rm_data and the feedback it was built from")
        examples = tagger_examples(read(rm_data, "rm_data"), read(feedback, "feedback"))
        return fit_tagger(
            cfg, base, examples, run_dir, overlap=settings.align.overlap, **run, on_progress=ctx.on_progress
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
    ``samples``, the policy's own labelled responses train it too (:func:`add_samples`). In a launch of several
    processes all train; rank 0 writes the data (the others wait, then find it) and the model, evaluates it and
    returns the reference, the others return None once trained."""
    from accelerate import PartialState

    if validation is not None and validation.status == "fail":
        raise ValueError(f"validation failed ({validation.report}): the reward model is not trained on this batch")
    base = start_model(models, settings)
    train_only, held_out = set(), set()
    with PartialState().main_process_first():  # the process group of a launch, or this process alone
        if samples is not None:
            feedback, annotations, train_only, held_out = add_samples(feedback, annotations, samples, settings, ctx)
        data = build_data(feedback, annotations, spans, base, settings, ctx, train_only=train_only, held_out=held_out)
    result = fit(data, base, settings, ctx, feedback)
    if not first_process():  # the evaluation is rank 0's
        return None
    folder = Path(result.adapter_dir).parent
    report, paths = evaluate(result.adapter_dir, data, feedback, settings, folder / "eval")
    metrics = _finite(report.metrics)
    if held_out:  # the reward model on the policy's own text, beside the dataset's figures
        policy, _ = evaluate(result.adapter_dir, data, feedback, settings, folder / "eval-policy", split="test")
        gap = policy_text_gap(result.adapter_dir, read(feedback, "feedback"), annotations, held_out, settings)
        metrics |= {f"policy_{k}": v for k, v in (_finite(policy.metrics) | gap).items()}
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
