"""Runs: the micro-batches that travel through the stages, and the greedy rules over them.

A run feeds a tree of new tokens after a context (a token list whose KV the run's sequence
inherits by forking). Its nodes are ordered main branch first: nodes 0..main-1 are a chain,
so a later run can continue from the run's main branch by forking its sequence and keeping
context + main. After node i the last stage reports the target's greedy choice.

Against the committed tokens T (prompt + emitted), a run is *compatible* when its context
agrees with T and the part of T beyond the context spells a path of its tree from the root:
then its KV is T's and its choices at the path's end continue T. When a compatible run comes
back, greedy verification walks on: the choice after the path's end is committed, and while
that token is a child in the tree the walk continues (`resolve`). Every committed token is
the target's argmax after exactly the committed prefix, i.e. greedy decoding's token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

RunKind = Literal["prefill", "token", "speculative", "verify"]
# prefill: the prompt; token: the newest committed token alone (PipeInfer's non-speculative
# run, or plain pipelined decoding); speculative: a drafted tree after a chain tail;
# verify: the newest token and a drafted tree under it (synchronous speculative decoding).


@dataclass
class Run:
    run_id: int
    request_id: int
    kind: RunKind
    context: list[int]  # the tokens before the tree; its sequence forks them from `parent_seq`
    tokens: list[int]  # new nodes
    parents: list[int]  # parent node of each; -1: the context's last token
    main_length: int  # nodes 0..main_length-1 are the main branch, a chain from the root
    parent_seq: int | None  # the sequence whose first len(context) tokens it forks
    drafted: int  # nodes a draft proposed (the others are committed tokens)
    launched_s: float = 0.0
    cancelled: bool = False
    children: dict[int, dict[int, int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for node, (token, parent) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if not -1 <= parent < node:
                raise ValueError(f"run {self.run_id}: node {node} has parent {parent}")
            self.children.setdefault(parent, {}).setdefault(token, node)

    @property
    def seq(self) -> int:
        """Its KV sequence id in every stage's cache."""
        return self.run_id

    @property
    def main_tokens(self) -> list[int]:
        return self.tokens[: self.main_length]

    @property
    def last_only(self) -> bool:
        """A prompt needs the choice after its last token only."""
        return self.kind == "prefill"

    def child(self, node: int, token: int) -> int | None:
        return self.children.get(node, {}).get(token)


def match_path(run: Run, committed: list[int]) -> list[int] | None:
    """Nodes spelling committed[len(context):] from the root, or None when the committed
    tokens disagree with the run's context or leave its tree (it can no longer help)."""
    c = len(run.context)
    shared = min(c, len(committed))
    if run.context[:shared] != committed[:shared]:
        return None
    path, node = [], -1
    for token in committed[c:]:
        child = run.child(node, token)
        if child is None:
            return None
        path.append(child)
        node = child
    return path


def compatible(run: Run, committed: list[int]) -> bool:
    return match_path(run, committed) is not None


@dataclass
class Resolution:
    path: list[int]  # nodes whose KV is committed now: the matched path and accepted nodes
    new_tokens: list[int]  # committed tokens: the accepted nodes' and the last choice


def resolve(run: Run, committed: list[int], choices: dict[int, int]) -> Resolution | None:
    """Greedy verification of a run that came back with `choices` (node → the target's
    choice after it); None when it cannot extend `committed`."""
    path = match_path(run, committed)
    if not path:  # incompatible, or the committed tokens do not reach its nodes yet
        return None
    new_tokens = []
    while True:
        token = choices[path[-1]]
        new_tokens.append(token)
        child = run.child(path[-1], token)
        if child is None:
            return Resolution(path, new_tokens)
        path.append(child)


def runs_to_cancel(live: list[Run], committed: list[int]) -> list[Run]:
    """Live runs that can no longer help, except those whose sequence a helpful run forks
    (a stage that skipped the parent could not fork it)."""
    useless = {r.run_id for r in live if not compatible(r, committed)}
    by_seq = {r.seq: r for r in live}
    for r in live:
        if r.run_id in useless:
            continue
        parent = by_seq.get(r.parent_seq) if r.parent_seq is not None else None
        while parent is not None:
            useless.discard(parent.run_id)
            parent = by_seq.get(parent.parent_seq) if parent.parent_seq is not None else None
    return [r for r in live if r.run_id in useless]
