"""Simulate a `pipeline` / `pipeinfer` scenario: requests served one at a time (batch 1, as
the real pipeline server does) through the priced or calibrated pipeline."""

from __future__ import annotations

import dataclasses

from simulator.decoders.acceptance import AcceptanceDistribution
from simulator.pipeinfer.build import pipeline_acceptance, pipeline_policy, pipeline_timing
from simulator.pipeinfer.calibration import calibrate_pipeline
from simulator.pipeinfer.engine import PipelineSimulation, Policy
from simulator.pipeinfer.timing import PipelineTiming
from workbench.errors import WorkbenchError
from workbench.records import RunRecords
from workbench.scenario.decoders import PipeInferDecoderConfig, PipelineDecoderConfig
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.seeding import component_rng
from workbench.store.db import ResultsStore
from workbench.workload.requests import Workload


@dataclasses.dataclass(frozen=True)
class PreparedPipeline:
    """What a pipeline simulation needs, every check passed."""

    timing: PipelineTiming
    policy: Policy
    acceptance: AcceptanceDistribution | None
    info: dict[str, str]


def prepare_pipeline(
    scenario: Scenario, workload: Workload, store: ResultsStore | None
) -> PreparedPipeline:
    """Resolve and check a pipeline scenario: every refusal its run would give, none of the
    work (`workbench validate` calls this alone for these decoders)."""
    decoder = scenario.decoder
    assert isinstance(decoder, PipelineDecoderConfig | PipeInferDecoderConfig)
    _check(scenario)
    _one_at_a_time(workload)
    timing, policy = pipeline_timing(scenario, decoder), pipeline_policy(decoder)
    acceptance = pipeline_acceptance(decoder)
    info = {"pipeline_parallel": str(scenario.hardware.pipeline_parallel)}
    if decoder.calibrate_from is not None:
        calibration = calibrate_pipeline(store, decoder.calibrate_from)
        timing = calibration.timing(timing)
        acceptance = calibration.acceptance or acceptance
        policy = dataclasses.replace(
            policy,
            draft_lengths=calibration.draft_lengths if len(calibration.draft_lengths) else None,
            draft_outcomes=calibration.draft_outcomes,
            empty_draft_share=calibration.empty_draft_share,
        )
        info["calibrated_from"] = calibration.run_id
    return PreparedPipeline(timing, policy, acceptance, info)


def simulate_pipeline(
    scenario: Scenario, workload: Workload, store: ResultsStore | None
) -> RunRecords:
    ready = prepare_pipeline(scenario, workload, store)
    rng = component_rng(scenario.draw_seed(), "decoder.pipeline")
    simulation = PipelineSimulation(ready.timing, ready.policy, ready.acceptance, rng)
    records = simulation.serve(workload)
    records.info.update(ready.info)
    return records


def _check(scenario: Scenario) -> None:
    sched = scenario.scheduler
    if not isinstance(sched, ContinuousBatchingConfig) or sched.max_batch_size != 1:
        raise WorkbenchError(
            f"decoder {scenario.decoder.kind!r} serves one request at a time: use scheduler "
            "kind continuous with max_batch_size: 1",
            field="scheduler.max_batch_size",
        )


def _one_at_a_time(workload: Workload) -> None:
    """Open-loop arrivals queue up; a closed loop must be one client without think time
    (each request sent when the last one ended)."""
    one_client = workload.closed_loop_concurrency == 1 and not workload.think_time_s
    if workload.is_closed_loop and not one_client:
        raise WorkbenchError(
            "a pipeline served one request at a time takes open-loop arrivals or closed-loop "
            "concurrency 1 without think time",
            field="workload.arrival",
        )
