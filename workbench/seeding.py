"""Seeds for random components: one independent generator per (scenario seed, component name).

Each random component (arrival gaps, prompt lengths, output lengths, ...) draws from its own
stream, so changing one component's configuration never shifts another's numbers, and the
same (seed, name) gives the same stream on every machine and in every process.
"""

from __future__ import annotations

import hashlib

import numpy as np


def stable_id(name: str) -> int:
    """A 64-bit integer fixed by `name` alone: unlike `hash()`, not salted per process."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def component_rng(seed: int, name: str) -> np.random.Generator:
    """The generator of component `name` (e.g. "workload.arrival") under scenario `seed` >= 0."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    return np.random.default_rng(np.random.SeedSequence([seed, stable_id(name)]))
