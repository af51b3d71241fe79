"""APAR forks' chunks as the real engine computes them: rows of the decode forward.

The engine runs a fork's chunk (its fork and child tokens over the parent's prefix) in the
decodes' forward, not as a prefill forward. The simulator's StepWork marks such chunks, the
calibrated cost model prices them as that forward's extra rows, and a served step's record
counts them the same way, so a twin and the real steps it is checked against agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from calibration_helpers import truth
from scenario_helpers import SCENARIOS
from test_apar_sim import SCENARIO

import simulator.run
from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import verifies
from simulator.cost_models.fixed_step import FixedStepCostModel
from workbench.scenario.loader import load_scenario
from workbench.scheduling.plan import PrefillChunk, StepPlan, chunk_rows, forward_split
from workbench.scheduling.sequence import Sequence


def _plan(decodes: int, chunks: list[PrefillChunk]) -> StepPlan:
    return StepPlan(
        step=3,
        prefills=chunks,
        decode_batch_size=decodes,
        decode_context_sum=decodes * 50,
        decode_context_max=60 if decodes else 0,
        emitting=decodes,
        kv_blocks_used=np.zeros(1, dtype=np.int64),
    )


def _chunks() -> list[PrefillChunk]:
    prompt = Sequence(request_id=1, arrival_s=0.0, prompt_tokens=24, output_tokens=8)
    fork = Sequence(request_id=9, arrival_s=0.0, prompt_tokens=10, output_tokens=30, parent_id=4)
    return [PrefillChunk(prompt, 24, 0), PrefillChunk(fork, 2, 40)]


def test_forks_chunks_beside_decodes_run_in_the_decode_forward() -> None:
    prompt, fork = _chunks()
    assert fork.is_fork and not prompt.is_fork
    forks, others = forward_split(_plan(3, [prompt, fork]))
    assert forks == [fork] and others == [prompt]
    forks, others = forward_split(_plan(0, [prompt, fork]))  # no decodes: a prefill forward
    assert forks == [] and others == [prompt, fork]


def test_chunk_rows_count_each_token_over_the_cache_and_the_chunk_before_it() -> None:
    assert chunk_rows([2, 3], [40, 10]) == (5, (2 * 40 + 1 + 2) + (3 * 10 + 1 + 2 + 3))
    assert chunk_rows([], []) == (0, 0)


def test_a_step_with_forks_moves_their_tokens_and_keys_to_the_decode_rows() -> None:
    work = StepWork(
        prefill_chunk_tokens=(2, 2, 24), prefill_context_tokens=(40, 70, 0),
        decode_batch_size=3, decode_context_sum=150, decode_context_max=60,
        decode_extra_tokens=6, decode_extra_context_sum=321, fork_chunks=2,
    )  # fmt: skip
    ran = work.in_decode_forward()
    assert ran.prefill_chunk_tokens == (24,) and ran.prefill_context_tokens == (0,)
    assert ran.decode_extra_tokens == 6 + 4
    assert ran.decode_extra_context_sum == 321 + (2 * 40 + 3) + (2 * 70 + 3)
    assert ran.fork_chunks == 0 and ran.num_tokens == work.num_tokens
    alone = StepWork(prefill_chunk_tokens=(2,), prefill_context_tokens=(40,), fork_chunks=1)
    assert alone.in_decode_forward() is alone  # no decodes: no decode forward to join


def test_a_served_step_records_forks_as_the_twin_prices_them() -> None:
    pytest.importorskip("torch")
    from real_backend.calibration.probe_engine import step_shape
    from real_backend.decoders.base import DecodeOutcome

    plan = _plan(3, _chunks())
    outcome = DecodeOutcome([[5], [6], [7]], verified=3, accepted_per_request=[0, 0, 0])
    shape = step_shape(plan, outcome, None)
    forks, others = forward_split(plan)
    chunks = forks + others
    simulated = StepWork(
        prefill_chunk_tokens=tuple(c.tokens for c in chunks),
        prefill_context_tokens=tuple(c.context_tokens for c in chunks),
        decode_batch_size=3, decode_context_sum=150, decode_context_max=60,
        fork_chunks=len(forks),
    ).in_decode_forward()  # fmt: skip
    recorded = StepWork(
        prefill_chunk_tokens=shape.prefill_chunk_tokens,
        prefill_context_tokens=shape.prefill_context_tokens,
        decode_batch_size=shape.decode_batch_size, decode_context_sum=shape.decode_context_sum,
        decode_context_max=shape.decode_context_max,
        decode_extra_tokens=shape.decode_extra_tokens,
        decode_extra_context_sum=shape.decode_extra_context_sum,
        decode_forks=shape.decode_forks,
    )  # fmt: skip
    assert recorded == simulated and recorded.decode_forks == 1
    assert shape.decode_extra_tokens == 2 and shape.prefill_chunk_tokens == (24,)
    assert shape.decode_extra_context_sum == 2 * 40 + 3
    # Speculating branches: 3 sequences verify 2 drafts each beside the fork's 2 rows.
    drafted = DecodeOutcome([[5], [6], [7]], verified=9, accepted_per_request=[0, 0, 0])
    shape = step_shape(plan, drafted, None)
    assert shape.decode_extra_tokens == 6 + 2
    assert shape.decode_extra_context_sum == (2 * 150 + 3 * 3) + (2 * 40 + 3)
    # No decodes: the chunks are the step's forward, a prefill's.
    shape = step_shape(_plan(0, _chunks()), None, None)
    assert shape.prefill_chunk_tokens == (24, 2) and shape.decode_extra_tokens == 0


def test_the_calibrated_model_prices_a_fork_as_rows_of_the_decode_forward() -> None:
    model = truth()
    fork = StepWork(
        prefill_chunk_tokens=(2,), prefill_context_tokens=(40,),
        decode_batch_size=8, decode_context_sum=400, decode_context_max=50, fork_chunks=1,
    )  # fmt: skip
    as_rows = StepWork(
        decode_batch_size=8, decode_context_sum=400, decode_context_max=50,
        decode_extra_tokens=2, decode_extra_context_sum=2 * 40 + 3,
    )  # fmt: skip
    as_prefill = StepWork(
        prefill_chunk_tokens=(2,), prefill_context_tokens=(40,),
        decode_batch_size=8, decode_context_sum=400, decode_context_max=50,
    )  # fmt: skip
    terms = model.fit.terms
    beyond_rows = terms["f_step"] + terms["f_fork"] + terms["f_key"] * 400  # a fork's own cost
    assert model.step_time_s(fork) == pytest.approx(model.step_time_s(as_rows) + beyond_rows)
    forks_alone = model.step_time_s(fork) - beyond_rows  # its rows: cheaper than a prefill's
    assert forks_alone == pytest.approx(model.step_time_s(as_rows))
    assert forks_alone < model.step_time_s(as_prefill)


def test_a_forking_apar_twin_needs_the_profiles_verify_steps() -> None:
    apar = load_scenario(SCENARIOS / "apar_sim.yaml")
    assert verifies(apar)
    assert not verifies(load_scenario(SCENARIOS / "apar_sim.yaml", ["decoder.max_branches=1"]))
    assert not verifies(load_scenario(SCENARIOS / "apar_sim.yaml", ["decoder.max_depth=1"]))
    assert not verifies(load_scenario(SCENARIOS / "quickstart.yaml"))


class _Spy(FixedStepCostModel):
    """10 ms a step, 1 ms on each of the first four decode steps after a prefill; notes each
    charge beside the step it is for and the reach of the last prompt prefill priced."""

    def __init__(self) -> None:
        super().__init__(10.0)
        self.last: StepWork | None = None  # the step priced last
        self.prompt_reach = 0  # P of the last step with prompts' chunks
        self.charged: list[tuple[StepWork | None, int, int]] = []  # (step, P, prompts' P)

    @property
    def after_prefill_steps(self) -> int:
        return 4

    def after_prefill_s(self, prefill_tokens: int, steps_after: int) -> float:
        self.charged.append((self.last, prefill_tokens, self.prompt_reach))
        return 0.001

    def step_time_s(self, work: StepWork) -> float:
        self.last, n = work, work.fork_chunks
        if len(work.prefill_chunk_tokens) > n:
            chunks, cached = work.prefill_chunk_tokens[n:], work.prefill_context_tokens[n:]
            self.prompt_reach = sum(chunks) + sum(cached)
        return super().step_time_s(work)

    def decode_span_s(
        self, batch_size: int, context_sum: int, n_steps: int, context_max: int = 0
    ) -> np.ndarray:
        self.last = StepWork(decode_batch_size=batch_size, decode_context_sum=context_sum)
        return super().decode_span_s(batch_size, context_sum, n_steps, context_max)


@pytest.mark.parametrize(
    "speculating",
    [(), ("decoder.speculative={num_speculative_tokens: 4, draft: {name: llama-3-8b}}",)],
    ids=["apar", "apar-speculating"],
)
def test_a_replica_charges_after_prompt_prefills_only_not_after_forks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, speculating: tuple[str, ...]
) -> None:
    spy = _Spy()
    monkeypatch.setattr(simulator.run, "build_cost_model", lambda scenario, store: spy)
    path = tmp_path / "apar.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    overrides = [
        "decoder.trees.structured_share=1",
        "workload.arrival={kind: poisson, rate_per_s: 20}",
    ]
    simulator.run.simulate(load_scenario(path, [*overrides, *speculating]))
    assert spy.charged
    assert all(tokens == prompts for _, tokens, prompts in spy.charged)  # never a fork's P
    assert any(w is not None and w.fork_chunks for w, _, _ in spy.charged)  # forks' steps pay
