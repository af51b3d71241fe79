"""What the model answers: the length of each prompt's response, by serving them all.

The prompts go through the real engine under continuous batching, with real stops (EOS and
the stop tokens), up to `max_new` tokens each. Sampling draws from each request's own
stream (seed, prompt index), so a length does not depend on how the prompts were batched.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from real_backend.engine import RealEngine, ServeOptions
from real_backend.model.transformer import Transformer
from workbench.scenario.decoders import VanillaDecoderConfig
from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

BLOCK_SIZE = 16
MAX_BATCH = 64


def generate_lengths(
    model: Transformer,
    prompts: list[list[int]],
    *,
    max_new: int,
    temperature: float,
    seed: int,
    stop_ids: frozenset[int],
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Tokens the model generates for each prompt (EOS or stop token included). # (n,)"""
    n = len(prompts)
    prompt_tokens = np.array([len(p) for p in prompts], dtype=np.int64)  # (n,)
    workload = Workload(
        arrival_s=np.zeros(n), prompt_tokens=prompt_tokens, output_tokens=np.full(n, max_new)
    )
    longest = int(prompt_tokens.max()) + max_new
    num_blocks = int(MAX_BATCH * blocks_for(longest, BLOCK_SIZE) * 1.02) + 1
    policy = ContinuousBatching(
        num_blocks=num_blocks,
        block_size=BLOCK_SIZE,
        max_batch_size=MAX_BATCH,
        max_batched_tokens=max(8192, int(prompt_tokens.max())),
    )
    options = ServeOptions(
        sampling=VanillaDecoderConfig(kind="vanilla", temperature=temperature),
        seed=seed,
        ignore_eos=False,  # EOS ids are part of stop_ids
        stop_token_ids=stop_ids,
    )
    engine = RealEngine(model, model.new_cache(num_blocks, BLOCK_SIZE), policy, options)
    _records, outputs = engine.serve(workload, prompts, progress)
    return np.array([len(outputs[i]) for i in range(n)], dtype=np.int64)
