"""Fit a GPU's `KernelFit` to measured kernel times: least squares on log(predicted /
measured), so every point weighs by its relative error whatever its size.

Two independent fits: the token-level ops (GEMM and elementwise parameters, from mlp.csv
points) and attention (from attention.csv points, with the GEMM's overlap exponent).
Efficiencies and times are fitted in log space (they stay positive), the overlap exponent
as 1 + exp(θ) (it stays above 1: overlap can only help).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from simulator.catalogs.hardware import GPUSpec
from simulator.catalogs.kernel_fit import ATTENTION_PARAMETERS, ELEMENTWISE_KINDS, KernelFit
from simulator.cost_models.kernel_profiles import PROFILE_ELEM_BYTES, AttentionPoints, OpPoints
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.least_squares import levenberg_marquardt
from workbench.errors import WorkbenchError

GEMM_PARAMETERS = (
    "gemm_compute_efficiency",
    "gemm_memory_efficiency",
    "gemm_overlap",
    "gemm_launch_s",
)
TOKEN_OP_PARAMETERS = (
    *GEMM_PARAMETERS,
    *(f"{kind}_{term}" for kind in ELEMENTWISE_KINDS for term in ("memory_efficiency", "launch_s")),
)
_MICROSECOND = 1e-6
_MOST_OVERLAP = float(np.log(15.0))
_PRIOR_WEIGHT = 1e-3  # against residuals of ~0.05 on thousands of points: negligible

# Where the search starts: datasheet-like shares and a few microseconds per launch.
START = KernelFit(
    gpu="",
    gemm_compute_efficiency=0.7,
    gemm_memory_efficiency=0.8,
    gemm_overlap=2.0,
    gemm_launch_s=5e-6,
    **{f"{kind}_memory_efficiency": 0.6 for kind in ELEMENTWISE_KINDS},
    **{f"{kind}_launch_s": 3e-6 for kind in ELEMENTWISE_KINDS},
    decode_attention_launch_s=5e-6,
    decode_attention_kernel="flash_decoding",
    decode_cta_s=3e-6,
    decode_cta_bandwidth_share=1.0,
    decode_shared_cta_s=4e-6,
    decode_shared_cta_bandwidth_share=0.7,
    decode_memory_efficiency=0.8,
    decode_overlap=3.0,
    decode_combine_launch_s=4e-6,
    decode_combine_per_split_s=0.01e-6,
    prefill_attention_launch_s=6e-6,
    prefill_cta_s=1e-6,
    prefill_cta_flops_share=0.45,
    prefill_copy_bandwidth_share=0.6,
    prefill_shared_cta_s=5e-6,
    prefill_shared_cta_flops_share=0.3,
    prefill_shared_copy_bandwidth_share=0.8,
    prefill_combine_s=8e-6,
    prefill_tail_share=0.5,
    source="",
)


@dataclass(frozen=True)
class HoldOut:
    """Points kept out of the fit, to check it on: whole models and whole TP degrees."""

    models: frozenset[str] = frozenset()
    tensor_parallel: frozenset[int] = frozenset()

    def holds(self, model: str, tensor_parallel: int) -> bool:
        return model in self.models or tensor_parallel in self.tensor_parallel

    def describe(self) -> str:
        parts = [", ".join(sorted(self.models))] if self.models else []
        if self.tensor_parallel:
            parts.append("TP " + ", ".join(str(t) for t in sorted(self.tensor_parallel)))
        return "; ".join(parts) or "nothing"


def predict_op_s(times: KernelTimes, points: OpPoints) -> np.ndarray:
    """The kernel model's time for each measured point of one op."""
    op = points.op
    if op.gemm is not None:
        k, n = op.gemm
        return times.gemm_s(points.tokens, float(k), float(n))
    return times.elementwise_s(op.kind, points.tokens * op.bytes_per_token)


def predict_attention_s(
    times: KernelTimes, points: AttentionPoints
) -> tuple[np.ndarray, np.ndarray]:
    """(decode, prefill) attention times of the kernel model at the measured points."""
    shape = points.shape
    decode = np.empty(len(points.decode_batch))
    attention = times.decode(shape)
    for b, at in _by_batch(points.decode_batch):
        sums = b * (points.decode_cached[at] + 1.0)  # each sequence's keys incl. the new one
        decode[at] = attention.steps_s(b, sums, points.decode_table_keys[at])
    prefill = times.prefill(shape)
    chunks = zip(points.prefill_chunk.tolist(), points.prefill_cached.tolist(), strict=True)
    works = [prefill.work([(int(c), int(p), 1)], points.prefill_causal) for c, p in chunks]
    return decode, prefill.works_s(works)


