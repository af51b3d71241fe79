"""The forward over a step plan: per sequence, new tokens and their parents among them.

A token with parent -1 hangs off the cached context; otherwise its parent is an earlier new
token of the same sequence. Token i sees the whole cached context plus its ancestors and
itself (mask row i = row of its parent, plus i), and its RoPE position is the context length
plus its depth. A chain (parents i-1) is prefill or causal decoding; a tree is speculative
verification. A step may give an explicit mask instead (rows must include the diagonal); the
position of token i is then the context length plus the number of other new tokens it sees.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from kernels.dispatch import KernelChoice, KernelSet, select_kernels
from real_backend.kv_cache import PagedKVCache
from real_backend.model.config import ModelArgs
from real_backend.model.layers import AttentionMeta, RMSNorm, TransformerBlock, rope_cos_sin
from real_backend.model.layers import rope_inv_freq as _rope_inv_freq


@dataclass
class SeqStep:
    """One sequence's part of a step. ``parents=None`` and ``mask=None`` mean a causal chain."""

    seq: Hashable
    tokens: Sequence[int]
    parents: Sequence[int] | None = None  # parent index among this step's tokens, -1 = context
    mask: torch.Tensor | None = None  # (n, n) bool explicit visibility, overrides parents


def tree_mask_from_parents(parents: Sequence[int]) -> torch.Tensor:
    """(n, n) bool: row i = row parents[i] plus i itself."""
    n = len(parents)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"parent of token {i} must be -1 or an earlier token, got {p}")
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def step_mask(step: SeqStep) -> torch.Tensor:
    """(n, n) bool visibility among a step's new tokens."""
    n = len(step.tokens)
    if step.mask is not None:
        mask = step.mask.to(torch.bool).cpu()
        if mask.shape != (n, n) or not bool(mask.diagonal().all()):
            raise ValueError(f"mask of {step.seq!r} must be ({n}, {n}) with a true diagonal")
        return mask
    parents = step.parents if step.parents is not None else range(-1, n - 1)
    if len(parents) != n:
        raise ValueError(f"{step.seq!r}: {n} tokens but {len(parents)} parents")
    return tree_mask_from_parents(parents)


@functools.lru_cache(maxsize=16)
def _kernels_on(choice: KernelChoice, device: torch.device) -> KernelSet:
    """`select_kernels`, looked up once per (choice, device) rather than once per step."""
    return select_kernels(choice, device)


