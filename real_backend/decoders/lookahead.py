"""Lookahead decoding (Fu et al., 2024): Jacobi iteration plus an n-gram pool, no draft model.

Per sequence the decoder keeps a 2D window of Jacobi guesses, N−1 levels × W columns, and a
pool of n-grams keyed by their first token. One forward per step feeds, for every sequence,
one token tree (the runner's parent primitive), laid out as the paper's attention mask (drawn
there for W=5, N=4, G=2) and its reference implementation (hao-ai-lab/LookaheadDecoding):

    index            token                                   parent                   depth
    0                the current token (last emitted)        −1 (the cached context)   0
    i, 1 ≤ i < W     level 0, column i                       i − 1 (left neighbour)    i
    l·W + i          level l, column i (1 ≤ l ≤ N−2)         (l−1)·W + i (level below) i + l
    then up to G chains of ≤ N−1 tokens: pool n-grams keyed by the current token, each
    hanging off index 0                                                                1, 2, …

Column 0 of level 0 *is* the current token. A window token at level l, column i thus sees the
current token, level 0's columns 1..i and the same column of levels 1..l−1 (its diagonal
Jacobi trajectory) — exactly its ancestors, so the runner's position rule (context length +
depth) gives it position i + l, the position it is a guess for. A candidate token sees the
current token and its own n-gram's earlier tokens, like a speculative chain.

After the forward: the top level's argmax outputs are the Jacobi update (the guesses one
position further on); the longest candidate prefix that greedy decoding confirms is emitted
with the target's next token (lossless); each column's trajectory plus its new output is an
n-gram for the pool; the window moves up one level. With `prompt_pool` the pool also holds
every n-gram of the sequence's own text (prompt, then output), as prompt lookup does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernels.greedy import greedy_tokens
from real_backend.decoders.acceptance import accept_greedy_chain
from real_backend.decoders.base import DecodeOutcome, Decoder, DecodeRequest
from real_backend.kv_cache import PagedKVCache
from real_backend.model.transformer import SeqStep, Transformer
from workbench.scenario.decoders import LookaheadDecoderConfig

# first token → its distinct (N−1)-token continuations, oldest first
NGramPool = dict[int, list[tuple[int, ...]]]


@dataclass
class _SeqState:
    levels: list[list[int]]  # N−1 levels of guesses; level 0 holds columns 1..W−1, the others W
    pool: NGramPool = field(default_factory=dict)
    scanned: int = 0  # prompt_pool: the sequence's tokens whose n-grams are in the pool


@dataclass
class _Plan:
    step: SeqStep
    candidates: list[list[int]]  # verified n-gram continuations
    starts: list[int]  # index of each candidate's first token in the step


def initial_window(tokens: list[int], window: int, ngram: int) -> list[list[int]]:
    """The window before any Jacobi step, from the recent text: the guess for relative position
    p (1 ≤ p ≤ W+N−3; level l, column i sits at p = i + l) is the context's (p−1)-th token of
    its last W+N−3 (cycled when the context is shorter), i.e. "the recent text repeats". All
    tokens guessing one position agree, and every column starts as an n-gram of the text."""
    k = window + ngram - 3
    recent = tokens[-k:] if k > 0 else []
    guess = [recent[p % len(recent)] for p in range(k)] if recent else []  # guess[p−1] for p
    levels = [guess[: window - 1]]  # level 0: columns 1..W−1, positions 1..W−1
    levels += [guess[level - 1 : level - 1 + window] for level in range(1, ngram - 1)]  # i + l
    return levels


def tree_layout(
    current: int, levels: list[list[int]], candidates: list[list[int]]
) -> tuple[list[int], list[int], list[int]]:
    """(tokens, parents, candidate starts) of one sequence's step, as in the module docstring."""
    width = len(levels[0]) + 1
    tokens = [current, *(t for level in levels for t in level)]  # (N−1)·W window tokens
    parents = [k - width if k >= width else k - 1 for k in range(len(tokens))]
    starts = []
    for cand in candidates:
        starts.append(len(tokens))
        parents += [0, *range(len(tokens), len(tokens) + len(cand) - 1)]  # a chain off the root
        tokens += cand
    return tokens, parents, starts


def remember(pool: NGramPool, first: int, rest: tuple[int, ...], capacity: int) -> None:
    """Add an n-gram to the pool; a key keeps its `capacity` most recent distinct ones."""
    entries = pool.setdefault(first, [])
    if rest in entries:
        entries.remove(rest)  # seen again: now the most recent
    entries.append(rest)
    del entries[: max(len(entries) - capacity, 0)]


