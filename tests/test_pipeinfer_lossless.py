"""Greedy decoding over 1-4 pipeline stage processes emits exactly greedy vanilla decoding's
tokens: plain pipelining, synchronous speculation, and PipeInfer with drafts that are always
right, always wrong, random trees, or the PipeInfer drafting rule on a real draft model.

One pipeline session per stage count serves every case (starting stage processes is the
slow part). At 3 stages each layer sleeps a little (`emulated_layer_ms`), so cancels reach
stages in the middle of runs."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from decoder_models import noisy_copy, random_model  # noqa: E402
from pipeline_helpers import ScriptedDrafter, decode, greedy, save_checkpoint, stage_plan  # noqa: E402

from real_backend.pipeline.drafting import ModelDrafter  # noqa: E402
from real_backend.pipeline.serve import running_pipeline  # noqa: E402
from workbench.invariants import violations  # noqa: E402
from workbench.metrics import summarize  # noqa: E402
from workbench.scenario.decoders import (  # noqa: E402
    PipeInferDecoderConfig,
    PipelineDecoderConfig,
    PipelineOptions,
)

VOCAB, LAYERS = 64, 8
PROMPTS = [[3, 14, 15, 9, 26], [5, 35, 8]]
OUTPUTS = [18, 13]
SLOW_LAYERS_AT = 3  # stage count whose session emulates slower layers


@pytest.fixture(scope="module")
def target():
    return random_model(VOCAB, layers=LAYERS, seed=4)


@pytest.fixture(scope="module")
def checkpoint(target, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(target, tmp_path_factory.mktemp("pipeline_target"))


@pytest.fixture(scope="module")
def references(target) -> list[list[int]]:
    return [greedy(target, p, n) for p, n in zip(PROMPTS, OUTPUTS, strict=True)]


@pytest.fixture(scope="module", params=[1, 2, 3, 4], ids=lambda p: f"P{p}")
def head(request, checkpoint):
    stages = request.param
    layer_ms = 3.0 if stages == SLOW_LAYERS_AT else 0.0
    options = PipelineOptions(emulated_layer_ms=layer_ms, stage_timeout_s=30)
    with running_pipeline(stage_plan(checkpoint, LAYERS, stages, options)) as head:
        yield head  # leaving checks that no stage holds KV any more


def scripted(references: list[list[int]], mode: str) -> ScriptedDrafter:
    full = {tuple(p): p + r for p, r in zip(PROMPTS, references, strict=True)}
    return ScriptedDrafter(full, mode, VOCAB)


def pipeinfer(**fields) -> PipeInferDecoderConfig:
    return PipeInferDecoderConfig(kind="pipeinfer", **fields)


def check_lossless(head, config, references, drafter=None):
    emitted, log, records = decode(head, config, PROMPTS, OUTPUTS, drafter)
    assert emitted == references
    assert violations(records) == []
    return log, summarize(records)


def test_pipelined_decoding_is_greedy(head, references) -> None:
    log, summary = check_lossless(head, PipelineDecoderConfig(kind="pipeline"), references)
    assert set(log.columns["kind"]) == {"prefill", "token"}
    assert summary["pipeline_max_runs_in_flight"] == 1  # one run at a time
    assert summary["pipeline_runs_cancelled"] == 0


def test_synchronous_speculation_with_random_trees_is_greedy(head, references) -> None:
    config = pipeinfer(asynchronous=False, max_draft_tokens=6)
    log, summary = check_lossless(head, config, references, scripted(references, "random"))
    assert "verify" in log.columns["kind"]
    assert summary["pipeline_max_runs_in_flight"] == 1


def test_always_right_drafts_chain_runs(head, references) -> None:
    config = pipeinfer(max_draft_tokens=3, max_runs_in_flight=4)
    log, summary = check_lossless(head, config, references, scripted(references, "right"))
    kinds = collections.Counter(log.columns["kind"])
    if head.stages > 1:  # one stage: a result is always waiting, so nothing is speculated
        assert kinds["speculative"] > 0
        assert summary["pipeline_max_runs_in_flight"] > 2  # chained speculative runs
        assert summary["mean_tokens_per_decode_step"] > 1.5  # runs commit several tokens
        outcomes = zip(log.columns["kind"], log.columns["outcome"], strict=True)
        assert ("speculative", "committed") in set(outcomes)


def test_always_wrong_drafts_are_cancelled(head, references) -> None:
    config = pipeinfer(max_draft_tokens=3, max_runs_in_flight=4)
    log, summary = check_lossless(head, config, references, scripted(references, "wrong"))
    if head.stages > 1:
        assert summary["pipeline_runs_cancelled"] > 0
        assert summary["acceptance_rate"] == 0
        outcomes = zip(log.columns["kind"], log.columns["outcome"], strict=True)
        assert {o for k, o in outcomes if k == "speculative"} <= {"cancelled", "discarded"}
    if head.stages == SLOW_LAYERS_AT:  # cancels reached stages between two layers of a run
        statuses = [s for row in log.columns["stage_status"] for s in row]
        assert "aborted" in statuses
        assert summary["pipeline_wasted_partial_s"] > 0


@pytest.mark.parametrize("after_commit", ["restart", "continue"])
def test_random_trees_are_greedy(head, references, after_commit) -> None:
    config = pipeinfer(max_draft_tokens=6, max_runs_in_flight=6, after_commit=after_commit)
    check_lossless(head, config, references, scripted(references, "random"))


def test_a_chain_may_continue_after_a_commit(head, references) -> None:
    config = pipeinfer(max_draft_tokens=3, max_runs_in_flight=4, after_commit="continue")
    log, summary = check_lossless(head, config, references, scripted(references, "right"))
    if head.stages > 1:  # right drafts: the chain never restarts, so nothing is redundant
        assert summary["pipeline_runs_committed"] > 0
        outcomes = zip(log.columns["kind"], log.columns["outcome"], strict=True)
        assert ("speculative", "cancelled") not in set(outcomes)


def test_the_drafting_rule_on_a_draft_model_is_greedy(head, target, references) -> None:
    draft = noisy_copy(target, noise=0.08, seed=2)
    config = pipeinfer(max_draft_tokens=5, max_branches=3, p_accept=0.2, p_split=0.1)
    log, _ = check_lossless(head, config, references, ModelDrafter(draft, 256, 4))
    if head.stages > 1:
        assert collections.Counter(log.columns["kind"])["speculative"] > 0
