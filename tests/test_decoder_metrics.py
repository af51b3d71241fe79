"""Multi-token decoder metrics on hand-made records (`workbench.metrics.decoder`)."""

from __future__ import annotations

import pytest
from burst_records import sequential_run
from fixtures_records import RequestSpec, make_records

from workbench.metrics import summarize
from workbench.metrics.decoder import category_breakdown, decoder_summary

# Output 14: the prefill's token, then decode steps emitting 1, 5, 5, 2 tokens with rooms
# 12, 11, 6, 1 (k = 4: drafted 4, 4, 4, 1 = 13; accepted 0, 4, 4, 1 = 9).
TOKENS = [1, 5, 5, 2]


def one_request(category: list | None = None):
    tokens = iter(TOKENS)
    return sequential_run([14], lambda room: next(tokens) - 1, k=4, category=category)


def test_acceptance_tokens_per_step_and_extra_flops() -> None:
    s = decoder_summary(one_request())
    assert s["acceptance_rate"] == pytest.approx(9 / 13)
    assert s["mean_accepted_tokens"] == pytest.approx(9 / 4)
    assert s["mean_tokens_per_decode_step"] == pytest.approx(13 / 4)
    assert s["step_compression_ratio"] == pytest.approx(13 / 4)
    assert s["extra_flops_share"] == pytest.approx((4 + 13) / (4 + 9) - 1)


def test_acceptance_by_position_conditions_on_drafting_the_position() -> None:
    s = decoder_summary(one_request())
    # Room ≥ 1: all four steps, three accepted ≥ 1; room ≥ 2..4: steps 1-3, two accepted 4.
    assert s["acceptance_at_position_1"] == pytest.approx(3 / 4)
    for i in (2, 3, 4):
        assert s[f"acceptance_at_position_{i}"] == pytest.approx(2 / 3)
    assert "acceptance_at_position_5" not in s


def test_compression_averages_requests_while_tokens_per_step_pools_steps() -> None:
    short = iter([5])  # output 6: one decode step of 5
    records = sequential_run([6, 3], lambda room: next(short, 1) - 1, k=4)
    s = decoder_summary(records)
    assert s["mean_tokens_per_decode_step"] == pytest.approx((5 + 1 + 1) / 3)
    assert s["step_compression_ratio"] == pytest.approx((5 / 1 + 2 / 2) / 2)


def test_a_burst_is_one_inter_token_gap_as_in_vllm() -> None:
    s = summarize(one_request())
    assert s["n_itl"] == 4  # four decode emissions after the first token, not 13 tokens
    assert s["mean_itl_ms"] == pytest.approx(10.0)  # one 10 ms step between emissions
    assert s["mean_tpot_ms"] == pytest.approx(40.0 / 13)  # the same time over every token
    assert s["mean_tokens_per_emission"] == pytest.approx(14 / 5)


def test_summary_has_decoder_keys_only_when_the_run_drafted() -> None:
    assert "acceptance_rate" in summarize(one_request())
    vanilla = make_records({0: [(0.0, 0.1), (0.1, 0.1)]}, [RequestSpec(0, 0.0, [(0, 0, 1, 1)])])
    assert not any(key.startswith("accept") for key in summarize(vanilla))


def test_category_breakdown_splits_requests_by_prompt_category() -> None:
    records = sequential_run([6, 6, 4], lambda room: room, k=4, category=["math", None, "qa"])
    by_category = category_breakdown(records)
    assert sorted(by_category) == ["math", "qa"]
    assert by_category["math"]["mean_tokens_per_decode_step"] == 5.0  # all accepted
    assert by_category["qa"]["completed"] == 1
    assert category_breakdown(one_request()) == {}  # no categories: nothing to split
