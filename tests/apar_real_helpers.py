"""APAR on the real engine with small random models: the fork and child tokens are chosen
among a model's own frequent greedy tokens, so forks happen often; and the reference each
branch must equal (greedy decoding of its visible context alone, under the same rules)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from real_backend.decoders.apar import MIN_ROOM_TO_FORK, AparDecoder, ForkTokens, branch_drafter
from real_backend.engine import RealEngine, ServeOptions
from real_backend.model.transformer import SeqStep, Transformer
from workbench.apar_trees import BranchTree
from workbench.scenario.decoders import AparDecoderConfig
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload


def random_apar_setup(
    vocab: int = 48,
) -> tuple[Transformer, tuple[Workload, list[list[int]]], ForkTokens, frozenset[int]]:
    """(model, 24 prompts, fork and child tokens it emits often, an EOS it emits): a random
    model that forks on most requests."""
    from decoder_models import random_model, serve

    model = random_model(vocab, seed=5)
    workload = many_prompts(24, vocab, seed=9)
    _engine, _records, outputs = serve(model, workload)
    tokens = frequent_tokens(outputs, vocab)
    counts = sorted({t for o in outputs.values() for t in o})
    eos = frozenset({counts[len(counts) // 2]})  # some token the model does emit
    return model, workload, tokens, eos


def frequent_tokens(outputs: dict[int, list[int]], vocab: int) -> ForkTokens:
    """The most frequent greedy token as the fork token, an unused (or rare) one as child."""
    counts = Counter(t for tokens in outputs.values() for t in tokens)
    fork = counts.most_common(1)[0][0]
    child = min(range(vocab), key=lambda t: (counts.get(t, 0), t))
    return ForkTokens(fork, child)


def serve_apar(
    model: Transformer,
    workload: tuple[Workload, list[list[int]]],
    tokens: ForkTokens,
    *,
    max_batch_size: int = 8,
    num_blocks: int = 512,
    block_size: int = 4,
    eos: frozenset[int] = frozenset(),
    config: AparDecoderConfig | None = None,
    draft: Transformer | None = None,  # with config.speculative
    swap_blocks: int = 0,  # host memory for requests with several live branches
):
    """Serve under continuous batching with branches; returns (engine, records, answers)."""
    cache = model.new_cache(num_blocks, block_size)
    config = config or AparDecoderConfig(kind="apar", max_branches=64)
    drafter = None if draft is None else branch_drafter(draft, cache, config)
    decoder = AparDecoder(model, cache, config, tokens, drafter)
    policy = ContinuousBatching(
        num_blocks=num_blocks,
        block_size=block_size,
        max_batch_size=max_batch_size,
        max_batched_tokens=4096,
        lookahead_slots=decoder.lookahead_slots,
        branching=True,
        swap_blocks=swap_blocks,
    )
    options = ServeOptions(sampling=config, seed=0, eos_token_ids=eos, ignore_eos=not eos)
    engine = RealEngine(model, cache, policy, options, decoder)
    records, answers = engine.serve(*workload)
    return engine, records, answers


def visible_contexts(prompt: list[int], tree: BranchTree, own: list[list[int]], child: int):
    """Each branch's visible context before its first own token."""
    contexts = [list(prompt)]
    for b in range(1, tree.branches):
        parent = tree.parent[b]
        contexts.append([*contexts[parent], *own[parent][: tree.fork_at[b]], child])
    return contexts


@torch.inference_mode()
def greedy_alone(
    model: Transformer,
    context: list[int],
    depth: int,
    room: int,
    tokens: ForkTokens,
    config: AparDecoderConfig,
    eos: frozenset[int],
) -> list[int]:
    """Greedy decoding of one branch alone (batch 1, its own cache) under APAR's rules with
    its request's live branches never binding: until EOS or `room` tokens."""
    cache = model.new_cache(64, 16)
    out: list[int] = []
    logits = model.step(cache, [SeqStep("b", list(context))], last_only=True)[0][-1]
    last = context[-1]
    while len(out) < room:
        row = logits.clone()
        row[tokens.child] = float("-inf")
        if (
            last in (tokens.fork, tokens.child)
            or depth >= config.max_depth
            or room - len(out) < MIN_ROOM_TO_FORK
        ):
            row[tokens.fork] = float("-inf")
        last = int(torch.argmax(row))
        out.append(last)
        if last in eos:
            break
        logits = model.step(cache, [SeqStep("b", [last])], last_only=True)[0][-1]
    return out


def check_branches_equal_alone(
    engine: RealEngine,
    records,
    model: Transformer,
    workload: tuple[Workload, list[list[int]]],
    tokens: ForkTokens,
    eos: frozenset[int],
    config: AparDecoderConfig | None = None,
) -> int:
    """Every branch of every request equals its greedy decoding alone; returns the number of
    children checked."""
    config = config or AparDecoderConfig(kind="apar", max_branches=64)
    trees = records.branches.trees()
    w, prompts = workload
    children = 0
    for rid, tree in trees.items():
        own = engine.branch_outputs[rid]
        contexts = visible_contexts(prompts[rid], tree, own, tokens.child)
        cap = int(w.output_tokens[rid])
        for b in range(tree.branches):
            visible = len(contexts[b]) - len(prompts[rid])
            expected = greedy_alone(
                model, contexts[b], tree.depth(b), cap - visible, tokens, config, eos
            )
            assert own[b] == expected, (rid, b, own[b], expected)
        children += tree.branches - 1
    return children


def many_prompts(n: int, vocab: int, seed: int, long: bool = False):
    rng = np.random.default_rng(seed)
    from real_backend.prompts import synthetic_prompts

    w = Workload(
        arrival_s=np.zeros(n),
        prompt_tokens=rng.integers(2, 16, n),
        output_tokens=rng.integers(20, 60 if long else 40, n),
    )
    return w, synthetic_prompts(w.prompt_tokens, vocab, seed=seed)
