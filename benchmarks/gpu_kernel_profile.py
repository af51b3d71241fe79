"""This card's own kernel times in Vidur's profile format, to check the fitted cost model's
GPU parameters against kernels measured here and to refit them (docs/cost_model_fidelity.md,
issue 20).

Opt-in, CUDA only. Writes, under ``--out-dir``:

- ``<model>/mlp.csv``: the four GEMMs of one layer (fused QKV, O, gate+up, down; bf16
  ``F.linear``, i.e. cuBLAS, as Vidur's profiler ran them) by tokens per step, for each TP
  degree asked, in Vidur's ``mlp.csv`` columns (ms per layer; no norm or elementwise columns:
  this project runs those as other kernels than the serving engines Vidur profiled, so a fit
  takes them from a catalog GPU, ``workbench fit-cost-model --elementwise-from``);
- ``attention_<kernel>/attention.csv``: Llama-2-70B's per-GPU attention at TP 2 (32 query
  and 4 KV heads of 128), decode by batch and cached tokens and a prefill chunk over cached
  tokens (batch 1), in Vidur's attention columns, for PyTorch SDPA's FlashAttention backend
  over contiguous K/V (``sdpa_flash``; prefill with the lower-right causal mask) and this
  project's Triton paged kernel (``triton_paged``).

How the L2 cache stands before each call (``--l2``, several interleaved point by point; a
mode other than the first writes ``<folder>.<mode>/``):

- ``flush``: ``triton.testing.do_bench`` (a 256 MB buffer zeroed before every call: the
  inputs come from HBM, behind a cache full of dirty lines to write back first; a call whose
  host dispatch outlasts the zeroing is timed with the host's gap; as many calls as fit in
  20 ms);
- ``clean``: eight times the L2 *read* before every call, more if the call's host dispatch
  would outlast it (inputs from HBM, the cache clean), CUDA events around the call alone:
  a forward pass's state, where the previous kernels read other weights; 20 calls;
- ``warm``: the same call 16 times back to back in one CUDA graph, as a profiler that repeats
  one op sees it (what of its inputs fits in L2 is read from there the next time);
- ``rotate`` (GEMMs only): distinct copies of the weight, together at least three L2s, back to
  back in one CUDA graph.

The default, ``rotate clean``, gives the GEMMs' ``rotate`` files and the attention's ``clean``
ones (``data/profiles/workbench_h100/``). ``--budget-s`` stops between points once spent,
saying where; what was measured by then is written.

    python benchmarks/gpu_kernel_profile.py --out-dir DIR [--budget-s 180]
        [--l2 rotate clean flush warm] [--jobs llama-2-7b:1 llama-2-70b:4 attention]
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from simulator.catalogs.models import ModelSpec, get_model
from simulator.cost_models.layer_ops import LayerShape

DEVICE = "cuda"
DTYPE = torch.bfloat16
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
STATS = ("min", "max", "mean", "median", "std")
# Vidur's token grid up to 1,024 (1-16 by powers of two, then every 8), coarser beyond.
TOKENS = [1, 2, 4, 8, 16, *range(24, 1025, 8), *range(1280, 4097, 256)]
FOLDERS = {"llama-2-7b": "Llama-2-7b-hf", "llama-2-70b": "Llama-2-70b-hf"}  # Vidur's names
JOBS = ["llama-2-7b:1", "llama-2-70b:4", "llama-2-70b:2", "attention", "llama-2-7b:2"]
L2_MODES = ("flush", "clean", "warm", "rotate")
GRAPH_CALLS = 16  # calls per CUDA graph in the warm mode
ATTENTION_MODEL, ATTENTION_TP, BLOCK_SIZE = "llama-2-70b", 2, 16
DECODE_BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]
DECODE_CACHED = [32, 128, 512, 1024, 2048, 4032]
LONG_CACHED = [8192, 16384, 32768, 65536]  # batch 1-4 only: where a split of the context matters
PREFILL_CHUNKS = [64, 128, 256, 512, 1024, 2048, 4096]
PREFILL_CACHED = [0, 256, 1024, 2048, 4096]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=180.0, help="stop between points after")
    parser.add_argument("--l2", nargs="+", choices=L2_MODES, default=["rotate", "clean"])
    parser.add_argument("--jobs", nargs="+", default=JOBS, help="MODEL:TP or attention")
    return parser.parse_args(argv)


# ------------------------------------------------------------------ timing


def timed_ms(mode: str, calls: list[Callable[[], object]]) -> dict[str, float]:
    """Stats of one call's time in ms with the L2 cache in ``mode`` (module docstring);
    ``calls`` are interchangeable calls on distinct copies of the inputs (rotate uses all)."""
    if mode == "flush":
        import triton.testing

        return summary(triton.testing.do_bench(calls[0], warmup=5, rep=20, return_mode="all"))
    if mode == "clean":
        return clean_cache_ms(calls[0])
    return graph_ms([calls[0]] * GRAPH_CALLS if mode == "warm" else calls)


def clean_cache_ms(call: Callable[[], object], reps: int = 20) -> dict[str, float]:
    """Events around ``call`` alone, eight L2s or more read before each (the cache left clean:
    nothing to write back, nothing of the inputs left in it). The read must outlast the host's
    dispatch of the call (SDPA's takes tens of microseconds), or the events would time the
    host: it is repeated until it takes four times that dispatch."""
    l2 = torch.cuda.get_device_properties(DEVICE).L2_cache_size
    evictor = torch.ones(8 * l2 // 4, device=DEVICE, dtype=torch.float32)
    call()  # compiles, picks cuBLAS kernels
    reads = reads_to_outlast(call, lambda: evictor.sum())
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    for _ in range(reps):
        for _ in range(reads):
            evictor.sum()  # queued ahead: the call's launch waits on the GPU, not on the host
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        events.append((start, end))
    torch.cuda.synchronize()
    return summary([start.elapsed_time(end) for start, end in events])


def reads_to_outlast(call: Callable[[], object], read: Callable[[], object]) -> int:
    """How many ``read`` kernels take four times the host's dispatch of ``call``."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(5):
        call()
    host_ms = (time.perf_counter() - began) * 1e3 / 5
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    read()
    end.record()
    end.synchronize()
    return max(1, math.ceil(4 * host_ms / start.elapsed_time(end)))


def graph_ms(calls: list[Callable[[], object]], replays: int = 10) -> dict[str, float]:
    """Per-call ms of ``calls`` back to back in one CUDA graph, nothing between them."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS picks its kernels and workspace outside the capture
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / len(calls))
    return summary(times)


def summary(times_ms: list[float]) -> dict[str, float]:
    times = torch.tensor(times_ms)
    return {
        "min": times.min().item(),
        "max": times.max().item(),
        "mean": times.mean().item(),
        "median": times.median().item(),
        "std": times.std().item() if times.numel() > 1 else 0.0,
    }


def stat_columns(op: str, stats: dict[str, float]) -> dict[str, float]:
    return {f"time_stats.{op}.{s}": round(stats[s], 6) for s in STATS}


# ------------------------------------------------------------------ GEMMs


def gemm_rows(
    spec: ModelSpec, tp: int, modes: list[str], deadline: float
) -> Iterator[tuple[str, dict[str, object]]]:
    """(mode, row) per token count and L2 mode: each GEMM of one layer at TP ``tp``, bf16."""
    shapes = {op.name: op.gemm for op in LayerShape.of(spec, tp, 2).token_ops() if op.gemm}
    weights = {name: gemm_weights(*shapes[name], "rotate" in modes) for name in GEMMS}
    keys = dict(
        n_head=spec.num_attention_heads, n_kv_head=spec.num_kv_heads, n_embd=spec.hidden_size,
        n_expanded_embd=spec.intermediate_size, vocab_size=spec.vocab_size, use_gated_mlp=True,
        num_tensor_parallel_workers=tp,
    )  # fmt: skip
    for tokens in TOKENS:
        if spent(deadline, f"{spec.name} at TP {tp}, {tokens} tokens"):
            return
        rows: dict[str, dict[str, object]] = {m: {**keys, "num_tokens": tokens} for m in modes}
        for name, ws in weights.items():
            x = torch.randn(tokens, ws[0].shape[1], device=DEVICE, dtype=DTYPE)  # (T, k)
            calls = [lambda w=w, x=x: F.linear(x, w) for w in ws]
            for mode in modes:  # interleaved: a slow spell of the card falls on every mode
                rows[mode].update(stat_columns(name, timed_ms(mode, calls)))
        yield from rows.items()


def gemm_weights(k: int, n: int, rotate: bool) -> list[torch.Tensor]:
    """One (n, k) weight, or enough copies to fill three L2 caches for the rotate mode."""
    copies = 1
    if rotate:
        l2 = torch.cuda.get_device_properties(DEVICE).L2_cache_size
        copies = max(4, math.ceil(3 * l2 / (2 * k * n)))
    return [
        torch.randn(n, k, device=DEVICE, dtype=DTYPE) / math.sqrt(k)  # (n, k)
        for _ in range(copies)
    ]


# ------------------------------------------------------------------ attention


def decode_points() -> Iterator[tuple[int, int]]:
    for batch in DECODE_BATCHES:
        for cached in DECODE_CACHED:
            yield batch, cached
    for batch in (1, 2, 4):
        for cached in LONG_CACHED:
            yield batch, cached


def prefill_points() -> Iterator[tuple[int, int]]:
    for chunk in PREFILL_CHUNKS:
        for cached in PREFILL_CACHED:
            if chunk + cached <= 8192:
                yield chunk, cached


def sdpa_flash_call(
    batch: int, queries: int, cached: int, heads: int, kv_heads: int
) -> Callable[[], torch.Tensor]:
    """SDPA's FlashAttention backend over contiguous K/V with GQA; ``queries`` new tokens per
    sequence attend every cached key and the new ones causally (lower-right aligned)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    hd = get_model(ATTENTION_MODEL).head_dim
    keys = cached + queries
    q = torch.randn(batch, heads, queries, hd, device=DEVICE, dtype=DTYPE)  # (B, nh, Q, hd)
    k = torch.randn(batch, kv_heads, keys, hd, device=DEVICE, dtype=DTYPE)  # (B, n_kv, L, hd)
    v = torch.randn_like(k)
    mask = causal_lower_right(queries, keys) if queries > 1 else None

    def call() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    return call


def triton_paged_call(batch: int, queries: int, cached: int, heads: int, kv_heads: int) -> Callable:
    """This project's Triton kernel over a paged cache, blocks shuffled across the pool."""
    from kernels.triton_attention import paged_tree_attention

    hd = get_model(ATTENTION_MODEL).head_dim
    per_seq = math.ceil((cached + queries) / BLOCK_SIZE)
    cache_shape = (batch * per_seq, BLOCK_SIZE, kv_heads, hd)
    k_cache = torch.randn(cache_shape, device=DEVICE, dtype=DTYPE)
    v_cache = torch.randn_like(k_cache)
    tables = torch.randperm(batch * per_seq, device=DEVICE).view(batch, per_seq)
    q = torch.randn(batch, queries, heads, hd, device=DEVICE, dtype=DTYPE)  # (B, Q, nh, hd)
    context = torch.full((batch,), cached, device=DEVICE)
    new = torch.full((batch,), queries, device=DEVICE)
    scale = hd**-0.5
    return lambda: paged_tree_attention(q, k_cache, v_cache, tables, context, new, None, scale)


KernelCall = Callable[[int, int, int, int, int], Callable[[], torch.Tensor]]
KERNELS: dict[str, KernelCall] = {"sdpa_flash": sdpa_flash_call, "triton_paged": triton_paged_call}


def key_slots(kernel: str, keys: int) -> int:
    """The key slots per sequence each kernel sizes its split of the context by (Vidur's
    ``max_model_len`` column): SDPA its keys, the paged kernel its block table's width."""
    return keys if kernel == "sdpa_flash" else math.ceil(keys / BLOCK_SIZE) * BLOCK_SIZE


def attention_rows(
    kernel: str, modes: list[str], deadline: float
) -> Iterator[tuple[str, dict[str, object]]]:
    """(mode, row) per decode point and prefill point of one kernel."""
    spec = get_model(ATTENTION_MODEL)
    heads = spec.num_attention_heads // ATTENTION_TP
    kv_heads = spec.num_kv_heads // ATTENTION_TP
    keys = dict(
        n_embd=spec.hidden_size, n_q_head=spec.num_attention_heads, n_kv_head=spec.num_kv_heads,
        block_size=BLOCK_SIZE, num_tensor_parallel_workers=ATTENTION_TP, attention_backend=kernel,
    )  # fmt: skip
    points = [(b, 1, c) for b, c in decode_points()]
    points += [(1, chunk, c) for chunk, c in prefill_points()]
    for batch, queries, cached in points:
        if spent(deadline, f"{kernel}, batch {batch}, {queries} queries, {cached} cached"):
            return
        call = KERNELS[kernel](batch, queries, cached, heads, kv_heads)
        if not runs(call, f"{kernel} at batch {batch}, {queries} queries, {cached} cached"):
            continue
        op = "attn_decode" if queries == 1 else "attn_prefill"
        row = {
            **keys, "max_model_len": key_slots(kernel, cached + queries), "batch_size": batch,
            "prefill_chunk_size": 0 if queries == 1 else queries, "kv_cache_size": cached,
            "is_prefill": queries > 1,
        }  # fmt: skip
        for mode in modes:
            yield mode, {**row, **stat_columns(op, timed_ms(mode, [call]))}
        torch.cuda.empty_cache()


def spent(deadline: float, next_point: str) -> bool:
    """Whether the budget is spent; if so, says which point the job stops before."""
    if time.monotonic() <= deadline:
        return False
    print(f"budget spent: stopped before {next_point}", flush=True)
    return True


def runs(call: Callable[[], object], what: str) -> bool:
    """Whether a kernel takes this shape; a refusal is printed and the point left out."""
    try:
        call()
    except (RuntimeError, TypeError, ValueError) as exc:
        print(f"left out, {what}: {type(exc).__name__}: {str(exc).splitlines()[0]}", flush=True)
        return False
    return True


# ------------------------------------------------------------------ output


def write_csv(path: Path, rows: list[dict[str, object]]) -> None:
    """Rows of differing columns (decode and prefill) under the union of their columns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(name for row in rows for name in row))
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {path}", flush=True)


def job_rows(
    job: str, modes: list[str], deadline: float
) -> Iterator[tuple[str, dict[str, object]]]:
    """(folder, row) pairs of one job: ``attention``, or ``MODEL:TP`` for its GEMMs."""
    if job == "attention":
        kept = [m for m in modes if m != "rotate"]  # one call's inputs: nothing to rotate over
        if not kept:
            print("attention: the rotate mode does not apply; measured clean", flush=True)
            kept = ["clean"]
        for kernel in KERNELS:
            for mode, row in attention_rows(kernel, kept, deadline):
                yield folder_of(f"attention_{kernel}", mode, kept), row
        return
    model, tp = job.split(":")
    for mode, row in gemm_rows(get_model(model), int(tp), modes, deadline):
        yield folder_of(FOLDERS[model], mode, modes), row


def folder_of(name: str, mode: str, modes: list[str]) -> str:
    return name if mode == modes[0] else f"{name}.{mode}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    deadline = time.monotonic() + args.budget_s
    print(torch.cuda.get_device_name(), torch.__version__, "L2 modes:", *args.l2, flush=True)
    out: dict[str, list[dict[str, object]]] = {}
    for job in args.jobs:
        start = time.monotonic()
        for folder, row in job_rows(job, args.l2, deadline):
            out.setdefault(folder, []).append(row)
        print(f"{job}: {time.monotonic() - start:.0f} s", flush=True)
    for folder, rows in out.items():
        name = "attention.csv" if folder.startswith("attention_") else "mlp.csv"
        write_csv(args.out_dir / folder / name, rows)


if __name__ == "__main__":
    main()
