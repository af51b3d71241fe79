"""Hardware catalog: the accelerators a scenario may name, with public datasheet numbers,
fitted kernel parameters where measurements exist, and an hourly price for capacity plans.

All FLOP/s figures are *dense* (no 2:4 structured sparsity); 16-bit tensor figures are with
fp32 accumulation (what PyTorch's GEMMs use). Interconnect bandwidth is the per-GPU,
per-direction bandwidth a ring collective can use (NVLink, or PCIe where a card has no
NVLink). Memory sizes are what the device reports (`nvidia-smi`, MiB), which is what an
inference engine can actually budget, not the marketing "GB".

Prices are cloud list prices, not quotes: RunPod's serverless "flex" per-second prices × 3600
(docs.runpod.io/serverless/pricing, the vendor's own page, as stored by this project's search
index, read 2026-11-23). One vendor for all of them so that they compare; other clouds and
on-demand pods differ (third-party 2026 summaries put A100 80GB SXM at $1.5-2.5/h and H100
SXM at $2.5-4/h on demand). The CPU entry has no price.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from simulator.catalogs.kernel_fit import KernelFit
from simulator.catalogs.kernel_fits import A40_FIT, A100_FIT, H100_FIT
from simulator.catalogs.suggest import unknown_name_message
from workbench.errors import WorkbenchError

_MIB = 1 << 20
_GIB = 1 << 30


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator (or a generic CPU socket standing in for one)."""

    name: str
    memory_bytes: int  # device memory as reported by the device
    peak_tensor_flops: float  # bf16/fp16 dense tensor-core FLOP/s (fp32 accumulate)
    peak_fp32_flops: float  # plain fp32 (non-tensor) FLOP/s
    memory_bandwidth_bytes_s: float  # peak device-memory bandwidth
    interconnect_bandwidth_bytes_s: float  # intra-node link, per GPU, per direction
    collective_latency_s: float  # fixed cost of one small all-reduce
    host_bandwidth_bytes_s: float  # to and from host memory (swapped KV), per direction
    peak_fp8_flops: float | None = None  # dense fp8 tensor FLOP/s; None: no fp8 tensor cores
    kernel_fit: KernelFit | None = None  # fitted kernel parameters (cost_model.kind: fitted)
    hourly_price_usd: float | None = None  # one GPU for one hour (see the module docstring)
    multiprocessors: int | None = None  # SMs: how many CTAs a kernel runs at once

    def peak_flops(self, dtype: str) -> float:
        """Peak matmul FLOP/s for weights/activations of `dtype`.

        fp8 on a card without fp8 tensor cores runs as weight-only fp8 (dequantised to
        16-bit before the GEMM, as vLLM's Marlin kernels do on Ampere): 16-bit peak.
        """
        if dtype == "fp32":
            return self.peak_fp32_flops
        if dtype == "fp8" and self.peak_fp8_flops is not None:
            return self.peak_fp8_flops
        return self.peak_tensor_flops


