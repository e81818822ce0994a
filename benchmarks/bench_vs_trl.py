"""text2grad's PPO step against TRL's ``GRPOTrainer`` on the same model: time per update, generated tokens per
second, per estimator (grpo, rloo, gae with each value model) and generation backend.

What it runs and reports, in full: docs/benchmarks.md, "The benchmark scripts in detail".
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from testbed import PPO_SMOKE_WORK, clock, demo_policy, estimator_arms, parser, results_dir, save_json

from t2g_core.config.ppo import PPOConfig
from t2g_core.policy_prompts import render_policy_prompt

DIFFERENCES = [
    "KL: TRL adds beta * KL(k3) to the loss; text2grad puts beta * KL(k1) into the per-token reward (the same "
    "reference forward either way)",
    "advantages: TRL's GRPO normalises by the group's reward std and averages the loss per token over the batch "
    "(loss_type dapo); text2grad's estimators work per token (reward-to-go), whiten over the batch, and gae trains a "
    "critic (a second backbone pass in every forward for separate and lora)",
    "text2grad scores through its reward pipeline (decode, critique, span labels, reward placement); TRL calls the "
    "reward function on the decoded texts",
    "text2grad's exact backend draws float64 noise per sample from its own stream (reproducible across batch "
    "splits); hf and TRL call transformers' generate",
    "text2grad's KL early stop is off here (TRL has none); with it on, one more forward per step checks the last "
    "update",
    "response lengths are sampled: both sides sample the same policy, so lengths agree only on average (tokens per "
    "second corrects for it)",
]


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def now() -> float:
    """Process CPU seconds on a CPU (what other processes do not inflate), synchronised wall seconds on a GPU."""
    cpu, wall = clock()
    return wall if on_gpu() else cpu


def weights_dtype():
    import torch

    return torch.bfloat16 if on_gpu() and torch.cuda.is_bf16_supported() else torch.float32


def trivial_reward(text: str) -> float:
    return float(len(text.split()) % 3 - 1)


class TrivialCritic:
    """The trivial reward as a text2grad critic: a verdict on the whole response, no spans."""

    def critique(self, row):
        from t2g_core.spans import ParsedFeedback

        return ParsedFeedback(critique="", outcome=trivial_reward(row["response"]))


# ---- text2grad ---------------------------------------------------------------------------------------------
def make_trainers(args, model: str, prompts, workdir: Path) -> dict:
    from t2g_core.ppo import CriticSource, PPOTrainer

    fields = dict(reward_mode="scalar", batch_size=args.samples, minibatches=args.minibatches, ppo_epochs=args.epochs)
    fields |= dict(sampling={"temperature": 1.0, "max_new_tokens": args.max_new_tokens}, learning_rate=args.lr)
    fields |= dict(lr_schedule="constant", kl_coef=0.05, lora={"r": 16, "alpha": 32, "target_modules": "all-linear"})
    fields |= dict(max_approx_kl=None, heatmap_samples=0)
    fields |= dict.fromkeys(("steps", "eval_every", "log_every", "save_every"), 10**6)
    trainers = {}
    for name, kw in estimator_arms(args).items():
        folder, source = workdir / name.replace("/", "-"), CriticSource(TrivialCritic())
        cfg = PPOConfig(**fields, **kw)
        trainers[name] = PPOTrainer(cfg, model, prompts, folder, reward_source=source, dtype=weights_dtype())
    return trainers


# ---- TRL ---------------------------------------------------------------------------------------------------
def trl_trainer(args, model: str, prompts, workdir: Path, callback):
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    tok = AutoTokenizer.from_pretrained(model)
    rendered = [render_policy_prompt(tok, row["task"], row["prompt"]) for _, row in prompts.iterrows()]
    per_rollout = args.samples // args.group_size
    dataset = Dataset.from_dict({"prompt": (rendered * (1 + per_rollout * (args.rollouts + 1) // len(rendered)))})
    lengths = []

    def reward(prompts, completions, completion_ids=None, **_):
        lengths.extend(len(ids) for ids in completion_ids or [])
        return [trivial_reward(c) for c in completions]

    config = GRPOConfig(
        output_dir=str(workdir / "trl"),
        per_device_train_batch_size=args.samples // args.minibatches,
        steps_per_generation=args.minibatches,
        gradient_accumulation_steps=1,
        num_generations=args.group_size,
        num_iterations=args.epochs,
        max_completion_length=args.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.05,
        max_steps=(args.rollouts + 1) * args.epochs * args.minibatches,
        use_cpu=not on_gpu(),
        bf16=weights_dtype() == torch.bfloat16,
        fp16=False,
        model_init_kwargs={"dtype": weights_dtype()},
        disable_dropout=True,
        gradient_checkpointing=False,  # TRL's default is on; text2grad's (ppo.gradient_checkpointing) is off
        report_to="none",
        save_strategy="no",
        logging_steps=10**6,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    given = dict(train_dataset=dataset, processing_class=tok, peft_config=lora, callbacks=[callback])
    return GRPOTrainer(model=model, reward_funcs=reward, args=config, **given), lengths


def interleaved(args, model: str, prompts, workdir: Path) -> dict:
    """TRL's training loop with every text2grad arm stepping at each of its rollout boundaries."""
    from transformers import TrainerCallback

    trainers = make_trainers(args, model, prompts, workdir)
    updates = args.epochs * args.minibatches
    rec = {"trl": []} | {name: [] for name in trainers}
    trl_lengths: list[int] = []

    class Boundary(TrainerCallback):
        def __init__(self):
            self.mark, self.rollout = now(), 0

        def on_step_end(self, _args, state, control, **kw):
            if state.global_step % updates:
                return
            tokens = sum(trl_lengths[-args.samples :])
            rec["trl"].append({"time": now() - self.mark, "tokens": tokens})
            for name, trainer in trainers.items():
                c0 = now()
                metrics = trainer.step(self.rollout)
                rec[name].append({"time": now() - c0, "tokens": metrics["response/length"] * args.samples})
            self.rollout += 1
            self.mark = now()  # TRL's time starts again after the text2grad steps

    trl, trl_lengths = trl_trainer(args, model, prompts, workdir, Boundary())
    trl.train()
    return summarise(args, rec, updates)


