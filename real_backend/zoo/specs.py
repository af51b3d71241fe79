"""Zoo entries: what each target/draft pair is, how it is trained, and how it is evaluated.

Light module (no torch import): the CLI lists these without loading a framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.errors import WorkbenchError


@dataclass(frozen=True)
class ModelShape:
    """A Llama-shaped decoder (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int


@dataclass(frozen=True)
class TrainSpec:
    """AdamW with linear warmup then cosine decay to ``min_lr_ratio * lr``."""

    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    weight_decay: float = 0.1
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0


@dataclass(frozen=True)
class ZooSpec:
    name: str
    description: str
    seed: int
    vocab_size: int
    seq_len: int  # packed training sequence length (tokens)
    train_bytes: int  # corpus byte budget for training files
    heldout_bytes: int  # corpus byte budget for held-out files
    target: ModelShape
    draft: ModelShape
    target_train: TrainSpec
    draft_train: TrainSpec
    # Weight of KL(target || draft) in the draft's loss; 0 = plain next-token CE. Measured on
    # `small` (300 draft steps): distill 0 / 0.5 / 0.9 -> teacher-forced greedy agreement
    # 0.46 / 0.57 / 0.66, and held-out loss 5.90 / 5.79 / 5.69 too.
    distill: float
    eval_blocks: int  # held-out blocks of seq_len tokens for loss and agreement
    accept_prompts: int  # held-out prompts for the greedy-drafting acceptance measurement
    accept_prompt_len: int
    accept_new_tokens: int
    draft_k: int = 4


TINY = ZooSpec(
    name="tiny",
    description="test-sized pair: target 64-wide x 2 layers, draft 32-wide x 1 layer, vocab 512",
    seed=1234,
    vocab_size=512,
    seq_len=64,
    train_bytes=300_000,
    heldout_bytes=30_000,
    target=ModelShape(64, 172, 2, 4, 2),
    draft=ModelShape(32, 86, 1, 2, 1),
    target_train=TrainSpec(steps=150, batch_size=16, lr=3e-3, warmup_steps=15),
    draft_train=TrainSpec(steps=150, batch_size=16, lr=3e-3, warmup_steps=15),
    distill=0.9,
    eval_blocks=16,
    accept_prompts=4,
    accept_prompt_len=16,
    accept_new_tokens=24,
)

SMALL = ZooSpec(
    name="small",
    description="target 256-wide x 4 layers (GQA 8/2 heads), draft 128-wide x 1 layer, vocab 4096",
    seed=1234,
    vocab_size=4096,
    seq_len=128,
    train_bytes=4_000_000,
    heldout_bytes=200_000,
    target=ModelShape(256, 688, 4, 8, 2),
    # One layer keeps the draft's per-token cost near the CPU's fixed per-forward overhead;
    # width is nearly free there and buys agreement with the target.
    draft=ModelShape(128, 344, 1, 4, 1),
    target_train=TrainSpec(steps=700, batch_size=16, lr=2e-3, warmup_steps=50),
    draft_train=TrainSpec(steps=1000, batch_size=16, lr=3e-3, warmup_steps=50),
    distill=0.9,
    eval_blocks=64,
    accept_prompts=16,
    accept_prompt_len=32,
    accept_new_tokens=48,
)


@dataclass(frozen=True)
class AparSpec:
    """An APAR-tuned model: trained half on structured stdlib lists with fork and child
    tokens (`apar_data.py`), half on the stdlib's code, as the paper mixes in unstructured
    data; and a small draft of it for APAR with speculative decoding, with the same tokenizer,
    trained after it on the same rows and loss masks with distillation from it."""

    name: str
    description: str
    seed: int
    vocab_size: int  # the fork and child tokens included
    seq_len: int
    train_bytes: int  # code corpus, as ZooSpec
    heldout_bytes: int
    target: ModelShape
    target_train: TrainSpec
    draft: ModelShape
    draft_train: TrainSpec
    distill: float  # weight of KL(target || draft) in the draft's loss, as ZooSpec's
    max_items: int  # items per structured list at most
    structured_share: float  # of the training rows
    # Training lists also written sequentially, details inline: with the fork token banned the
    # model then writes the same details inline (the released APAR model, tuned from Vicuna,
    # keeps that ability), so "forks banned" is a vanilla baseline of similar text. Half: every
    # list's main sequence has a fork after each name against half of them inline, so the
    # fork stays the likelier token there, and the banned model learns where an inline list
    # ends (from a quarter, `apar-small` ran on to the token cap more often: docs/apar.md).
    # `apar-tiny` keeps a quarter: at half, one of its 16 held-out code openings forked.
    inline_share: float
    # Long inline lists cut into windows rather than left out (`apar_data.inline_rows`); False
    # is the recipe of the models measured before 2026-11-28, kept to rebuild them.
    inline_windows: bool
    eval_prompts: int  # held-out prompts of each kind for the fork rates
    eval_new_tokens: int  # tokens the root may emit while the fork rate is measured
    max_depth: int = 2


APAR_TINY = AparSpec(
    name="apar-tiny",
    description=(
        "test-sized APAR model: 96-wide x 2 layers, draft 48-wide x 1 layer, vocab 1024, "
        "fork/child tokens"
    ),
    seed=1234,
    vocab_size=1024,
    seq_len=96,
    train_bytes=400_000,
    heldout_bytes=30_000,
    target=ModelShape(96, 256, 2, 4, 2),
    target_train=TrainSpec(steps=400, batch_size=16, lr=3e-3, warmup_steps=30),
    # Half the target's width, one layer: it exists for the tests (built in every session), so
    # its steps are few: ~55 ms each on one thread (a teacher forward included), ~+11 s build.
    draft=ModelShape(48, 128, 1, 2, 1),
    draft_train=TrainSpec(steps=250, batch_size=16, lr=3e-3, warmup_steps=30),
    distill=0.9,  # ZooSpec's measured best (see ZooSpec.distill)
    max_items=5,
    structured_share=0.5,
    inline_share=0.25,
    inline_windows=True,
    eval_prompts=16,
    eval_new_tokens=64,
)

APAR_SMALL = AparSpec(
    name="apar-small",
    description=(
        "APAR model 256-wide x 4 layers (GQA 8/2 heads), draft 128-wide x 1 layer, vocab 4096, "
        "fork/child tokens"
    ),
    seed=1234,
    vocab_size=4096,
    seq_len=128,
    train_bytes=2_000_000,
    heldout_bytes=100_000,
    target=ModelShape(256, 688, 4, 8, 2),
    target_train=TrainSpec(steps=1200, batch_size=16, lr=2e-3, warmup_steps=60),
    # SMALL's draft shape: one layer keeps its per-token cost near the CPU's fixed per-forward
    # overhead, and width is nearly free there. A step costs ~0.7 s on one thread (the
    # teacher's forward ~0.25 s, the 4096-token head most of the rest): 600 steps, ~7 min.
    draft=ModelShape(128, 344, 1, 4, 1),
    draft_train=TrainSpec(steps=600, batch_size=16, lr=3e-3, warmup_steps=50),
    distill=0.9,  # ZooSpec's measured best (see ZooSpec.distill)
    max_items=6,
    structured_share=0.5,
    inline_share=0.5,
    inline_windows=True,
    eval_prompts=32,
    eval_new_tokens=96,
)

SPECS: dict[str, ZooSpec | AparSpec] = {s.name: s for s in (TINY, SMALL, APAR_TINY, APAR_SMALL)}


def roles_of(spec: ZooSpec | AparSpec) -> tuple[str, ...]:
    """The checkpoint folders an entry has: a target and its draft (APAR entries too)."""
    return ("target", "draft")


def get_spec(name: str) -> ZooSpec | AparSpec:
    if name not in SPECS:
        raise WorkbenchError(
            f"unknown zoo model {name!r}; available: {', '.join(SPECS)}", field="zoo"
        )
    return SPECS[name]
