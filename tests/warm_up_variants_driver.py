"""Run by `test_warm_up_variants.py` in a process without Triton's interpreter (Triton's
launcher logic must be the real one). Every kernel call a served run makes is planned as the
Triton kernels would launch it on an H100 (132 SMs) and keyed as Triton keys its compiled
kernels; the run computes with the grouped references meanwhile. Prints a JSON object: the
keys the warm-up planned, and those the served runs planned that the warm-up did not."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import torch
from apar_real_helpers import random_apar_setup, serve_apar
from decoder_models import noisy_copy, random_model

from kernels import triton_attention
from kernels.dispatch import KernelSet, grouped_kernels
from kernels.triton_cache import plan_copy_blocks, plan_write_kv
from kernels.triton_compile import variant_key
from kernels.triton_verification import MAX_TREE_NODES, plan_greedy_verify
from real_backend.decoders.drafter import Drafter
from real_backend.decoders.lookahead import LookaheadDecoder
from real_backend.decoders.speculative import SpeculativeDecoder
from real_backend.engine import RealEngine, ServeOptions
from real_backend.model.transformer import Transformer
from real_backend.model.warm_up import launch_variants
from real_backend.prompts import synthetic_prompts
from workbench.scenario.decoders import (
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
    VanillaDecoderConfig,
)
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

BLOCK = 16
DTYPE = torch.bfloat16
VOCAB = 64
WINDOW = 1700  # a sliding window the warm-up cannot fit LONG_CONTEXT into


class Planned:
    """The variant keys of every call planned while `recording`."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def note(self, calls) -> None:
        self.keys.update(variant_key(call) for call in calls)

    def kernels(self) -> KernelSet:
        """The grouped references, each call also planned as the Triton kernels'."""
        base = grouped_kernels()

        def write_kv(k_cache, v_cache, k, v, slots):
            self.note(plan_write_kv(k_cache, v_cache, k, v, slots))
            return base.write_kv(k_cache, v_cache, k, v, slots)

        def attention(*args, **kwargs):
            self.note(triton_attention.plan_paged_tree_attention(*args, **kwargs)[0])
            return base.paged_tree_attention(*args, **kwargs)

        def verify(logits, draft, lens, parents=None):
            self.note(plan_greedy_verify(logits, draft, lens, parents)[0])
            return base.greedy_verify(logits, draft, lens, parents)

        def copy_blocks(k_cache, v_cache, src, dst):
            self.note(plan_copy_blocks(k_cache, v_cache, src, dst))
            return base.copy_blocks(k_cache, v_cache, src, dst)

        return dataclasses.replace(
            base, write_kv=write_kv, paged_tree_attention=attention, greedy_verify=verify,
            copy_blocks=copy_blocks, max_tree_nodes=MAX_TREE_NODES,
        )  # fmt: skip


def warmed(model: Transformer, warm: Planned, served: Planned) -> Transformer:
    """The model in DTYPE, warmed up as `RealEngine.serve` does on CUDA (planned into `warm`),
    then planning into `served`."""
    model = model.to(DTYPE)
    model.fuse()
    spies = {"warm": warm.kernels(), "served": served.kernels()}
    phase = ["warm"]
    model.kernel_set = lambda: spies[phase[0]]  # this instance only
    launch_variants(model, BLOCK)
    phase[0] = "served"
    return model


def workload(n: int, seed: int, max_prompt: int) -> tuple[Workload, list[list[int]]]:
    """Staggered arrivals (odd and even batches), prompts up to `max_prompt` tokens (split-KV
    past MIN_KEYS_TO_SPLIT)."""
    rng = np.random.default_rng(seed)
    w = Workload(
        arrival_s=np.cumsum(rng.exponential(0.004, n)),
        prompt_tokens=rng.integers(2, max_prompt, n),
        output_tokens=rng.integers(1, 40, n),
    )
    return w, synthetic_prompts(w.prompt_tokens, VOCAB, seed=seed)


def serve(
    model: Transformer, make_decoder=None, chunked: bool = True, max_prompt: int = 2000
) -> None:
    cache = model.new_cache(2048, BLOCK)
    decoder = make_decoder(model, cache) if make_decoder else None
    policy = ContinuousBatching(
        num_blocks=2048, block_size=BLOCK, max_batch_size=24, max_batched_tokens=2048,
        chunked_prefill=chunked, chunk_size=256,
        lookahead_slots=decoder.lookahead_slots if decoder else 0,
    )  # fmt: skip
    options = ServeOptions(VanillaDecoderConfig(kind="vanilla"), seed=0)
    RealEngine(model, cache, policy, options, decoder).serve(*workload(40, 3, max_prompt))


def speculative(draft: Transformer, **config):
    cfg = SpeculativeDecoderConfig(kind="speculative", **config)

    def make(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, cfg), cfg)

    return make


def main() -> int:
    torch.set_num_threads(1)
    triton_attention.num_sms = lambda device: 132  # split-KV chosen as on an H100
    warm, served = Planned(), Planned()
    target = warmed(random_model(VOCAB, seed=0), warm, served)
    draft = warmed(noisy_copy(random_model(VOCAB, seed=0), 0.05), warm, served)
    serve(target)
    serve(target, chunked=False)
    windowed = random_model(VOCAB, dim=64, seed=1)  # its own head size: its own variants
    windowed.args = dataclasses.replace(windowed.args, sliding_window=WINDOW)
    serve(warmed(windowed, warm, served), max_prompt=WINDOW - 100)
    serve(target, speculative(draft, num_speculative_tokens=4))
    tree = {"kind": "dynamic", "max_nodes": 12, "top_k": 3, "max_depth": 5}
    serve(target, speculative(draft, tree=tree))
    lookahead = LookaheadDecoderConfig(kind="lookahead", window=5, ngram=4, candidates=5)
    serve(target, lambda model, cache: LookaheadDecoder(model, cache, lookahead))
    apar_model, apar_workload, tokens, eos = random_apar_setup(48)
    apar_model = warmed(apar_model, warm, served)
    serve_apar(apar_model, apar_workload, tokens, block_size=BLOCK, eos=eos)
    missed = sorted(served.keys - warm.keys)
    merged = sum("merge_splits" in key for key in served.keys)  # split-KV calls were served
    print(json.dumps({"warm": len(warm.keys), "served": len(served.keys), "missed": missed,
                      "split_variants_served": merged}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
