"""The simulator beside Microsoft Vidur on Vidur's own Llama-2-70B TP2 A100 runs.

Runs each `scenarios/vidur/*.yaml` (Vidur's choices: its KV planner, request stream and
Sarathi admission) and prints our figures under Vidur's metric definitions beside the ones
Vidur printed (`data/peer_runs/vidur/runs.json`), with the relative difference, and our
simulation speed in requests per wall second (Vidur's event loop: 174-220 req/s on this
kind of machine).

    python benchmarks/vidur_agreement.py [--seeds 0 1 2] [--vidur-stream] [--markdown]

`--vidur-stream` replays Vidur's exact request stream instead of our seeded one
(`workbench.peer_runs.vidur_request_stream`): what is left is the simulators' own
difference.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from simulator.run import simulate
from workbench.peer_runs import (
    compare,
    load_vidur_runs,
    vidur_figures,
    vidur_metrics,
    vidur_replay,
)
from workbench.scenario.loader import load_scenario

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "data" / "peer_runs" / "vidur" / "runs.json"
SCENARIOS = {  # scenario → Vidur's run
    "q05_tok": "A70b_q05_tok",
    "q1_10k": "A70b_10k_noplots",
    "4rep_lor": "A70b_4rep_lor",
    "tp2pp2": "A70b_tp2pp2",
}


TRACE = ROOT / "data" / "traces" / "splitwise_conv.csv"


def vidur_stream_overrides(name: str, folder: Path) -> list[str]:
    scenario = load_scenario(ROOT / "scenarios" / "vidur" / f"{name}.yaml")
    (folder / name).mkdir(exist_ok=True)
    return vidur_replay(scenario, TRACE, folder / name, max_tokens=4096)


def agreement(name: str, seed: int, overrides: list[str] = ()) -> tuple[list, float]:
    path = ROOT / "scenarios" / "vidur" / f"{name}.yaml"
    scenario = load_scenario(path, [f"seed={seed}", *overrides])
    started = time.perf_counter()
    records = simulate(scenario)
    speed = len(records.requests.request_id) / (time.perf_counter() - started)
    theirs = vidur_figures(load_vidur_runs(RUNS)[SCENARIOS[name]])
    return compare(vidur_metrics(records), theirs), speed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--vidur-stream", action="store_true", help="Vidur's exact requests")
    parser.add_argument("--markdown", action="store_true", help="one markdown table per run")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    for name in SCENARIOS:
        overrides = vidur_stream_overrides(name, folder) if args.vidur_stream else []
        for seed in args.seeds:
            rows, speed = agreement(name, seed, overrides)
            print(f"\n{name} (Vidur {SCENARIOS[name]}), seed {seed}: {speed:,.0f} req/s simulated")
            if args.markdown:
                print("| metric | ours | Vidur | difference |\n|---|---:|---:|---:|")
            for row in rows:
                cells = (
                    row.metric,
                    f"{row.ours:.4g}",
                    f"{row.theirs:.4g}",
                    f"{row.difference:+.1%}",
                )
                print(("| " + " | ".join(cells) + " |") if args.markdown else "  ".join(cells))


if __name__ == "__main__":
    main()
