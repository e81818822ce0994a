"""Cost of one PPO step against the model work it cannot avoid, per phase, and the overhead of span rewards.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import statistics
from pathlib import Path

from testbed import PPO_SMOKE_WORK, clock, demo_policy, estimator_arms, parser, peak_flops, results_dir, save_json

from t2g_core.config.ppo import PPOConfig

PHASES = ("rollout", "score", "span_labels", "forward", "rewards", "update")


def ppo_config(args, **kw):
    fields = dict(reward_source="oracle", batch_size=args.batch_size, minibatches=args.minibatches)
    fields |= dict(ppo_epochs=args.ppo_epochs, sampling={"max_new_tokens": args.max_new_tokens})
    fields |= dict(max_approx_kl=args.max_approx_kl, heatmap_samples=0)
    fields |= dict.fromkeys(("steps", "eval_every", "log_every", "save_every"), 10**6)  # steps: a constant lr
    return PPOConfig(**(fields | kw))


# ---- the bare work --------------------------------------------------------------------------------------------
class Captured:
    """The rollout of the trainer's last step (the shapes the bare work runs at)."""

    def __init__(self) -> None:
        import t2g_core.ppo.trainer as trainer_module

        self.ro, original = None, trainer_module.rollout

        def rollout(*a, **kw):
            self.ro = original(*a, **kw)
            return self.ro

        trainer_module.rollout = rollout


def _logprobs(logits, ids, temperature: float):  # (B, T+1, V) for the T response tokens -> (B, T)
    import torch

    logp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    return logp.gather(-1, ids[..., None]).squeeze(-1)


class BareWork:
    """The model work of one PPO step at a rollout's shapes, with nothing a PPO step could skip: HF ``generate`` with
    a KV cache, plain forwards that keep only the response positions' logits, fresh AdamW optimizers at lr 0 (their
    arithmetic, none of their effect on the trainer's weights)."""

    def __init__(self, trainer) -> None:
        import torch

        self.trainer, self.cfg, self.bundle = trainer, trainer.cfg, trainer.bundle
        self.opts = [torch.optim.AdamW(o.params, lr=0.0) for o in (trainer.actor, trainer.critic) if o is not None]

    def values(self, ids, attn, hidden, t: int):  # -> (B, T), read before each response token
        from t2g_core.ppo.models import active_adapter

        value = self.bundle.value
        if value.backbone is not None:
            hidden = value.backbone(input_ids=ids, attention_mask=attn).last_hidden_state
        elif value.adapter is not None:
            with active_adapter(self.bundle.policy, value.adapter):
                hidden = self.bundle.model.causal_lm.base_model(input_ids=ids, attention_mask=attn).last_hidden_state
        return value(hidden[:, -t - 1 : -1])

    def forward(self, ids, attn, response_ids, with_values: bool):
        t = response_ids.shape[1]
        out = self.bundle.model.causal_lm(
            input_ids=ids, attention_mask=attn, logits_to_keep=t + 1, output_hidden_states=with_values
        )
        lp = _logprobs(out.logits, response_ids, self.cfg.sampling.temperature)
        return lp, self.values(ids, attn, out.hidden_states[-1], t) if with_values else None

    def __call__(self, ro) -> None:
        import torch

        from t2g_core.ppo.experience import reuses_first_forward, uses_critic

        cfg, tok, lm = self.cfg, self.bundle.tokenizer, self.bundle.model.causal_lm
        dev = self.trainer.runtime.device
        q, qm, r = ro.query_ids.to(dev), ro.query_mask.long().to(dev), ro.response_ids.to(dev)
        t, critic = r.shape[1], uses_critic(cfg)
        with torch.no_grad():
            sampling = dict(do_sample=True, temperature=cfg.sampling.temperature, top_k=0, top_p=1.0, use_cache=True)
            sampling |= dict(max_new_tokens=t, min_new_tokens=t, pad_token_id=tok.pad_token_id)
            lm.generate(input_ids=q, attention_mask=qm, **sampling)
            ids, attn = torch.cat([q, r], 1), torch.cat([qm, ro.response_mask.long().to(dev)], 1)
            if not reuses_first_forward(cfg):
                self.forward(ids, attn, r, critic)
            with self.bundle.policy.disable_adapter():
                self.forward(ids, attn, r, False)
        size = ids.shape[0] // cfg.minibatches
        for _ in range(cfg.ppo_epochs):
            for k in range(cfg.minibatches):
                rows = slice(k * size, (k + 1) * size)
                lp, v = self.forward(ids[rows], attn[rows], r[rows], critic)
                loss = -lp.mean() + (v.pow(2).mean() if v is not None else 0.0)
                loss.backward()
                for opt in self.opts:
                    opt.step()
                    opt.zero_grad(set_to_none=True)


