"""Compact Llama-family model (Llama 2/3, Mistral, Qwen2) over a paged KV cache."""

from real_backend.model.config import ModelArgs
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import SeqStep, Transformer

__all__ = ["ModelArgs", "SeqStep", "Transformer", "load_checkpoint"]
