"""Speculative decoding on the real engine beside its simulated twin, timed (opt-in; about 3
minutes on 2 cores, 5 more the first time, when it calibrates the target and the draft).

For a zoo pair (default `small`): calibration profiles of its target and of its draft
(`workbench calibrate`, skipped when the database holds them), a real speculative run (k = 4)
whose acceptance the twins replay (`decoder.calibrate_from`: request types), then `workbench
run --backend both` on held-out workloads (another seed, longer outputs, two arrival rates).
Each real run gets two twins, the same but for the draft's price: the draft's own profile
(what `--backend both` does) or the CPU roofline (`cost_model.draft_roofline`, as `--backend
both` priced it before draft profiles). Printed: the pair's error table (sim / real − 1) for
each twin. The latest run of each label is compared, so a database can be reused.

    workbench zoo build small
    python benchmarks/speculative_twins.py --zoo small --db /tmp/st.duckdb
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports.collect import collect_run
from reports.sim_vs_real import error, error_rows
from workbench.cli import main as workbench
from workbench.runner import run_scenario
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "speculative_real.yaml"
CALIBRATION = [
    "workload.num_requests=200",
    "workload.output_tokens={kind: uniform, low: 32, high: 160}",
]
HELD_OUT = [
    "seed=11",
    "workload.num_requests=150",
    "workload.output_tokens={kind: uniform, low: 64, high: 256}",
]
SHOWN = (
    *("TTFT median", "TPOT median", "TPOT p90", "TPOT p99", "ITL median", "E2E median", "E2E p90"),
    *("Requests/s", "Step wall median, decode only", "Step wall mean, decode only"),
)


def cli(args: list[str]) -> None:
    if workbench(args) != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed")


def profiles(db: Path, zoo: str, zoo_dir: Path) -> tuple[str, str]:
    """The pair's target and draft profile names, calibrated unless the database has them."""
    target, draft = f"{zoo}-cpu-fp32", f"{zoo}-draft-cpu-fp32"
    cli(["calibrate", "--model", zoo, "--db", str(db), "--no-progress"])
    folder = zoo_dir / zoo / "draft"
    cli(["calibrate", "--model", str(folder), "--name", draft, "--db", str(db), "--no-progress"])
    return target, draft


def labelled(db: Path, label: str, backend: str) -> str:
    with ResultsStore.open(db, read_only=True) as store:
        runs = store.list_runs()
        matching = [r for r in runs if (r.get("label"), r["backend"]) == (label, backend)]
        return str(matching[-1]["run_id"])  # the latest


def roofline_twin(db: Path, twin_id: str) -> str:
    """The twin again, its draft priced by the roofline (as before draft profiles)."""
    with ResultsStore.open(db) as store:
        twin = Scenario.model_validate_json(store.get_run(twin_id)["config_json"])
        cost = twin.cost_model.model_copy(update={"draft_profile": None, "draft_roofline": True})
        roofline = twin.model_copy(update={"cost_model": cost})
        (outcome,) = run_scenario(roofline, store, source=__file__)
        return outcome.run_id


def show(db: Path, real_id: str, twins: dict[str, str]) -> None:
    with ResultsStore.open(db, read_only=True) as store:
        real = collect_run(store, real_id)
        tables = {name: error_rows(real, collect_run(store, run)) for name, run in twins.items()}
    print(f"{'metric':34} {'real':>9} " + " ".join(f"{name:>22}" for name in twins))
    first = next(iter(tables.values()))
    for i, (label, real_value, _, _) in enumerate(first):
        if not label.startswith(SHOWN) or real_value is None:
            continue
        cells = []
        for rows in tables.values():
            sim_value = rows[i][2]
            assert sim_value is not None  # a twin has every figure its real run has
            cells.append(f"{sim_value:10.2f} ({error(sim_value, real_value):+6.1%})")
        print(f"{label:34} {real_value:9.2f} " + " ".join(f"{c:>22}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="small")
    parser.add_argument("--zoo-dir", type=Path, default=Path("~/.cache/decoding-workbench/zoo"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--rates", type=float, nargs="+", default=[3.0, 6.0])
    args = parser.parse_args()
    zoo_dir = args.zoo_dir.expanduser()
    target, _ = profiles(args.db, args.zoo, zoo_dir)
    pair = [f"model.zoo={args.zoo}", f"model.name=zoo-{args.zoo}", f"decoder.draft.zoo={args.zoo}"]
    base = ["run", str(SCENARIO), "--db", str(args.db), "--no-progress"]
    sets = [f"--set={s}" for s in pair + CALIBRATION]
    cli([*base, "--label", f"{args.zoo}-acceptance", *sets])
    accepted = labelled(args.db, f"{args.zoo}-acceptance", "real")
    for rate in args.rates:
        label = f"{args.zoo}-held-out-{rate:g}"
        held = [*pair, *HELD_OUT, f"workload.arrival={{kind: poisson, rate_per_s: {rate}}}"]
        held.append(f"decoder.calibrate_from={accepted}")
        sets = [f"--set={s}" for s in held]
        cli([*base, "--backend", "both", "--profile", target, "--label", label, *sets])
        real, twin = labelled(args.db, label, "real"), labelled(args.db, label, "sim")
        print(f"\n{args.zoo}, held-out workload at {rate:g} req/s: real {real}, twins")
        show(args.db, real, {"draft profile": twin, "draft roofline": roofline_twin(args.db, twin)})


if __name__ == "__main__":
    main()