def model_flops(trainer, ro) -> float:
    """FLOPs of one step by the usual convention (2N per token of a forward, 6N per token of a forward and
    backward; N = the policy's parameters, attention ignored), counting what the step runs: generation, the no-grad
    passes, ``ppo_epochs`` training passes, a critic backbone where one exists. It over-counts LoRA training (no weight
    gradients of the frozen base), so it is an upper bound of the useful work."""
    from t2g_core.ppo.experience import uses_critic

    cfg = trainer.cfg
    n = sum(p.numel() for p in trainer.bundle.model.causal_lm.parameters())
    seq = int(ro.query_mask.sum() + ro.response_mask.sum())  # real tokens of the batch
    gen = int(ro.response_mask.sum())
    critic = uses_critic(cfg) and cfg.value_model != "head"
    passes = 3 if uses_critic(cfg) else 2  # old log-probs, reference (and values)
    nograd = 2 * n * seq * (passes + (1 if critic else 0))
    train = 6 * n * seq * cfg.ppo_epochs * (2 if critic else 1)
    return float(2 * n * gen + nograd + train)


# ---- part 1: step / bare --------------------------------------------------------------------------------------
def step_over_bare(args, model: str, prompts, source) -> dict:
    from t2g_core.ppo import PPOTrainer

    captured = Captured()
    runs = {}
    for name, kw in estimator_arms(args).items():
        folder = Path(args.workdir) / "bare" / name.replace("/", "-")
        trainer = PPOTrainer(ppo_config(args, **kw), model, prompts, folder, reward_source=source)
        runs[name] = {"trainer": trainer, "bare": BareWork(trainer), "cpu": [], "wall": [], "phases": []}
    for rep in range(args.reps + 1):  # repetition 0 warms every arm up
        for run in runs.values():
            c0, w0 = clock()
            metrics = run["trainer"].step(rep)
            c1, w1 = clock()
            run["bare"](captured.ro)
            c2, w2 = clock()
            if rep:
                run["cpu"].append(((c1 - c0), (c2 - c1)))
                run["wall"].append(((w1 - w0), (w2 - w1)))
                run["phases"].append({ph: metrics.get(f"time/{ph}", 0.0) for ph in PHASES})
                run.setdefault("tokens", []).append(metrics["response/length"])
                run.setdefault("flops", []).append(model_flops(run["trainer"], captured.ro))
    out = {}
    for name, run in runs.items():
        res = {
            clock: {
                "step_over_bare": statistics.median(s / b for s, b in run[clock]),
                "step_s": statistics.median(s for s, _ in run[clock]),
                "bare_s": statistics.median(b for _, b in run[clock]),
            }
            for clock in ("cpu", "wall")
        }
        wall = statistics.fmean(sum(p.values()) for p in run["phases"])
        res["phase_fraction"] = {ph: statistics.fmean(p[ph] for p in run["phases"]) / wall for ph in PHASES}
        res["response_tokens"] = statistics.fmean(run["tokens"])
        res["updates"] = run["trainer"].cfg.ppo_epochs * run["trainer"].cfg.minibatches
        res["generated_tokens_per_s"] = statistics.median(
            res["response_tokens"] * args.batch_size / s for s, _ in run["wall"]
        )
        peak = peak_flops()
        if peak:  # model FLOPs utilisation of the step, by the convention in model_flops
            res["mfu"] = statistics.median(f / (s * peak) for f, (s, _) in zip(run["flops"], run["wall"], strict=True))
        out[name] = res
        print(
            f"{name:22s} step/bare {res['cpu']['step_over_bare']:.3f}x CPU, {res['wall']['step_over_bare']:.3f}x wall "
            f"| step {res['cpu']['step_s']:.3f} s CPU, bare {res['cpu']['bare_s']:.3f} s CPU | "
            + " ".join(f"{ph} {v:.1%}" for ph, v in res["phase_fraction"].items())
            + f" | {res['generated_tokens_per_s']:.0f} generated tokens/s"
            + (f", MFU {res['mfu']:.1%}" if "mfu" in res else "")
        )
    return out


