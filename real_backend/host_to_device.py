"""Host data to the model's device without waiting for it.

A copy from pageable host memory to a GPU waits for every kernel queued before it, so each
small index built on the host during a step (slots, block tables, a copy-on-write's block
ids, a ban list) would stall the host until the card is idle. Through pinned memory the copy
is queued like a kernel, in stream order, and the host goes on launching.
"""

from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A fresh host tensor on `device`: from a CPU to a GPU queued from pinned memory;
    otherwise `Tensor.to` (the tensor itself when it is there already). The caller must not
    change `host` afterwards (the copy may still be pending)."""
    target = torch.device(device)
    if target.type == "cuda" and host.device.type == "cpu":
        return host.pin_memory().to(target, non_blocking=True)
    return host.to(target)


def device_tensor(values: list, device: torch.device | str) -> torch.Tensor:
    """Host integers (a list, or a list of equal-length lists) as an int64 tensor on
    `device`, without a sync."""
    return to_device(torch.tensor(values, dtype=torch.long), device)


def aligned_rows(rows: list[list[int]], device: torch.device | str) -> torch.Tensor:
    """Equal-length rows of host integers as one (R, W) int64 tensor on `device`, one copy,
    each row 16-byte aligned: the width is padded to even and the view cuts the padding off.
    Triton compiles a variant per pointer alignment, and an odd width would misalign every
    other row."""
    width = len(rows[0])
    pad = [0] * (width % 2)
    return device_tensor([[*row, *pad] for row in rows], device)[:, :width]  # (R, W)
