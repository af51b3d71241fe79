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
import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kernels.dispatch import KernelChoice, KernelSet, select_kernels
from real_backend.host_to_device import aligned_rows, device_tensor, to_device
from real_backend.kv_cache import PagedKVCache
from real_backend.model.config import ModelArgs
from real_backend.model.inference_linear import PLAIN, PREPACKED, InferenceLinear, prepack_pays
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
    return torch.from_numpy(_parents_mask(parents))


def _parents_mask(parents: Sequence[int]) -> np.ndarray:
    """`tree_mask_from_parents` on the host, in NumPy: a row copy there costs a microsecond,
    a tensor's several (and a step builds one row per new token of every masked sequence)."""
    n = len(parents)
    mask = np.zeros((n, n), dtype=np.bool_)
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"parent of token {i} must be -1 or an earlier token, got {p}")
        if p >= 0:
            mask[i] = mask[p]
        mask[i, i] = True
    return mask


def step_mask(step: SeqStep) -> np.ndarray:
    """(n, n) bool visibility among a step's new tokens."""
    n = len(step.tokens)
    if step.mask is not None:
        mask = step.mask.to(torch.bool).cpu().numpy()
        if mask.shape != (n, n) or not mask.diagonal().all():
            raise ValueError(f"mask of {step.seq!r} must be ({n}, {n}) with a true diagonal")
        return mask
    parents = step.parents if step.parents is not None else range(-1, n - 1)
    if len(parents) != n:
        raise ValueError(f"{step.seq!r}: {n} tokens but {len(parents)} parents")
    return _parents_mask(parents)


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
        self.head: InferenceLinear | None = None  # set by fuse()
        self.linear_impl = PLAIN  # what runs the linear layers (see fuse)

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
        tokens: torch.Tensor,  # (N,) int64, the step's new tokens packed sequence by sequence
        positions: torch.Tensor,  # (N,) int64 RoPE positions
        cache: PagedKVCache,
        meta: AttentionMeta,
        rows: torch.Tensor | None = None,  # (R,) the only packed tokens to score
        lm_head: bool = True,  # False: final hidden states (after the norm), (N, dim)
    ) -> torch.Tensor:  # (N, vocab) logits, or (R, vocab) with rows
        x = self.embed_tokens(tokens)  # (N, D)
        cos, sin = rope_cos_sin(positions, self.inv_freq, x.dtype)  # (N, hd)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, cache.k[i], cache.v[i], meta)
        if rows is not None and rows.shape[0] < x.shape[0]:  # only these emit: skip the LM
            x = x[rows]  # (R, D)                                head elsewhere
        x = self.norm(x)
        if not lm_head:
            return x
        return self.lm_head(x) if self.head is None else self.head(x)

    def fuse(self, prepack: bool | None = None) -> None:
        """Prepare for inference: fuse q/k/v and gate/up projections (fewer, larger matmuls),
        and with `prepack` (default: where it pays, CPU fp32 but for MKL on an Intel CPU) run
        multi-row matmuls on oneDNN-prepacked weights (`inference_linear`)."""
        if prepack is None:
            weight = self.embed_tokens.weight
            prepack = prepack_pays(weight.dtype, weight.device.type)
        for layer in self.layers:
            layer.self_attn.fuse(prepack)
            layer.mlp.fuse(prepack)
        self.head = InferenceLinear(self.lm_head.weight, None, prepack)
        self.linear_impl = PREPACKED if prepack else PLAIN

    @torch.inference_mode()
    def step(
        self, cache: PagedKVCache, plan: Sequence[SeqStep], last_only: bool = False
    ) -> list[torch.Tensor]:
        """Run one step plan; reserve the new tokens' slots; return (n_b, vocab) logits each
        (`last_only`: (1, vocab), the last new token's, skipping the LM head elsewhere).

        A sequence not yet in the cache is started there. The new tokens stay in the cache:
        roll rejected ones back with ``cache.truncate``.
        """
        if last_only:
            logits = self.step_last(cache, plan)  # (B, V)
            return [logits[b : b + 1] for b in range(len(plan))]  # B × (1, V) views
        return self._run_plan(cache, plan, lm_head=True)

    @torch.inference_mode()
    def step_last(self, cache: PagedKVCache, plan: Sequence[SeqStep]) -> torch.Tensor:
        """Like `step`, but only each sequence's last new token is scored: (B, vocab) float
        logits in one tensor, so a batched choice reads them in one kernel."""
        step = prepare_step(cache, plan, self.kernel_set(), self.args.sliding_window)
        ends = itertools.accumulate(step.lengths)  # packed index past each sequence
        rows = device_tensor([e - 1 for e in ends], step.tokens.device)  # (B,)
        return self(step.tokens, step.positions, cache, step.meta, rows).float()  # (B, V)

    @torch.inference_mode()
    def hidden_states(self, cache: PagedKVCache, plan: Sequence[SeqStep]) -> list[torch.Tensor]:
        """Like `step`, but each new token's final hidden state (after the final norm: the LM
        head's input), (n_b, dim) each: the frozen model's own reading of its input."""
        return self._run_plan(cache, plan, lm_head=False)

    def _run_plan(
        self, cache: PagedKVCache, plan: Sequence[SeqStep], lm_head: bool
    ) -> list[torch.Tensor]:
        step = prepare_step(cache, plan, self.kernel_set(), self.args.sliding_window)
        ends = list(itertools.accumulate(step.lengths))  # packed index past each sequence
        out = self(step.tokens, step.positions, cache, step.meta, None, lm_head)  # (N, V|dim)
        return [out[e - n : e].float() for e, n in zip(ends, step.lengths, strict=True)]