def _by_batch(batch: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(batch size, indices of the points at it): the decode kernel's split depends on it."""
    return [(int(b), np.flatnonzero(batch == b)) for b in np.unique(batch)]


def op_kinds(points: Sequence[OpPoints]) -> set[str]:
    """The kernel kinds `points` measure: "gemm" and the elementwise kinds."""
    return {p.op.kind or "gemm" for p in points if p.op.gemm is not None or p.op.kind}


def token_op_parameters(kinds: set[str]) -> tuple[str, ...]:
    """The token-op parameters points of these kernel kinds pin (the others stay as given)."""
    names = GEMM_PARAMETERS if "gemm" in kinds else ()
    for kind in ELEMENTWISE_KINDS:
        if kind in kinds:
            names += (f"{kind}_memory_efficiency", f"{kind}_launch_s")
    return names


def fit_token_ops(gpu: GPUSpec, points: Sequence[OpPoints], base: KernelFit) -> KernelFit:
    """`base` with the parameters of the kernel kinds in `points` fitted to them (the GEMM's
    and each elementwise kind's): every op's relative error, and the relative error of each
    layer's sum of token ops (what prices a step), weighted as much as its ops together."""
    names = token_op_parameters(op_kinds(points))
    measured = np.concatenate([p.measured_s for p in points])
    layers = _layer_groups(points)
    measured_sums = np.concatenate([_layer_sum(group, None) for group in layers])
    sum_weight = np.concatenate(
        [np.full(len(_layer_sum(g, None)), np.sqrt(len(g))) for g in layers]
    )

    def residuals(theta: np.ndarray) -> np.ndarray:
        times = _times(gpu, _with(base, names, theta))
        predicted = np.concatenate([predict_op_s(times, p) for p in points])
        sums = np.concatenate([_layer_sum(group, times) for group in layers])
        ops = np.log(predicted / measured)
        return np.concatenate([ops, sum_weight * np.log(sums / measured_sums)])

    theta = levenberg_marquardt(residuals, _encode(base, names))
    return _with(base, names, theta)


def layer_token_ops_s(
    points: Sequence[OpPoints], times: KernelTimes | None
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens, per-layer sum of the token-level ops) of one model shape at one TP degree:
    measured (`times` None) or the kernel model's. Only token counts every op was profiled
    at count; the embedding (once per step, not per layer) is left out."""
    ops = [p for p in points if p.op.name != "emb"]
    tokens = ops[0].tokens
    for p in ops[1:]:
        tokens = np.intersect1d(tokens, p.tokens)
    total = np.zeros(len(tokens))
    for p in ops:
        keep = np.isin(p.tokens, tokens)
        values = p.measured_s if times is None else predict_op_s(times, p)
        total = total + values[keep]
    return tokens, total


def _layer_groups(points: Sequence[OpPoints]) -> list[list[OpPoints]]:
    groups: dict[tuple[str, str, int], list[OpPoints]] = {}
    for p in points:
        if p.op.name != "emb":
            groups.setdefault((p.source, p.model, p.tensor_parallel), []).append(p)
    return list(groups.values())


def _layer_sum(group: list[OpPoints], times: KernelTimes | None) -> np.ndarray:
    return layer_token_ops_s(group, times)[1]


def fit_attention(gpu: GPUSpec, points: Sequence[AttentionPoints], base: KernelFit) -> KernelFit:
    """`base` with the attention parameters fitted to `points` (decode and prefill), for
    the decode kernel the points were measured with."""
    kernels = {p.decode_kernel for p in points}
    if len(kernels) != 1:
        raise WorkbenchError(
            f"attention profiles of several decode kernels ({', '.join(sorted(kernels))}): "
            "fit each on its own",
            field="--attention-csv",
        )
    base = replace(base, decode_attention_kernel=kernels.pop())
    measured = np.concatenate([np.concatenate([p.decode_s, p.prefill_s]) for p in points])

    start = _encode(base, ATTENTION_PARAMETERS)

    def residuals(theta: np.ndarray) -> np.ndarray:
        times = _times(gpu, _with(base, ATTENTION_PARAMETERS, theta))
        predicted = np.concatenate([np.concatenate(predict_attention_s(times, p)) for p in points])
        # A faint pull to the start keeps parameters the points do not constrain (the
        # combine kernel of a kernel that never splits) where they were.
        return np.concatenate([np.log(predicted / measured), _PRIOR_WEIGHT * (theta - start)])

    theta = levenberg_marquardt(residuals, start)
    return _with(base, ATTENTION_PARAMETERS, theta)


def rounded(fit: KernelFit, digits: int = 4) -> KernelFit:
    """The fit with every number to `digits` significant digits (as the catalog stores it)."""
    values = {
        k: float(f"{v:.{digits}g}") if isinstance(v, float) else v for k, v in asdict(fit).items()
    }
    return KernelFit(**values)


def _times(gpu: GPUSpec, fit: KernelFit) -> KernelTimes:
    return KernelTimes(gpu, fit, "fp16", PROFILE_ELEM_BYTES)


def _encode(fit: KernelFit, names: tuple[str, ...]) -> np.ndarray:
    values = []
    for name in names:
        value = float(getattr(fit, name))
        if name.endswith("_overlap"):
            values.append(np.log(max(value - 1.0, 1e-6)))  # 1.0 as rounded: start just above
        elif name.endswith("_s"):
            values.append(np.log(value / _MICROSECOND))
        else:
            values.append(np.log(value))
    return np.array(values)


def _with(fit: KernelFit, names: tuple[str, ...], theta: np.ndarray) -> KernelFit:
    changes: dict[str, float] = {}
    for name, t in zip(names, theta.tolist(), strict=True):
        if name.endswith("_overlap"):  # at most 16: (aᵖ + bᵖ) of µs times stays above 0
            changes[name] = 1.0 + float(np.exp(min(t, _MOST_OVERLAP)))
        elif name.endswith("_s"):
            changes[name] = float(np.exp(t)) * _MICROSECOND
        else:
            changes[name] = float(np.exp(t))
    return replace(fit, **changes)
