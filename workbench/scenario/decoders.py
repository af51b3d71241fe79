"""The decoder section: how each step turns a model forward into emitted tokens.

The real backend runs these decoders for real; the simulator replays what they do per step
through a step model (`acceptance` / `tokens_per_step`, or `calibrate_from` a real run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import Field, model_validator

from workbench.scenario.base import StoredRef, StrictModel

DecoderConfigT = TypeVar("DecoderConfigT", bound=StrictModel)


class SamplingConfig(StrictModel):
    temperature: float = Field(
        default=0.0, ge=0, description="Sampling temperature of the real backend; 0 is greedy."
    )
    top_p: float = Field(default=1.0, gt=0, le=1, description="Nucleus sampling mass (1: off).")
    top_k: int = Field(default=0, ge=0, description="Sample among the k likeliest (0: off).")


class VanillaDecoderConfig(SamplingConfig):
    kind: Literal["vanilla"] = Field(description="One token per sequence per step.")


class DraftModelConfig(StrictModel):
    """The draft model. Default: the draft of the target's zoo pair (`model.zoo`)."""

    zoo: str | None = Field(
        default=None, description="A zoo pair whose draft to use (e.g. `small`)."
    )
    config_path: Path | None = Field(
        default=None,
        description="A checkpoint folder (or its config.json) sharing the target's tokenizer.",
    )
    name: str | None = Field(
        default=None,
        description="Simulator: a model catalog name pricing the draft's steps when neither "
        "zoo nor config_path gives its shape.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DraftModelConfig:
        if self.zoo is not None and self.config_path is not None:
            raise ValueError("give the draft as zoo or as config_path, not both")
        return self


class IIDAcceptance(StrictModel):
    kind: Literal["iid"] = Field(description="Each drafted token accepted with one rate.")
    rate: float = Field(ge=0, le=1, description="Acceptance rate α of a drafted token.")


class PositionalAcceptance(StrictModel):
    kind: Literal["positional"] = Field(
        description="Drafted token i accepted with rate i, given the ones before were."
    )
    rates: list[float] = Field(min_length=1, description="Per-position acceptance rates.")

    @model_validator(mode="after")
    def _rates_in_range(self) -> PositionalAcceptance:
        if any(not 0 <= r <= 1 for r in self.rates):
            raise ValueError("every rate must be within [0, 1]")
        return self


class HistogramAcceptance(StrictModel):
    kind: Literal["histogram"] = Field(
        description="Accepted drafted tokens per step drawn from counts (index = accepted)."
    )
    counts: list[float] = Field(min_length=1, description="Weight of 0, 1, 2… accepted tokens.")

    @model_validator(mode="after")
    def _counts_valid(self) -> HistogramAcceptance:
        if any(c < 0 for c in self.counts) or sum(self.counts) <= 0:
            raise ValueError("counts must be non-negative with a positive sum")
        return self


AcceptanceModel = Annotated[
    IIDAcceptance | PositionalAcceptance | HistogramAcceptance, Field(discriminator="kind")
]


# Drafted tokens one step verifies, at most: published trees have tens to a few hundred
# nodes and chains a few tokens. A step holds a nodes x nodes visibility mask per sequence
# (a million entries at this bound); a static tree of [64, 64, 64] (266,304 nodes) asked
# for 66 GiB of it before this bound refused it.
MAX_DRAFT_NODES = 1024


class TreeConfig(StrictModel):
    """A token tree drafted per step: static branching per depth, or grown by confidence."""

    kind: Literal["static", "dynamic"] = Field(
        description="static: `branching[d]` children per node at depth d; dynamic: expand the "
        "likeliest draft paths (product of draft probabilities) up to `max_nodes`."
    )
    branching: list[int] = Field(
        default_factory=lambda: [2, 2, 1, 1],
        min_length=1,
        description="static: children per node at each depth (its length is the depth).",
    )
    max_nodes: int = Field(
        default=16, gt=0, le=MAX_DRAFT_NODES, description="dynamic: drafted nodes per step."
    )
    top_k: int = Field(default=4, gt=0, description="dynamic: candidates per expanded node.")
    max_depth: int = Field(default=6, gt=0, description="dynamic: deepest drafted level.")

    @model_validator(mode="after")
    def _positive_branching(self) -> TreeConfig:
        if any(b < 1 for b in self.branching):
            raise ValueError("every branching factor must be at least 1")
        return self


class AdaptiveKConfig(StrictModel):
    """Per-sequence draft length by recent acceptance (a chain only)."""

    min_tokens: int = Field(default=1, gt=0, description="Shortest draft.")
    window: int = Field(default=8, gt=0, description="Recent steps the acceptance is taken over.")


# A decoder implementation's own host work per step (simulator only).
HostOverheadMs = Annotated[
    float,
    Field(
        ge=0,
        description="Simulator: host time per step of the decoder's implementation beyond "
        "the model's forwards (LADE's n-gram pool, inputs, mask and cache moves; HF assisted "
        "generation's draft call, token matching and cache crops), added once to every step "
        "that decodes with it, whatever the batch (Spec-Bench's scenarios, which set it, "
        "decode one sequence at a time); 0: none beyond the cost model's. Measured for "
        "Spec-Bench's implementations by benchmarks/specbench_host.py.",
    ),
]


class SpeculativeDecoderConfig(SamplingConfig):
    kind: Literal["speculative"] = Field(
        description="A draft model proposes tokens; the target verifies them in one forward."
    )
    draft: DraftModelConfig = Field(
        default_factory=DraftModelConfig, description="The draft model."
    )
    num_speculative_tokens: int = Field(
        default=4,
        gt=0,
        le=64,
        description="k: drafted tokens per step (the most, with `adaptive`). 4 suits drafts "
        "that agree with the target on roughly 60-80% of tokens.",
    )
    tree: TreeConfig | None = Field(default=None, description="Draft a token tree (greedy).")
    adaptive: AdaptiveKConfig | None = Field(
        default=None,
        description="Adapt k per sequence to its recent acceptance (the same rule on both "
        "backends).",
    )
    acceptance: AcceptanceModel = Field(
        default_factory=lambda: IIDAcceptance(kind="iid", rate=0.7),
        description="Simulator: accepted drafted tokens per step.",
    )
    calibrate_from: StoredRef | None = Field(
        default=None,
        description="Simulator: a run id (prefix) in the database whose measured acceptance "
        "replaces `acceptance`: from a chain draft's run (fixed or `adaptive` k), its request "
        "types' per-position acceptance rates and its first steps' (each emission's draft "
        "replayed through the run's length rule); from a tree's, its accepted-tokens histogram.",
    )
    host_overhead_ms: HostOverheadMs = 0.0

    @model_validator(mode="after")
    def _compatible(self) -> SpeculativeDecoderConfig:
        if self.tree is not None and self.adaptive is not None:
            raise ValueError("adaptive k applies to chain drafts, not trees")
        if self.tree is not None and self.temperature > 0:
            raise ValueError("token trees are verified greedily: set temperature to 0")
        if self.adaptive is not None and self.adaptive.min_tokens > self.num_speculative_tokens:
            raise ValueError("adaptive.min_tokens exceeds num_speculative_tokens")
        if self.max_draft_tokens > MAX_DRAFT_NODES:
            raise ValueError(
                f"the draft verifies {self.max_draft_tokens:,} tokens a step: expected at most "
                f"{MAX_DRAFT_NODES:,} (each sequence's step holds a nodes x nodes mask)"
            )
        return self

    @property
    def max_draft_tokens(self) -> int:
        """Drafted tokens a step verifies at most (tree nodes or chain length)."""
        if self.tree is None:
            return self.num_speculative_tokens
        if self.tree.kind == "dynamic":
            return self.tree.max_nodes
        nodes, width = 0, 1
        for b in self.tree.branching:
            width *= b
            nodes += width
        return nodes


class LookaheadDecoderConfig(StrictModel):
    kind: Literal["lookahead"] = Field(
        description="Jacobi iteration with an n-gram pool (greedy, lossless; no draft model)."
    )
    window: int = Field(default=5, gt=0, description="W: lookahead window width.")
    ngram: int = Field(
        default=4, ge=2, description="N: n-gram size (the window keeps N-1 Jacobi levels)."
    )
    candidates: int = Field(
        default=5, ge=0, description="G: n-grams from the pool verified per step."
    )
    prompt_pool: bool = Field(
        default=True, description="Seed the n-gram pool from the prompt (prompt lookup)."
    )
    tokens_per_step: HistogramAcceptance | None = Field(
        default=None,
        description="Simulator: accepted tokens per step beyond the first (histogram); "
        "required unless calibrate_from is set.",
    )
    calibrate_from: StoredRef | None = Field(
        default=None,
        description="Simulator: a run id (prefix) whose recorded tokens per step to replay.",
    )
    host_overhead_ms: HostOverheadMs = 0.0

    @property
    def window_tokens(self) -> int:
        """Tokens of the window one step feeds per sequence: N-1 levels of W (the last
        emitted token is column 0 of the lowest level)."""
        return self.window * (self.ngram - 1)

    @property
    def step_tokens(self) -> int:
        """Tokens one step feeds per sequence at most: the window and G n-grams of N-1."""
        return self.window_tokens + self.candidates * (self.ngram - 1)

    @property
    def max_draft_tokens(self) -> int:
        """Tokens beyond the last emitted one a step writes to the cache."""
        return self.step_tokens - 1

    @model_validator(mode="after")
    def _a_step_that_fits(self) -> LookaheadDecoderConfig:
        if self.max_draft_tokens > MAX_DRAFT_NODES:
            raise ValueError(
                f"a step feeds {self.step_tokens:,} tokens a sequence: expected at most "
                f"{MAX_DRAFT_NODES + 1:,} (window x (ngram - 1) + candidates x (ngram - 1))"
            )
        return self


class EmulatedLinkConfig(StrictModel):
    """A slower interconnect emulated on one machine: each message between two pipeline
    stages is held back by the sender. Emulation, not a network model."""

    latency_ms: float = Field(default=0.0, ge=0, description="One-way delay per hop.")
    bandwidth_gbps: float | None = Field(
        default=None,
        gt=0,
        description="Serialisation rate per hop in Gbit/s (messages on a hop queue behind "
        "each other); null: no bandwidth limit.",
    )


class PipelineOptions(StrictModel):
    """How the real backend runs the stages of `hardware.pipeline_parallel`."""

    layer_split: list[float] | None = Field(
        default=None,
        description="Relative share of the target's layers per stage, head first (as "
        "PipeInfer's --mpi-layer-split); default: as even as possible, extra layers to the "
        "first stages.",
    )
    emulated_link: EmulatedLinkConfig | None = Field(
        default=None,
        description="Emulate a slow interconnect between stages (off: the real local link).",
    )
    emulated_layer_ms: float = Field(
        default=0.0,
        ge=0,
        description="Emulate slower nodes: every stage sleeps this long after each layer it "
        "computes (off: 0). Cancellation is checked between layers, as without it.",
    )
    threads_per_stage: int | None = Field(
        default=None,
        gt=0,
        description="torch threads of each stage process; default: the machine's cores "
        "shared evenly among the stages started on it.",
    )
    stage_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A stage silent this long (no message, no heartbeat) fails the run.",
    )

    @model_validator(mode="after")
    def _positive_split(self) -> PipelineOptions:
        if self.layer_split is not None and any(w <= 0 for w in self.layer_split):
            raise ValueError("every layer_split share must be positive")
        return self


