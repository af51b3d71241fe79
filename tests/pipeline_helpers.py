"""Shared by the pipeline tests: random models saved as checkpoints the stages load, greedy
references, scripted drafts (always right, always wrong, random) and a serving helper."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from real_backend.model.transformer import SeqStep, Transformer
from real_backend.pipeline.decoding import PipelineDecoding
from real_backend.pipeline.drafting import DraftLimits, DraftSource, DraftTree
from real_backend.pipeline.head import PipelineHead
from real_backend.pipeline.run_log import RunLog
from real_backend.pipeline.serve import StagePlan, serve_requests
from real_backend.pipeline.stage_model import layer_ranges
from workbench.records import RunRecords
from workbench.scenario.decoders import PipelineOptions
from workbench.workload.requests import Workload


def save_checkpoint(model: Transformer, folder: Path) -> Path:
    """`model` as a Hugging Face Llama folder (config.json + model.safetensors)."""
    a = model.args
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": a.vocab_size, "hidden_size": a.dim, "num_hidden_layers": a.n_layers,
        "num_attention_heads": a.n_heads, "num_key_value_heads": a.n_kv_heads,
        "head_dim": a.head_dim, "intermediate_size": a.intermediate_size,
        "rms_norm_eps": a.rms_norm_eps, "rope_theta": a.rope_theta,
        "max_position_embeddings": a.max_position_embeddings,
        "tie_word_embeddings": a.tie_word_embeddings,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    tensors = {
        (name if name.startswith("lm_head.") else f"model.{name}"): p.detach().contiguous().clone()
        for name, p in model.named_parameters()
    }
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@torch.inference_mode()
def greedy(model: Transformer, prompt: list[int], n: int) -> list[int]:
    """Greedy vanilla decoding, one token per forward: the reference."""
    cache = model.new_cache(64, 4)
    (logits,) = model.step(cache, [SeqStep(0, prompt)], last_only=True)
    out = [int(logits[-1].argmax())]
    while len(out) < n:
        (logits,) = model.step(cache, [SeqStep(0, [out[-1]])], last_only=True)
        out.append(int(logits[-1].argmax()))
    return out


class ScriptedDrafter:
    """Drafts from the known greedy continuation: `right` proposes it, `wrong` proposes
    another token every time, `random` builds random trees mixing right and wrong tokens.
    Every proposal is confident (p = 0.99), so it passes any threshold below it."""

    def __init__(self, references: dict[tuple[int, ...], list[int]], mode: str, vocab: int) -> None:
        self.references = references  # prompt → prompt + greedy continuation
        self.mode = mode
        self.vocab = vocab
        self.rng = random.Random(7)
        self.full: list[int] = []

    def start(self, prompt: list[int]) -> None:
        self.full = self.references[tuple(prompt)]

    def draft(self, context: list[int], limits: DraftLimits) -> DraftTree:
        depth = min(limits.max_tokens, limits.max_depth)
        if self.mode == "random":
            return self._random_tree(context, limits)
        tokens, position = [], len(context)
        for _ in range(depth):
            right = self.full[position] if position < len(self.full) else 0
            tokens.append(right if self.mode == "right" else (right + 1) % self.vocab)
            position += 1
        return DraftTree(tokens, list(range(-1, len(tokens) - 1)), len(tokens))

    def _random_tree(self, context: list[int], limits: DraftLimits) -> DraftTree:
        tokens, parents, depths = [], [], []
        n = self.rng.randint(0, min(limits.max_tokens, 3 * limits.max_depth))
        for _ in range(n):
            choices = [-1] + [i for i, d in enumerate(depths) if d < limits.max_depth]
            parent = self.rng.choice(choices)
            depth = 1 if parent < 0 else depths[parent] + 1
            if depth > limits.max_depth:
                continue
            # the right token after this node's path if the path was right, else any
            position = len(context) + depth - 1
            right = self.full[position] if position < len(self.full) else 0
            token = right if self.rng.random() < 0.6 else self.rng.randrange(self.vocab)
            tokens.append(token)
            parents.append(parent)
            depths.append(depth)
        return _main_first(tokens, parents)


def _main_first(tokens: list[int], parents: list[int]) -> DraftTree:
    """Reorder so that the chain of first children from the root comes first."""
    chain, node = [], -1
    for i, p in enumerate(parents):
        if p == node:
            chain.append(i)
            node = i
    order = chain + [i for i in range(len(tokens)) if i not in chain]
    index = {old: new for new, old in enumerate(order)}
    return DraftTree(
        [tokens[i] for i in order],
        [-1 if parents[i] < 0 else index[parents[i]] for i in order],
        len(chain),
    )


def stage_plan(
    checkpoint: Path, n_layers: int, stages: int, options: PipelineOptions | None = None
) -> StagePlan:
    """fp64 stages with the reference kernels, one thread each, a roomy cache."""
    options = options or PipelineOptions()
    return StagePlan(
        checkpoint=checkpoint, dtype="float64", kernels="reference",
        ranges=layer_ranges(n_layers, stages, options.layer_split), num_blocks=512,
        block_size=4, options=options, threads=1,
    )  # fmt: skip


def decode(
    head: PipelineHead,
    config,
    prompts: list[list[int]],
    outputs: list[int],
    drafter: DraftSource | None = None,
) -> tuple[list[list[int]], RunLog, RunRecords]:
    """Serve prompts (all there at t = 0) on a running pipeline; returns each request's
    emitted tokens, the run log and the records."""
    workload = Workload(
        arrival_s=np.zeros(len(prompts)),
        prompt_tokens=np.asarray([len(p) for p in prompts]),
        output_tokens=np.asarray(outputs),
    )
    emitted: list[list[int]] = []
    log = RunLog(head.stages, time.perf_counter())
    decoding = _Recording(head, config, drafter, log, time.perf_counter, emitted)
    records = serve_requests(head, decoding, workload, prompts, frozenset(), time.perf_counter)
    records.info["pipeline_runs"] = log.info()
    return emitted, log, records


class _Recording(PipelineDecoding):
    """Keeps each request's committed tokens for the test to compare."""

    def __init__(self, *args, **kwargs) -> None:
        self.emitted = args[-1]
        super().__init__(*args[:-1], **kwargs)

    def generate(self, request_id, prompt, max_new, stops):
        commits = super().generate(request_id, prompt, max_new, stops)
        self.emitted.append([t for c in commits for t in c.tokens])
        return commits
