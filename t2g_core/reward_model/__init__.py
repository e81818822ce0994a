"""Reward models: from (prompt, response), a critique and the quoted good/poor spans (generative), or token labels
(:mod:`.tagger`). :mod:`.prompts` builds every prompt and target, :mod:`.data` the ``rm_data`` rows, :mod:`.train`
and :mod:`.tagger_train` train, :mod:`.evaluate` measures, :mod:`.scoring` scores for PPO. Heavy imports (torch,
transformers, peft, trl) happen inside functions; importing this package is cheap.
"""

from t2g_core.reward_model.prompts import build_rm_prompt, build_rm_target, render_rm_prompt

__all__ = ["RewardModelScorer", "ScoredResponse", "build_rm_prompt", "build_rm_target", "render_rm_prompt", "score"]


def __getattr__(name: str):
    if name in ("RewardModelScorer", "ScoredResponse", "score"):
        from t2g_core.reward_model import scoring

        return getattr(scoring, name)
    raise AttributeError(name)
