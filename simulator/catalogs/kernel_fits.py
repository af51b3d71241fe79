"""The hardware catalog's fitted kernel parameters (`KernelFit`), one per profiled GPU.

Each was fitted by the command in its `source`, run from the repository root on the profile
copies in `data/profiles/vidur/` (Vidur's measured A100, H100 and A40 kernels, MIT; see
that folder's README), with whole models and TP 4 held out to check the fit on. Only the
A100 has a profile of the serving engines' attention kernels (Llama-2-70B at TP 2): the
H100 and A40 take its attention parameters (`attention_of`, as `--attention-from a100-80gb`
does), applied to their own peaks, bandwidth and SM counts. The errors on
fitted and held-out points are in docs/cost_model_fidelity.md
(`python benchmarks/cost_model_fidelity.py`). Regenerate after changing the kernel model:
run each `source` command with `--out FILE.json` and copy the numbers here.
"""

from __future__ import annotations

from simulator.catalogs.kernel_fit import KernelFit, attention_of

A100_FIT = KernelFit(
    gpu="a100-80gb",
    gemm_compute_efficiency=0.7345,
    gemm_memory_efficiency=0.8013,
    gemm_overlap=2.744,
    gemm_launch_s=6.208e-06,
    norm_memory_efficiency=0.3894,
    norm_launch_s=3.585e-06,
    rope_memory_efficiency=0.4525,
    rope_launch_s=2.713e-06,
    activation_memory_efficiency=0.5107,
    activation_launch_s=3.228e-06,
    residual_add_memory_efficiency=0.9461,
    residual_add_launch_s=1.664e-06,
    embedding_memory_efficiency=0.157,
    embedding_launch_s=3.548e-06,
    decode_attention_launch_s=2.363e-06,
    decode_attention_kernel="flash_decoding",
    decode_cta_s=5.075e-06,
    decode_cta_bandwidth_share=1.371,
    decode_shared_cta_s=6.495e-06,
    decode_shared_cta_bandwidth_share=1.027,
    decode_memory_efficiency=1.492,
    decode_overlap=1.0,
    decode_combine_launch_s=1.587e-06,
    decode_combine_per_split_s=2.806e-09,
    prefill_attention_launch_s=5.617e-06,
    prefill_cta_s=1.326e-06,
    prefill_cta_flops_share=0.4675,
    prefill_copy_bandwidth_share=0.6217,
    prefill_shared_cta_s=5.903e-06,
    prefill_shared_cta_flops_share=0.3166,
    prefill_shared_copy_bandwidth_share=0.7793,
    prefill_combine_s=8.194e-06,
    prefill_tail_share=0.5179,
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
    gemm_compute_efficiency=0.7212,
    gemm_memory_efficiency=0.9928,
    gemm_overlap=1.746,
    gemm_launch_s=5.874e-06,
    norm_memory_efficiency=0.4272,
    norm_launch_s=3.14e-06,
    rope_memory_efficiency=0.508,
    rope_launch_s=2.133e-06,
    activation_memory_efficiency=0.6025,
    activation_launch_s=2.299e-06,
    residual_add_memory_efficiency=1.093,
    residual_add_launch_s=1.411e-06,
    embedding_memory_efficiency=0.1878,
    embedding_launch_s=2.96e-06,
    **attention_of(A100_FIT),  # --attention-from a100-80gb
    source=(
        "workbench fit-cost-model --gpu h100-sxm --mlp-csv "
        "data/profiles/vidur/compute/h100/*/*/mlp.csv --attention-from a100-80gb "
        "--hold-out-model CodeLlama-34b-Instruct-hf --hold-out-model internlm-20b "
        "--hold-out-tp 4"
    ),
)

A40_FIT = KernelFit(
    gpu="a40",
    gemm_compute_efficiency=0.7751,
    gemm_memory_efficiency=0.7943,
    gemm_overlap=2.431,
    gemm_launch_s=5.54e-06,
    norm_memory_efficiency=0.6237,
    norm_launch_s=3.078e-06,
    rope_memory_efficiency=0.8084,
    rope_launch_s=1.577e-06,
    activation_memory_efficiency=0.7983,
    activation_launch_s=2.024e-06,
    residual_add_memory_efficiency=0.8496,
    residual_add_launch_s=7.558e-07,
    embedding_memory_efficiency=0.511,
    embedding_launch_s=2.67e-06,
    **attention_of(A100_FIT),  # --attention-from a100-80gb
    source=(
        "workbench fit-cost-model --gpu a40 --mlp-csv "
        "data/profiles/vidur/compute/a40/*/*/mlp.csv --attention-from a100-80gb "
        "--hold-out-model CodeLlama-34b-Instruct-hf --hold-out-model internlm-20b "
        "--hold-out-tp 4"
    ),
)
