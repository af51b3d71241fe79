"""Measured step and layer times from peer tools, read for the cost-model fidelity check.

- LLMServingSim's H100 per-layer latencies (`llmservingsim_h100/<org>/<model>/tp<t>/
  layers.csv`, this repository's copy pivoted to one row per token count, one column per
  layer, latency in ns as in the source): each layer of a Hugging Face-style forward
  (separate q/k/v and gate/up projections) timed at `input` tokens, no KV cache.
- Splitwise's `perf_model.csv`: whole-engine prompt (prefill) and per-token (decode) times in
  ms of Llama-2-70B and BLOOM-176B on DGX A100 / H100 by batch size, prompt size, TP.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class LayerLatencies:
    """One model at one TP degree: each layer's time (s) by tokens."""

    source: str
    model: str  # folder name, e.g. Llama-3.1-8B
    tensor_parallel: int
    tokens: np.ndarray  # (n,)
    seconds: dict[str, np.ndarray]  # layer name -> (n,)


@dataclass(frozen=True)
class SplitwiseRow:
    model: str
    hardware: str
    tensor_parallel: int
    batch_size: int
    prompt_tokens: int
    output_tokens: int
    prompt_s: float  # the prefill step
    token_s: float  # mean decode step: (e2e − prompt) / (output tokens − 1)


def read_layer_latencies(path: Path) -> LayerLatencies:
    rows = _rows(path)
    names = [k for k in rows[0] if k not in ("input", "kv_cache", "tp_size")]
    tokens = np.array([float(r["input"]) for r in rows])
    seconds = {n: np.array([float(r[n]) for r in rows]) * 1e-9 for n in names}
    tp = int(rows[0]["tp_size"])
    return LayerLatencies(str(path), path.parent.parent.name, tp, tokens, seconds)


def read_splitwise(path: Path) -> list[SplitwiseRow]:
    """Rows averaged over their repeated measurements (same configuration)."""
    groups: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    for r in _rows(path):
        key = tuple(r[k] for k in _SPLITWISE_KEYS)
        groups.setdefault(key, []).append((float(r["prompt_time"]), float(r["token_time"])))
    out = []
    for key, times in groups.items():
        model, hardware, tp, batch, prompt, output = key
        prompt_ms, token_ms = (float(v) for v in np.mean(np.array(times), axis=0))
        ints = (int(tp), int(batch), int(prompt), int(output))
        out.append(SplitwiseRow(model, hardware, *ints, prompt_ms / 1000.0, token_ms / 1000.0))
    return out


_SPLITWISE_KEYS = (
    "model",
    "hardware",
    "tensor_parallel",
    "batch_size",
    "prompt_size",
    "token_size",
)


def _rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
    except OSError as exc:
        raise WorkbenchError(f"cannot read ({exc.strerror})", source=str(path)) from None
    if not rows:
        raise WorkbenchError("empty CSV", source=str(path))
    return rows
