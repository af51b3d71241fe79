"""The parametric step-cost model `workbench calibrate` fits to a real engine's steps.

A step is priced by what the engine runs for it (`real_backend.engine`): one decode
forward over the decoding sequences (their verification chains for a multi-token decoder),
and prefill forwards for the prompt chunks. Each part is a curve over its token count plus
a cost per attention key:

    decode   h_decode(B) + a_decode · S + s_decode(B) · G + p_pad · P
    verify   h_verify(B + X) + a_verify · (S + S_x) + s_verify(B) · G + p_pad · (1 + X / B) · P
    prefill  h_prefill(N) + a_prefill · K + c_chunk · (chunks − 1)
    mixed    the decode (or verify) part + the prefill part + m_mixed
    (with the one-call rule, T = `one_call_padding`, Q = (1 + X / B) · P: a · Q for a step
      padded in one call, Q < T, and a · T + p_pad · (2 · sqrt(Q · T) − 2T) for one cut
      into groups, both in place of the s and p_pad terms)
    + f_step + f_fork · F + f_key · S for a step whose decode forward computes F > 0 APAR
      forks' chunks
    + h_wake(I) for a step the engine slept I ms before (0 for a step right after another)
    + t_k(P) for the k-th decode (or verify) step after a step that prefilled, P its
      prompt tokens computed and cached ones read (`base.prefill_reach`)

B decoding sequences whose KV lengths sum to S, the longest L. An engine whose decode
attention pads every sequence to the longest (the reference kernel, `padded_decode`) is
priced a per padded key (S counted as B · L) and has no s curve. One that reads each
sequence's own keys (Triton's, the grouped CPU attention) may still pay for a spread of
contexts: the grouped attention makes one call per group of like contexts and pads inside a
group, so a batch of uneven contexts costs more than one of equal contexts with the same
sum (measured on CPU, `benchmarks/decode_spread.py`: 1.05× at 4 sequences, 1.2-1.3× from
8 on, some 2–5 ms a step). That extra grows with the spread and with the batch's size, not
in proportion to either: a few sequences stay one group padded to the longest (cheap
padding), more are cut into groups (one call each), and one long outlier makes a group of
its own, not a step as long as it. Inside a group each row is padded to the group's longest
(rows binned within 1.5× of each other's work, bins joined where a call would cost more than
their padding), and each padded key is computed for every query of the row: P =
B · L − S, the keys padding all rows to the longest would add, priced per query of a row by
p_pad (one price for decode and verify: one kernel). The kernel pads only part of P, more
when cutting costs more than padding, so p_pad is that share's price; it is what makes the
spread of a verification of 31 tokens a sequence (lookahead) dearer than one of 5
(speculative): without it, a lookahead run's served steps of 2-4 sequences were priced 6-9 %
short, a speculative run's right. G = 1 − S / (B · L) is the spread (0 for equal contexts
or one sequence, below 1), and s(B) its price per step at B sequences, a curve like h
(piecewise linear between powers of two, never decreasing, flat past the largest batch
measured with a spread), 0 at one sequence (it has no spread) and rising linearly from there
to the smallest batch measured with a spread (a few sequences make one group padded to the
longest: cheap); 0 where the profile saw no spread. The number of groups is what
the simulator cannot know: it tracks a decode set's context sum and longest, not every
context. Whether there is more than one it can know where the kernel says: the grouped
attention computes a step in one call padded to the longest when that padding, (1 + X / B)
· P query-keys, is under its `one_call_padding` (a call's overhead in padded work, recorded
in the profile), and such a step pays for that padding as for keys, a per key, no p_pad nor
s(B) (served `apar-small` decode steps of 5-16 sequences of ~50-token contexts were priced
8-19 % over at G > 0.3 by s(B), fitted on contexts of 16-688 tokens; so, −2.2 to +4.5 % by
band). Past T the kernel cuts the step where calls cost less than the padding they save:
g groups of evenly spread contexts pad about Q / g for g − 1 more calls of T each, cheapest
at g = sqrt(Q / T), so such a step costs about 2 · sqrt(Q · T) − T query-keys beyond its keys,
T at the threshold (one call's padding there). Its first T are priced a, as one call's, so
the price is continuous at T, and what the groups add past it p_pad a query-key (the kernel's
grouping costs more than its products: p_pad came out 2.2-2.5 times a_decode); s(B) goes (served
`apar-small` steps over T at 9-32 sequences, priced by s(B) · G + p_pad · Q, came out 10-12
points above the same runs' steps of 2-8 sequences; by this term 2-5: docs/fidelity.md,
"Past the one-call rule").
The rule is the kernel's exactly where every row has as many queries; a step with an APAR
fork's two-token chunk (every decode row padded to its two queries) or with uneven drafts
pads more than (1 + X / B) · P, so the kernel may cut it where this prices it as one call.
X extra tokens computed for them (drafts, windows, forks' chunks) attending to S_x keys; a
fork also costs what its rows do not (served `apar-small` steps on the CPU engine: a step
with one fork 0.9-1.5 ms over a decode step of the same batch; its bookkeeping, its first
token's sampling, not taken apart), and every decode row of its step is padded to the fork
chunk's two queries (the runner's attention pads a step's rows to the longest), so its
decode keys are read twice: f_key per key, S counted as the decode part counts it. N
prompt tokens in the chunks, attending to K keys (a chunk of c tokens after p cached ones:
c·p + c(c+1)/2, causal); m_mixed the per-step work a mixed step does once
and the two parts would count twice (negative then), or its extra forward.
The curves h are piecewise linear between knots at powers of two of the token count (the
CPU's and GPU's matrix kernels change regime with the row count; a line through them
does not), never decreasing (more tokens never cost less; noise would otherwise bend them),
extended beyond the last knot along their last segment. h_wake (the cost of waking an idle
engine: caches gone cold, a descheduled CPU) is piecewise linear over the idle time the same
way, 0 at no idle, and flat beyond the longest idle measured (waking saturates).
t_k(P) is what the k-th decode step after a prefill pays for it: the prompt's activations
evicted the decode's working set (weights, KV), and the larger the prompt the more of it
(measured on the CPU engine, `small` target: the first decode step +0.6 ms after 32 prompt
tokens, +1.5 ms after 512, +2.4-2.6 ms after 2-3k; the second about 40 % of the first, the
third 15-20 %, the fourth within noise). A chunk's attention reads the earlier chunks' KV
too, and P counts it (by the chunk's own tokens, the decode steps after such a chunk ran
4-7 % over their price). One curve over P per k up to `AFTER_PREFILL_STEPS`, piecewise
linear like the others, never decreasing, flat past the largest prefill measured (a prompt
cannot evict more than everything) and below the smallest (a smaller one is priced as it).
The grid's prefill probes decode only right after prefilling (its idle probes 31 tokens
after), and every probe's first decode follows its first prefill: without the terms those
steps raise every small-batch decode price (by 5-6 % at batch 1 on the CPU, with one t for
every prompt size and the first step only).

Every term is linear in the parameters, so the fit is a linear least-squares problem in
relative error: a 1 ms step counts as much as a 100 ms one. It starts weighted by the
measured times, then is refitted (`MIN_REFITS` times at least) weighted by the predicted ones
(iteratively reweighted: relative to the measurement, errors of slow, noisy steps would
weigh less and bias the fit low; relative to the model, the fit tracks each cell's mean,
which is what latencies add up). Before each refit, points measured more than
`OUTLIER_RATIO` times slower than predicted (a stall: the process descheduled, a
collection) are dropped, at most `TRIM_SHARE` of them per refit, the slowest first; milder
noise stays in, as it does in a real run. Every parameter but `m_mixed` is non-negative (a
negative cost per key would price long contexts below short ones): non-negative least
squares.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from simulator.cost_models.base import StepWork
from simulator.cost_models.least_squares import non_negative_least_squares

KINDS = ("decode", "verify", "prefill", "mixed")
FORK_TERMS = ("f_step", "f_fork", "f_key")  # a step with APAR forks: once, per fork, per key
OUTLIER_RATIO = 3.0  # measured / predicted above this: a stall, not the step's cost
MIN_REFITS = 3  # reweighted by the prediction; then on while stalls are still found
MAX_REFITS = 10
TRIM_SHARE = 0.02  # at most this share of the points dropped per refit, the slowest first
# A probe's pass whose steps ran this much slower (or faster) against the fit than the
# probe's median pass: a spell of the machine (measured on a shared 2-vCPU VM: whole passes
# of a probe 1.4-2x slow), not the step's cost. Dropped when the probe has 3 passes or more.
SPELL_RATIO = 1.25
# Decode steps after a prefill that pay for it, each with its own curve t_k(P) (measured on
# the CPU engine: the third still +0.1-0.5 ms, the fourth within the noise).
AFTER_PREFILL_STEPS = 3
# Batch sizes seen with a spread G of at least this much place the knots of s(B): 1 − mean /
# longest of 0.1 is a 20 % longer context beside equal ones.
SPREAD_KNOT_SHARE = 0.1
# ... in this many steps at least: a knot at a batch size seen once is set by that step's
# noise (an Intel VM's profile priced a spread at 3 verified sequences 3.4 ms from the last
# step of one probe, held it for 2, and priced served steps of 2-3 sequences 25-31 % over).
SPREAD_KNOT_STEPS = 5


@dataclass(frozen=True)
class Curve:
    """A piecewise-linear function of a token count through (knots[i], values[i])."""

    knots: np.ndarray  # (k,) float64, increasing
    values: np.ndarray  # (k,) float64 seconds

    def __call__(self, tokens: np.ndarray | float) -> np.ndarray:
        x = np.asarray(tokens, dtype=np.float64)
        return _hat_basis(self.knots, x) @ self.values


@dataclass(frozen=True)
class StepCostFit:
    """Fitted parameters (seconds) and how the fit went."""

    curves: dict[str, Curve]  # decode, verify, prefill, spread_*, wake, after_k: those measured
    terms: dict[str, float]  # a_*, c_chunk, m_mixed: those the profile measured
    points_used: int = 0
    points_dropped: int = 0  # outliers left out of the last fit
    kinds: tuple[str, ...] = field(default=())  # step kinds the profile measured
    padded_decode: bool = False  # decode keys counted as B × the longest context
    one_call_padding: float = 0.0  # padded query-keys under which a step pads in one call
    # (curve, x) → the curve's value: a run asks for the same few batch sizes again and again
    _values: dict[tuple[str, float], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def at(self, curve: str, x: float) -> float:
        """The named curve's value at x, memoised."""
        key = (curve, x)
        value = self._values.get(key)
        if value is None:
            value = self._values[key] = float(self.curves[curve](x)[0])
        return value

    def wake_s(self, idle_s: float) -> float:
        """h_wake: the extra time of a step after the engine slept `idle_s` (0 unless the
        profile measured steps after idle)."""
        curve = self.curves.get("wake")
        if curve is None or idle_s <= 0.0:
            return 0.0
        return float(curve(_wake_x(idle_s, curve.knots))[0]) * _wake_share(idle_s, curve.knots)

    @cached_property
    def after_prefill_steps(self) -> int:
        """How many decode steps after a prefill pay for it (0: the profile measured none)."""
        return max((k for k in range(1, AFTER_PREFILL_STEPS + 1) if f"after_{k}" in self.curves),
                   default=0)  # fmt: skip

    def after_prefill_s(self, prefill_tokens: int, steps_after: int) -> float:
        """t_k(P): the extra time of the `steps_after`-th decode (or verify) step after a step
        whose `prefill_reach` was `prefill_tokens` (1: right after it); 0 where not measured."""
        curve = self.curves.get(f"after_{steps_after}")
        if curve is None or prefill_tokens <= 0:
            return 0.0
        return self.at(f"after_{steps_after}", _held_x(prefill_tokens, curve.knots))

    def context_s(
        self,
        curve: str,
        batch_size: int,
        context_sums: np.ndarray,
        context_maxes: np.ndarray,
        extra_tokens: int = 0,
    ) -> np.ndarray:
        """The decode (or verify) part's cost of its sequences' contexts, `extra_tokens`
        computed for them beside one each; a step padded in one call pays its padding as
        keys (elementwise: a decode span and its single steps agree bit for bit)."""
        padded = padded_keys(batch_size, context_sums, context_maxes)
        key_price = self.terms[f"a_{curve}"]
        if self.padded_decode:
            return key_price * padded
        excess = padded - context_sums  # B · L − S, as spread_share and padded_query_keys
        queries = 1.0 + extra_tokens / batch_size
        if not self.one_call_padding:  # a profile from before the rule: priced as then
            spread = excess / np.maximum(padded, 1.0)
            price = key_price * context_sums + self.pad_price * queries * excess
            return price + self.spread_s(curve, batch_size) * spread
        padding = queries * excess  # as padded_query_keys
        one_call = key_price * context_sums + key_price * padding
        threshold = self.one_call_padding  # T: at the key price, cut or not (continuous)
        growth = grouped_padding(padding, threshold) - threshold  # the groups' cost past T
        cut = key_price * (context_sums + threshold) + self.pad_price * growth
        return np.where(padding < threshold, one_call, cut)

    @cached_property
    def pad_price(self) -> float:
        """p_pad: the price of a padded query-key (0 for a fit without the term: an engine
        that pads to the longest, whose keys are priced as B · L)."""
        return self.terms.get("p_pad", 0.0)

    def spread_s(self, curve: str, batch_size: int) -> float:
        """s(B): the price of a full spread of contexts in a step of B sequences."""
        prices = self.curves.get(f"spread_{curve}")
        if prices is None:
            return 0.0
        return self.at(f"spread_{curve}", spread_x(batch_size, prices.knots))


