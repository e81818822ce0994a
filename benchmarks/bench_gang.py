"""What running the PPO stage as a gang costs: the same tiny PPO stage (demo policy, oracle reward) in this process
after a first run (torch imported, models cached by the OS), in a fresh process (an interpreter importing torch), and
as ``layout.ppo: {processes: N}`` (``accelerate launch`` of N gloo ranks: the launcher, N interpreters, the
rendezvous). Each run has its own workspace (no resume). Prints each run's seconds and the gang's overhead against
both one-process runs; ``--publish`` copies the summary to docs/results/gang.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from testbed import PPO_SMOKE_WORK, demo_policy, parser, results_dir, write_results

from t2g_core.config import WorkspaceConfig
from t2g_core.config.orchestration import Layout
from t2g_core.config.ppo import PPOConfig
from t2g_core.config.stages import PPOSettings
from t2g_core.demo import make_demo_feedback
from t2g_core.progress import no_progress
from t2g_core.stages import ppo
from t2g_core.stages.context import StageContext
from t2g_core.stages.refs import ModelsRef
from t2g_core.tracking import NullTracker
from t2g_core.workspace import Workspace
from tasks.stage import run_stage as placed

BATCH, TOKENS = 8, 24  # a tiny stage: the launch, not the compute, is what is measured


def run_stage(root: Path, policy: str, steps: int, processes: int) -> float:
    """One PPO stage in ``root`` (a new workspace) in ``processes`` processes; its wall seconds."""
    started = time.perf_counter()
    workspace = WorkspaceConfig(root=str(root))
    feedback = Workspace.at(root).store.write("feedback", "k", make_demo_feedback("summarization", 64), "feedback")
    cfg = PPOConfig(
        reward_source="oracle", steps=steps, batch_size=BATCH, sampling={"max_new_tokens": TOKENS}, heatmap_samples=0
    )
    ctx = StageContext.keyed(root, "bench-gang", tracker=NullTracker(), log=lambda *a: None, on_progress=no_progress)
    inputs = {"feedback": feedback, "models": ModelsRef.of(policy, policy), "reward_model": None}
    placed(ppo.train, ctx, Layout(processes=processes), workspace, **inputs, settings=PPOSettings(ppo=cfg))
    return time.perf_counter() - started


def main() -> None:
    p = parser(__doc__, publish=True)
    p.add_argument("--steps", type=int, default=40, help="PPO steps of each run (the issue's 40-step stage).")
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--workdir", default=str(results_dir() / "work-gang"))
    p.add_argument("--one", nargs=2, metavar=("ROOT", "POLICY"), help=argparse.SUPPRESS)  # a fresh process's run
    args = p.parse_args()
    if args.one:  # the fresh process: one run, its seconds on stdout
        print(run_stage(Path(args.one[0]), args.one[1], args.steps, 1))
        return
    if args.smoke:
        args.steps, args.workdir = 2, str(PPO_SMOKE_WORK)
    policy = demo_policy(args.workdir, args.smoke)
    runs = Path(args.workdir) / "gang-runs" / time.strftime("%Y%m%d-%H%M%S")
    if not args.smoke:  # imports and page cache warm for the in-process run (a smoke run times nothing)
        run_stage(runs / "first", policy, args.steps, 1)
    seconds = {"in_process": run_stage(runs / "in-process", policy, args.steps, 1)}
    started = time.perf_counter()
    command = [sys.executable, __file__, "--steps", str(args.steps), "--one", str(runs / "fresh"), policy]
    subprocess.run(command, check=True, capture_output=True, text=True)
    seconds["fresh_process"] = time.perf_counter() - started
    seconds["gang"] = run_stage(runs / "gang", policy, args.steps, args.processes)
    overhead = {k: seconds["gang"] / seconds[k] - 1 for k in ("in_process", "fresh_process")}
    print(
        f"{args.steps}-step PPO stage: {seconds['in_process']:.1f} s in this process, {seconds['fresh_process']:.1f} s "
        f"in a fresh one, {seconds['gang']:.1f} s as {args.processes} gloo processes (overhead "
        f"{overhead['in_process']:+.0%} against the warm process, {overhead['fresh_process']:+.0%} against the fresh)"
    )
    import torch

    setup = {"steps": args.steps, "batch_size": BATCH, "max_new_tokens": TOKENS, "processes": args.processes}
    summary = setup | {"torch_threads": torch.get_num_threads(), "seconds": seconds, "gang_overhead": overhead}
    write_results("gang", summary, summary, smoke=args.smoke, publish=args.publish)


if __name__ == "__main__":
    main()
