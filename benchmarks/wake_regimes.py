"""What waking an idle engine costs on this machine, by the work done between wakes (opt-in;
on 2 cores with the zoo's `small`, about a minute for 128 ms of idle, two for 512 ms).

Serves trains of requests on the real engine, one at a time, each arriving `idle` ms after
the previous one ended (after a pause of a second, so that no train inherits another's
state), with 2 to 64 output tokens each: the decode spell between two wakes. Prints each
wake's extra time (the step after the idle gap, from the arrival slept until to its end,
less the median of the same prefill served back to back) by its position in the train, the
median over the rounds, then the median over the train. On an Intel Firecracker VM with two
threads the sixth and later wakes in a row after 2 output tokens cost 5-6 ms more than the
first five, while 16 or more tokens keep every wake at the first ones' cost; the calibration
grid's idle probes decode `IDLE_PROBE_OUTPUT_TOKENS` between wakes for that reason.

    python benchmarks/wake_regimes.py --zoo small --idle-ms 128 512 --rounds 3
    python benchmarks/wake_regimes.py --zoo small --threads 1
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from real_backend.calibration.grid import Probe, get_grid
from real_backend.calibration.measure import SEED, serve_probe
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import Transformer
from real_backend.serve import DTYPES, eos_token_ids
from real_backend.zoo.build import resolve_zoo_model

TRAIN_REQUESTS = 13  # twelve wakes: the first request's step follows no step
PROMPT_TOKENS = 128
PAUSE_S = 1.0


class Trains:
    """The zoo model served as calibration serves its probes."""

    def __init__(self, model: Transformer, avoid: set[int]) -> None:
        self.model = model
        self.avoid = avoid

    def wakes_ms(self, probe: Probe, seed: int) -> list[float]:
        """Each step after an idle gap, ms from the arrival slept until to its end."""
        points = serve_probe(self.model, probe, seed, probe.name, self.avoid)
        return [p.step_s * 1e3 for p in points if p.kind == "prefill" and p.idle_before_s > 0]

    def back_to_back_ms(self, probe: Probe, seed: int) -> list[float]:
        points = serve_probe(self.model, probe, seed, probe.name, self.avoid)
        return [p.step_s * 1e3 for p in points if p.kind == "prefill"]


def train(idle_ms: float, outputs: int) -> Probe:
    return Probe(
        f"train-t{idle_ms:g}-o{outputs}",
        TRAIN_REQUESTS,
        (PROMPT_TOKENS, PROMPT_TOKENS),
        (outputs, outputs),
        1,
        1,
        think_s=idle_ms / 1e3,
    )


def wake_extras(
    trains: Trains, idle_ms: float, outputs: list[int], rounds: int, pause_s: float = PAUSE_S
) -> tuple[float, dict[int, np.ndarray]]:
    """The back-to-back prefill (ms) and, per output count, each wake's extra ms by its
    position in the train (median over the rounds, which interleave the output counts)."""
    by_outputs: dict[int, list[list[float]]] = {n: [] for n in outputs}
    back_to_back: list[float] = []
    for seed in range(rounds):
        for n in outputs:
            time.sleep(pause_s)
            by_outputs[n].append(trains.wakes_ms(train(idle_ms, n), seed))
        together = replace(train(idle_ms, 2), think_s=0.0)
        back_to_back += trains.back_to_back_ms(together, seed)
    base = float(np.median(back_to_back))
    extras = {n: np.median(np.array(ms), axis=0) - base for n, ms in by_outputs.items()}
    return base, extras  # each (TRAIN_REQUESTS - 1,)


def table(idle_ms: float, base: float, extras: dict[int, np.ndarray], rounds: int) -> str:
    lines = [
        f"idle {idle_ms:g} ms: a prefill of {PROMPT_TOKENS} back to back {base:.2f} ms; "
        f"each wake's extra ms by position in the train (median of {rounds} rounds)"
    ]
    for n, extra in extras.items():
        cells = " ".join(f"{x:5.2f}" for x in extra)
        lines.append(f"  {n:3d} output tokens: {cells} | median {np.median(extra):5.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="small")
    parser.add_argument("--zoo-dir", type=Path, default=None)
    parser.add_argument("--idle-ms", type=float, nargs="+", default=[128.0])
    parser.add_argument("--outputs", type=int, nargs="+", default=[2, 8, 16, 32, 64])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    folder = resolve_zoo_model(args.zoo, "target", args.zoo_dir)
    model = load_checkpoint(folder, DTYPES["fp32"], "cpu")
    model.use_kernels("auto")
    trains = Trains(model, set(eos_token_ids(folder)))
    warmup = get_grid("standard", model.args.context_tokens).warmup
    serve_probe(model, warmup, SEED, "warmup", trains.avoid)  # thrown away, as calibration does
    print(f"{args.zoo} on cpu, {torch.get_num_threads()} threads")
    for idle_ms in args.idle_ms:
        base, extras = wake_extras(trains, idle_ms, args.outputs, args.rounds)
        print(table(idle_ms, base, extras, args.rounds), flush=True)


if __name__ == "__main__":
    main()
