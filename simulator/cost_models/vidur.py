"""Profile-backed cost model over Vidur's CSVs (times in ms, per operator, per single layer).

One step, as Vidur composes it (vidur/execution_time_predictor):
- token-level ops (mlp.csv: norms, QKV/O GEMMs, RoPE, MLP GEMMs and activation, residual
  add) at the step's token count rounded up to a multiple of 8;
- attention (attention.csv): each prefill chunk from (chunk size, cached tokens), the decode
  batch from (batch size, mean cached tokens per sequence), plus the reshape / KV-save ops
  the file profiles alongside;
- with TP > 1, two all-reduces per layer (after the O projection and after the MLP down
  projection) of tokens × n_embd × 2 bytes (all_reduce.csv);
- all of that × the model's layers, plus the embedding once and `step_overhead_ms`.

Between profiled points we interpolate linearly (bilinearly for attention) instead of
Vidur's random forests: exact at the grid, between the neighbours elsewhere. Below a grid's
first point the first value holds (launch-bound kernels do not get faster). Beyond its last
point we extrapolate linearly along the secant from the point nearest half the last
coordinate to the last point (`_tail_slope`): GEMMs, decode attention and large all-reduces
grow about linearly there, and the profiles are too noisy for the last two points to give a
slope (mlp.csv's last two token counts differ by 0.003 ms of 15.6). Prefill attention grows
faster than linearly in the chunk size, so chunks beyond the profiled 4096 are
underestimated. Vidur's own predictor also adds terms this model leaves to options, so a
scenario can price steps as Vidur does (`scenarios/vidur/`): 10 % more attention on GQA
models for a decode batch of more than one sequence and for several prefill chunks
(`gqa_batching_overhead: 0.1`), 0.02 ms of CPU launch per all-reduce
(`all_reduce_launch_ms`), and neither the embedding nor a step overhead (`embedding: false`,
`step_overhead_ms: 0`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from simulator.catalogs.models import ModelSpec
from simulator.cost_models.base import SplitCostModel, StepWork
from simulator.cost_models.profile_csv import (
    op_column,
    read_profile_table,
    select_rows,
    stat_column,
)
from workbench.errors import WorkbenchError
from workbench.scenario.system import VidurProfileCostConfig

# Per-layer token-level operators, summed in this fixed order. Missing columns count as 0,
# as in Vidur (not every profiled model has a post-attention norm).
TOKEN_OPS = (
    "input_layernorm",
    "attn_pre_proj",
    "attn_rope",
    "attn_post_proj",
    "post_attention_layernorm",
    "mlp_up_proj",
    "mlp_act",
    "mlp_down_proj",
    "add",
)
# Ops profiled with each attention row, added to the attention kernel when present.
ATTENTION_EXTRA_OPS = ("attn_input_reshape", "attn_output_reshape", "attn_kv_cache_save")

TOKEN_ROUNDING = 8  # Vidur prices `num_tokens` rounded up to a multiple of 8
ALL_REDUCE_BYTES_PER_ELEMENT = 2  # the profiles are fp16: a token's hidden state is 2·n_embd B


class VidurProfileCostModel(SplitCostModel):
    """Step times from Vidur-format operator profiles for one model at one TP degree."""

    def __init__(self, model: ModelSpec, cfg: VidurProfileCostConfig, tensor_parallel: int) -> None:
        self.model = model
        self.cfg = cfg
        self.tensor_parallel = tensor_parallel
        self._token_layer_ms, self._emb_ms = _load_token_ops(cfg, model, tensor_parallel)
        self._prefill_ms, self._decode_ms = _load_attention(cfg, model, tensor_parallel)
        self._all_reduce_ms = _load_all_reduce(cfg, tensor_parallel)
        self._overhead_ms = cfg.step_overhead_ms
        gqa = model.num_kv_heads < model.num_attention_heads
        self._batching_overhead = cfg.gqa_batching_overhead if gqa else 0.0
        # Token-level costs by rounded token count, filled on first use: a few hundred
        # distinct counts recur all run long, and each costs several numpy lookups.
        self._token_level_memo: dict[int, tuple[float, float]] = {}

    # ---------------------------------------------------------------- the two step shapes

    def _decode_times_s(
        self, batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
    ) -> np.ndarray:
        """Decode-only steps, one per context sum (Vidur prices the mean context: the
        longest does not matter): the only path for them, elementwise ops
        only, so `step_time_s` and `decode_span_s` agree bit for bit."""
        if batch_size == 0:
            return np.full(context_sums.shape, self._overhead_ms / 1000.0)
        b = float(batch_size)
        # Vidur's kv_cache_size is what is cached before the step: context minus the new token.
        mean_cached = (context_sums - b) / b
        attention_ms = self._decode_ms(np.float64(b), mean_cached) * self._batched(batch_size)
        fixed_layer_ms, once_ms = self._token_level_ms(batch_size)
        total_ms = (attention_ms + fixed_layer_ms) * float(self.model.num_layers) + once_ms
        return total_ms / 1000.0

    def _mixed_time_s(self, work: StepWork) -> float:
        chunks = np.array(work.prefill_chunk_tokens, dtype=np.float64)
        cached = np.array(work.prefill_context_tokens, dtype=np.float64)
        attention_ms = 0.0
        for value in self._prefill_ms(chunks, cached).tolist():
            attention_ms += value
        attention_ms *= self._batched(len(chunks))
        # Multi-token decodes as vLLM's batch expansion verifies them: each extra token one
        # more single-query decode (the profiles hold no multi-query decode attention); an
        # upper bound next to a kernel that reads each sequence's KV once.
        b = work.decode_batch_size + work.decode_extra_tokens
        if b > 0:
            keys = float(work.decode_context_sum + work.decode_extra_context_sum)
            mean_cached = (keys - b) / b
            decode_ms = float(self._decode_ms(np.float64(b), np.float64(mean_cached)))
            attention_ms += decode_ms * self._batched(b)
        fixed_layer_ms, once_ms = self._token_level_ms(work.num_tokens)
        total_ms = (attention_ms + fixed_layer_ms) * float(self.model.num_layers) + once_ms
        return total_ms / 1000.0

    def _batched(self, sequences: int) -> float:
        """Attention's factor for `sequences` batched together (Vidur's GQA overhead)."""
        return 1.0 + self._batching_overhead if sequences > 1 else 1.0

    def _token_level_ms(self, num_tokens: int) -> tuple[float, float]:
        """(per-layer token ops + all-reduces, once-per-step embedding + overhead) in ms."""
        rounded = -(-num_tokens // TOKEN_ROUNDING) * TOKEN_ROUNDING
        memo = self._token_level_memo.get(rounded)
        if memo is None:
            memo = self._token_level_memo[rounded] = self._token_level_lookup_ms(rounded)
        return memo

    def _token_level_lookup_ms(self, rounded: int) -> tuple[float, float]:
        tokens = np.float64(rounded)
        layer_ms = float(self._token_layer_ms(tokens))
        if self._all_reduce_ms is not None:
            size = np.float64(rounded * self.model.hidden_size * ALL_REDUCE_BYTES_PER_ELEMENT)
            layer_ms += 2.0 * (float(self._all_reduce_ms(size)) + self.cfg.all_reduce_launch_ms)
        embedding_ms = float(self._emb_ms(tokens)) if self.cfg.embedding else 0.0
        return layer_ms, embedding_ms + self._overhead_ms


# ------------------------------------------------------------------ interpolation


def _bracket(grid: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Segment index and position t in it: held at the first point (t ≥ 0), t > 1 beyond
    the last point (the last segment's line continues)."""
    held = np.maximum(x, grid[0])
    index = np.clip(np.searchsorted(grid, held, side="right") - 1, 0, len(grid) - 2)
    low = grid[index]
    return index, (held - low) / (grid[index + 1] - low)


