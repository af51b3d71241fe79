"""CPU paged attention: the reference (every row padded to the step's longest query and widest
block table) against the grouped set (the reference per group of like rows), and the grouping's
slack.

Opt-in. Shapes are the zoo `small` model's attention (8 heads of 32, 2 KV heads, blocks of 16)
by default; contexts are lognormal (median 180 tokens, sigma 0.6, at most 1,500), as a
continuous batch's are. Cases: decode steps of 4-64 sequences, and mixed steps of one prefill
chunk beside 20 decodes. Methods run interleaved, best of ``--repeat`` rounds; the output
checks each against the reference. With ``--model CHECKPOINT`` the same cases time whole
forward steps of that model (`Transformer.step`, last-token logits) with either kernel set.

    OMP_NUM_THREADS=1 python benchmarks/attention_grouping.py [--slack 1.2 1.5 2] [--quick]
    OMP_NUM_THREADS=1 python benchmarks/attention_grouping.py --model ZOO/small/target
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernels.grouped_attention import SLACK, attend_in_groups, row_groups
from kernels.paged_attention import paged_tree_attention as reference

Args = tuple


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--slack", type=float, nargs="+", default=[SLACK])
    p.add_argument("--repeat", type=int, default=5, help="rounds; the best is kept")
    p.add_argument("--calls", type=int, default=20, help="calls per method per round")
    p.add_argument("--quick", action="store_true", help="two cases, one round")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", type=Path, help="a checkpoint folder: time whole steps")
    return p.parse_args(argv)


def contexts(rng: random.Random, n: int) -> list[int]:
    return [min(1500, int(rng.lognormvariate(math.log(180), 0.6))) for _ in range(n)]


def step_inputs(
    a: argparse.Namespace, ctx: list[int], new: list[int], gen: torch.Generator
) -> Args:
    """Random q and caches; each sequence's blocks consecutive in a shared pool."""
    bs, keys = a.block_size, [c + n for c, n in zip(ctx, new, strict=True)]
    need = [-(-k // bs) for k in keys]
    cache_shape = (sum(need) + 1, bs, a.kv_heads, a.head_dim)
    tables = torch.zeros(len(keys), max(need), dtype=torch.long)  # (B, max_blocks)
    start = 0
    for b, n in enumerate(need):
        tables[b, :n] = torch.arange(start, start + n)
        start += n
    q = torch.randn(len(keys), max(new), a.heads, a.head_dim, generator=gen)  # (B, Q, nh, hd)
    k_cache = torch.randn(cache_shape, generator=gen)
    v_cache = torch.randn(cache_shape, generator=gen)
    return (q, k_cache, v_cache, tables, torch.tensor(ctx), torch.tensor(new), None,
            a.head_dim**-0.5)  # fmt: skip


def grouped_with(slack: float) -> Callable[..., torch.Tensor]:
    def run(*args: torch.Tensor) -> torch.Tensor:
        _, _, _, _, ctx, new, _, _ = args
        width = args[0].shape[2] * args[0].shape[3]
        groups = row_groups(new.tolist(), (ctx + new).tolist(), width, slack)
        return attend_in_groups(groups, *args)

    return run


def cases(a: argparse.Namespace) -> list[tuple[str, list[int], list[int]]]:
    rng = random.Random(a.seed)
    decode = [(f"decode, {n} sequences", contexts(rng, n), [1] * n) for n in (4, 16, 32, 64)]
    mixed = [
        (f"mixed, {chunk}-token chunk + 20 decodes", [*contexts(rng, 20), 0], [1] * 20 + [chunk])
        for chunk in (64, 256)
    ]
    every = decode + mixed
    return [every[2], every[5]] if a.quick else every


def best_ms(fn: Callable[..., torch.Tensor], args: Args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls * 1e3


def model_steps(a: argparse.Namespace) -> None:
    """Whole forward steps: each case's sequences prefilled once per kernel set, then decode
    (and chunk) steps timed in turn; every step appends a token per sequence, alike for both."""
    from real_backend.model.loading import load_checkpoint
    from real_backend.model.transformer import SeqStep

    model = load_checkpoint(a.model)
    rounds = 1 if a.quick else a.repeat
    print(f"{a.model}: ms per step, best of {rounds} interleaved rounds of {a.calls}")
    print("| case | reference | grouped | reference / grouped |\n|---|---:|---:|---:|")
    with torch.inference_mode():
        for name, ctx, new in cases(a):
            steps = rounds * a.calls
            caches = {k: prefilled(model, k, ctx, new, steps) for k in ("reference", "grouped")}
            best = {k: math.inf for k in caches}
            for r in range(rounds):
                for kernels, cache in caches.items():
                    model.use_kernels(kernels)  # type: ignore[arg-type]
                    t0 = time.perf_counter()
                    for i in range(a.calls):
                        plan = [SeqStep(b, [7] * n) if n == 1 else SeqStep((r, i), [7] * n)
                                for b, n in enumerate(new)]  # fmt: skip
                        model.step(cache, plan, last_only=True)
                        if max(new) > 1:
                            cache.free((r, i))
                    best[kernels] = min(best[kernels], (time.perf_counter() - t0) / a.calls * 1e3)
            ratio = best["reference"] / best["grouped"]
            print(f"| {name} | {best['reference']:.2f} | {best['grouped']:.2f} | {ratio:.2f}x |")


def prefilled(model, kernels: str, ctx: list[int], new: list[int], steps: int):
    """A cache holding each decoding sequence's context, room for ``steps`` more tokens each
    and for one chunk row (which starts empty at every step and is freed after it)."""
    from real_backend.model.transformer import SeqStep

    model.use_kernels(kernels)
    blocks = sum(-(-(c + steps) // 16) for c in ctx) + -(-max(new) // 16) + 1
    cache = model.new_cache(num_blocks=blocks, block_size=16)
    for b, (c, n) in enumerate(zip(ctx, new, strict=True)):
        if n == 1 and c > 0:
            model.step(cache, [SeqStep(b, [7] * c)], last_only=True)
    return cache


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    if a.model is not None:
        model_steps(a)
        return
    gen = torch.Generator().manual_seed(a.seed)
    methods = {"reference": reference} | {f"grouped {s:g}": grouped_with(s) for s in a.slack}
    rounds = 1 if a.quick else a.repeat
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); ms per call, best of "
          f"{rounds} interleaved rounds of {a.calls}")  # fmt: skip
    print("| case | longest / mean keys | " + " | ".join(methods) + " | reference / grouped |")
    print("|---|---|" + "---:|" * (len(methods) + 1))
    for name, ctx, new in cases(a):
        args = step_inputs(a, ctx, new, gen)
        expected = reference(*args)
        for fn in methods.values():
            torch.testing.assert_close(fn(*args), expected, atol=1e-5, rtol=1e-5)
        best = {m: math.inf for m in methods}
        for _ in range(rounds):
            for m, fn in methods.items():
                best[m] = min(best[m], best_ms(fn, args, a.calls))
        keys = [c + n for c, n in zip(ctx, new, strict=True)]
        cells = " | ".join(f"{best[m]:.3f}" for m in methods)
        ratio = best["reference"] / best[list(methods)[1]]
        print(f"| {name} | {max(keys)} / {sum(keys) // len(keys)} | {cells} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
