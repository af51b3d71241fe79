"""Host indices to the model's device: the same values, int64; on a CPU no copy at all."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from real_backend.host_to_device import device_tensor, to_device  # noqa: E402


def test_on_a_cpu_the_host_tensor_itself_is_returned() -> None:
    host = torch.tensor([3, 1, 2])
    assert to_device(host, "cpu") is host


def test_device_tensor_holds_the_values_as_int64() -> None:
    rows = device_tensor([[5, 6, 7], [0, 1, 2]], "cpu")
    assert rows.dtype == torch.long and rows.tolist() == [[5, 6, 7], [0, 1, 2]]
    first, second = device_tensor([[5, 6], [0, 1]], "cpu")  # unpacked like the step's rows
    assert first.tolist() == [5, 6] and second.tolist() == [0, 1]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_queued_copies_arrive_in_stream_order() -> None:
    """Each index, copied without a sync while a long kernel runs, is read by the kernel
    queued after it: the values it held on the host, not whatever the pinned buffer held
    next."""
    busy = torch.randn(4096, 4096, device="cuda")
    sums = []
    for i in range(50):
        busy = busy @ busy / 64  # keeps the card busy while the host goes on
        sums.append(device_tensor([i, 2 * i], "cuda").sum())
    assert [int(s) for s in sums] == [3 * i for i in range(50)]
