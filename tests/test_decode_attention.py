"""Decode attention as the kernel divides its work: FlashAttention's split heuristic, CTA
rounds on the busiest SM, both profiles' layouts, and the fit against their points."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from simulator.catalogs.hardware import get_gpu
from simulator.catalogs.kernel_fit import DECODE_KERNEL_NAMES, KernelFit
from simulator.catalogs.models import get_model
from simulator.cost_models.decode_attention import (
    DECODE_KERNELS,
    busiest_sm_s,
    decode_work,
    split_count,
)
from simulator.cost_models.fidelity import DEFAULT_DATA, llmservingsim_attention, vidur_attention
from simulator.cost_models.kernel_fitting import fit_attention, predict_attention_s
from simulator.cost_models.kernel_profiles import AttentionPoints, read_attention_points
from simulator.cost_models.kernel_times import KernelTimes
from simulator.cost_models.layer_ops import LayerShape
from workbench.cli import main
from workbench.errors import WorkbenchError

VARLEN, SPLIT = DECODE_KERNELS["flash_varlen"], DECODE_KERNELS["flash_decoding"]
HEADER = (
    "time_stats.attn_prefill.median,time_stats.attn_decode.median,n_embd,n_q_head,n_kv_head,"
    "num_tensor_parallel_workers,max_model_len,batch_size,prefill_chunk_size,kv_cache_size,"
    "is_prefill\n"
)


@pytest.mark.parametrize(
    ("ctas", "blocks", "splits"),
    [
        (4, 32, 16),  # batch 1, 4 KV heads: 16 splits of 2 blocks (64 CTAs, 0.59 of a wave)
        (88, 32, 1),  # 88 ≥ 0.8 × 108: no split
        (86, 32, 5),  # just under: 5 splits fill 3.98 waves (2-4 splits: 0.80 each)
        (4, 1, 1),  # one block cannot split
        (8, 29, 10),  # 13 splits would fill 0.96 waves but split 29 blocks as 12 do
        (5, 97, 20),  # 17 splits sit at 85 % of the best in float64, just under in float32
        (1, 595, 100),  # the same tie: FlashAttention's float32 decides
        (4, 0, 1),  # no key blocks: no split
    ],
)
def test_the_split_heuristic_is_flash_attentions(ctas: int, blocks: int, splits: int) -> None:
    assert split_count(ctas, 108, blocks) == splits


def test_the_kernels_are_the_ones_a_fit_file_may_name() -> None:
    assert tuple(DECODE_KERNELS) == DECODE_KERNEL_NAMES


def test_a_step_over_no_keys_is_priced_as_one_over_its_own_key() -> None:
    gpu = get_gpu("h100-sxm")
    shape = LayerShape.of(get_model("llama-3-8b"), 1, 2)
    attention = KernelTimes(gpu, gpu.kernel_fit, "fp16", 2).decode(shape)
    empty, one = attention.step_s(64, 0, 0), attention.step_s(64, 64, 1)
    assert 0 < empty < one


def test_ctas_run_in_rounds_of_two_on_the_busiest_sm() -> None:
    """One query head per CTA (16 per sequence) on 132 SMs: batch 8 puts one CTA on each
    busy SM, batch 12 two, batch 20 three (a shared round, then one alone)."""
    busiest = [decode_work(VARLEN, b, 16, 132, 16, 16).busiest_ctas for b in (8, 12, 20)]
    assert busiest == [1, 2, 3]
    alone, shared = (2e-6, 20e9), (3e-6, 12e9)
    three = busiest_sm_s(3, 512e3, alone, shared)
    assert three == pytest.approx(3e-6 + 512e3 / 12e9 + 2e-6 + 512e3 / 20e9)


def test_a_split_context_walks_only_its_own_blocks() -> None:
    """Batch 1 over 3 blocks of keys in a 32-block table: 16 splits of 2 blocks, two busy."""
    work = decode_work(SPLIT, 1, 4, 108, 3, 32)
    assert (work.splits, work.cta_keys, work.busiest_ctas) == (16, 256, 1)


def test_steps_in_the_same_key_blocks_share_all_but_the_streamed_kv() -> None:
    """A span's steps are looked up per run of equal key blocks; each equals a step alone."""
    gpu = get_gpu("a100-80gb")
    shape = LayerShape.of(get_model("llama-2-70b"), 2, 2)
    attention = KernelTimes(gpu, gpu.kernel_fit, "fp16", 2).decode(shape)
    sums = 8.0 * np.arange(250, 700, dtype=np.float64)  # 8 sequences of 250-699 keys
    maxes = np.arange(900, 1350, dtype=np.float64)
    span = attention.steps_s(8, sums, maxes)
    alone = [attention.steps_s(8, sums[i : i + 1], maxes[i : i + 1])[0] for i in range(450)]
    assert span.tolist() == alone
    assert np.all(np.diff(span) > 0)  # more keys never cost less
    step = [attention.step_s(8, int(s), int(m)) for s, m in zip(sums, maxes, strict=True)]
    assert step == pytest.approx(span.tolist(), rel=1e-12)


