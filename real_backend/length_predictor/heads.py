"""The head: the prompt's hidden state → a predicted response length.

Two kinds, both linear on standardized features (or a small MLP with `hidden`), fitted
full-batch with Adam and an L2 penalty on the weights (`l2`, chosen on validation data:
strong enough, a head falls back to the constant it can learn from the bias alone):
- `buckets`: classification into 50-token buckets (cross-entropy); it predicts the upper
  edge of the likeliest bucket, as the paper's predictor does (a prediction rounded up, so
  sequence scheduling's VBS bucket is the predicted one);
- `log_regression`: regression of log length under an L1 loss, i.e. the conditional
  median, the best single guess for the mean absolute error.
Initial weights come from the head's own generator, so a fit depends on its seed alone.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from real_backend.length_predictor.features import Pooling

HeadKind = Literal["buckets", "log_regression"]
HEAD_KINDS: tuple[HeadKind, ...] = ("buckets", "log_regression")
BUCKET_TOKENS = 50


@dataclass(frozen=True)
class HeadConfig:
    kind: HeadKind
    pooling: Pooling
    dim: int  # the served model's hidden size
    max_new: int  # the longest response (the generation limit of the training data)
    l2: float = 0.01  # penalty on the mean squared weight (biases free)
    hidden: int = 0  # 0: linear; else one hidden layer of this width
    epochs: int = 300
    lr: float = 0.02

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def buckets(self) -> int:
        return math.ceil(self.max_new / BUCKET_TOKENS)


class LengthHead(nn.Module):
    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("shift", torch.zeros(cfg.dim))
        self.register_buffer("scale", torch.ones(cfg.dim))
        out = cfg.buckets if cfg.kind == "buckets" else 1
        layers = [nn.Linear(cfg.hidden, out)] if cfg.hidden else [nn.Linear(cfg.dim, out)]
        if cfg.hidden:
            layers = [nn.Linear(cfg.dim, cfg.hidden), nn.GELU(), *layers]
        self.net = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (n, dim) → (n, out)
        return self.net((features - self.shift) / self.scale)

    @torch.no_grad()
    def predict_tokens(self, features: torch.Tensor) -> torch.Tensor:
        """Predicted response lengths, in [1, max_new]. # (n,) int64"""
        out = self(features.float())  # (n, out)
        if self.cfg.kind == "buckets":
            tokens = (out.argmax(-1) + 1) * BUCKET_TOKENS  # the bucket's upper edge
        else:
            tokens = out[:, 0].exp().round()
        return tokens.clamp(1, self.cfg.max_new).long()


def fit_head(
    cfg: HeadConfig, features: torch.Tensor, lengths: torch.Tensor, seed: int
) -> LengthHead:
    """A head trained on (features (n, dim), lengths (n,) in [1, max_new])."""
    head = LengthHead(cfg)
    _init(head, seed)
    head.shift.copy_(features.mean(0))
    head.scale.copy_(features.std(0) + 1e-6 if len(features) > 1 else torch.ones(cfg.dim))
    optimizer = torch.optim.Adam(head.parameters(), lr=cfg.lr)
    target = _target(cfg, lengths)
    weights = [m.weight for m in head.net if isinstance(m, nn.Linear)]
    with torch.enable_grad():
        for _ in range(cfg.epochs):
            optimizer.zero_grad()
            out = head(features)  # (n, out)
            if cfg.kind == "buckets":
                loss = F.cross_entropy(out, target)
            else:
                loss = F.l1_loss(out[:, 0], target)
            penalty = sum(w.square().mean() for w in weights)
            (loss + cfg.l2 * penalty).backward()
            optimizer.step()
    return head.eval()


def _target(cfg: HeadConfig, lengths: torch.Tensor) -> torch.Tensor:
    if cfg.kind == "buckets":
        return ((lengths.long() - 1) // BUCKET_TOKENS).clamp(0, cfg.buckets - 1)  # (n,)
    return lengths.double().log().float()  # (n,)


def _init(head: LengthHead, seed: int) -> None:
    """He-style normal weights and zero biases from a generator of this head alone."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in head.net:
            if isinstance(layer, nn.Linear):
                std = 1.0 / math.sqrt(layer.in_features)
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) * std)
                layer.bias.zero_()
