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


def saved_random_llama(folder, vocab: int, scale: float, seed: int = 0):
    """A random-init `LlamaForCausalLM` of TINY_SHAPE (eager attention), every weight drawn
    from N(0, scale), saved to `folder` as a checkpoint; returns the transformers model."""
    import torch
    import transformers

    config = transformers.LlamaConfig(**TINY_SHAPE, vocab_size=vocab)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0.0, scale)
    hf.save_pretrained(folder)
    return hf
