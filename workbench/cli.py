"""The `workbench` command: run scenarios on the simulator or the real engine, store, show,
report and export their results, build the model zoo, fit cost models, calibrate the real
engine and plan capacity."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from workbench.errors import WorkbenchError, check_output_file, needs_real_extra

if TYPE_CHECKING:
    from simulator.cost_models.calibrated import CalibratedCostModel
    from workbench.store.db import ResultsStore
    from workbench.store.profiles import ProfilePoint

DEFAULT_DB = "workbench.duckdb"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: runs not finished were not written", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader left (`workbench runs | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file or folder a command could not read or write (after
        # BrokenPipeError, one of its kind)
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2


class _OneLineParser(argparse.ArgumentParser):
    """An argument error is one line naming the command, as every other bad input is (its
    subcommands' parsers are of this class too: argparse makes them of the parent's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(prog="workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = _scenario_command(sub, "run", "run a scenario (every point of its sweep)", _cmd_run)
    run.add_argument(
        "--backend",
        choices=["sim", "real", "both"],
        help="override the scenario's backend; both: the real backend, then its simulated twin "
        "with a calibrated cost model, side by side",
    )
    run.add_argument(
        "--profile",
        help="--backend both: the calibration profile pricing the twin (name or id; default "
        "the latest of the scenario's model, device and dtype)",
    )
    run.add_argument(
        "--speed-matched",
        action="store_true",
        help="--backend both: also simulate each point at the real run's measured speed (every "
        "price times the run's wall times over their prices), to tell the machine's drift "
        "from the model's error",
    )
    run.add_argument(
        "--twin-draws",
        type=int,
        default=1,
        metavar="N",
        help="--backend both: also simulate each twin with N draw seeds (simulator.draw_seed) "
        "and print the spread of its latencies: the part of its error that is its own sampling",
    )
    run.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    run.add_argument(
        "--json",
        action="store_true",
        help="print the summary as JSON only (with --backend both, each pair's error table too)",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--label", help="a name stored with the run(s), to tell apart runs of one configuration"
    )
    _percentiles_option(run)
    validate = _scenario_command(
        sub, "validate", "check a scenario as `run` would, running nothing", _cmd_validate
    )
    validate.add_argument("--db", help="the results database a `calibrate_from` run is in")
    show = _scenario_command(
        sub, "show", "print the effective scenario, defaults filled in", _cmd_show
    )
    show.add_argument(
        "--explain", action="store_true", help="print each field's description beside its value"
    )
    runs = sub.add_parser("runs", help="list the runs in a database")
    runs.add_argument("--db", default=DEFAULT_DB)
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=_cmd_runs)
    summary = sub.add_parser("summary", help="print stored runs' summaries again")
    summary.add_argument("runs", nargs="+", help="run ids or unique prefixes")
    summary.add_argument("--db", default=DEFAULT_DB)
    summary.add_argument("--json", action="store_true", help="one JSON object per run")
    _percentiles_option(summary)
    summary.set_defaults(func=_cmd_summary)
    report = sub.add_parser("report", help="HTML + Markdown report from the database")
    report.add_argument("runs", nargs="*", help="run ids or unique prefixes (default: all)")
    report.add_argument("--db", default=DEFAULT_DB)
    report.add_argument("--out", default="report", help="output folder")
    report.add_argument(
        "--baseline", help="the run the others are compared with (default: the first)"
    )
    report.set_defaults(func=_cmd_report)
    export = sub.add_parser("export", help="write a table to Parquet")
    export.add_argument(
        "table",
        choices=[
            "runs",
            "requests",
            "steps",
            "emissions",
            "outputs",
            "branches",
            "run_summaries",
            "run_summary",
        ],
    )
    export.add_argument("--db", default=DEFAULT_DB)
    export.add_argument("--out", required=True, help="Parquet file to write")
    export.add_argument("--run", help="only this run (id or unique prefix)")
    export.set_defaults(func=_cmd_export)
    from real_backend.zoo.cli import add_zoo_parser  # no torch until a build runs

    add_zoo_parser(sub)
    from real_backend.length_predictor.cli import add_predictor_parser  # no torch until it runs

    add_predictor_parser(sub)
    from simulator.cost_models.fit_cli import add_fit_parser  # numpy only, no simulation

    add_fit_parser(sub)
    from workbench.planning.cli import add_plan_parser  # the simulator loads when a plan runs

    add_plan_parser(sub)
    _calibrate_parser(sub)
    return parser


def _calibrate_parser(sub: Any) -> None:
    cmd = sub.add_parser(
        "calibrate",
        help="measure the real engine's step costs into a profile (cost_model: calibrated)",
    )
    cmd.add_argument("--model", required=True, help="a zoo model name or a checkpoint folder")
    cmd.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    cmd.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    cmd.add_argument(
        "--kernels", choices=["auto", "triton", "grouped", "reference"], default="auto",
        help="the engine's kernels, as model.kernels (default auto: the runs' default)",
    )  # fmt: skip
    cmd.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    cmd.add_argument("--name", help="the profile's name (default MODEL-DEVICE-DTYPE)")
    cmd.add_argument(
        "--grid", default="standard", help="designed grid: standard (default) or test (tiny)"
    )
    cmd.add_argument("--zoo-dir", help="zoo cache folder (default ~/.cache/decoding-workbench/zoo)")
    cmd.add_argument(
        "--again", action="store_true", help="measure anew even if the profile is complete"
    )
    cmd.add_argument("--csv", help="also export the profile's points to this CSV file")
    cmd.add_argument("--no-progress", action="store_true", help="no progress bar")
    cmd.set_defaults(func=_cmd_calibrate)


def _scenario_command(
    sub: Any, name: str, help_text: str, func: Callable[[argparse.Namespace], int | None]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_text)
    cmd.add_argument("file", help="scenario YAML")
    cmd.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field by its dotted path, the value read as YAML; repeatable "
        "(e.g. --set workload.arrival.rate_per_s=8 --set 'decoder={kind: vanilla}')",
    )
    cmd.set_defaults(func=func)
    return cmd


