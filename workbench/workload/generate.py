"""Build the request stream of a scenario: arrival times, prompt and output lengths.

Each random component draws from its own generator (`workbench.seeding.component_rng`), so
the arrival times do not move when a length distribution changes, and vice versa:

- "workload.arrival": arrival gaps
- "workload.prompt_tokens", "workload.output_tokens": separate length distributions
- "workload.trace_lengths": the row order of `lengths_from_trace` with `order: shuffle`
- "workload.prompt_order": the question order of `prompts` with `order: shuffle`
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.scenario import Scenario
from workbench.scenario.workload import LengthConfig, TraceLengths, WorkloadConfig
from workbench.seeding import component_rng
from workbench.workload.arrivals import sample_arrivals
from workbench.workload.lengths import sample_lengths
from workbench.workload.prompts import draw_prompts
from workbench.workload.requests import Workload
from workbench.workload.traces import read_lengths, read_ranked_rows


def workload_for(scenario: Scenario) -> Workload:
    """The scenario's requests, real prompts tokenized by its model's tokenizer.

    The model's folder is `model.config_path` (the runner's `with_model_source` points it at
    a zoo model's checkpoint), a folder or its config.json.
    """
    path = scenario.model.config_path
    folder = None if path is None else (path if path.is_dir() else path.parent)
    return generate_workload(scenario.workload, scenario.seed, tokenizer=folder)


def generate_workload(config: WorkloadConfig, seed: int, tokenizer: Path | None = None) -> Workload:
    """The scenario's requests: the same (config, seed) always gives the same arrays.

    `tokenizer` is the model's tokenizer folder, read only for `prompts` (None: it has none).
    """
    n = config.num_requests
    check_memory(n)
    arrivals = sample_arrivals(config.arrival, n, component_rng(seed, "workload.arrival"))
    prompts = None
    if config.prompts is not None:
        prompts = draw_prompts(config.prompts, n, seed, tokenizer)
        prompt_tokens = np.array([len(ids) for ids in prompts.ids], dtype=np.int64)
        output_tokens = _sampled(config.output_tokens, n, seed, "workload.output_tokens")
    else:
        prompt_tokens, output_tokens = _lengths(config, n, seed)
    return Workload(
        arrival_s=arrivals.arrival_s,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        closed_loop_concurrency=arrivals.closed_loop_concurrency,
        think_time_s=arrivals.think_time_s,
        prompt_ids=prompts.ids if prompts is not None else None,
        category=prompts.category if prompts is not None else None,
        oracle_tokens=_oracle(config, n, seed),
    )


# A simulated run peaks at about 0.9 KB per request (quickstart, 200,000 requests: workload
# columns, scheduler state, records, metrics; measured with tracemalloc); 1 KiB is the bound.
BYTES_PER_REQUEST = 1024


def check_memory(num_requests: int) -> None:
    """Refuse a workload whose run cannot fit in this machine's memory, before allocating."""
    need = num_requests * BYTES_PER_REQUEST
    have = physical_memory_bytes()
    if have is not None and need > have:
        raise WorkbenchError(
            f"{num_requests:,} requests need about {_human(need)} of memory (about 1 KiB each "
            f"for the workload, scheduler state and records); this machine has {_human(have)}",
            field="workload.num_requests",
        )


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: no check
        return None


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} PiB"


