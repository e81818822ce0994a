"""One Prefect-free, MLflow-free function per pipeline stage: typed inputs and settings in, a typed reference out.

Each stage is a row of ``t2g_core.stages.registry``; its function lives in the module of its name, which imports no
other stage's module (shared parts: ``context``, ``refs``, ``io``, ``preflight``, ``labelling``, ``holdout``). The
sections a stage reads are its settings model, so also its cache key; the Prefect task (``tasks/``) and the CLI
(``t2g_cli/``) are thin wrappers. This package imports no submodule, so a stage's code digest covers only its own
code, and nothing else in ``t2g_core`` imports it: the stages sit on top of the library.
"""
