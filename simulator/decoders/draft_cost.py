"""The draft model's share of a speculative step: its own forwards on the same GPUs.

As in the real backend (`real_backend/decoders/drafter.py`), the draft cache lags the
sequence: a draft's first forward of a step catches up on the tokens it has not cached
(the whole prompt and first token the first time, or again after a recompute preemption,
priced as a prefill; then the bonus token, plus the last drafted token when the whole chain
was accepted, priced as a decode token and extras) and yields the first proposal; each
further drafted token is one more single-token forward. A token tree takes one forward per
level, feeding the tree so far, and caches none of it.
The draft is priced by a catalog cost model of its own shape on the scenario's hardware
(`cost_models.factory.shape_cost_model`: the fitted kernels when the scenario uses them, else
the roofline; profiles of the target say nothing about the draft), or, under a calibrated
cost model, by the draft's own calibration profile (`cost_model.draft_profile`: its measured
forwards), unless the scenario asks for the roofline (`cost_model.draft_roofline`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.catalogs.models import MODEL_CATALOG, ModelSpec, model_from_hf_config
from simulator.catalogs.suggest import unknown_name_message
from simulator.cost_models.base import CostModel, StepWork, extra_keys
from simulator.cost_models.calibrated import (
    DRAFT_FIELD,
    CalibratedCostModel,
    build_calibrated_draft,
)
from simulator.cost_models.factory import shape_cost_model
from workbench.errors import WorkbenchError
from workbench.records import DraftForward, DraftForwards
from workbench.scenario.decoders import SpeculativeDecoderConfig
from workbench.scenario.scenario import Scenario
from workbench.scenario.system import CalibratedCostConfig

if TYPE_CHECKING:
    from workbench.store.db import ResultsStore


def draft_model_spec(cfg: SpeculativeDecoderConfig, field: str = "decoder.draft") -> ModelSpec:
    """The draft's shape: its config.json (`config_path`, or a resolved `zoo`) or `name`.
    `field`: where the draft sits in the scenario (APAR's: decoder.speculative.draft)."""
    draft = cfg.draft
    if draft.config_path is not None:
        return model_from_hf_config(draft.config_path, name=draft.name or "draft")
    if draft.name is not None:
        spec = MODEL_CATALOG.get(draft.name)
        if spec is None:
            message = unknown_name_message("model", draft.name, MODEL_CATALOG)
            raise WorkbenchError(message, field=f"{field}.name")
        return spec
    raise WorkbenchError(
        f"the simulator needs the draft model's shape: give {field}.config_path (or zoo) "
        f"or {field}.name (a model catalog name)",
        field=field,
    )


def draft_cost_model(scenario: Scenario, spec: ModelSpec, store: ResultsStore | None) -> CostModel:
    """What prices the draft's forwards. store: where a draft profile is read from."""
    cfg = scenario.cost_model
    if not isinstance(cfg, CalibratedCostConfig) or cfg.draft_roofline:
        return shape_cost_model(scenario, spec)
    if cfg.draft_profile is None and cfg.draft_profile_csv is None:
        raise WorkbenchError(
            "a calibrated cost model prices the target's steps, not the draft's forwards: give "
            "cost_model.draft_profile (a `workbench calibrate --model DRAFT` profile of the "
            "draft model) or cost_model.draft_roofline: true",
            field=DRAFT_FIELD,
        )
    return build_calibrated_draft(scenario, spec, store)


class DraftCache:
    """Tokens the draft has cached per request, and the time its forwards take."""

    def __init__(self, cost_model: CostModel) -> None:
        self.cost_model = cost_model
        self.cached: dict[int, int] = {}  # request id → draft KV length

    def release(self, request_id: int) -> None:
        """A finished or preempted request: its draft KV is gone."""
        self.cached.pop(request_id, None)

    def fork(self, parent_id: int, child_id: int, shared_tokens: int) -> None:
        """An APAR child's draft cache starts as its parent's, cut to what they share."""
        if parent_id in self.cached:
            self.cached[child_id] = min(self.cached[parent_id], shared_tokens)

    def step_s(
        self,
        ids: list[int],
        tokens: np.ndarray,
        forwards: np.ndarray,
        tree_nodes: np.ndarray | None,
    ) -> float:
        """Draft time of one step. tokens: (b,) prompt + emitted per sequence; forwards: (b,)
        draft forwards each runs; tree_nodes: a tree's nodes by depth, None for a chain."""
        cached = np.array([self.cached.get(i, 0) for i in ids], dtype=np.int64)  # (b,)
        first = forwards > 0
        chunk = np.where(first, tokens - cached, 0)  # catch-up, with the first proposal
        time_s = self._forward_s(chunk, cached)
        if tree_nodes is not None:
            for level in range(1, int(forwards.max(initial=0))):
                nodes = np.where(forwards > level, tree_nodes[level], 0)
                time_s += self._forward_s(nodes, tokens)
            return time_s
        return time_s + self._chain_tail_s(tokens, forwards)

    def update(
        self, ids: list[int], tokens: np.ndarray, forwards: np.ndarray, accepted: np.ndarray,
        tree: bool,
    ) -> None:  # fmt: skip
        """After verification: the draft keeps the old tokens plus the accepted drafts it
        cached itself (a chain caches all its drafts but the last; a tree none)."""
        kept = tokens if tree else tokens + np.minimum(accepted, np.maximum(forwards - 1, 0))
        for request_id, ran, cached in zip(ids, forwards.tolist(), kept.tolist(), strict=True):
            if ran:
                self.cached[request_id] = cached

    def _chain_tail_s(self, tokens: np.ndarray, forwards: np.ndarray) -> float:
        """Single-token forwards 2..k: the batch of sequences still drafting, each one token
        further (a fixed k makes it one decode span)."""
        longest = int(forwards.max(initial=0))
        if longest <= 1:
            return 0.0
        drafting = forwards > 1
        if bool(np.all(forwards[drafting] == longest)):
            n = int(drafting.sum())
            context = int(tokens[drafting].sum()) + n  # KV incl. the new token, 2nd forward
            widest = int(tokens[drafting].max()) + 1
            return float(self.cost_model.decode_span_s(n, context, longest - 1, widest).sum())
        time_s = 0.0
        for j in range(1, longest):
            active = forwards > j
            work = StepWork(
                decode_batch_size=int(active.sum()),
                decode_context_sum=int(tokens[active].sum()) + j * int(active.sum()),
                decode_context_max=int(tokens[active].max()) + j,
            )
            time_s += self.cost_model.step_time_s(work)
        return time_s

    def _forward_s(self, chunk: np.ndarray, before: np.ndarray) -> float:
        """One forward: `chunk` tokens per sequence (0: not in it) over `before` cached."""
        work = forward_work(chunk, before)
        return 0.0 if work is None else self.cost_model.step_time_s(work)


def forward_work(chunk: np.ndarray, before: np.ndarray) -> StepWork | None:
    """One draft forward's work: `chunk` (b,) new tokens per sequence (0: not in it) over
    `before` (b,) cached; None: nobody in it. A sequence with nothing cached prefills its
    chunk (its prompt); one with a cache runs its few new tokens (a step's bonus and last
    accepted draft, a tree level) as one decode token and extras, the shape of a
    verification: so the real drafter's forward runs them, and a profile prices them
    (pricing them as prompt chunks, each with a prefill's overheads, put a batch-8 catch-up
    at 3.9x a decode on the tiny pair's profile)."""
    fresh = (chunk > 0) & (before == 0)  # (b,)
    going = (chunk > 0) & (before > 0)  # (b,)
    if not fresh.any() and not going.any():
        return None
    extra = np.where(going, chunk - 1, 0)  # (b,)
    context = before + 1  # (b,) KV incl. the first new token
    return StepWork(
        prefill_chunk_tokens=tuple(chunk[fresh].tolist()),
        prefill_context_tokens=tuple(before[fresh].tolist()),
        decode_batch_size=int(going.sum()),
        decode_context_sum=int(context[going].sum()),
        decode_context_max=int(context[going].max(initial=0)),
        decode_extra_tokens=int(extra.sum()),
        decode_extra_context_sum=extra_keys(extra, context),
    )


def served_draft_errors_text(cost_model: CostModel, drafts: list[DraftForwards]) -> str:
    """ "the draft's forwards -3.1% (median |error| 8.0%, 812 steps)": each served step's
    draft forwards, as the real drafter ran them, priced against their measured time (summed
    prices against summed times first, as `served_errors_text` gives the target's)."""
    predicted = np.array([_forwards_s(cost_model, d.forwards) for d in drafts])  # (s,)
    measured = np.array([d.draft_s for d in drafts])  # (s,)
    relative = np.abs(predicted / measured - 1.0)
    total = predicted.sum() / measured.sum() - 1.0
    return (
        f"the draft's forwards {100 * total:+.1f}% (median |error| "
        f"{100 * float(np.median(relative)):.1f}%, {len(drafts):,} steps)"
    )


def served_draft_scale(
    cost_model: CalibratedCostModel, drafts: list[DraftForwards]
) -> float | None:
    """The draft's `price_scale` whose prices of a served run's draft forwards add up to
    their measured time (as `served_price_scale` reads the target's); None: nothing priced."""
    predicted = sum(_forwards_s(cost_model, d.forwards) for d in drafts)
    if predicted <= 0:
        return None
    return cost_model.price_scale * sum(d.draft_s for d in drafts) / predicted


def _forwards_s(cost_model: CostModel, forwards: tuple[DraftForward, ...]) -> float:
    seconds = 0.0
    for forward in forwards:
        chunk, before = np.array(forward, dtype=np.int64).reshape(-1, 2).T  # (b,) each
        work = forward_work(chunk, before)
        seconds += 0.0 if work is None else cost_model.step_time_s(work)
    return seconds
