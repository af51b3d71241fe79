"""What the simulator's draft forwards compute, step by step: a prompt prefills, a catch-up
of a few tokens runs as a decode token and extras (as the real drafter's forward does)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost_models.base import CostModel, StepWork
from simulator.decoders.draft_cost import DraftCache, served_draft_errors_text, served_draft_scale
from workbench.records import DraftForwards


class Recorder(CostModel):
    """Prices every forward at 1 ms and keeps the work it was asked."""

    def __init__(self) -> None:
        self.works: list[StepWork] = []

    def step_time_s(self, work: StepWork) -> float:
        self.works.append(work)
        return 0.001

    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        for _ in range(n_steps):
            self.step_time_s(StepWork(decode_batch_size=batch_size))
        return np.full(n_steps, 0.001)


def test_a_first_draft_prefills_the_prompt_then_chains_single_tokens() -> None:
    model = Recorder()
    cache = DraftCache(model)
    tokens = np.array([30, 50])  # prompt + first token, nothing cached
    assert cache.step_s([0, 1], tokens, np.array([3, 3]), None) == 0.003
    first = model.works[0]
    assert first.prefill_chunk_tokens == (30, 50) and first.prefill_context_tokens == (0, 0)
    assert first.decode_batch_size == 0
    assert [w.decode_batch_size for w in model.works[1:]] == [2, 2]


def test_a_catch_up_is_a_decode_token_and_extras_over_the_draft_s_cache() -> None:
    """After a fully accepted chain of 3 the draft lacks the bonus and its last draft: two
    new tokens over its cache, priced as a verification of one extra token."""
    model = Recorder()
    cache = DraftCache(model)
    ids, tokens, forwards = [0, 1], np.array([30, 50]), np.array([3, 3])
    cache.step_s(ids, tokens, forwards, None)
    cache.update(ids, tokens, forwards, np.array([3, 0]), tree=False)  # all, then none
    model.works.clear()
    later = tokens + np.array([4, 1])  # emitted: 3 accepted + bonus, and the bonus alone
    cache.step_s(ids, later, forwards, None)
    catch_up = model.works[0]
    assert catch_up.prefill_chunk_tokens == ()
    assert catch_up.decode_batch_size == 2 and catch_up.decode_extra_tokens == 1
    # Request 0 cached 32 (30 + two of its three drafts): its first new token sees 33 keys,
    # its extra one 34. Request 1 cached its 50 and catches up its bonus alone: 51 keys.
    assert catch_up.decode_context_sum == 33 + 51 and catch_up.decode_context_max == 51
    assert catch_up.decode_extra_context_sum == 34


def test_a_served_run_s_draft_forwards_priced_against_their_time() -> None:
    """Each step's forwards, as the drafter ran them, priced (1 ms each here) against the
    step's measured draft time: summed error first, then the median of the steps'."""
    prompt = ((20, 0), (1, 9))  # a prompt prefilled beside a single-token catch-up
    chain = ((2, 30), (1, 31))
    drafts = [
        DraftForwards((prompt, ((1, 21), (1, 10))), 0.004),  # priced 2 ms: -50 %
        DraftForwards((chain, chain, chain), 0.002),  # priced 3 ms: +50 %
        DraftForwards((chain,), 0.001),  # priced 1 ms: 0 %
    ]
    model = Recorder()
    text = served_draft_errors_text(model, drafts)
    assert text == "the draft's forwards -14.3% (median |error| 50.0%, 3 steps)"
    prompt_work, catch_up = model.works[0], model.works[2]
    assert prompt_work.prefill_chunk_tokens == (20,) and prompt_work.decode_batch_size == 1
    assert prompt_work.decode_context_sum == 10  # the other sequence's 9 cached + its token
    assert catch_up.decode_batch_size == 2 and catch_up.decode_extra_tokens == 1


def test_the_draft_s_own_scale_makes_its_served_forwards_add_up() -> None:
    """`--speed-matched` prices a draft at the speed its own forwards ran (4 + 2 + 1 ms
    measured against 6 ms priced), times whatever scale its model had."""
    chain = ((2, 30), (1, 31))
    drafts = [
        DraftForwards((chain, chain, chain, chain), 0.004),
        DraftForwards((chain,), 0.002),
        DraftForwards((chain,), 0.001),
    ]
    model = Recorder()
    model.price_scale = 2.0  # type: ignore[attr-defined]
    assert served_draft_scale(model, drafts) == pytest.approx(2.0 * 7 / 6)  # type: ignore[arg-type]
    unpriced = [DraftForwards((), 0.001)]  # a step without draft forwards prices to nothing
    assert served_draft_scale(model, unpriced) is None  # type: ignore[arg-type]
