"""The shape of the random-init checkpoints the real-backend tests save with transformers."""

from __future__ import annotations

# Small enough for a few-second CPU test, with GQA (4 query heads over 2 KV heads).
TINY_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