@dataclass(frozen=True)
class Curve:
    """A piecewise-linear y(x) over a profiled grid (strictly increasing x, 2+ points)."""

    x: np.ndarray
    y: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        i, t = _bracket(self.x, x)
        # (1 − t)·y0 + t·y1 is exact at both grid points (t = 0 or 1).
        return (1.0 - t) * self.y[i] + t * self.y[i + 1]


@dataclass(frozen=True)
class Grid:
    """Bilinear z(row, col) over a rectangular grid (2+ points on each axis)."""

    rows: np.ndarray
    cols: np.ndarray
    values: np.ndarray  # (len(rows), len(cols))

    def __call__(self, row: np.ndarray, col: np.ndarray) -> np.ndarray:
        i, ti = _bracket(self.rows, row)
        j, tj = _bracket(self.cols, col)
        v = self.values
        low = (1.0 - tj) * v[i, j] + tj * v[i, j + 1]
        high = (1.0 - tj) * v[i + 1, j] + tj * v[i + 1, j + 1]
        return (1.0 - ti) * low + ti * high


def _tail_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Slope for extrapolating beyond x[-1] (y may be 2-D: one curve per row): the secant
    from the grid point nearest x[-1] / 2 to the last one, never negative (more work does
    not take less time)."""
    half = min(int(np.abs(x[:-1] - x[-1] / 2).argmin()), len(x) - 2)
    return np.maximum((y[..., -1] - y[..., half]) / (x[-1] - x[half]), 0.0)


def _extended(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Append a far point on the tail line, so that the last segment's linear formula
    extrapolates along `_tail_slope` (for y 2-D, along its last axis)."""
    far = 2.0 * x[-1]
    y_far = y[..., -1] + _tail_slope(x, y) * (far - x[-1])
    return np.append(x, far), np.concatenate([y, y_far[..., None]], axis=-1)


