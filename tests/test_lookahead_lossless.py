"""Lookahead decoding emits exactly greedy vanilla decoding's tokens, and accepts n-grams on
text a model continues by copying."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decoder_models import DECODER_VOCAB, one_thread, serve  # noqa: E402

from real_backend.decoders.lookahead import (  # noqa: E402
    LookaheadDecoder,
    initial_window,
    tree_layout,
)
from real_backend.model import ModelArgs, Transformer  # noqa: E402
from real_backend.model.layers import apply_rope, rope_cos_sin  # noqa: E402
from real_backend.model.transformer import tree_mask_from_parents  # noqa: E402
from workbench.scenario.decoders import LookaheadDecoderConfig  # noqa: E402
from workbench.workload.requests import Workload  # noqa: E402

VOCAB = DECODER_VOCAB  # the conftest target's
SHAPES = [(1, 2, 1), (3, 3, 2), (5, 4, 5), (7, 5, 7)]  # (W, N, G)


def lookahead(window: int, ngram: int, candidates: int, prompt_pool: bool):
    cfg = LookaheadDecoderConfig(
        kind="lookahead", window=window, ngram=ngram, candidates=candidates, prompt_pool=prompt_pool
    )
    return lambda model, cache: LookaheadDecoder(model, cache, cfg)


def copying_model(vocab: int, period: int) -> Transformer:
    """One layer whose only head attends exactly `period - 1` positions back (RoPE, constant
    queries and keys) and predicts the token found there: greedy decoding repeats the last
    `period` tokens forever. Its window guesses are right only at the right positions."""
    dim = 2 * vocab + 1  # the token's one-hot | a constant 1 | the copied token's one-hot
    args = ModelArgs(
        vocab_size=vocab, dim=dim, n_layers=1, n_heads=1, n_kv_heads=1,
        head_dim=vocab, intermediate_size=4,
    )  # fmt: skip
    model = Transformer(args).double()
    const = vocab
    attn = model.layers[0].self_attn
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
        model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        model.embed_tokens.weight[:, const] = 1.0
        unit = (dim / 2) ** -0.5  # RMSNorm scales every embedding by sqrt(dim / 2)
        q = torch.full((vocab,), 24.0, dtype=torch.float64)  # (hd,): a sharp peak
        cos, sin = rope_cos_sin(torch.tensor([[period - 1]]), model.inv_freq, torch.float64)
        k = apply_rope(q.view(1, 1, 1, -1), cos, sin).flatten()  # q·R(n−m)k peaks at m−n = P−1
        attn.q_proj.weight[:, const] = q * unit
        attn.k_proj.weight[:, const] = k * unit
        attn.v_proj.weight[:, :vocab] = torch.eye(vocab)
        attn.o_proj.weight[const + 1 :, :] = torch.eye(vocab) * unit  # into the copy slot
        model.lm_head.weight[:, const + 1 :] = torch.eye(vocab) * 8.0
    model = model.eval()
    model.fuse()
    return model


single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)


def check_records(engine, records) -> None:
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks  # nothing leaked
    assert not engine.decoder._states  # every finished request released its state
    steps = records.steps
    assert (steps.accepted_tokens <= steps.drafted_tokens).all()
    window = engine.decoder.config.window * (engine.decoder.config.ngram - 1)  # incl. current
    assert (steps.verified_tokens == window * steps.decode_tokens + steps.drafted_tokens).all()
    e = records.emissions  # multi-token emissions add up to the outputs
    emitted = ((e.last_step - e.first_step + 1) * e.tokens_per_step).sum()
    assert emitted == records.requests.output_tokens.sum()


@pytest.mark.parametrize("prompt_pool", [False, True], ids=["jacobi", "prompt pool"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"W{w} N{n} G{g}" for w, n, g in SHAPES])
def test_greedy_equals_vanilla_batched(
    decoder_target, decoder_workload, decoder_vanilla, shape, prompt_pool
):
    engine, records, outputs = serve(
        decoder_target, decoder_workload, lookahead(*shape, prompt_pool)
    )
    assert outputs == decoder_vanilla
    check_records(engine, records)


@pytest.mark.parametrize("shape", [(3, 3, 2), (5, 4, 5)], ids=["W3 N3 G2", "W5 N4 G5"])
def test_greedy_equals_vanilla_alone(decoder_target, decoder_workload, decoder_vanilla, shape):
    _, _, outputs = serve(
        decoder_target, decoder_workload, lookahead(*shape, True), max_batch_size=1
    )
    assert outputs == decoder_vanilla


def test_layout_is_the_papers_mask_with_true_positions():
    """W=5, N=4, G=2 as in the paper's figure: level l, column i sees the current token, level
    0's columns 1..i and column i of levels 1..l−1; its depth (RoPE offset) is i + l."""
    W, N = 5, 4
    levels = [[10 + i for i in range(1, W)], [20 + i for i in range(W)], [30 + i for i in range(W)]]
    tokens, parents, starts = tree_layout(0, levels, [[1, 2, 3], [4, 5, 6]])
    assert (
        len(tokens)
        == LookaheadDecoderConfig(kind="lookahead", window=W, ngram=N, candidates=2).step_tokens
    )
    mask = tree_mask_from_parents(parents)
    depth = mask.sum(-1) - 1
    for level in range(N - 1):
        for col in range(W):
            k = level * W + col
            seen = {j for j in range(len(tokens)) if mask[k, j]}
            expected = {0, *range(1, col + 1), *(lv * W + col for lv in range(1, level + 1))}
            assert seen == expected, (level, col)
            assert depth[k] == col + level
    for start in starts:  # each candidate: a chain off the current token at depths 1..N−1
        assert parents[start] == 0
        assert depth[start : start + N - 1].tolist() == [1, 2, 3]
        assert not mask[start : start + N - 1, 1:start].any()


