"""Host indices to the model's device: the same values, int64; on a CPU no copy at all."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from real_backend.host_to_device import aligned_rows, device_tensor, to_device  # noqa: E402


def test_on_a_cpu_the_host_tensor_itself_is_returned() -> None:
    host = torch.tensor([3, 1, 2])
    assert to_device(host, "cpu") is host and to_device(host, torch.device("cpu")) is host


def test_device_tensor_holds_the_values_as_int64() -> None:
    rows = device_tensor([[5, 6, 7], [0, 1, 2]], "cpu")
    assert rows.dtype == torch.long and rows.tolist() == [[5, 6, 7], [0, 1, 2]]
    first, second = device_tensor([[5, 6], [0, 1]], "cpu")  # unpacked like the step's rows
    assert first.tolist() == [5, 6] and second.tolist() == [0, 1]


@pytest.mark.parametrize("width", [1, 2, 3, 4, 7])
def test_aligned_rows_start_on_even_offsets_and_hold_the_values(width: int) -> None:
    rows = [list(range(width)), list(range(10, 10 + width)), list(range(20, 20 + width))]
    out = aligned_rows(rows, "cpu")  # (3, width)
    assert out.tolist() == rows and out.dtype == torch.long
    assert out.stride(0) % 2 == 0  # rows 16 bytes apart: the kernels' pointers stay aligned
    assert all(row.data_ptr() % 16 == out.data_ptr() % 16 for row in out)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_copies_are_queued_without_a_sync_and_arrive_in_stream_order() -> None:
    """While long matmuls keep the card busy, the host queues each index without waiting for
    them (the stream is still busy after the last one), and the kernel queued after each copy
    reads the values the host gave, not what a later copy put in a pinned buffer."""
    busy = torch.randn(8192, 8192, device="cuda")
    sums = []
    for i in range(10):
        busy = busy @ busy / 8192  # ~20 ms each in fp32: the host runs far ahead
        sums.append(device_tensor([i, 2 * i], "cuda").sum())
    assert not torch.cuda.current_stream().query()  # nothing waited for the card
    assert [int(s) for s in sums] == [3 * i for i in range(10)]
    on_card = device_tensor([7], "cuda")
    assert to_device(on_card, "cuda") is on_card
