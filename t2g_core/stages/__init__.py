"""One Prefect-free, MLflow-free function per pipeline stage: typed inputs and settings in, a typed reference out.

Each stage (its name, settings, output and group) is a row of the stage table, ``t2g_core.stages.registry``; its
function lives in the module of its name (``ppo.train``, ``evaluate.pipeline``, ...), which imports no other stage's
module: what stages share sits beside them (``context``, ``refs``, ``io``, ``preflight``, ``labelling``, ``holdout``).

``annotate`` begins with ``preflight.check`` (do the rows carry what the annotator needs?), which ``t2g run`` also
calls before anything starts; ``ppo`` begins with its reward-model gate (``ppo.gate_reward_model``).

The sections each stage reads are its settings model (``t2g_core.config.stages``), so they are also its cache key;
the Prefect task (``tasks/``) and the CLI command (``t2g_cli/``) are thin wrappers around these functions. Submodules
are imported by their callers (this package imports none of them, so a stage's code digest covers only its own
code). Nothing else in ``t2g_core`` imports this package: the stages sit on top of the library.
"""
