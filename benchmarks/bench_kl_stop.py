"""How the KL early stop measures an update, and what it does with a first update that crosses the bound.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import statistics
from pathlib import Path

from testbed import PPO_SMOKE_WORK, demo_policy, parser, results_dir, save_json

from t2g_core.config.ppo import PPOConfig

BOUNDS = (0.01, 0.03, 0.1)


class Probe:
    """Wraps the update's minibatch pass, so the KL of the current policy can be measured on any rows."""

    def __init__(self) -> None:
        import t2g_core.ppo.update as update

        self.update, self.ctx = update, {}
        self._grads = update.minibatch_grads
        update.minibatch_grads = self.grads
        self.on_grads = lambda stats: None

    def grads(self, runtime, model, ro, exp, rows, cfg, first=None):
        stats = self._grads(runtime, model, ro, exp, rows, cfg, first)
        self.on_grads(stats)
        self.ctx = {"args": (runtime, model, ro, exp), "rows": rows, "cfg": cfg}
        return stats

    def kl(self, rows: list[int] | None = None) -> float:
        runtime, model, ro, exp = self.ctx["args"]
        rows = list(range(len(ro.global_index))) if rows is None else rows
        return self.update.approx_kl_now(runtime, model, ro, exp, rows, self.ctx["cfg"])


def which_rows(args, trainer_for, probe: Probe) -> dict:
    trainer = trainer_for(minibatches=2, ppo_epochs=4, max_approx_kl=None, learning_rate=args.lr)
    records, pending = [], {}

    def on_grads(stats):
        if pending:
            records.append(pending | {"next": stats["approx_kl"]})
            pending.clear()

    def actor_step(step, j, _step=trainer.actor.step):
        norm = _step(step, j)
        pending.update(step=step, update=j, own=probe.kl(probe.ctx["rows"]), whole=probe.kl())
        return norm

    probe.on_grads, trainer.actor.step = on_grads, actor_step
    for step in range(args.steps):
        pending.clear()  # the step's last update has no next minibatch
        trainer.step(step)
    ratios = {k: statistics.median(r[k] / r["whole"] for r in records) for k in ("next", "own")}
    disagree = {
        f"{k}@{b:g}": sum((r[k] > b) != (r["whole"] > b) for r in records) / len(records)
        for k in ("next", "own")
        for b in BOUNDS
    }
    for r in records:
        print(
            f"  step {r['step']} update {r['update']}: next {r['next']:.4f} own {r['own']:.4f} whole {r['whole']:.4f}"
        )
    print(f"median KL / whole-batch KL: next minibatch {ratios['next']:.2f}, own rows {ratios['own']:.2f}")
    print(
        "share of updates decided differently from the whole batch: "
        + ", ".join(f"{k} {v:.0%}" for k, v in disagree.items())
    )
    return {"records": records, "median_ratio_to_whole": ratios, "decision_differs": disagree}


def first_update(args, trainer_for, probe: Probe) -> dict:
    out, original = {}, probe.update.pull_back
    for lr in args.high_lrs:
        for minibatches in (1, 2):
            trainer = trainer_for(minibatches=minibatches, ppo_epochs=4, max_approx_kl=0.03, learning_rate=lr)
            scaled = []

            def pull_back(actor, kl, bound, kept, measure, scaled=scaled):
                checks = []
                what = original(actor, kl, bound, kept, lambda: checks.append(1) or measure())
                if what == "scaled":
                    scaled.append({"measured": kl / bound, "after_whole": probe.kl() / bound, "checks": len(checks)})
                return what

            probe.update.pull_back = pull_back
            history = [trainer.step(step) for step in range(args.steps)]
            probe.update.pull_back = original
            key = f"lr{lr:g}_mb{minibatches}"
            out[key] = {
                "scaled": scaled,
                "steps_with_an_update": sum(h["ppo/updates"] > 0 for h in history) / len(history),
                "steps_scaled": sum(h["ppo/scaled"] for h in history) / len(history),
            }
            after = [s["after_whole"] for s in scaled]
            print(
                f"{key}: {len(scaled)}/{len(history)} steps scaled their first update (measured "
                + ", ".join(f"{s['measured']:.1f}" for s in scaled)
                + " x bound); whole-batch KL after it: "
                + (f"median {statistics.median(after):.2f}, max {max(after):.2f} x bound" if after else "-")
                + f"; checking forwards {sum(s['checks'] for s in scaled)}"
                + f"; steps with an update {out[key]['steps_with_an_update']:.0%}"
            )
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--model", "--policy", dest="model", default=None, help="Policy folder (default: the demo's).")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-3, help="Learning rate of part 1 (the default's).")
    p.add_argument("--high-lrs", default="0.01,0.03", help="Learning rates of part 2.")
    p.add_argument("--workdir", default=str(results_dir() / "work-ppo-step"))
    args = p.parse_args()
    args.high_lrs = [float(x) for x in args.high_lrs.split(",")]
    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.steps, args.batch_size, args.max_new_tokens, args.high_lrs = 2, 4, 8, [0.03]
        args.workdir = str(PPO_SMOKE_WORK)

    import torch

    torch.set_num_threads(1)
    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo import PPOTrainer
    from t2g_core.ppo.sources import oracle_source

    model = args.model or demo_policy(args.workdir, args.smoke)
    prompts = make_demo_feedback("summarization", 16 if args.smoke else 256, seed=1)

    def trainer_for(**kw) -> PPOTrainer:
        fields = dict(reward_source="oracle", steps=args.steps, batch_size=args.batch_size, value_model="head")
        fields |= dict(sampling={"max_new_tokens": args.max_new_tokens}, lr_schedule="constant", heatmap_samples=0)
        cfg = PPOConfig(**fields, **kw)
        work = Path(args.workdir) / "kl-stop"
        return PPOTrainer(cfg, model, prompts, work, reward_source=oracle_source("summarization"))

    probe = Probe()
    out = {"which_rows": which_rows(args, trainer_for, probe), "first_update": first_update(args, trainer_for, probe)}
    out["config"] = vars(args) | {"model": model}
    save_json(out_dir / "kl_stop.json", out)


if __name__ == "__main__":
    main()