def padded_keys(batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray) -> np.ndarray:
    """B · L: the keys a decode attention padding to the longest reads (S where L is unknown)."""
    return np.maximum(context_sums, float(batch_size) * context_maxes)


def padded_query_keys(
    batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray, extra_tokens: int = 0
) -> np.ndarray:
    """(1 + X / B) · (B · L − S), elementwise: the query-key products padding every row of
    1 + X / B queries to the longest context would add (0 for equal contexts)."""
    padding = padded_keys(batch_size, context_sums, context_maxes) - context_sums
    return (1.0 + extra_tokens / batch_size) * padding


def grouped_padding(padding: np.ndarray | float, one_call: float) -> np.ndarray:
    """2 · sqrt(Q · T) − T, elementwise: what a step padding Q ≥ T query-keys costs beyond its
    keys when the grouped attention cuts it (T = `one_call_padding`, a call's overhead in
    query-keys). Cut into g groups, evenly spread contexts pad Q / g and pay g − 1 more calls;
    the cheapest g, sqrt(Q / T), costs this: T at the threshold (the one call's padding there),
    growing with sqrt(Q). The price takes T of it at the key price, the rest at p_pad."""
    padding = np.maximum(np.asarray(padding, dtype=np.float64), one_call)
    return 2.0 * np.sqrt(padding * one_call) - one_call


