"""`Transformer.hidden_states`: the final hidden states a length head reads are the LM head's
input, computed by the same forward as `step`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from decoder_models import one_thread, random_model  # noqa: E402

from real_backend.model.transformer import SeqStep  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

PROMPTS = [[3, 9, 4, 1, 7], [5, 2], [8, 8, 8, 1, 2, 3, 4, 5]]


def test_hidden_states_are_the_lm_heads_input() -> None:
    model = random_model()
    plan = [SeqStep(i, p) for i, p in enumerate(PROMPTS)]
    hidden = model.hidden_states(model.new_cache(32, 4), plan)
    logits = model.step(model.new_cache(32, 4), plan)
    for prompt, h, lg in zip(PROMPTS, hidden, logits, strict=True):
        assert h.shape == (len(prompt), model.args.dim)
        assert torch.allclose(model.lm_head(h.double()).float(), lg, atol=1e-5)


def test_hidden_states_do_not_depend_on_the_batch() -> None:
    model = random_model()
    together = model.hidden_states(
        model.new_cache(32, 4), [SeqStep(i, p) for i, p in enumerate(PROMPTS)]
    )
    for i, prompt in enumerate(PROMPTS):
        (alone,) = model.hidden_states(model.new_cache(32, 4), [SeqStep(i, prompt)])
        assert torch.allclose(alone, together[i], atol=1e-6)


def test_hidden_states_fill_the_cache_like_a_prefill() -> None:
    model = random_model()
    cache = model.new_cache(32, 4)
    model.hidden_states(cache, [SeqStep("a", PROMPTS[0])])
    assert cache.length("a") == len(PROMPTS[0])
