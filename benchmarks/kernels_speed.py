"""Triton kernel speed on CUDA: paged decode attention against the card's memory bandwidth, and
tree-masked verification against decode, FlexAttention and SDPA.

Opt-in, CUDA only. Two tables:

- decode: one query per sequence, batch x context x dtype; time of the default path (split-KV
  by the heuristic) and of the forced single pass, and the achieved bandwidth (K/V bytes read
  plus q and output bytes, over the time) against the card's peak, measured as a large
  device-to-device copy;
- verify: 8 and 64 tree-masked queries per sequence against decode at the same context, and
  against ``flex_attention`` with a block mask and SDPA with a dense boolean mask on the same
  inputs (their K/V gathered out of the paged cache beforehand, so they read contiguous memory).

    python benchmarks/kernels_speed.py --out kernels_speed.json [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    """The attention shape of one layer (default: Llama-3-8B's)."""

    n_heads: int
    n_kv: int
    head_dim: int
    block_size: int


@dataclass
class Paged:
    """One call's inputs: uniform context per sequence, blocks shuffled across the pool."""

    q: torch.Tensor  # (B, Q, nh, hd)
    k_cache: torch.Tensor  # (num_blocks, block_size, n_kv, hd)
    v_cache: torch.Tensor
    tables: torch.Tensor  # (B, blocks per sequence)
    context_lens: torch.Tensor  # (B,)
    new_lens: torch.Tensor  # (B,)
    tree_mask: torch.Tensor | None  # (B, Q, Q) bool

    def args(self) -> tuple:
        scale = self.q.shape[-1] ** -0.5
        return (self.q, self.k_cache, self.v_cache, self.tables, self.context_lens,
                self.new_lens, self.tree_mask, scale)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the results")
    parser.add_argument("--quick", action="store_true", help="a few sizes only")
    parser.add_argument("--batches", type=int, nargs="+", help="decode batches (overrides)")
    parser.add_argument("--contexts", type=int, nargs="+", help="decode contexts (overrides)")
    parser.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=sorted(DTYPES))
    parser.add_argument("--no-verify", action="store_true", help="the decode table alone")
    parser.add_argument("--heads", type=int, default=32, help="query heads")
    parser.add_argument("--kv-heads", type=int, default=8, help="key/value heads")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    parser.add_argument(
        "--max-kv-gib", type=float, default=24.0, help="skip sizes whose one-layer K/V is larger"
    )
    return parser.parse_args(argv)


