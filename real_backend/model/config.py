"""ModelArgs: the shape of a Llama-family model, read from a Hugging Face config.json."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

# architecture -> model_type
SUPPORTED = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}
ROPE_TYPES = ("default", "linear", "llama3")


@dataclass
class ModelArgs:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None  # {"rope_type": "llama3"|"linear", ...}
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    sliding_window: int | None = None  # not applied: steps longer than it are refused
    max_position_embeddings: int = 2048
    architecture: str = "LlamaForCausalLM"
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_hf_config(cls, cfg: dict[str, Any], source: str | None = None) -> ModelArgs:
        """Read a Hugging Face config dict (transformers 4.x or 5.x layout)."""
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED), None)
        if arch is None:
            model_type = cfg.get("model_type")
            arch = next((a for a, t in SUPPORTED.items() if t == model_type), None)
            if arch is None or archs:
                raise WorkbenchError(
                    f"unsupported architecture {archs or model_type!r}; "
                    f"supported: {', '.join(SUPPORTED)}",
                    source=source,
                    field="architectures",
                )

        def need(key: str) -> Any:
            if key not in cfg:
                raise WorkbenchError(f"missing key {key!r}", source=source, field=key)
            return _positive(cfg[key], key, source)

        def optional(key: str) -> int | None:  # absent or null: the caller's default
            return None if cfg.get(key) is None else _positive(cfg[key], key, source)

        dim, n_heads = int(need("hidden_size")), int(need("num_attention_heads"))
        head_dim = optional("head_dim") or dim // n_heads
        hidden_act = cfg.get("hidden_act", "silu")
        if hidden_act != "silu":
            raise WorkbenchError(
                f"unsupported hidden_act {hidden_act!r}, expected 'silu'",
                source=source,
                field="hidden_act",
            )
        rope_theta, rope_scaling = _rope(cfg, source)
        is_qwen2 = SUPPORTED[arch] == "qwen2"
        attention_bias = bool(cfg.get("attention_bias", False))
        sliding = cfg.get("sliding_window")
        if is_qwen2 and not cfg.get("use_sliding_window", False):
            sliding = None
        return cls(
            vocab_size=int(need("vocab_size")),
            dim=dim,
            n_layers=int(need("num_hidden_layers")),
            n_heads=n_heads,
            n_kv_heads=optional("num_key_value_heads") or n_heads,
            head_dim=int(head_dim),
            intermediate_size=int(need("intermediate_size")),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=True if is_qwen2 else attention_bias,
            o_bias=False if is_qwen2 else attention_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            sliding_window=int(sliding) if sliding else None,
            max_position_embeddings=optional("max_position_embeddings") or 2048,
            architecture=arch,
        )

    @property
    def context_tokens(self) -> int:
        """The longest sequence (prompt + output) the model has positions for.

        transformers enforces no limit; its configs state it in `max_position_embeddings`.
        llama3 scaling (like yarn and longrope) keeps the pre-training length apart, in
        `original_max_position_embeddings` (transformers warns unless it is the smaller), so
        `max_position_embeddings` already is the extended context. Linear scaling
        (position interpolation) has no such key: `factor` divides every position, so the
        model serves `factor` times `max_position_embeddings`, as transformers documents
        (factor x handles x times the pre-training length) and vLLM derives max_model_len.
        """
        if self.rope_scaling is not None and self.rope_scaling["rope_type"] == "linear":
            return int(self.max_position_embeddings * float(self.rope_scaling["factor"]))
        return self.max_position_embeddings

    @classmethod
    def from_folder(cls, folder: str | Path) -> ModelArgs:
        path = Path(folder) / "config.json"
        if not path.is_file():
            raise WorkbenchError("no config.json in checkpoint folder", source=str(folder))
        try:
            cfg = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise WorkbenchError(f"invalid JSON: {exc}", source=str(path)) from exc
        if not isinstance(cfg, dict):
            raise WorkbenchError("expected a JSON object (a model's config)", source=str(path))
        return cls.from_hf_config(cfg, source=str(path))


def _rope(cfg: dict[str, Any], source: str | None) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, scaling) from ``rope_parameters`` (transformers 5) or ``rope_scaling``."""
    params = dict(cfg.get("rope_parameters") or {})
    scaling = dict(cfg.get("rope_scaling") or params)
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        raise WorkbenchError(
            f"unsupported rope type {rope_type!r}; supported: {', '.join(ROPE_TYPES)}",
            source=source,
            field="rope_scaling",
        )
    if rope_type == "default":
        return theta, None
    scaling.pop("rope_theta", None)
    scaling["rope_type"] = rope_type
    return theta, scaling


def _positive(value: Any, key: str, source: str | None) -> int:
    """A size (layers, heads, widths, vocabulary): a whole number above 0."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    finite = number and (isinstance(value, int) or math.isfinite(value))
    if not finite or value < 1 or value != int(value):
        message = f"expected a positive integer, got {value!r}"
        raise WorkbenchError(message, source=source, field=key)
    return int(value)
