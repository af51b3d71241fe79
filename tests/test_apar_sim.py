"""APAR on the simulator: replaying a real run's trees reproduces its steps per request
exactly on a fixed-step cost model; parametric trees are reproducible, keep the records'
invariants under KV pressure, and take fewer steps than the sequential answer; bad
configurations get one-line errors."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import yaml
from fixtures_records import make_meta

from simulator.run import simulate
from workbench.errors import WorkbenchError
from workbench.invariants import violations
from workbench.metrics import summarize
from workbench.scenario.loader import load_scenario
from workbench.store import ResultsStore
from workbench.workload.requests import Workload

SCENARIO = {
    "name": "apar-replay",
    "seed": 3,
    "workload": {
        "num_requests": 24,
        "arrival": {"kind": "batch"},
        "prompt_tokens": {"kind": "fixed", "value": 8},
        "output_tokens": {"kind": "fixed", "value": 40},
    },
    "model": {"name": "llama-3-8b", "dtype": "bf16"},
    "hardware": {"gpu": "h100-sxm"},
    "cost_model": {"kind": "fixed_step", "step_ms": 10},
    "scheduler": {
        "kind": "continuous",
        "max_batch_size": 8,
        "max_batched_tokens": 4096,
        "kv_cache": {"block_size": 4, "num_blocks": 512},
    },
    "decoder": {"kind": "apar", "max_branches": 64},
}


# 60 requests at 50 req/s into 48 blocks of 4 tokens: preemptions, and swaps.
KV_PRESSURE = (
    "scheduler.kv_cache.num_blocks=48",
    "scheduler.max_batch_size=16",
    "workload.num_requests=60",
    "workload.arrival={kind: poisson, rate_per_s: 50}",
)


def scenario(tmp_path, *overrides: str):
    path = tmp_path / "apar.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return load_scenario(path, list(overrides))


@pytest.mark.parametrize(
    ("blocks", "swap"),
    [(512, 0), (40, 0), (40, 10**6)],
    ids=["batched", "preempting", "swapping"],
)
def test_replaying_a_real_runs_trees_reproduces_its_steps(tmp_path, blocks, swap) -> None:
    pytest.importorskip("torch")
    from apar_real_helpers import frequent_tokens, many_prompts, serve_apar
    from decoder_models import random_model, serve

    model = random_model(48, seed=5)
    w, prompts = many_prompts(24, 48, seed=9)
    tokens = frequent_tokens(serve(model, (w, prompts))[2], 48)
    eos = frozenset({23})
    engine, real, _ = serve_apar(
        model, (w, prompts), tokens, num_blocks=blocks, eos=eos, swap_blocks=swap
    )
    assert real.branches is not None and (real.branches.parent >= 0).sum() >= 20
    assert (engine.policy.swap_outs > 0) == (swap > 0)
    # 4 GiB of an 8B model's 4-token blocks: 8,192 of them, never full here.
    space = 4 if swap else 0
    sim_scenario = scenario(
        tmp_path,
        f"scheduler.kv_cache.num_blocks={blocks}",
        f"scheduler.kv_cache.swap_space_gib={space}",
    )
    with ResultsStore.open(":memory:") as store:
        meta = make_meta("real", backend="real", decoder="apar", config=json_config(sim_scenario))
        store.write_run(meta, real)
        replay = sim_scenario.model_copy(
            update={"decoder": sim_scenario.decoder.model_copy(update={"calibrate_from": "real"})}
        )
        workload = Workload(
            arrival_s=np.zeros(len(w)), prompt_tokens=w.prompt_tokens, output_tokens=w.output_tokens
        )
        sim = simulate(replay, workload=workload, store=store)
    assert sim.info["calibrated_from"] == "real"
    for f in fields(real.emissions):  # the same steps, request by request, token counts too
        assert np.array_equal(getattr(real.emissions, f.name), getattr(sim.emissions, f.name)), (
            f.name
        )
    for f in fields(real.branches):
        assert np.array_equal(getattr(real.branches, f.name), getattr(sim.branches, f.name)), f.name
    assert np.array_equal(real.requests.output_tokens, sim.requests.output_tokens)
    assert np.array_equal(real.requests.preemptions, sim.requests.preemptions)
    assert np.array_equal(real.steps.batch_size, sim.steps.batch_size)


def json_config(s) -> dict:
    import json

    return json.loads(s.config_json())


def test_parametric_trees_are_reproducible_and_keep_the_invariants(tmp_path) -> None:
    s = scenario(tmp_path, *KV_PRESSURE)
    first, second = simulate(s), simulate(s)
    for f in fields(first.emissions):
        assert np.array_equal(getattr(first.emissions, f.name), getattr(second.emissions, f.name))
    assert violations(first, kv_blocks=48) == []
    assert first.requests.preemptions.sum() > 0
    forked = (first.branches.parent >= 0).sum()
    assert forked > 30


def test_swaps_are_priced_over_the_host_link(tmp_path) -> None:
    """Swapped blocks cost their bytes over PCIe, on top of the step's own time: 4 GiB of
    llama-3-8b bf16's 4-token blocks (512 KiB: 32 layers x K, V x 8 heads x 128 x 2 bytes x 4)
    is 8,192 blocks, each 512 KiB / 64 GB/s on an H100 SXM's PCIe Gen5 link."""
    s = scenario(tmp_path, *KV_PRESSURE)
    records = simulate(s)
    moved = int(records.info["apar_swapped_blocks"])
    assert int(records.info["apar_swap_outs"]) > 0 and moved > 0
    extra_s = records.steps.duration_s.sum() - 0.010 * len(records.steps.step)
    assert extra_s == pytest.approx(moved * 512 * 1024 / 64e9)
    assert violations(records, kv_blocks=48) == []
    recomputing = simulate(s.model_copy(update={"scheduler": _no_swap(s.scheduler)}))
    assert recomputing.info["apar_swap_outs"] == "0"
    assert recomputing.steps.duration_s.sum() == pytest.approx(0.010 * len(recomputing.steps.step))


