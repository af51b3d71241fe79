"""Which stored runs a report sets side by side, by their configurations.

- A multi-token decoder run's *vanilla baseline*: a vanilla run whose configuration equals
  the run's in every section but `name`, `decoder`, `slo`, `sweep` and `simulator` (so the
  same backend, seed, workload, model, hardware, scheduler and cost model); the latest one.
- A real run's *simulator twin*: a simulated run whose configuration equals the real run's
  but for `name`, `backend`, `slo`, `sweep`, `simulator`, `cost_model` and the decoder's
  simulator-only fields (`acceptance`, `tokens_per_step`, `calibrate_from`); the latest.
  A simulated run stored as a real run's twin (`workbench run --backend both`, its
  `info.twin_of`) is that run's twin whatever the rest.
  A real run's *speed-matched twin* (`--speed-matched`, its `info.speed_matched_twin_of`)
  is the same twin with every price scaled to the real run's measured speed; it is shown
  beside the pair, never taken as the twin.
  A twin is *calibrated* only when its cost model was fitted to the real run's own device
  (a cost model kind in CALIBRATED_COST_MODELS); roofline, fixed-step, Vidur-profile and
  catalog-fitted prices of a real run are not, and reports say so beside the pair.
"""

from __future__ import annotations

import json
from typing import Any

from reports.collect import RunData

BASELINE_IGNORED = ("name", "decoder", "slo", "sweep", "simulator")
TWIN_IGNORED = ("name", "backend", "slo", "sweep", "simulator", "cost_model")
SIMULATOR_ONLY_DECODER_FIELDS = ("acceptance", "tokens_per_step", "calibrate_from")
# Cost model kinds calibrated on the device of the real run they stand beside.
CALIBRATED_COST_MODELS = frozenset({"calibrated"})


def config_key(config: dict[str, Any], ignored: tuple[str, ...]) -> str:
    kept = {k: v for k, v in config.items() if k not in ignored}
    decoder = kept.get("decoder")
    if isinstance(decoder, dict):
        kept["decoder"] = _without_simulator_fields(decoder)
        if isinstance(decoder.get("speculative"), dict):  # APAR's speculation
            kept["decoder"]["speculative"] = _without_simulator_fields(decoder["speculative"])
    return json.dumps(kept, sort_keys=True, default=str)


def _without_simulator_fields(section: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k not in SIMULATOR_ONLY_DECODER_FIELDS}


def vanilla_baseline(run: RunData, runs: list[RunData]) -> RunData | None:
    return _latest_match(run, runs, BASELINE_IGNORED, "decoder", "vanilla")


def simulator_twin(real: RunData, runs: list[RunData]) -> RunData | None:
    """The run stored as its twin (`workbench run --backend both`), else the latest match."""
    paired = [run for run in runs if run.run.get("info", {}).get("twin_of") == real.run_id]
    if paired:
        return paired[-1]
    plain = [run for run in runs if "speed_matched_twin_of" not in run.run.get("info", {})]
    return _latest_match(real, plain, TWIN_IGNORED, "backend", "sim")


def speed_matched_twin(real: RunData, runs: list[RunData]) -> RunData | None:
    """The latest run stored as the real run's twin at its measured speed (`workbench run
    --backend both --speed-matched`, its `info.speed_matched_twin_of`)."""
    matched = [r for r in runs if r.run.get("info", {}).get("speed_matched_twin_of") == real.run_id]
    return matched[-1] if matched else None


def twin_is_calibrated(twin: RunData) -> bool:
    return twin.config.get("cost_model", {}).get("kind") in CALIBRATED_COST_MODELS


def twin_pairs(runs: list[RunData]) -> list[tuple[RunData, RunData]]:
    """(real run, its simulator twin) for each real run that has one."""
    pairs = []
    for real in runs:
        twin = simulator_twin(real, runs) if real.run["backend"] == "real" else None
        if twin is not None:
            pairs.append((real, twin))
    return pairs


def _latest_match(
    run: RunData, runs: list[RunData], ignored: tuple[str, ...], column: str, value: str
) -> RunData | None:
    """The latest of `runs` whose `runs` row has `column == value` and whose configuration
    equals `run`'s but for the `ignored` fields."""
    key = config_key(run.config, ignored)
    matches = [
        other
        for other in runs
        if other.run[column] == value and config_key(other.config, ignored) == key
    ]
    return matches[-1] if matches else None