class PipelineDecoderConfig(StrictModel):
    kind: Literal["pipeline"] = Field(
        description="Pipeline-parallel greedy decoding: one token per run, one run in flight "
        "through the `hardware.pipeline_parallel` stages (real backend)."
    )
    pipeline: PipelineOptions = Field(
        default_factory=PipelineOptions, description="Stage processes and emulation."
    )
    calibrate_from: StoredRef | None = Field(
        default=None,
        description="Simulator: a stored real run of this pipeline (id or prefix) whose "
        "measured stage times and link replace the cost model's.",
    )

    @property
    def max_draft_tokens(self) -> int:
        return 0


class PipeInferDecoderConfig(StrictModel):
    kind: Literal["pipeinfer"] = Field(
        description="PipeInfer (Butler et al., SC'24): greedy speculative runs through the "
        "pipeline stages, launched asynchronously, with early cancellation (real backend)."
    )
    draft: DraftModelConfig = Field(
        default_factory=DraftModelConfig, description="The draft model, on the head stage."
    )
    asynchronous: bool = Field(
        default=True,
        description="true: PipeInfer's continuous asynchronous speculation; false: "
        "synchronous speculative decoding over the same stages (one run in flight: the last "
        "token and its drafted tree), the paper's baseline with the same drafting rule.",
    )
    max_draft_tokens: int = Field(
        default=4, gt=0, le=64, description="n_draft: drafted tokens per run at most."
    )
    max_branches: int = Field(
        default=1, gt=0, le=8, description="n_parallel: branches a run's draft tree may have."
    )
    p_accept: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="A branch stops drafting when the draft's top probability falls under "
        "p_accept + p_adjust.",
    )
    p_split: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="A branch splits off a sibling for a candidate whose draft probability "
        "exceeds p_split + p_adjust.",
    )
    p_recovery: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="p_adjust grows by this per speculative run launched since the last "
        "result came back (deeper speculation needs more confidence).",
    )
    p_decay: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="p_adjust shrinks by this per empty draft since the last commit (lets "
        "speculation resume after the draft lost confidence).",
    )
    max_runs_in_flight: int = Field(
        default=8, gt=0, le=64, description="Live runs in the pipeline at most."
    )
    after_commit: Literal["restart", "continue"] = Field(
        default="restart",
        description="Where speculation goes on after a commit: restart drafting after the "
        "newest token (the released code), or continue after the in-flight chain's tail "
        "while it still agrees with the committed tokens (no run duplicates one in flight).",
    )
    pipeline: PipelineOptions = Field(
        default_factory=PipelineOptions, description="Stage processes and emulation."
    )
    acceptance: AcceptanceModel = Field(
        default_factory=lambda: IIDAcceptance(kind="iid", rate=0.7),
        description="Simulator: drafted tokens a run's target accepts (up to the first "
        "mismatch), per run of max_draft_tokens.",
    )
    calibrate_from: StoredRef | None = Field(
        default=None,
        description="Simulator: a stored real run of this pipeline (id or prefix) whose "
        "measured stage times, draft time, link and acceptance replace the cost model's.",
    )


