"""Small random models and a serving helper shared by the decoder tests."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator

import numpy as np
import torch

from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.decoders.drafter import Drafter
from real_backend.decoders.speculative import SpeculativeDecoder
from real_backend.engine import RealEngine, ServeOptions
from real_backend.model import ModelArgs, Transformer
from real_backend.model.transformer import SeqStep
from real_backend.prompts import synthetic_prompts
from workbench.scenario.decoders import (
    SamplingConfig,
    SpeculativeDecoderConfig,
    VanillaDecoderConfig,
)
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

DECODER_VOCAB = 64  # the shared decoder-test target's vocabulary (see conftest fixtures)


def random_model(
    vocab: int = 64, dim: int = 32, layers: int = 2, seed: int = 0, scale: float = 0.3
) -> Transformer:
    """A fp64 Llama-shaped model with peaked (large-weight) random distributions, so greedy
    choices are far from ties; 4 query heads over 2 KV heads."""
    args = ModelArgs(
        vocab_size=vocab, dim=dim, n_layers=layers, n_heads=4, n_kv_heads=2,
        head_dim=dim // 4, intermediate_size=2 * dim,
    )  # fmt: skip
    model = Transformer(args)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
    model = model.double().eval()
    model.fuse()
    return model


def noisy_copy(model: Transformer, noise: float, seed: int = 1) -> Transformer:
    """A draft that mostly agrees with `model`: its weights plus Gaussian noise."""
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * noise)
    return draft


def interleaved_workload(n: int, vocab: int, seed: int = 3) -> tuple[Workload, list[list[int]]]:
    rng = np.random.default_rng(seed)
    w = Workload(
        arrival_s=np.cumsum(rng.exponential(0.003, n)),  # arrivals interleave with steps
        prompt_tokens=rng.integers(2, 24, n),
        output_tokens=rng.integers(1, 40, n),
    )
    return w, synthetic_prompts(w.prompt_tokens, vocab, seed=seed)


def serve(
    model: Transformer,
    workload: tuple[Workload, list[list[int]]],
    make_decoder=None,
    *,
    max_batch_size: int = 8,
    num_blocks: int = 512,
    block_size: int = 4,
    sampling: SamplingConfig | None = None,
    engine_class: type[RealEngine] = RealEngine,
):
    """Serve under continuous batching; returns (engine, records, outputs)."""
    cache = model.new_cache(num_blocks, block_size)
    decoder: Decoder | None = make_decoder(model, cache) if make_decoder else None
    slots = decoder.lookahead_slots if decoder else 0
    policy = ContinuousBatching(
        num_blocks=num_blocks, block_size=block_size, max_batch_size=max_batch_size,
        max_batched_tokens=4096, lookahead_slots=slots,
    )  # fmt: skip
    options = ServeOptions(sampling=sampling or VanillaDecoderConfig(kind="vanilla"), seed=0)
    engine = engine_class(model, cache, policy, options, decoder)
    records, outputs = engine.serve(*workload)
    return engine, records, outputs


def one_thread() -> Iterator[None]:
    """Tiny fp64 models: intra-op threads only add synchronisation (and spin on a busy host).
    Use as a module fixture: `one_thread = pytest.fixture(scope="module", autouse=True)(...)`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class CheckedDecoder(SpeculativeDecoder):
    """Checks the cache invariants after every step it runs."""

    sequence_steps = 0

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        outcome = super().decode(batch)
        for r, emitted in zip(batch, outcome.emitted, strict=True):
            n = len(r.tokens) + len(emitted)  # the sequence after this step
            assert self.cache.length(r.request_id) == n - 1  # all but the newest token
            draft = self.drafter.cache
            assert r.request_id not in draft.tables or draft.length(r.request_id) <= n - 1
        self.sequence_steps += len(batch)
        return outcome


def checked(draft, config: SpeculativeDecoderConfig):
    def make(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return CheckedDecoder(model, cache, Drafter(draft, draft_cache, config), config)

    return make


def spied_verification(model: Transformer) -> list[tuple[int, int, bool, list[int]]]:
    """Per call of `model`'s greedy_verify from now on: (batch, nodes, chain, accepted
    lengths). Replaces this model object's `kernel_set` (a test's own model only)."""
    calls: list[tuple[int, int, bool, list[int]]] = []
    kernels = model.kernel_set()

    def greedy_verify(logits, draft_tokens, draft_lens, parents=None):
        out = kernels.greedy_verify(logits, draft_tokens, draft_lens, parents)
        calls.append((logits.shape[0], logits.shape[1], parents is None, out[0].tolist()))
        return out

    spied = dataclasses.replace(kernels, greedy_verify=greedy_verify)
    model.kernel_set = lambda: spied  # type: ignore[method-assign]
    return calls


def spied_steps(model: Transformer) -> list[SeqStep]:
    """Every SeqStep of `model.step`'s plans from now on (this model object only)."""
    seen: list[SeqStep] = []
    step = model.step

    def recording(cache, plan, last_only=False):
        seen.extend(plan)
        return step(cache, plan, last_only)

    model.step = recording  # type: ignore[method-assign]
    return seen
