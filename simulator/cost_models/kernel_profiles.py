"""Measured kernel times from Vidur-format profiles, as points the kernel model is fitted
on and checked against.

- mlp.csv: every token-level op's time (per layer, ms) by tokens in the step, for each model
  shape (its key columns) and TP degree in the file; a model's label is its folder name
  (Vidur's layout `compute/<gpu>/<org>/<model>/mlp.csv`).
- attention.csv: decode attention by (batch, cached tokens per sequence) and prefill attention
  by (chunk, cached tokens), plus the reshape / KV-save ops profiled with each row. Vidur
  ran `flash_attn_with_kvcache` over a cache of `max_model_len` slots per sequence (the
  width that sizes its split of the context). LLMServingSim's copy of the format
  (`layout="llmservingsim"`) means something else by two columns: its decode
  `kv_cache_size` is the keys of the whole batch (each sequence has kv_cache_size // batch),
  its prefill `kv_cache_size` the chunk's keys included, and its kernel
  `flash_attn_varlen_func` over contiguous keys, non-causal (its profiler,
  `profiler/attention/attention_profiler.py`, at the commit in `SOURCE_COMMIT.txt`, passes
  `True` as `softmax_scale`); the decode work split it shows is `flash_varlen`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.catalogs.models import ModelSpec
from simulator.cost_models.layer_ops import LayerShape, TokenOp
from simulator.cost_models.profile_csv import (
    ProfileTable,
    op_column,
    read_profile_table,
    stat_column,
)
from simulator.cost_models.vidur import ATTENTION_EXTRA_OPS, TOKEN_OPS

PROFILE_ELEM_BYTES = 2  # Vidur profiles fp16 / bf16 kernels
_SHAPE_KEYS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size")
_MLP_KEYS = [*_SHAPE_KEYS, "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"]
_ATTENTION_KEYS = ["n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers"]
_ATTENTION_KEYS += ["batch_size", "prefill_chunk_size", "kv_cache_size"]


@dataclass(frozen=True)
class OpPoints:
    """Measured times of one op of one model shape at one TP degree."""

    source: str
    model: str
    tensor_parallel: int
    spec: ModelSpec  # the profiled shape (one layer)
    op: TokenOp
    tokens: np.ndarray  # (n,) tokens in the step
    measured_s: np.ndarray  # (n,) per layer, repeated measurements averaged


@dataclass(frozen=True)
class AttentionPoints:
    """Measured attention of one model shape at one TP degree (per layer)."""

    source: str
    model: str
    tensor_parallel: int
    spec: ModelSpec  # the profiled attention shape (one layer)
    shape: LayerShape
    decode_kernel: str  # decode_attention.DECODE_KERNELS: the kernel the profile ran
    decode_batch: np.ndarray  # (d,)
    decode_cached: np.ndarray  # (d,) tokens cached per sequence before the step
    decode_table_keys: np.ndarray  # (d,) key slots per sequence the kernel was sized for
    decode_s: np.ndarray  # (d,)
    prefill_chunk: np.ndarray  # (p,) batch 1
    prefill_cached: np.ndarray  # (p,)
    prefill_s: np.ndarray  # (p,)
    prefill_causal: bool = True  # LLMServingSim's profiler ran its prefills without the mask


def model_label(path: Path) -> str:
    """Vidur's layout names the model by the file's folder."""
    return path.parent.name


def read_token_op_points(
    path: Path, statistic: str = "median", field: str = "mlp_csv"
) -> list[OpPoints]:
    """Every (model shape, TP degree, op) of a Vidur mlp.csv, points sorted by tokens."""
    stats = [stat_column(op, statistic) for op in (*TOKEN_OPS, "emb")]
    table = read_profile_table(path, field, _MLP_KEYS, stats)
    points: list[OpPoints] = []
    for key, rows in _groups(table, [*_SHAPE_KEYS, "num_tensor_parallel_workers"]).items():
        *shape_key, tp = key
        gated = {v.lower() for v in rows.columns["use_gated_mlp"]} != {"false"}
        spec = _model_of(model_label(path), shape_key, gated)
        shape = LayerShape.of(spec, int(tp), PROFILE_ELEM_BYTES)
        ops = {op.name: op for op in (*shape.token_ops(), shape.embedding())}
        tokens = rows.numbers("num_tokens")
        for name in (*TOKEN_OPS, "emb"):
            if stat_column(name, statistic) not in rows.columns:
                continue  # e.g. phi-2 has no post-attention norm
            x, y = _averaged(tokens, op_column(rows, stat_column(name, statistic)))
            label = model_label(path)
            points.append(OpPoints(table.source, label, int(tp), spec, ops[name], x, y / 1000.0))
    return points


def read_attention_points(
    path: Path, statistic: str = "median", field: str = "attention_csv", layout: str = "vidur"
) -> list[AttentionPoints]:
    """Every (model shape, TP degree) of a Vidur-format attention.csv (`layout`: "vidur", or
    "llmservingsim" for LLMServingSim's copy of the format, see the module docstring)."""
    s = statistic
    wanted = [stat_column("attn_prefill", s), stat_column("attn_decode", s)]
    extras = [stat_column(op, s) for op in ATTENTION_EXTRA_OPS]
    optional = [*wanted, *extras, "max_model_len", "is_prefill"]
    table = read_profile_table(path, field, _ATTENTION_KEYS, optional)
    read = _llmservingsim_rows if layout == "llmservingsim" else _vidur_rows
    out: list[AttentionPoints] = []
    for key, rows in _groups(table, _ATTENTION_KEYS[:4]).items():
        n_embd, q_heads, kv_heads, tp = (int(v) for v in key)
        label = path.parent.parent.name if layout == "llmservingsim" else model_label(path)
        head_dim = n_embd // q_heads
        spec = ModelSpec(label, 1, n_embd, 4 * n_embd, q_heads, kv_heads, head_dim, 1, False)
        shape = LayerShape.of(spec, tp, PROFILE_ELEM_BYTES)
        decode, prefill = read(rows, s, extras)
        causal = layout != "llmservingsim"
        out.append(AttentionPoints(table.source, label, tp, spec, shape, *decode, *prefill, causal))
    return out


_Decode = tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
_Prefill = tuple[np.ndarray, np.ndarray, np.ndarray]


def _vidur_rows(rows: ProfileTable, s: str, extras: list[str]) -> tuple[_Decode, _Prefill]:
    extra = sum((op_column(rows, c) for c in extras), np.zeros(len(rows)))
    chunk = rows.numbers("prefill_chunk_size")
    cached = rows.numbers("kv_cache_size")
    batch = rows.numbers("batch_size")
    decode_s = _value(rows, stat_column("attn_decode", s), extra)
    prefill_s = _value(rows, stat_column("attn_prefill", s), extra)
    decode = _finite(decode_s, chunk == 0)
    single = _finite(prefill_s, (chunk > 0) & (batch == 1))
    slots = rows.numbers("max_model_len") if "max_model_len" in rows.columns else cached + 1
    return (
        ("flash_decoding", batch[decode], cached[decode], slots[decode], decode_s[decode]),
        (chunk[single], cached[single], prefill_s[single]),
    )


def _llmservingsim_rows(rows: ProfileTable, s: str, extras: list[str]) -> tuple[_Decode, _Prefill]:
    chunk = rows.numbers("prefill_chunk_size")
    keys = rows.numbers("kv_cache_size")
    batch = rows.numbers("batch_size")
    prefill = np.char.lower(np.array(rows.columns["is_prefill"])) == "true"
    decode_s = rows.numbers(stat_column("attn_decode", s)) / 1000.0
    prefill_s = rows.numbers(stat_column("attn_prefill", s)) / 1000.0
    per_sequence = np.floor(keys / batch)
    decode = _finite(decode_s, ~prefill & (per_sequence >= 1))
    single = _finite(prefill_s, prefill & (batch == 1) & (keys >= chunk))
    return (
        ("flash_varlen", batch[decode], per_sequence[decode] - 1.0, per_sequence[decode],
         decode_s[decode]),
        (chunk[single], keys[single] - chunk[single], prefill_s[single]),
    )  # fmt: skip


def _value(rows: ProfileTable, column: str, extra: np.ndarray) -> np.ndarray:
    if column not in rows.columns:  # a profile of decodes alone, or of prefills alone
        return np.full(len(rows), np.nan)
    return (rows.numbers(column) + extra) / 1000.0


def _finite(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return mask & np.isfinite(values)


def _model_of(label: str, key: list[str], gated: bool) -> ModelSpec:
    heads, kv_heads, hidden, intermediate, vocab = (int(float(v)) for v in key)
    head_dim = hidden // heads
    return ModelSpec(label, 1, hidden, intermediate, heads, kv_heads, head_dim, vocab, False, gated)


def _groups(table: ProfileTable, keys: list[str]) -> dict[tuple[str, ...], ProfileTable]:
    """Rows by their values of `keys` (as written in the file), in file order."""
    values = [table.columns[k] for k in keys]
    labels = [tuple(str(int(float(v[i]))) for v in values) for i in range(len(table))]
    out: dict[tuple[str, ...], ProfileTable] = {}
    for label in dict.fromkeys(labels):
        mask = np.array([lab == label for lab in labels])
        out[label] = table.keep(mask)
    return out


def _averaged(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repeated x (a few token counts are profiled twice): their y averaged, x sorted."""
    keys, inverse = np.unique(x, return_inverse=True)
    sums = np.bincount(inverse, weights=y)
    counts = np.bincount(inverse)
    return keys, sums / counts