def _percentiles_option(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--percentiles",
        type=_percentile_list,
        default=None,
        metavar="Q,Q...",
        help="latency percentiles to print besides the median (default 90,99), e.g. 50,90,95,99",
    )


def _percentile_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 50,90,99, got {text!r}") from None
    if not values or any(not 0 <= q <= 100 for q in values):  # p0, p100: least, most
        raise argparse.ArgumentTypeError(f"expected percentiles from 0 to 100, got {text!r}")
    return values


def _load(args: argparse.Namespace):
    from workbench.scenario.loader import load_scenario

    overrides = list(args.set)
    if getattr(args, "backend", None) in ("sim", "real"):
        overrides.append(f"backend={args.backend}")
    return load_scenario(args.file, overrides)


# ---------------------------------------------------------------------- commands


def _cmd_validate(args: argparse.Namespace) -> int:
    from workbench.runner import preflight
    from workbench.store.db import ResultsStore

    scenario = _load(args)
    points = _points(scenario, args.file)
    if args.db is None:
        preflight(points, source=args.file, store=None)
    else:
        with ResultsStore.open(args.db, read_only=True) as store:
            preflight(points, source=args.file, store=store)
    print(f"{args.file}: ok ({scenario.name}, {len(points)} run{'s' * (len(points) != 1)})")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    scenario = _load(args)
    if args.explain:
        from workbench.explain import explain

        print("\n".join(explain(scenario)))
        return 0
    print(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.metrics import DEFAULT_PERCENTILES
    from workbench.runner import run_scenario
    from workbench.store.db import ResultsStore

    scenario = _load(args)
    _points(scenario, args.file)  # every sweep point validates before anything runs
    progress = None if (args.json or args.no_progress) else _progress_bar
    percentiles = args.percentiles or DEFAULT_PERCENTILES

    def show(outcome: Any) -> None:  # as each point finishes
        if outcome.earlier_runs:
            _note_rerun(outcome, args.db)
        if args.json:
            print(json.dumps(_outcome_json(outcome)), flush=True)
        else:
            _print_outcome(outcome, args.db, percentiles)

    if args.profile and args.backend != "both":
        raise WorkbenchError("--profile prices the twin of --backend both", field="--profile")
    if args.speed_matched and args.backend != "both":
        raise WorkbenchError(
            "--speed-matched scales the twin of --backend both", field="--speed-matched"
        )
    if args.twin_draws != 1 and args.backend != "both":
        raise WorkbenchError("--twin-draws draws the twin of --backend both", field="--twin-draws")
    if args.twin_draws < 1:
        raise WorkbenchError(f"expected 1 or more, got {args.twin_draws}", field="--twin-draws")
    with ResultsStore.writing(args.db) as store:
        if args.backend == "both":
            _run_twins(args, scenario, store, progress, show, percentiles)
            return 0
        run_scenario(
            scenario, store, source=args.file, progress=progress, on_outcome=show,
            label=args.label, percentiles=percentiles,
        )  # fmt: skip
    return 0


def _run_twins(
    args: argparse.Namespace,
    scenario: Any,
    store: Any,
    progress: Any,
    show: Callable[[Any], None],
    percentiles: tuple[float, ...],
) -> None:
    """Both backends per point; after each pair, its sim-vs-real error table."""
    from workbench.runner import run_twins

    def show_pair(pair: Any) -> None:
        from reports.sim_vs_real import pair_error_json, pair_error_text, speed_matched_text

        show(pair.real)
        show(pair.sim)
        if pair.speed_matched is not None:
            show(pair.speed_matched)
        matched = pair.speed_matched.run_id if pair.speed_matched else None
        if args.json:
            line = pair_error_json(store, pair.real.run_id, pair.sim.run_id, matched)
            print(json.dumps(line), flush=True)
            return
        print(pair_error_text(store, pair.real.run_id, pair.sim.run_id), flush=True)
        if args.speed_matched:
            print(speed_matched_text(store, pair.real.run_id, matched), flush=True)

    run_twins(
        scenario, store, source=args.file, profile=args.profile, progress=progress,
        on_outcome=show_pair, label=args.label, percentiles=percentiles,
        speed_matched=args.speed_matched, twin_draws=args.twin_draws,
    )  # fmt: skip


def _cmd_summary(args: argparse.Namespace) -> int:
    from workbench.metrics import DEFAULT_PERCENTILES
    from workbench.store.db import ResultsStore, run_wall_s
    from workbench.summary import RunHeader, format_summary

    percentiles = args.percentiles or DEFAULT_PERCENTILES
    with ResultsStore.open(args.db, read_only=True) as store:
        for run_id in args.runs:
            run = store.get_run(run_id)
            summary = store.run_summary(run["run_id"], percentiles)
            if args.json:
                print(json.dumps({"run_id": run["run_id"], **_run_extras(run), **summary}))
                continue
            wall_s = run_wall_s(run)
            point = f"point {run['sweep_point']}" if run.get("sweep_point") else ""
            header = RunHeader.from_run(run)
            print(
                format_summary(
                    header, summary, args.db, wall_s=wall_s, percentiles=percentiles, point=point
                )
            )
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        runs = store.list_runs()
    if args.json:
        print(json.dumps(runs, default=str))
        return 0
    print(
        f"{'run_id':<14}{'scenario':<32}{'backend':<9}{'scheduler':<12}{'decoder':<13}"
        f"{'finished':<21}{'label':<16}point"
    )
    for r in runs:
        finished = _timestamp(r["finished_at"])
        print(
            f"{r['run_id']:<14}{r['scenario_name'][:31]:<32}{r['backend']:<9}"
            f"{r['scheduler'][:11]:<12}{r['decoder'][:12]:<13}{finished:<21}"
            f"{(r.get('label') or '')[:15]:<16}{r.get('sweep_point') or ''}"
        )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from reports.build import build_report
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        run_ids = [store.get_run(r)["run_id"] for r in args.runs] or None
        baseline = store.get_run(args.baseline)["run_id"] if args.baseline else None
        path = build_report(store, run_ids, Path(args.out), baseline=baseline)
    print(f"report: {path}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        run_id = store.get_run(args.run)["run_id"] if args.run is not None else None
        store.export_parquet(args.table, Path(args.out), run_id=run_id)
    print(f"{args.table} → {args.out}")
    return 0


def _check_profile_name(name: str, store: ResultsStore) -> None:
    """A profile name scenarios can name it by: one line, no spaces around it, and not the
    one prefix of another profile's id (`cost_model.profile` takes a name first: it would
    hide that id)."""
    if not name.strip() or not name.isprintable() or name != name.strip():
        expected = "a name on one line, without spaces around it"
        raise WorkbenchError(f"expected {expected}, got {name!r}", field="--name")
    profiles = store.profiles()
    named = any(p.name == name for p in profiles)
    shadowed = [p.profile_id for p in profiles if p.profile_id.startswith(name)]
    if len(shadowed) == 1 and not named:
        raise WorkbenchError(
            f"{name!r} begins profile {shadowed[0]}'s id: a profile of that name would hide it",
            field="--name",
        )


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from workbench.store.db import ResultsStore

    with needs_real_extra("calibration runs the real backend"):
        from real_backend.calibration.measure import calibrate, resolve_target
    from simulator.cost_models.calibrated import CalibratedCostModel, fit_errors, fit_profile
    from workbench.explain import yaml_flow

    if args.csv:
        check_output_file(Path(args.csv), field="--csv")  # before minutes of measuring
    with ResultsStore.writing(args.db) as store:
        if args.name is not None:
            _check_profile_name(args.name, store)
        target = resolve_target(args.model, args.device, args.dtype, args.zoo_dir, args.kernels)
        bar = None if args.no_progress else _CalibrationBar()
        try:
            outcome = calibrate(
                target, store, name=args.name, grid_name=args.grid, again=args.again,
                progress=bar,
            )  # fmt: skip
        finally:
            if bar is not None:
                bar.close()
        profile = outcome.profile
        points = store.profile_points(profile.profile_id)
        if outcome.already_complete:
            print(f"{profile.describe()} is complete already (give --again to measure anew)")
            if outcome.not_in_profile:
                missing = len(outcome.not_in_profile)
                print(
                    f"  measured with an older grid: it lacks {missing} probe run(s) of today's "
                    f"{args.grid} grid (--again measures the current grid)"
                )
        else:
            resumed = f", {len(outcome.skipped)} stored before" if outcome.skipped else ""
            print(f"{profile.describe()}: measured {len(outcome.measured)} probes{resumed}")
        model = CalibratedCostModel(fit_profile(points, profile), profile)
        print(f"{len(points)} steps in {store.path}; fit (|predicted / measured − 1|):")
        for kind, (n, median, p90, total) in fit_errors(model, points).items():
            print(
                f"  {kind:<8} {n:>6} steps  median {100 * median:5.1f}%  p90 {100 * p90:5.1f}%"
                f"  sum {100 * (total - 1):+5.1f}%"
            )
        _print_fit_terms(model)
        _print_repeatability(points)
        name = yaml_flow(profile.name)  # quoted where YAML would read another type
        print(
            f"use it with: cost_model: {{kind: calibrated, profile: {name}}} (for a "
            f"speculative draft's model: draft_profile: {name})"
        )
        if args.csv:
            print(f"csv: {store.export_profile_csv(profile.profile_id, Path(args.csv))}")
    return 0


def _print_fit_terms(model: CalibratedCostModel) -> None:
    """What the fit left out, and the prices of the engine's history and of uneven contexts
    where it found them."""
    fit = model.fit
    if fit.points_dropped:
        print(f"  left out of the fit: {fit.points_dropped} steps (stalls, and probe passes "
              "run in a slow spell of the machine)")  # fmt: skip
    for curve in ("decode", "verify"):
        if f"spread_{curve}" in fit.curves:
            knots = fit.curves[f"spread_{curve}"].knots
            prices = ", ".join(f"{k:g} +{1e3 * fit.spread_s(curve, int(k)):.2f} ms" for k in knots)
            print(f"  uneven {curve} contexts, by batch (a step's price per unit of 1 − mean / "
                  f"longest context): {prices}")  # fmt: skip
    if fit.one_call_padding:
        print(f"  a step padding under {fit.one_call_padding:g} query-keys (T) in all runs in "
              "one call: its padding Q priced as keys; a step padding more is cut into groups: "
              f"T as keys, then {1e6 * fit.pad_price:.3f} µs a query-key "
              "of 2·sqrt(Q·T) − 2T")  # fmt: skip
    elif fit.pad_price:
        print(f"  padding to a group's longest context: {1e6 * fit.pad_price:.3f} µs a padded "
              "key for each query of a row")  # fmt: skip
    for k in range(1, fit.after_prefill_steps + 1):
        knots = fit.curves[f"after_{k}"].knots
        prices = ", ".join(f"{t:g} +{1e3 * fit.after_prefill_s(int(t), k):.2f} ms" for t in knots)
        print(f"  decode step {k} after a prefill, by prompt tokens computed and read: {prices}")
    if "wake" in fit.curves:
        knots = fit.curves["wake"].knots
        wakes = ", ".join(f"{k:.3g} ms +{1e3 * model.wake_s(k / 1e3):.2f} ms" for k in knots)
        print(f"  waking an idle engine: {wakes}")
    if "f_fork" in fit.terms:
        print(f"  APAR forks beyond their rows: +{1e3 * fit.terms['f_step']:.2f} ms a step "
              f"with forks, +{1e3 * fit.terms['f_fork']:.2f} ms each fork, "
              f"+{1e6 * fit.terms['f_key']:.3f} µs each decode key")  # fmt: skip


def _print_repeatability(points: list[ProfilePoint]) -> None:
    """The machine against itself: the noise in any one real run a twin is checked against."""
    from workbench.store.repeatability import pass_spread

    spread = pass_spread(points)
    if spread is not None:
        print(f"  the machine repeating itself: {spread.describe()}; any one real run a "
              "twin is checked against carries noise of this kind")  # fmt: skip


class _CalibrationBar:
    """A tqdm bar over the grid's probes on a terminal; nothing otherwise."""

    def __init__(self) -> None:
        self._bar: Any = None

    def __call__(self, done: int, total: int, probe: str) -> None:
        if not sys.stderr.isatty():
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=done, unit="probe", leave=False)
        self._bar.n = done
        self._bar.set_description(probe or "done")
        self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# ---------------------------------------------------------------------- helpers


def _timestamp(value: Any) -> str:
    """UTC 'YYYY-MM-DD HH:MM:SS' from unix seconds or a datetime."""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, tz=UTC)
    return str(value)[:19]


