"""The real serving engine: shared policies over a real model equal greedy `generate` alone."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_models import saved_random_llama

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from real_backend.engine import RealEngine, ServeOptions  # noqa: E402
from real_backend.model import load_checkpoint  # noqa: E402
from real_backend.prompts import synthetic_prompts  # noqa: E402
from workbench.scenario.system import VanillaDecoderConfig  # noqa: E402
from workbench.scheduling.continuous import ContinuousBatching  # noqa: E402
from workbench.scheduling.static import StaticBatching  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

VOCAB = 96
N = 10


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("engine")
    hf = saved_random_llama(folder, VOCAB, scale=0.3)  # fp32 on disk; fp64 on both sides below
    return folder, hf.double()


@pytest.fixture(scope="module")
def workload() -> tuple[Workload, list[list[int]]]:
    rng = np.random.default_rng(3)
    w = Workload(
        arrival_s=np.cumsum(rng.exponential(0.004, N)),  # arrivals interleave with steps
        prompt_tokens=rng.integers(3, 30, N),
        output_tokens=rng.integers(1, 24, N),
    )
    return w, synthetic_prompts(w.prompt_tokens, VOCAB, seed=3)


def reference(hf, prompt: list[int], n: int) -> list[int]:
    """Greedy transformers generation of exactly n tokens for one prompt, alone.

    No EOS (the engine ignores it too) and an explicit attention mask: with a pad id set,
    `generate` would otherwise mask prompt tokens that happen to equal it.
    """
    ids = torch.tensor([prompt])
    config = transformers.GenerationConfig(
        max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=VOCAB - 1
    )
    with torch.no_grad():
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    return out[0, len(prompt) :].tolist()


def serve(folder, policy, workload) -> tuple[object, dict[int, list[int]]]:
    model = load_checkpoint(folder, dtype=torch.float64)
    cache = model.new_cache(num_blocks=policy.num_blocks, block_size=policy.block_size)
    options = ServeOptions(sampling=VanillaDecoderConfig(kind="vanilla"), seed=0)
    w, prompts = workload
    return RealEngine(model, cache, policy, options).serve(w, prompts)


POLICIES = {
    "continuous": lambda: ContinuousBatching(
        num_blocks=200, block_size=4, max_batch_size=8, max_batched_tokens=256
    ),
    "chunked, preempting": lambda: ContinuousBatching(
        num_blocks=24,
        block_size=4,
        max_batch_size=8,
        max_batched_tokens=64,
        chunked_prefill=True,
        chunk_size=16,
    ),
    "static": lambda: StaticBatching(num_blocks=400, block_size=4, batch_size=4),
}


@pytest.mark.parametrize("make_policy", POLICIES.values(), ids=POLICIES.keys())
def test_batched_serving_equals_generate_alone(checkpoint, workload, make_policy) -> None:
    folder, hf = checkpoint
    w, prompts = workload
    records, outputs = serve(folder, make_policy(), workload)
    for rid in range(N):
        assert outputs[rid] == reference(hf, prompts[rid], int(w.output_tokens[rid])), rid
    assert np.array_equal(records.requests.output_tokens, w.output_tokens)
    assert (records.requests.status == "finished").all()


def test_preempting_policy_really_preempts(checkpoint, workload) -> None:
    records, _ = serve(checkpoint[0], POLICIES["chunked, preempting"](), workload)
    assert records.requests.preemptions.sum() > 0


def test_records_are_consistent(checkpoint, workload) -> None:
    records, _ = serve(checkpoint[0], POLICIES["continuous"](), workload)
    req, steps, spans = records.requests, records.steps, records.emissions
    assert (req.first_token_s >= req.arrival_s).all() and (req.finish_s >= req.first_token_s).all()
    per_request = np.bincount(
        spans.request_id, weights=spans.last_step - spans.first_step + 1, minlength=N
    )
    assert np.array_equal(per_request, req.output_tokens)
    assert steps.emitted_tokens.sum() == req.output_tokens.sum()
    assert (np.diff(steps.start_s) > 0).all()


def test_step_records_count_the_prompt_tokens_really_computed(checkpoint, workload) -> None:
    w, _ = workload
    static, _ = serve(checkpoint[0], POLICIES["static"](), workload)
    # The static plan pads prompts to the batch's longest; the engine runs the real ones.
    assert static.steps.prefill_tokens.sum() == w.prompt_tokens.sum()
    preempting, _ = serve(checkpoint[0], POLICIES["chunked, preempting"](), workload)
    assert preempting.requests.preemptions.sum() > 0
    # Preempted requests recompute their prompt and emitted tokens: strictly more.
    assert preempting.steps.prefill_tokens.sum() > w.prompt_tokens.sum()


def test_a_static_batch_profiled_counts_its_padding_as_decodes(checkpoint, workload) -> None:
    """`--backend both` serves on the calibration's engine: a static plan's finished members
    are padding slots the engine skips, which must not read as negative verified tokens (a
    `verify` step, or a price that fails)."""
    from real_backend.calibration.probe_engine import ProfilingEngine, probe_points

    model = load_checkpoint(checkpoint[0], dtype=torch.float64)
    policy = POLICIES["static"]()
    cache = model.new_cache(num_blocks=policy.num_blocks, block_size=policy.block_size)
    engine = ProfilingEngine(
        model, cache, policy, ServeOptions(sampling=VanillaDecoderConfig(kind="vanilla"), seed=0)
    )
    w, prompts = workload
    records, _ = engine.serve(w, prompts)
    points = probe_points("served", engine.shapes, records.steps)
    assert any(p.decode_batch_size == 4 for p in points)  # full batches, finishing unevenly
    assert all(p.decode_extra_tokens == 0 and p.decode_extra_context_sum == 0 for p in points)
    assert {p.kind for p in points} <= {"decode", "prefill", "mixed"}
    assert len(points) == len(records.steps.step) - 1  # every step but the first
