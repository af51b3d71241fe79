"""Triton kernels with PyTorch references (issue: kernels)."""
