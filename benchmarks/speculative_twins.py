"""Speculative decoding on the real engine beside its simulated twin, timed (opt-in; about 3
minutes on 2 cores, 5 more the first time, when it calibrates the target and the draft).

For a zoo pair (default `small`): calibration profiles of its target and of its draft
(`workbench calibrate`, skipped when the database holds them), a real speculative run (k = 4)
whose acceptance the twins replay (`decoder.calibrate_from`: request types), then `workbench
run --backend both` on held-out workloads (another seed, longer outputs, two arrival rates).
Each real run gets three twins: the draft priced by its own profile (what `--backend both`
does), the same at the run's own speed (`--speed-matched`: every price scaled by the real
run's target forwards against their prices, read from the run itself, so not a prediction),
and the draft on the roofline (`cost_model.draft_roofline`, as `--backend both` priced it
before draft profiles). Printed: the pair's error table (sim / real − 1) for each twin, the
draft's forwards included. The latest run of each label is compared, so a database can be
reused. `--device cuda` runs the pair in bf16 on the card (`scripts/gpu_checks.sh
spec_twins`). `--decoder lookahead` does the same for lookahead decoding (W5 N4 G5 on the
target, no draft: `scenarios/lookahead_real.yaml`), whose twins replay the acceptance run's
histograms by output position and its candidate n-grams by output position. `--held-out-seed`
draws another held-out workload (default 11).

    workbench zoo build small
    python benchmarks/speculative_twins.py --zoo small --db /tmp/st.duckdb
    python benchmarks/speculative_twins.py --zoo small --db /tmp/la.duckdb --decoder lookahead
"""

from __future__ import annotations

import argparse
from pathlib import Path

from reports.collect import collect_run
from reports.matching import simulator_twin, speed_matched_twin
from reports.sim_vs_real import error, error_rows
from workbench.cli import main as workbench
from workbench.runner import run_scenario
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
SCENARIO = {
    "speculative": SCENARIOS / "speculative_real.yaml",
    "lookahead": SCENARIOS / "lookahead_real.yaml",
}
CALIBRATION = [
    "workload.num_requests=200",
    "workload.output_tokens={kind: uniform, low: 32, high: 160}",
]
HELD_OUT = [
    "workload.num_requests=150",
    "workload.output_tokens={kind: uniform, low: 64, high: 256}",
]
SHOWN = (
    *("TTFT median", "TPOT median", "TPOT p90", "TPOT p99", "ITL median", "E2E median", "E2E p90"),
    *("Requests/s", "Steps", "Step wall median, decode only", "Step wall mean, decode only"),
    "Draft forwards",
)


def cli(args: list[str]) -> None:
    if workbench(args) != 0:
        raise SystemExit(f"workbench {' '.join(args)} failed")


def profiles(
    db: Path, zoo: str, zoo_dir: Path, device: str, dtype: str, draft_too: bool = True
) -> str:
    """The target's profile name; the target (and the draft) calibrated unless the database
    has them."""
    engine = ["--device", device, "--dtype", dtype]
    target, draft = f"{zoo}-{device}-{dtype}", f"{zoo}-draft-{device}-{dtype}"
    cli(["calibrate", "--model", zoo, "--db", str(db), "--no-progress", *engine])
    if not draft_too:
        return target
    folder = zoo_dir / zoo / "draft"
    calibrate_draft = ["calibrate", "--model", str(folder), "--name", draft, "--db", str(db)]
    cli([*calibrate_draft, "--no-progress", *engine])
    return target


def on_device(device: str, dtype: str) -> list[str]:
    """The scenario settings that put the pair on `device` in `dtype`."""
    gpu = "cpu" if device == "cpu" else "h100-sxm"  # the real engine serves CUDA for any GPU
    return [f"hardware.gpu={gpu}", f"model.dtype={dtype}"]  # the draft runs as the target


def labelled(db: Path, label: str, backend: str) -> str:
    with ResultsStore.open(db, read_only=True) as store:
        runs = store.list_runs()
        matching = [r for r in runs if (r.get("label"), r["backend"]) == (label, backend)]
        return str(matching[-1]["run_id"])  # the latest


def twins_of(db: Path, real_id: str) -> tuple[str, str]:
    """The real run's twin and its speed-matched twin (`--speed-matched`)."""
    with ResultsStore.open(db, read_only=True) as store:
        runs = [collect_run(store, r["run_id"]) for r in store.list_runs()]
    real = next(run for run in runs if run.run_id == real_id)
    twin, matched = simulator_twin(real, runs), speed_matched_twin(real, runs)
    assert twin is not None and matched is not None, "--backend both --speed-matched stores both"
    return twin.run_id, matched.run_id


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
    parser.add_argument("--decoder", choices=sorted(SCENARIO), default="speculative")
    parser.add_argument("--held-out-seed", type=int, default=11)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "bf16"],
        default=None,
        help="default fp32 on the CPU, bf16 on CUDA",
    )
    args = parser.parse_args()
    dtype = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    zoo_dir = args.zoo_dir.expanduser()
    drafts = args.decoder == "speculative"
    target = profiles(args.db, args.zoo, zoo_dir, args.device, dtype, draft_too=drafts)
    pair = [f"model.zoo={args.zoo}", f"model.name=zoo-{args.zoo}"]
    pair += [f"decoder.draft.zoo={args.zoo}"] if drafts else []
    pair += on_device(args.device, dtype)
    base = ["run", str(SCENARIO[args.decoder]), "--db", str(args.db), "--no-progress"]
    sets = [f"--set={s}" for s in pair + CALIBRATION]
    prefix = args.zoo if drafts else f"{args.zoo}-lookahead"
    cli([*base, "--label", f"{prefix}-acceptance", *sets])
    accepted = labelled(args.db, f"{prefix}-acceptance", "real")
    for rate in args.rates:
        label = f"{prefix}-held-out-{rate:g}"
        arrival = f"workload.arrival={{kind: poisson, rate_per_s: {rate}}}"
        held = [*pair, *HELD_OUT, f"seed={args.held_out_seed}", arrival]
        held.append(f"decoder.calibrate_from={accepted}")
        sets = [f"--set={s}" for s in held]
        both = ["--backend", "both", "--speed-matched", "--profile", target, "--label", label]
        cli([*base, *both, *sets])
        real = labelled(args.db, label, "real")
        twin, matched = twins_of(args.db, real)
        print(f"\n{args.zoo}, held-out workload at {rate:g} req/s: real {real}, twins")
        if not drafts:
            show(args.db, real, {"twin": twin, "at the run's speed": matched})
            continue
        twins = {"draft profile": twin, "at the run's speed": matched}
        show(args.db, real, twins | {"draft roofline": roofline_twin(args.db, twin)})


if __name__ == "__main__":
    main()