def summarise(args, rec: dict, updates: int) -> dict:
    unit = "wall" if on_gpu() else "CPU"
    trl = rec.pop("trl")[1:]  # the first rollout of each side warms up
    out = {"trl": {"time_per_update_s": statistics.median(r["time"] / updates for r in trl)}}
    out["trl"]["tokens_per_s"] = statistics.median(r["tokens"] / r["time"] for r in trl)
    out["trl"]["response_tokens"] = statistics.fmean(r["tokens"] / args.samples for r in trl)
    print(
        f"TRL GRPOTrainer: {out['trl']['time_per_update_s']:.3f} s {unit} per update, "
        f"{out['trl']['tokens_per_s']:.0f} generated tokens per {unit}-second, "
        f"{out['trl']['response_tokens']:.1f} tokens per response"
    )
    for name, runs in rec.items():
        runs = runs[1:]
        res = {
            "time_per_update_vs_trl": statistics.median(r["time"] / t["time"] for r, t in zip(runs, trl, strict=True)),
            "tokens_per_s_vs_trl": statistics.median(
                (r["tokens"] / r["time"]) / (t["tokens"] / t["time"]) for r, t in zip(runs, trl, strict=True)
            ),
            "time_per_update_s": statistics.median(r["time"] / updates for r in runs),
            "response_tokens": statistics.fmean(r["tokens"] / args.samples for r in runs),
        }
        out[name] = res
        print(
            f"{name:22s} {unit} per update {res['time_per_update_vs_trl']:.2f}x TRL "
            f"({res['time_per_update_s']:.3f} s), "
            f"tokens per {unit}-second {res['tokens_per_s_vs_trl']:.2f}x TRL, "
            f"{res['response_tokens']:.1f} tokens per response"
        )
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument(
        "--model",
        default=None,
        help="Policy folder (e.g. a converted SmolLM2-135M-Instruct); default: the demo's warm-started policy, built "
        "as bench_ppo_sample_efficiency builds it.",
    )
    p.add_argument("--rollouts", type=int, default=8, help="Paired rollouts after a warm-up one.")
    p.add_argument("--samples", type=int, default=16, help="Samples per rollout.")
    p.add_argument("--group-size", type=int, default=4, help="Samples per prompt (TRL, grpo, rloo).")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--epochs", type=int, default=4, help="Passes over each rollout (TRL's num_iterations).")
    p.add_argument("--minibatches", type=int, default=1, help="Updates per pass (TRL's steps_per_generation).")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--estimators", default="grpo,rloo,gae")
    p.add_argument("--value-models", default="head,separate,lora", help="The critics of gae.")
    p.add_argument("--backends", default="hf,exact", help="text2grad's generation backends.")
    p.add_argument("--workdir", default=str(results_dir() / "work-ppo-step"))
    args = p.parse_args()

    import torch

    if not on_gpu():
        torch.set_num_threads(1)
    out_dir = results_dir(args.smoke)
    if args.smoke:
        args.rollouts, args.samples, args.group_size, args.max_new_tokens, args.epochs = 1, 4, 2, 8, 2
        args.workdir = str(PPO_SMOKE_WORK)  # the policy bench_ppo_sample_efficiency --smoke builds, too
    for name in ("estimators", "value_models", "backends"):
        setattr(args, name, getattr(args, name).split(","))
    model = args.model or demo_policy(args.workdir, args.smoke)

    from t2g_core.demo import make_demo_feedback

    prompts = make_demo_feedback("summarization", 16 if args.smoke else 256, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        out = interleaved(args, model, prompts, Path(tmp))
    print("differences that cannot be removed:\n- " + "\n- ".join(DIFFERENCES))
    out["differences"] = DIFFERENCES
    out["config"] = vars(args) | {"model": model, "torch_threads": torch.get_num_threads()}
    save_json(out_dir / "vs_trl.json", out)


if __name__ == "__main__":
    main()
