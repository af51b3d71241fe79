"""Wall-clock online serving: the shared batching policy drives a real model.

Requests are released at their arrival times; each engine step asks the policy for a
plan (the same object the simulator drives), runs it through the model runner over the
paged KV cache, picks each emitting sequence's next token, and reports back to the policy.
Records are the simulator's: per request, per step, and emission spans.

With the APAR decoder, requests fork branches: after a step, a branch whose newest token is
the fork token forks a child through the policy (`ContinuousBatching.fork`); the child's
first chunk forks the parent's cache (`PagedKVCache.fork`, then cut back to the fork
point); its tokens are its visible context (prompt, the parent's tokens up to the fork
token, the child token, its own). A `BranchBook` records one emission per request and step
and each request's tree; a request's output is the reassembled answer.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from real_backend.decoders.apar import AparDecoder, ForkChunk, branch_generator
from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.decoders.vanilla import VanillaDecoder
from real_backend.kv_cache import PagedKVCache, SwappedBlocks
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.model.warm_up import warm_up
from real_backend.sampling import next_token, request_generator
from workbench.apar_records import BranchBook, reassemble
from workbench.apar_trees import BranchTree
from workbench.recorder import Recorder
from workbench.records import RunRecords
from workbench.scenario.decoders import SamplingConfig
from workbench.scheduling.continuous import ContinuousBatching
from workbench.scheduling.plan import PrefillChunk, StepPlan, StepResult
from workbench.scheduling.policy import BatchPolicy
from workbench.scheduling.sequence import Sequence
from workbench.workload.requests import Workload


@dataclass
class ServeOptions:
    sampling: SamplingConfig  # the decoder's: prefill emissions sample the same way
    seed: int
    # Every EOS id ends a response (Llama 3 lists <|eot_id|> after <|end_of_text|>).
    eos_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = True
    # More stop tokens (`workload.stop_texts`): a token in here ends a response like EOS.
    stop_token_ids: frozenset[int] = frozenset()


# The runner's linear layers see only real tokens, but its attention pads a step's
# sequences to the longest; grouping prefill chunks of similar length bounds the padded
# attention queries at this multiple of the real tokens.
MAX_PADDING_FACTOR = 2.0


def prefill_groups(chunks: list[PrefillChunk]) -> list[list[PrefillChunk]]:
    """Chunks, longest first, in groups whose padded size stays within the bound."""
    groups: list[list[PrefillChunk]] = []
    for chunk in sorted(chunks, key=lambda c: -c.tokens):
        group = groups[-1] if groups else None
        if group is not None:
            real = sum(c.tokens for c in group) + chunk.tokens
            if group[0].tokens * (len(group) + 1) <= MAX_PADDING_FACTOR * real:
                group.append(chunk)
                continue
        groups.append([chunk])
    return groups


class RealEngine:
    def __init__(
        self,
        model: Transformer,
        cache: PagedKVCache,
        policy: BatchPolicy,
        options: ServeOptions,
        decoder: Decoder | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.model = model
        self.cache = cache
        self.policy = policy
        self.options = options
        self.decoder = decoder or VanillaDecoder(model, cache, options.sampling)
        self.clock = clock
        self.tokens: dict[int, list[int]] = {}  # request id → prompt + emitted token ids
        self.generators: dict[int, torch.Generator] = {}
        self.done: set[int] = set()  # request ids finished (static batches keep their slots)
        self.apar = decoder if isinstance(decoder, AparDecoder) else None
        self._swapped: dict[int, SwappedBlocks] = {}  # request → its KV in host memory

    def serve(
        self,
        workload: Workload,
        prompts: list[list[int]],
        progress: Callable[[int], None] | None = None,
    ) -> tuple[RunRecords, dict[int, list[int]]]:
        """Serve every request; returns the records and each request's emitted tokens."""
        models = [(self.model, self.cache.block_size), *self.decoder.draft_caches()]
        for model, block_size in models:
            warm_up(model, block_size)  # compile on CUDA now, not mid-run
        self.recorder = Recorder(len(workload))
        self._workload, self._prompts, self._progress = workload, prompts, progress
        self._released = 0
        self._closed_loop_due: list[float] = []  # closed loop: release times of next requests
        if workload.is_closed_loop:
            self._closed_loop_due = [0.0] * min(
                workload.closed_loop_concurrency or 0, len(workload)
            )
        self._start = self.clock()
        self._finished = 0
        self.done = set()
        self.book = BranchBook(self.recorder) if self.apar is not None else None
        self._own: dict[int, list[int]] = {}  # APAR: each branch's own tokens
        self._answers: dict[int, list[int]] = {}  # APAR: each request's reassembled answer
        # APAR: each request's branches' own tokens, in branch order (tests read them)
        self.branch_outputs: dict[int, list[list[int]]] = {}
        self._next_branch_id = len(workload)  # APAR: children's sequence ids
        with torch.inference_mode():
            while self._finished < len(workload):
                self._release_arrivals()
                plan = self.policy.schedule(self._now())
                if plan is None:
                    self._wait_for_work()
                    continue
                self._run(plan)
        if self.apar is not None:
            return self._records(), self._answers
        outputs = {rid: toks[len(prompts[rid]) :] for rid, toks in self.tokens.items()}
        return self._records(), outputs

    # ------------------------------------------------------------------ arrivals

    def _now(self) -> float:
        return self.clock() - self._start

    def _next_arrival_s(self) -> float | None:
        if self._workload.is_closed_loop:
            return min(self._closed_loop_due) if self._closed_loop_due else None
        if self._released < len(self._workload):
            return float(self._workload.arrival_s[self._released])
        return None

    def _release_arrivals(self) -> None:
        now = self._now()
        while (due := self._next_arrival_s()) is not None and due <= now:
            if self._workload.is_closed_loop:
                self._closed_loop_due.remove(due)
            self._admit(self._released, due)
            self._released += 1

    def _admit(self, request_id: int, arrival_s: float) -> None:
        w = self._workload
        prompt = self._prompts[request_id]
        self.tokens[request_id] = list(prompt)
        self.generators[request_id] = request_generator(self.options.seed, request_id)
        self.recorder.arrival_s[request_id] = arrival_s
        self.recorder.replica[request_id] = 0
        if self.book is not None:
            self.book.start(request_id)
            self._own[request_id] = []
        predicted = None if w.predicted_tokens is None else int(w.predicted_tokens[request_id])
        seq = Sequence(
            request_id, arrival_s, len(prompt), int(w.output_tokens[request_id]), predicted
        )
        self.policy.add(seq, arrival_s)

    def _wait_for_work(self) -> None:
        now = self._now()
        time.sleep(max(0.0, self._next_wake_s(now) - now))

    def _next_wake_s(self, now: float) -> float:
        """When an idle engine has work again: the next arrival or the policy's wakeup."""
        wakes = [
            t for t in (self._next_arrival_s(), self.policy.next_wakeup_s(now)) if t is not None
        ]
        if not wakes:
            raise RuntimeError("engine idle with unfinished requests and nothing to wait for")
        return min(wakes)

    # ------------------------------------------------------------------ one step

    def _run(self, plan: StepPlan) -> None:
        for seq in plan.preempted:
            self._evict(seq, plan.step)
        for branch in plan.released:  # ended branches of a preempted request
            self._drop(branch)
        started_s = self._now()  # the step's time holds its swaps, as the simulator's does
        for move in plan.swapped_out:  # a request with several branches, to host memory
            self._swapped[move.owner] = self.cache.swap_out(move.branches)
        for move in plan.swapped_in:
            self.cache.swap_in(self._swapped.pop(move.owner))
        for owner in plan.swap_dropped:  # recomputed instead
            del self._swapped[owner]
        # Prompt tokens really computed (a static plan counts padding; the engine runs real ones).
        prefill_tokens = sum(len(self._chunk_ids(c)) for c in plan.prefills)
        emitted, outcome, decoded = self._forward(plan)
        ended_s = self._now()
        stopped = self._stop_at_eos(emitted)
        for rid, tokens in emitted.items():
            self.tokens[rid].extend(tokens)
        extra = self._bursts(plan.step, emitted)
        result = self.policy.complete(plan, 1, stopped, extra)
        if self.apar is not None:
            self._branch_step(plan.step, emitted, result)
        # Accepted = what the decodes really emitted beyond one each: a drafted token the
        # target confirmed but that fell after a stop (or past the length) was never emitted.
        accepted = sum(len(emitted[rid]) - 1 for rid in decoded)
        self._record_step(plan, started_s, ended_s, emitted, prefill_tokens, outcome, accepted)
        for seq in result.started:
            if math.isnan(self.recorder.first_token_s[seq.owner]):  # first ever emission
                self.recorder.first_token_s[seq.owner] = ended_s
        for seq in result.finished:
            self._finish(seq, ended_s)

    def _evict(self, seq: Sequence, step: int) -> None:
        """Preemption: the KV goes; the tokens the policy still counts as generated stay.

        Recompute preemption keeps them all. A restart from zero (an FCR failure of sequence
        scheduling) keeps none: the tokens go back to the prompt and the request's sampling
        stream starts over, so its output never depends on how it was scheduled.
        """
        rid = seq.request_id
        self._free(rid)
        self.decoder.release(rid)
        self.recorder.close_span(seq, 0, step - 1)
        del self.tokens[rid][len(self._prompts[seq.owner]) + seq.generated :]
        if seq.generated == 0:
            self.generators[rid] = request_generator(self.options.seed, rid)

    def _forward(
        self, plan: StepPlan
    ) -> tuple[dict[int, list[int]], DecodeOutcome | None, list[int]]:
        """Run the plan: the decoder's step for the decodes, prefill chunks in padded groups.
        Returns the tokens emitted per request, the decoder's outcome and the decoded ids."""
        emitted: dict[int, list[int]] = {}
        outcome = None
        # A static batch keeps finished members as padding slots; the runner computes only
        # the live ones (the plan and the step records still count every slot).
        decodes = [s for s in self.policy.decode_sequences() if s.request_id not in self.done]
        requests = [self._decode_request(s) for s in decodes]
        forks, prefills = self._fork_chunks(plan.prefills)
        if forks:  # APAR: forks' first tokens in the decodes' forward
            outcome, firsts = self._decode_with_forks(requests, forks)
            emitted.update(firsts)
        elif requests:
            outcome = self.decoder.decode(requests)
        if outcome is not None:
            for r, tokens in zip(requests, outcome.emitted, strict=True):
                emitted[r.request_id] = tokens[: r.max_new]  # never past the request's length
        for group in prefill_groups(prefills):
            steps = [SeqStep(c.seq.request_id, self._chunk_ids(c)) for c in group]
            for chunk, logits in zip(group, self.model.step(self.cache, steps, True), strict=True):
                if chunk.context_tokens + chunk.tokens >= chunk.seq.prefill_target:  # (static pads)
                    token = self._choose(chunk.seq, logits[-1])
                    emitted[chunk.seq.request_id] = [token]
        return emitted, outcome, [r.request_id for r in requests]

    def _decode_request(self, seq: Sequence) -> DecodeRequest:
        rid = seq.request_id
        return DecodeRequest(
            rid, self.tokens[rid], max(self._remaining(seq), 1), self.generators[rid]
        )

    def _remaining(self, seq: Sequence) -> int:
        """Tokens `seq` may still emit (the policy's counters of decoding members are lazy)."""
        emitted = len(self.tokens[seq.request_id]) - len(self._prompts[seq.owner])
        return seq.output_tokens - emitted

    def _bursts(self, step: int, emitted: dict[int, list[int]]) -> dict[int, int]:
        """Record multi-token emissions; return the extra tokens per request for the policy."""
        extra = {rid: len(tokens) - 1 for rid, tokens in emitted.items() if len(tokens) > 1}
        if extra and self.apar is None:  # APAR's book records its branches' emissions
            members = {s.request_id: s for s in self.policy.decode_sequences()}
            for rid, more in extra.items():
                self.recorder.burst(members[rid], 0, step, 1 + more)
        return extra

    def _chunk_ids(self, chunk: PrefillChunk) -> list[int]:
        start = chunk.context_tokens
        return self.tokens[chunk.seq.request_id][start : start + chunk.tokens]

    def _choose(self, seq: Sequence, logits: torch.Tensor) -> int:
        rid = seq.request_id
        if self.apar is not None:  # its logit rules hold for a prefill's emission too
            return self.apar.choose(
                rid, self.tokens[rid], logits, self._remaining(seq), self.generators[rid]
            )
        return next_token(logits, self.options.sampling, self.generators[rid])

    def _stop_at_eos(self, emitted: dict[int, list[int]]) -> set[int]:
        """Cut each emission after an EOS (or stop token); return the requests that emitted one."""
        stops = self.options.stop_token_ids | self.options.eos_token_ids
        if self.options.ignore_eos or not stops:
            return set()
        stopped = set()
        for rid, tokens in emitted.items():
            end = next((i for i, token in enumerate(tokens) if token in stops), None)
            if end is not None:
                del tokens[end + 1 :]
                stopped.add(rid)
        return stopped

    def _finish(self, seq: Sequence, now_s: float) -> None:
        rec = self.recorder
        rec.finish_s[seq.request_id] = now_s
        rec.output_tokens[seq.request_id] = seq.generated
        rec.preemptions[seq.request_id] = seq.preemptions
        self.done.add(seq.request_id)
        self.recorder.close_span(seq, 0, self.policy.step - 1)
        if self.apar is not None:
            rec.output_tokens[seq.request_id] = self._finish_branches(seq.request_id)
        self._free(seq.request_id)
        self.decoder.release(seq.request_id)
        self._finished += 1
        if self._progress is not None:
            self._progress(1)
        if self._workload.is_closed_loop and self._released + len(self._closed_loop_due) < len(
            self._workload
        ):
            self._closed_loop_due.append(now_s + self._workload.think_time_s)

    # ------------------------------------------------------------------ APAR branches

    def _branch_step(self, step: int, emitted: dict[int, list[int]], result: StepResult) -> None:
        """Record the step's branch emissions, fork where a branch's newest token is the fork
        token (and it still decodes), and free the blocks the policy released."""
        assert self.apar is not None and self.book is not None
        for sid in sorted(emitted):
            self.book.emit(sid, 0, step, len(emitted[sid]))
            self._own[sid].extend(emitted[sid])
        self.book.close_step(0, step)
        for seq in result.started:
            seq.first_emit_step = -1  # the book records APAR emissions, not the policy's spans
        decoding = {s.request_id: s for s in self.policy.decode_sequences()}
        for sid in sorted(emitted):
            if emitted[sid][-1] == self.apar.fork_token and sid in decoding:
                self._fork(decoding[sid])
        for seq in result.branches_ended:
            self.apar.rules.ended(seq.request_id)
            self._end_branch(seq.request_id)
        for branch in result.released:
            self._drop(branch)

    def _end_branch(self, branch_id: int) -> None:
        """A branch ended: its cache keeps its own tokens but the newest (a speculating
        branch may have cached accepted tokens past its EOS), for the forks that read it
        until the policy releases it; its draft state goes now."""
        if branch_id in self.cache.tables:
            keep = min(self.cache.length(branch_id), len(self.tokens[branch_id]) - 1)
            self.cache.truncate(branch_id, keep)
        self.decoder.release(branch_id)

    def _fork(self, parent: Sequence) -> None:
        assert self.apar is not None and self.book is not None
        sid, owner = parent.request_id, parent.owner
        child_id = self._next_branch_id
        self._next_branch_id += 1
        room = self._remaining(parent) - 1  # after the child token, within the same limit
        assert isinstance(self.policy, ContinuousBatching)
        self.policy.fork(parent, child_id, room)
        index = self.book.fork(sid, child_id)
        self.apar.rules.forked(sid, child_id)
        self.tokens[child_id] = [*self.tokens[sid], self.apar.child_token]
        self.generators[child_id] = branch_generator(self.options.seed, owner, index)
        self._own[child_id] = []

    def _fork_chunks(
        self, chunks: list[PrefillChunk]
    ) -> tuple[list[PrefillChunk], list[PrefillChunk]]:
        """(chunks of forks sharing a parent's prefix, the other prefill chunks)."""
        if self.apar is None:
            return [], chunks
        forks = [c for c in chunks if c.seq.parent_id >= 0]
        return forks, [c for c in chunks if c.seq.parent_id < 0]

    def _decode_with_forks(
        self, requests: list[DecodeRequest], forks: list[PrefillChunk]
    ) -> tuple[DecodeOutcome, dict[int, list[int]]]:
        """One forward for the decodes and the forks' chunks (two tokens each: the fork and
        child tokens) over their shared prefixes; returns the forks' first tokens too."""
        assert self.apar is not None
        chunks = []
        for chunk in forks:
            seq = chunk.seq
            if seq.request_id not in self.cache.tables:  # its first chunk: share the prefix
                self.cache.fork(seq.parent_id, seq.request_id)
                self.cache.truncate(seq.request_id, chunk.context_tokens)
                self.apar.share_draft_prefix(seq.parent_id, seq.request_id, chunk.context_tokens)
            emits = chunk.context_tokens + chunk.tokens >= seq.prefill_target
            chunks.append(
                ForkChunk(
                    seq.request_id,
                    self._chunk_ids(chunk),
                    self.tokens[seq.request_id],
                    self._remaining(seq),
                    self.generators[seq.request_id],
                    emits,
                )
            )
        outcome, firsts = self.apar.decode_with_forks(requests, chunks)
        return outcome, {sid: [token] for sid, token in firsts.items()}

    def _finish_branches(self, request_id: int) -> int:
        """The request's tree and reassembled answer; returns its emitted tokens."""
        assert self.apar is not None and self.book is not None
        sids = self.book.by_request[request_id]
        own = [self._own.pop(sid) for sid in sids]
        skip = {self.apar.fork_token} | self.options.eos_token_ids
        answers = [sum(t not in skip for t in tokens) for tokens in own]
        parent, fork_at, tokens = self.book.tree_shape(request_id)
        tree = BranchTree(tuple(parent), tuple(fork_at), tuple(tokens), tuple(answers))
        self._answers[request_id] = reassemble(tree, own, skip)
        self.branch_outputs[request_id] = own
        for sid in sids:
            self._drop(sid)
            if sid != request_id:
                del self.tokens[sid], self.generators[sid]
        self.apar.rules.forget(request_id)
        return self.book.finish(request_id, answers)

    def _free(self, sequence_id: int) -> None:
        if sequence_id in self.cache.tables:
            self.cache.free(sequence_id)

    def _drop(self, branch_id: int) -> None:
        """An APAR branch is gone: its KV and the decoder's state of it (a draft cache)."""
        self._free(branch_id)
        self.decoder.release(branch_id)

    # ------------------------------------------------------------------ records

    def _record_step(
        self,
        plan: StepPlan,
        start_s: float,
        end_s: float,
        emitted: dict[int, list[int]],
        prefill_tokens: int,
        outcome: DecodeOutcome | None,
        accepted: int,
    ) -> None:
        self.recorder.steps.append(
            replica=0,
            step=plan.step,
            start_s=start_s,
            duration_s=end_s - start_s,
            batch_size=plan.batch_size,
            prefill_tokens=prefill_tokens,
            decode_tokens=plan.decode_batch_size,
            kv_blocks_used=self.cache.allocator.num_blocks - self.cache.num_free_blocks,
            emitted_tokens=sum(len(tokens) for tokens in emitted.values()),
            drafted_tokens=outcome.drafted if outcome else 0,
            accepted_tokens=accepted,
            verified_tokens=outcome.verified if outcome else 0,
            draft_s=outcome.draft_s if outcome else 0.0,
        )

    def _records(self) -> RunRecords:
        prompt_tokens = torch.tensor([len(p) for p in self._prompts]).numpy()
        rec = self.recorder
        return RunRecords(
            requests=rec.request_records(prompt_tokens),
            steps=rec.step_records(),
            emissions=rec.emission_spans(),
            branches=None if self.book is None else self.book.records(),
        )