def spread_share(
    batch_size: int, context_sums: np.ndarray, context_maxes: np.ndarray
) -> np.ndarray:
    """G = 1 − S / (B · L), elementwise: 0 for equal contexts, towards 1 for one long one."""
    padded = padded_keys(batch_size, context_sums, context_maxes)
    return (padded - context_sums) / np.maximum(padded, 1.0)


def spread_x(batch_size: int, knots: np.ndarray) -> float:
    """The spread curve's argument, held at its last knot: beyond the largest batch measured
    with a spread, its price is not extrapolated (the extra groups saturate)."""
    return min(float(batch_size), float(knots[-1]))


def work_kind(work: StepWork) -> str:
    if work.prefill_chunk_tokens:
        return "mixed" if work.decode_batch_size else "prefill"
    return "verify" if work.decode_extra_tokens else "decode"


def prefill_keys(work: StepWork) -> float:
    """Σ over chunks of the keys its tokens attend to (causal inside the chunk)."""
    chunks = np.asarray(work.prefill_chunk_tokens, dtype=np.float64)
    cached = np.asarray(work.prefill_context_tokens, dtype=np.float64)
    return float(np.sum(chunks * cached + chunks * (chunks + 1.0) / 2.0))


# ---------------------------------------------------------------- the design matrix


