"""APAR on the zoo's APAR model (CPU), one request at a time: steps and wall-clock.

Opt-in. For each held-out structured prompt of `data/prompts/apar_stdlib.jsonl`, the
methods take turns (interleaved per prompt, best of --repeat each, so a busy machine
slows them alike), each through the real engine with the same model loaded once:

- apar: APAR decoding (forks on), its branches batched;
- vanilla: the same model with the fork token banned (`max_branches: 1`): what it writes
  without forking;
- sequential: the same model decoding APAR's reassembled answer one token per step (the
  answer fed as forced tokens: the cost of writing that text sequentially);
- with --speculative K (the zoo entry's draft, k = K): apar+spec, APAR with every branch
  speculating, and vanilla+spec, the fork-banned model with speculative decoding.

Reports per method: generation steps, wall-clock seconds, answer tokens, numbered list items
written; and the ratios sequential/apar and vanilla/apar. Unstructured prompts are checked
for forks too.

With --load RATE..., the same prompts (each --copies times) arrive as a Poisson stream at
each rate under continuous batching, the three methods taking turns at each rate (the
sequential one decoding each request's APAR answer): requests per second, p50/p99 E2E, steps;
then where the latencies come from: the steps each request lived through (arrival to finish),
median and 99th percentile, and the mean step time over them (E2E = steps lived × that).

    python benchmarks/apar_speed.py [--zoo apar-small] [--prompts 24] [--max-new 160]
        [--repeat 3] [--threads 1] [--load 2 4 8] [--copies 4] [--speculative 4]
        [--kernels reference]
        [--device cuda --dtype bf16 --kernels triton]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from real_backend.decoders.apar import AparDecoder, ForkTokens, branch_drafter, fork_tokens
from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.engine import RealEngine, ServeOptions
from real_backend.kv_cache import PagedKVCache
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.serve import DTYPES, eos_token_ids
from real_backend.zoo.build import resolve_zoo_model
from workbench.metrics import summarize
from workbench.scenario.decoders import AparDecoderConfig, AparSpeculationConfig
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from workbench.records import RunRecords

PROMPTS = Path(__file__).resolve().parent.parent / "data" / "prompts" / "apar_stdlib.jsonl"
BLOCK = 16


class ForcedDecoder(Decoder):
    """Decodes given answers: each step's forward as vanilla's, the next answer token out."""

    def __init__(
        self, model: Transformer, cache, answers: dict[int, list[int]], prompt_lens: dict[int, int]
    ) -> None:
        self.model, self.cache = model, cache
        self.answers, self.prompt_lens = answers, prompt_lens

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        steps = [SeqStep(r.request_id, [r.tokens[-1]]) for r in batch]
        self.model.step(self.cache, steps, last_only=True)
        emitted = [
            [self.answers[r.request_id][len(r.tokens) - self.prompt_lens[r.request_id]]]
            for r in batch
        ]
        return DecodeOutcome(emitted, verified=len(batch))


DecoderFor = Callable[[PagedKVCache], Decoder]  # a cache → the decoder serving over it


def methods(
    model: Transformer, tokens: ForkTokens, draft: Transformer | None, k: int
) -> dict[str, DecoderFor]:
    """The decoders compared (the sequential one aside), by name."""

    def apar(cache: PagedKVCache, max_branches: int = 16) -> AparDecoder:
        config = AparDecoderConfig(kind="apar", max_branches=max_branches)
        return AparDecoder(model, cache, config, tokens)

    def speculating(cache: PagedKVCache, max_branches: int = 16) -> AparDecoder:
        assert draft is not None
        spec = AparSpeculationConfig(num_speculative_tokens=k)
        config = AparDecoderConfig(kind="apar", max_branches=max_branches, speculative=spec)
        return AparDecoder(model, cache, config, tokens, branch_drafter(draft, cache, config))

    out: dict[str, DecoderFor] = {"apar": apar, "vanilla": lambda c: apar(c, max_branches=1)}
    if draft is not None:
        out["apar+spec"] = speculating
        out["vanilla+spec"] = lambda c: speculating(c, max_branches=1)
    return out


@dataclass
class Run:
    steps: int
    seconds: float
    answer: list[int]
    branches: int
    capped: bool  # some branch stopped at the token cap, not at EOS


def capped_requests(records) -> int:
    """Requests with a branch that ended without EOS, at its token cap (a child's cap is what
    its parent had left). A branch's own tokens are its answer tokens, one fork token per
    child and, unless capped, one EOS."""
    b = records.branches
    if b is None:
        return 0
    child = b.parent >= 0
    children = Counter(zip(b.request_id[child].tolist(), b.parent[child].tolist(), strict=True))
    ids = zip(b.request_id.tolist(), b.branch.tolist(), strict=True)
    forks = np.array([children[(r, i)] for r, i in ids])
    without_eos = b.tokens - b.answer_tokens - forks == 0
    return len(np.unique(b.request_id[without_eos]))


def serve_one(model, prompt: list[int], decoder_for, max_new: int, eos: frozenset[int]) -> Run:
    cache = model.new_cache(4 * (len(prompt) + max_new) // BLOCK + 64, BLOCK)
    decoder = decoder_for(cache)
    policy = ContinuousBatching(
        num_blocks=cache.allocator.num_blocks,
        block_size=BLOCK,
        max_batch_size=64,
        max_batched_tokens=4096,
        lookahead_slots=decoder.lookahead_slots,
        branching=isinstance(decoder, AparDecoder),
    )
    sampling = (
        decoder.config if isinstance(decoder, AparDecoder) else AparDecoderConfig(kind="apar")
    )
    forced = isinstance(decoder, ForcedDecoder)
    options = ServeOptions(sampling=sampling, seed=0, eos_token_ids=eos, ignore_eos=forced)
    w = Workload(
        arrival_s=np.zeros(1),
        prompt_tokens=np.array([len(prompt)]),
        output_tokens=np.array([max_new]),
    )
    engine = RealEngine(model, cache, policy, options, decoder)
    start = time.perf_counter()
    records, answers = engine.serve(w, [prompt])
    seconds = time.perf_counter() - start
    e = records.emissions
    steps = int((e.last_step - e.first_step + 1).sum())
    branches = 1 if records.branches is None else len(records.branches)
    answer = answers[0] if not forced else decoder.answers[0]
    return Run(steps, seconds, list(answer), branches, capped_requests(records) > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo", default="apar-small")
    parser.add_argument("--prompts", type=int, default=24)
    # A request's token cap (a child's is what its parent has left): above every fork-banned
    # apar-small answer (at most about 110 tokens), so a capped answer is a branch that runs
    # on (the tables count them).
    parser.add_argument("--max-new", type=int, default=160)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--load", type=float, nargs="*", default=[], help="request rates")
    parser.add_argument(
        "--copies", type=int, default=1,
        help="under load, each structured prompt this many times (a longer stream: a "
        "saturated run's throughput less its start and end)",
    )  # fmt: skip
    parser.add_argument(
        "--kernels", choices=["grouped", "reference", "triton"], default="grouped",
        help="attention kernels (reference: every row padded to the step's longest; "
        "triton: CUDA only)",
    )  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument(
        "--speculative", type=int, default=0, help="k: also run APAR and vanilla speculating"
    )
    args = parser.parse_args()
    if args.copies < 1:
        parser.error(f"--copies: at least 1, not {args.copies}")
    torch.set_num_threads(args.threads)
    folder = resolve_zoo_model(args.zoo, "target")
    dtype = DTYPES[args.dtype]
    model = load_checkpoint(folder, dtype, args.device)
    model.fuse()
    model.use_kernels(args.kernels)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    eos = eos_token_ids(folder)
    apar_cfg = AparDecoderConfig(kind="apar")
    tokens = fork_tokens(folder, apar_cfg)
    skip = {tokens.fork} | set(eos)
    draft = None
    if args.speculative:
        draft = load_checkpoint(resolve_zoo_model(args.zoo, "draft"), dtype, args.device)
        draft.fuse()
        draft.use_kernels(args.kernels)
    compared = methods(model, tokens, draft, args.speculative)
    results: dict[str, list[Run]] = {name: [] for name in [*compared, "sequential"]}
    unstructured_forks = []
    with torch.inference_mode():
        for row in rows:
            prompt = tok.encode(row["turns"][0]).ids
            if row["category"] == "unstructured":
                if len(unstructured_forks) < args.prompts:
                    run = serve_one(
                        model,
                        prompt,
                        lambda c: AparDecoder(model, c, apar_cfg, tokens),
                        args.max_new,
                        eos,
                    )
                    unstructured_forks.append(run.branches > 1)
                continue
            if len(results["apar"]) >= args.prompts:
                continue
            best: dict[str, Run] = {}
            for _ in range(args.repeat):
                runs = {
                    name: serve_one(model, prompt, decoder_for, args.max_new, eos)
                    for name, decoder_for in compared.items()
                }
                answer = [t for t in runs["apar"].answer if t not in skip]

                def forced(cache, answer=answer, prompt=prompt):
                    return ForcedDecoder(model, cache, {0: [*answer, min(eos)]}, {0: len(prompt)})

                runs["sequential"] = serve_one(model, prompt, forced, len(answer) + 1, eos)
                for name, run in runs.items():
                    if name not in best or run.seconds < best[name].seconds:
                        best[name] = run
            for name, run in best.items():
                results[name].append(run)
    if results["apar"]:
        report(results, unstructured_forks, args, tok)
    if args.load:
        structured = [tok.encode(r["turns"][0]).ids for r in rows if r["category"] == "structured"]
        under_load(model, structured * args.copies, tokens, eos, args, compared, tok)


def under_load(
    model: Transformer,
    prompts: list[list[int]],
    tokens: ForkTokens,
    eos: frozenset[int],
    args: argparse.Namespace,
    compared: dict[str, DecoderFor],
    tok: Tokenizer,
) -> None:
    """The methods in turn at each rate, the same Poisson arrivals for all three; the best
    run of each (by requests per second) reported, then where its latencies come from."""
    skip = {tokens.fork} | set(eos)
    print(f"\nunder load: {len(prompts)} structured prompts, Poisson, continuous batching")
    print(
        "| rate/s | method | requests/s | p50 E2E s | p99 E2E s | steps | answer tokens "
        "| capped answers |"
    )
    print("|---|---|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    tails: list[str] = []
    for rate in args.load:
        arrivals = np.cumsum(rng.exponential(1 / rate, len(prompts)))
        arrivals -= arrivals[0]
        best: dict[str, LoadRow] = {}
        for _ in range(args.repeat):
            for name, (records, out) in serve_in_turn(
                model, prompts, arrivals, eos, args, compared, skip
            ).items():
                row = LoadRow.of(records, out, skip, tok)
                if name not in best or row.throughput > best[name].throughput:
                    best[name] = row
        for name, row in best.items():
            print(f"| {rate} | {name} | {row.line} |")
            tails.append(f"| {rate} | {name} | {row.tail} |")
    print("\nwhere the latencies come from (the runs above): steps each request lived through")
    print("| rate/s | method | steps lived p50 / p99 | mean ms per step lived | lines that loop |")
    print("|---|---|---|---|---|")
    print("\n".join(tails))


def serve_in_turn(
    model: Transformer,
    prompts: list[list[int]],
    arrivals: np.ndarray,
    eos: frozenset[int],
    args: argparse.Namespace,
    compared: dict[str, DecoderFor],
    skip: set[int],
) -> dict[str, tuple[RunRecords, dict[int, list[int]]]]:
    """Each compared method, then the sequential one decoding APAR's answers."""
    runs = {
        name: serve_many(model, prompts, arrivals, args.max_new, eos, decoder_for)
        for name, decoder_for in compared.items()
    }
    apar = runs["apar"][1]
    answers = {i: [t for t in a if t not in skip] + [min(eos)] for i, a in apar.items()}
    lengths = {i: len(p) for i, p in enumerate(prompts)}
    runs["sequential"] = serve_many(
        model,
        prompts,
        arrivals,
        args.max_new,
        eos,
        lambda c: ForcedDecoder(model, c, answers, lengths),
        answers,
    )
    return runs


