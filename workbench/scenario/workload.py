"""Workload: how requests arrive and how long their prompts and outputs are."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from workbench.scenario.base import StrictModel

# ---------------------------------------------------------------- arrival processes


class PoissonArrivals(StrictModel):
    kind: Literal["poisson"] = Field(description="Poisson process: exponential gaps.")
    rate_per_s: float = Field(gt=0, description="Mean arrival rate in requests per second.")
    max_gap_mean_gaps: float | None = Field(
        default=None,
        gt=0,
        description="Cap every gap at this many mean gaps (Vidur caps at 3, which raises the "
        "real rate by 5 %). Null: gaps are never clipped.",
    )


class GammaArrivals(StrictModel):
    kind: Literal["gamma"] = Field(description="Renewal process with gamma-distributed gaps.")
    rate_per_s: float = Field(gt=0, description="Mean arrival rate in requests per second.")
    cv: float = Field(
        gt=0,
        description="Coefficient of variation of the gaps (burstiness): 1 is Poisson, "
        ">1 burstier, <1 more regular.",
    )


class ConstantArrivals(StrictModel):
    kind: Literal["constant"] = Field(description="Evenly spaced arrivals.")
    rate_per_s: float = Field(gt=0, description="Arrival rate in requests per second.")


class TraceArrivals(StrictModel):
    kind: Literal["trace"] = Field(description="Arrival times read from a CSV column.")
    path: Path = Field(description="CSV file; relative paths resolve against the scenario file.")
    column: str = Field(default="arrived_at", description="Column holding arrival times.")
    time_unit: Literal["s", "ms"] = Field(default="s", description="Unit of the time column.")
    time_scale: float = Field(
        default=1.0,
        gt=0,
        description="Multiply gaps by this (0.5 replays the trace twice as fast).",
    )


class ClosedLoopArrivals(StrictModel):
    kind: Literal["closed_loop"] = Field(
        description="Fixed concurrency: each client sends its next request when the last ends."
    )
    concurrency: int = Field(
        gt=0, description="Number of clients, each with one request in flight."
    )
    think_time_s: float = Field(
        default=0.0, ge=0, description="Pause between a response and the client's next request."
    )


class BatchArrivals(StrictModel):
    kind: Literal["batch"] = Field(
        description="Offline batch inference: every request is there at t = 0."
    )


ArrivalConfig = Annotated[
    PoissonArrivals
    | GammaArrivals
    | ConstantArrivals
    | TraceArrivals
    | ClosedLoopArrivals
    | BatchArrivals,
    Field(discriminator="kind"),
]

# ---------------------------------------------------------------- length distributions


class FixedLength(StrictModel):
    kind: Literal["fixed"] = Field(description="Every request has the same length.")
    value: int = Field(gt=0, description="The length in tokens.")


class UniformLength(StrictModel):
    kind: Literal["uniform"] = Field(description="Integer lengths uniform on [low, high].")
    low: int = Field(gt=0, description="Smallest length in tokens (inclusive).")
    high: int = Field(gt=0, description="Largest length in tokens (inclusive).")

    @model_validator(mode="after")
    def _ordered(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class NormalLength(StrictModel):
    kind: Literal["normal"] = Field(
        description="Normal lengths, rounded, redrawn outside [min, max] (truncated normal)."
    )
    mean: float = Field(gt=0, description="Mean length in tokens.")
    std: float = Field(ge=0, description="Standard deviation in tokens.")
    min: int = Field(default=1, gt=0, description="Smallest admissible length.")
    max: int | None = Field(default=None, gt=0, description="Largest admissible length.")


class LognormalLength(StrictModel):
    kind: Literal["lognormal"] = Field(
        description="Lognormal lengths given by the mean and std of the length itself, rounded."
    )
    mean: float = Field(gt=0, description="Mean length in tokens.")
    std: float = Field(gt=0, description="Standard deviation of the length in tokens.")
    min: int = Field(default=1, gt=0, description="Smallest admissible length (redrawn below).")
    max: int | None = Field(
        default=None, gt=0, description="Largest admissible length (redrawn above)."
    )


class EmpiricalLength(StrictModel):
    kind: Literal["empirical"] = Field(
        description="Lengths sampled with replacement from a column of a CSV or JSON file."
    )
    path: Path = Field(description="CSV or JSON (list of records) file; relative to the scenario.")
    column: str = Field(description="Column (CSV) or key (JSON records) holding lengths.")
    max: int | None = Field(default=None, gt=0, description="Drop values above this.")


LengthConfig = Annotated[
    FixedLength | UniformLength | NormalLength | LognormalLength | EmpiricalLength,
    Field(discriminator="kind"),
]


class TraceLengths(StrictModel):
    """Prompt and output lengths read together, row by row, from a trace."""

    path: Path = Field(description="CSV or JSON file; relative paths resolve against the scenario.")
    prompt_column: str | None = Field(
        default="num_prefill_tokens",
        description="Prompt length column; null for a trace of outputs only, whose prompt "
        "lengths then come from `workload.prompt_tokens`.",
    )
    output_column: str = Field(default="num_decode_tokens", description="Output length column.")
    rank_column: str | None = Field(
        default=None,
        description="Use only the rows with a value in this column, in ascending order of it "
        "(e.g. a benchmark subset's rank); null: every row in file order.",
    )
    oracle_columns: list[str] = Field(
        default_factory=list,
        description="Columns whose per-row maximum is the oracle length a length predictor "
        "sees (e.g. the lengths of several samplings); empty: the true output length.",
    )
    order: Literal["sequential", "shuffle"] = Field(
        default="sequential",
        description="Take rows in file order (wrapping around) or in a seeded random order.",
    )
    prompt_scale: float = Field(
        default=1.0,
        gt=0,
        description="Multiply every prompt length by this, rounded, at least 1 (what-if: longer "
        "prompts); applied before the clips.",
    )
    output_scale: float = Field(
        default=1.0, gt=0, description="Multiply every output length by this, as prompt_scale."
    )
    max_prompt_tokens: int | None = Field(
        default=None, gt=0, description="Clip longer prompts to this (the context window)."
    )
    max_output_tokens: int | None = Field(default=None, gt=0, description="Clip longer outputs.")
    max_total_tokens: int | None = Field(
        default=None,
        gt=1,
        description="Context limit on prompt + output (after the max_* clips), e.g. the "
        "model's max_model_len. Null: none.",
    )
    over_total: Literal["clip_prompt", "proportional", "drop"] = Field(
        default="clip_prompt",
        description="A row over max_total_tokens: `clip_prompt` cuts its prompt to fit (the "
        "output kept while it leaves a prompt token); `proportional` cuts both by their share "
        "of the excess, rounded up, each kept >= 1 (Vidur's rule); `drop` leaves the row out.",
    )

    @model_validator(mode="after")
    def _total_needs_prompts(self) -> TraceLengths:
        if self.max_total_tokens is not None and self.prompt_column is None:
            raise ValueError("max_total_tokens needs a prompt_column (prompt + output per row)")
        return self


class PromptsConfig(StrictModel):
    """Real prompts from a question file, tokenized with the model's tokenizer."""

    file: Path = Field(
        description="JSON lines of {question_id, category, turns: [...]} (e.g. "
        "data/prompts/specbench_question.jsonl); relative to the scenario file."
    )
    turn: int = Field(
        default=0, ge=0, description="Which turn of each question is the prompt (0: the first)."
    )
    categories: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Keep only questions of these categories (null: all of them).",
    )
    order: Literal["file", "shuffle"] = Field(
        default="file",
        description="Take questions in file order, or in a seeded random order; cycle when "
        "there are more requests than questions.",
    )
    chat_template: Literal["auto", "none"] = Field(
        default="auto",
        description="`auto`: wrap each prompt in the tokenizer's chat template when it has one "
        "(a user message, generation prompt added); `none`: plain text (BOS + text).",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="A tokenizer folder or tokenizer.json to use instead of the model's own "
        "(lets a catalog model on the simulator see real prompt lengths).",
    )


