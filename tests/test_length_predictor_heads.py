"""Length heads: they learn a length that the features carry, fall back to a constant when
they carry none, predict bucket upper edges or medians within [1, max_new], and are seeded."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from decoder_models import one_thread  # noqa: E402

from real_backend.length_predictor.heads import HeadConfig, fit_head  # noqa: E402
from real_backend.length_predictor.metrics import length_errors  # noqa: E402

one_thread = pytest.fixture(scope="module", autouse=True)(one_thread)

DIM, MAX_NEW = 8, 256


def data(n: int, signal: bool, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Features and lengths: with signal, the length follows feature 0 (plus noise)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, DIM, generator=gen) * 3 + 5  # unstandardized on purpose
    if signal:
        lengths = 128 + 100 * (x[:, 0] - 5) / 3 + torch.randn(n, generator=gen) * 5
    else:
        lengths = torch.randint(1, MAX_NEW + 1, (n,), generator=gen).float()
    return x, lengths.round().clamp(1, MAX_NEW).long()


@pytest.mark.parametrize("kind", ["buckets", "log_regression"])
def test_a_head_learns_a_length_the_features_carry(kind: str) -> None:
    x, y = data(400, signal=True)
    tx, ty = data(200, signal=True, seed=1)
    head = fit_head(HeadConfig(kind, "mean", DIM, MAX_NEW), x, y, seed=0)
    learned = length_errors(head.predict_tokens(tx).numpy(), ty.numpy())
    constant = length_errors(np.full(len(ty), float(y.float().median())), ty.numpy())
    assert learned["mae"] < constant["mae"] / 2
    assert learned["within_50"] > 0.9


def test_a_strong_penalty_falls_back_to_a_constant() -> None:
    x, y = data(400, signal=False)
    head = fit_head(HeadConfig("log_regression", "mean", DIM, MAX_NEW, l2=1e4), x, y, seed=0)
    predicted = head.predict_tokens(data(100, signal=False, seed=1)[0])
    assert predicted.max() - predicted.min() <= 2  # the median, give or take rounding


def test_buckets_predict_upper_edges_within_the_limit() -> None:
    x, y = data(300, signal=True)
    predicted = fit_head(HeadConfig("buckets", "last", DIM, 120), x, y.clamp(max=120), 0)
    tokens = predicted.predict_tokens(x)
    assert set(tokens.tolist()) <= {50, 100, 120}  # the last bucket's edge is the limit


def test_a_fit_depends_on_its_seed_alone() -> None:
    x, y = data(200, signal=True)
    cfg = HeadConfig("buckets", "mean", DIM, MAX_NEW, epochs=50)
    a, b, c = (fit_head(cfg, x, y, seed) for seed in (3, 3, 4))
    assert torch.equal(a.net[0].weight, b.net[0].weight)
    assert not torch.equal(a.net[0].weight, c.net[0].weight)


def test_a_hidden_layer_is_optional() -> None:
    x, y = data(200, signal=True)
    head = fit_head(HeadConfig("log_regression", "mean", DIM, MAX_NEW, hidden=16), x, y, 0)
    assert len(head.net) == 3 and head.predict_tokens(x).shape == (200,)
