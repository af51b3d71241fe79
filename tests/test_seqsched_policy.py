"""The sequence-scheduling policy on hand-made groups: padded static batches, truncation at
the generation limit, FCR failures re-queued in failure order, and a batch list that is the
same whichever engine drives the policy."""

from __future__ import annotations

import numpy as np
import pytest
from fake_cost import LinearCost
from seqsched_helpers import batch_workload, batches_of, drive, seq, seqsched

from simulator.engine import Simulation
from workbench.errors import WorkbenchError
from workbench.metrics.batch import batch_summary
from workbench.scheduling.routing import RoundRobin


def test_a_batch_prefills_padded_then_decodes_until_its_longest_member() -> None:
    p = seqsched(batch_size=3)
    for s in (seq(0, 2, 2, prompt=5), seq(1, 6, 6, prompt=9), seq(2, 4, 4, prompt=3)):
        p.add(s, 0.0)
    plan = p.schedule(0.0)
    assert plan is not None
    assert [c.seq.request_id for c in plan.prefills] == [0, 2, 1]  # sorted by prediction
    assert [c.tokens for c in plan.prefills] == [9, 9, 9]  # padded to the longest prompt
    p.complete(plan)
    plan = p.schedule(0.0)
    assert plan is not None and plan.decode_batch_size == 3 and plan.repeatable_steps == 1
    assert plan.decode_context_sum == 3 * (9 + 1)
    out = drive(p)
    assert out.finished == [0, 2, 1]
    assert out.generated == {0: 2, 2: 4, 1: 6}
    assert batches_of(p) == [((0, 2, 1), 512, False)]
    assert p.batch_log[0].steps == 6  # finished members stay as padding until the longest


def test_outputs_beyond_the_generation_limit_are_truncated_there() -> None:
    p = seqsched(generation_limit=10)
    p.add(seq(0, 25, 30), 0.0)
    p.add(seq(1, 4, 4), 0.0)
    out = drive(p)
    assert out.generated == {1: 4, 0: 10}
    assert out.preempted == []  # truncation is not a failure


def test_fcr_failures_are_recomputed_after_the_group_in_failure_order() -> None:
    # Predictions under the truth for requests 1, 3 and 4: each fails at its batch's cap.
    p = seqsched(batch_size=2, fcr=True, group_size=6)
    truth = [3, 9, 4, 12, 7, 2]
    guess = [3, 5, 4, 6, 5, 2]
    for i, (t, g) in enumerate(zip(truth, guess, strict=True)):
        p.add(seq(i, t, g), 0.0)
    out = drive(p)
    assert batches_of(p) == [
        ((5, 0), 3, False),
        ((2, 1), 5, False),
        ((4, 3), 6, False),
        ((1, 4), 512, True),  # failure order: 1 (second batch), then 4 and 3 (third)
        ((3,), 512, True),
    ]
    assert [log.failed for log in p.batch_log] == [(), (1,), (4, 3), (), ()]
    assert out.preempted == [1, 4, 3]  # each handed to the engine once, as a preemption
    assert out.generated == dict(enumerate(truth))  # the final attempt generates it all
    assert p.outstanding() == 0 and p.used_blocks == 0


def test_failures_of_one_batch_keep_slot_order_not_true_length_order() -> None:
    p = seqsched(batch_size=2, fcr=True)
    p.add(seq(0, 20, 4), 0.0)  # slot 0, the longer truth
    p.add(seq(1, 9, 5), 0.0)
    out = drive(p)
    assert out.preempted == [0, 1]
    assert batches_of(p)[1] == ((0, 1), 512, True)


def test_a_member_reaching_the_cap_exactly_is_done_not_failed() -> None:
    p = seqsched(batch_size=2, fcr=True)
    p.add(seq(0, 5, 5), 0.0)
    p.add(seq(1, 4, 5), 0.0)
    out = drive(p)
    assert out.preempted == [] and [log.failed for log in p.batch_log] == [()]


def test_groups_run_in_arrival_order_with_their_recomputes_before_the_next_group() -> None:
    p = seqsched(batch_size=2, fcr=True, group_size=2)
    for i, (t, g) in enumerate([(8, 4), (2, 2), (1, 1), (3, 3)]):
        p.add(seq(i, t, g), 0.0)
    drive(p)
    assert [(b[0], b[2]) for b in batches_of(p)] == [
        ((1, 0), False),
        ((0,), True),
        ((2, 3), False),
    ]
    assert [log.group for log in p.batch_log] == [0, 0, 1]


def test_stepping_one_by_one_gives_the_same_batches() -> None:
    def run(bulk: bool) -> tuple[list, list[int]]:
        p = seqsched(batch_size=2, fcr=True)
        for i, (t, g) in enumerate([(9, 5), (3, 3), (6, 7), (2, 1)]):
            p.add(seq(i, t, g), 0.0)
        out = drive(p, bulk=bulk)
        return batches_of(p), out.finished

    assert run(True) == run(False)


def test_a_batch_whose_kv_rectangle_cannot_fit_is_refused_clearly() -> None:
    p = seqsched(batch_size=2, num_blocks=10, generation_limit=64)
    p.add(seq(0, 4, 4), 0.0)
    p.add(seq(1, 4, 4), 0.0)
    with pytest.raises(WorkbenchError, match=r"scheduler\.kv_cache.*KV blocks"):
        p.schedule(0.0)


def test_sorting_needs_predictions() -> None:
    with pytest.raises(ValueError, match="no predicted length"):
        seqsched().add(seq(0, 4, None), 0.0)
    seqsched(order="arrival").add(seq(0, 4, None), 0.0)  # the vanilla baseline needs none