# ---- part 2: reward modes ------------------------------------------------------------------------------------
def reward_modes(args, model: str, prompts, source) -> dict:
    from t2g_core.ppo import train

    out = {}
    for mode in ("span", "scalar", "uniform", "dense"):
        cfg = ppo_config(args, reward_mode=mode, steps=args.steps, log_every=args.steps, save_every=args.steps)
        res = train(cfg, model, prompts, Path(args.workdir) / mode, reward_source=source)
        hist = res.history[1:]  # step 0 includes one-off warm-up costs
        step = statistics.fmean(h["time/step"] for h in hist)
        phases = {ph: statistics.fmean(h[f"time/{ph}"] for h in hist) for ph in PHASES}
        out[mode] = {
            "step_s": step,
            "phases_s": phases,
            "phase_fraction": {k: v / step for k, v in phases.items()},
            "span_overhead_fraction": (phases["span_labels"] + phases["rewards"]) / step,
            "response_tokens": statistics.fmean(h["response/length"] for h in hist),
        }
        print(
            f"{mode:6s} step {step:.3f} s | "
            + " ".join(f"{k} {v * 1000:.1f} ms ({v / step:.1%})" for k, v in phases.items())
            + f" | span labels + rewards/GAE = {out[mode]['span_overhead_fraction']:.2%} of the step"
        )
    return out


def _kl_bound(text: str) -> float | None:
    return None if text.lower() == "none" else float(text)


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--model",
        "--policy",
        dest="model",
        default=None,
        help="Policy folder or Hub id (e.g. a converted SmolLM2-135M-Instruct); default: the demo's warm-started "
        "policy, built as bench_ppo_sample_efficiency builds it.",
    )
    p.add_argument("--reps", type=int, default=6, help="Paired (step, bare) repetitions per arm, after a warm-up.")
    p.add_argument("--steps", type=int, default=6, help="Steps per reward mode (part 2).")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--ppo-epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=1)
    p.add_argument("--group-size", type=int, default=4, help="Samples per prompt of the critic-free estimators.")
    p.add_argument("--max-approx-kl", type=_kl_bound, default=0.03, help="The KL early stop's bound, or none.")
    p.add_argument("--estimators", default="gae,grpo,rloo")
    p.add_argument("--value-models", default="separate,head,lora", help="The critics of the critic-based estimators.")
    p.add_argument("--backends", default="exact,hf", help="Generation backends.")
    p.add_argument("--skip-modes", action="store_true", help="Part 1 only.")
    p.add_argument("--workdir", default=str(results_dir() / "work-ppo-step"))
    args = p.parse_args()

    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.reps, args.steps, args.batch_size, args.max_new_tokens = 1, 2, 4, 8
        args.ppo_epochs, args.group_size = 2, 2
        args.estimators, args.backends = "gae,grpo", "exact"  # every kind of bare work, half the arms
        args.workdir = str(PPO_SMOKE_WORK)  # the policy bench_ppo_sample_efficiency --smoke builds, too
    for name in ("estimators", "value_models", "backends"):
        setattr(args, name, getattr(args, name).split(","))
    model = args.model or demo_policy(args.workdir, args.smoke)

    from t2g_core.demo import make_demo_feedback
    from t2g_core.ppo.sources import oracle_source

    prompts = make_demo_feedback("summarization", 16 if args.smoke else 256, seed=1)
    source = oracle_source("summarization")
    out = {"step_over_bare": step_over_bare(args, model, prompts, source)}
    if not args.skip_modes:
        out["reward_modes"] = reward_modes(args, model, prompts, source)
    out["config"] = vars(args) | {"model": model, "torch_threads": torch.get_num_threads()}
    save_json(out_dir / "ppo_step.json", out)


if __name__ == "__main__":
    main()
