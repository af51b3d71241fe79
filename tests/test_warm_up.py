"""The CUDA warm-up's throwaway steps: causal and tree steps over no context and a long one,
and verification of chains and trees, leaving the scratch cache empty. On CPU nothing is
compiled at run time, so `warm_up` itself does nothing there; its steps run on any device."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from decoder_models import random_model  # noqa: E402

from real_backend.model import warm_up as warming  # noqa: E402


def test_the_variant_steps_run_and_free_their_scratch_cache() -> None:
    model = random_model(64, seed=0).float()
    model.fuse()
    calls = []
    kernels = model.kernel_set()
    real_attention = kernels.paged_tree_attention

    def counting(q, *args, **kwargs):
        calls.append((q.shape[1], args[5] is None, int(args[3].max())))  # Q, causal, context
        return real_attention(q, *args, **kwargs)

    spy = dataclasses.replace(kernels, paged_tree_attention=counting)
    model.kernel_set = lambda: spy  # this instance only
    warming.launch_variants(model, block_size=16)
    queries = {q for q, _, _ in calls}
    assert set(warming.QUERIES) <= queries
    assert {(causal, ctx > 0) for _, causal, ctx in calls} == {
        (True, False), (False, False), (True, True), (False, True)
    }  # fmt: skip


def test_warm_up_does_nothing_off_cuda() -> None:
    model = random_model(64, seed=0)
    warming.warm_up(model, block_size=16)
    assert model not in warming._warmed


@pytest.mark.parametrize(("window", "block_size"), [(None, 1024), (256, 16), (40, 16)])
def test_the_variant_steps_fit_short_windows_and_large_blocks(window, block_size) -> None:
    """A sliding-window model refuses sequences past its window: the warm-up skips the
    steps its engine could never run; a block larger than the long context still leaves room
    for the copy-on-write step."""
    model = random_model(64, seed=0).float()
    model.args = dataclasses.replace(model.args, sliding_window=window)
    model.fuse()
    warming.launch_variants(model, block_size=block_size)  # raises if a step is refused