@dataclass(frozen=True)
class _Columns:
    """Where each parameter sits in the design matrix."""

    knots: dict[str, np.ndarray]  # curve → its knots
    offsets: dict[str, int]  # curve → first column of its knot values
    terms: dict[str, int]  # scalar term → its column
    size: int
    padded_decode: bool
    one_call_padding: float

    @classmethod
    def for_works(
        cls,
        works: list[StepWork],
        kinds: set[str],
        attention: tuple[bool, float],
        idle_ms: np.ndarray,
        after: AfterPrefill,
    ) -> _Columns:
        """`attention`: (padded_decode, one_call_padding), as `fit_step_costs` takes them."""
        padded_decode, one_call_padding = attention
        knots = {name: _knots(_curve_tokens(works, name)) for name in _curves_needed(kinds)}
        if not padded_decode and not one_call_padding:  # the rule prices cut steps itself
            knots |= _spread_knots(works)
        if (idle_ms > 0).any():
            knots["wake"] = _knots(list(idle_ms[idle_ms > 0]))
        for k in range(1, AFTER_PREFILL_STEPS + 1):
            if (after.steps == k).any():
                knots[f"after_{k}"] = _knots(list(after.tokens[after.steps == k]))
        offsets, column = {}, 0
        for name, k in knots.items():
            offsets[name], column = column, column + len(k)
        terms = {}
        forks = any(work.decode_forks for work in works)
        for name in _terms_needed(kinds, padded_decode, forks):
            terms[name], column = column, column + 1
        return cls(knots, offsets, terms, column, padded_decode, one_call_padding)


