"""Host data to the model's device without waiting for it.

A copy from pageable host memory to a GPU waits for every kernel queued before it, so each
small index built on the host during a step (slots, block tables, a copy-on-write's block
ids, a ban list) would stall the host until the card is idle. Through pinned memory the copy
is queued like a kernel, in stream order, and the host goes on launching.
"""

from __future__ import annotations

import torch


def to_device(host: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """A fresh host tensor on `device`: queued from pinned memory on a GPU, itself on a CPU.
    The caller must not change `host` afterwards (the copy may still be pending)."""
    if torch.device(device).type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def device_tensor(values: list, device: torch.device | str) -> torch.Tensor:
    """Host integers (a list, or a list of equal-length lists) as an int64 tensor on
    `device`, without a sync."""
    return to_device(torch.tensor(values, dtype=torch.long), device)
