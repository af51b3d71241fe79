"""Short run labels from what tells the runs of a report apart, e.g. `rate=8 · speculative k=4`.

Runs are grouped by scenario name (named when the report holds several); within a group,
the configuration paths whose values differ between its runs become facets: a decoder,
scheduler or hardware that differs is described as a whole (`speculative k=4`, `2×h100-sxm
TP4`), any other path as `name=value`. A user's `--label` is appended; runs that nothing
tells apart are numbered. Run ids are left to tooltips and the runs table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

# Paths that never distinguish runs: the name (grouped on), sweep and plan definitions
# (the point's values are in the configuration), simulator switches that change no result.
IGNORED_ROOTS = ("name", "sweep", "plan", "simulator")
MAX_FACETS = 4
# Short names of common paths; "" shows the bare value.
SHORT_NAMES = {
    "workload.arrival.rate_per_s": "rate",
    "workload.num_requests": "requests",
    "hardware.tensor_parallel": "TP",
    "hardware.replicas": "replicas",
    "hardware.gpu": "",
    "backend": "",
    "model.name": "",
    "cost_model.kind": "cost",
    "cost_model.price_scale": "price scale",
    "scheduler.kind": "",
    "decoder.kind": "",
}
# The order facets appear in (paths starting with these prefixes first, in this order).
FACET_ORDER = ("backend", "model", "hardware", "workload.arrival", "workload", "scheduler")
FACET_ORDER += ("decoder", "cost_model", "seed", "slo", "routing")


def flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Dotted path → the leaf's value as canonical JSON (lists and nulls included)."""
    leaves: dict[str, str] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if not prefix and key in IGNORED_ROOTS:
            continue
        if isinstance(value, dict) and value:
            leaves |= flatten(value, f"{path}.")
        else:
            leaves[path] = json.dumps(value, sort_keys=True)
    return leaves


def differing_paths(configs: list[dict[str, Any]]) -> list[str]:
    """Paths whose value is not the same in every configuration (missing counts as a value)."""
    flat = [flatten(config) for config in configs]
    paths = sorted({path for leaves in flat for path in leaves})
    return [path for path in paths if len({leaves.get(path) for leaves in flat}) > 1]


def run_labels(
    configs: list[dict[str, Any]], names: list[str], user_labels: list[str | None]
) -> list[str]:
    """One label per run (same order), unique within the list."""
    groups: dict[str, list[int]] = defaultdict(list)
    for index, name in enumerate(names):
        groups[name].append(index)
    labels = [""] * len(configs)
    for name, members in groups.items():
        facets = group_facets([configs[i] for i in members])
        for i, facet in zip(members, facets, strict=True):
            parts = [name] if len(groups) > 1 or not facet else []
            parts += facet
            if user_labels[i]:
                parts.append(str(user_labels[i]))
            labels[i] = " · ".join(parts) or name
    return _numbered(labels)


def group_facets(configs: list[dict[str, Any]]) -> list[list[str]]:
    """For each configuration, the facets that tell it apart from the others given."""
    paths = differing_paths(configs)
    described: list[tuple[str, Callable[[dict[str, Any]], str]]] = []
    for prefix, describe in DESCRIBERS.items():
        texts = {describe(config) for config in configs}
        if any(p == prefix or p.startswith(prefix + ".") for p in paths) and len(texts) > 1:
            described.append((prefix, describe))
            paths = [p for p in paths if not (p == prefix or p.startswith(prefix + "."))]
    facets = []
    for config in configs:
        leaves = flatten(config)
        items = [(prefix, describe(config)) for prefix, describe in described]
        items += [(path, _leaf_facet(path, leaves.get(path))) for path in paths]
        items.sort(key=lambda item: (_order(item[0]), item[0]))
        texts = [text for _, text in items if text]
        if len(texts) > MAX_FACETS:
            texts = [*texts[: MAX_FACETS - 1], f"+{len(texts) - MAX_FACETS + 1} more"]
        facets.append(texts)
    return facets


def _order(path: str) -> int:
    for rank, prefix in enumerate(FACET_ORDER):
        if path == prefix or path.startswith(prefix + "."):
            return rank
    return len(FACET_ORDER)


def _leaf_facet(path: str, value: str | None) -> str:
    shown = _value_text(json.loads(value) if value is not None else None)
    name = SHORT_NAMES.get(path)
    if name is None:
        parts = path.split(".")
        name = parts[-2] if parts[-1] == "kind" and len(parts) > 1 else parts[-1]
    return f"{name}={shown}" if name else shown


def _value_text(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


# ---------------------------------------------------------------- whole-section descriptions


def describe_decoder(config: dict[str, Any]) -> str:
    decoder = config.get("decoder") or {}
    kind = str(decoder.get("kind", "?"))
    if kind == "speculative":
        tree = decoder.get("tree")
        shape = f"tree {tree.get('kind', '')}".strip() if tree else ""
        k = decoder.get("num_speculative_tokens")
        return " ".join(p for p in (kind, shape, f"k={k}" if k is not None else "") if p)
    if kind == "lookahead":
        window = [decoder.get(name) for name in ("window", "ngram", "candidates")]
        if all(v is not None for v in window):
            return "lookahead W{} N{} G{}".format(*window)
    if kind == "pipeinfer":
        return describe_pipeinfer(decoder)
    return kind


def describe_pipeinfer(decoder: dict[str, Any]) -> str:
    """`PipeInfer k=4` (asynchronous, restarting after commits, as released), `PipeInfer
    continue k=4`, or `sync speculative k=4` (one run in flight)."""
    k = decoder.get("max_draft_tokens")
    size = f" k={k}" if k is not None else ""
    if decoder.get("asynchronous") is False:
        return f"sync speculative{size}"
    mode = " continue" if decoder.get("after_commit") == "continue" else ""
    return f"PipeInfer{mode}{size}"


def describe_hardware(config: dict[str, Any]) -> str:
    hw = config.get("hardware") or {}
    text = f"{hw.get('replicas', 1)}×{hw.get('gpu', '?')}"
    text += f" TP{hw['tensor_parallel']}" if hw.get("tensor_parallel", 1) != 1 else ""
    return text + (f" PP{hw['pipeline_parallel']}" if hw.get("pipeline_parallel", 1) != 1 else "")


def describe_scheduler(config: dict[str, Any]) -> str:
    scheduler = config.get("scheduler") or {}
    kind = str(scheduler.get("kind", "?"))
    admission = (scheduler.get("admission") or {}).get("kind")
    return f"{kind} ({admission})" if admission and admission != "fcfs" else kind


DESCRIBERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "decoder": describe_decoder,
    "hardware": describe_hardware,
    "scheduler": describe_scheduler,
}


def _numbered(labels: list[str]) -> list[str]:
    """Labels shared by several runs get #1, #2... in order."""
    counts: dict[str, int] = defaultdict(int)
    for label in labels:
        counts[label] += 1
    seen: dict[str, int] = defaultdict(int)
    out = []
    for label in labels:
        if counts[label] > 1:
            seen[label] += 1
            label = f"{label} #{seen[label]}"
        out.append(label)
    return out
