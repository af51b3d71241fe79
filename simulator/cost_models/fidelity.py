"""The cost models beside every measured point nobody here made: the roofline (before) and
the fitted kernel model (after), with the catalog's fits.

Sources (copies in `data/profiles/`, each with its licence and source notes):
- Vidur's token-level ops (`vidur/compute/<gpu>/<org>/<model>/mlp.csv`): one layer's sum of
  token ops by tokens per step, every model, TP degree and GPU (A100, H100, A40);
- Vidur's attention profile (A100, Llama-2-70B at TP 2): decode by batch and cached tokens,
  prefill by chunk and cached tokens;
- LLMServingSim's H100 per-layer latencies (Llama-3.1-8B and -70B, TP 1-4, 1-2048 tokens)
  and its H100 decode attention (Llama-3.1-70B at TP 4, batch 1-256, up to 64k keys);
- Splitwise's whole-engine prompt and per-token times (Llama-2-70B, BLOOM-176B; A100, H100).
Which points a fit held out is read from its `source` (the fit command's --hold-out flags);
everything but the fitted GPUs' own Vidur files is held out by construction.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from simulator.catalogs.hardware import GPUSpec, get_gpu
from simulator.catalogs.kernel_fit import KernelFit
from simulator.catalogs.models import ModelSpec, get_model
from simulator.cost_models.base import StepWork
from simulator.cost_models.fitted import FittedCostModel
from simulator.cost_models.kernel_fitting import (
    HoldOut,
    fit_attention,
    layer_token_ops_s,
    predict_attention_s,
)
from simulator.cost_models.kernel_profiles import (
    PROFILE_ELEM_BYTES,
    AttentionPoints,
    OpPoints,
    read_attention_points,
    read_token_op_points,
)
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.peer_profiles import (
    LayerLatencies,
    SplitwiseRow,
    read_layer_latencies,
    read_splitwise,
)
from simulator.cost_models.roofline import RooflineCostModel
from workbench.scenario.system import FittedCostConfig, RooflineCostConfig

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "data" / "profiles"
VIDUR_GPUS = {"a100": "a100-80gb", "h100": "h100-sxm", "a40": "a40"}
LLMSERVINGSIM_MODELS = {"Llama-3.1-8B": "llama-3-8b", "Llama-3.1-70B": "llama-3-70b"}
SPLITWISE_GPUS = {"a100-80gb": "a100-80gb", "h100-80gb": "h100-sxm", "h100-80gb-pcap": "h100-sxm"}
# BLOOM-176B's GEMM shapes (bigscience/bloom config.json: 70 layers, hidden 14336, 112 heads,
# a 4h GELU MLP, vocabulary 250880); ALiBi and LayerNorm change no GEMM.
BLOOM_176B = ModelSpec("bloom-176b", 70, 14336, 57344, 112, 112, 128, 250880, True, False, 2048)
SPLITWISE_MODELS = {"llama2-70b": get_model("llama-2-70b"), "bloom-176b": BLOOM_176B}


@dataclass(frozen=True)
class Comparison:
    """Measured beside predicted times for one curve (one model, GPU, TP, quantity)."""

    source: str  # which data set and quantity
    gpu: str
    model: str
    tensor_parallel: int
    held_out: bool  # not in the fit that prices it
    tokens: np.ndarray  # (n,) tokens per step (decode attention: batch; prefill: chunk)
    context: np.ndarray  # (n,) cached tokens per sequence (0 where it does not apply)
    measured_s: np.ndarray  # (n,)
    before_s: np.ndarray  # (n,) the roofline with its default efficiencies
    after_s: np.ndarray  # (n,) the fitted kernel model

    def errors(self, which: str) -> np.ndarray:
        predicted = self.before_s if which == "before" else self.after_s
        return predicted / self.measured_s - 1.0


def hold_out_of(fit: KernelFit) -> HoldOut:
    """The models and TP degrees the fit command held out (its --hold-out flags)."""
    pairs = list(itertools.pairwise(shlex.split(fit.source)))
    models = frozenset(v for k, v in pairs if k == "--hold-out-model")
    tps = frozenset(int(v) for k, v in pairs if k == "--hold-out-tp")
    return HoldOut(models, tps)


def all_comparisons(root: Path = DEFAULT_DATA) -> list[Comparison]:
    return [
        *vidur_token_ops(root),
        *vidur_attention(root),
        *llmservingsim_layers(root),
        *llmservingsim_attention(root),
        *splitwise_steps(root),
    ]


# ------------------------------------------------------------------ Vidur


def vidur_layers(root: Path) -> Iterator[tuple[GPUSpec, KernelTimes, list[list[OpPoints]]]]:
    """Each profiled GPU, its catalog fit's kernel times and its measured layers: the token
    ops of each model at each TP degree."""
    for sku, gpu_name in VIDUR_GPUS.items():
        gpu = get_gpu(gpu_name)
        times = KernelTimes(gpu, _fit(gpu), "fp16", PROFILE_ELEM_BYTES)
        paths = sorted((root / "vidur" / "compute" / sku).glob("*/*/mlp.csv"))
        yield gpu, times, [group for path in paths for group in _by_tp(read_token_op_points(path))]


def vidur_token_ops(root: Path) -> Iterator[Comparison]:
    for gpu, times, layers in vidur_layers(root):
        held = hold_out_of(_fit(gpu))
        for group in layers:
            first = group[0]
            tokens, measured = layer_token_ops_s(group, None)
            _, after = layer_token_ops_s(group, times)
            roofline = _roofline(first.spec, gpu, first.tensor_parallel)
            before = np.array([roofline.token_ops_layer_s(int(t)) for t in tokens])
            yield Comparison(
                "vidur token ops", gpu.name, first.model, first.tensor_parallel,
                held.holds(first.model, first.tensor_parallel), tokens,
                np.zeros(len(tokens)), measured, before, after,
            )  # fmt: skip


def vidur_attention(root: Path) -> Iterator[Comparison]:
    """The A100 attention profile (every point was fitted: it is the only one)."""
    gpu = get_gpu("a100-80gb")
    times = KernelTimes(gpu, _fit(gpu), "fp16", PROFILE_ELEM_BYTES)
    folder = root / "vidur" / "compute_legacy_attention" / "a100"
    for path in sorted(folder.glob("*/*/attention.csv")):
        for p in read_attention_points(path):
            roofline = _roofline(p.spec, gpu, p.tensor_parallel)
            decode, prefill = predict_attention_s(times, p)
            kv = p.decode_batch * (p.decode_cached + 1.0)
            before_decode = [
                roofline.decode_attention_layer_s(int(b), int(k))
                for b, k in zip(p.decode_batch, kv, strict=True)
            ]
            before_prefill = [
                roofline.prefill_attention_layer_s(int(c), int(k))
                for c, k in zip(p.prefill_chunk, p.prefill_cached, strict=True)
            ]
            model = "Llama-2-70B"
            yield Comparison(
                "vidur attention decode", gpu.name, model, p.tensor_parallel, False,
                p.decode_batch, p.decode_cached, p.decode_s, np.array(before_decode), decode,
            )  # fmt: skip
            yield Comparison(
                "vidur attention prefill", gpu.name, model, p.tensor_parallel, False,
                p.prefill_chunk, p.prefill_cached, p.prefill_s, np.array(before_prefill),
                prefill,
            )  # fmt: skip


def _by_tp(points: list[OpPoints]) -> list[list[OpPoints]]:
    groups: dict[int, list[OpPoints]] = {}
    for p in points:
        groups.setdefault(p.tensor_parallel, []).append(p)
    return [groups[t] for t in sorted(groups)]


# ------------------------------------------------------------------ LLMServingSim (H100)

# Layers of LLMServingSim's HF-style forward that Vidur's token ops cover (it has no
# residual add of its own; the norms and RoPE run as several small kernels each).
_HF_TOKEN_LAYERS = (
    "input_layernorm", "q_proj", "k_proj", "v_proj", "rope", "o_proj", "post_layernorm",
    "gate_proj", "up_proj", "act_fn", "down_proj",
)  # fmt: skip


FORWARD_KERNEL = "flash_varlen"  # FlashAttention-2's forward kernel: no split, no KV copy


def llmservingsim_layers(root: Path) -> Iterator[Comparison]:
    gpu = get_gpu("h100-sxm")
    for path in sorted((root / "llmservingsim_h100").glob("*/*/tp*/layers.csv")):
        layers = read_layer_latencies(path)
        catalog_name = LLMSERVINGSIM_MODELS.get(layers.model)
        if catalog_name is not None:  # not Mixtral: the catalog describes no mixture of experts
            yield from _layer_comparisons(layers, get_model(catalog_name), gpu)


def _layer_comparisons(
    layers: LayerLatencies, spec: ModelSpec, gpu: GPUSpec
) -> Iterator[Comparison]:
    fit = _fit(gpu)
    times = KernelTimes(gpu, fit, "fp16", PROFILE_ELEM_BYTES)
    tp = layers.tensor_parallel
    fitted = FittedCostModel(spec, gpu, fit, tp, "fp16", FittedCostConfig(kind="fitted"))
    # Its `attn` is FlashAttention's forward kernel over the prompt (no cache to write to):
    # the catalog's attention parameters on that kernel's layout.
    forward = replace(fit, decode_attention_kernel=FORWARD_KERNEL)
    attention = FittedCostModel(spec, gpu, forward, tp, "fp16", FittedCostConfig(kind="fitted"))
    roofline = _roofline(spec, gpu, tp)
    t = layers.tokens
    gemms = _unfused_gemms(spec, tp)
    head = (float(spec.hidden_size), float(-(-spec.vocab_size // tp)))
    parts = {
        "layer token ops": (
            sum(layers.seconds[n] for n in _HF_TOKEN_LAYERS),
            [roofline.token_ops_layer_s(int(x)) for x in t],
            [fitted.token_ops_layer_s(int(x)) for x in t],
        ),
        "GEMMs (q, k, v, o, gate, up, down)": (
            sum(layers.seconds[n] for n in gemms),
            [sum(_roofline_gemm_s(gpu, x, *kn) for kn in gemms.values()) for x in t],
            sum(times.gemm_s(t, k, n) for k, n in gemms.values()),
        ),
        "LM head (every token)": (
            layers.seconds["lm_head"],
            [_roofline_gemm_s(gpu, x, *head) for x in t],
            times.gemm_s(t, *head),
        ),
        "attention (prefill, no cache)": (
            layers.seconds["attn"],
            [roofline.prefill_attention_layer_s(int(x), 0) for x in t],
            [attention.prefill_attention_layer_s(int(x), 0) for x in t],
        ),
    }
    for what, (measured, before, after) in parts.items():
        yield Comparison(
            f"llmservingsim {what}", gpu.name, layers.model, tp, True, t, np.zeros(len(t)),
            np.asarray(measured), np.array(before), np.asarray(after, dtype=np.float64),
        )  # fmt: skip


def llmservingsim_attention(root: Path) -> Iterator[Comparison]:
    """Its H100 attention (`flash_attn_varlen_func`, Llama-3.1-70B at TP 4): decodes priced
    by the catalog's H100 attention parameters (the A100's, so held out) with the kernel's
    own work split and by a fit to these very decode points (fitted); prefill chunks over a
    cache by the catalog's parameters on the kernel's layout (held out)."""
    gpu = get_gpu("h100-sxm")
    for path in sorted((root / "llmservingsim_h100").glob("*/*/tp*/attention.csv")):
        for p in read_attention_points(path, layout="llmservingsim"):
            yield from _llmservingsim_decode(p, gpu)
            yield _llmservingsim_prefill(p, gpu)


def _llmservingsim_decode(p: AttentionPoints, gpu: GPUSpec) -> Iterator[Comparison]:
    roofline = _roofline(p.spec, gpu, p.tensor_parallel)
    kv = p.decode_batch * (p.decode_cached + 1.0)
    before = np.array(
        [
            roofline.decode_attention_layer_s(int(b), int(k))
            for b, k in zip(p.decode_batch, kv, strict=True)
        ]
    )
    catalog = replace(_fit(gpu), decode_attention_kernel=p.decode_kernel)
    own = fit_attention(gpu, [_decode_only(p)], catalog)
    for label, fit, held in (("", catalog, True), (" (own fit)", own, False)):
        decode, _ = predict_attention_s(KernelTimes(gpu, fit, "fp16", PROFILE_ELEM_BYTES), p)
        yield Comparison(
            f"llmservingsim attention decode{label}", gpu.name, p.model, p.tensor_parallel,
            held, p.decode_batch, p.decode_cached, p.decode_s, before, decode,
        )  # fmt: skip


def _llmservingsim_prefill(p: AttentionPoints, gpu: GPUSpec) -> Comparison:
    roofline = _roofline(p.spec, gpu, p.tensor_parallel)
    before = [
        roofline.prefill_attention_layer_s(int(c), int(k))
        for c, k in zip(p.prefill_chunk, p.prefill_cached, strict=True)
    ]
    catalog = replace(_fit(gpu), decode_attention_kernel=p.decode_kernel)
    _, after = predict_attention_s(KernelTimes(gpu, catalog, "fp16", PROFILE_ELEM_BYTES), p)
    return Comparison(
        "llmservingsim attention prefill (over a cache)", gpu.name, p.model, p.tensor_parallel,
        True, p.prefill_chunk, p.prefill_cached, p.prefill_s, np.array(before), after,
    )  # fmt: skip


def _decode_only(points: AttentionPoints) -> AttentionPoints:
    empty = np.zeros(0)
    return replace(points, prefill_chunk=empty, prefill_cached=empty, prefill_s=empty)


def _unfused_gemms(spec: ModelSpec, tp: int) -> dict[str, tuple[float, float]]:
    """(k, n) per GPU of the separate projections an HF-style layer runs."""
    h, d = float(spec.hidden_size), float(spec.head_dim)
    q, kv = spec.num_attention_heads * d / tp, max(spec.num_kv_heads // tp, 1) * d
    i = spec.intermediate_size / tp
    return {
        "q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
        "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h),
    }  # fmt: skip


def _roofline_gemm_s(gpu: GPUSpec, m: float, k: float, n: float) -> float:
    """The roofline's counting rule for one GEMM with its default efficiencies."""
    cfg = RooflineCostConfig(kind="roofline")
    flops = 2.0 * m * k * n / (gpu.peak_flops("fp16") * cfg.compute_efficiency)
    moved = 2.0 * (k * n + m * (k + n)) / (gpu.memory_bandwidth_bytes_s * cfg.memory_efficiency)
    return max(flops, moved)


