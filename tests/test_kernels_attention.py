"""Triton paged tree attention equals the PyTorch reference (interpreter on CPU, CUDA on GPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import (  # noqa: E402
    TOLERANCES,
    PagedInputs,
    kernel_device,
    random_paged_inputs,
)

DEVICE = kernel_device()  # before triton is imported: the interpreter needs setting first
pytest.importorskip("triton")

from kernels.paged_attention import paged_tree_attention as reference  # noqa: E402
from kernels.triton_attention import (  # noqa: E402
    MAX_SPLITS,
    MIN_KEYS_PER_SPLIT,
    MIN_KEYS_TO_SPLIT,
    choose_num_splits,
    paged_tree_attention,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
CONTEXTS = [0, 37, 70]  # empty, and not multiples of either block size
NEW = [5, 1, 3]


def check_against_reference(inputs: PagedInputs, num_splits: int | None) -> None:
    """The kernel's output, written over NaNs, equals the fp32 reference; padded rows are 0."""
    out = torch.full_like(inputs.q, float("nan"))
    paged_tree_attention(*inputs.args(), num_splits=num_splits, out=out)
    expected = reference(*inputs.in_fp32())  # (B, Q, nh, hd)
    torch.testing.assert_close(out.float(), expected, **TOLERANCES[inputs.q.dtype])
    for b, n in enumerate(inputs.new_lens.tolist()):
        assert torch.all(out[b, n:] == 0)


# Each mask x path x dtype, with head dim, GQA ratio and block size rotating through theirs.
GRID = [
    (i, mask, splits, dtype, [64, 128][i % 2], [1, 2, 4][i % 3], [16, 32][(i // 2) % 2])
    for i, (mask, splits, dtype) in enumerate(
        (m, s, d) for m in ("causal", "chain", "tree") for s in (1, 3) for d in DTYPES
    )
]


@pytest.mark.parametrize("seed, mask, num_splits, dtype, head_dim, group, block_size", GRID)
def test_attention_equals_reference(seed, mask, num_splits, dtype, head_dim, group, block_size):
    gen = torch.Generator().manual_seed(seed)
    inputs = random_paged_inputs(
        gen, CONTEXTS, NEW, n_kv=2, group=group, head_dim=head_dim, block_size=block_size,
        dtype=dtype, mask=mask, device=DEVICE,
    )  # fmt: skip
    check_against_reference(inputs, num_splits)


@pytest.mark.parametrize("group", [1, 2, 4])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gqa_ratios_and_head_dims_on_trees(group, head_dim):
    gen = torch.Generator().manual_seed(100 * group + head_dim)
    inputs = random_paged_inputs(
        gen, [21, 0], [4, 6], n_kv=2, group=group, head_dim=head_dim, block_size=16,
        dtype=torch.float16, mask="tree", device=DEVICE,
    )  # fmt: skip
    check_against_reference(inputs, num_splits=1)


@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("mask", ["causal", "tree"])
def test_prefill_chunk_spans_query_tiles(num_splits, mask):
    """40 new tokens x 4 heads per group = 160 rows: three query tiles, the last one partial."""
    gen = torch.Generator().manual_seed(7)
    inputs = random_paged_inputs(
        gen, [19, 3], [40, 2], n_kv=1, group=4, head_dim=32, block_size=16,
        dtype=torch.float32, mask=mask, device=DEVICE,
    )  # fmt: skip
    check_against_reference(inputs, num_splits)


@pytest.mark.parametrize("head_dim", [16, 80])
def test_small_and_non_power_of_two_head_dims(head_dim):
    gen = torch.Generator().manual_seed(head_dim)
    inputs = random_paged_inputs(
        gen, [9, 33], [2, 3], n_kv=2, group=2, head_dim=head_dim, block_size=16,
        dtype=torch.float32, mask="tree", device=DEVICE,
    )  # fmt: skip
    check_against_reference(inputs, num_splits=2)


def test_sequence_without_new_tokens_comes_out_zero():
    gen = torch.Generator().manual_seed(3)
    inputs = random_paged_inputs(
        gen, [40, 12], [0, 2], n_kv=1, group=2, head_dim=32, block_size=16,
        dtype=torch.float32, mask="causal", device=DEVICE,
    )  # fmt: skip
    for num_splits in (1, 3):
        check_against_reference(inputs, num_splits)


def test_default_path_and_fresh_output():
    gen = torch.Generator().manual_seed(11)
    inputs = random_paged_inputs(
        gen, CONTEXTS, NEW, n_kv=2, group=2, head_dim=32, block_size=16,
        dtype=torch.float32, mask="tree", device=DEVICE,
    )  # fmt: skip
    out = paged_tree_attention(*inputs.args())
    torch.testing.assert_close(out, reference(*inputs.args()), atol=1e-4, rtol=1e-4)


def test_split_heuristic():
    # A full grid never splits; a small one splits towards two programs per SM.
    assert choose_num_splits(programs=264, max_keys=32768, sms=132) == 1
    assert choose_num_splits(programs=8, max_keys=32768, sms=132) == MAX_SPLITS
    assert choose_num_splits(programs=64, max_keys=32768, sms=132) == 5
    # Contexts keep at least MIN_KEYS_PER_SPLIT keys per split; short ones do not split.
    assert choose_num_splits(programs=8, max_keys=7 * MIN_KEYS_PER_SPLIT, sms=132) == 7
    assert choose_num_splits(programs=8, max_keys=MIN_KEYS_TO_SPLIT, sms=132) == 5
    assert choose_num_splits(programs=8, max_keys=MIN_KEYS_TO_SPLIT - 1, sms=132) == 1


def test_the_warm_up_reaches_the_split_path():
    from real_backend.model.warm_up import LONG_CONTEXT

    assert LONG_CONTEXT >= MIN_KEYS_TO_SPLIT


def test_bad_arguments_are_refused():
    gen = torch.Generator().manual_seed(0)
    inputs = random_paged_inputs(
        gen, [3], [2], n_kv=1, group=1, head_dim=16, block_size=16,
        dtype=torch.float32, mask="causal", device=DEVICE,
    )  # fmt: skip
    with pytest.raises(TypeError, match="share a dtype"):
        paged_tree_attention(inputs.q.half(), *inputs.args()[1:])
    with pytest.raises(ValueError, match="num_splits"):
        paged_tree_attention(*inputs.args(), num_splits=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mask", ["causal", "tree"])
@pytest.mark.parametrize("num_splits", [None, 1, 8])
def test_attention_on_cuda_at_scale(dtype, mask, num_splits):
    gen = torch.Generator().manual_seed(0)
    contexts = [0, 1, 511, 1000, 4097, 16, 2500, 300]
    new = [1, 16, 8, 1, 3, 64, 1, 12]
    for group, head_dim, block_size in [(8, 128, 16), (4, 64, 32), (1, 128, 32)]:
        inputs = random_paged_inputs(
            gen, contexts, new, n_kv=4, group=group, head_dim=head_dim, block_size=block_size,
            dtype=dtype, mask=mask, device="cuda",
        )  # fmt: skip
        check_against_reference(inputs, num_splits)