def curve_from_points(
    points: dict[float, list[float]], source: str = "", what: str = "a profile"
) -> Curve:
    """A curve from profiled points, repeated measurements averaged."""
    xs = sorted(points)
    if len(xs) < 2:
        raise WorkbenchError(f"needs at least 2 profiled points for {what}", source=source)
    ys = [sum(points[x]) / len(points[x]) for x in xs]
    return Curve(*_extended(np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64)))


def _grid(points: dict[tuple[float, float], list[float]], source: str, what: str) -> Grid:
    """A rectangular grid from scattered (row, col) points. A row profiled on fewer columns
    (prefill: chunk + cached ≤ max_model_len) is filled along its own curve, held below its
    first column and extended linearly beyond its last, so bilinear lookups see each row's
    piecewise-linear profile."""
    by_row: dict[float, dict[float, list[float]]] = defaultdict(dict)
    for (row, col), values in points.items():
        by_row[row][col] = values
    rows = sorted(by_row)
    cols = np.array(sorted({col for row, col in points}), dtype=np.float64)
    if len(rows) < 2 or len(cols) < 2:
        raise WorkbenchError(f"needs at least a 2×2 grid of points for {what}", source=source)
    filled = np.array([_fill_row(by_row[row], cols) for row in rows])
    cols, filled = _extended(cols, filled)  # beyond the last column, per row
    row_keys, filled_t = _extended(np.array(rows, dtype=np.float64), filled.T)
    return Grid(row_keys, cols, np.ascontiguousarray(filled_t.T))  # beyond the last row


def _fill_row(points: dict[float, list[float]], cols: np.ndarray) -> np.ndarray:
    """One row's profile at every grid column (its own curve, held / extended)."""
    if len(points) == 1:
        (values,) = points.values()
        return np.full(len(cols), sum(values) / len(values))
    return curve_from_points(points, "", "")(cols)


# ------------------------------------------------------------------ CSV loading


def _model_keys(model: ModelSpec, heads_key: str) -> dict[str, int]:
    return {
        heads_key: model.num_attention_heads,
        "n_kv_head": model.num_kv_heads,
        "n_embd": model.hidden_size,
    }


