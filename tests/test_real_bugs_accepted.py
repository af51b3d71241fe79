"""Issue 21 #4: a step's `accepted_tokens` counts only drafted tokens really emitted, not the
ones cut off after an EOS or stop token (or past the request's length)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decoder_models import DECODER_VOCAB, noisy_copy, one_thread  # noqa: E402
from test_lookahead_lossless import copying_model  # noqa: E402

from real_backend.decoders.drafter import Drafter  # noqa: E402
from real_backend.decoders.lookahead import LookaheadDecoder  # noqa: E402
from real_backend.decoders.speculative import SpeculativeDecoder  # noqa: E402
from real_backend.engine import RealEngine, ServeOptions  # noqa: E402
from workbench.metrics.decoder import decoder_summary  # noqa: E402
from workbench.records import RunRecords  # noqa: E402
from workbench.scenario.decoders import (  # noqa: E402
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
    VanillaDecoderConfig,
)
from workbench.scheduling.continuous import ContinuousBatching  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


PERIOD = 5


@pytest.fixture(scope="module")
def stops(decoder_vanilla: dict[int, list[int]]) -> frozenset[int]:
    """The two tokens the free-running outputs emit most: many responses stop early."""
    counts = np.bincount(
        [t for out in decoder_vanilla.values() for t in out], minlength=DECODER_VOCAB
    )
    return frozenset(np.argsort(counts)[-2:].tolist())


@pytest.fixture(scope="module")
def speculative_run(decoder_target, decoder_workload, stops):
    """A noisy-copy draft (k = 6) on the shared random target, stopping at `stops`."""
    cfg = SpeculativeDecoderConfig(
        kind="speculative", num_speculative_tokens=6, draft={"name": "d"}
    )
    draft = noisy_copy(decoder_target, 0.05)

    def make(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, cfg), cfg)

    return serve_with_stops(decoder_target, decoder_workload, make, stops)


@pytest.fixture(scope="module")
def lookahead_run():
    """A model that repeats its prompt's pattern of PERIOD tokens (lookahead accepts whole
    n-grams of it), each prompt a rotation of the pattern, stopping at the pattern's first
    token: every response stops at a different place of a multi-token emission."""
    model = copying_model(32, PERIOD)
    pattern = [int(t) for t in np.random.default_rng(0).permutation(32)[:PERIOD]]
    prompts = [((pattern[b:] + pattern[:b]) * 3)[: 8 + b] for b in range(PERIOD)]
    w = Workload(
        arrival_s=np.zeros(PERIOD),
        prompt_tokens=np.array([len(p) for p in prompts]),
        output_tokens=np.full(PERIOD, 40),
    )
    cfg = LookaheadDecoderConfig(
        kind="lookahead", window=3, ngram=3, candidates=3, prompt_pool=True
    )
    make = lambda model, cache: LookaheadDecoder(model, cache, cfg)  # noqa: E731
    return serve_with_stops(model, (w, prompts), make, frozenset(pattern[:1]))


def serve_with_stops(target, workload, make_decoder, stops: frozenset[int]):
    cache = target.new_cache(512, 4)
    decoder = make_decoder(target, cache)
    policy = ContinuousBatching(
        num_blocks=512, block_size=4, max_batch_size=8, max_batched_tokens=4096,
        lookahead_slots=decoder.lookahead_slots,
    )  # fmt: skip
    options = ServeOptions(
        VanillaDecoderConfig(kind="vanilla"), seed=0, ignore_eos=False,
        stop_token_ids=stops,
    )  # fmt: skip
    records, _outputs = RealEngine(target, cache, policy, options, decoder).serve(*workload)
    return records, workload[0].output_tokens


def decode_emitted_per_step(records: RunRecords) -> Counter[int]:
    """Tokens emitted by decodes in each step: every emission but a prefill's (the first of a
    span that does not continue the request's previous span)."""
    e = records.emissions
    spans = sorted(zip(e.request_id, e.first_step, e.last_step, e.tokens_per_step, strict=True))
    emitted: Counter[int] = Counter()
    previous: tuple[int, int] | None = None
    for rid, first, last, tokens in spans:
        continues = previous == (rid, first - 1)
        for step in range(first if continues else first + 1, last + 1):
            emitted[step] += int(tokens)
        previous = (rid, int(last))
    return emitted


@pytest.mark.parametrize("run", ["speculative_run", "lookahead_run"])
def test_accepted_tokens_are_the_decode_tokens_emitted_beyond_one(request, run: str) -> None:
    records, drawn = request.getfixturevalue(run)
    assert (records.requests.status == "finished").all()
    assert (records.requests.output_tokens < drawn).any()  # stops ended some responses early
    steps = records.steps
    emitted = decode_emitted_per_step(records)
    beyond_one = [
        emitted[int(s)] - int(d) for s, d in zip(steps.step, steps.decode_tokens, strict=True)
    ]
    assert steps.accepted_tokens.sum() > 0  # multi-token emissions happened
    assert steps.accepted_tokens.tolist() == beyond_one  # per step: accepted = emitted - 1 each
    summary = decoder_summary(records)
    gap = summary["mean_tokens_per_decode_step"] - summary["mean_accepted_tokens"]
    assert gap == pytest.approx(1.0)
