"""Metrics of APAR runs, from the records' branch trees (`RunRecords.branches`) and
emissions; finished requests only. TTFT, TPOT and ITL come from `workbench.metrics` as for
every run (a step's tokens from all of a request's branches are one emission).

- apar_fork_rate: share of requests with at least one fork; apar_branches_per_request:
  branches per request (1 + forks).
- apar_step_compression: answer tokens (the reassembled answer: fork tokens and EOS left
  out) over generation steps (steps in which the request emitted), summed over requests.
  A sequential answer of the same text takes one step per token and its EOS.
- apar_mean_live_branches: branches that emitted per step, over every generation step of
  every request (tokens per emission, unless the branches speculated).
- apar_kv_token_steps_saved_share: 1 − (KV entries held, summed over the request's
  generation steps) / (the same for a sequential answer of the same text: prompt + i
  entries at its i-th step). A branch holds its own tokens (a child also its fork and child
  tokens) from its first emission on; a child without children is released after its last,
  every other branch when the request ends; the prompt and a shared prefix count once.
  Steps a preempted request spends waiting count as held (an upper bound); a branch's
  cache grows by its tokens per emitting step (one, unless it speculated).
- apar_attention_keys_per_token: keys the step that emits a token attends to (its branch's
  visible context), per emitted token; apar_attention_keys_saved_share: 1 − its sum over
  the sum of a sequential answer's (prompt + i − 1 keys for its i-th token).
"""

from __future__ import annotations

import numpy as np

from workbench.apar_trees import BranchTree
from workbench.records import RunRecords

Number = float | int | None

# Every key `apar_summary` returns → its SQL type, for the results store's `run_summaries`.
APAR_SUMMARY_COLUMNS: dict[str, str] = {
    "apar_fork_rate": "DOUBLE",
    "apar_branches_per_request": "DOUBLE",
    "apar_step_compression": "DOUBLE",
    "apar_mean_live_branches": "DOUBLE",
    "apar_kv_token_steps_saved_share": "DOUBLE",
    "apar_attention_keys_per_token": "DOUBLE",
    "apar_attention_keys_saved_share": "DOUBLE",
}


def has_branches(records: RunRecords) -> bool:
    return records.branches is not None and len(records.branches) > 0


def apar_summary(records: RunRecords) -> dict[str, Number]:
    per = per_request(records)
    if not len(per["request_id"]):
        return dict.fromkeys(APAR_SUMMARY_COLUMNS)
    steps = per["steps"].sum()
    seq_kv, seq_keys = per["sequential_kv"].sum(), per["sequential_keys"].sum()
    return {
        "apar_fork_rate": float((per["branches"] > 1).mean()),
        "apar_branches_per_request": float(per["branches"].mean()),
        "apar_step_compression": float(per["answer_tokens"].sum() / steps) if steps else None,
        "apar_mean_live_branches": float(per["branch_steps"].sum() / steps) if steps else None,
        "apar_kv_token_steps_saved_share": 1 - float(per["kv"].sum() / seq_kv) if seq_kv else None,
        "apar_attention_keys_per_token": float(per["keys"].sum() / per["tokens"].sum()),
        "apar_attention_keys_saved_share": 1 - float(per["keys"].sum() / seq_keys)
        if seq_keys
        else None,
    }


def per_request(records: RunRecords) -> dict[str, np.ndarray]:
    """Per finished request (by request id): branches, answer tokens, emitted tokens,
    generation steps, KV token-steps and attention keys, APAR's and a sequential answer's."""
    b = records.branches
    assert b is not None
    r = records.requests
    finished = set(r.request_id[r.status == "finished"].tolist())
    prompt = dict(zip(r.request_id.tolist(), r.prompt_tokens.tolist(), strict=True))
    steps, last = _generation_steps(records)
    order = np.lexsort((b.branch, b.request_id))
    ids = b.request_id[order]
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    rows, kept = [], []
    for lo, hi in zip(starts.tolist(), [*starts[1:].tolist(), len(ids)], strict=True):
        rid = int(ids[lo])
        if rid in finished:
            kept.append(rid)
            rows.append(_request_row(b, order[lo:hi], prompt[rid], steps[rid], last[rid]))
    columns = (
        "branches",
        "answer_tokens",
        "tokens",
        "steps",
        "kv",
        "sequential_kv",
        "keys",
        "sequential_keys",
        "branch_steps",
    )
    table = np.array(rows, dtype=np.float64).reshape(-1, len(columns))  # (n, 9)
    out = {name: table[:, j] for j, name in enumerate(columns)}
    out["request_id"] = np.array(kept, dtype=np.int64)
    return out


def _generation_steps(records: RunRecords) -> tuple[dict[int, int], dict[int, int]]:
    """Per request: steps in which it emitted, and the last of them."""
    e = records.emissions
    steps: dict[int, int] = {}
    last: dict[int, int] = {}
    for rid, first, end in zip(
        e.request_id.tolist(), e.first_step.tolist(), e.last_step.tolist(), strict=True
    ):
        steps[rid] = steps.get(rid, 0) + end - first + 1
        last[rid] = max(last.get(rid, end), end)
    return steps, last


def _request_row(b, rows: np.ndarray, prompt: int, steps: int, last: int) -> tuple[int, ...]:
    """One request's row from its branch rows (in branch order)."""
    tree = BranchTree(
        tuple(b.parent[rows].tolist()),
        tuple(b.fork_at[rows].tolist()),
        tuple(b.tokens[rows].tolist()),
        tuple(b.answer_tokens[rows].tolist()),
    )
    tokens = b.tokens[rows].astype(np.int64)  # (k,)
    first = b.first_step[rows]
    root = np.arange(tree.branches) == 0
    has_children = np.zeros(tree.branches, dtype=bool)
    has_children[[p for p in tree.parent if p >= 0]] = True
    end = np.where(root | has_children, last, b.last_step[rows])  # released when
    extra = np.where(root, 0, 2)  # a child's fork and child tokens
    held = end - first + 1  # (k,) steps each branch holds KV
    rate = np.maximum(tokens / np.maximum(b.steps[rows], 1), 1.0)  # (k,) tokens per step
    kv = prompt * (last - int(first[0]) + 1) + int(
        (extra * held + _capped_ramp(held, tokens, rate)).sum()
    )
    start = tree.context_start(prompt)  # (k,)
    keys = int((tokens * start + tokens * (tokens - 1) // 2).sum())
    sequential = tree.total_answer_tokens + 1  # its answer and one EOS
    seq_kv = sequential * prompt + sequential * (sequential - 1) // 2
    return (
        tree.branches,
        tree.total_answer_tokens,
        tree.total_tokens,
        steps,
        kv,
        seq_kv,
        keys,
        seq_kv,
        int(b.steps[rows].sum()),
    )


def _capped_ramp(n: np.ndarray, t: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """Σ_{j=0}^{n-1} min(j · rate, t), elementwise: a branch's own cached tokens over its
    steps, growing by `rate` tokens a step."""
    full = np.minimum(n, np.floor(t / rate) + 1)  # steps while still growing
    return rate * full * (full - 1) / 2 + t * (n - full)
