"""The pipeline server's records in the one record format: a step per commit (the moment
tokens were committed), emission spans, requests."""

from __future__ import annotations

import numpy as np

from real_backend.pipeline.decoding import Commit
from workbench.recorder import Recorder
from workbench.records import RunRecords

REPLICA = 0


class PipelineRecorder:
    def __init__(self, num_requests: int) -> None:
        self.recorder = Recorder(num_requests)
        self.step = 0
        self.last_end_s = 0.0

    def request(
        self, request_id: int, arrival_s: float, started_s: float, commits: list[Commit]
    ) -> None:
        """A served request: one step per commit, the first from its service start."""
        rec = self.recorder
        rec.replica[request_id] = REPLICA
        rec.arrival_s[request_id] = arrival_s
        start = max(started_s, self.last_end_s)
        for commit in commits:
            decode = commit.prefill_tokens == 0
            rec.steps.append(
                replica=REPLICA,
                step=self.step,
                start_s=start,
                duration_s=commit.time_s - start,
                batch_size=1,
                prefill_tokens=commit.prefill_tokens,
                decode_tokens=int(decode),
                kv_blocks_used=commit.kv_blocks,
                emitted_tokens=len(commit.tokens),
                drafted_tokens=commit.drafted,
                accepted_tokens=commit.accepted,
                verified_tokens=commit.verified,
                draft_s=0.0,  # the head drafts beside the stages (run info: pipeline_draft_s)
            )
            rec.span(request_id, REPLICA, self.step, self.step, len(commit.tokens))
            self.step += 1
            start = commit.time_s
        self.last_end_s = start
        rec.first_token_s[request_id] = commits[0].time_s
        rec.finish_s[request_id] = commits[-1].time_s
        rec.output_tokens[request_id] = sum(len(c.tokens) for c in commits)

    def records(self, prompt_tokens: np.ndarray) -> RunRecords:
        rec = self.recorder
        return RunRecords(
            requests=rec.request_records(prompt_tokens),
            steps=rec.step_records(),
            emissions=rec.emission_spans(),
        )
