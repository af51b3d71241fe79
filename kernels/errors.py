"""The kernels' one error, in a module of its own so that both the dispatcher and the Triton
runtime can raise it without importing each other."""

from __future__ import annotations


class KernelUnavailable(RuntimeError):
    """The requested kernels cannot run on this machine or device."""