class WorkloadConfig(StrictModel):
    """The request stream: count, arrivals and lengths. Fixed entirely by the scenario seed."""

    num_requests: int = Field(gt=0, description="Number of requests to send.")
    ignore_eos: bool = Field(
        default=True,
        description="Real backend: generate exactly the drawn output length even past an EOS, "
        "so a real run and a simulated one see identical lengths. Off: stop at EOS too.",
    )
    stop_texts: list[str] = Field(
        default_factory=list,
        description="Real backend, with ignore_eos off: also stop after any token whose text "
        'contains one of these (e.g. "\\n\\n": a code model\'s blank line ends its answer).',
    )
    arrival: ArrivalConfig = Field(description="Arrival process, selected by `kind`.")
    prompt_tokens: LengthConfig | None = Field(
        default=None, description="Prompt length distribution (or give `lengths_from_trace`)."
    )
    output_tokens: LengthConfig | None = Field(
        default=None, description="Output length distribution (or give `lengths_from_trace`)."
    )
    lengths_from_trace: TraceLengths | None = Field(
        default=None, description="Prompt and output lengths together from a trace file."
    )
    prompts: PromptsConfig | None = Field(
        default=None,
        description="Real prompts from a file: their token counts replace `prompt_tokens`; "
        "output lengths still come from `output_tokens`.",
    )

    @model_validator(mode="after")
    def _one_length_source(self) -> WorkloadConfig:
        if self.prompts is not None:
            if self.prompt_tokens is not None or self.lengths_from_trace is not None:
                raise ValueError(
                    "with prompts, prompt lengths come from the prompts: drop prompt_tokens "
                    "and lengths_from_trace"
                )
            if self.output_tokens is None:
                raise ValueError("prompts needs output_tokens (the output length distribution)")
            return self
        trace = self.lengths_from_trace
        if trace is not None and trace.prompt_column is None:
            if self.prompt_tokens is None or self.output_tokens is not None:
                raise ValueError(
                    "lengths_from_trace without a prompt_column takes prompt lengths from "
                    "prompt_tokens (and output lengths from the trace, not output_tokens)"
                )
            return self
        separate = self.prompt_tokens is not None or self.output_tokens is not None
        if self.lengths_from_trace is not None and separate:
            raise ValueError(
                "give either lengths_from_trace or prompt_tokens/output_tokens, not both"
            )
        if self.lengths_from_trace is None and (
            self.prompt_tokens is None or self.output_tokens is None
        ):
            raise ValueError("needs prompt_tokens and output_tokens, or lengths_from_trace")
        return self
