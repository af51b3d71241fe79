"""Prepacked oneDNN linears equal `F.linear` on random inputs, one row or many."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from real_backend.model.inference_linear import InferenceLinear, can_prepack  # noqa: E402

needs_onednn = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this PyTorch has no oneDNN"
)


@needs_onednn
@pytest.mark.parametrize("rows", [1, 2, 5, 17, 64])
@pytest.mark.parametrize("bias", [False, True])
def test_prepacked_equals_f_linear(rows: int, bias: bool) -> None:
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(96, 40, generator=gen)  # (out, in)
    b = torch.randn(96, generator=gen) if bias else None
    x = torch.randn(rows, 40, generator=gen)
    layer = InferenceLinear(weight, b, prepack=True)
    assert layer.packed is not None
    torch.testing.assert_close(layer(x), F.linear(x, weight, b), atol=1e-5, rtol=1e-5)


def test_without_prepacking_it_is_f_linear() -> None:
    weight, x = torch.randn(8, 4), torch.randn(3, 4)
    layer = InferenceLinear(weight, None, prepack=False)
    assert layer.packed is None
    assert torch.equal(layer(x), F.linear(x, weight))


def test_prepacking_is_for_cpu_fp32_only() -> None:
    assert can_prepack(torch.zeros(2, 2)) == torch.backends.mkldnn.is_available()
    assert not can_prepack(torch.zeros(2, 2, dtype=torch.bfloat16))
    assert not can_prepack(torch.zeros(2, 2, dtype=torch.float64))