@dataclass
class LoadRow:
    throughput: float  # requests per second
    line: str  # the load table's cells
    tail: str  # the latency table's cells

    @classmethod
    def of(
        cls, records: RunRecords, answers: dict[int, list[int]], skip: set[int], tok: Tokenizer
    ) -> LoadRow:
        s = summarize(records)
        written = [[t for t in a if t not in skip] for a in answers.values()]
        texts, tokens = [tok.decode(ids) for ids in written], sum(map(len, written))
        steps = int(records.steps.step.max()) + 1
        rps, p50, p99 = s["request_throughput"], s["median_e2el_ms"], s["p99_e2el_ms"]
        line = (
            f"{rps:.2f} | {p50 / 1000:.2f} | {p99 / 1000:.2f} | {steps} | {tokens} "
            f"| {capped_requests(records)}"
        )
        return cls(rps, line, f"{lived_steps(records)} | {looping_lines(texts)}")


def lived_steps(records: RunRecords) -> str:
    """Steps each request lived through, whole, from arrival to finish: p50 / p99 of the
    count, and the mean over requests of E2E / count (the step time a request saw)."""
    st, rq = records.steps, records.requests
    order = np.argsort(st.start_s)
    start, end = st.start_s[order], (st.start_s + st.duration_s)[order]
    first = np.searchsorted(start, rq.arrival_s, side="left")
    last = np.searchsorted(np.maximum.accumulate(end), rq.finish_s + 1e-9, side="right")
    count = np.maximum(last - first, 1)
    per_step_ms = (rq.finish_s - rq.arrival_s) / count * 1e3
    p50, p99 = np.percentile(count, [50, 99])
    return f"{p50:.0f} / {p99:.0f} | {per_step_ms.mean():.2f}"


