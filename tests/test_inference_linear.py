"""Prepacked oneDNN linears equal `F.linear` on random inputs, one row or many; and they
are the default only where they pay."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from real_backend.cpu_info import field_in_cpuinfo  # noqa: E402
from real_backend.model.inference_linear import (  # noqa: E402
    INTEL,
    InferenceLinear,
    can_prepack,
    prepack_pays,
)

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
    assert can_prepack(torch.float32, "cpu") == torch.backends.mkldnn.is_available()
    assert not can_prepack(torch.bfloat16, "cpu")
    assert not can_prepack(torch.float64, "cpu")
    assert not can_prepack(torch.float32, "cuda")


CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: 25
model name\t: a CPU

processor\t: 1
vendor_id\t: {vendor}
"""


def test_the_vendor_is_read_from_cpuinfo() -> None:
    amd = CPUINFO.format(vendor="AuthenticAMD")
    assert field_in_cpuinfo(amd, "vendor_id") == "AuthenticAMD"
    assert field_in_cpuinfo(amd, "model name") == "a CPU"
    assert field_in_cpuinfo(CPUINFO.format(vendor=INTEL), "vendor_id") == INTEL
    arm = "processor\t: 0\nCPU implementer\t: 0x41\n"
    assert field_in_cpuinfo(arm, "vendor_id") == ""


@needs_onednn
def test_prepacked_by_default_unless_mkl_runs_on_an_intel_cpu() -> None:
    fp32 = (torch.float32, "cpu")
    assert prepack_pays(*fp32, "AuthenticAMD")
    assert prepack_pays(*fp32, "")  # unknown: as before
    assert prepack_pays(*fp32, INTEL) == (not torch.backends.mkl.is_available())
    assert not prepack_pays(torch.bfloat16, "cpu", "AuthenticAMD")