def timed_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds of fn (CUDA events, L2 flushed between runs)."""
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


TOLERANCES = {torch.float16: 5e-3, torch.bfloat16: 3e-2, torch.float32: 1e-4}


def check_agrees(name: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """Raise unless a baseline's output (B, nh, Q, hd) is the kernel's (B, Q, nh, hd): a
    baseline that computes something else would make its timing meaningless."""
    tol = TOLERANCES[expected.dtype]
    got = got.transpose(1, 2).float()
    if not torch.allclose(got, expected.float(), atol=tol, rtol=tol):
        diff = (got - expected.float()).abs().max().item()
        raise AssertionError(f"{name} disagrees with the kernel (max abs diff {diff:.3g})")


def baseline_ms(name: str, fn: Callable[[], torch.Tensor], expected: torch.Tensor) -> float | str:
    """Like timed_ms after checking fn against the kernel's output; a baseline that cannot run
    a shape gets the error in its cell."""
    try:
        got = fn()
    except Exception as e:  # a baseline's limit is a result here, not a crash
        return f"error: {type(e).__name__}"
    check_agrees(name, got, expected)
    return round(timed_ms(fn), 4)


def peak_bandwidth_gbs() -> float:
    """Read + write bytes per second of a 2 GiB device-to-device copy, in GB/s."""
    src = torch.empty(2**30, dtype=torch.float16, device="cuda")  # 2 GiB
    dst = torch.empty_like(src)
    ms = timed_ms(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9


def random_tree_masks(batch: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """(B, n, n) bool ancestor-or-self masks of random trees (parent of i drawn in [0, i))."""
    masks = torch.zeros(batch, n, n, dtype=torch.bool)
    masks[:, 0, 0] = True
    for i in range(1, n):
        parents = torch.randint(0, i, (batch,), generator=gen)
        masks[:, i] = masks[torch.arange(batch), parents]
        masks[:, i, i] = True
    return masks


def paged_inputs(
    batch: int,
    context: int,
    q_len: int,
    shape: Shape,
    dtype: torch.dtype,
    tree: bool,
    device: str = "cuda",
) -> Paged:
    gen = torch.Generator().manual_seed(0)
    per_seq = math.ceil((context + q_len) / shape.block_size)
    num_blocks = batch * per_seq
    cache_shape = (num_blocks, shape.block_size, shape.n_kv, shape.head_dim)
    tables = torch.randperm(num_blocks, generator=gen).view(batch, per_seq)
    return Paged(
        q=torch.randn(batch, q_len, shape.n_heads, shape.head_dim, device=device, dtype=dtype),
        k_cache=torch.randn(cache_shape, device=device, dtype=dtype),
        v_cache=torch.randn(cache_shape, device=device, dtype=dtype),
        tables=tables.to(device),
        context_lens=torch.full((batch,), context, device=device),
        new_lens=torch.full((batch,), q_len, device=device),
        tree_mask=random_tree_masks(batch, q_len, gen).to(device) if tree else None,
    )


def kv_bytes(batch: int, tokens: int, shape: Shape, dtype: torch.dtype) -> int:
    """K and V bytes of ``tokens`` tokens per sequence."""
    return 2 * batch * tokens * shape.n_kv * shape.head_dim * dtype.itemsize


def decode_row(batch: int, context: int, dtype_name: str, shape: Shape, peak: float) -> dict:
    from kernels.triton_attention import paged_tree_attention

    dtype = DTYPES[dtype_name]
    inputs = paged_inputs(batch, context, 1, shape, dtype, tree=False)
    default_ms = timed_ms(lambda: paged_tree_attention(*inputs.args()))
    single_ms = timed_ms(lambda: paged_tree_attention(*inputs.args(), num_splits=1))
    moved = kv_bytes(batch, context + 1, shape, dtype) + 2 * inputs.q.numel() * dtype.itemsize
    gbs = moved / (default_ms * 1e-3) / 1e9
    return dict(
        batch=batch, context=context, dtype=dtype_name, ms=round(default_ms, 4),
        single_pass_ms=round(single_ms, 4), gb_per_s=round(gbs, 1),
        share_of_peak=round(gbs / peak, 3),
    )  # fmt: skip


def dense_kv(inputs: Paged) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sequence's K/V gathered out of the paged cache: (B, n_kv, L, hd) each."""
    _, block_size, n_kv, hd = inputs.k_cache.shape
    length = int(inputs.context_lens[0] + inputs.new_lens[0])
    pos = torch.arange(length, device=inputs.q.device)  # (L,)
    slots = inputs.tables[:, pos // block_size] * block_size + pos % block_size  # (B, L)
    k = inputs.k_cache.view(-1, n_kv, hd)[slots].transpose(1, 2).contiguous()
    v = inputs.v_cache.view(-1, n_kv, hd)[slots].transpose(1, 2).contiguous()
    return k, v


def dense_mask(inputs: Paged) -> torch.Tensor:
    """(B, 1, Q, L) bool: the whole context, then the tree among the new tokens."""
    B, Q = inputs.q.shape[:2]
    context = int(inputs.context_lens[0])
    seen = torch.ones(B, Q, context, dtype=torch.bool, device=inputs.q.device)
    return torch.cat([seen, inputs.tree_mask], dim=-1)[:, None]


def flex_and_sdpa(
    inputs: Paged, compiled: bool = True
) -> tuple[Callable[[], torch.Tensor], Callable[[], torch.Tensor]]:
    """FlexAttention (block mask; compiled, as it is meant to run) and SDPA (dense mask) calls
    on gathered K/V, each returning (B, nh, Q, hd)."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q = inputs.q.transpose(1, 2).contiguous()  # (B, nh, Q, hd)
    k, v = dense_kv(inputs)
    mask = dense_mask(inputs)  # (B, 1, Q, L)
    B, _, Q, L = mask.shape
    tree, context = inputs.tree_mask, int(inputs.context_lens[0])

    def mask_mod(b, h, q_idx, kv_idx):
        new_j = torch.clamp(kv_idx - context, 0, Q - 1)
        return (kv_idx < context) | tree[b, q_idx, new_j]

    scale = inputs.q.shape[-1] ** -0.5
    block_mask = create_block_mask(mask_mod, B, None, Q, L, device=q.device)
    flex = torch.compile(flex_attention, dynamic=False) if compiled else flex_attention
    return (
        lambda: flex(q, k, v, block_mask=block_mask, scale=scale, enable_gqa=True),
        lambda: F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=True
        ),
    )


def verify_row(batch: int, context: int, q_len: int, dtype_name: str, shape: Shape) -> dict:
    from kernels.triton_attention import paged_tree_attention

    dtype = DTYPES[dtype_name]
    inputs = paged_inputs(batch, context, q_len, shape, dtype, tree=True)
    decode = paged_inputs(batch, context, 1, shape, dtype, tree=False)
    flex, sdpa = flex_and_sdpa(inputs)
    expected = paged_tree_attention(*inputs.args())
    return dict(
        batch=batch, context=context, queries=q_len, dtype=dtype_name,
        tree_ms=round(timed_ms(lambda: paged_tree_attention(*inputs.args())), 4),
        decode_ms=round(timed_ms(lambda: paged_tree_attention(*decode.args())), 4),
        flex_ms=baseline_ms("flex_attention", flex, expected),
        sdpa_ms=baseline_ms("sdpa", sdpa, expected),
    )  # fmt: skip


def markdown(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)"
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def sizes(quick: bool) -> dict[str, list[int]]:
    if quick:
        return dict(batches=[1, 32], contexts=[512, 8192], verify_batches=[1, 16],
                    verify_contexts=[2048])  # fmt: skip
    return dict(batches=[1, 4, 16, 64, 256], contexts=[512, 2048, 8192, 32768],
                verify_batches=[1, 16, 64], verify_contexts=[1024, 4096, 16384])  # fmt: skip


def run(args: argparse.Namespace, shape: Shape) -> dict:
    grid = sizes(args.quick)
    grid["batches"] = args.batches or grid["batches"]
    grid["contexts"] = args.contexts or grid["contexts"]
    if args.no_verify:
        grid["verify_batches"] = []
    peak = peak_bandwidth_gbs()
    max_bytes = args.max_kv_gib * 2**30

    def fits(batch: int, context: int) -> bool:
        return kv_bytes(batch, context, shape, torch.float16) <= max_bytes

    decode = [
        decode_row(b, c, d, shape, peak)
        for d in args.dtypes for b in grid["batches"] for c in grid["contexts"] if fits(b, c)
    ]  # fmt: skip
    verify = [
        verify_row(b, c, q, d, shape)
        for d in args.dtypes for q in (8, 64) for b in grid["verify_batches"]
        for c in grid["verify_contexts"] if fits(b, c)
    ]  # fmt: skip
    return dict(
        device=torch.cuda.get_device_name(), torch=torch.__version__, shape=asdict(shape),
        peak_gb_per_s=round(peak, 1), decode=decode, verify=verify,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("kernels_speed: needs a CUDA device (the Triton kernels are GPU kernels)")
        return 2
    shape = Shape(args.heads, args.kv_heads, args.head_dim, args.block_size)
    results = run(args, shape)
    print(f"{results['device']}: peak copy bandwidth {results['peak_gb_per_s']} GB/s\n")
    print("Decode (1 query per sequence)\n\n" + markdown(results["decode"]) + "\n")
    print("Verification (tree-masked queries)\n\n" + markdown(results["verify"]))
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