def test_llmservingsim_rows_mean_whole_batch_keys(tmp_path: Path) -> None:
    folder = tmp_path / "meta-llama" / "Llama-3.1-70B" / "tp4"
    folder.mkdir(parents=True)
    (folder / "attention.csv").write_text(
        HEADER
        + ",0.031,8192,64,8,4,131072,2,0,1024,False\n"  # 2 sequences of 512 keys
        + "0.007,,8192,64,8,4,131072,1,64,256,True\n"  # 64 queries after 192 cached
        + "0.005,,8192,64,8,4,131072,1,64,32,True\n"  # fewer keys than queries: dropped
    )
    (p,) = read_attention_points(folder / "attention.csv", layout="llmservingsim")
    assert p.model == "Llama-3.1-70B" and p.decode_kernel == "flash_varlen"
    assert p.decode_cached.tolist() == [511.0] and p.decode_table_keys.tolist() == [512.0]
    assert p.decode_s.tolist() == pytest.approx([31e-6])
    assert p.prefill_chunk.tolist() == [64.0] and p.prefill_cached.tolist() == [192.0]


def test_the_fitted_model_follows_both_measured_decode_kernels() -> None:
    """Vidur's A100 flash-decoding points with the catalog fit, and LLMServingSim's H100
    varlen points with a fit of their own (both fitted points)."""
    (vidur,) = [c for c in vidur_attention(DEFAULT_DATA) if c.source.endswith("decode")]
    own = [c for c in llmservingsim_attention(DEFAULT_DATA) if c.source.endswith("(own fit)")]
    assert np.mean(np.abs(vidur.errors("after")) <= 0.10) > 0.80
    assert abs(vidur.errors("after").mean()) < 0.03
    (h100,) = own
    assert len(h100.measured_s) > 20000
    assert np.mean(np.abs(h100.errors("after")) <= 0.10) > 0.95


def test_a_fit_from_before_the_work_split_asks_for_a_refit(tmp_path: Path) -> None:
    old = dataclasses.asdict(get_gpu("a100-80gb").kernel_fit)
    old["decode_attention_per_sequence_s"] = 2.4e-9
    path = tmp_path / "old_fit.json"
    path.write_text(json.dumps(old))
    with pytest.raises(WorkbenchError, match="refit it with `workbench fit-cost-model`") as err:
        KernelFit.from_json(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_decode_kernel_is_refused_in_one_line(tmp_path: Path) -> None:
    data = dataclasses.asdict(get_gpu("a100-80gb").kernel_fit)
    data["decode_attention_kernel"] = "paged_v1"
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(data))
    with pytest.raises(WorkbenchError, match="expected one of flash_decoding, flash_varlen"):
        KernelFit.from_json(path)


def test_a_fit_on_small_batches_prices_the_large_ones() -> None:
    """LLMServingSim's H100 varlen decodes: fitted on batch ≤ 64, the 65–256 batches (which
    run up to 32 CTAs per SM) land within 10 %, held out."""
    gpu = get_gpu("h100-sxm")
    path = DEFAULT_DATA / "llmservingsim_h100/meta-llama/Llama-3.1-70B/tp4/attention.csv"
    (points,) = read_attention_points(path, layout="llmservingsim")
    empty = np.zeros(0)
    points = dataclasses.replace(points, prefill_chunk=empty, prefill_cached=empty, prefill_s=empty)
    small = points.decode_batch <= 64

    def part(mask: np.ndarray) -> AttentionPoints:
        fields = ("decode_batch", "decode_cached", "decode_table_keys", "decode_s")
        return dataclasses.replace(points, **{f: getattr(points, f)[mask] for f in fields})

    base = dataclasses.replace(
        get_gpu("h100-sxm").kernel_fit, decode_attention_kernel="flash_varlen"
    )
    fit = fit_attention(gpu, [part(small)], base)
    held = part(~small)
    predicted, _ = predict_attention_s(KernelTimes(gpu, fit, "fp16", 2), held)
    errors = predicted / held.decode_s - 1
    assert len(errors) > 7000 and np.mean(np.abs(errors) <= 0.10) > 0.95


def test_a_user_fits_llmservingsim_attention_with_one_command(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    mlp = DEFAULT_DATA / "vidur/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    attention = DEFAULT_DATA / "llmservingsim_h100/meta-llama/Llama-3.1-70B/tp4/attention.csv"
    args = ["fit-cost-model", "--gpu", "h100-sxm", "--mlp-csv", str(mlp), "--attention-csv"]
    args += [str(attention), "--attention-layout", "llmservingsim", "--out", str(out)]
    assert main(args) == 0
    fit = KernelFit.from_json(out)
    assert fit.decode_attention_kernel == "flash_varlen"
    assert "--attention-layout llmservingsim" in fit.source
    assert 0.5 < fit.decode_cta_bandwidth_share < 1.0  # about 20 GB/s of 25 per SM


def test_a_gpu_without_an_sm_count_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    mlp = DEFAULT_DATA / "vidur/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    args = ["fit-cost-model", "--gpu", "cpu", "--mlp-csv", str(mlp)]
    assert main([*args, "--attention-from", "a100-80gb", "--out", "unused.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "cpu has no multiprocessor count" in err and "\n" not in err
