"""Each stored real pipeline run (PipeInfer, synchronous speculative, plain pipelining)
simulated from its own run log (`decoder.calibrate_from`), tokens/s side by side.

    workbench run scenarios/pipeinfer_real.yaml --db pipeinfer.duckdb
    python benchmarks/pipeinfer_twins.py --db pipeinfer.duckdb
"""

from __future__ import annotations

import argparse

from workbench.runner import run_scenario
from workbench.scenario.scenario import Scenario
from workbench.store.db import ResultsStore


def policy_name(scenario: Scenario) -> str:
    decoder = scenario.decoder
    if decoder.kind != "pipeinfer":
        return decoder.kind
    if not getattr(decoder, "asynchronous", True):
        return "synchronous speculative"
    return f"pipeinfer ({getattr(decoder, 'after_commit', 'restart')})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    args = parser.parse_args()
    with ResultsStore.open(args.db) as store:
        for run in [r for r in store.list_runs() if r["backend"] == "real"]:
            real = Scenario.model_validate_json(store.get_run(run["run_id"])["config_json"])
            if real.decoder.kind not in ("pipeline", "pipeinfer"):
                continue
            decoder = real.decoder.model_copy(update={"calibrate_from": run["run_id"]})
            twin = real.model_copy(update={"backend": "sim", "decoder": decoder})
            (outcome,) = run_scenario(twin, store, source="benchmarks/pipeinfer_twins.py")
            real_tps = store.run_summary(run["run_id"])["output_throughput"]
            sim_tps = outcome.summary["output_throughput"]
            assert isinstance(real_tps, float) and isinstance(sim_tps, float)
            error = 100 * (sim_tps / real_tps - 1)
            print(
                f"{policy_name(real):26s} real {run['run_id']} {real_tps:7.1f} tok/s   "
                f"sim {outcome.run_id} {sim_tps:7.1f} tok/s   {error:+6.1f} %"
            )


if __name__ == "__main__":
    main()