class LookaheadDecoder(Decoder):
    def __init__(
        self, model: Transformer, cache: PagedKVCache, config: LookaheadDecoderConfig
    ) -> None:
        self.model = model
        self.cache = cache
        self.config = config
        self.lookahead_slots = config.max_draft_tokens  # (N−1)·(W+G) − 1 beyond the current
        self._states: dict[int, _SeqState] = {}
        top_level = config.ngram - 2  # level N−2 (for N = 2, level 0 with the current token)
        self._top = list(range(top_level * config.window, (top_level + 1) * config.window))

    def release(self, request_id: int) -> None:
        self._states.pop(request_id, None)

    def decode(self, batch: list[DecodeRequest]) -> DecodeOutcome:
        plans = [self._plan(r, self._state(r)) for r in batch]
        contexts = [self.cache.length(r.request_id) for r in batch]
        logits = self.model.step(self.cache, [p.step for p in plans])  # each (n_b, V)
        outcome = DecodeOutcome(emitted=[])
        for r, plan, ctx, rows in zip(batch, plans, contexts, logits, strict=True):
            choice: list[int] = greedy_tokens(rows).tolist()  # the greedy token after each fed one
            accepted, kept = self._verify(plan, choice)
            bonus = choice[kept[-1] if kept else 0]  # the target's own next token: ≥ 1 emitted
            self.cache.keep(r.request_id, ctx, [0, *kept])  # current token + accepted n-gram prefix
            self._advance(self._states[r.request_id], r.tokens[-1], [choice[k] for k in self._top])
            outcome.emitted.append([*accepted, bonus])
            outcome.accepted_per_request.append(len(accepted))
            outcome.drafted += sum(len(c) for c in plan.candidates)
            outcome.accepted += len(accepted)
            outcome.verified += len(plan.step.tokens)
        return outcome

    # ------------------------------------------------------------------ state

    def _state(self, r: DecodeRequest) -> _SeqState:
        cfg = self.config
        state = self._states.get(r.request_id)
        if state is None:
            state = _SeqState(initial_window(r.tokens, cfg.window, cfg.ngram))
            self._states[r.request_id] = state
        if cfg.prompt_pool:
            self._scan(state, r.tokens)
        return state

    def _scan(self, state: _SeqState, tokens: list[int]) -> None:
        """Pool the n-grams of the text not yet scanned (the prompt first, then the output)."""
        n, capacity = self.config.ngram, self.config.candidates
        for start in range(max(state.scanned - n + 1, 0), len(tokens) - n + 1):  # new n-grams only
            remember(state.pool, tokens[start], tuple(tokens[start + 1 : start + n]), capacity)
        state.scanned = len(tokens)

    # ------------------------------------------------------------------ one step

    def _plan(self, r: DecodeRequest, state: _SeqState) -> _Plan:
        current = r.tokens[-1]
        limit = r.max_new - 1  # candidate tokens past the length limit could never be emitted
        entries = state.pool.get(current, [])[::-1][: self.config.candidates]  # most recent first
        candidates = [list(rest[:limit]) for rest in entries if limit > 0]
        tokens, parents, starts = tree_layout(current, state.levels, candidates)
        return _Plan(SeqStep(r.request_id, tokens, parents), candidates, starts)

    def _verify(self, plan: _Plan, choice: list[int]) -> tuple[list[int], list[int]]:
        """(accepted tokens, their indices in the step): the longest confirmed candidate prefix."""
        best: tuple[list[int], list[int]] = ([], [])
        for cand, start in zip(plan.candidates, plan.starts, strict=True):
            follows = [0, *range(start, start + len(cand) - 1)]  # the token each c_j comes after
            n = accept_greedy_chain([choice[k] for k in follows], cand)  # keep c_j while = argmax
            if n > len(best[0]):  # first longest wins
                best = (cand[:n], list(range(start, start + n)))
        return best

    def _advance(self, state: _SeqState, current: int, outputs: list[int]) -> None:
        """Pool each column's trajectory, then move the window up one level (the Jacobi step)."""
        columns = [[current, *state.levels[0]], *state.levels[1:], outputs]  # N rows × W columns
        for i in range(self.config.window):  # column i: positions i, i+1, …, i+N−1 — an n-gram
            rest = tuple(level[i] for level in columns[1:])
            remember(state.pool, columns[0][i], rest, self.config.candidates)
        # One level per step however many tokens were accepted (the reference implementation's
        # default): level 0 drops column 0, whose position the next current token takes.
        state.levels = [columns[1][1:], *columns[2:]]