def test_apar_with_a_draft_recomputes_every_preemption(tmp_path) -> None:
    """The draft's cache would have to move too: with speculation nothing is swapped."""
    draft = "decoder.speculative={draft: {name: llama-3-8b}, num_speculative_tokens: 2}"
    records = simulate(scenario(tmp_path, *KV_PRESSURE, draft))
    assert records.requests.preemptions.sum() > 0
    assert records.info["apar_swap_outs"] == "0" and records.info["apar_swapped_blocks"] == "0"


def _no_swap(scheduler):
    kv = scheduler.kv_cache.model_copy(update={"swap_space_gib": 0.0})
    return scheduler.model_copy(update={"kv_cache": kv})


def test_forks_take_fewer_steps_than_the_sequential_answer(tmp_path) -> None:
    wide = ("decoder.trees.structured_share=1", "scheduler.max_batch_size=128")
    apar = simulate(scenario(tmp_path, *wide))
    sequential = simulate(scenario(tmp_path, *wide, "decoder.max_branches=1"))
    a, q = summarize(apar), summarize(sequential)
    assert a["apar_fork_rate"] == 1.0 and q["apar_fork_rate"] == 0.0
    assert q["apar_step_compression"] == pytest.approx(39 / 40)  # answer tokens / (answer + EOS)
    assert a["apar_step_compression"] > 1.5 * q["apar_step_compression"]
    assert a["apar_mean_live_branches"] > 1.5
    assert a["apar_attention_keys_saved_share"] > 0.1 and a["apar_kv_token_steps_saved_share"] > 0.1
    assert len(apar.steps.step) < len(sequential.steps.step)