class AparTreeModelConfig(StrictModel):
    """Simulator: APAR request trees drawn from parameters and each request's output length
    (its answer, decoded sequentially, would emit `output_tokens`)."""

    structured_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of requests whose answer is a list that forks; the others decode "
        "as one branch.",
    )
    min_children: int = Field(
        default=2, ge=1, description="Fewest children of a structured answer."
    )
    max_children: int = Field(default=6, ge=1, description="Most children (uniform in between).")
    skeleton_share: float = Field(
        default=0.25,
        gt=0,
        lt=1,
        description="Share of a structured answer's tokens in the root's skeleton; the rest "
        "are the children's details.",
    )
    detail_concentration: float = Field(
        default=4.0,
        gt=0,
        description="Dirichlet concentration of the details' lengths: large is equal lengths, "
        "small very uneven ones.",
    )

    @model_validator(mode="after")
    def _children_range(self) -> AparTreeModelConfig:
        if self.min_children > self.max_children:
            raise ValueError("min_children exceeds max_children")
        return self


class AparSpeculationConfig(StrictModel):
    """APAR with speculative decoding: every branch drafts and verifies like any sequence."""

    draft: DraftModelConfig = Field(
        default_factory=DraftModelConfig,
        description="The draft model: it must share the target's tokenizer, fork and child "
        "tokens included (an APAR zoo entry's draft: `zoo: apar-small`).",
    )
    num_speculative_tokens: int = Field(
        default=4,
        gt=0,
        le=64,
        description="k: drafted tokens per branch per step. A drafted fork token ends the "
        "chain: a branch's emission ends at its fork, where the child starts.",
    )
    acceptance: AcceptanceModel = Field(
        default_factory=lambda: IIDAcceptance(kind="iid", rate=0.7),
        description="Simulator: accepted drafted tokens per branch and step (a branch's "
        "draws stop at its next fork).",
    )


