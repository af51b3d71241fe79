"""KV rollback of speculative decoding: exact cache lengths every step, nothing leaked."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decoder_models import checked, noisy_copy, one_thread, random_model, serve  # noqa: E402

from real_backend.prompts import synthetic_prompts  # noqa: E402
from workbench.scenario.decoders import SpeculativeDecoderConfig  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

VOCAB = 48
single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


@pytest.mark.parametrize(
    "config",
    [
        {"num_speculative_tokens": 5},
        {"num_speculative_tokens": 6, "adaptive": {"min_tokens": 1, "window": 3}},
        {"tree": {"kind": "dynamic", "max_nodes": 10, "top_k": 2, "max_depth": 6}},
    ],
    ids=["chain", "adaptive", "dynamic tree"],
)
def test_thousands_of_sequence_steps_under_preemption_leave_no_block(config):
    target = random_model(VOCAB, seed=4)
    draft = noisy_copy(target, 0.08, seed=5)
    rng = np.random.default_rng(0)
    n = 48
    w = Workload(np.zeros(n), rng.integers(2, 20, n), rng.integers(60, 160, n))
    workload = (w, synthetic_prompts(w.prompt_tokens, VOCAB, seed=0))
    cfg = SpeculativeDecoderConfig(kind="speculative", **config)
    # 60 blocks of 4 tokens cannot hold 6 sequences of ~180 tokens: preemptions recompute.
    kw = {"max_batch_size": 6, "num_blocks": 160, "block_size": 4}
    engine, records, outputs = serve(target, workload, checked(draft, cfg), **kw)
    _, _, vanilla = serve(target, workload, **kw)
    assert outputs == vanilla
    assert engine.decoder.sequence_steps > 2000
    assert records.requests.preemptions.sum() > 0
    for cache in (engine.cache, engine.decoder.drafter.cache):
        assert cache.num_free_blocks == cache.allocator.num_blocks
        assert not cache.tables
    assert engine.decoder.adaptive is None or len(engine.decoder.adaptive) == 0