def test_the_simulator_runs_the_batches_a_bare_loop_runs() -> None:
    """One half of 'same batches on every backend': the real-backend half drives the same
    policy with the real engine and compares `batches_of` the same way."""
    truth, guess = [3, 9, 4, 12, 7, 2, 30, 1], [3, 5, 4, 6, 5, 2, 40, 1]
    loop = seqsched(batch_size=2, fcr=True, group_size=5)
    for i, (t, g) in enumerate(zip(truth, guess, strict=True)):
        loop.add(seq(i, t, g), 0.0)
    drive(loop)
    simulated = seqsched(batch_size=2, fcr=True, group_size=5)
    records = Simulation(
        batch_workload(truth, guess), [simulated], [LinearCost()], RoundRobin()
    ).run()
    assert batches_of(simulated) == batches_of(loop)
    assert np.array_equal(records.requests.output_tokens, truth)
    assert np.array_equal(records.requests.preemptions, [0, 1, 0, 1, 1, 0, 0, 0])


def test_paper_metrics_from_the_records_of_a_hand_made_run() -> None:
    # Sorted by prediction: [0, 2] cap 4 (length 4), [1, 3] cap 8: 1 (true 10) fails at 8,
    # then the recompute batch [1] runs 10 steps.
    truth, guess = [3, 10, 4, 8], [3, 6, 4, 8]
    policy = seqsched(batch_size=2, fcr=True)
    records = Simulation(batch_workload(truth, guess), [policy], [LinearCost()], RoundRobin()).run()
    assert [log.steps for log in policy.batch_log] == [4, 8, 10]
    summary = batch_summary(records)
    assert summary["decode_iterations"] == 4 + 8 + 10
    assert summary["effective_token_ratio"] == pytest.approx(25 / (2 * 4 + 2 * 8 + 1 * 10))
    assert summary["effective_token_ratio_paper"] == pytest.approx(25 / (4 + 4 + 8 + 10))
    assert summary["avg_batch_length"] == pytest.approx((4 + 4 + 8 + 10) / 4)
    assert summary["fcr_ratio"] == pytest.approx(1 / 4)


LONG_TRUTH, LONG_GUESS = [3, 50, 4, 8], [3, 25, 4, 8]  # request 1 is over the limit of 20


def test_a_row_longer_than_every_cap_fails_once_and_counts_as_the_paper_counts_it() -> None:
    """The paper's FCR rule: request 1 has no end any batch reaches. Its batch [3, 1] keeps
    its cap of 25 (above the limit), runs 25 steps and fails it; the recompute batch (cap:
    the limit) cuts it at 20 and it ends there: recomputed once, never failed again."""
    policy = seqsched(batch_size=2, fcr=True, generation_limit=20)
    workload = batch_workload(LONG_TRUTH, LONG_GUESS)
    records = Simulation(workload, [policy], [LinearCost()], RoundRobin()).run()
    assert batches_of(policy) == [((0, 2), 4, False), ((3, 1), 25, False), ((1,), 20, True)]
    assert [log.failed for log in policy.batch_log] == [(), (1,), ()]
    assert [log.steps for log in policy.batch_log] == [4, 25, 20]
    assert records.requests.output_tokens.tolist() == [3, 20, 4, 8]  # cut at the limit
    assert records.requests.preemptions.tolist() == [0, 1, 0, 0]
    assert set(records.requests.status) == {"finished"}
    summary = batch_summary(records)
    assert summary["decode_iterations"] == 4 + 25 + 20
    assert summary["fcr_ratio"] == pytest.approx(1 / 4)  # the paper's failure ratio
    # The paper counts request 1 once, in its recompute batch, with what it generated there.
    assert summary["effective_token_ratio_paper"] == pytest.approx(35 / (4 + 4 + 25 + 20))
    assert summary["avg_batch_length"] == pytest.approx((4 + 4 + 25 + 20) / 4)
    assert summary["effective_token_ratio"] == pytest.approx(35 / (2 * 4 + 2 * 25 + 1 * 20))


def test_truncation_cuts_a_row_over_the_limit_where_it_runs_and_never_fails_it() -> None:
    policy = seqsched(batch_size=2, fcr=True, generation_limit=20, over_limit="truncate")
    workload = batch_workload(LONG_TRUTH, LONG_GUESS)
    records = Simulation(workload, [policy], [LinearCost()], RoundRobin()).run()
    assert batches_of(policy) == [((0, 2), 4, False), ((3, 1), 20, False)]  # cap clipped
    assert records.requests.output_tokens.tolist() == [3, 20, 4, 8]
    assert batch_summary(records)["fcr_ratio"] == 0
    assert batch_summary(records)["decode_iterations"] == 4 + 20


def test_without_fcr_a_row_over_the_limit_is_cut_at_the_limit_either_way() -> None:
    for over_limit in ("recompute", "truncate"):
        p = seqsched(batch_size=2, generation_limit=20, over_limit=over_limit)
        for i, (t, g) in enumerate(zip(LONG_TRUTH, LONG_GUESS, strict=True)):
            p.add(seq(i, t, g), 0.0)
        out = drive(p)
        assert out.generated == {0: 3, 2: 4, 3: 8, 1: 20} and out.preempted == [], over_limit
        assert [log.steps for log in p.batch_log] == [4, 20], over_limit


def test_a_member_stopped_early_by_the_engine_finishes_there() -> None:
    p = seqsched(batch_size=2)
    p.add(seq(0, 9, 9), 0.0)
    p.add(seq(1, 5, 5), 0.0)
    plan = p.schedule(0.0)
    assert plan is not None
    result = p.complete(plan, 1, stopped={0})  # an EOS at its first token (real backend)
    assert [s.request_id for s in result.finished] == [0]
    out = drive(p)
    assert out.finished == [1] and p.batch_log[0].steps == 5
