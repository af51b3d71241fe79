"""Model catalog: Llama-family shapes, their sizes and FLOPs, and Hugging Face config parsing."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from simulator.catalogs.suggest import unknown_name_message
from workbench.errors import WorkbenchError
from workbench.scenario.system import ModelConfig

_DTYPE_BYTES: MappingProxyType[str, int] = MappingProxyType(
    {"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1}
)


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a weight/KV dtype."""
    size = _DTYPE_BYTES.get(dtype)
    if size is None:
        known = ", ".join(_DTYPE_BYTES)
        raise WorkbenchError(f"unknown dtype {dtype!r} (known: {known})", field="model.dtype")
    return size


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer of the Llama family (RMSNorm, RoPE, GQA, SwiGLU MLP).

    Biases (Qwen2's QKV bias) and norm weights are tiny next to the matrices; only the
    norms are counted in `num_params`.
    """

    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    gated_mlp: bool = True
    max_position_embeddings: int = 4096

    # ---------------------------------------------------------------- parameter counts

    @property
    def attention_params_per_layer(self) -> int:
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size

    @property
    def mlp_params_per_layer(self) -> int:
        matrices = 3 if self.gated_mlp else 2  # gate, up, down (or up, down)
        return matrices * self.hidden_size * self.intermediate_size

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of the layer's GEMMs (QKV, O, MLP): what every token multiplies through."""
        return self.attention_params_per_layer + self.mlp_params_per_layer

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """Separate LM-head weights (zero when tied to the embedding table)."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def non_embedding_params(self) -> int:
        """Transformer-layer GEMM weights (what `2 × params × tokens` FLOPs counts)."""
        return self.num_layers * self.linear_params_per_layer

    @property
    def num_params(self) -> int:
        norms = (2 * self.num_layers + 1) * self.hidden_size  # two per layer + final
        return self.non_embedding_params + norms + self.embedding_params + self.lm_head_params

    # ---------------------------------------------------------------- bytes

    def weight_bytes(self, dtype_bytes: int) -> int:
        return self.num_params * dtype_bytes

    def streamed_weight_bytes(self, dtype_bytes: int) -> int:
        """Weights a forward pass reads in full: all but an untied embedding table, of which
        only the rows of the step's tokens are gathered."""
        untied_embedding = 0 if self.tie_word_embeddings else self.embedding_params
        return (self.num_params - untied_embedding) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """K and V of one token over all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    # ---------------------------------------------------------------- FLOPs

    @property
    def linear_flops_per_token(self) -> int:
        """Multiply-adds through every layer's GEMMs, 2 FLOPs each."""
        return 2 * self.non_embedding_params

    @property
    def lm_head_flops_per_token(self) -> int:
        """The vocabulary projection, paid only by tokens whose logits are needed."""
        return 2 * self.vocab_size * self.hidden_size

    @property
    def attention_flops_per_query_key(self) -> int:
        """QKᵀ and PV for one (query, key) pair over all layers and heads: 2 × 2 × d per head."""
        return 4 * self.num_layers * self.num_attention_heads * self.head_dim

    def prefill_attention_flops(self, chunk_tokens: int, cached_tokens: int) -> float:
        """A chunk of `c` new tokens over `p` cached ones: c·p + c²/2 query-key pairs (causal)."""
        pairs = chunk_tokens * (cached_tokens + chunk_tokens / 2)
        return self.attention_flops_per_query_key * pairs

    def decode_attention_flops(self, context_sum: int) -> int:
        """One query per decoding sequence against its whole KV."""
        return self.attention_flops_per_query_key * context_sum


# Shapes from each model's public Hugging Face config.json.
_CATALOG: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # meta-llama/Llama-2-7b-hf
        ModelSpec("llama-2-7b", 32, 4096, 11008, 32, 32, 128, 32000, False, True, 4096),
        # meta-llama/Llama-2-13b-hf
        ModelSpec("llama-2-13b", 40, 5120, 13824, 40, 40, 128, 32000, False, True, 4096),
        # meta-llama/Llama-2-70b-hf
        ModelSpec("llama-2-70b", 80, 8192, 28672, 64, 8, 128, 32000, False, True, 4096),
        # meta-llama/Meta-Llama-3-8B
        ModelSpec("llama-3-8b", 32, 4096, 14336, 32, 8, 128, 128256, False, True, 8192),
        # meta-llama/Meta-Llama-3-70B
        ModelSpec("llama-3-70b", 80, 8192, 28672, 64, 8, 128, 128256, False, True, 8192),
        # meta-llama/Llama-3.2-1B (tied embeddings; a draft for the Llama-3 family)
        ModelSpec("llama-3.2-1b", 16, 2048, 8192, 32, 8, 64, 128256, True, True, 131072),
        # mistralai/Mistral-7B-v0.1 (sliding window 4096 not modelled)
        ModelSpec("mistral-7b", 32, 4096, 14336, 32, 8, 128, 32000, False, True, 32768),
        # Qwen/Qwen2-7B
        ModelSpec("qwen2-7b", 28, 3584, 18944, 28, 4, 128, 152064, False, True, 131072),
        # lmsys/vicuna-{7b,13b,33b}-v1.3 (LLaMA-1 shapes; Spec-Bench's targets)
        ModelSpec("vicuna-7b", 32, 4096, 11008, 32, 32, 128, 32000, False, True, 2048),
        ModelSpec("vicuna-13b", 40, 5120, 13824, 40, 40, 128, 32000, False, True, 2048),
        ModelSpec("vicuna-33b", 60, 6656, 17920, 52, 52, 128, 32000, False, True, 2048),
        # double7/vicuna-68m (Spec-Bench's draft for speculative sampling)
        ModelSpec("vicuna-68m", 2, 768, 3072, 12, 12, 64, 32000, False, True, 2048),
    )
}