class Transformer(nn.Module):
    """Llama-family decoder; parameter names follow Hugging Face's (without ``model.``)."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.rms_norm_eps)
        self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        inv_freq = _rope_inv_freq(args.head_dim, args.rope_theta, args.rope_scaling)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.kernel_choice: KernelChoice = "auto"

    def use_kernels(self, choice: KernelChoice) -> KernelSet:
        """Run attention and cache writes with ``choice`` ("auto": Triton on CUDA, else the
        PyTorch references); raises KernelUnavailable now if it cannot run on this device."""
        kernels = select_kernels(choice, self.embed_tokens.weight.device)
        self.kernel_choice = choice
        return kernels

    def kernel_set(self) -> KernelSet:
        """The chosen kernel implementation on the model's current device."""
        return _kernels_on(self.kernel_choice, self.embed_tokens.weight.device)

    def new_cache(self, num_blocks: int, block_size: int = 16) -> PagedKVCache:
        """An empty paged cache shaped for this model, on its device and dtype."""
        w = self.embed_tokens.weight
        a = self.args
        return PagedKVCache(
            a.n_layers, num_blocks, block_size, a.n_kv_heads, a.head_dim, w.dtype, w.device,
            copy_blocks=self.kernel_set().copy_blocks,
        )  # fmt: skip

    def forward(
        self,
        tokens: torch.Tensor,  # (B, Q) int64, padded
        positions: torch.Tensor,  # (B, Q) int64 RoPE positions
        cache: PagedKVCache,
        meta: AttentionMeta,
        logit_index: torch.Tensor | None = None,  # (B,) the one position per row to score
        lm_head: bool = True,  # False: final hidden states (after the norm), (B, Q, dim)
    ) -> torch.Tensor:  # (B, Q, vocab) logits, or (B, 1, vocab) with logit_index
        x = self.embed_tokens(tokens)  # (B, Q, D)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)  # (B, Q, hd)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], meta)
        if logit_index is not None and x.shape[1] > 1:  # only these rows emit: skip the LM
            x = x[torch.arange(x.shape[0], device=x.device), logit_index].unsqueeze(1)  # head

        x = self.norm(x)
        return self.lm_head(x) if lm_head else x

    def _reserve(self, cache: PagedKVCache, seq: Hashable, n: int) -> int:
        """Start `seq` in the cache if new, reserve `n` slots; return its prior length."""
        if seq not in cache.tables:
            cache.allocate(seq)
        ctx = cache.length(seq)
        window = self.args.sliding_window
        if window is not None and ctx + n > window:
            raise ValueError(f"{seq!r}: {ctx + n} tokens exceed the sliding window {window}")
        cache.append_slots(seq, n)
        return ctx

    def fuse(self) -> None:
        """Fuse q/k/v and gate/up projections for inference (fewer, larger matmuls)."""
        for layer in self.layers:
            layer.self_attn.fuse()
            layer.mlp.fuse()

    @torch.inference_mode()
    def step(
        self, cache: PagedKVCache, plan: Sequence[SeqStep], last_only: bool = False
    ) -> list[torch.Tensor]:
        """Run one step plan; reserve the new tokens' slots; return (n_b, vocab) logits each
        (`last_only`: (1, vocab), the last new token's, skipping the LM head elsewhere).

        A sequence not yet in the cache is started there. The new tokens stay in the cache:
        roll rejected ones back with ``cache.truncate``.
        """
        return self._run_plan(cache, plan, last_only, lm_head=True)

    @torch.inference_mode()
    def hidden_states(self, cache: PagedKVCache, plan: Sequence[SeqStep]) -> list[torch.Tensor]:
        """Like `step`, but each new token's final hidden state (after the final norm: the LM
        head's input), (n_b, dim) each: the frozen model's own reading of its input."""
        return self._run_plan(cache, plan, False, lm_head=False)

    def _run_plan(
        self, cache: PagedKVCache, plan: Sequence[SeqStep], last_only: bool, lm_head: bool
    ) -> list[torch.Tensor]:
        device = self.embed_tokens.weight.device
        B, Q = len(plan), max(len(s.tokens) for s in plan)
        tokens, positions, slots = [], [], []  # (B, Q) each, padded, as Python lists
        contexts, lengths = [], []
        tree_mask = None  # (B, Q, Q) once some sequence is not a causal chain
        for b, s in enumerate(plan):
            n = len(s.tokens)
            ctx = self._reserve(cache, s.seq, n)
            pad = [0] * (Q - n)
            if s.parents is None and s.mask is None:  # a causal chain: the default mask
                positions.append([*range(ctx, ctx + n), *pad])
            else:
                mask = step_mask(s)
                if tree_mask is None:
                    tree_mask = torch.ones(Q, Q, dtype=torch.bool).tril().repeat(B, 1, 1)
                tree_mask[b, :n, :n] = mask
                positions.append([*(ctx + mask.sum(-1) - 1).tolist(), *pad])  # depth in tree
            tokens.append([*s.tokens, *pad])
            slots.append([*cache.slots(s.seq, ctx, n), *[-1] * (Q - n)])
            contexts.append(ctx)
            lengths.append(n)
        new_lens = torch.tensor(lengths)
        meta = AttentionMeta(
            slot_mapping=torch.tensor(slots).flatten().to(device),
            block_tables=cache.block_tables([s.seq for s in plan]),
            context_lens=torch.tensor(contexts).to(device),
            new_lens=new_lens.to(device),
            tree_mask=None if tree_mask is None else tree_mask.to(device),
            kernels=self.kernel_set(),
        )
        ids, pos = torch.tensor(tokens, device=device), torch.tensor(positions, device=device)
        if last_only:
            index = (new_lens - 1).to(device)
            logits = self(ids, pos, cache, meta, index)  # (B, 1, V)
            return [logits[b].float() for b in range(B)]
        logits = self(ids, pos, cache, meta, None, lm_head)  # (B, Q, V), or (B, Q, dim)
        return [logits[b, : len(s.tokens)].float() for b, s in enumerate(plan)]
