"""The real engine on CUDA with the Triton kernels: logits match `transformers` on the same
checkpoint and card, and greedy speculative, lookahead and APAR decoding emit exactly greedy
vanilla decoding's tokens, as the CPU tests check with the PyTorch references. GPU only:
every test here skips without CUDA."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

from apar_real_helpers import (  # noqa: E402
    check_branches_equal_alone,
    random_apar_setup,
    serve_apar,
)
from decoder_models import DECODER_VOCAB, noisy_copy, random_model, serve  # noqa: E402
from tiny_models import saved_random_llama  # noqa: E402

from real_backend.decoders.drafter import Drafter  # noqa: E402
from real_backend.decoders.lookahead import LookaheadDecoder  # noqa: E402
from real_backend.decoders.speculative import SpeculativeDecoder  # noqa: E402
from real_backend.model import SeqStep, Transformer, load_checkpoint  # noqa: E402
from workbench.scenario.decoders import (  # noqa: E402
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
)

CUDA_ATOL = 1e-3  # fp32 on both sides (the kernels multiply in exact fp32, no tf32)


def on_cuda(model: Transformer) -> Transformer:
    """The CPU tests' fp64 model, in fp32 on the card, with the Triton kernels (fused anew:
    the fused projections are plain tensors, which `Module.to` does not move)."""
    model = model.to(device="cuda", dtype=torch.float32)
    model.fuse()
    assert model.use_kernels("triton").name == "triton"
    return model


@pytest.fixture(scope="module")
def target() -> Transformer:
    return on_cuda(random_model(DECODER_VOCAB, seed=0))


@pytest.fixture(scope="module")
def vanilla(target, decoder_workload) -> dict[int, list[int]]:
    return serve(target, decoder_workload)[2]


def test_vanilla_on_cuda_equals_the_cpu_fp64_run(vanilla, decoder_vanilla) -> None:
    assert vanilla == decoder_vanilla


SPECULATIVE = {
    "chain k=4": dict(num_speculative_tokens=4),
    "static tree": dict(tree={"kind": "static", "branching": [3, 2, 1, 1]}),
    "dynamic tree": dict(tree={"kind": "dynamic", "max_nodes": 12, "top_k": 3, "max_depth": 5}),
}


@pytest.mark.parametrize("config", sorted(SPECULATIVE))
def test_speculative_equals_vanilla(target, decoder_workload, vanilla, config) -> None:
    draft = on_cuda(noisy_copy(random_model(DECODER_VOCAB, seed=0), 0.05))
    cfg = SpeculativeDecoderConfig(kind="speculative", **SPECULATIVE[config])

    def make(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, cfg), cfg)

    engine, records, outputs = serve(target, decoder_workload, make)
    assert outputs == vanilla
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks
    assert records.steps.accepted_tokens.sum() > 0  # the draft was right sometimes


@pytest.mark.parametrize("shape", [(3, 3, 2), (5, 4, 5)], ids=["W3 N3 G2", "W5 N4 G5"])
def test_lookahead_equals_vanilla(target, decoder_workload, vanilla, shape) -> None:
    window, ngram, candidates = shape
    cfg = LookaheadDecoderConfig(
        kind="lookahead", window=window, ngram=ngram, candidates=candidates, prompt_pool=True
    )
    engine, _records, outputs = serve(
        target, decoder_workload, lambda model, cache: LookaheadDecoder(model, cache, cfg)
    )
    assert outputs == vanilla
    assert engine.cache.num_free_blocks == engine.cache.allocator.num_blocks


@pytest.mark.parametrize(
    ("batch", "blocks", "swap"),
    [(8, 512, 0), (8, 40, 0), (8, 40, 10**6), (8, 40, 12)],
    ids=["batched", "preempting", "swapping", "swap space full"],
)
def test_apar_branches_equal_greedy_alone(batch, blocks, swap) -> None:
    model, workload, tokens, eos = random_apar_setup(48)
    model = on_cuda(model)
    engine, records, _ = serve_apar(
        model, workload, tokens, max_batch_size=batch, num_blocks=blocks, eos=eos, swap_blocks=swap
    )
    assert check_branches_equal_alone(engine, records, model, workload, tokens, eos) >= 20
    assert (engine.policy.swap_outs > 0) == (swap > 0)  # blocks went to host memory and back
    assert (engine.policy.swaps_refused > 0) == (swap == 12)
    assert not engine._swapped
    assert sum(engine.cache.allocator.refcount) == 0 and not engine.cache.tables


@pytest.fixture(scope="module")
def hf_pair(tmp_path_factory):
    """A random-init Llama (GQA) in `transformers` on the card, and ours loaded from its
    saved checkpoint onto the card."""
    folder = tmp_path_factory.mktemp("llama")
    hf = saved_random_llama(folder, 128, scale=0.2)
    ours = load_checkpoint(folder, torch.float32, "cuda")
    assert ours.use_kernels("triton").name == "triton"
    return hf.to("cuda"), ours


def test_logits_match_transformers(hf_pair) -> None:
    hf, ours = hf_pair
    ids = torch.randint(0, 128, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids], device="cuda")).logits[0]  # (T, V)
    cache = ours.new_cache(num_blocks=32, block_size=16)
    (prefill,) = ours.step(cache, [SeqStep("a", ids[:25])])
    torch.testing.assert_close(prefill, ref[:25], atol=CUDA_ATOL, rtol=0)
    for t in range(25, len(ids)):  # decode across a block boundary (32)
        (logits,) = ours.step(cache, [SeqStep("a", [ids[t]])])
        torch.testing.assert_close(logits[0], ref[t], atol=CUDA_ATOL, rtol=0)


def compiled_variants() -> dict[str, int]:
    """Kernel variants Triton has compiled in this process (its in-memory caches), by kernel."""
    from kernels import triton_attention, triton_cache, triton_verification

    jitted = {
        name: getattr(module, name)
        for module in (triton_attention, triton_cache, triton_verification)
        for name in dir(module)
        if name.endswith("_kernel")
    }
    if not all(hasattr(fn, "device_caches") for fn in jitted.values()):
        pytest.skip("this Triton keeps its compiled kernels elsewhere")
    return {
        name: sum(len(caches[0]) for caches in fn.device_caches.values())
        for name, fn in jitted.items()
    }


def test_after_the_warm_up_serving_compiles_nothing(decoder_workload) -> None:
    """bf16, which no other test here runs: every variant a served step needs is compiled
    by the warm-up, none mid-run (each would stall a step for about a second)."""
    from real_backend.model.warm_up import warm_up

    model = random_model(DECODER_VOCAB, seed=0).to(device="cuda", dtype=torch.bfloat16)
    model.fuse()
    before = compiled_variants()
    warm_up(model, block_size=4)  # the serve helper's block size
    warmed = compiled_variants()
    assert sum(warmed.values()) > sum(before.values())
    draft = noisy_copy(random_model(DECODER_VOCAB, seed=0), 0.05)
    draft = draft.to(device="cuda", dtype=torch.bfloat16)
    draft.fuse()
    tree = SpeculativeDecoderConfig(kind="speculative", **SPECULATIVE["dynamic tree"])
    lookahead = LookaheadDecoderConfig(kind="lookahead", window=5, ngram=4, candidates=5)

    def speculative(model, cache):
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, tree), tree)

    for make in (None, speculative, lambda m, c: LookaheadDecoder(m, c, lookahead)):
        serve(model, decoder_workload, make)
    assert compiled_variants() == warmed
