"""The designed grid: short serving runs ("probes") whose steps cover what a cost model prices.

Each probe is a small workload served by the real engine. Together they cover:
- decode steps by batch size and total context (a batch of equal requests, all arriving at
  once: one prefill, then decode steps whose context grows by the batch size each step),
  and by the spread of contexts (a batch of prompts of uneven lengths: an attention kernel
  that groups or pads by length costs more for it than for equal contexts of the same sum);
- prefill steps by tokens (one request at a time), and chunks after cached context
  (chunked prefill of one long prompt);
- mixed steps (a closed loop of clients: new prompts join running decodes), with and
  without chunked prefill;
- verification widths (each decode computes `width` more tokens, as a speculative or
  lookahead step does), over short, long and uneven contexts;
- waking an idle engine (one client that thinks between requests: each prompt arrives at
  an engine that slept for the think time, after a spell of decoding);
- APAR's forks, for a model that has the fork tokens (`fork_probe.CuedForkProbe`: roots
  fork on cue, one request a step or several at once, over equal and uneven contexts).

Lengths are clipped to the model's context; a probe a model cannot hold is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.errors import WorkbenchError
from workbench.scenario.system import ContinuousBatchingConfig
from workbench.seeding import component_rng
from workbench.workload.requests import Workload

BLOCK_SIZE = 16
MAX_BATCHED_TOKENS = 4096  # a step's token budget (prompts beyond it wait: mixed steps)


@dataclass(frozen=True)
class Probe:
    name: str
    requests: int
    prompt_tokens: tuple[int, int]  # uniform on [low, high]
    output_tokens: tuple[int, int]
    max_batch_size: int
    concurrency: int | None = None  # closed loop of this many clients; None: all at t = 0
    chunk_size: int | None = None  # chunked prefill with this budget; None: whole prompts
    width: int = 0  # verification: tokens each decode computes beyond its one
    think_s: float = 0.0  # closed loop: a client's pause between its requests
    fork_every: int = 0  # APAR: each root forks every this many tokens (0: no forks)
    fork_branches: int = 4  # APAR: live branches of a request at most
    fork_together: int = 1  # APAR: roots that fork in the same step

    def workload(self, seed: int) -> Workload:
        rng = component_rng(seed, f"calibration.{self.name}")
        prompts = rng.integers(self.prompt_tokens[0], self.prompt_tokens[1] + 1, self.requests)
        outputs = rng.integers(self.output_tokens[0], self.output_tokens[1] + 1, self.requests)
        closed = self.concurrency is not None
        arrivals = np.full(self.requests, np.nan) if closed else np.zeros(self.requests)
        return Workload(
            arrivals,
            prompts.astype(np.int64),
            outputs.astype(np.int64),
            closed_loop_concurrency=self.concurrency,
            think_time_s=self.think_s,
        )

    def scheduler(self) -> ContinuousBatchingConfig:
        budget = self.chunk_size or max(MAX_BATCHED_TOKENS, self.prompt_tokens[1])
        return ContinuousBatchingConfig(
            kind="continuous",
            max_batch_size=self.max_batch_size,
            max_batched_tokens=budget,
            chunked_prefill=self.chunk_size is not None,
            chunk_size=self.chunk_size or 512,
        )

    def kv_blocks(self) -> int:
        """Room for every running sequence at its longest, with the width's slots (each
        branch of a forking request too: an upper bound, its prefix is shared)."""
        longest = self.prompt_tokens[1] + self.output_tokens[1] + self.width
        running = min(self.max_batch_size, self.concurrency or self.requests)
        if self.fork_every:
            running *= self.fork_branches
        return int(running * (-(-longest // BLOCK_SIZE) + 1) * 1.05) + 2

    def fits(self, context_tokens: int) -> bool:
        return self.prompt_tokens[1] + self.output_tokens[1] + self.width <= context_tokens


@dataclass(frozen=True)
class ProbeRun:
    """One serving of a probe: the grid serves each probe once per pass."""

    name: str  # the probe's name and its pass, e.g. decode-b8-p32@2
    probe: Probe
    seed: int


@dataclass(frozen=True)
class Grid:
    name: str
    description: str
    probes: tuple[Probe, ...]
    warmup: Probe  # served first and thrown away: allocations, prepacked weights, caches
    # Each probe is served once per pass, every other pass in reverse order, so that a slow
    # spell of a shared machine lands on different probes each time and averages out.
    passes: int = 1

    def runs(self) -> list[ProbeRun]:
        runs = []
        for index in range(self.passes):
            order = self.probes if index % 2 == 0 else self.probes[::-1]
            runs += [ProbeRun(f"{probe.name}@{index + 1}", probe, index) for probe in order]
        return runs


def _standard() -> Grid:
    probes: list[Probe] = []
    for batch in (1, 2, 4, 8, 16, 32, 64):
        for prompt in (32, 384):
            probes.append(
                Probe(f"decode-b{batch}-p{prompt}", batch, (prompt,) * 2, (48, 48), batch)
            )
    for batch in (4, 8, 16, 32):  # prompts of 16–640 tokens: the longest ~2× the mean
        probes.append(Probe(f"decode-spread-b{batch}", batch, (16, 640), (48, 48), batch))
    # And of 8-96 tokens, whose padding the grouped attention computes in one call for a
    # narrow model (`KernelSet.one_call_products`; under 1,024 padded query-keys at 8 heads x
    # 32, 64 at 32 x 128): priced by the key price, not s(B), since 2026-11-28
    # (served `apar-small` steps of ~50-token contexts were priced 8-19 % over at G > 0.3 by
    # the s(B) of the longer probes above); these probes measure that regime.
    for batch in (4, 8, 16, 32):
        probes.append(Probe(f"decode-spread-short-b{batch}", batch, (8, 96), (48, 48), batch))
    for prompt in (16, 32, 64, 128, 256, 512, 1024, 2048):
        probes.append(Probe(f"prefill-p{prompt}", 4, (prompt,) * 2, (2, 2), 1))
    for chunk in (64, 256, 1024):
        probes.append(Probe(f"chunked-c{chunk}", 2, (4 * chunk,) * 2, (2, 2), 1, chunk_size=chunk))
    for clients in (4, 16, 32):
        probes.append(Probe(f"mixed-b{clients}", 4 * clients, (16, 320), (8, 96), clients, clients))
    probes.append(Probe("mixed-b16-c128", 64, (16, 320), (8, 96), 16, 16, chunk_size=128))
    # Batches 2 and 4 since 2026-11-28: the verify curve runs over a step's tokens, and a
    # speculative step's two to four chains of 5 fell between one sequence of 9 and eight of
    # 16, where one probe's noise moved their price by 20 points (two profiles of an Intel
    # CPU 35 minutes apart: +12 to +26 % and −0.5 to +0.7 % on the same served steps).
    for width in (1, 2, 4, 8):
        for batch in (1, 2, 4, 8, 32):
            name = f"verify-w{width}-b{batch}"
            probes.append(Probe(name, batch, (64, 64), (24, 24), batch, width=width))
    # The same verifications over longer contexts: without them a verified token's keys
    # were never priced (the fit's a_verify came out 0, and the CPU twin of a speculative
    # run at contexts near 300 priced its target's forwards 44-48 % short, 2026-11-27).
    for width in (1, 4, 8):
        for batch in (1, 8):
            name = f"verify-w{width}-b{batch}-p384"
            probes.append(Probe(name, batch, (384, 384), (24, 24), batch, width=width))
    for batch in (8, 16):  # and over uneven contexts, as a loaded engine's batches are
        name = f"verify-w4-spread-b{batch}"
        probes.append(Probe(name, batch, (16, 640), (24, 24), batch, width=4))
    # APAR's forks: a step with one fork cost 0.9-1.5 ms more than a decode step of the same
    # batch on the Intel VM (served `apar-small`, 2026-11-28), more than its rows priced by
    # the verify curve. Steps of 1, 2, 3 and 8 forks among 1-32 sequences (1-8 roots, up to 4
    # branches each), over equal and uneven contexts; small batches the most (a fork step
    # there measured +0.6 to +1.7 ms over a decode step in one probe's three passes).
    for roots, together in ((1, 1), (2, 1), (2, 2), (4, 1), (4, 2), (8, 1), (8, 3), (8, 8)):
        name = f"fork-b{roots}-t{together}"
        probes.append(_fork_probe(name, roots, (64, 64), together))
    probes.append(_fork_probe("fork-spread-b8-t1", 8, (16, 320), 1))
    # Waking saturated within tens of ms on an AMD machine; on an Intel VM it steps up
    # between 50 and 75 ms of idle and keeps rising past 250 ms, gaps a light load has.
    for idle_ms in (1, 4, 16, 32, 64, 128, 256, 512):
        probes.append(_idle_probe(idle_ms, 6))
    warmup = Probe("warmup", 8, (16, 128), (8, 32), 8, 8)
    description = "decode, prefill, chunked, mixed, verify and idle probes, three passes"
    return Grid("standard", description, tuple(probes), warmup, passes=3)


# Tokens each idle probe's request decodes, so that every wake follows a spell of work, as a
# loaded engine's idle gaps do. With two output tokens (about 7 ms of work between sleeps on
# the Intel VM, two threads) the fifth to seventh wake in a row and those after it cost 5-6 ms
# more than the first ones (most likely the second thread's vCPU slow to resume; no such step
# with one thread); from 16 tokens (about 28 ms of work) on, every wake cost what the first
# ones did, as served runs' wakes do.
IDLE_PROBE_OUTPUT_TOKENS = 32


def _idle_probe(idle_ms: int, requests: int) -> Probe:
    """Prompts of 16–256 tokens, each arriving `idle_ms` after the previous one ended."""
    outputs = (IDLE_PROBE_OUTPUT_TOKENS,) * 2
    name = f"idle-t{idle_ms}-o{IDLE_PROBE_OUTPUT_TOKENS}"
    return Probe(name, requests, (16, 256), outputs, 1, 1, think_s=idle_ms / 1e3)


def _fork_probe(
    name: str, roots: int, prompts: tuple[int, int], together: int, output: int = 40
) -> Probe:
    """`roots` requests at once, each forking every 8 tokens while it has under 4 branches
    (every branch limited to what its root may still write, as APAR's are), `together` of
    them in the same step."""
    batch = 4 * roots  # every branch in the decode batch
    outputs = (output, output)
    return Probe(name, roots, prompts, outputs, batch, fork_every=8, fork_together=together)


def _test() -> Grid:
    """A handful of small probes: seconds on the zoo's `tiny` model (tests)."""
    probes = (
        Probe("decode-b1-p16", 1, (16, 16), (12, 12), 1),
        Probe("decode-b4-p48", 4, (48, 48), (12, 12), 4),
        Probe("decode-spread-b4", 4, (8, 96), (12, 12), 4),
        Probe("prefill-p32", 3, (32, 32), (2, 2), 1),
        Probe("prefill-p128", 3, (128, 128), (2, 2), 1),
        Probe("mixed-b4", 12, (8, 64), (4, 16), 4, 4),
        Probe("verify-w2-b4", 4, (32, 32), (8, 8), 4, width=2),
        _idle_probe(20, 3),  # 20 ms: a stall of a few ms after a request must not outlast it
        _fork_probe("fork-b2-t2", 2, (24, 24), 2, output=20),
    )
    warmup = Probe("warmup", 2, (8, 16), (4, 4), 2)
    return Grid("test", "eight small probes (nine with forks), for tests", probes, warmup)


GRIDS = {grid.name: grid for grid in (_standard(), _test())}


def get_grid(name: str, context_tokens: int, forks: bool = False) -> Grid:
    """The named grid without the probes the model's context cannot hold, nor its fork
    probes unless the model `forks` (has APAR's fork and child tokens)."""
    if name not in GRIDS:
        raise WorkbenchError(
            f"unknown calibration grid {name!r} (known: {', '.join(GRIDS)})", field="--grid"
        )
    grid = GRIDS[name]
    kept = tuple(
        probe
        for probe in grid.probes
        if probe.fits(context_tokens) and (forks or not probe.fork_every)
    )
    return Grid(grid.name, grid.description, kept, grid.warmup, grid.passes)
