"""Stage models (a layer range each, loaded alone from the checkpoint) chained in one
process equal the whole model; a stage stops between layers when told; and the PipeInfer
drafting rule on a draft model: thresholds, splits, the main branch first."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from decoder_models import random_model  # noqa: E402
from pipeline_helpers import greedy, save_checkpoint  # noqa: E402

from real_backend.model.transformer import SeqStep, Transformer  # noqa: E402
from real_backend.pipeline.drafting import DraftLimits, ModelDrafter  # noqa: E402
from real_backend.pipeline.stage_model import layer_ranges, load_stage  # noqa: E402

LAYERS = 4


@pytest.fixture(scope="module")
def target() -> Transformer:
    return random_model(64, layers=LAYERS, seed=3)


@pytest.fixture(scope="module")
def checkpoint(target, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_checkpoint(target, tmp_path_factory.mktemp("stages"))


def tied_model() -> Transformer:
    args = dataclasses.replace(random_model(64, layers=2).args, tie_word_embeddings=True)
    model = Transformer(args).double()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.fuse()
    return model.eval()


def run_stages(stages, caches, tokens, parents):
    """A step through every stage in turn, as the pipeline runs it: the last one's choices."""
    hidden = None
    for stage, cache in zip(stages, caches, strict=True):
        hidden = stage.run(cache, SeqStep(0, tokens, parents), hidden, False, lambda: False)
    return hidden


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_chained_stages_choose_as_the_whole_model(target, checkpoint, stages) -> None:
    ranges = layer_ranges(LAYERS, stages, None)
    parts = [
        load_stage(checkpoint, r, i == 0, i == stages - 1, "float64") for i, r in enumerate(ranges)
    ]
    assert [len(p.layers) for p in parts] == [len(r) for r in ranges]
    assert parts[0].embed_tokens is not None and parts[-1].lm_head is not None
    assert all(p.embed_tokens is None for p in parts[1:]) and all(
        p.norm is None for p in parts[:-1]
    )
    caches = [p.new_cache(32, 4) for p in parts]
    whole = target.new_cache(32, 4)
    prompt, tree, parents = [5, 9, 2, 33], [7, 8, 11], [-1, 0, -1]
    expected = target.step(whole, [SeqStep(0, prompt)])[0].argmax(-1)
    assert run_stages(parts, caches, prompt, None).tolist() == expected.tolist()
    expected = target.step(whole, [SeqStep(0, tree, parents)])[0].argmax(-1)  # a tree after it
    assert run_stages(parts, caches, tree, parents).tolist() == expected.tolist()


def test_the_last_stage_of_a_tied_model_reads_the_embedding_as_its_head(tmp_path: Path) -> None:
    model = tied_model()
    folder = save_checkpoint(model, tmp_path / "tied")
    first = load_stage(folder, range(0, 1), True, False, "float64")
    last = load_stage(folder, range(1, 2), False, True, "float64")
    assert torch.equal(last.lm_head.weight, model.embed_tokens.weight)
    caches = [first.new_cache(8, 4), last.new_cache(8, 4)]
    expected = model.step(model.new_cache(8, 4), [SeqStep(0, [1, 2, 3])])[0].argmax(-1)
    assert run_stages([first, last], caches, [1, 2, 3], None).tolist() == expected.tolist()


def test_a_stage_stops_between_layers_when_told(checkpoint) -> None:
    stage = load_stage(checkpoint, range(0, LAYERS), True, True, "float64")
    cache = stage.new_cache(8, 4)
    asked = []

    def stop_after_two() -> bool:
        asked.append(True)
        return len(asked) > 2

    assert stage.run(cache, SeqStep(0, [1, 2]), None, False, stop_after_two) is None
    assert len(asked) == 3  # asked before layers 0, 1, 2; stopped before layer 2
    assert cache.length(0) == 2  # the slots stay reserved until the sequence is freed


# ---------------------------------------------------------------- drafting


def limits(**fields) -> DraftLimits:
    values = dict(max_tokens=6, max_depth=6, max_branches=1, p_accept=0.0, p_split=1.0)
    return DraftLimits(**(values | fields))


def test_an_unbranched_draft_is_the_draft_models_greedy_chain(target) -> None:
    drafter = ModelDrafter(target, 64, 4)
    context = [4, 8, 15, 16]
    drafter.start(context)
    tree = drafter.draft(context, limits(max_tokens=5))
    assert tree.tokens == greedy(target, context, 5)
    assert tree.parents == [-1, 0, 1, 2, 3] and tree.main_length == 5
    # a chain continues from the main branch: the draft caches it and feeds the last token
    longer = context + tree.tokens
    assert drafter.draft(longer, limits(max_tokens=3)).tokens == greedy(target, longer, 3)
    assert drafter.cached[: len(longer) - 1] == longer[:-1]


def test_branches_stop_under_p_accept_and_split_above_p_split(target) -> None:
    drafter = ModelDrafter(target, 64, 4)
    context = [4, 8, 15]
    drafter.start(context)
    assert drafter.draft(context, limits(p_accept=1.01)).tokens == []  # nothing confident
    tree = drafter.draft(context, limits(max_tokens=7, max_depth=3, max_branches=3, p_split=0.0))
    roots = [i for i, p in enumerate(tree.parents) if p == -1]
    assert len(roots) == 3  # two siblings split off at the first level
    assert len(tree.tokens) <= 7 and tree.main_length == 3  # the main branch: a full chain
    assert tree.tokens[: tree.main_length] == greedy(target, context, 3)
    assert all(p < i for i, p in enumerate(tree.parents))
    depth = {-1: 0}
    for i, p in enumerate(tree.parents):
        depth[i] = depth[p] + 1
    assert max(depth.values()) <= 3
    assert sorted(drafter.cache.tables) == [0]  # branch sequences freed, the main kept
