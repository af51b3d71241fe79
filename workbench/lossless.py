"""Is a multi-token decoder's greedy output exactly its vanilla twin's? From stored outputs.

A greedy speculative, lookahead or PipeInfer run must emit, request by request, the very
tokens greedy vanilla decoding of the same model emits for the same workload. Comparing the
two runs' stored outputs (`outputs` table) says so without rerunning anything, or names
the first request and token where they part. A sampling run (temperature > 0) keeps the
target's distribution, not its tokens: token equality says nothing there (n/a); so does a
simulated run, which has no tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.records import OutputRecords


@dataclass(frozen=True)
class Lossless:
    verdict: str  # "yes", "no", or "n/a"
    reason: str = ""  # for no: the first difference; for n/a: why it does not apply

    def cell(self) -> str:
        return self.verdict if not self.reason else f"{self.verdict} ({self.reason})"


def compare_outputs(run: OutputRecords | None, vanilla: OutputRecords | None) -> Lossless:
    """Token-for-token comparison of a run's outputs with its vanilla twin's."""
    if run is None or vanilla is None:
        return Lossless("n/a", "no stored outputs")
    theirs = dict(zip(vanilla.request_id.tolist(), vanilla.token_ids, strict=True))
    for request, tokens in zip(run.request_id.tolist(), run.token_ids, strict=True):
        reference = theirs.get(request)
        if reference is None:
            return Lossless("n/a", f"request {request} missing from the vanilla run")
        position = _first_difference(tokens, reference)
        if position is not None:
            return Lossless("no", f"request {request}, token {position}")
    if set(theirs) != set(run.request_id.tolist()):
        return Lossless("n/a", "the runs served different requests")
    return Lossless("yes")


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for position, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return position
    return None if len(a) == len(b) else min(len(a), len(b))


def lossless_verdict(
    temperature: float, backend: str, run: OutputRecords | None, vanilla: OutputRecords | None
) -> Lossless:
    """The report's lossless cell for a multi-token run beside its vanilla twin."""
    if backend != "real":
        return Lossless("n/a", "simulated: no tokens")
    if temperature > 0:
        return Lossless("n/a", "sampling: equal in distribution, not token for token")
    return compare_outputs(run, vanilla)