def _load_token_ops(
    cfg: VidurProfileCostConfig, model: ModelSpec, tensor_parallel: int
) -> tuple[Curve, Curve]:
    """(per-layer sum of TOKEN_OPS, embedding) against num_tokens."""
    stats = [stat_column(op, cfg.statistic) for op in (*TOKEN_OPS, "emb")]
    keys = ["n_head", "n_kv_head", "n_embd", "n_expanded_embd", "num_tokens"]
    keys.append("num_tensor_parallel_workers")
    table = read_profile_table(cfg.mlp_csv, "cost_model.mlp_csv", keys, stats)
    model_keys = _model_keys(model, "n_head") | {"n_expanded_embd": model.intermediate_size}
    table = select_rows(table, model_keys, f"model {model.name}")
    table = select_rows(table, {"num_tensor_parallel_workers": tensor_parallel}, "this TP degree")
    tokens = table.numbers("num_tokens")
    layer = np.zeros(len(table))
    for op in TOKEN_OPS:
        layer = layer + op_column(table, stat_column(op, cfg.statistic))
    emb = op_column(table, stat_column("emb", cfg.statistic))
    return (
        curve_from_points(_group(tokens, layer), table.source, "token ops"),
        curve_from_points(_group(tokens, emb), table.source, "emb"),
    )


def _group(x: np.ndarray, y: np.ndarray) -> dict[float, list[float]]:
    points: dict[float, list[float]] = defaultdict(list)
    for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
        points[xi].append(yi)
    return points


def _load_attention(
    cfg: VidurProfileCostConfig, model: ModelSpec, tensor_parallel: int
) -> tuple[Grid, Grid]:
    """(prefill by (chunk, cached), decode by (batch size, cached per sequence))."""
    s = cfg.statistic
    keys = ["n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers"]
    keys += ["batch_size", "prefill_chunk_size", "kv_cache_size"]
    table = read_profile_table(
        cfg.attention_csv,
        "cost_model.attention_csv",
        [*keys, stat_column("attn_prefill", s), stat_column("attn_decode", s)],
        [stat_column(op, s) for op in ATTENTION_EXTRA_OPS],
    )
    table = select_rows(table, _model_keys(model, "n_q_head"), f"model {model.name}")
    table = select_rows(table, {"num_tensor_parallel_workers": tensor_parallel}, "this TP degree")
    extra = np.zeros(len(table))
    for op in ATTENTION_EXTRA_OPS:
        extra = extra + op_column(table, stat_column(op, s))
    chunk = table.numbers("prefill_chunk_size")
    cached = table.numbers("kv_cache_size")
    is_decode = chunk == 0  # as Vidur decides it
    prefill = table.numbers(stat_column("attn_prefill", s)) + extra
    decode = table.numbers(stat_column("attn_decode", s)) + extra
    return (
        _grid(_group2(chunk, cached, prefill, ~is_decode), table.source, "attn_prefill"),
        _grid(
            _group2(table.numbers("batch_size"), cached, decode, is_decode),
            table.source,
            "attn_decode",
        ),
    )


def _group2(
    rows: np.ndarray, cols: np.ndarray, values: np.ndarray, mask: np.ndarray
) -> dict[tuple[float, float], list[float]]:
    points: dict[tuple[float, float], list[float]] = defaultdict(list)
    keep = mask & ~np.isnan(values)
    for r, c, v in zip(
        rows[keep].tolist(), cols[keep].tolist(), values[keep].tolist(), strict=True
    ):
        points[(r, c)].append(v)
    return points


def _load_all_reduce(cfg: VidurProfileCostConfig, tensor_parallel: int) -> Curve | None:
    """All-reduce time against message bytes, for TP workers all in one node (as Vidur)."""
    if tensor_parallel == 1:
        return None
    if cfg.all_reduce_csv is None:
        raise WorkbenchError(
            f"tensor_parallel {tensor_parallel} needs an all_reduce.csv profile",
            field="cost_model.all_reduce_csv",
        )
    stat = stat_column("all_reduce", cfg.statistic)
    table = read_profile_table(
        cfg.all_reduce_csv,
        "cost_model.all_reduce_csv",
        ["num_workers", "devices_per_node", "size", stat],
        ["collective"],
    )
    if "collective" in table.columns:
        is_all_reduce = np.array([c == "all_reduce" for c in table.columns["collective"]])
        table = table.keep(is_all_reduce)
    workers = {"num_workers": tensor_parallel, "devices_per_node": tensor_parallel}
    table = select_rows(table, workers, "this TP degree within one node")
    points = _group(table.numbers("size"), table.numbers(stat))
    return curve_from_points(points, table.source, "all_reduce")
