"""`workbench plan FILE.yaml`: run a scenario's plan and print the answer."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from workbench.errors import WorkbenchError


def add_plan_parser(sub: Any) -> None:
    plan = sub.add_parser(
        "plan",
        help="capacity planning: max rate, cheapest deployment or what-if (the `plan` section)",
    )
    plan.add_argument("file", help="scenario YAML with a `plan:` section")
    plan.add_argument(
        "--set", action="append", default=[], metavar="PATH=VALUE", help="override a field"
    )
    plan.add_argument(
        "--db", default="workbench.duckdb", help="results database (probes land here)"
    )
    plan.add_argument("--json", action="store_true", help="print the answer as one JSON object")
    plan.add_argument(
        "--executor",
        choices=["auto", "ray", "local", "inline"],
        default="auto",
        help="auto: Ray if installed (local cluster), else a process pool",
    )
    plan.add_argument("--workers", type=_positive_int, help="local pool size (default: all cores)")
    plan.add_argument("--ray-address", help="an existing Ray cluster (ray.init(address=...))")
    plan.add_argument("--no-early-stop", action="store_true", help="run every probe to its end")
    plan.set_defaults(func=_cmd_plan)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return value


def _cmd_plan(args: argparse.Namespace) -> int:
    from workbench.planning.answer import answer_json, answer_text, what_if_rows, what_if_text
    from workbench.planning.executor import build_executor
    from workbench.planning.planner import Planner
    from workbench.scenario.loader import load_scenario
    from workbench.store.db import ResultsStore

    scenario = load_scenario(args.file, list(args.set))
    if scenario.plan is None:
        raise WorkbenchError("no `plan:` section to run", source=args.file, field="plan")
    if scenario.sweep is not None:
        raise WorkbenchError(
            "a plan searches its own space: drop the sweep", source=args.file, field="sweep"
        )
    executor = build_executor(args.executor, args.workers, args.ray_address)
    try:
        with ResultsStore.writing(args.db) as store:
            planner = Planner(
                scenario,
                args.file,
                store,
                executor,
                early_stop=not args.no_early_stop,
                progress=None if args.json else _status_line,
            )
            run = planner.run()
            summaries = [
                planner.summary_of(c.outcomes[0]) if c.outcomes else {} for c in run.configurations
            ]
    finally:
        executor.close()
    if not args.json:
        print(file=sys.stderr)
    plan = scenario.plan
    requests = plan.requests_per_probe or scenario.workload.num_requests
    if plan.objective.kind == "what_if":
        rows = what_if_rows(run, summaries)
        print(
            json.dumps({"plan_id": run.plan_id, "rows": rows}) if args.json else what_if_text(rows)
        )
        return 0
    if args.json:
        print(json.dumps(answer_json(run, plan, requests)))
    else:
        print(answer_text(run, plan, requests))
    return 0


def _status_line(text: str) -> None:
    print(f"\r{text}", end="", file=sys.stderr, flush=True)
