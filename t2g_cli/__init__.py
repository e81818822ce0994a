"""The ``t2g`` command line. Each stage registers its commands in its own module; heavy imports stay inside commands."""

from __future__ import annotations

import atexit
import gc
import importlib
import pkgutil

import typer

from t2g_cli.runtime import quiet_libraries

app = typer.Typer(
    name="t2g",
    help="text2grad: reinforcement learning from natural-language feedback (critiques -> span rewards -> token-level "
    "PPO).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    """Import every t2g_cli.<module> that defines ``register(app)``."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(app)


_register()


def main() -> None:
    # The interpreter's last garbage collections at exit walk all torch, transformers, Prefect and MLflow made (3.4 s
    # of CPU after a tiny `t2g run`); frozen, they are skipped. Exit handlers still run and files are flushed as usual.
    atexit.register(gc.freeze)
    quiet_libraries()
    app()