MODEL_CATALOG: MappingProxyType[str, ModelSpec] = MappingProxyType(_CATALOG)


def get_model(name: str) -> ModelSpec:
    """The catalog entry for `name`; unknown names get a did-you-mean."""
    spec = MODEL_CATALOG.get(name)
    if spec is not None:
        return spec
    message = unknown_name_message("model", name, MODEL_CATALOG)
    raise WorkbenchError(f"{message}; or give model.config_path", field="model.name")


def resolve_model(cfg: ModelConfig) -> ModelSpec:
    """The scenario's model: its config.json when given (named by `cfg.name`), else the catalog."""
    if cfg.config_path is not None:
        return model_from_hf_config(cfg.config_path, name=cfg.name)
    return get_model(cfg.name)


# ------------------------------------------------------------------ Hugging Face config.json


def model_from_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a Llama/Mistral/Qwen2-style `config.json` (the file or its folder)."""
    file = Path(path)
    if file.is_dir():
        file = file / "config.json"
    source = str(file)
    data = _read_json(file)
    num_heads = _int_key(data, "num_attention_heads", source)
    hidden = _int_key(data, "hidden_size", source)
    head_dim = data.get("head_dim") or hidden // num_heads
    return ModelSpec(
        name=name or str(data.get("_name_or_path") or file.parent.name),
        num_layers=_int_key(data, "num_hidden_layers", source),
        hidden_size=hidden,
        intermediate_size=_int_key(data, "intermediate_size", source),
        num_attention_heads=num_heads,
        num_kv_heads=_int_key(data, "num_key_value_heads", source, default=num_heads),
        head_dim=_as_int(head_dim, "head_dim", source),
        vocab_size=_int_key(data, "vocab_size", source),
        tie_word_embeddings=bool(data.get("tie_word_embeddings", False)),
        gated_mlp=True,
        max_position_embeddings=_int_key(data, "max_position_embeddings", source, default=4096),
    )


def _read_json(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise WorkbenchError(
            "file not found (expected a Hugging Face config.json)", source=str(file)
        )
    try:
        data = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WorkbenchError(f"malformed JSON ({exc})", source=str(file)) from None
    if not isinstance(data, dict):
        raise WorkbenchError("expected a JSON object of model settings", source=str(file))
    return data


def _int_key(data: dict[str, Any], key: str, source: str, default: int | None = None) -> int:
    value = data.get(key)
    if value is None:
        if default is None:
            raise WorkbenchError("required key is missing", source=source, field=key)
        return default
    return _as_int(value, key, source)


def _as_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WorkbenchError(
            f"expected a positive integer, got {value!r}", source=source, field=key
        )
    return value
