"""Speculative and lookahead decoding on the zoo pair, against `transformers` on CPU.

Opt-in. For each prompt (Spec-Bench questions and code from the zoo's held-out stdlib
files), generate the same number of tokens greedily, one request at a time, with:

- ours: vanilla, speculative (chain of k, and a token tree), lookahead (W, N, G);
- transformers: `generate` (vanilla), assisted generation with the zoo draft
  (`assistant_model=`, constant schedule, k tokens, confidence threshold off, all set on the
  assistant's generation config, where transformers reads them), and prompt-lookup
  decoding (`prompt_lookup_num_tokens=`).

Models load once; per prompt the methods take turns, best of --repeat runs each.

It reports per method and prompt category: wall-clock tokens/s, speed-up over our vanilla,
tokens per target forward, and whether the greedy outputs equal our vanilla's; then, for each
output that differs, where it parts from vanilla's and the gap between vanilla's top two
logits there (in bf16 a tie of the dtype can resolve either way in exact-in-fp32 methods).

    python benchmarks/decoding_speed.py [--zoo small] [--prompts 10] [--new-tokens 96]
        [--threads 1] [--lookahead W N G [W N G ...]] [--device cuda --dtype bf16]

On CUDA every method runs on the card in the same dtype (ours with its default kernels,
Triton); each generator returns token lists, so every timed call ends synchronised.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import transformers

from real_backend.decoders.factory import build_decoder, load_draft
from real_backend.engine import RealEngine, ServeOptions
from real_backend.model import Transformer
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import SeqStep
from real_backend.serve import DTYPES
from real_backend.zoo.build import resolve_zoo_model
from real_backend.zoo.corpus import build_corpus
from real_backend.zoo.specs import get_spec
from workbench.scenario.decoders import (
    DecoderConfig,
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
    VanillaDecoderConfig,
)
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

SPECBENCH = Path(__file__).resolve().parent.parent / "data" / "prompts" / "specbench_question.jsonl"
BLOCK = 16
MAX_PROMPT = 256  # tokens; Spec-Bench's RAG and summarisation contexts run to thousands


@dataclass
class Prompt:
    category: str
    ids: list[int]


@dataclass
class Result:
    method: str
    seconds: dict[str, float] = field(default_factory=dict)  # per category
    tokens: dict[str, int] = field(default_factory=dict)
    forwards: dict[str, int] = field(default_factory=dict)
    same: dict[str, int] = field(default_factory=dict)  # prompts equal to our vanilla
    # (prompt index, first position that differs from our vanilla's output)
    diverged: list[tuple[int, int]] = field(default_factory=list)


def load_prompts(tokenizer_file: Path, zoo: str, n: int, code_tokens: int) -> list[Prompt]:
    """`n` Spec-Bench questions (spread over its categories) and `n` code snippets."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    rows = [json.loads(line) for line in SPECBENCH.read_text().splitlines() if line.strip()]
    questions = [tok.encode(r["turns"][0]).ids for r in rows]
    questions = [q for q in questions if len(q) <= MAX_PROMPT]  # long RAG contexts aside
    step = max(1, len(questions) // n)
    prompts = [Prompt("specbench", q) for q in questions[::step][:n]]
    spec = get_spec(zoo)
    corpus = build_corpus(spec.train_bytes, spec.heldout_bytes)
    files = [tok.encode(text).ids for text in corpus.heldout]
    for ids in [f for f in files if len(f) >= 3 * code_tokens][:n]:
        start = len(ids) // 3  # mid-file: indented code with context
        prompts.append(Prompt("code", ids[start : start + code_tokens]))
    return prompts


def ours(
    target: Transformer, draft: Transformer, config: DecoderConfig, new_tokens: int
) -> Callable:
    """Our engine serving one request, with models loaded once (as transformers' side)."""

    def generate(prompt: list[int]) -> tuple[list[int], int]:
        blocks = 4 * (-(-(len(prompt) + new_tokens + 128) // BLOCK))
        cache = target.new_cache(blocks, BLOCK)
        decoder = build_decoder(config, target, cache, draft)
        policy = ContinuousBatching(
            num_blocks=blocks, block_size=BLOCK, max_batch_size=1, max_batched_tokens=4096,
            lookahead_slots=decoder.lookahead_slots,
        )  # fmt: skip
        options = ServeOptions(VanillaDecoderConfig(kind="vanilla"), seed=0)
        engine = RealEngine(target, cache, policy, options, decoder)
        one = Workload(np.zeros(1), np.array([len(prompt)]), np.array([new_tokens]))
        records, outputs = engine.serve(one, [prompt])
        return outputs[0], len(records.steps.step)

    return generate


def hf(
    folder: Path,
    new_tokens: int,
    assistant: Path | None = None,
    k: int = 0,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    **generation,
) -> Callable:
    """`generate` on the checkpoint; with `assistant`, assisted generation drafting exactly k
    tokens a round. transformers reads the draft length, its schedule and the confidence
    threshold from the *assistant's* generation config (left at its defaults, a 0.4 threshold
    cuts drafts short and the "heuristic" schedule carries k between calls), so they are set
    there."""
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    model = model.to(device).eval()
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    kwargs = {}
    if assistant is not None:
        draft = transformers.AutoModelForCausalLM.from_pretrained(assistant, dtype=dtype)
        draft = draft.to(device)
        draft.generation_config.num_assistant_tokens = k
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0  # never stop early
        kwargs["assistant_model"] = draft.eval()
    config = transformers.GenerationConfig(
        max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
        eos_token_id=None, pad_token_id=2, **generation,
    )  # fmt: skip

    def generate(prompt: list[int]) -> tuple[list[int], int]:
        ids = torch.tensor([prompt], device=device)
        calls[0] = 0
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=torch.ones_like(ids), generation_config=config, **kwargs
            )
        return out[0, len(prompt) :].tolist(), calls[0]

    return generate


def methods(
    zoo: str,
    k: int,
    new_tokens: int,
    shapes: list[tuple[int, int, int]],
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> dict[str, Callable]:
    target_dir, draft_dir = resolve_zoo_model(zoo, "target"), resolve_zoo_model(zoo, "draft")
    target = load_checkpoint(target_dir, dtype, device)
    on = {"device": device, "dtype": dtype}
    draft = load_draft(draft_dir, target)
    spec = SpeculativeDecoderConfig(kind="speculative", num_speculative_tokens=k)
    tree = SpeculativeDecoderConfig(
        kind="speculative", tree={"kind": "static", "branching": [2, 2, 1, 1]}
    )
    adaptive = SpeculativeDecoderConfig(
        kind="speculative", num_speculative_tokens=k + 2, adaptive={"min_tokens": 1, "window": 4}
    )
    lookahead = {
        f"ours lookahead W{w} N{n} G{g}": ours(
            target,
            draft,
            LookaheadDecoderConfig(kind="lookahead", window=w, ngram=n, candidates=g),
            new_tokens,
        )
        for w, n, g in shapes
    }
    return {
        "ours vanilla": ours(target, draft, VanillaDecoderConfig(kind="vanilla"), new_tokens),
        f"ours speculative k={k}": ours(target, draft, spec, new_tokens),
        f"ours speculative adaptive k<={k + 2}": ours(target, draft, adaptive, new_tokens),
        "ours speculative tree 2-2-1-1": ours(target, draft, tree, new_tokens),
        **lookahead,
        "hf generate": hf(target_dir, new_tokens, **on),
        f"hf assisted k={k}": hf(target_dir, new_tokens, draft_dir, k, **on),
        "hf prompt lookup 10": hf(target_dir, new_tokens, prompt_lookup_num_tokens=10, **on),
    }


def run(
    prompts: list[Prompt], generators: dict[str, Callable], repeat: int
) -> tuple[list[Result], list[list[int]]]:
    """Best of `repeat` per method and prompt, the methods taking turns on each prompt (in a
    rotating order), so a slow spell of the machine hits every method alike; with the first
    method's (our vanilla's) outputs, the reference."""
    names = list(generators)
    results = {name: Result(name) for name in names}
    references = []
    for generate in generators.values():
        generate(prompts[0].ids)  # warm-up
    for i, p in enumerate(prompts):
        best = dict.fromkeys(names, float("inf"))
        outputs: dict[str, tuple[list[int], int]] = {}
        for r in range(repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                outputs[name] = generators[name](p.ids)
                best[name] = min(best[name], time.perf_counter() - t0)
        reference = outputs[names[0]][0]
        references.append(reference)
        for name in names:
            res, c, (out, forwards) = results[name], p.category, outputs[name]
            res.seconds[c] = res.seconds.get(c, 0.0) + best[name]
            res.tokens[c] = res.tokens.get(c, 0) + len(out)
            res.forwards[c] = res.forwards.get(c, 0) + forwards
            res.same[c] = res.same.get(c, 0) + (out == reference)
            if out != reference:
                res.diverged.append((i, first_difference(out, reference)))
        print(f"  prompt {i + 1}/{len(prompts)} done", flush=True)
    return list(results.values()), references


def first_difference(a: list[int], b: list[int]) -> int:
    return next(
        (j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def last_logits(target: Transformer, ids: list[int]) -> torch.Tensor:
    """The logits after `ids`, from one prefill into a fresh cache."""
    cache = target.new_cache(-(-len(ids) // BLOCK) + 1, BLOCK)
    return target.step(cache, [SeqStep(0, ids)], last_only=True)[0][0]  # (V,)


def margins(
    results: list[Result], prompts: list[Prompt], reference: list[list[int]], target: Transformer
) -> str:
    """Where an output left our vanilla's, how near a tie vanilla's choice was: the gap
    between the top two logits of a full forward over the prompt and vanilla's tokens up to
    that position (same model, dtype and card). A gap within the dtype's rounding of logits
    of this size says the two decodings parted on a tie, not on a wrong token."""
    lines = []
    for r in results[1:]:
        for i, pos in r.diverged:
            ids = prompts[i].ids + reference[i][:pos]
            logits = last_logits(target, ids)  # (V,)
            top = torch.topk(logits, 2).values
            lines.append(
                f"{r.method}: prompt {i} ({prompts[i].category}) parts at token {pos}; "
                f"vanilla's top-2 logits {top[0]:.3f} and {top[1]:.3f} (gap {top[0] - top[1]:.4f})"
            )
    return "\n".join(lines)


def table(results: list[Result], counts: dict[str, int]) -> str:
    base = results[0]
    lines = [
        "| method | category | tok/s | speed-up vs ours vanilla | tokens/forward | = vanilla |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for c in r.seconds:
            tps = r.tokens[c] / r.seconds[c]
            speedup = base.seconds[c] / r.seconds[c]
            lines.append(
                f"| {r.method} | {c} | {tps:,.0f} | {speedup:.2f}× | "
                f"{r.tokens[c] / max(r.forwards[c], 1):.2f} | {r.same[c]}/{counts[c]} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--zoo", default="small")
    ap.add_argument("--prompts", type=int, default=10, help="per category")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--code-tokens", type=int, default=96, help="code prompt length")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument(
        "--lookahead",
        type=int,
        nargs="+",
        default=[5, 4, 5, 2, 4, 2],
        help="W N G triples: the paper-like 5 4 5, and 2 4 2 (a window a CPU can afford)",
    )
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="best of this many runs per prompt")
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target = resolve_zoo_model(args.zoo, "target")
    prompts = load_prompts(target / "tokenizer.json", args.zoo, args.prompts, args.code_tokens)
    counts = {c: sum(p.category == c for p in prompts) for c in ("specbench", "code")}
    if len(args.lookahead) % 3:
        ap.error("--lookahead takes W N G triples")
    look = args.lookahead
    shapes = [(look[i], look[i + 1], look[i + 2]) for i in range(0, len(look), 3)]
    generators = methods(args.zoo, args.k, args.new_tokens, shapes, args.device, DTYPES[args.dtype])
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device {args.device} ({device}), dtype {args.dtype}, torch {torch.__version__}")
    results, references = run(prompts, generators, args.repeat)
    print(table(results, counts))
    if any(r.diverged for r in results):  # the target again, only to score the divergences
        dtype = DTYPES[args.dtype]
        model = load_checkpoint(resolve_zoo_model(args.zoo, "target"), dtype, args.device)
        print(margins(results, prompts, references, model))
    else:
        print("every output equals our vanilla's")
    if args.out:
        args.out.write_text(json.dumps([r.__dict__ for r in results], indent=1))


if __name__ == "__main__":
    main()
