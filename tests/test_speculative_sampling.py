"""Speculative sampling keeps the target's distribution (rejection sampling)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decoder_models import noisy_copy, one_thread, random_model  # noqa: E402

from real_backend.decoders.acceptance import accept_rejection_sampling  # noqa: E402
from real_backend.decoders.base import DecodeRequest  # noqa: E402
from real_backend.decoders.drafter import Drafter  # noqa: E402
from real_backend.decoders.speculative import SpeculativeDecoder  # noqa: E402
from real_backend.model.transformer import SeqStep  # noqa: E402
from real_backend.sampling import request_generator, token_probs  # noqa: E402
from workbench.scenario.decoders import SpeculativeDecoderConfig  # noqa: E402

VOCAB = 6
single_thread = pytest.fixture(scope="module", autouse=True)(one_thread)
SAMPLES = 4000


def chi_square_p(counts: np.ndarray, probs: np.ndarray) -> float:
    """p-value of Pearson's chi-square of counts against probabilities (cells expecting < 5
    pooled), through the Wilson-Hilferty normal approximation of the chi-square law."""
    expected = probs * counts.sum()
    keep = expected >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = len(obs) - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_rejection_rule_matches_target_on_fixed_rows():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(3, VOCAB, generator=gen) * 2, -1)  # (k+1, V)
    q = torch.softmax(torch.randn(2, VOCAB, generator=gen) * 2, -1)  # (k, V)
    first = np.zeros(VOCAB)
    for i in range(SAMPLES):
        g = torch.Generator().manual_seed(i)
        drafted = [int(torch.multinomial(q[j], 1, generator=g)) for j in range(2)]
        accepted, token = accept_rejection_sampling(p, q, drafted, g)
        first[drafted[0] if accepted else token] += 1
    assert chi_square_p(first, p[0].numpy()) > 1e-3


def test_speculative_sampling_two_token_joint_matches_target():
    """The first two tokens of a speculative step follow p(t1|x) p(t2|x,t1) exactly."""
    target = random_model(VOCAB, dim=16, seed=0, scale=0.5)
    draft = noisy_copy(target, 0.4)
    cfg = SpeculativeDecoderConfig(kind="speculative", num_speculative_tokens=2, temperature=1.0)
    prompt = [1, 4, 2]
    cache = target.new_cache(SAMPLES * 3 + 8, 4)
    decoder = SpeculativeDecoder(
        target, cache, Drafter(draft, draft.new_cache(SAMPLES * 3 + 8, 4), cfg), cfg
    )
    cache.allocate("prompt")
    target.step(cache, [SeqStep("prompt", prompt[:-1])])
    batch = []
    for i in range(SAMPLES):  # every sample shares the prompt's KV blocks
        cache.fork("prompt", i)
        batch.append(DecodeRequest(i, list(prompt), 3, request_generator(7, i)))
    outcome = decoder.decode(batch)
    pairs = np.zeros((VOCAB, VOCAB))
    second_step = [r for r, e in zip(batch, outcome.emitted, strict=True) if len(e) == 1]
    for r, e in zip(batch, outcome.emitted, strict=True):
        r.tokens.extend(e)
    follow = decoder.decode(second_step) if second_step else None
    extra = (
        dict(zip((r.request_id for r in second_step), follow.emitted, strict=True))
        if follow
        else {}
    )
    for r, e in zip(batch, outcome.emitted, strict=True):
        tokens = e if len(e) >= 2 else e + extra[r.request_id]
        pairs[tokens[0], tokens[1]] += 1
    assert outcome.accepted > 0 and len(second_step) > 0  # both paths exercised
    exact = exact_joint(target, prompt, cfg)
    assert chi_square_p(pairs.ravel(), exact.ravel()) > 1e-3
    # The test can fail: the draft's own joint distribution is rejected.
    assert chi_square_p(pairs.ravel(), exact_joint(draft, prompt, cfg).ravel()) < 1e-6


def exact_joint(target, prompt: list[int], cfg) -> np.ndarray:
    cache = target.new_cache(64, 4)
    joint = np.zeros((VOCAB, VOCAB))
    p1 = token_probs(target.step(cache, [SeqStep("x", prompt)], last_only=True)[0][-1], cfg)
    cache.free("x")
    for t1, t2 in itertools.product(range(VOCAB), range(VOCAB)):
        if t2 == 0:
            logits = target.step(cache, [SeqStep("y", [*prompt, t1])], last_only=True)[0][-1]
            p2 = token_probs(logits, cfg)
            cache.free("y")
        joint[t1, t2] = float(p1[t1] * p2[t2])
    return joint
