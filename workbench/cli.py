"""The `workbench` command: run, validate, show, runs, report, export."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from workbench.errors import WorkbenchError

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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = _scenario_command(sub, "run", "run a scenario (every point of its sweep)", _cmd_run)
    run.add_argument("--backend", choices=["sim", "real"], help="override the scenario's backend")
    run.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    run.add_argument("--json", action="store_true", help="print the summary as JSON only")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    _scenario_command(sub, "validate", "check a scenario file", _cmd_validate)
    _scenario_command(sub, "show", "print the effective scenario, defaults filled in", _cmd_show)
    runs = sub.add_parser("runs", help="list the runs in a database")
    runs.add_argument("--db", default=DEFAULT_DB)
    runs.add_argument("--json", action="store_true")
    runs.set_defaults(func=_cmd_runs)
    report = sub.add_parser("report", help="HTML + Markdown report from the database")
    report.add_argument("runs", nargs="*", help="run ids or unique prefixes (default: all)")
    report.add_argument("--db", default=DEFAULT_DB)
    report.add_argument("--out", default="report", help="output folder")
    report.set_defaults(func=_cmd_report)
    export = sub.add_parser("export", help="write a table to Parquet")
    export.add_argument("table", choices=["runs", "requests", "steps", "emissions"])
    export.add_argument("--db", default=DEFAULT_DB)
    export.add_argument("--out", required=True, help="Parquet file to write")
    export.add_argument("--run", help="only this run (id or unique prefix)")
    export.set_defaults(func=_cmd_export)
    from real_backend.zoo.cli import add_zoo_parser  # no torch until a build runs

    add_zoo_parser(sub)
    from real_backend.length_predictor.cli import add_predictor_parser  # no torch until it runs

    add_predictor_parser(sub)
    return parser


def _scenario_command(
    sub: Any, name: str, help_text: str, func: Callable[[argparse.Namespace], int | None]
) -> argparse.ArgumentParser:
    cmd = sub.add_parser(name, help=help_text)
    cmd.add_argument("file", help="scenario YAML")
    cmd.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE", help="override a field"
    )
    cmd.set_defaults(func=func)
    return cmd


def _load(args: argparse.Namespace):
    from workbench.scenario.loader import load_scenario

    overrides = list(args.set)
    if getattr(args, "backend", None):
        overrides.append(f"backend={args.backend}")
    return load_scenario(args.file, overrides)


# ---------------------------------------------------------------------- commands


def _cmd_validate(args: argparse.Namespace) -> int:
    scenario = _load(args)
    points = _points(scenario, args.file)
    print(f"{args.file}: ok ({scenario.name}, {len(points)} run{'s' * (len(points) != 1)})")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    scenario = _load(args)
    print(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False), end="")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from workbench.runner import run_scenario
    from workbench.store.db import ResultsStore

    scenario = _load(args)
    _points(scenario, args.file)  # every sweep point validates before anything runs
    progress = None if (args.json or args.no_progress) else _progress_bar
    with ResultsStore.open(args.db) as store:
        outcomes = run_scenario(scenario, store, source=args.file, progress=progress)
    for outcome in outcomes:
        if args.json:
            if outcome.summary is not None:
                print(json.dumps({"run_id": outcome.run_id, **outcome.summary}))
        else:
            _print_outcome(outcome, args.db)
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        runs = store.list_runs()
    if args.json:
        print(json.dumps(runs, default=str))
        return 0
    print(f"{'run_id':<14}{'scenario':<32}{'backend':<9}{'scheduler':<12}{'finished':<21}point")
    for r in runs:
        finished = _timestamp(r["finished_at"])
        print(
            f"{r['run_id']:<14}{r['scenario_name'][:31]:<32}{r['backend']:<9}"
            f"{r['scheduler']:<12}{finished:<21}{r.get('sweep_point') or ''}"
        )
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from reports.build import build_report
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        run_ids = [store.get_run(r)["run_id"] for r in args.runs] or None
        path = build_report(store, run_ids, Path(args.out))
    print(f"report: {path}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from workbench.store.db import ResultsStore

    with ResultsStore.open(args.db, read_only=True) as store:
        run_id = store.get_run(args.run)["run_id"] if args.run else None
        store.export_parquet(args.table, Path(args.out), run_id=run_id)
    print(f"{args.table} → {args.out}")
    return 0


# ---------------------------------------------------------------------- helpers


def _timestamp(value: Any) -> str:
    """UTC 'YYYY-MM-DD HH:MM:SS' from unix seconds or a datetime."""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, tz=UTC)
    return str(value)[:19]


def _points(scenario: Any, source: str) -> list[Any]:
    from workbench.sweep import expand

    return expand(scenario, source=source)


def _progress_bar(total: int, label: str) -> Callable[[int], None] | None:
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    bar = tqdm(total=total, desc=label, unit="req", leave=False, mininterval=0.5)
    return bar.update


def _print_outcome(outcome: Any, db: str) -> None:
    from workbench.summary import format_summary

    point = f" {outcome.point.label()}" if outcome.point.values else ""
    if outcome.summary is None:
        print(f"skipped{point}: already complete in {db}")
        return
    print(format_summary(outcome.run_id, outcome.point.scenario, outcome.summary, db) + point)


if __name__ == "__main__":
    sys.exit(main())
