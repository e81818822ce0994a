"""Tiny local models: a byte-level BPE tokenizer and a small causal LM built from scratch, saved as normal
Hugging Face folders so that the rest of the code loads them exactly like a real model id."""

from t2g_core.models.demo_build import DemoModels, ensure_demo_models
from t2g_core.models.tiny import (
    BOS,
    CHAT_TEMPLATE,
    EOS,
    PAD,
    ROLE_TOKENS,
    build_tiny_model,
    train_tokenizer,
    warm_start,
)

__all__ = [
    "BOS",
    "CHAT_TEMPLATE",
    "EOS",
    "PAD",
    "ROLE_TOKENS",
    "DemoModels",
    "build_tiny_model",
    "ensure_demo_models",
    "train_tokenizer",
    "warm_start",
]