class AparDecoderConfig(SamplingConfig):
    kind: Literal["apar"] = Field(
        description="APAR (Liu et al., 2024): a model tuned to emit a fork token where a detail "
        "belongs; a child branch sharing the prefix's KV writes it while the parent goes on."
    )
    max_depth: int = Field(
        default=2,
        ge=1,
        description="Branches at this depth do not fork (the root is depth 1; 2: children do "
        "not fork again; 1: nothing forks).",
    )
    max_branches: int = Field(
        default=16,
        ge=1,
        le=256,
        description="Live branches of a request at most: no fork while it has this many (1: "
        "no fork at all, the sequential twin).",
    )
    fork_token: str = Field(
        default="[Fork]", min_length=1, description="The fork token in the tokenizer."
    )
    child_token: str = Field(
        default="[Child]", min_length=1, description="The child token in the tokenizer."
    )
    trees: AparTreeModelConfig = Field(
        default_factory=AparTreeModelConfig,
        description="Simulator: request trees drawn from parameters (unless calibrate_from).",
    )
    calibrate_from: StoredRef | None = Field(
        default=None,
        description="Simulator: a run id (prefix) of a real APAR run whose request trees to "
        "replay (request i gets tree i modulo their number).",
    )
    speculative: AparSpeculationConfig | None = Field(
        default=None,
        description="Speculate every branch with a draft model (greedy output unchanged while "
        "max_branches does not bind); the simulator draws each branch's accepted tokens "
        "from `acceptance`.",
    )

    @model_validator(mode="after")
    def _two_tokens(self) -> AparDecoderConfig:
        if self.fork_token == self.child_token:
            raise ValueError(
                f"fork_token and child_token are both {self.fork_token!r}: expected two tokens"
            )
        return self

    @property
    def forks(self) -> bool:
        """Whether anything may fork (a root may fork only below max_depth)."""
        return self.max_depth >= 2 and self.max_branches >= 2

    @property
    def max_draft_tokens(self) -> int:
        return 0 if self.speculative is None else self.speculative.num_speculative_tokens

    def speculative_config(self) -> SpeculativeDecoderConfig | None:
        """The speculative decoder every branch runs (chains, this config's sampling)."""
        spec = self.speculative
        if spec is None:
            return None
        # Built from fields validated already: validating again would refuse a zoo draft whose
        # folder the runner has resolved (`with_model_source` sets config_path beside zoo).
        return SpeculativeDecoderConfig.model_construct(
            kind="speculative",
            draft=spec.draft,
            num_speculative_tokens=spec.num_speculative_tokens,
            acceptance=spec.acceptance,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
        )


