"""Sim vs real with and without each term of the calibrated model, on one stored real run.

Re-simulates the twin of a stored real run (`workbench run FILE --backend both`) priced by
its calibration profile as recorded, then by copies of that profile without one term each:
marked `exact` (decode keys = the context sum, not batch × the longest context that the
reference CPU attention pads to), without its steps' longest contexts (`no-spread`: no
spread term, the context sum alone), and without its steps after idle (no wake curve).
Prints each error table against the same real run.

    python benchmarks/sim_vs_real_terms.py --db fidelity.duckdb [--real RUN_ID]
"""

from __future__ import annotations

import argparse
import dataclasses

from reports.sim_vs_real import pair_error_text
from workbench.runner import run_scenario
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig
from workbench.store.db import ResultsStore
from workbench.store.ids import new_id
from workbench.store.profiles import Profile


def latest_real_run(store: ResultsStore) -> str:
    runs = [r for r in store.list_runs() if r["backend"] == "real"]
    if not runs:
        raise SystemExit(f"{store.path}: no real run to compare with")
    return str(runs[-1]["run_id"])


def variant(store: ResultsStore, profile: Profile, name: str) -> Profile:
    """The profile without one term: `exact` (no padding), `no-spread` (no longest contexts)
    or `no-wake` (no steps after idle)."""
    full = f"{profile.name}-{name}"
    known = [p for p in store.profiles() if p.name == full and p.complete]
    if known:
        return known[-1]
    info = profile.info | ({"decode_attention": "exact"} if name == "exact" else {})
    copy = dataclasses.replace(
        profile, name=full, profile_id=new_id(), completed_at=None, info=info
    )
    points = store.profile_points(profile.profile_id)
    if name == "no-wake":
        points = [p for p in points if p.idle_before_s == 0.0]
    if name == "no-spread":
        points = [dataclasses.replace(p, decode_context_max=0) for p in points]
    store.add_profile(copy)
    store.write_probe(copy.profile_id, points, last=True)
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
    (outcome,) = run_scenario(twin, store, source="benchmarks/sim_vs_real_terms.py", label=label)
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
        variants = [("as recorded", profile)]
        names = ("exact", "no-spread", "no-wake")
        variants += [(name, variant(store, profile, name)) for name in names]
        for label, priced_by in variants:
            sim_id = simulate_twin(store, real, priced_by, f"profile {label}")
            print(f"\n# {label}: {priced_by.describe()}")
            print(pair_error_text(store, real_id, sim_id))


if __name__ == "__main__":
    main()