def _lengths(config: WorkloadConfig, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if config.lengths_from_trace is not None:
        prompt, output = trace_lengths(config.lengths_from_trace, n, seed)
        if prompt is None:  # a trace of outputs only
            prompt = _sampled(config.prompt_tokens, n, seed, "workload.prompt_tokens")
        return prompt, output
    prompt = _sampled(config.prompt_tokens, n, seed, "workload.prompt_tokens")
    return prompt, _sampled(config.output_tokens, n, seed, "workload.output_tokens")


def _sampled(config: LengthConfig | None, n: int, seed: int, name: str) -> np.ndarray:
    """n lengths from a distribution; `name` is its generator and its field. # (n,)"""
    assert config is not None  # WorkloadConfig's validator requires it here
    return sample_lengths(config, n, component_rng(seed, name), field=name)


def _oracle(config: WorkloadConfig, n: int, seed: int) -> np.ndarray | None:
    trace = config.lengths_from_trace
    if trace is None or not trace.oracle_columns:
        return None
    rows = trace_rows(trace, n, seed)  # (n,)
    columns = [read_lengths(trace.path, c)[rows] for c in trace.oracle_columns]
    return np.max(columns, axis=0)  # (n,)


def trace_lengths(config: TraceLengths, n: int, seed: int) -> tuple[np.ndarray | None, np.ndarray]:
    """Prompt (None without a prompt column) and output lengths of the same trace rows,
    clipped to the max_* limits.

    `sequential` takes rows 0, 1, ..., wrapping around after the last (so it lines up with a
    trace arrival replay of the same file). `shuffle` takes the rows in a seeded random
    order, a fresh permutation for every pass over the file: no row repeats before all have
    been used. Lengths in the file must be whole numbers >= 1 (the shipped traces have no
    zeros); anything else is an error naming the file, column and row, never patched.
    With a `rank_column` only the ranked rows are used, in rank order.
    """
    rows = trace_rows(config, n, seed)  # (n,)
    if config.prompt_column is None:
        return None, _clipped_lengths(config)[1][rows]
    prompt, output = _clipped_lengths(config)
    return prompt[rows], output[rows]


def _clipped_lengths(config: TraceLengths) -> tuple[np.ndarray, np.ndarray]:
    """Every row's prompt (zeros without a prompt column) and output, clipped. # (m,), (m,)"""
    output = _scaled(read_lengths(config.path, config.output_column), config.output_scale)
    if config.max_output_tokens is not None:
        output = np.minimum(output, config.max_output_tokens)
    if config.prompt_column is None:
        return np.zeros_like(output), output
    prompt = _scaled(read_lengths(config.path, config.prompt_column), config.prompt_scale)
    if config.max_prompt_tokens is not None:
        prompt = np.minimum(prompt, config.max_prompt_tokens)
    if config.max_total_tokens is not None and config.over_total != "drop":
        prompt, output = fit_total(prompt, output, config.max_total_tokens, config.over_total)
    return prompt, output


def _scaled(lengths: np.ndarray, scale: float) -> np.ndarray:
    """(m,) lengths × scale, rounded half to even, at least 1; unchanged at 1."""
    if scale == 1.0:
        return lengths
    return np.maximum(np.rint(lengths * scale).astype(np.int64), 1)


def fit_total(
    prompt: np.ndarray, output: np.ndarray, limit: int, rule: str
) -> tuple[np.ndarray, np.ndarray]:
    """Rows cut to at most `limit` tokens of prompt + output. # (m,), (m,)"""
    total = prompt + output
    excess = np.maximum(total - limit, 0)
    if rule == "proportional":  # Vidur: each side gives up its share of the excess, rounded up
        prompt = np.maximum(prompt - np.ceil(excess * (prompt / total)).astype(np.int64), 1)
        output = np.maximum(output - np.ceil(excess * (output / total)).astype(np.int64), 1)
        return prompt, output
    output = np.minimum(output, limit - 1)  # clip_prompt: the output stays while it can
    return np.maximum(np.minimum(prompt, limit - output), 1), output


def trace_rows(config: TraceLengths, n: int, seed: int) -> np.ndarray:
    """The file rows feeding the n requests: all rows, or the ranked ones in rank order, less
    those over `max_total_tokens` when they are dropped. # (n,)"""
    if config.rank_column is not None:
        candidates = read_ranked_rows(config.path, config.rank_column)  # (k,)
    else:
        candidates = np.arange(len(read_lengths(config.path, config.output_column)))
    if config.max_total_tokens is not None and config.over_total == "drop":
        prompt, output = _clipped_lengths(config)
        candidates = candidates[(prompt + output)[candidates] <= config.max_total_tokens]
        if len(candidates) == 0:
            raise WorkbenchError(
                f"{config.path}: no row fits max_total_tokens={config.max_total_tokens}",
                field="workload.lengths_from_trace.max_total_tokens",
            )
    return candidates[_row_order(config, len(candidates), n, seed)]


def _row_order(config: TraceLengths, m: int, n: int, seed: int) -> np.ndarray:
    """Which of the file's m rows feed the n requests. # (n,)"""
    if config.order == "sequential":
        return np.arange(n) % m
    rng = component_rng(seed, "workload.trace_lengths")
    passes = -(-n // m)  # ceil(n / m)
    return np.concatenate([rng.permutation(m) for _ in range(passes)])[:n]
