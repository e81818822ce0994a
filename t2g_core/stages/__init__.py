"""One Prefect-free, MLflow-free function per pipeline stage: typed inputs and settings in, a typed reference out.

| stage | function | reads (settings) | returns |
|---|---|---|---|
| feedback | ``feedback.materialise(source, settings, ctx)`` | data | ``ArtifactRef`` (feedback) |
| models | ``models.build(feedback, settings, ctx)`` | models | ``ModelsRef`` |
| annotate | ``annotate.annotate(feedback, settings, ctx)`` | annotate | ``ArtifactRef`` (annotations) |
| align | ``align.align(feedback, annotations, tokenizer, settings, ctx)`` | align | ``ArtifactRef`` (spans) |
| validate | ``validate.draw_sample / auto_review / check`` | validate | ``ValidationRef`` |
| reward_model | ``reward_model.train(...)`` | reward_model, align | ``RewardModelRef`` |
| ppo | ``ppo.train(feedback, models, reward_model, ...)`` | ppo, holdout, align, reward_model | ``PolicyRef`` |
| evaluate | ``evaluate.evaluate(feedback, policies, settings, ctx)`` | evaluate, holdout | ``EvaluationRef`` |

``annotate`` begins with ``preflight.check`` (do the rows carry what the annotator needs?), which ``t2g run`` also
calls before anything starts; ``ppo`` begins with its reward-model gate (``ppo.gate_reward_model``).

The sections each stage reads are its settings model (``t2g_core.config.stages``), so they are also its cache key;
the Prefect task (``tasks/``) and the CLI command (``t2g_cli/``) are thin wrappers around these functions. Submodules
are imported by their callers (this package imports none of them, so a stage's code digest covers only its own
code). Nothing else in ``t2g_core`` imports this package: the stages sit on top of the library.
"""
