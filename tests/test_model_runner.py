"""Logit parity with transformers on random-init tiny checkpoints, through the paged cache."""

from __future__ import annotations

import pytest
from tiny_models import TINY_SHAPE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from real_backend.model import SeqStep, load_checkpoint  # noqa: E402
from real_backend.model.transformer import tree_mask_from_parents  # noqa: E402

ATOL = 1e-4
VOCAB = 128
TINY = dict(**TINY_SHAPE, vocab_size=VOCAB)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CASES = {
    "llama3-tied": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {"rope_scaling": LLAMA3_ROPE, "tie_word_embeddings": True},
    ),
    "llama-mha": (
        "LlamaConfig",
        "LlamaForCausalLM",
        {"num_key_value_heads": 4, "rope_theta": 500.0},
    ),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None, "head_dim": 32}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {"num_key_value_heads": 1}),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request, tmp_path_factory):
    """(transformers model, our model) sharing random weights through a saved checkpoint."""
    config_cls, model_cls, extra = CASES[request.param]
    config = getattr(transformers, config_cls)(**{**TINY, **extra})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for p in hf.parameters():  # all non-trivial, biases and norms included
            p.normal_(0.0, 0.2)
    folder = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(folder)
    return hf, load_checkpoint(folder)


def hf_logits(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0]  # (T, V)


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_prefill_then_decode_matches(pair):
    hf, ours = pair
    ids = random_ids(14, 1)
    ref = hf_logits(hf, ids)
    cache = ours.new_cache(num_blocks=16, block_size=4)
    (prefill,) = ours.step(cache, [SeqStep("a", ids[:7])])
    torch.testing.assert_close(prefill, ref[:7], atol=ATOL, rtol=0)
    for t in range(7, len(ids)):
        (logits,) = ours.step(cache, [SeqStep("a", [ids[t]])])
        torch.testing.assert_close(logits[0], ref[t], atol=ATOL, rtol=0)
    assert cache.length("a") == len(ids)


def test_tree_step_equals_each_path(pair):
    hf, ours = pair
    context = random_ids(6, 2)
    tree = random_ids(7, 3)
    parents = [-1, 0, 0, 1, 2, 2, -1]
    cache = ours.new_cache(num_blocks=16, block_size=4)
    ours.step(cache, [SeqStep("t", context)])
    (logits,) = ours.step(cache, [SeqStep("t", tree, parents=parents)])
    for i in range(len(tree)):
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        path_ids = [tree[j] for j in reversed(path)]
        ref = hf_logits(hf, context + path_ids)[-1]
        torch.testing.assert_close(logits[i], ref, atol=ATOL, rtol=0)
    # Rolling the tree back leaves the context intact for the next step.
    cache.truncate("t", len(context))
    (again,) = ours.step(cache, [SeqStep("t", tree[:1])])
    torch.testing.assert_close(again[0], logits[0], atol=ATOL, rtol=0)


def test_batched_sequences_equal_each_alone(pair):
    hf, ours = pair
    prompts = {"x": random_ids(9, 4), "y": random_ids(3, 5)}
    news = {"x": random_ids(1, 6), "y": random_ids(4, 7)}
    cache = ours.new_cache(num_blocks=24, block_size=4)
    ours.step(cache, [SeqStep(s, p) for s, p in prompts.items()])
    batched = ours.step(cache, [SeqStep(s, n) for s, n in news.items()])
    for (seq, new), logits in zip(news.items(), batched, strict=True):
        alone_cache = ours.new_cache(num_blocks=8, block_size=4)
        ours.step(alone_cache, [SeqStep(seq, prompts[seq])])
        (alone,) = ours.step(alone_cache, [SeqStep(seq, new)])
        torch.testing.assert_close(logits, alone, atol=ATOL, rtol=0)
        ref = hf_logits(hf, prompts[seq] + new)[-len(new) :]
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)


def test_forked_branches_decode_independently(pair):
    hf, ours = pair
    prompt = random_ids(6, 8)  # ends mid-block: both branches copy-on-write
    cache = ours.new_cache(num_blocks=16, block_size=4)
    ours.step(cache, [SeqStep("root", prompt)])
    cache.fork("root", "branch")
    tails = {"root": random_ids(3, 9), "branch": random_ids(3, 10)}
    out = ours.step(cache, [SeqStep(s, t) for s, t in tails.items()])
    for tail, logits in zip(tails.values(), out, strict=True):
        ref = hf_logits(hf, prompt + tail)[-3:]
        torch.testing.assert_close(logits, ref, atol=ATOL, rtol=0)


def test_explicit_mask_equals_parents(pair):
    _, ours = pair
    context, tree = random_ids(5, 11), random_ids(4, 12)
    parents = [-1, 0, -1, 2]
    mask = tree_mask_from_parents(parents)
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [False, False, True, False],
        [False, False, True, True],
    ]
    results = []
    for how in ({"parents": parents}, {"mask": mask}):
        cache = ours.new_cache(num_blocks=8, block_size=4)
        ours.step(cache, [SeqStep("m", context)])
        results.append(ours.step(cache, [SeqStep("m", tree, **how)])[0])
    torch.testing.assert_close(results[0], results[1], atol=0, rtol=0)
    with pytest.raises(ValueError, match="earlier token"):
        tree_mask_from_parents([-1, 1])


def test_last_only_gives_each_sequences_last_row(pair):
    _, ours = pair
    a, b = random_ids(9, 11), random_ids(4, 12)
    full_cache, last_cache = ours.new_cache(16, 4), ours.new_cache(16, 4)
    full = ours.step(full_cache, [SeqStep("a", a), SeqStep("b", b)])
    last = ours.step(last_cache, [SeqStep("a", a), SeqStep("b", b)], last_only=True)
    for f, lo in zip(full, last, strict=True):
        assert lo.shape == (1, VOCAB)
        torch.testing.assert_close(lo[0], f[-1], atol=1e-5, rtol=0)


def test_mixed_step_equals_each_alone(pair):
    """One packed step with a prompt chunk, a one-token decode and a token tree side by side
    (the linear layers see only the 10 real tokens, attention a padded (3, 5) batch)."""
    _, ours = pair
    contexts = {"chunk": random_ids(2, 13), "decode": random_ids(7, 14), "tree": random_ids(4, 15)}
    steps = [
        SeqStep("chunk", random_ids(5, 16)),
        SeqStep("decode", random_ids(1, 17)),
        SeqStep("tree", random_ids(4, 18), parents=[-1, 0, 0, 1]),
    ]
    cache = ours.new_cache(num_blocks=24, block_size=4)
    ours.step(cache, [SeqStep(s, c) for s, c in contexts.items()])
    mixed = ours.step(cache, steps)
    for step, logits in zip(steps, mixed, strict=True):
        alone_cache = ours.new_cache(num_blocks=8, block_size=4)
        ours.step(alone_cache, [SeqStep(step.seq, contexts[step.seq])])
        (alone,) = ours.step(alone_cache, [step])
        assert logits.shape == (len(step.tokens), VOCAB)
        torch.testing.assert_close(logits, alone, atol=ATOL, rtol=0)
