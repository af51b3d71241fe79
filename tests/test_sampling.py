"""Next-token choice: greedy, temperature, top-k, top-p, per-request streams."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from real_backend.sampling import next_token, next_tokens, request_generator  # noqa: E402
from workbench.scenario.system import VanillaDecoderConfig  # noqa: E402

LOGITS = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))


def cfg(**kw: float) -> VanillaDecoderConfig:
    return VanillaDecoderConfig(kind="vanilla", **kw)


def draws(config: VanillaDecoderConfig, n: int = 4000, seed: int = 0) -> torch.Tensor:
    gen = request_generator(seed, 0)
    return torch.tensor([next_token(LOGITS, config, gen) for _ in range(n)])


def test_greedy_is_argmax() -> None:
    assert next_token(LOGITS, cfg(), request_generator(0, 0)) == 0


def test_temperature_one_follows_the_distribution() -> None:
    counts = torch.bincount(draws(cfg(temperature=1.0)), minlength=4) / 4000
    # 5 standard errors of a share p over 4000 draws is at most 0.04.
    assert torch.allclose(counts, LOGITS.exp(), atol=0.04)


def test_top_k_and_top_p_cut_the_tail() -> None:
    assert set(draws(cfg(temperature=1.0, top_k=2), n=500).tolist()) <= {0, 1}
    # top_p 0.7: tokens 0 (0.5) and 1 (cumulative 0.8, the first past 0.7) stay.
    assert set(draws(cfg(temperature=1.0, top_p=0.7), n=500).tolist()) == {0, 1}


def test_each_request_has_its_own_reproducible_stream() -> None:
    a, b = draws(cfg(temperature=1.0), n=50, seed=1), draws(cfg(temperature=1.0), n=50, seed=1)
    assert torch.equal(a, b)
    other = torch.tensor(
        [next_token(LOGITS, cfg(temperature=1.0), request_generator(1, 1)) for _ in range(50)]
    )
    assert not torch.equal(a, other)


def row_by_row(
    logits: torch.Tensor, config: VanillaDecoderConfig, banned: list[list[int]]
) -> list[int]:
    chosen = []
    for b, row in enumerate(logits):
        row = row.clone()
        row[banned[b]] = float("-inf")
        chosen.append(next_token(row, config, request_generator(0, b)))
    return chosen


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_batched_choice_is_the_row_by_row_choice(temperature: float) -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))  # (B, V)
    logits[1, 7] = logits[1, 3] = logits[1].max() + 1  # a tie: the lower id wins either way
    banned = [[], [3], [0, 1, 2], [], [int(logits[4].argmax())], []]
    config = cfg(temperature=temperature)
    generators = [request_generator(0, b) for b in range(6)]
    before = logits.clone()
    batched = next_tokens(logits, config, generators, banned)
    assert torch.equal(logits, before)  # the bans apply to a copy
    assert batched == row_by_row(logits, config, banned)
    if temperature == 0:
        assert batched[1] == 7 and batched[4] != int(logits[4].argmax())
        assert next_tokens(logits, config, generators)[1] == 3  # nothing banned
