"""The zoo target's linear layers on CPU: `F.linear` (MKL) against oneDNN-prepacked weights.

Opt-in. One forward's 17 matmuls of the `small` target (4 layers of q/k/v, output,
gate/up and down projections, and the LM head), over M rows (M = tokens in the step), with
the weights cycling through the cache as in a real forward. Prints ms per forward for:

- aten: `F.linear` on the plain weight (what `transformers` runs);
- onednn: `torch.ops.mkldnn._linear_pointwise` on weights reordered once
  (`real_backend.model.inference_linear`, which keeps `F.linear` for M = 1).

    python benchmarks/cpu_linear.py [--threads 1] [--rows 1 2 3 5 8 16 31 64]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from real_backend.model.inference_linear import InferenceLinear

# (out, in) of the zoo `small` target: dim 256, 8 query / 2 KV heads of 32, MLP 688, vocab 4096
LAYER = [(384, 256), (256, 256), (1376, 256), (256, 688)]
SHAPES = LAYER * 4 + [(4096, 256)]


def per_call_ms(fn: Callable[[], object], repeat: int) -> float:
    for _ in range(10):
        fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 3, 5, 8, 16, 31, 64])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(o, i, generator=gen) for o, i in SHAPES]
    packed = [InferenceLinear(w, None, prepack=True) for w in weights]
    inputs = {i: torch.randn(max(args.rows), i, generator=gen) for i in {i for _, i in SHAPES}}
    print("| rows | aten ms | onednn-prepacked ms | speed-up |\n|---:|---:|---:|---:|")
    with torch.inference_mode():
        for m in args.rows:
            aten = per_call_ms(
                lambda m=m: [F.linear(inputs[w.shape[1]][:m], w) for w in weights], args.repeat
            )
            ours = per_call_ms(
                lambda m=m: [p(inputs[p.weight.shape[1]][:m]) for p in packed], args.repeat
            )
            print(f"| {m} | {aten:.3f} | {ours:.3f} | {aten / ours:.2f}× |")


if __name__ == "__main__":
    main()