# ------------------------------------------------------------------ Splitwise


def splitwise_steps(root: Path) -> Iterator[Comparison]:
    """Whole engine steps, the step overhead at the configs' default (1 ms)."""
    rows = read_splitwise(root / "splitwise" / "perf_model.csv")
    keys = sorted({(r.model, r.hardware, r.tensor_parallel) for r in rows})
    for model_name, hardware, tp in keys:
        spec = SPLITWISE_MODELS[model_name]
        gpu = get_gpu(SPLITWISE_GPUS[hardware])
        fitted = FittedCostModel(spec, gpu, _fit(gpu), tp, "fp16", FittedCostConfig(kind="fitted"))
        roofline = _roofline(spec, gpu, tp)
        mine = [
            r
            for r in rows
            if (r.model, r.hardware, r.tensor_parallel) == (model_name, hardware, tp)
        ]
        for phase in ("prompt", "token"):
            measured, before, after = [], [], []
            for r in mine:
                measured.append(r.prompt_s if phase == "prompt" else r.token_s)
                before.append(_splitwise_step_s(roofline, r, phase))
                after.append(_splitwise_step_s(fitted, r, phase))
            tokens = np.array(
                [r.batch_size * (r.prompt_tokens if phase == "prompt" else 1) for r in mine],
                dtype=np.float64,
            )
            context = np.array([r.prompt_tokens for r in mine], dtype=np.float64)
            yield Comparison(
                f"splitwise {phase} step ({hardware})", gpu.name, model_name, tp, True,
                tokens, context, np.array(measured), np.array(before), np.array(after),
            )  # fmt: skip


def _splitwise_step_s(
    model: RooflineCostModel | FittedCostModel, row: SplitwiseRow, phase: str
) -> float:
    b, p = row.batch_size, row.prompt_tokens
    if phase == "prompt":
        work = StepWork(prefill_chunk_tokens=(p,) * b, prefill_context_tokens=(0,) * b)
        return model.step_time_s(work)
    # decode steps after the first token: KV p + 1 (incl. the new token) and growing
    return float(model.decode_span_s(b, b * (p + 1), row.output_tokens - 1).mean())


# ------------------------------------------------------------------ helpers


def _fit(gpu: GPUSpec) -> KernelFit:
    assert gpu.kernel_fit is not None, gpu.name
    return gpu.kernel_fit


def _roofline(spec: ModelSpec, gpu: GPUSpec, tp: int) -> RooflineCostModel:
    return RooflineCostModel(spec, gpu, tp, "fp16", RooflineCostConfig(kind="roofline"))
