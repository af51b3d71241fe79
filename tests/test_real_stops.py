"""Real stops: a response ends at EOS or at any stop token (`workload.stop_texts`), under
continuous batching and in padded static batches alike, and nothing follows the stop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from seqsched_helpers import seqsched

torch = pytest.importorskip("torch")

from decoder_models import interleaved_workload, one_thread, random_model, serve  # noqa: E402
from tokenizer_folders import tokenizer_folder  # noqa: E402

from real_backend.engine import RealEngine, ServeOptions  # noqa: E402
from real_backend.serve import stop_token_ids  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402
from workbench.scenario.decoders import VanillaDecoderConfig  # noqa: E402
from workbench.scheduling.continuous import ContinuousBatching  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

VOCAB = 64
N = 12


def cut(tokens: list[int], stops: set[int]) -> list[int]:
    end = next((i for i, t in enumerate(tokens) if t in stops), None)
    return tokens if end is None else tokens[: end + 1]


@pytest.fixture(scope="module")
def work():
    return interleaved_workload(N, VOCAB)


@pytest.fixture(scope="module")
def free_running(work) -> dict[int, list[int]]:
    return serve(random_model(vocab=VOCAB), work)[2]


@pytest.fixture(scope="module")
def stops(free_running: dict[int, list[int]]) -> set[int]:
    """Two tokens the free-running outputs emit somewhere, so some responses stop early."""
    counts = np.bincount([t for out in free_running.values() for t in out], minlength=VOCAB)
    return set(np.argsort(counts)[-2:].tolist())


def serve_with_stops(policy, work, stops: set[int], eos: frozenset[int] = frozenset()):
    model = random_model(vocab=VOCAB)
    cache = model.new_cache(policy.num_blocks, policy.block_size)
    options = ServeOptions(
        VanillaDecoderConfig(kind="vanilla"), seed=0, eos_token_ids=eos, ignore_eos=False,
        stop_token_ids=frozenset(stops),
    )  # fmt: skip
    records, outputs = RealEngine(model, cache, policy, options).serve(*work)
    return records, outputs, policy.num_blocks - cache.num_free_blocks


def test_continuous_batching_stops_at_the_first_stop_token(work, free_running, stops) -> None:
    policy = ContinuousBatching(
        num_blocks=512, block_size=4, max_batch_size=8, max_batched_tokens=4096
    )
    records, outputs, held = serve_with_stops(policy, work, stops)
    assert outputs == {rid: cut(out, stops) for rid, out in free_running.items()}
    assert any(len(outputs[r]) < len(free_running[r]) for r in outputs)  # some stopped early
    assert records.requests.output_tokens.tolist() == [len(outputs[r]) for r in range(N)]
    assert held == 0


def test_eos_and_stop_tokens_stop_alike(work, free_running, stops) -> None:
    eos, other = sorted(stops)
    policy = ContinuousBatching(
        num_blocks=512, block_size=4, max_batch_size=8, max_batched_tokens=4096
    )
    _, outputs, _ = serve_with_stops(policy, work, {other}, eos=frozenset({eos}))
    assert outputs == {rid: cut(out, stops) for rid, out in free_running.items()}


def test_every_eos_id_stops(work, free_running, stops) -> None:
    policy = ContinuousBatching(
        num_blocks=512, block_size=4, max_batch_size=8, max_batched_tokens=4096
    )
    _, outputs, _ = serve_with_stops(policy, work, set(), eos=frozenset(stops))
    assert outputs == {rid: cut(out, stops) for rid, out in free_running.items()}


def test_a_padded_batch_member_that_stops_emits_nothing_more(work, free_running, stops) -> None:
    policy = seqsched(num_blocks=2000, batch_size=4, order="arrival", generation_limit=64)
    records, outputs, held = serve_with_stops(policy, work, stops)
    assert outputs == {rid: cut(out, stops) for rid, out in free_running.items()}
    assert records.steps.emitted_tokens.sum() == sum(len(o) for o in outputs.values())
    assert held == 0


def test_stop_texts_become_the_tokens_that_contain_them(tmp_path: Path) -> None:
    folder = tokenizer_folder(tmp_path / "tok")
    blank = stop_token_ids(folder, ["\n\n"])
    assert blank and stop_token_ids(folder, []) == frozenset()
    with pytest.raises(WorkbenchError, match=r"workload\.stop_texts"):
        stop_token_ids(folder, ["no token holds this text"])
