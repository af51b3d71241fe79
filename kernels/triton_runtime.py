"""What every Triton kernel module shares: where kernels can run, and small launch helpers.

Importing this module imports Triton, so the rest of the project imports it only lazily (through
``kernels.dispatch``). Whether kernels run compiled or under Triton's interpreter is fixed when
Triton is imported: ``TRITON_INTERPRET=1`` must be set before the first ``import triton``, since
Triton decorates its own library functions then.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from kernels.errors import KernelUnavailable

__all__ = [
    "INTERPRETED",
    "KernelCall",
    "KernelUnavailable",
    "check_dtype",
    "check_launchable",
    "dot_in_fp32",
    "launch_all",
    "next_power_of_2",
    "num_sms",
]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _probe() -> None:
    pass


# Under the interpreter, triton.jit returns an InterpretedFunction instead of a JITFunction.
INTERPRETED: bool = not isinstance(_probe, triton.runtime.JITFunction)
if isinstance(tl.sum, triton.runtime.JITFunction) == INTERPRETED:
    raise KernelUnavailable(
        "TRITON_INTERPRET changed after triton was imported: set it before the first "
        "`import triton` (or not at all), so triton's own functions and these kernels agree"
    )


def check_launchable(*tensors: torch.Tensor) -> None:
    """Raise unless every tensor is where these kernels run: CUDA, or anywhere when interpreted."""
    for t in tensors:
        if t.device.type != "cuda" and not INTERPRETED:
            raise KernelUnavailable(
                f"Triton kernels need CUDA tensors, got one on {t.device}; on CPU they run only "
                "under Triton's interpreter (TRITON_INTERPRET=1 set before triton is imported)"
            )


def check_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {t.dtype}")


def dot_in_fp32(dtype: torch.dtype) -> bool:
    """Whether kernels multiply tiles of ``dtype`` in exact fp32 rather than natively.

    fp32 inputs: always, so the result does not depend on tf32. bf16 inputs under the
    interpreter: Triton 3.9's interpreter multiplies bf16 tiles as their raw uint16 bits, so
    they are widened first (exact: the products of bf16 values fit fp32, as on tensor cores).
    """
    return dtype == torch.float32 or (INTERPRETED and dtype == torch.bfloat16)


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@functools.cache
def _cuda_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device; 1 elsewhere (the interpreter runs serially)."""
    if device.type != "cuda":
        return 1
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_sms(index)


@dataclass(frozen=True)
class KernelCall:
    """One planned kernel launch: the kernel, its grid, its arguments and keyword arguments.

    The launchers plan their calls first and then launch them, so that the ahead-of-time
    compile check (``kernels.triton_compile``) can compile exactly what would be launched.
    """

    kernel: Any  # triton.runtime.JITFunction (an InterpretedFunction under the interpreter)
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]  # constexprs, and launch options such as num_warps

    @property
    def name(self) -> str:
        return str(self.kernel.fn.__name__)

    def launch(self) -> None:
        self.kernel[self.grid](*self.args, **self.kwargs)


def launch_all(calls: Sequence[KernelCall]) -> None:
    for call in calls:
        call.launch()