def _curves_needed(kinds: set[str]) -> list[str]:
    curves = []
    if kinds & {"decode", "mixed"}:
        curves.append("decode")
    if "verify" in kinds:
        curves.append("verify")
    if kinds & {"prefill", "mixed"}:
        curves.append("prefill")
    return curves


def _spread_knots(works: list[StepWork]) -> dict[str, np.ndarray]:
    """Knots of s_decode and s_verify over the batch sizes measured with a spread in
    SPREAD_KNOT_STEPS steps or more (steps of a slight one, or at a batch size seen less
    often, price it too but place no knot: a price only they see would be fitted to their
    noise), from a first knot at one sequence, whose price `_curve_into` holds at 0. Only for
    a profile without the one-call rule: with it, cut steps are priced by their groups."""
    batches: dict[str, Counter[int]] = {}
    for work in works:
        if work.decode_batch_size < 2:
            continue
        if _spread_of(work) >= SPREAD_KNOT_SHARE:
            name = f"spread_{_decode_curve(work)}"
            batches.setdefault(name, Counter())[work.decode_batch_size] += 1
    knots = {}
    for name, counts in batches.items():
        sizes = [float(size) for size, steps in counts.items() if steps >= SPREAD_KNOT_STEPS]
        if sizes:
            knots[name] = _knots([1.0, *sizes])
    return knots


def _padding_of(work: StepWork) -> float:
    sums, maxes = _one(work.decode_context_sum), _one(work.decode_context_max)
    extra = work.decode_extra_tokens
    return float(padded_query_keys(work.decode_batch_size, sums, maxes, extra)[0])


def _spread_of(work: StepWork) -> float:
    sums, maxes = _one(work.decode_context_sum), _one(work.decode_context_max)
    return float(spread_share(work.decode_batch_size, sums, maxes)[0])


def _terms_needed(kinds: set[str], padded_decode: bool, forks: bool) -> list[str]:
    curves = _curves_needed(kinds)
    terms = [f"a_{name}" for name in curves]
    if forks:
        terms += list(FORK_TERMS)
    if not padded_decode and kinds & {"decode", "mixed", "verify"}:
        terms.append("p_pad")
    if kinds & {"prefill", "mixed"}:
        terms.append("c_chunk")
    if "mixed" in kinds:
        terms.append("m_mixed")
    return terms


def _decode_curve(work: StepWork) -> str:
    return "verify" if work.decode_extra_tokens else "decode"