# Sources: NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), H100 datasheet (SXM5),
# H200 datasheet (SXM), L40S datasheet. NVLink totals are bidirectional on the datasheets
# (A100 600 GB/s, H100/H200 900 GB/s); a ring all-reduce moves data one way per link, so
# half of that is listed. Collective latency ~10 µs matches Vidur's a100_dgx all_reduce
# profile for the smallest messages at TP2 (0.010 ms for 2 KiB). Streaming multiprocessors
# (the fitted decode attention lays its thread blocks on them): A100 108, H100 and H200 SXM
# 132 (NVIDIA's A100 and H100 architecture whitepapers), L40S 142 (AD102 as shipped in the
# L40S datasheet), A40 84 and RTX 3090 82 (GA102 whitepaper, below). Host links (swapped KV)
# are the datasheets' PCIe totals, halved per direction: Gen4 x16 64 GB/s, Gen5 x16 128 GB/s.
_CATALOG: dict[str, GPUSpec] = {
    "a100-80gb": GPUSpec(
        name="a100-80gb",
        memory_bytes=81920 * _MIB,  # 80 GiB HBM2e
        peak_tensor_flops=312e12,
        peak_fp32_flops=19.5e12,
        memory_bandwidth_bytes_s=2039e9,
        interconnect_bandwidth_bytes_s=300e9,  # NVLink 3: 600 GB/s bidirectional
        collective_latency_s=10e-6,
        host_bandwidth_bytes_s=32e9,  # PCIe Gen4 x16: 64 GB/s bidirectional
        kernel_fit=A100_FIT,
        hourly_price_usd=2.736,  # RunPod "A100 80 GB" $0.00076/s
        multiprocessors=108,
    ),
    "h100-sxm": GPUSpec(
        name="h100-sxm",
        memory_bytes=81559 * _MIB,  # 80 GB HBM3, as nvidia-smi reports it
        peak_tensor_flops=989e12,
        peak_fp32_flops=67e12,
        memory_bandwidth_bytes_s=3.35e12,
        interconnect_bandwidth_bytes_s=450e9,  # NVLink 4: 900 GB/s bidirectional
        collective_latency_s=10e-6,
        host_bandwidth_bytes_s=64e9,  # PCIe Gen5 x16: 128 GB/s bidirectional
        peak_fp8_flops=1979e12,
        kernel_fit=H100_FIT,
        hourly_price_usd=4.176,  # RunPod "H100 PRO 80 GB" $0.00116/s
        multiprocessors=132,
    ),
    "h200": GPUSpec(
        name="h200",
        memory_bytes=143771 * _MIB,  # 141 GB HBM3e, as nvidia-smi reports it
        peak_tensor_flops=989e12,
        peak_fp32_flops=67e12,
        memory_bandwidth_bytes_s=4.8e12,
        interconnect_bandwidth_bytes_s=450e9,  # NVLink 4: 900 GB/s bidirectional
        collective_latency_s=10e-6,
        host_bandwidth_bytes_s=64e9,  # PCIe Gen5 x16: 128 GB/s bidirectional
        peak_fp8_flops=1979e12,
        # No H200 profile: the H100's fitted efficiencies (the same GH100 compute die and
        # kernels; only the memory differs), applied to the H200's own peaks. Unvalidated.
        kernel_fit=H100_FIT,
        hourly_price_usd=5.58,  # RunPod "H200 PRO 141 GB" $0.00155/s
        multiprocessors=132,
    ),
    "l40s": GPUSpec(
        name="l40s",
        memory_bytes=46068 * _MIB,  # 48 GB GDDR6 with ECC on, as nvidia-smi reports it
        peak_tensor_flops=362e12,
        peak_fp32_flops=91.6e12,
        memory_bandwidth_bytes_s=864e9,
        interconnect_bandwidth_bytes_s=32e9,  # no NVLink: PCIe Gen4 x16, 64 GB/s both ways
        collective_latency_s=20e-6,  # PCIe through the host bridge: slower small messages
        host_bandwidth_bytes_s=32e9,  # PCIe Gen4 x16
        peak_fp8_flops=733e12,
        kernel_fit=None,  # no Ada-generation profile: the fitted cost model refuses it
        hourly_price_usd=1.908,  # RunPod "L40, L40S, 6000 Ada PRO 48 GB" $0.00053/s
        multiprocessors=142,
    ),
    # NVIDIA A40 datasheet: GA102, 84 SMs, 48 GB GDDR6 with ECC, 696 GB/s, BF16/FP16 tensor
    # 149.7 TFLOP/s dense with fp32 accumulate, fp32 37.4; NVLink bridge 112.5 GB/s
    # bidirectional between two cards (Vidur's a40 node: pairs of A40s with NVLink).
    "a40": GPUSpec(
        name="a40",
        memory_bytes=46068 * _MIB,  # 48 GB GDDR6 with ECC on (as the L40S reports it)
        peak_tensor_flops=149.7e12,
        peak_fp32_flops=37.4e12,
        memory_bandwidth_bytes_s=696e9,
        interconnect_bandwidth_bytes_s=56.25e9,  # NVLink bridge: 112.5 GB/s bidirectional
        collective_latency_s=20e-6,  # as the L40S: no NVSwitch, small messages cost more
        host_bandwidth_bytes_s=32e9,  # PCIe Gen4 x16
        kernel_fit=A40_FIT,
        hourly_price_usd=1.224,  # RunPod "A6000, A40 48 GB" $0.00034/s
        multiprocessors=84,
    ),
    # NVIDIA Ampere GA102 whitepaper, appendix A (GeForce RTX 3090): 82 SMs, 24 GB GDDR6X,
    # 936 GB/s; FP16/BF16 tensor 71 TFLOP/s dense with fp32 accumulate (142 with fp16
    # accumulate, which PyTorch does not use), fp32 35.6. Most 3090 boxes have no NVLink
    # bridge: PCIe Gen4 x16.
    "rtx3090": GPUSpec(
        name="rtx3090",
        memory_bytes=24576 * _MIB,  # 24 GB GDDR6X (no ECC), as nvidia-smi reports it
        peak_tensor_flops=71e12,
        peak_fp32_flops=35.6e12,
        memory_bandwidth_bytes_s=936e9,
        interconnect_bandwidth_bytes_s=32e9,  # PCIe Gen4 x16, 64 GB/s both ways
        collective_latency_s=20e-6,
        host_bandwidth_bytes_s=32e9,  # PCIe Gen4 x16
        # No 3090 profile: the A40's fitted efficiencies (the same GA102 die and kernels;
        # GDDR6X instead of GDDR6), applied to the 3090's own peaks. Unvalidated.
        kernel_fit=A40_FIT,
        hourly_price_usd=0.684,  # RunPod "L4, A5000, 3090 24 GB" $0.00019/s
        multiprocessors=82,
    ),
    # A generic server CPU socket (e.g. 32 cores with AVX-512/BF16, 8 DDR5 channels), not a
    # datasheet part: for sizing CPU runs of small models, not for precise predictions.
    "cpu": GPUSpec(
        name="cpu",
        memory_bytes=256 * _GIB,
        peak_tensor_flops=4e12,  # bf16 dot products (AVX512-BF16) at ~2x the fp32 rate
        peak_fp32_flops=2e12,
        memory_bandwidth_bytes_s=150e9,
        interconnect_bandwidth_bytes_s=50e9,  # "TP" ranks share a socket's memory system
        collective_latency_s=50e-6,  # gloo over shared memory
        host_bandwidth_bytes_s=75e9,  # a copy within host memory: a read and a write of each byte
        kernel_fit=None,  # no CPU kernel profile
        hourly_price_usd=None,  # no source: a generic socket, not a product
    ),
}

GPU_CATALOG: MappingProxyType[str, GPUSpec] = MappingProxyType(_CATALOG)


def get_gpu(name: str) -> GPUSpec:
    """The catalog entry for `name`; unknown names get a did-you-mean."""
    spec = GPU_CATALOG.get(name)
    if spec is not None:
        return spec
    raise WorkbenchError(unknown_name_message("GPU", name, GPU_CATALOG), field="hardware.gpu")
