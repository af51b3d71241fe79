"""The grouped attention (the CPU default) equals the reference, group by group."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import TOLERANCES, random_paged_inputs  # noqa: E402

from kernels.grouped_attention import (  # noqa: E402
    CALL_COST,
    decode_attention,
    padding,
    paged_tree_attention,
    row_groups,
)
from kernels.paged_attention import paged_tree_attention as reference  # noqa: E402

# Decodes of short and long contexts, two prefill chunks, a row without new tokens.
CONTEXTS = [3, 250, 31, 900, 0, 40, 17, 600, 120]
NEW = [1, 1, 1, 1, 48, 7, 1, 1, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", ["causal", "chain", "tree"])
def test_equals_the_reference_over_several_groups(mask, dtype):
    gen = torch.Generator().manual_seed(len(mask))
    inputs = random_paged_inputs(
        gen, CONTEXTS, NEW, n_kv=2, group=8, head_dim=64, block_size=16,
        dtype=dtype, mask=mask, device="cpu",
    )  # fmt: skip
    keys = [c + n for c, n in zip(CONTEXTS, NEW, strict=True)]
    assert len(row_groups(NEW, keys, 16 * 64)) >= 3
    out = paged_tree_attention(*inputs.args())
    torch.testing.assert_close(out, reference(*inputs.args()), **TOLERANCES[dtype])
    assert torch.all(out[NEW.index(0)] == 0) and torch.all(out[0, 1:] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("contexts", [[0], [15], [16], [250], [3, 250, 31, 16], [40, 41, 39]])
@pytest.mark.parametrize("mask", ["causal", "tree"])
@pytest.mark.parametrize("group", [1, 4])  # query heads per KV head: MHA and GQA
def test_one_token_rows_attend_by_their_lengths_as_the_reference(contexts, mask, dtype, group):
    """A fresh prompt's token, block edges, one sequence (no mask) or several (cut or not)."""
    gen = torch.Generator().manual_seed(sum(contexts))
    news = [1] * len(contexts)
    inputs = random_paged_inputs(
        gen, contexts, news, n_kv=2, group=group, head_dim=32, block_size=16,
        dtype=dtype, mask=mask, device="cpu",
    )  # fmt: skip
    spare = torch.full((len(contexts), 3), -1)  # table entries past every sequence's end
    inputs.block_tables = torch.cat([inputs.block_tables, spare], 1)
    expected = reference(*inputs.args())  # (B, 1, nh, hd)
    tolerance = TOLERANCES[dtype]
    torch.testing.assert_close(paged_tree_attention(*inputs.args()), expected, **tolerance)
    keys = [c + 1 for c in contexts]
    args = (inputs.q, inputs.k_cache, inputs.v_cache, inputs.block_tables, keys, inputs.scale)
    torch.testing.assert_close(decode_attention(*args), expected, **tolerance)


def test_a_prefill_chunk_does_not_pad_the_decodes():
    news, keys = [256, 1, 1, 1], [256, 200, 190, 180]
    assert row_groups(news, keys, 256) == [[0], [1, 2, 3]]


def test_long_and_short_contexts_part_and_like_ones_stay():
    keys = [2000, 1900, 100, 90, 80]
    assert row_groups([1] * 5, keys, 256) == [[0, 1], [2, 3, 4]]
    assert row_groups([1] * 5, [100] * 5, 256) == [[0, 1, 2, 3, 4]]


def test_a_cut_must_save_more_than_a_call():
    keys = [400, 10, 10, 10]  # padded 4x, but 1,170 keys x 64 is under CALL_COST
    assert CALL_COST > 1170 * 64
    assert row_groups([1] * 4, keys, 64) == [[0, 1, 2, 3]]
    assert row_groups([1] * 4, keys, 4096) == [[0], [1, 2, 3]]


def test_auto_on_cpu_runs_the_grouped_set():
    from kernels.dispatch import select_kernels

    kernels = select_kernels("auto", "cpu")
    assert kernels.name == "grouped" and not kernels.pads_attention  # priced as exact
    assert kernels.paged_tree_attention is paged_tree_attention


def test_every_partition_gives_the_reference():
    from kernels.grouped_attention import attend_in_groups

    gen = torch.Generator().manual_seed(3)
    inputs = random_paged_inputs(
        gen, CONTEXTS, NEW, n_kv=2, group=2, head_dim=16, block_size=8,
        dtype=torch.float32, mask="tree", device="cpu",
    )  # fmt: skip
    expected = reference(*inputs.args())
    rows = list(range(len(NEW)))
    for groups in ([[b] for b in rows], [rows[::2], rows[1::2]], [rows[::-1]]):
        torch.testing.assert_close(attend_in_groups(groups, *inputs.args()), expected)


def test_no_member_is_padded_past_the_slack_by_a_later_one():
    # sorted by query first, a shorter query with far more keys must not widen the bin
    assert row_groups([3, 2], [60, 2000], 256) == [[0], [1]]
    assert row_groups([256, 200], [256, 3200], 256) == [[0], [1]]


def test_the_calibrated_price_counts_the_padding_the_kernel_decides_on() -> None:
    """Rows of as many queries each: the kernel's padding is the simulator's (1 + X / B) · P,
    and the threshold the calibration records is CALL_COST in query-keys."""
    import numpy as np

    from kernels.dispatch import grouped_kernels, reference_kernels
    from simulator.cost_models.calibrated_fit import padded_query_keys

    rng = np.random.default_rng(5)
    for _ in range(200):
        batch, queries = int(rng.integers(1, 33)), int(rng.integers(1, 9))
        contexts = rng.integers(1, 700, batch).tolist()
        keys = [c + queries for c in contexts]  # the step's own keys too
        sums, longest = np.array([float(sum(contexts))]), np.array([float(max(contexts))])
        extra = batch * (queries - 1)
        simulated = padded_query_keys(batch, sums, longest, extra)[0]
        assert padding([queries] * batch, keys) == simulated
    assert grouped_kernels().one_call_padding(256) * 256 == CALL_COST
    assert reference_kernels().one_call_padding(256) == 0.0
