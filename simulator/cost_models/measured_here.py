"""The H100 kernels this project measured itself (`data/profiles/workbench_h100/`, made by
`benchmarks/gpu_kernel_profile.py`): the catalog's H100 fit (before; Vidur's H100 GEMMs of
2024 and the A100's attention parameters) beside the fit made from these measurements
(after; `data/fits/`, its command in its `source`).

- GEMMs: the four GEMMs of one layer (QKV, O, gate+up, down) of Llama-2-7B at TP 1 and
  Llama-2-70B at TP 4, bf16 cuBLAS, in a forward pass's cache state (each weight from HBM);
- attention: Llama-2-70B's per-GPU shape at TP 2, decode and chunked prefill, FlashAttention-2
  through PyTorch SDPA (the fitted kernel) and this project's Triton paged kernel (another
  kernel: held out of every fit).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.kernel_fit import KernelFit
from simulator.cost_models.fidelity import DEFAULT_DATA, Comparison, hold_out_of
from simulator.cost_models.kernel_fitting import HoldOut, layer_token_ops_s, predict_attention_s
from simulator.cost_models.kernel_profiles import (
    PROFILE_ELEM_BYTES,
    OpPoints,
    read_attention_points,
    read_token_op_points,
)
from simulator.cost_models.kernel_times import KernelTimes

GPU = "h100-sxm"
HERE = "workbench_h100"
MEASURED_FIT = DEFAULT_DATA.parent / "fits" / "h100-sxm-measured-2026-11-27.json"
ATTENTION_KERNELS = {"sdpa_flash": "FlashAttention-2 (SDPA)", "triton_paged": "Triton paged"}


def gemm_layers(root: Path = DEFAULT_DATA) -> Iterator[list[OpPoints]]:
    """Each measured (model, TP degree): its four GEMMs' points."""
    for path in sorted((root / HERE / "compute" / "h100").glob("*/*/mlp.csv")):
        points = read_token_op_points(path)
        for tp in sorted({p.tensor_parallel for p in points}):
            yield [p for p in points if p.tensor_parallel == tp]


def gemm_comparisons(root: Path = DEFAULT_DATA, fit_path: Path = MEASURED_FIT) -> list[Comparison]:
    """Each layer's sum of the four GEMMs: the catalog's fit before, the measured fit after."""
    catalog, measured, held = _times(fit_path)
    out = []
    for group in gemm_layers(root):
        first = group[0]
        tokens, measured_s = layer_token_ops_s(group, None)
        out.append(
            Comparison(
                source="h100 GEMMs measured here",
                gpu=GPU,
                model=first.model,
                tensor_parallel=first.tensor_parallel,
                held_out=held.holds(first.model, first.tensor_parallel),
                tokens=tokens,
                context=np.zeros(len(tokens)),
                measured_s=measured_s,
                before_s=layer_token_ops_s(group, catalog)[1],
                after_s=layer_token_ops_s(group, measured)[1],
            )
        )
    return out


def vidur_over_here(root: Path = DEFAULT_DATA) -> Iterator[tuple[str, int, np.ndarray, np.ndarray]]:
    """(model, TP, tokens, Vidur's H100 sum of the same four GEMMs / ours − 1) at the token
    counts both measured: two profiles of one GPU, two years of cuBLAS apart."""
    for group in gemm_layers(root):
        first = group[0]
        path = root / "vidur" / "compute" / "h100" / "meta-llama" / first.model / "mlp.csv"
        names = {p.op.name for p in group}
        theirs = [
            p
            for p in read_token_op_points(path)
            if p.tensor_parallel == first.tensor_parallel and p.op.name in names
        ]
        ours_t, ours_s = layer_token_ops_s(group, None)
        their_t, their_s = layer_token_ops_s(theirs, None)
        common = np.intersect1d(ours_t, their_t)
        ratio = their_s[np.isin(their_t, common)] / ours_s[np.isin(ours_t, common)]
        yield first.model, first.tensor_parallel, common, ratio - 1.0


def attention_comparisons(
    root: Path = DEFAULT_DATA, fit_path: Path = MEASURED_FIT
) -> list[Comparison]:
    """Decode and prefill attention of each measured kernel: catalog before, measured fit
    after (fitted on the SDPA kernel's points; the Triton kernel's are held out)."""
    catalog, measured, _ = _times(fit_path)
    out = []
    for kernel, label in ATTENTION_KERNELS.items():
        for path in sorted((root / HERE / "attention" / kernel).glob("*/attention.csv")):
            for p in read_attention_points(path):
                before = predict_attention_s(catalog, p)
                after = predict_attention_s(measured, p)
                phases = (
                    ("decode", p.decode_batch, p.decode_cached, p.decode_s),
                    ("prefill", p.prefill_chunk, p.prefill_cached, p.prefill_s),
                )
                for i, (phase, tokens, cached, measured_s) in enumerate(phases):
                    out.append(
                        Comparison(
                            source=f"h100 {phase} attention, {label}",
                            gpu=GPU,
                            model=p.model,
                            tensor_parallel=p.tensor_parallel,
                            held_out=kernel != "sdpa_flash",
                            tokens=tokens,
                            context=cached,
                            measured_s=measured_s,
                            before_s=before[i],
                            after_s=after[i],
                        )
                    )
    return out


def _times(fit_path: Path) -> tuple[KernelTimes, KernelTimes, HoldOut]:
    """(catalog's kernel times, the measured fit's, the measured fit's hold-out)."""
    gpu = get_gpu(GPU)
    assert gpu.kernel_fit is not None
    fit = KernelFit.from_json(fit_path)
    catalog = KernelTimes(gpu, gpu.kernel_fit, "fp16", PROFILE_ELEM_BYTES)
    measured = KernelTimes(gpu, fit, "fp16", PROFILE_ELEM_BYTES)
    return catalog, measured, hold_out_of(fit)