def _points(scenario: Any, source: str) -> list[Any]:
    from workbench.sweep import expand

    return expand(scenario, source=source)


def _progress_bar(total: int, label: str) -> Any:
    """A tqdm bar on a terminal (closed when its run ends), else nothing."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit="req", leave=False, mininterval=0.5)


def _print_outcome(outcome: Any, db: str, percentiles: tuple[float, ...]) -> None:
    from workbench.summary import RunHeader, format_summary

    values = f" {outcome.point.label()}" if outcome.point.values else ""
    position = f"point {outcome.index}/{outcome.total}" if outcome.total > 1 else ""
    if outcome.skipped:
        print(
            f"skipped{values} ({position}): already complete in {db} as run {outcome.run_id}",
            flush=True,
        )
        return
    header = RunHeader.from_scenario(outcome.run_id, outcome.point.scenario, outcome.label)
    text = format_summary(
        header,
        outcome.summary,
        db,
        wall_s=outcome.wall_s,
        percentiles=percentiles,
        point=(position + values).strip(),
    )
    print(text, flush=True)


def _outcome_json(outcome: Any) -> dict[str, Any]:
    """A run's JSON line: its id, the sweep point (position and values), then the summary."""
    line: dict[str, Any] = {"run_id": outcome.run_id}
    if outcome.point.values:
        line |= {"point": outcome.index, "points": outcome.total}
        line["sweep_point"] = outcome.point.values
    if outcome.skipped:
        line["skipped"] = True
    if outcome.label:
        line["label"] = outcome.label
    return line | outcome.summary


def _run_extras(run: dict[str, Any]) -> dict[str, Any]:
    """The stored run's sweep point and label, for its JSON line."""
    extras: dict[str, Any] = {}
    if run.get("sweep_point"):
        extras["sweep_point"] = json.loads(run["sweep_point"])
    if run.get("label"):
        extras["label"] = run["label"]
    return extras


def _note_rerun(outcome: Any, db: str) -> None:
    """Say that this configuration was already in the database (the new run is kept too)."""
    earlier = outcome.earlier_runs
    more = f" and {len(earlier) - 1} more" if len(earlier) > 1 else ""
    told_apart = (
        f"labelled {outcome.label!r}"
        if outcome.label
        else "with the same configuration; give --label to tell them apart"
    )
    print(
        f"note: {db} already holds this configuration of {outcome.point.scenario.name} as run "
        f"{earlier[-1]}{more}; stored run {outcome.run_id} beside it, {told_apart}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    sys.exit(main())
