"""Every run's fate, for the records: launched when, back when, what became of it, and what
each stage spent on it. Stored in the run's `info["pipeline_runs"]` as JSON columns, from
which `workbench.metrics.pipeline` derives counts, wasted stage time and runs in flight."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from real_backend.pipeline.messages import StageTime
from real_backend.pipeline.runs import Run

Outcome = Literal["committed", "discarded", "cancelled"]
# committed: it extended the committed tokens; discarded: it came back whole but could no
# longer help (kept running because a helpful run forked its KV); cancelled: stopped early.


@dataclass
class RunLog:
    stages: int
    origin_s: float  # the serving clock's zero
    columns: dict[str, list] = field(
        default_factory=lambda: {
            name: []
            for name in (
                "run_id", "request_id", "kind", "nodes", "drafted", "launched_s",
                "resolved_s", "outcome", "committed", "stage_s", "stage_status",
            )
        }
    )  # fmt: skip

    def record(
        self,
        run: Run,
        resolved_s: float,
        outcome: Outcome,
        committed: int,
        times: list[StageTime],
    ) -> None:
        by_rank = {t.rank: t for t in times}
        row = {
            "run_id": run.run_id,
            "request_id": run.request_id,
            "kind": run.kind,
            "nodes": len(run.tokens),
            "drafted": run.drafted,
            "launched_s": run.launched_s - self.origin_s,
            "resolved_s": resolved_s - self.origin_s,
            "outcome": outcome,
            "committed": committed,
            "stage_s": [by_rank[r].seconds if r in by_rank else 0.0 for r in range(self.stages)],
            "stage_status": [
                by_rank[r].status if r in by_rank else "skipped" for r in range(self.stages)
            ],
        }
        for name, value in row.items():
            self.columns[name].append(value)

    def info(self) -> str:
        return json.dumps(self.columns, separators=(",", ":"))
