"""Prefill attention as the kernel divides its work: CTAs per query block and split, the
copies of new keys, the alone / shared / past-one-wave regimes, and the fit against
Vidur's A100 prefill points (fitted and held out)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.kernel_fit import DECODE_KERNEL_NAMES, KernelFit
from simulator.catalogs.models import get_model
from simulator.cost_models.base import StepWork
from simulator.cost_models.fidelity import DEFAULT_DATA
from simulator.cost_models.fitted import FittedCostModel, verified_chunks
from simulator.cost_models.kernel_fitting import fit_attention, predict_attention_s
from simulator.cost_models.kernel_profiles import AttentionPoints, read_attention_points
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.layer_ops import LayerShape
from simulator.cost_models.prefill_attention import (
    PREFILL_KERNELS,
    PrefillWork,
    ceil_sum,
    chunk_work,
    floor_sum,
    prefill_work,
    walked_chunk_work,
)
from workbench.errors import WorkbenchError
from workbench.scenario.system import FittedCostConfig

KVCACHE, VARLEN = PREFILL_KERNELS["flash_decoding"], PREFILL_KERNELS["flash_varlen"]
A100 = get_gpu("a100-80gb")
VIDUR_70B_TP2 = (
    DEFAULT_DATA / "vidur/compute_legacy_attention/a100/meta-llama/Llama-2-70b-hf_tp2"
    / "attention.csv"
)  # fmt: skip


@pytest.fixture(scope="module")
def vidur_prefill() -> AttentionPoints:
    (points,) = read_attention_points(VIDUR_70B_TP2)
    empty = np.zeros(0)
    fields = ("decode_batch", "decode_cached", "decode_table_keys", "decode_s")
    return dataclasses.replace(points, **dict.fromkeys(fields, empty))


def test_every_named_kernel_has_a_prefill_layout() -> None:
    assert set(PREFILL_KERNELS) == set(DECODE_KERNEL_NAMES)


def test_a_causal_chunk_reads_and_copies_up_to_its_own_rows() -> None:
    """128 tokens over 1,024 cached, 64-row CTAs over 128-key blocks: the first reads the
    keys before 1,088 (9 blocks), the second before 1,152 (9); each copies the new keys of
    its blocks, 1,024-1,151 (one block)."""
    w = chunk_work(KVCACHE, 128, 1024, 0, causal=True)
    assert (w.ctas, w.blocks, w.copied, w.longest) == (2, 18, 2.0, ((9, 1.0),))
    w = chunk_work(KVCACHE, 192, 960, 0, causal=True)  # the new keys start mid-block
    assert (w.ctas, w.blocks) == (3, 8 + 9 + 9)  # keys before 1,024, 1,088, 1,152
    assert w.copied == pytest.approx((64 + 192 + 192) / 128)
    w = chunk_work(VARLEN, 256, 0, 0, causal=False)  # 128-row CTAs, 64-key blocks, no copies
    assert (w.ctas, w.blocks, w.copied) == (2, 8, 0.0)


def test_the_closed_form_sums_equal_walking_every_query_block() -> None:
    rng = np.random.default_rng(7)
    for _ in range(2000):
        kernel = (KVCACHE, VARLEN)[rng.integers(2)]
        chunk, cached = (
            int(rng.integers(1, 5000)),
            int(rng.integers(0, 9000)) * int(rng.integers(2)),
        )
        causal = bool(rng.random() < 0.8)
        fast = chunk_work(kernel, chunk, cached, 0, causal)
        walked = walked_chunk_work(kernel, chunk, cached, 0, causal)
        assert (fast.ctas, fast.blocks, fast.longest) == (
            walked.ctas,
            walked.blocks,
            walked.longest,
        )
        assert fast.copied == pytest.approx(walked.copied, abs=1e-9)


def test_ceil_sum_counts_what_the_loop_counts() -> None:
    """Every branch: the step a multiple of the divisor, the divisor a multiple of the
    step (both kernels' tiles), and neither (the floor sum)."""
    rng = np.random.default_rng(5)
    for step, divisor in ((128, 64), (64, 128), (64, 64), (48, 128), (1, 16)):
        for _ in range(300):
            n, offset = int(rng.integers(0, 80)), int(rng.integers(0, 9000)) * int(rng.integers(2))
            loop = sum(-(-(offset + step * j) // divisor) for j in range(1, n + 1))
            assert ceil_sum(n, step, offset, divisor) == loop


def test_floor_sum_counts_what_the_loop_counts() -> None:
    rng = np.random.default_rng(3)
    for _ in range(2000):
        n, m, a, b = (int(x) for x in rng.integers((0, 1, 0, 0), (60, 300, 600, 600)))
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def test_a_short_chunk_over_a_long_cache_is_split() -> None:
    """One 64-row block on 32 heads leaves 76 of 108 SMs idle: FlashAttention splits the
    31 key blocks in 3 (0.89 of a wave) of 11, 11 and 9; the last split copies the chunk."""
    w = prefill_work(KVCACHE, [(64, 3904, 1)], heads=32, multiprocessors=108)
    assert (w.splits, w.ctas, w.blocks, w.copied) == (3, 96, 32 * 31, 32 * 0.5)
    assert w.longest == ((9, 0.5), (11, 0.0))
    assert prefill_work(VARLEN, [(64, 3904, 1)], 32, 108).splits == 1  # never splits


def test_the_step_takes_its_longest_cta_alone_and_a_tail_past_one_wave() -> None:
    """Up to one CTA per SM the longest sets the time; at two per SM (216 slots on an A100)
    still one wave; a 217th CTA starts late and adds the fitted share of a CTA."""
    prefill = KernelTimes(A100, A100.kernel_fit, "fp16", 2).prefill(layer_of_70b_tp2())
    launch = A100.kernel_fit.prefill_attention_launch_s

    def body_s(ctas: int, blocks: int) -> float:
        work = PrefillWork(ctas, ctas * blocks, 0.0, ((blocks, 0.0),), splits=1, keys=0)
        return prefill.work_s(work) - launch

    assert body_s(32, 4) == body_s(108, 4)  # alone: one CTA's time
    assert body_s(216, 30) == pytest.approx(body_s(109, 30))  # shared, one wave
    tail = A100.kernel_fit.prefill_tail_share
    assert body_s(217, 30) / body_s(216, 30) == pytest.approx(217 / 216 + tail)


def test_wider_verification_windows_cost_more() -> None:
    prefill = KernelTimes(A100, A100.kernel_fit, "fp16", 2).prefill(layer_of_70b_tp2())
    prices = [prefill.step_s(((w, 2000, 16),)) for w in (2, 8, 32, 64, 128)]
    assert prices == sorted(prices) and prices[-1] > 1.5 * prices[0]


def test_a_multi_token_decode_is_priced_as_windows_over_its_contexts() -> None:
    work = StepWork(decode_batch_size=3, decode_context_sum=3 * 501, decode_extra_tokens=7)
    assert verified_chunks(work) == [(4, 500, 1), (3, 500, 2)]  # 10 tokens, 500 cached
    even = StepWork(decode_batch_size=2, decode_context_sum=10, decode_extra_tokens=4)
    assert verified_chunks(even) == [(3, 4, 2)]
    uneven = StepWork(
        decode_batch_size=4, decode_context_sum=3 * 100 + 8000, decode_context_max=8000,
        decode_extra_tokens=17,
    )  # fmt: skip
    assert verified_chunks(uneven) == [(6, 7999, 1), (5, 99, 3)]  # 21 tokens


def test_the_longest_verified_sequence_sets_the_price() -> None:
    """Four windows over 100, 100, 100 and 8,000 keys cost more than four over their mean
    (the long one's CTAs walk 8,000 keys), in the kernel and in a fitted model's step."""
    prefill = KernelTimes(A100, A100.kernel_fit, "fp16", 2).prefill(layer_of_70b_tp2())
    assert prefill.step_s(((5, 8000, 1), (5, 100, 3))) > 1.5 * prefill.step_s(((5, 2075, 4),))
    cost = FittedCostModel(
        get_model("llama-2-70b"), A100, A100.kernel_fit, 2, "fp16", FittedCostConfig(kind="fitted")
    )
    uneven = StepWork(
        decode_batch_size=4, decode_context_sum=3 * 101 + 8001, decode_context_max=8001,
        decode_extra_tokens=16,
    )  # fmt: skip
    assert cost.step_time_s(uneven) > cost.step_time_s(replace(uneven, decode_context_max=0))


def test_the_catalog_fit_follows_vidurs_prefill_points(vidur_prefill: AttentionPoints) -> None:
    _, predicted = predict_attention_s(KernelTimes(A100, A100.kernel_fit, "fp16", 2), vidur_prefill)
    errors = predicted / vidur_prefill.prefill_s - 1
    assert len(errors) > 4000
    assert np.mean(np.abs(errors) <= 0.10) > 0.95 and abs(errors.mean()) < 0.02


def test_a_fit_on_short_caches_prices_the_long_ones(vidur_prefill: AttentionPoints) -> None:
    """Fitted on the chunks over at most 1,024 cached tokens, the chunks over more (held
    out: 1,152-4,032) land within 10 %."""
    short = vidur_prefill.prefill_cached <= 1024

    def part(mask: np.ndarray) -> AttentionPoints:
        fields = ("prefill_chunk", "prefill_cached", "prefill_s")
        return dataclasses.replace(
            vidur_prefill, **{f: getattr(vidur_prefill, f)[mask] for f in fields}
        )

    fit = fit_attention(A100, [part(short)], A100.kernel_fit)
    held = part(~short)
    _, predicted = predict_attention_s(KernelTimes(A100, fit, "fp16", 2), held)
    errors = predicted / held.prefill_s - 1
    assert len(errors) > 1000 and np.mean(np.abs(errors) <= 0.10) > 0.90


def test_a_fit_from_before_the_work_split_prefill_asks_for_a_refit(tmp_path: Path) -> None:
    old = dataclasses.asdict(A100.kernel_fit)
    old["attention_compute_efficiency"] = 0.36
    path = tmp_path / "old_fit.json"
    path.write_text(json.dumps(old))
    expected = r"before the work-split prefill attention \(it has attention_compute_efficiency\)"
    with pytest.raises(WorkbenchError, match=expected) as err:
        KernelFit.from_json(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def layer_of_70b_tp2() -> LayerShape:
    (points,) = read_attention_points(VIDUR_70B_TP2)
    return points.shape
