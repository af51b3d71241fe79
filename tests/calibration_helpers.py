"""Hand-made calibration profiles: a known step-cost model, its points, a stored profile."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from simulator.cost_models.base import StepWork
from simulator.cost_models.calibrated import CalibratedCostModel
from simulator.cost_models.calibrated_fit import Curve, StepCostFit
from workbench.store import ResultsStore
from workbench.store.profiles import VERIFY_REVISION, Profile, ProfilePoint

# The zoo `tiny` target's shape, in ModelSpec terms.
TINY_SHAPE = {
    "num_layers": 2,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_attention_heads": 4,
    "num_kv_heads": 2,
    "head_dim": 16,
    "vocab_size": 512,
}


# The zoo `tiny` draft's shape.
TINY_DRAFT_SHAPE = {
    "num_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 86,
    "num_attention_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "vocab_size": 512,
}


def truth() -> CalibratedCostModel:
    """A step-cost model of the fitted family, with curves bent at powers of two."""
    ms = 1e-3
    curves = {
        "decode": Curve(np.array([1.0, 2, 4, 8, 16]), ms * np.array([0.7, 0.9, 1.0, 1.6, 3.0])),
        "verify": Curve(np.array([2.0, 4, 8, 16, 32]), ms * np.array([1.1, 1.3, 1.9, 3.2, 6.0])),
        "prefill": Curve(
            np.array([8.0, 16, 32, 64, 128, 256]), ms * np.array([1.5, 2.0, 3.1, 5.0, 9.5, 19.0])
        ),
    }
    terms = {"a_decode": 2e-7, "a_verify": 3e-7, "a_prefill": 1e-8, "c_chunk": 1e-4}
    forks = {"f_step": 9e-4, "f_fork": 4e-4, "f_key": 3e-7}  # APAR forks: once, each, per key
    return CalibratedCostModel(StepCostFit(curves, terms | forks | {"m_mixed": -2e-4}))


def grid_works() -> list[StepWork]:
    """Steps of every kind, spread over each curve's range."""
    works = []
    for batch in (1, 2, 3, 4, 6, 8, 12, 16):
        for context in (16, 40, 70, 100, 150, 200, 260, 330, 400, 480):
            works.append(StepWork(decode_batch_size=batch, decode_context_sum=batch * context))
    for tokens in (8, 12, 16, 24, 32, 48, 64, 100, 128, 200, 256):
        works.append(StepWork(prefill_chunk_tokens=(tokens,), prefill_context_tokens=(0,)))
        works.append(StepWork(prefill_chunk_tokens=(tokens,), prefill_context_tokens=(tokens,)))
        half = max(tokens // 2, 4)
        works.append(StepWork(prefill_chunk_tokens=(half, half), prefill_context_tokens=(0, 0)))
    for batch, tokens in ((2, 16), (4, 64), (8, 32), (16, 128), (3, 200)):
        works.append(
            StepWork(
                prefill_chunk_tokens=(tokens,), prefill_context_tokens=(0,),
                decode_batch_size=batch, decode_context_sum=batch * 80,
            )
        )  # fmt: skip
    verifications = [(w, b, 64) for w in (1, 2, 4) for b in (1, 2, 4, 8)]
    verifications += [(w, b, 384) for w in (1, 4) for b in (1, 8)]  # their keys' price
    for width, batch, prompt in verifications:
        context = batch * prompt
        extra = batch * width
        extra_keys = width * context + batch * width * (width + 1) // 2
        works.append(
            StepWork(
                decode_batch_size=batch, decode_context_sum=context,
                decode_extra_tokens=extra, decode_extra_context_sum=extra_keys,
            )
        )  # fmt: skip
    return works


def fork_works() -> list[StepWork]:
    """Decode steps with 1-3 APAR forks' chunks (two rows each over a 64-token prefix) in
    their forward, as the grid's fork probes measure them, and their steps without forks,
    over two contexts (the longest 20 tokens over the mean)."""
    works = []
    for batch, per_sequence in itertools.product((2, 4, 8, 16), (40, 120)):
        context, longest = batch * per_sequence, per_sequence + 20
        works.append(
            StepWork(
                decode_batch_size=batch, decode_context_sum=context, decode_context_max=longest
            )
        )
        for forks in (1, 2, 3):
            works.append(
                StepWork(
                    prefill_chunk_tokens=(2,) * forks, prefill_context_tokens=(64,) * forks,
                    decode_batch_size=batch, decode_context_sum=context,
                    decode_context_max=longest, fork_chunks=forks,
                ).in_decode_forward()
            )  # fmt: skip
    return works


def points_of(works: list[StepWork], seconds: list[float], probe: str = "p") -> list[ProfilePoint]:
    return [
        ProfilePoint(
            probe=probe,
            step=i,
            prefill_chunk_tokens=w.prefill_chunk_tokens,
            prefill_context_tokens=w.prefill_context_tokens,
            decode_batch_size=w.decode_batch_size,
            decode_context_sum=w.decode_context_sum,
            decode_context_max=w.decode_context_max,
            decode_extra_tokens=w.decode_extra_tokens,
            decode_extra_context_sum=w.decode_extra_context_sum,
            decode_forks=w.decode_forks,
            forward_s=0.9 * s,
            step_s=s,
        )
        for i, (w, s) in enumerate(zip(works, seconds, strict=True))
    ]


def profile(
    name: str = "tiny-cpu-fp32",
    device: str = "cpu",
    dtype: str = "fp32",
    shape: dict[str, int] = TINY_SHAPE,
) -> Profile:
    return Profile(
        name=name,
        model="tiny",
        checkpoint="/zoo/tiny/target",
        model_shape=dict(shape),
        device=device,
        device_name="test CPU",
        dtype=dtype,
        threads=2,
        grid="test",
        probes=1,
        versions={"torch": "x"},
        created_at=1_700_000_000.0,
        info={"load_average_at_start": "0.10 0.10 0.10", "verify_revision": VERIFY_REVISION},
    )


def store_profile(store: ResultsStore, prof: Profile, points: list[ProfilePoint]) -> Profile:
    store.add_profile(prof)
    store.write_probe(prof.profile_id, points, last=True)
    return store.find_profile(prof.profile_id)


def tiny_config(folder: Path, shape: dict[str, int] = TINY_SHAPE) -> Path:
    """A checkpoint folder holding only a config.json of `shape` (the zoo `tiny` target's)."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": shape["hidden_size"],
        "intermediate_size": shape["intermediate_size"],
        "num_hidden_layers": shape["num_layers"],
        "num_attention_heads": shape["num_attention_heads"],
        "num_key_value_heads": shape["num_kv_heads"],
        "head_dim": shape["head_dim"],
        "vocab_size": shape["vocab_size"],
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder
