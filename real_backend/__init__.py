"""Real backend: model runner, paged KV cache, decoders, zoo (issue: the real backend)."""