def _curve_tokens(works: list[StepWork], curve: str) -> list[float]:
    tokens = []
    for work in works:
        if curve == "prefill" and work.prefill_chunk_tokens:
            tokens.append(float(sum(work.prefill_chunk_tokens)))
        elif curve != "prefill" and work.decode_batch_size and _decode_curve(work) == curve:
            tokens.append(float(work.decode_batch_size + work.decode_extra_tokens))
    return tokens


def _knots(tokens: list[float]) -> np.ndarray:
    """Powers of two between the smallest and the largest token count measured (those two
    included), keeping only knots some measured count lies next to: a knot with no point
    on either side of it would be a free parameter."""
    measured = np.asarray(tokens, dtype=np.float64)
    low, high = float(measured.min()), float(measured.max())
    inner = 2.0 ** np.arange(np.ceil(np.log2(low)), np.floor(np.log2(high)) + 1.0)
    knots = np.unique(np.concatenate([[low], inner, [high]]))
    while len(knots) > 2:
        support = _hat_basis(knots, measured).sum(axis=0)  # (k,)
        empty = np.flatnonzero(support[1:-1] == 0.0)
        if not len(empty):
            break
        knots = np.delete(knots, empty[0] + 1)
    return knots


def _hat_basis(knots: np.ndarray, x: np.ndarray) -> np.ndarray:
    """(len(x), k): linear interpolation weights on the knots; beyond the last knot the last
    segment continues, below the first the value stays."""
    x = np.atleast_1d(x)
    if len(knots) == 1:
        return np.ones((len(x), 1))
    clipped = np.maximum(x, knots[0])
    segment = np.clip(np.searchsorted(knots, clipped, side="right") - 1, 0, len(knots) - 2)
    left, right = knots[segment], knots[segment + 1]
    share = (clipped - left) / (right - left)  # > 1 past the last knot: extrapolation
    basis = np.zeros((len(x), len(knots)))
    rows = np.arange(len(x))
    basis[rows, segment] = 1.0 - share
    basis[rows, segment + 1] = share
    return basis


def _design(
    works: list[StepWork], columns: _Columns, idle_ms: np.ndarray, after: AfterPrefill
) -> np.ndarray:
    matrix = np.zeros((len(works), columns.size))
    for row, work in enumerate(works):
        _fill_row(matrix[row], work, columns)
        if idle_ms[row] > 0:  # knots start at the shortest idle measured: no share below
            _curve_into(matrix[row], columns, "wake", idle_ms[row])
        if after.steps[row]:
            name = f"after_{after.steps[row]}"
            x = _held_x(after.tokens[row], columns.knots[name])
            _curve_into(matrix[row], columns, name, x)
    return matrix


@dataclass(frozen=True)
class AfterPrefill:
    """Where each step stands after the last step that prefilled: `steps[i]` k ≥ 1 for the
    k-th decode (or verify) step since it (up to AFTER_PREFILL_STEPS), whose
    `prefill_reach` was `tokens[i]`; 0 for any other step."""

    steps: np.ndarray  # (n,) int64
    tokens: np.ndarray  # (n,) float64

    @classmethod
    def of(
        cls, works: list[StepWork], since_prefill: Iterable[tuple[int, int]] | None
    ) -> AfterPrefill:
        """since_prefill[i]: (decode steps since the last prefill, its reach P), with
        (1, P) for the step right after it and (0, 0) where none came before."""
        pairs = [(0, 0)] * len(works) if since_prefill is None else list(since_prefill)
        if len(pairs) != len(works):
            raise ValueError("one (steps, tokens) after-prefill pair per step")
        steps = np.array([k for k, _ in pairs], dtype=np.int64).reshape(-1)
        tokens = np.array([p for _, p in pairs], dtype=np.float64).reshape(-1)
        decode = np.array(
            [not w.prefill_chunk_tokens and w.decode_batch_size > 0 for w in works], dtype=bool
        )
        counted = decode & (steps >= 1) & (steps <= AFTER_PREFILL_STEPS) & (tokens > 0)
        return cls(np.where(counted, steps, 0), np.where(counted, tokens, 0.0))