def test_initial_window_guesses_position_consistently():
    levels = initial_window([9, 8, 7, 6, 5, 4], window=3, ngram=4)  # K = 4 guesses, p = 1..4
    assert levels == [[7, 6], [7, 6, 5], [6, 5, 4]]  # level l, column i guesses p = i + l
    assert initial_window([3], window=2, ngram=3) == [[3], [3, 3]]  # short context: cycled
    assert initial_window([3, 4], window=1, ngram=2) == [[]]


PERIOD = 5


@pytest.fixture(scope="module")
def copier():
    return copying_model(32, PERIOD)


@pytest.fixture(scope="module")
def repetitive():
    """Prompts repeating a pattern of PERIOD distinct tokens; all arrive at once."""
    rng = np.random.default_rng(0)
    prompts = [list(rng.permutation(32)[:PERIOD]) * 3 for _ in range(4)]
    prompts = [[int(t) for t in p[: 8 + 2 * b]] for b, p in enumerate(prompts)]
    w = Workload(
        arrival_s=np.zeros(4),
        prompt_tokens=np.array([len(p) for p in prompts]),
        output_tokens=np.array([40, 33, 26, 45]),
    )
    return w, prompts


def test_copying_model_repeats_its_prompt(copier, repetitive):
    _, prompts = repetitive
    _, _, outputs = serve(copier, repetitive)
    for rid, prompt in enumerate(prompts):
        text = prompt + outputs[rid]
        assert all(text[t] == text[t - PERIOD] for t in range(PERIOD, len(text)))


@pytest.mark.parametrize("prompt_pool", [False, True], ids=["jacobi", "prompt pool"])
def test_copied_text_is_accepted_in_fewer_steps(copier, repetitive, prompt_pool):
    _, vanilla_records, expected = serve(copier, repetitive, max_batch_size=1)
    engine, records, outputs = serve(
        copier, repetitive, lookahead(5, 4, 5, prompt_pool), max_batch_size=1
    )
    assert outputs == expected
    check_records(engine, records)
    s = records.steps
    vanilla_steps, steps = len(vanilla_records.steps.step), len(s.step)
    assert s.accepted_tokens.sum() > 0
    # N = 4: a fully accepted step emits 4 tokens; the pool knows every 4-gram of the pattern
    # from the prompt, the Jacobi window learns them within a few steps.
    assert steps < (0.32 if prompt_pool else 0.4) * vanilla_steps
