"""One transformer layer's token-level operators on one of `tensor_parallel` GPUs, as
Vidur profiles them (mlp.csv), and the per-GPU shapes attention works on.

Names follow Vidur's columns so a profile and the model can be compared op by op:
`attn_pre_proj` (the fused QKV GEMM), `attn_post_proj` (O), `mlp_up_proj` (gate and up,
fused), `mlp_down_proj`; elementwise `input_layernorm`, `attn_rope`,
`post_attention_layernorm`, `mlp_act`, `add` (one residual add, as Vidur counts it).
Megatron-style TP splits heads and the MLP's intermediate dimension over the GPUs; KV heads
fewer than the GPUs are replicated (as vLLM does).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.catalogs.models import ModelSpec


@dataclass(frozen=True)
class TokenOp:
    """A GEMM (`gemm` = (k, n) of its weight on one GPU) or an elementwise kernel of a
    `kind` (`ELEMENTWISE_KINDS`) moving `bytes_per_token` per token."""

    name: str
    gemm: tuple[int, int] | None = None
    bytes_per_token: float = 0.0
    kind: str = ""


@dataclass(frozen=True)
class LayerShape:
    """Per-GPU sizes of one layer of `model` at a TP degree, elements of `elem_bytes`."""

    q_heads: int
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    gated_mlp: bool
    vocab_shard: int  # LM-head rows on one GPU (vocabulary-parallel)
    elem_bytes: int

    @classmethod
    def of(cls, model: ModelSpec, tensor_parallel: int, elem_bytes: int) -> LayerShape:
        t = tensor_parallel
        return cls(
            q_heads=-(-model.num_attention_heads // t),
            kv_heads=max(model.num_kv_heads // t, 1),
            head_dim=model.head_dim,
            hidden=model.hidden_size,
            intermediate=-(-model.intermediate_size // t),
            gated_mlp=model.gated_mlp,
            vocab_shard=-(-model.vocab_size // t),
            elem_bytes=elem_bytes,
        )

    def token_ops(self) -> tuple[TokenOp, ...]:
        """The layer's token-level operators in Vidur's order (its `TOKEN_OPS`)."""
        h, i, d, e = self.hidden, self.intermediate, self.head_dim, self.elem_bytes
        qkv = (self.q_heads + 2 * self.kv_heads) * d
        up = (2 if self.gated_mlp else 1) * i
        rotated = (self.q_heads + self.kv_heads) * d
        return (
            self.norm("input_layernorm"),
            TokenOp("attn_pre_proj", gemm=(h, qkv)),
            # q and k rotated in place: read + write
            TokenOp("attn_rope", bytes_per_token=2.0 * rotated * e, kind="rope"),
            TokenOp("attn_post_proj", gemm=(self.q_heads * d, h)),
            self.norm("post_attention_layernorm"),
            TokenOp("mlp_up_proj", gemm=(h, up)),
            # read gate·up, write
            TokenOp("mlp_act", bytes_per_token=float(up + i) * e, kind="activation"),
            TokenOp("mlp_down_proj", gemm=(i, h)),
            # two reads, one write
            TokenOp("add", bytes_per_token=3.0 * h * e, kind="residual_add"),
        )

    def norm(self, name: str) -> TokenOp:
        """A norm over the hidden state: read + write."""
        return TokenOp(name, bytes_per_token=2.0 * self.hidden * self.elem_bytes, kind="norm")

    def embedding(self) -> TokenOp:
        """The embedding gather, once per step (Vidur's `emb`)."""
        return TokenOp("emb", bytes_per_token=2.0 * self.hidden * self.elem_bytes, kind="embedding")

    def lm_head(self) -> TokenOp:
        return TokenOp("lm_head", gemm=(self.hidden, self.vocab_shard))
