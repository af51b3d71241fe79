"""Building blocks: RMSNorm, RoPE (positions per token), SwiGLU MLP, paged tree attention."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from kernels.dispatch import KernelSet
from real_backend.model.config import ModelArgs
from real_backend.model.inference_linear import InferenceLinear


@dataclass
class AttentionMeta:
    """Where this step's tokens live in the paged cache and what each may see."""

    slot_mapping: torch.Tensor  # (N,) int64 flat cache slot of each packed new token
    block_tables: torch.Tensor  # (B, max_blocks) int64
    context_lens: torch.Tensor  # (B,) cached tokens before the step
    new_lens: torch.Tensor  # (B,) new tokens in the step
    tree_mask: torch.Tensor | None  # (B, Q, Q) bool, [b, i, j]: new i sees new j; None: causal
    kernels: KernelSet  # the implementation of the cache write and the attention
    max_new: int  # Q, the most new tokens of any sequence
    pad_index: torch.Tensor | None  # (N,) row of each packed token in the (B*Q) padded layout;
    # None when every sequence has Q new tokens (packed and padded layouts coincide)

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """(N, ...) packed -> (B, Q, ...) padded with zeros (the attention kernels' layout)."""
        B, Q = self.new_lens.shape[0], self.max_new
        if self.pad_index is None:
            return x.view(B, Q, *x.shape[1:])
        padded = x.new_zeros(B * Q, *x.shape[1:])
        padded[self.pad_index] = x
        return padded.view(B, Q, *x.shape[1:])

    def unpad(self, x: torch.Tensor) -> torch.Tensor:
        """(B, Q, ...) padded -> (N, ...) packed."""
        flat = x.flatten(0, 1)
        return flat if self.pad_index is None else flat[self.pad_index]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:  # one op: x / rms(x) * weight
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        h = F.rms_norm(x.float(), x.shape[-1:], eps=self.eps)  # normalise in fp32, and round
        return self.weight * h.to(x.dtype)  # before the weight, as Hugging Face's Llama does


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """(head_dim / 2,) inverse frequencies, with linear or Llama-3 scaling."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    return _llama3_scaling(inv_freq, scaling, factor)


def _llama3_scaling(inv_freq: torch.Tensor, s: dict[str, Any], factor: float) -> torch.Tensor:
    """Llama 3.1: keep high frequencies, divide low ones by factor, blend the middle band."""
    low, high = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(
    positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (..., hd) for per-token positions (...)."""
    freqs = positions.float()[..., None] * inv_freq.float()  # (N, hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (N, hd)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (..., nh, hd); cos/sin (..., hd)."""
    cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # (..., 1, hd)
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        q_dim, kv_dim = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
        self.q_proj = nn.Linear(args.dim, q_dim, bias=args.qkv_bias)
        self.k_proj = nn.Linear(args.dim, kv_dim, bias=args.qkv_bias)
        self.v_proj = nn.Linear(args.dim, kv_dim, bias=args.qkv_bias)
        self.o_proj = nn.Linear(q_dim, args.dim, bias=args.o_bias)
        self.qkv: InferenceLinear | None = None  # set by fuse()
        self.out: InferenceLinear | None = None

    def fuse(self, prepack: bool) -> None:
        """One (q+2kv, D) matmul instead of three; q/k/v params become views (no copy)."""
        self.qkv = InferenceLinear(*fuse_linears([self.q_proj, self.k_proj, self.v_proj]), prepack)
        self.out = InferenceLinear(self.o_proj.weight, self.o_proj.bias, prepack)

    def project_qkv(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (N, nh, hd) and k (N, n_kv, hd) with RoPE applied, v (N, n_kv, hd)."""
        N = x.shape[0]
        nh, n_kv, hd = self.n_heads, self.n_kv_heads, self.head_dim
        if self.qkv is None:
            q = apply_rope(self.q_proj(x).view(N, nh, hd), cos, sin)
            k = apply_rope(self.k_proj(x).view(N, n_kv, hd), cos, sin)
            return q, k, self.v_proj(x).view(N, n_kv, hd)
        qkv = self.qkv(x).view(N, nh + 2 * n_kv, hd)  # (N, heads, hd)
        qk = apply_rope(qkv[:, : nh + n_kv], cos, sin)  # q and k heads rotated at once
        return qk[:, :nh], qk[:, nh:], qkv[:, nh + n_kv :]

    def forward(
        self,
        x: torch.Tensor,  # (N, D) the step's new tokens, packed
        cos: torch.Tensor,  # (N, hd)
        sin: torch.Tensor,  # (N, hd)
        k_cache: torch.Tensor,  # (num_blocks, block_size, n_kv, hd) this layer's cache
        v_cache: torch.Tensor,
        meta: AttentionMeta,
    ) -> torch.Tensor:  # (N, D)
        q, k, v = self.project_qkv(x, cos, sin)  # (N, nh | n_kv, hd)
        meta.kernels.write_kv(k_cache, v_cache, k, v, meta.slot_mapping)
        out = meta.kernels.paged_tree_attention(
            meta.pad(q),  # (B, Q, nh, hd)
            k_cache,
            v_cache,
            meta.block_tables,
            meta.context_lens,
            meta.new_lens,
            meta.tree_mask,
            self.head_dim**-0.5,
        )  # (B, Q, nh, hd)
        out_proj = self.o_proj if self.out is None else self.out
        return out_proj(meta.unpad(out).reshape(x.shape[0], self.n_heads * self.head_dim))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        self.gate_proj = nn.Linear(args.dim, args.intermediate_size, bias=args.mlp_bias)
        self.up_proj = nn.Linear(args.dim, args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.intermediate_size, args.dim, bias=args.mlp_bias)
        self.gate_up: InferenceLinear | None = None  # set by fuse()
        self.down: InferenceLinear | None = None

    def fuse(self, prepack: bool) -> None:
        self.gate_up = InferenceLinear(*fuse_linears([self.gate_proj, self.up_proj]), prepack)
        self.down = InferenceLinear(self.down_proj.weight, self.down_proj.bias, prepack)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_up is None or self.down is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # (N, I) each
        return self.down(F.silu(gate) * up)


def fuse_linears(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate linears' weights (and biases) along the output dim; the originals become
    views of the fused tensors, so state dicts and memory are unchanged."""
    weight = torch.cat([m.weight.detach() for m in linears])  # (sum out, in)
    has_bias = linears[0].bias is not None
    bias = torch.cat([m.bias.detach() for m in linears]) if has_bias else None
    start = 0
    for m in linears:
        end = start + m.out_features
        m.weight = nn.Parameter(weight[start:end], requires_grad=False)
        if bias is not None:
            m.bias = nn.Parameter(bias[start:end], requires_grad=False)
        start = end
    return weight, bias


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.self_attn = Attention(args)
        self.mlp = MLP(args)
        self.input_layernorm = RMSNorm(args.dim, args.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(args.dim, args.rms_norm_eps)

    def forward(self, x, cos, sin, k_cache, v_cache, meta: AttentionMeta) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache, meta)
        return h + self.mlp(self.post_attention_layernorm(h))
