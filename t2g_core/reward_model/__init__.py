"""Reward models: from (prompt, response), a critique and the quoted good/poor spans (generative), or token labels
(:mod:`.tagger`). :mod:`.prompts` builds every prompt and target, :mod:`.data` the ``rm_data`` rows, :mod:`.train`
and :mod:`.tagger_train` train, :mod:`.evaluate` measures, :mod:`.scoring` scores for PPO. Heavy imports (torch,
transformers, peft, trl) happen inside functions; importing this package is cheap.
"""