def _held_x(x: float, knots: np.ndarray) -> float:
    """A curve's argument held at its last knot: flat beyond the largest value measured."""
    return min(float(x), float(knots[-1]))


def _wake_x(idle_s: float, knots: np.ndarray) -> float:
    """The wake curve's argument (ms), held at its last knot: waking saturates."""
    return _held_x(idle_s * 1e3, knots)


def _wake_share(idle_s: float, knots: np.ndarray) -> float:
    """Below the shortest idle measured, the first knot's value scaled down to 0 at no idle."""
    return min(idle_s * 1e3 / float(knots[0]), 1.0)


def _fill_row(row: np.ndarray, work: StepWork, columns: _Columns) -> None:
    if work.decode_batch_size:
        _fill_decode(row, work, columns)
    if work.prefill_chunk_tokens:
        _curve_into(row, columns, "prefill", sum(work.prefill_chunk_tokens))
        row[columns.terms["a_prefill"]] += prefill_keys(work)
        row[columns.terms["c_chunk"]] += len(work.prefill_chunk_tokens) - 1
        if work.decode_batch_size:
            row[columns.terms["m_mixed"]] += 1.0


def _fill_decode(row: np.ndarray, work: StepWork, columns: _Columns) -> None:
    curve = _decode_curve(work)
    _curve_into(row, columns, curve, work.decode_batch_size + work.decode_extra_tokens)
    keys = work.padded_decode_keys if columns.padded_decode else work.decode_context_sum
    row[columns.terms[f"a_{curve}"]] += keys + work.decode_extra_context_sum
    if work.decode_forks:
        row[columns.terms["f_step"]] += 1.0
        row[columns.terms["f_fork"]] += work.decode_forks
        row[columns.terms["f_key"]] += keys
    if not columns.padded_decode:
        _fill_spread(row, work, columns, curve)


def _fill_spread(row: np.ndarray, work: StepWork, columns: _Columns, curve: str) -> None:
    """p_pad · (1 + X / B) · P + s(B) · G; with the one-call rule, a step padded in one call
    pays that padding at the curve's price per key, one cut into groups T at that price and
    p_pad per query-key of what `grouped_padding` adds past T."""
    padding, threshold = _padding_of(work), columns.one_call_padding
    if threshold:
        row[columns.terms[f"a_{curve}"]] += min(padding, threshold)
        if padding >= threshold:
            row[columns.terms["p_pad"]] += float(grouped_padding(padding, threshold)) - threshold
        return
    row[columns.terms["p_pad"]] += padding
    spread = _spread_of(work)
    if spread > 0.0 and f"spread_{curve}" in columns.knots:  # else seen too seldom
        knots = columns.knots[f"spread_{curve}"]
        x = spread_x(work.decode_batch_size, knots)
        _curve_into(row, columns, f"spread_{curve}", x, scale=spread)


def _one(value: float) -> np.ndarray:
    return np.array([float(value)])


def _curve_into(
    row: np.ndarray, columns: _Columns, curve: str, tokens: float, scale: float = 1.0
) -> None:
    if curve not in columns.knots:
        raise KeyError(curve)
    knots = columns.knots[curve]
    start = columns.offsets[curve]
    hats = _hat_basis(knots, np.array([float(tokens)]))[0]  # (k,) weights on knot values
    # The parameters are the curve's first value and its rises from knot to knot (all ≥ 0:
    # a step never gets cheaper with more tokens); value j = Σ rises up to j.
    weights = np.cumsum(hats[::-1])[::-1]
    if curve.startswith("spread_"):
        weights[0] = 0.0  # s(1) = 0: its column stays empty and the solver leaves it at 0
    row[start : start + len(knots)] += scale * weights


# ---------------------------------------------------------------- the fit