def test_records_and_summary_survive_the_store(tmp_path) -> None:
    s = scenario(tmp_path)
    records = simulate(s)
    with ResultsStore.open(":memory:") as store:
        store.write_run(make_meta("sim", decoder="apar", config=json_config(s)), records)
        loaded = store.load_records("sim")
        stored = store.run_summary("sim")
    for f in fields(records.branches):
        assert np.array_equal(getattr(records.branches, f.name), getattr(loaded.branches, f.name))
    assert summarize(loaded)["apar_step_compression"] == stored["apar_step_compression"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("decoder.max_depth=0", "decoder.max_depth"),
        ("decoder.calibrate_from=nope", "calibrate_from"),
        ("scheduler={kind: static, batch_size: 4}", "continuous"),
    ],
)
def test_bad_configurations_get_one_line_errors(tmp_path, override, message) -> None:
    with pytest.raises(WorkbenchError) as error:
        simulate(scenario(tmp_path, override))
    assert message in error.value.one_line() and "\n" not in error.value.one_line()


def test_without_forks_the_records_are_vanilla_decodings(tmp_path) -> None:
    from scenario_helpers import assert_records_identical

    poisson = (
        "workload.arrival={kind: poisson, rate_per_s: 30}",
        "workload.num_requests=80",
        "scheduler.kv_cache.num_blocks=50",
    )
    sequential = simulate(scenario(tmp_path, *poisson, "decoder.max_branches=1"))
    vanilla = simulate(scenario(tmp_path, *poisson, "decoder={kind: vanilla}"))
    assert vanilla.requests.preemptions.sum() > 0
    assert_records_identical(sequential, vanilla)


SPECULATING = (
    "decoder.speculative={num_speculative_tokens: 4, draft: {name: llama-3-8b}}",
    "decoder.trees.structured_share=1",
)


def test_speculating_branches_keep_their_trees_in_fewer_steps(tmp_path) -> None:
    pressure = ("scheduler.kv_cache.num_blocks=60", "scheduler.max_batch_size=16")
    apar = simulate(scenario(tmp_path, *pressure, SPECULATING[1]))
    fast = simulate(scenario(tmp_path, *pressure, *SPECULATING))
    assert fast.branches.trees() == apar.branches.trees()  # forks at the same own tokens
    assert (fast.branches.steps <= fast.branches.tokens).all()
    assert (fast.branches.steps < fast.branches.tokens).any()
    assert (apar.branches.steps == apar.branches.tokens).all()
    assert len(fast.steps.step) < 0.7 * len(apar.steps.step)
    assert violations(fast, kv_blocks=60) == []
    assert fast.requests.preemptions.sum() > 0
    s = summarize(fast)
    assert s["apar_step_compression"] > 1.5 * summarize(apar)["apar_step_compression"]
    assert 0 < s["acceptance_rate"] < 1 and "acceptance_at_position_1" not in s


def test_a_draft_never_accepted_takes_the_steps_of_apar_alone(tmp_path) -> None:
    never = "decoder.speculative.acceptance={kind: iid, rate: 0}"
    apar = simulate(scenario(tmp_path, SPECULATING[1]))
    rejected = simulate(scenario(tmp_path, *SPECULATING, never))
    for name in ("request_id", "first_step", "last_step", "tokens_per_step"):
        assert np.array_equal(getattr(apar.emissions, name), getattr(rejected.emissions, name))
    assert rejected.steps.drafted_tokens.sum() > 0 and rejected.steps.accepted_tokens.sum() == 0


def test_the_summary_of_a_speculating_apar_run_shows_branches_not_emissions(tmp_path) -> None:
    from workbench.runner import run_scenario
    from workbench.summary import RunHeader, format_summary

    s = scenario(tmp_path, *SPECULATING)
    with ResultsStore.open(":memory:") as store:
        (outcome,) = run_scenario(s, store, source="apar.yaml")
    text = format_summary(RunHeader.from_scenario(outcome.run_id, s, None), outcome.summary, "-")
    assert "live branches/step" in text and "acceptance" in text
    assert "tokens/decode step" not in text and "step compression 1.00" not in text
