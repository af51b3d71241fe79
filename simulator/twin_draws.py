"""A simulated run drawn again: its latencies over other draw seeds, the same requests.

A multi-token decoder's twin draws its accepted tokens (and request types, candidates); one
run is one draw. Simulated again with other `simulator.draw_seed`s over the same request
stream, the spread of its latency quantiles is the part of a sim-vs-real error that is the
twin's own sampling (`workbench run --backend both --twin-draws N`,
`benchmarks/twin_spread.py`). A twin without random draws (vanilla decoding) spreads by 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from simulator.run import simulate
from workbench.metrics import request_metrics
from workbench.records import RunRecords
from workbench.scenario.scenario import Scenario

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore

METRICS = (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("E2E", "e2e_s"))
QUANTILES = (50, 90, 99)


def latency_quantiles(records: RunRecords) -> dict[str, float]:
    """The finished requests' TTFT, TPOT and E2E at each of `QUANTILES`, e.g. "TPOT p50"."""
    columns = request_metrics(records)
    out = {}
    for name, column in METRICS:
        values = columns[column][~np.isnan(columns[column])]
        for q in QUANTILES:
            out[f"{name} p{q}"] = float(np.percentile(values, q)) if len(values) else np.nan
    return out


def redrawn(
    scenario: Scenario, store: ResultsStore | None, seeds: Sequence[int]
) -> dict[str, np.ndarray]:
    """(len(seeds),) each latency quantile of the scenario simulated with each draw seed."""
    draws = []
    for seed in seeds:
        drawn = scenario.simulator.model_copy(update={"draw_seed": seed})
        records = simulate(scenario.model_copy(update={"simulator": drawn}), store=store)
        draws.append(latency_quantiles(records))
    return {name: np.array([d[name] for d in draws]) for name in draws[0]}


def spread_text(values: dict[str, np.ndarray]) -> str:
    """Each quantile's standard deviation over the draws, relative to its mean."""
    draws = len(next(iter(values.values())))
    cells = [
        f"{name} ±{100 * v.std() / v.mean():.1f} %" for name, v in values.items() if v.mean() > 0
    ]
    return f"{draws} draws: " + ", ".join(cells)