def fit_step_costs(
    works: list[StepWork],
    seconds: Iterable[float],
    *,
    padded_decode: bool = False,
    one_call_padding: float = 0.0,
    idle_s: Iterable[float] | None = None,
    runs: list[str] | None = None,
    since_prefill: Iterable[tuple[int, int]] | None = None,
) -> StepCostFit:
    """Fit the model to measured steps (`works[i]` took `seconds[i]`, after the engine slept
    `idle_s[i]`, 0: right after another step); `padded_decode`: the engine's decode attention
    reads every sequence as long as the batch's longest; `one_call_padding`: the padded
    query-keys under which it computes a step in one call padded to the longest (0: never);
    `runs[i]`: the probe run the step was measured in (`name@pass`), to drop a pass that ran
    in a spell of the machine;
    `since_prefill[i]`: (k, P) for the k-th decode step after one that prefilled, of reach P."""
    measured = np.asarray(list(seconds), dtype=np.float64)  # (n,)
    if len(works) != len(measured) or not len(works):
        raise ValueError("one measured duration per step, at least one step")
    kinds = {work_kind(work) for work in works}
    idle_ms = np.zeros(len(works)) if idle_s is None else 1e3 * np.asarray(list(idle_s))  # (n,)
    after = AfterPrefill.of(works, since_prefill)
    attention = (padded_decode, one_call_padding)
    columns = _Columns.for_works(works, kinds, attention, idle_ms, after)
    design = _design(works, columns, idle_ms, after)  # (n, params)
    kept = np.isfinite(measured) & (measured > 0)
    params = _solve(design[kept], measured[kept], measured[kept], columns)
    for refit in range(MAX_REFITS):
        predicted = np.maximum(design @ params, 1e-12)  # (n,)
        slow = measured / predicted
        outliers = np.flatnonzero(kept & (slow > OUTLIER_RATIO))
        worst = outliers[np.argsort(-slow[outliers])][: max(1, int(TRIM_SHARE * kept.sum()))]
        if not len(worst) and refit >= MIN_REFITS:
            break
        kept[worst] = False
        if refit == 0 and runs is not None:
            kept &= ~_spells(runs, slow, kept)
        params = _solve(design[kept], measured[kept], predicted[kept], columns)
    return _as_fit(params, columns, int(kept.sum()), int(len(works) - kept.sum()), kinds)


def _spells(runs: list[str], slow: np.ndarray, kept: np.ndarray) -> np.ndarray:
    """The points of every probe pass whose median measured / predicted is off its probe's
    median pass by more than SPELL_RATIO (probes of three passes or more)."""
    passes: dict[str, dict[str, list[int]]] = {}
    for index in np.flatnonzero(kept):
        run = runs[index]
        passes.setdefault(run.split("@")[0], {}).setdefault(run, []).append(int(index))
    dropped = np.zeros(len(runs), dtype=bool)
    for by_pass in passes.values():
        if len(by_pass) < 3:
            continue
        medians = {run: float(np.median(slow[rows])) for run, rows in by_pass.items()}
        middle = float(np.median(list(medians.values())))
        for run, median in medians.items():
            if max(median / middle, middle / median) > SPELL_RATIO:
                dropped[by_pass[run]] = True
    return dropped


def _solve(
    design: np.ndarray, measured: np.ndarray, scale: np.ndarray, columns: _Columns
) -> np.ndarray:
    """Least squares of (predicted − measured) / scale, every parameter ≥ 0 but `m_mixed`
    (split into a positive and a negative part for the non-negative solver)."""
    weights = 1.0 / scale  # (n,)
    scaled = design * weights[:, None]  # (n, params)
    mixed = columns.terms.get("m_mixed")
    if mixed is not None:
        scaled = np.concatenate([scaled, -scaled[:, mixed : mixed + 1]], axis=1)
    solution = non_negative_least_squares(scaled, measured * weights)
    if mixed is not None:
        solution[mixed] -= solution[-1]
        solution = solution[:-1]
    return solution


def _as_fit(
    params: np.ndarray, columns: _Columns, used: int, dropped: int, kinds: set[str]
) -> StepCostFit:
    curves = {
        name: Curve(
            knots, np.cumsum(params[columns.offsets[name] : columns.offsets[name] + len(knots)])
        )
        for name, knots in columns.knots.items()
    }
    terms = {name: float(params[column]) for name, column in columns.terms.items()}
    ordered = tuple(kind for kind in KINDS if kind in kinds)
    attention = (columns.padded_decode, columns.one_call_padding)
    return StepCostFit(curves, terms, used, dropped, ordered, *attention)
