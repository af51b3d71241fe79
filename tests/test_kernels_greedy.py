"""The greedy choice: each row's first largest logit, as `argmax` picks it, in every dtype."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from kernels.greedy import greedy_tokens  # noqa: E402


def first_largest(row: list[float]) -> int:
    """The lowest index of the row's largest value; NaN counts as the largest."""
    nans = [i for i, x in enumerate(row) if math.isnan(x)]
    if nans:
        return nans[0]
    return row.index(max(row))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_choice_is_each_row_s_first_largest_logit_ties_and_nans_included(
    dtype: torch.dtype,
) -> None:
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        rows, vocab = torch.randint(1, 40, (2,), generator=g).tolist()
        logits = torch.randint(0, 4, (rows, 3 * vocab), generator=g).to(dtype)  # many ties
        if trial % 4 == 0:
            logits[rows // 2, torch.randint(0, 3 * vocab, (1,), generator=g)] = float("nan")
        chosen = greedy_tokens(logits)
        assert chosen.dtype == torch.int64 and chosen.shape == (rows,)
        expected = [first_largest(row) for row in logits.float().tolist()]
        assert chosen.tolist() == expected
        assert torch.equal(chosen, logits.argmax(-1))


def test_a_vocabulary_sized_row_ties_to_its_lowest_id() -> None:
    logits = torch.randn(6, 32_000, generator=torch.Generator().manual_seed(1))
    top = logits.max() + 1.0
    logits[:, [31_999, 17, 20_000]] = top  # three maxima per row, the lowest id in between
    assert greedy_tokens(logits).tolist() == [17] * 6
    assert greedy_tokens(logits[:, ::2]).tolist() == [10_000] * 6  # a strided view: column 20,000


def test_the_choice_keeps_the_leading_dimensions() -> None:
    logits = torch.zeros(2, 3, 5)
    logits[1, 2, 4] = 1.0
    logits[0, 1, 3] = logits[0, 1, 1] = 2.0  # a tie: the lower id
    assert greedy_tokens(logits).tolist() == [[0, 1, 0], [0, 0, 4]]
