"""text2grad core library: pure Python + torch/transformers.

Never imports prefect or mlflow and reads no environment variables (tests/core/test_purity.py proves it).

Glossary used across modules:
- ``*_ids``: token ids; ``*_mask``: bool tensors, True = real token.
- ``logprobs`` / ``old_logprobs`` / ``ref_logprobs``: per-token log-probabilities of the sampled tokens.
- spans: half-open character offsets ``(start, end)`` into the response text.
- ``per_token_*`` vs ``per_seq_*``: shapes (B, T) vs (B,).
"""

__version__ = "0.1.0"
