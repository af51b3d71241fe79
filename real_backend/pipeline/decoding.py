"""Greedy decoding of one request over the pipeline, by one of three policies:

- `pipeline`: plain pipelined decoding; one run (the newest token) in flight at a time.
- `pipeinfer` with `asynchronous: false`: synchronous speculative decoding; one run in
  flight, the newest token and a drafted tree under it, verified when it comes back.
- `pipeinfer`: PipeInfer's continuous asynchronous speculation. After every commit the head
  launches a non-speculative run of the newest token (always useful), then, while no result
  is waiting, speculative runs, each drafting a tree after the previous one's main branch so
  the runs chain and the pipeline stays full. p_adjust = p_recovery × (speculative runs
  launched since the last result came back) − p_decay × (empty drafts since the last
  commit) raises or lowers both drafting thresholds. Each run writes its KV under its own
  sequence forked from its chain parent. When a commit leaves a live run unable to help,
  it is cancelled (`runs.runs_to_cancel`).

Every committed token is the target's greedy choice after the committed prefix (`runs`), so
all three emit exactly greedy vanilla decoding's tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from real_backend.pipeline.drafting import DraftLimits, DraftSource, DraftTree
from real_backend.pipeline.head import Completion, PipelineHead
from real_backend.pipeline.run_log import RunLog
from real_backend.pipeline.runs import Resolution, Run, RunKind, resolve, runs_to_cancel
from workbench.scenario.decoders import PipeInferDecoderConfig, PipelineDecoderConfig


@dataclass
class Commit:
    """Tokens committed at one moment: a step of the records."""

    time_s: float
    tokens: list[int]
    prefill_tokens: int  # the prompt, for the first commit of a request
    drafted: int  # drafted tokens of the runs resolved by this commit
    # drafted tokens the target confirmed: the committing run's drafted nodes now committed
    # (PipeInfer: a speculative run's first node is often committed by the token run before
    # it, so this can exceed the tokens the commit emits less one)
    accepted: int
    verified: int  # tokens those runs fed the target (decodes only)
    kv_blocks: int  # the head stage's blocks in use after it


@dataclass
class _Request:
    request_id: int
    prompt: list[int]
    max_new: int
    stops: frozenset[int]
    committed: list[int]
    commits: list[Commit] = field(default_factory=list)
    committed_seq: int | None = None  # holds the KV of committed[:-1]
    live: list[Run] = field(default_factory=list)  # launched, not back, not cancelled
    chain_seq: int = -1  # the next speculative run forks this sequence...
    chain_context: list[int] = field(default_factory=list)  # ...keeping these tokens
    launched_since_result: int = 0
    empty_drafts: int = 0
    resolved_drafted: int = 0  # of runs cancelled or discarded since the last commit
    resolved_verified: int = 0
    done: bool = False

    @property
    def emitted(self) -> int:
        return len(self.committed) - len(self.prompt)

    @property
    def final_length(self) -> int:
        return len(self.prompt) + self.max_new


class PipelineDecoding:
    def __init__(
        self,
        head: PipelineHead,
        config: PipelineDecoderConfig | PipeInferDecoderConfig,
        drafter: DraftSource | None,
        log: RunLog,
        clock: Callable[[], float],
        ignore_eos: bool = True,
    ) -> None:
        self.head = head
        self.config = config
        self.speculative = isinstance(config, PipeInferDecoderConfig)
        self.asynchronous = self.speculative and config.asynchronous
        self.drafter = drafter
        self.log = log
        self.clock = clock
        self.ignore_eos = ignore_eos
        self.draft_s = 0.0  # head time spent drafting
        self.empty_drafts = 0  # speculation attempts whose draft came out empty
        self._request: _Request | None = None

    def generate(
        self, request_id: int, prompt: list[int], max_new: int, stops: frozenset[int]
    ) -> list[Commit]:
        """Decode one request; returns its commits (the first is the prompt's)."""
        r = _Request(request_id, prompt, max_new, stops, list(prompt))
        self._request = r
        if self.drafter is not None:
            self.drafter.start(prompt)
        self._launch(r, "prefill", [], prompt, [-1, *range(len(prompt) - 1)], len(prompt), None)
        while not r.done:
            completion = self.head.next_result(block=False)
            if completion is not None:
                self._complete(completion)
            elif not self._speculate(r):
                self._complete(self.head.next_result(block=True))
        return r.commits

    def drain(self) -> None:
        """Take back every run still in the pipeline (cancelled ones of finished requests)."""
        while self.head.in_flight:
            self._complete(self.head.next_result(block=True))

    # ------------------------------------------------------------------ launching

    def _launch(
        self,
        r: _Request,
        kind: RunKind,
        context: list[int],
        tokens: list[int],
        parents: list[int],
        main_length: int,
        parent_seq: int | None,
        drafted: int = 0,
    ) -> Run:
        run = Run(
            self.head.new_run_id(), r.request_id, kind, context, tokens, parents, main_length,
            parent_seq, drafted,
        )  # fmt: skip
        self.head.launch(run)
        r.live.append(run)
        return run

    def _launch_next(self, r: _Request) -> None:
        """After a commit: the newest token alone, or with a drafted tree under it when
        speculating synchronously; the speculative chain restarts after it."""
        newest, before = r.committed[-1], r.committed[:-1]
        if self.speculative and not self.asynchronous:
            tree = self._draft(r, r.committed, self._limits(r, r.committed, adjust=0.0))
            tokens = [newest, *tree.tokens]
            parents = [-1, *(p + 1 for p in tree.parents)]
            run = self._launch(
                r, "verify", before, tokens, parents, 1 + tree.main_length, r.committed_seq,
                drafted=len(tree.tokens),
            )  # fmt: skip
        else:
            run = self._launch(r, "token", before, [newest], [-1], 1, r.committed_seq)
        r.launched_since_result = r.empty_drafts = 0
        if not self._chain_goes_on(r):
            r.chain_seq, r.chain_context = run.seq, list(r.committed)

    def _chain_goes_on(self, r: _Request) -> bool:
        """With `after_commit: continue`, the chain stays when its tail run is live and the
        committed tokens are a prefix of what it continues from."""
        if not self.asynchronous or self.config.after_commit != "continue":
            return False
        tail_live = any(run.seq == r.chain_seq for run in r.live)
        ahead = r.chain_context[: len(r.committed)] == r.committed
        return tail_live and ahead

    def _speculate(self, r: _Request) -> bool:
        """Launch one speculative run if PipeInfer may now; True if it did (or will retry
        at once with a lower threshold after an empty draft)."""
        if not self.asynchronous or self.drafter is None or r.committed_seq is None:
            return False  # (nothing to chain from before the prompt's run is back)
        config: PipeInferDecoderConfig = self.config
        adjust = (
            r.launched_since_result * config.p_recovery - r.empty_drafts * config.p_decay
        )  # p_adjust
        limits = self._limits(r, r.chain_context, adjust)
        room = self.head.cache.num_free_blocks >= _blocks_for_run(config, self.head)
        if len(r.live) >= config.max_runs_in_flight or limits.max_depth <= 0 or not room:
            return False
        if config.p_accept + adjust >= 1:
            return False
        tree = self._draft(r, r.chain_context, limits)
        if not tree.tokens:
            r.empty_drafts += 1
            self.empty_drafts += 1
            return config.p_decay > 0
        run = self._launch(
            r, "speculative", r.chain_context, tree.tokens, tree.parents, tree.main_length,
            r.chain_seq, drafted=len(tree.tokens),
        )  # fmt: skip
        r.chain_seq, r.chain_context = run.seq, r.chain_context + run.main_tokens
        r.launched_since_result += 1
        return True

    def _limits(self, r: _Request, context: list[int], adjust: float) -> DraftLimits:
        config: PipeInferDecoderConfig = self.config
        return DraftLimits(
            max_tokens=config.max_draft_tokens,
            # a node at index i is useful while a token still follows it: i ≤ final - 2
            max_depth=r.final_length - 1 - len(context),
            max_branches=config.max_branches,
            p_accept=config.p_accept + adjust,
            p_split=config.p_split + adjust,
        )

    def _draft(self, r: _Request, context: list[int], limits: DraftLimits) -> DraftTree:
        if self.drafter is None or limits.max_depth <= 0:
            return DraftTree([], [], 0)
        started = self.clock()
        tree = self.drafter.draft(context, limits)
        self.draft_s += self.clock() - started
        return tree

    # ------------------------------------------------------------------ results

    def _complete(self, c: Completion) -> None:
        run, r = c.run, self._request
        r.launched_since_result = 0  # a result came back: speculation starts over
        if run.cancelled or run.request_id != r.request_id:
            self.log.record(run, c.received_s, "cancelled", 0, c.times)
            return
        r.live.remove(run)
        resolution = None if c.choices is None else resolve(run, r.committed, c.choices)
        if resolution is None:
            self.head.free(run.seq)
            self._resolved(r, run)
            self.log.record(run, c.received_s, "discarded", 0, c.times)
            return
        committed = self._commit(r, run, resolution, c.received_s)
        self.log.record(run, c.received_s, "committed", committed, c.times)

    def _commit(self, r: _Request, run: Run, resolution: Resolution, now: float) -> int:
        new = self._cut(r, resolution.new_tokens)
        # The committed KV becomes the run's: the matched path and the accepted nodes, all
        # but the newest token (its choice was not computed yet).
        kept = len(r.committed) - len(run.context) + len(new) - 1
        r.committed += new
        r.done = r.emitted >= r.max_new or (not self.ignore_eos and new[-1] in r.stops)
        stale = list(r.live) if r.done else runs_to_cancel(r.live, r.committed)
        self._cancel(r, stale)  # first: their sequences may share blocks the keep moves into
        self.head.keep(run.seq, len(run.context), resolution.path[:kept])
        if r.committed_seq is not None:
            self.head.free(r.committed_seq)
        r.committed_seq = run.seq
        prefill = run.kind == "prefill"
        first_drafted = len(run.tokens) - run.drafted  # drafted nodes come last in a run
        r.commits.append(
            Commit(
                time_s=now,
                tokens=new,
                prefill_tokens=len(run.tokens) if prefill else 0,
                drafted=run.drafted + r.resolved_drafted,
                accepted=sum(node >= first_drafted for node in resolution.path[:kept]),
                verified=0 if prefill else len(run.tokens) + r.resolved_verified,
                kv_blocks=self.head.cache.allocator.num_blocks - self.head.cache.num_free_blocks,
            )
        )
        r.resolved_drafted = r.resolved_verified = 0
        if r.done:
            self.head.free(r.committed_seq)
        else:
            self._launch_next(r)
        return len(new)

    def _cut(self, r: _Request, tokens: list[int]) -> list[int]:
        """Never past the request's length, and up to a stop token unless EOS is ignored."""
        tokens = tokens[: r.max_new - r.emitted]
        if not self.ignore_eos:
            stop = next((i for i, t in enumerate(tokens) if t in r.stops), None)
            if stop is not None:
                tokens = tokens[: stop + 1]
        return tokens

    def _cancel(self, r: _Request, runs: list[Run]) -> None:
        self.head.cancel(runs)
        for run in runs:
            r.live.remove(run)
            self._resolved(r, run)

    @staticmethod
    def _resolved(r: _Request, run: Run) -> None:
        r.resolved_drafted += run.drafted
        r.resolved_verified += len(run.tokens)


def _blocks_for_run(config: PipeInferDecoderConfig, head: PipelineHead) -> int:
    """Free blocks a speculative run may need: its nodes, a copied last block, a spare."""
    return config.max_draft_tokens // head.cache.block_size + 3
