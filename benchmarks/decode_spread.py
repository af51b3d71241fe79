"""Decode steps of uneven contexts against equal ones of the same sum: what the calibrated cost
model's spread terms price (`s_decode(batch)` · (1 − sum / (batch × longest)) and p_pad, or
with the one-call rule the padding as keys and past it `grouped_padding`; `calibrated_fit`).

Opt-in. Whole decode steps of a checkpoint with the chosen kernels; per batch size, one batch of
lognormal contexts (median 180, sigma 0.6, at most 1,500: a continuous batch's) and one of
equal contexts with the same sum, stepped in turn (rounds interleaved, every step appending a
token to each sequence). Prints the median step of each and their ratio; with ``--db`` also the
ratio the latest calibration profile of the model predicts, with its spread term and without
(the context sum alone: 1.00 but for the batch's growth).

    OMP_NUM_THREADS=1 python benchmarks/decode_spread.py --model ZOO/small/target [--db fid.duckdb]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import time
from pathlib import Path

import torch

from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import SeqStep
from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import CalibratedCostModel, fit_profile
from workbench.store.db import ResultsStore

BLOCK = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a checkpoint folder")
    p.add_argument("--kernels", default="grouped", choices=("grouped", "reference"))
    p.add_argument("--batch", type=int, nargs="+", default=[4, 8, 16, 24])
    p.add_argument("--rounds", type=int, default=8, help="interleaved rounds per batch size")
    p.add_argument("--calls", type=int, default=10, help="steps per case per round")
    p.add_argument("--db", type=Path, help="price the cases with this database's profile")
    p.add_argument("--profile", help="the profile (default: the latest complete one)")
    p.add_argument("--draws", type=int, default=1, help="uneven batches per batch size")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def uneven_and_equal(rng: random.Random, batch: int) -> tuple[list[int], list[int]]:
    uneven = [min(1500, max(1, int(rng.lognormvariate(math.log(180), 0.6)))) for _ in range(batch)]
    share, extra = divmod(sum(uneven), batch)
    return uneven, [share + (b < extra) for b in range(batch)]


def prefilled(model, ctx: list[int], steps: int):  # type: ignore[no-untyped-def]
    """A cache holding each sequence's context, with room for `steps` more tokens each."""
    cache = model.new_cache(num_blocks=sum(-(-(c + steps) // BLOCK) for c in ctx) + 1,
                            block_size=BLOCK)  # fmt: skip
    for b, c in enumerate(ctx):
        model.step(cache, [SeqStep(b, [7] * c)], last_only=True)
    return cache


def step_ms(model, cache, batch: int, calls: int) -> list[float]:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        model.step(cache, [SeqStep(b, [7]) for b in range(batch)], last_only=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def measured(model, cases: dict[str, list[int]], a: argparse.Namespace) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Median step (ms) of each case over interleaved rounds."""
    caches = {name: prefilled(model, ctx, a.rounds * a.calls) for name, ctx in cases.items()}
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(a.rounds):
        for name, ctx in cases.items():
            times[name] += step_ms(model, caches[name], len(ctx), a.calls)
    return {name: statistics.median(t) for name, t in times.items()}


def predicted(fit_model: CalibratedCostModel, ctx: list[int], steps: int) -> float:
    """The profile's median step over the case's steps (each appends a token)."""
    middle = steps // 2
    work = StepWork(decode_batch_size=len(ctx), decode_context_sum=sum(ctx) + len(ctx) * middle,
                    decode_context_max=max(ctx) + middle)  # fmt: skip
    return fit_model.step_time_s(work) * 1e3


def profile_models(db: Path, ref: str | None) -> dict[str, CalibratedCostModel]:
    with ResultsStore.open(str(db)) as store:
        complete = [p for p in store.profiles() if p.complete]
        profile = store.find_profile(ref) if ref else complete[-1]
        points = store.profile_points(profile.profile_id)
    print(f"priced by {profile.describe()}")
    fit = fit_profile(points, profile)
    curves = {name: c for name, c in fit.curves.items() if not name.startswith("spread_")}
    context_sum = dataclasses.replace(  # no spread curve, padding price nor one-call rule
        fit, curves=curves, terms=fit.terms | {"p_pad": 0.0}, one_call_padding=0.0
    )
    return {"spread": CalibratedCostModel(fit), "sum": CalibratedCostModel(context_sum)}


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    model = load_checkpoint(a.model)
    model.use_kernels(a.kernels)
    priced = profile_models(a.db, a.profile) if a.db else {}
    rng = random.Random(a.seed)
    print(f"{a.model}, kernels {a.kernels}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); median ms per decode step, "
          f"{a.rounds} interleaved rounds of {a.calls}")  # fmt: skip
    header = "| batch | longest / mean | uneven | equal | uneven / equal |"
    print(header + "".join(f" predicted, {k} |" for k in priced))
    print("|---:|---:|---:|---:|---:|" + "---:|" * len(priced))
    with torch.inference_mode():
        for batch in [b for b in a.batch for _ in range(a.draws)]:
            uneven, equal = uneven_and_equal(rng, batch)
            ms = measured(model, {"uneven": uneven, "equal": equal}, a)
            steps = a.rounds * a.calls
            ratios = [predicted(m, uneven, steps) / predicted(m, equal, steps)
                      for m in priced.values()]  # fmt: skip
            row = f"| {batch} | {max(uneven)} / {sum(uneven) // batch} | {ms['uneven']:.2f} | "
            row += f"{ms['equal']:.2f} | {ms['uneven'] / ms['equal']:.3f} |"
            print(row + "".join(f" {r:.3f} |" for r in ratios))


if __name__ == "__main__":
    main()