@dataclass
class StepInputs:
    """A step plan packed for a forward: what the embedding, RoPE and attention take."""

    tokens: torch.Tensor  # (N,) int64, the new tokens packed sequence by sequence
    positions: torch.Tensor  # (N,) int64 RoPE positions
    meta: AttentionMeta
    lengths: list[int]  # new tokens of each sequence, in plan order


def prepare_step(
    cache: PagedKVCache, plan: Sequence[SeqStep], kernels: KernelSet, sliding_window: int | None
) -> StepInputs:
    """Reserve the plan's slots in `cache` and pack its new tokens into one (N,) batch: every
    linear layer runs over the N real tokens only, however uneven the sequences (a prompt
    chunk beside one-token decodes); only attention sees them padded, (B, Q). Shared by the
    whole model and by pipeline stages, which run a layer range over the same plan."""
    device = cache.k.device
    B, Q = len(plan), max(len(s.tokens) for s in plan)
    tokens, positions, slots, pad_index = [], [], [], []  # (N,) each, as Python lists
    contexts, lengths = [], []
    tree_mask = None  # (B, Q, Q) on the host once some sequence is not a causal chain
    for b, s in enumerate(plan):
        n = len(s.tokens)
        ctx = reserve_slots(cache, s.seq, n, sliding_window)
        if s.parents is None and s.mask is None:  # a causal chain: the default mask
            positions.extend(range(ctx, ctx + n))
        else:
            mask = step_mask(s)  # (n, n)
            if tree_mask is None:
                tree_mask = np.tile(np.tri(Q, dtype=np.bool_), (B, 1, 1))  # (B, Q, Q) causal
            tree_mask[b, :n, :n] = mask
            positions.extend((ctx + mask.sum(-1) - 1).tolist())  # depth in the tree
        tokens.extend(s.tokens)
        slots.extend(cache.slots(s.seq, ctx, n))
        pad_index.extend(range(b * Q, b * Q + n))
        contexts.append(ctx)
        lengths.append(n)
    ids, pos, slot_mapping = device_tensor([tokens, positions, slots], device)  # (N,) each
    context_lens, new_lens = aligned_rows([contexts, lengths], device)  # (B,) each, one copy
    meta = AttentionMeta(
        slot_mapping=slot_mapping,
        block_tables=cache.block_tables([s.seq for s in plan]),
        context_lens=context_lens,
        new_lens=new_lens,
        tree_mask=None if tree_mask is None else to_device(torch.from_numpy(tree_mask), device),
        kernels=kernels,
        max_new=Q,
        pad_index=None if len(tokens) == B * Q else device_tensor(pad_index, device),
    )
    return StepInputs(ids, pos, meta, lengths)


def reserve_slots(cache: PagedKVCache, seq: Hashable, n: int, sliding_window: int | None) -> int:
    """Start `seq` in the cache if new, reserve `n` slots; return its prior length."""
    if seq not in cache.tables:
        cache.allocate(seq)
    ctx = cache.length(seq)
    if sliding_window is not None and ctx + n > sliding_window:
        raise ValueError(f"{seq!r}: {ctx + n} tokens exceed the sliding window {sliding_window}")
    cache.append_slots(seq, n)
    return ctx
