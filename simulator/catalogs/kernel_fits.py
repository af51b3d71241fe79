"""The hardware catalog's fitted kernel parameters (`KernelFit`), one per profiled GPU.

Each was fitted by the command in its `source`, run from the repository root on the profile
copies in `data/profiles/vidur/` (Vidur's measured A100, H100 and A40 kernels, MIT; see
that folder's README), with whole models and TP 4 held out to check the fit on. Only the
A100 has an attention profile (Llama-2-70B at TP 2): the H100 and A40 take its attention
efficiencies (`--attention-from a100-80gb`), applied to their own peaks. The errors on
fitted and held-out points are in docs/cost_model_fidelity.md
(`python benchmarks/cost_model_fidelity.py`). Regenerate after changing the kernel model:
run each `source` command with `--out FILE.json` and copy the numbers here.
"""

from __future__ import annotations

from simulator.catalogs.kernel_fit import KernelFit

A100_FIT = KernelFit(
    gpu="a100-80gb",
    gemm_compute_efficiency=0.7427,
    gemm_memory_efficiency=0.8004,
    gemm_overlap=2.724,
    gemm_launch_s=5.799e-06,
    elementwise_memory_efficiency=0.4236,
    elementwise_launch_s=3.274e-06,
    attention_memory_efficiency=0.7618,
    attention_compute_efficiency=0.3625,
    decode_attention_launch_s=1.701e-05,
    decode_attention_per_sequence_s=2.426e-09,
    prefill_attention_launch_s=2.495e-05,
    source=(
        "workbench fit-cost-model --gpu a100-80gb --mlp-csv "
        "data/profiles/vidur/compute/a100/*/*/mlp.csv --attention-csv "
        "data/profiles/vidur/compute_legacy_attention/a100/"
        "meta-llama/Llama-2-70b-hf_tp2/attention.csv --hold-out-model "
        "CodeLlama-34b-Instruct-hf --hold-out-model Meta-Llama-3-8B --hold-out-model "
        "internlm-20b --hold-out-tp 4"
    ),
)

H100_FIT = KernelFit(
    gpu="h100-sxm",
    gemm_compute_efficiency=0.7322,
    gemm_memory_efficiency=0.9886,
    gemm_overlap=1.753,
    gemm_launch_s=5.561e-06,
    elementwise_memory_efficiency=0.492,
    elementwise_launch_s=2.715e-06,
    attention_memory_efficiency=0.7618,
    attention_compute_efficiency=0.3625,
    decode_attention_launch_s=1.701e-05,
    decode_attention_per_sequence_s=2.426e-09,
    prefill_attention_launch_s=2.495e-05,
    source=(
        "workbench fit-cost-model --gpu h100-sxm --mlp-csv "
        "data/profiles/vidur/compute/h100/*/*/mlp.csv --attention-from a100-80gb "
        "--hold-out-model CodeLlama-34b-Instruct-hf --hold-out-model internlm-20b "
        "--hold-out-tp 4"
    ),
)

A40_FIT = KernelFit(
    gpu="a40",
    gemm_compute_efficiency=0.7785,
    gemm_memory_efficiency=0.7943,
    gemm_overlap=2.43,
    gemm_launch_s=5.49e-06,
    elementwise_memory_efficiency=0.6916,
    elementwise_launch_s=2.04e-06,
    attention_memory_efficiency=0.7618,
    attention_compute_efficiency=0.3625,
    decode_attention_launch_s=1.701e-05,
    decode_attention_per_sequence_s=2.426e-09,
    prefill_attention_launch_s=2.495e-05,
    source=(
        "workbench fit-cost-model --gpu a40 --mlp-csv "
        "data/profiles/vidur/compute/a40/*/*/mlp.csv --attention-from a100-80gb "
        "--hold-out-model CodeLlama-34b-Instruct-hf --hold-out-model internlm-20b "
        "--hold-out-tp 4"
    ),
)
