"""Generative reward model: given (prompt, response) it writes a critique, then the quoted good/poor spans as JSON.

- :mod:`.prompts`: the single prompt builder (training, evaluation and scoring) and the target format;
- :mod:`.data`: ``rm_data`` rows from feedback + annotations, deterministic split by id hash;
- :mod:`.train`: TRL ``SFTTrainer`` + PEFT LoRA, completion-only loss, checkpoints and resume;
- :mod:`.evaluate`: JSON-valid rate, span/token P/R/F1 against gold spans, ROUGE-L, generation speed;
- :mod:`.scoring`: batched left-padded generation and parsing, ``RewardModelScorer.critique_batch`` for PPO.

Heavy imports (torch, transformers, peft, trl) happen inside functions; importing this package is cheap.
"""

from t2g_core.reward_model.prompts import build_rm_prompt, build_rm_target, render_rm_prompt

__all__ = ["RewardModelScorer", "ScoredResponse", "build_rm_prompt", "build_rm_target", "render_rm_prompt", "score"]


def __getattr__(name: str):
    if name in ("RewardModelScorer", "ScoredResponse", "score"):
        from t2g_core.reward_model import scoring

        return getattr(scoring, name)
    raise AttributeError(name)