def looping_lines(texts: list[str], n: int = 3, times: int = 3) -> str:
    """Answer lines in which some run of `n` words recurs `times` times or more (a detail
    the model repeats itself in), of all non-empty lines."""
    lines = [line.split() for text in texts for line in text.splitlines() if line.strip()]
    loops = sum(
        max(Counter(tuple(w[i : i + n]) for i in range(len(w) - n + 1)).values(), default=0)
        >= times
        for w in lines
    )
    return f"{loops} of {len(lines)}"


def serve_many(model, prompts, arrivals, max_new, eos, decoder_for, forced=None):
    """All prompts arriving at `arrivals` under continuous batching; (records, answers)."""
    total = sum(len(p) for p in prompts) + len(prompts) * max_new
    cache = model.new_cache(4 * total // BLOCK + 64, BLOCK)
    decoder = decoder_for(cache)
    policy = ContinuousBatching(
        num_blocks=cache.allocator.num_blocks,
        block_size=BLOCK,
        max_batch_size=256,
        max_batched_tokens=4096,
        lookahead_slots=decoder.lookahead_slots,
        branching=isinstance(decoder, AparDecoder),
    )
    outputs = np.array([len(forced[i]) if forced else max_new for i in range(len(prompts))])
    w = Workload(
        arrival_s=arrivals, prompt_tokens=np.array([len(p) for p in prompts]), output_tokens=outputs
    )
    options = ServeOptions(
        sampling=AparDecoderConfig(kind="apar"),
        seed=0,
        eos_token_ids=eos,
        ignore_eos=forced is not None,
    )
    records, answers = RealEngine(model, cache, policy, options, decoder).serve(w, prompts)
    return records, (forced if forced else answers)


def list_items(text: str) -> int:
    """Numbered items an answer writes ("3. `name`: ..."), each at a line's start."""
    return len(re.findall(r"^\d+\. ", text, flags=re.MULTILINE))


def report(results: dict[str, list[Run]], unstructured: list[bool], args, tok) -> None:
    apar = results["apar"]
    print(
        f"zoo {args.zoo}, {len(apar)} held-out structured prompts, one request at a time, "
        f"best of {args.repeat}, {args.threads} threads"
    )
    print(
        f"fork rate: structured {np.mean([r.branches > 1 for r in apar]):.2f}, "
        f"unstructured {np.mean(unstructured) if unstructured else float('nan'):.2f} "
        f"({len(unstructured)} prompts)"
    )
    print(
        "| method | steps | seconds | answer tokens | items | capped answers | steps vs apar "
        "| seconds vs apar |"
    )
    print("|---|---|---|---|---|---|---|---|")
    a_steps = sum(r.steps for r in apar)
    a_secs = sum(r.seconds for r in apar)
    for name, runs in results.items():
        steps, secs = sum(r.steps for r in runs), sum(r.seconds for r in runs)
        answer, capped = sum(len(r.answer) for r in runs), sum(r.capped for r in runs)
        items = sum(list_items(tok.decode(r.answer)) for r in runs)
        ratios = f"{steps / a_steps:.2f}x | {secs / a_secs:.2f}x"
        print(f"| {name} | {steps} | {secs:.2f} | {answer} | {items} | {capped} | {ratios} |")


if __name__ == "__main__":
    main()
