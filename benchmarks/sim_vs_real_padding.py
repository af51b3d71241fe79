"""Sim vs real with and without pricing padded decode attention, on one stored real run.

The real backend's CPU attention pads every decoding sequence to the batch's longest context.
This re-simulates the twin of a stored real run (`workbench run FILE --backend both`) twice:
priced by its calibration profile as recorded (decode keys = batch × the longest context
where the profile's kernels pad), and by a copy of that profile marked `exact` (keys = the
context sum, the model before schema 9). It prints both error tables against the real run.

    python benchmarks/sim_vs_real_padding.py --db fidelity.duckdb [--real RUN_ID]
"""

from __future__ import annotations

import argparse
import dataclasses
import uuid

from reports.sim_vs_real import pair_error_text
from workbench.runner import run_scenario
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig
from workbench.store.db import ResultsStore
from workbench.store.profiles import Profile


def latest_real_run(store: ResultsStore) -> str:
    runs = [r for r in store.list_runs() if r["backend"] == "real"]
    if not runs:
        raise SystemExit(f"{store.path}: no real run to compare with")
    return str(runs[-1]["run_id"])


def exact_copy(store: ResultsStore, profile: Profile) -> Profile:
    """The profile's points under a profile that says its decode attention does not pad."""
    name = f"{profile.name}-as-exact"
    known = [p for p in store.profiles() if p.name == name and p.complete]
    if known:
        return known[-1]
    copy = dataclasses.replace(
        profile,
        name=name,
        profile_id=uuid.uuid4().hex[:12],
        completed_at=None,
        info=profile.info | {"decode_attention": "exact"},
    )
    store.add_profile(copy)
    store.write_probe(copy.profile_id, store.profile_points(profile.profile_id), last=True)
    return copy


def simulate_twin(store: ResultsStore, real: Scenario, profile: Profile, label: str) -> str:
    cost = real.cost_model
    assert isinstance(cost, CalibratedCostConfig), "a --backend both run carries its profile"
    twin = real.model_copy(
        update={
            "backend": "sim",
            "cost_model": cost.model_copy(update={"profile": profile.profile_id}),
        }
    )
    (outcome,) = run_scenario(twin, store, source="benchmarks/sim_vs_real_padding.py", label=label)
    return outcome.run_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--real", help="the real run (default: the latest)")
    args = parser.parse_args()
    with ResultsStore.open(args.db) as store:
        real_id = store.resolve_run_id(args.real) if args.real else latest_real_run(store)
        real = Scenario.model_validate_json(store.get_run(real_id)["config_json"])
        cost = real.cost_model
        assert isinstance(cost, CalibratedCostConfig)
        profile = store.find_profile(str(cost.profile))
        for label, priced_by in (("padded", profile), ("context sum", exact_copy(store, profile))):
            sim_id = simulate_twin(store, real, priced_by, f"decode keys: {label}")
            print(f"\n# decode keys priced by {label} ({priced_by.describe()})")
            print(pair_error_text(store, real_id, sim_id))


if __name__ == "__main__":
    main()
