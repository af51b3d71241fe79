"""Adaptive draft length, simulated against the real engine (opt-in; about 4 minutes per pair
on 2 cores).

For each zoo pair: a real speculative run (k = 6, the adaptive rule, `min_tokens` 1, window 4)
on a calibration workload and one on a held-out workload (another seed, half the rate,
longer outputs); then simulated twins of both workloads calibrated from the first run
(`decoder.calibrate_from`), over several seeds. Printed: drafted and accepted tokens per
decoding sequence and step, the real runs' and the twins' (mean, and range over seeds).
What is compared is the decoding, not time: the twins run on the simulator's CPU roofline.

    workbench zoo build small && workbench zoo build tiny
    python benchmarks/adaptive_draft_fidelity.py --zoo small tiny --seeds 5 --db /tmp/ad.duckdb
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from workbench.cli import main as workbench
from workbench.store.db import ResultsStore

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "speculative_real.yaml"
DECODER = ["decoder.num_speculative_tokens=6", "decoder.adaptive={min_tokens: 1, window: 4}"]
WORKLOADS = {
    "calibration": [
        "workload.num_requests=200",
        "workload.output_tokens={kind: uniform, low: 32, high: 160}",
    ],
    "held-out": [
        "seed=11",
        "workload.num_requests=150",
        "workload.arrival={kind: poisson, rate_per_s: 4}",
        "workload.output_tokens={kind: uniform, low: 64, high: 256}",
    ],
}


def run(db: Path, label: str, sets: list[str], backend: str) -> tuple[float, float]:
    """(drafted, accepted) per decoding sequence and step of one run."""
    args = ["run", str(SCENARIO), "--db", str(db), "--backend", backend, "--no-progress"]
    args += ["--label", label] + [f"--set={s}" for s in sets]
    if workbench(args) != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed")
    with ResultsStore.open(db, read_only=True) as store:
        (stored,) = [r for r in store.list_runs() if r.get("label") == label]
        steps = store.load_records(stored["run_id"]).steps
    decodes = steps.decode_tokens.sum()
    return steps.drafted_tokens.sum() / decodes, steps.accepted_tokens.sum() / decodes


def run_id(db: Path, label: str) -> str:
    with ResultsStore.open(db, read_only=True) as store:
        return next(r["run_id"] for r in store.list_runs() if r.get("label") == label)


def compare(db: Path, zoo: str, seeds: list[int]) -> None:
    model = [f"model.zoo={zoo}", f"model.name=zoo-{zoo}", f"decoder.draft.zoo={zoo}"]
    real = {
        workload: run(db, f"{zoo}-real-{workload}", model + DECODER + sets, "real")
        for workload, sets in WORKLOADS.items()
    }
    source = f"decoder.calibrate_from={run_id(db, f'{zoo}-real-calibration')}"
    for workload, sets in WORKLOADS.items():
        twin = model + DECODER + sets + [source]
        twins = np.array(
            [
                run(db, f"{zoo}-sim-{workload}-{seed}", [*twin, f"seed={seed}"], "sim")
                for seed in seeds
            ]
        )  # (seeds, 2)
        for i, name in enumerate(("drafted", "accepted")):
            measured, simulated = real[workload][i], twins[:, i].mean()
            error = twins[:, i] / measured - 1
            print(
                f"{zoo:6} {workload:11} {name:8} real {measured:.3f}  twins {simulated:.3f}"
                f" ({error.mean():+.1%}; seeds {error.min():+.1%} to {error.max():+.1%})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", nargs="+", default=["small", "tiny"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--db", type=Path, default=Path("adaptive_draft.duckdb"))
    args = parser.parse_args()
    torch.set_num_threads(1)  # the real runs: one thread, as every CPU figure in the docs
    for zoo in args.zoo:
        compare(args.db, zoo, [21 + i for i in range(args.seeds)])


if __name__ == "__main__":
    main()
