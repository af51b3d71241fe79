"""Build the request stream of a scenario: arrival times, prompt and output lengths.

Each random component draws from its own generator (`workbench.seeding.component_rng`), so
the arrival times do not move when a length distribution changes, and vice versa:

- "workload.arrival": arrival gaps
- "workload.prompt_tokens", "workload.output_tokens": separate length distributions
- "workload.trace_lengths": the row order of `lengths_from_trace` with `order: shuffle`
"""

from __future__ import annotations

import numpy as np

from workbench.scenario.workload import TraceLengths, WorkloadConfig
from workbench.seeding import component_rng
from workbench.workload.arrivals import sample_arrivals
from workbench.workload.lengths import sample_lengths
from workbench.workload.requests import Workload
from workbench.workload.traces import read_lengths


def generate_workload(config: WorkloadConfig, seed: int) -> Workload:
    """The scenario's requests: the same (config, seed) always gives the same arrays."""
    n = config.num_requests
    arrivals = sample_arrivals(config.arrival, n, component_rng(seed, "workload.arrival"))
    prompt_tokens, output_tokens = _lengths(config, n, seed)
    return Workload(
        arrival_s=arrivals.arrival_s,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        closed_loop_concurrency=arrivals.closed_loop_concurrency,
        think_time_s=arrivals.think_time_s,
    )


def _lengths(config: WorkloadConfig, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    if config.lengths_from_trace is not None:
        return trace_lengths(config.lengths_from_trace, n, seed)
    assert config.prompt_tokens is not None and config.output_tokens is not None  # validated
    prompt = sample_lengths(
        config.prompt_tokens,
        n,
        component_rng(seed, "workload.prompt_tokens"),
        field="workload.prompt_tokens",
    )
    output = sample_lengths(
        config.output_tokens,
        n,
        component_rng(seed, "workload.output_tokens"),
        field="workload.output_tokens",
    )
    return prompt, output


def trace_lengths(config: TraceLengths, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths of the same trace rows, clipped to the max_* limits.

    `sequential` takes rows 0, 1, ..., wrapping around after the last (so it lines up with a
    trace arrival replay of the same file). `shuffle` takes the rows in a seeded random
    order, a fresh permutation for every pass over the file: no row repeats before all have
    been used. Lengths in the file must be whole numbers >= 1 (the shipped traces have no
    zeros); anything else is an error naming the file, column and row, never patched.
    """
    prompt_all = read_lengths(config.path, config.prompt_column)  # (rows,)
    output_all = read_lengths(config.path, config.output_column)  # (rows,)
    rows = _row_order(config, len(prompt_all), n, seed)  # (n,)
    prompt, output = prompt_all[rows], output_all[rows]  # (n,), (n,)
    if config.max_prompt_tokens is not None:
        prompt = np.minimum(prompt, config.max_prompt_tokens)
    if config.max_output_tokens is not None:
        output = np.minimum(output, config.max_output_tokens)
    return prompt, output


def _row_order(config: TraceLengths, m: int, n: int, seed: int) -> np.ndarray:
    """Which of the file's m rows feed the n requests. # (n,)"""
    if config.order == "sequential":
        return np.arange(n) % m
    rng = component_rng(seed, "workload.trace_lengths")
    passes = -(-n // m)  # ceil(n / m)
    return np.concatenate([rng.permutation(m) for _ in range(passes)])[:n]
