"""The `plan` section: SLOs, a search space and an objective for `workbench plan`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from workbench.scenario.base import StrictModel


class LatencyLimit(StrictModel):
    """One latency SLO: the given percentile of the metric must not exceed `max_ms`."""

    percentile: float = Field(
        default=99, gt=0, lt=100, description="Which percentile of the metric (99: p99)."
    )
    max_ms: float = Field(gt=0, description="The limit, in milliseconds.")


class PlanSLO(StrictModel):
    """What a configuration must meet at a rate. Percentiles are over completed requests
    (linear interpolation, as DuckDB's quantile_cont); ITL over every gap of every request."""

    ttft: LatencyLimit | None = Field(default=None, description="Time to first token.")
    tpot: LatencyLimit | None = Field(default=None, description="Time per output token.")
    itl: LatencyLimit | None = Field(default=None, description="Inter-token latency.")
    e2e: LatencyLimit | None = Field(default=None, description="End-to-end latency.")
    attainment: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Goodput attainment: this share of requests must meet every limit above "
        "(each at its max_ms, ITL by its mean per request), besides the percentiles.",
    )
    overload_ttft_s: float = Field(
        default=60.0,
        gt=0,
        description="Overload guard, always on: a configuration fails if more than 1 % of "
        "requests wait longer than this for their first token (a queue that grows without "
        "bound), whatever the SLOs say.",
    )

    @model_validator(mode="after")
    def _some_limit(self) -> PlanSLO:
        if not any((self.ttft, self.tpot, self.itl, self.e2e)):
            raise ValueError("give at least one of ttft, tpot, itl, e2e")
        return self

    def limits(self) -> dict[str, LatencyLimit]:
        named = {"ttft": self.ttft, "tpot": self.tpot, "itl": self.itl, "e2e": self.e2e}
        return {name: limit for name, limit in named.items() if limit is not None}


class MaxRateObjective(StrictModel):
    kind: Literal["max_rate"] = Field(
        description="For each configuration, the highest arrival rate meeting the SLOs."
    )
    start_rate_per_s: float | None = Field(
        default=None, gt=0, description="First rate probed (default: the scenario's)."
    )
    precision: float = Field(
        default=0.02,
        gt=0,
        lt=1,
        description="Bisection stops when the passing and failing rates are this close "
        "(relative): the answer is within this of the true threshold.",
    )
    min_rate_per_s: float = Field(
        default=0.01, gt=0, description="Below this a configuration is called infeasible."
    )


class CheapestObjective(StrictModel):
    kind: Literal["cheapest"] = Field(
        description="The configuration of lowest hourly cost meeting the SLOs at `rate_per_s`, "
        "its replica count found by search."
    )
    rate_per_s: float = Field(gt=0, description="The arrival rate to serve.")
    max_replicas: int = Field(default=256, gt=0, description="Search no further than this.")
    prices_usd_per_hour: dict[str, float] = Field(
        default_factory=dict,
        description="Override the hardware catalog's price of one GPU-hour, by GPU name.",
    )


class WhatIfObjective(StrictModel):
    kind: Literal["what_if"] = Field(
        description="A baseline and named variants at the same rates, side by side."
    )
    rates_per_s: list[float] = Field(min_length=1, description="Rates to run each variant at.")
    variants: dict[str, dict[str, Any]] = Field(
        min_length=1,
        description="Name → {dotted.path: value} overrides of the baseline (the scenario).",
    )


PlanObjective = Annotated[
    MaxRateObjective | CheapestObjective | WhatIfObjective, Field(discriminator="kind")
]


class PlanConfig(StrictModel):
    """`workbench plan`: searches over configurations on the simulator."""

    objective: PlanObjective = Field(description="What to find, selected by `kind`.")
    slo: PlanSLO | None = Field(
        default=None, description="What a configuration must meet (max_rate, cheapest)."
    )
    space: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="Dotted path → values (as sweeps take them); every combination is a "
        "configuration, e.g. {hardware.gpu: [a100-80gb, h100-sxm], hardware.tensor_parallel: "
        "[2, 4]}.",
    )
    requests_per_probe: int | None = Field(
        default=None,
        gt=0,
        description="Requests each probe simulation sends (default: workload.num_requests).",
    )
    spread_seeds: int = Field(
        default=3,
        ge=0,
        description="Extra seeds the answer is re-run with to state the spread of its deciding "
        "percentile (0: none).",
    )

    @model_validator(mode="after")
    def _slo_when_searching(self) -> PlanConfig:
        if self.objective.kind != "what_if" and self.slo is None:
            raise ValueError(f"objective {self.objective.kind} needs slo")
        if self.objective.kind == "what_if" and self.space:
            raise ValueError("what_if compares its variants: put them in objective.variants")
        for path, values in self.space.items():
            if not values:
                raise ValueError(f"space.{path}: expected a non-empty list of values")
        return self