def draft_of(decoder: object) -> DraftModelConfig | None:
    """The draft model a decoder config runs, if any."""
    if isinstance(decoder, SpeculativeDecoderConfig | PipeInferDecoderConfig):
        return decoder.draft
    if isinstance(decoder, AparDecoderConfig) and decoder.speculative is not None:
        return decoder.speculative.draft
    return None


def with_draft(decoder: DecoderConfigT, draft: DraftModelConfig) -> DecoderConfigT:
    """`decoder` (one that drafts) with another draft model config."""
    if isinstance(decoder, AparDecoderConfig) and decoder.speculative is not None:
        speculative = decoder.speculative.model_copy(update={"draft": draft})
        return decoder.model_copy(update={"speculative": speculative})
    return decoder.model_copy(update={"draft": draft})


def draft_field(decoder: object) -> str:
    """Where a decoder config's draft sits in a scenario (for error messages)."""
    apar = isinstance(decoder, AparDecoderConfig)
    return "decoder.speculative.draft" if apar else "decoder.draft"


PIPELINE_DECODER_KINDS = ("pipeline", "pipeinfer")

DecoderConfig = Annotated[
    VanillaDecoderConfig
    | SpeculativeDecoderConfig
    | LookaheadDecoderConfig
    | PipelineDecoderConfig
    | PipeInferDecoderConfig
    | AparDecoderConfig,
    Field(discriminator="kind"),
]


def lookahead_slots(
    decoder: VanillaDecoderConfig
    | SpeculativeDecoderConfig
    | LookaheadDecoderConfig
    | PipelineDecoderConfig
    | PipeInferDecoderConfig
    | AparDecoderConfig,
) -> int:
    """KV slots a decode step writes beyond its one emitted token (0 for vanilla)."""
    return 0 if isinstance(decoder, VanillaDecoderConfig) else decoder.max_draft_tokens
