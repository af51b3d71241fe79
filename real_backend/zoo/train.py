"""Plain-PyTorch training and evaluation of Llama-shaped target/draft models.

Deterministic for a given spec, corpus and thread count: every random draw comes from the
spec's seed (weights via ``torch.manual_seed`` in a fork of the global generator, batch order
via an own ``torch.Generator``).
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any

import tokenizers
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from real_backend.zoo.specs import AparSpec, ModelShape, TrainSpec, ZooSpec

Log = Callable[[str], None]


@contextmanager
def training_threads(threads: int) -> Iterator[None]:
    """Train on `threads` CPU threads without transformers' progress bars; both restored."""
    before = torch.get_num_threads()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def card_header(spec: ZooSpec | AparSpec) -> dict[str, Any]:
    """What every zoo card starts with: its spec and the versions that built it."""
    return {
        "name": spec.name,
        "description": spec.description,
        "spec": asdict(spec),
        "python_version": platform.python_version(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


def make_config(shape: ModelShape, vocab_size: int, max_positions: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=max_positions,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
    )


def new_model(config: LlamaConfig, seed: int) -> LlamaForCausalLM:
    """A model initialised from `seed` alone. `transformers` draws initial weights from torch's
    global generator, so it is seeded inside a fork of it: the caller's draws stay its own."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config).float()


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


def pack(stream: Sequence[int], length: int) -> torch.Tensor:
    """Non-overlapping (N, length) blocks of the token stream; the ragged tail is dropped."""
    t = torch.as_tensor(stream, dtype=torch.long)
    n = len(t) // length
    return t[: n * length].view(n, length)


def lr_at(step: int, spec: TrainSpec) -> float:
    if step < spec.warmup_steps:
        return spec.lr * (step + 1) / spec.warmup_steps
    progress = (step - spec.warmup_steps) / max(1, spec.steps - spec.warmup_steps)
    floor = spec.lr * spec.min_lr_ratio
    return floor + 0.5 * (spec.lr - floor) * (1 + math.cos(math.pi * progress))


def _batches(n: int, batch_size: int, steps: int, seed: int) -> Iterator[torch.Tensor]:
    """``steps`` batches of row indices into ``n`` rows, each epoch a fresh seeded permutation."""
    gen = torch.Generator().manual_seed(seed)
    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        if len(order) < batch_size:
            order = torch.cat([order, torch.randperm(n, generator=gen)])
        idx, order = order[:batch_size], order[batch_size:]
        yield idx


def token_ce(
    logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean next-token cross-entropy of (B, L, V) logits against (B, L) targets; with a
    (B, L) boolean ``mask``, over the masked targets only."""
    flat = logits.reshape(-1, logits.size(-1))
    if mask is None:
        return F.cross_entropy(flat, targets.reshape(-1))
    ce = F.cross_entropy(flat, targets.reshape(-1), reduction="none")  # (B·L,)
    return masked_mean(ce, mask.reshape(-1))


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of `values` over the True entries of `mask` (same shape); all of them if None."""
    if mask is None:
        return values.mean()
    weights = mask.float()
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


def train_model(
    model: LlamaForCausalLM,
    blocks: torch.Tensor,  # (N, seq_len + 1)
    spec: TrainSpec,
    seed: int,
    teacher: LlamaForCausalLM | None = None,
    distill: float = 0.0,
    log: Log | None = None,
    masks: torch.Tensor | None = None,  # (N, seq_len): which targets blocks[:, 1:] carry loss
) -> dict[str, float]:
    """Next-token CE; with a teacher, ``(1 - distill) * CE + distill * KL(teacher || model)``.
    With ``masks`` (APAR's rows), both are averaged over the masked targets only."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": spec.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=spec.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    model.train()
    t0, loss_ema = time.perf_counter(), float("nan")
    for step, idx in enumerate(_batches(len(blocks), spec.batch_size, spec.steps, seed)):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, spec)
        batch, mask = blocks[idx], None if masks is None else masks[idx]
        x, y = batch[:, :-1], batch[:, 1:]
        logits = model(input_ids=x).logits
        ce = token_ce(logits, y, mask)
        loss = ce
        if teacher is not None and distill > 0:
            with torch.no_grad():
                t_logp = F.log_softmax(teacher(input_ids=x).logits, dim=-1)
            s_logp = F.log_softmax(logits, dim=-1)
            kl = masked_mean((t_logp.exp() * (t_logp - s_logp)).sum(-1), mask)  # over (B, L)
            loss = (1 - distill) * ce + distill * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.grad_clip)
        opt.step()
        c = ce.item()
        loss_ema = c if math.isnan(loss_ema) else 0.9 * loss_ema + 0.1 * c
        if log and (step % 50 == 0 or step == spec.steps - 1):
            log(f"  step {step + 1}/{spec.steps} ce {c:.3f} (ema {loss_ema:.3f})")
    model.eval()
    return {"final_train_ce_ema": loss_ema, "train_seconds": time.perf_counter() - t0}


@torch.no_grad()
def heldout_loss(model: LlamaForCausalLM, blocks: torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-token cross-entropy (nats) over every position of the held-out blocks."""
    total, count = 0.0, 0
    for i in range(0, len(blocks), batch_size):
        b = blocks[i : i + batch_size]
        logits = model(input_ids=b[:, :-1]).logits
        ce = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), b[:, 1:].reshape(-1), reduction="sum"
        )
        total, count = total + ce.item(), count + b[:, 1:].numel()
    return total / count


@torch.no_grad()
def greedy_agreement(
    target: LlamaForCausalLM,
    draft: LlamaForCausalLM,
    blocks: torch.Tensor,
    batch_size: int = 16,
    masks: torch.Tensor | None = None,  # (N, seq_len): count only these targets' positions
) -> float:
    """Share of teacher-forced positions where argmax(draft) == argmax(target)."""
    same, count = 0, 0
    for i in range(0, len(blocks), batch_size):
        x = blocks[i : i + batch_size, :-1]
        t = target(input_ids=x).logits.argmax(-1)
        d = draft(input_ids=x).logits.argmax(-1)
        keep = torch.ones_like(t, dtype=torch.bool) if masks is None else masks[i : i + len(x)]
        same, count = same + int(((t == d) & keep).sum()), count + int(keep.sum())
    return same / max(count, 1)


@torch.no_grad()
def _greedy(model: LlamaForCausalLM, ids: torch.Tensor, n: int) -> torch.Tensor:
    """Append ``n`` greedy tokens to every row of ``ids`` (full recompute; models are small)."""
    for _ in range(n):
        nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


@torch.no_grad()
def greedy_drafting(
    target: LlamaForCausalLM, draft: LlamaForCausalLM, prompts: torch.Tensor, new: int, k: int
) -> dict[str, float]:
    """Greedy speculative decoding with a k-token draft chain, replayed against the target's
    greedy continuation: per round, accepted = the longest prefix of the draft's k tokens that
    equals the target's greedy tokens; the target then adds one token of its own."""
    full = _greedy(target, prompts, new)
    p = prompts.size(1)
    accepted: list[int] = []
    for row in full:
        pos = p
        while pos < p + new:
            chain = _greedy(draft, row[None, :pos], k)[0, pos:]
            want = row[pos : pos + k]
            n = 0
            while n < len(want) and chain[n] == want[n]:
                n += 1
            accepted.append(n)
            pos += n + 1
    rounds = len(accepted)
    mean = sum(accepted) / rounds
    return {
        "k": k,
        "rounds": rounds,
        "mean_accepted": mean,
        "tokens_per_target_step": mean + 1,
        "acceptance_rate": sum(accepted) / (k * rounds),
    }
