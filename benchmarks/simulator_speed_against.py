"""Simulator speed of this tree against another revision, in one run on one machine.

Checks the tree out at REV (a temporary `git worktree`), then times `simulate` on each
tree's own quickstart at 20 req/s (`simulator_before_after.py`, one process per run), the
two trees taking turns and the first of each round alternating, so that a slow spell of the
machine falls on both. Prints every round and the sums; run it on an idle machine.

    python benchmarks/simulator_speed_against.py 2130c7b --rounds 5 --requests 100000
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TIMER = HERE / "simulator_before_after.py"
SECONDS = re.compile(r"simulate ([0-9.]+) s .*steps (\d+)")


@contextmanager
def worktree(rev: str) -> Iterator[Path]:
    """A detached checkout of `rev` beside this repository, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="speed-against-") as parent:
        path = Path(parent) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev],
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=True
            )


def timed(tree: Path, requests: int, overrides: list[str]) -> tuple[float, int]:
    """(seconds in `simulate`, steps) of one run of `tree`'s code on its own quickstart."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(TIMER), str(tree), str(requests), *overrides]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    match = SECONDS.search(out)
    if match is None:
        raise SystemExit(f"no timing in the output of {' '.join(command)}:\n{out}")
    return float(match.group(1)), int(match.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the revision to compare against (the 'before')")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[],
        help="a scenario override for both trees, e.g. 'cost_model={kind: roofline}'",
    )  # fmt: skip
    args = parser.parse_args()
    sums = {"before": 0.0, "after": 0.0}
    with worktree(args.rev) as before:
        trees = {"before": before, "after": ROOT}
        for round_ in range(1, args.rounds + 1):
            order = ("before", "after") if round_ % 2 else ("after", "before")
            for name in order:
                seconds, steps = timed(trees[name], args.requests, args.overrides)
                sums[name] += seconds
                print(f"round {round_} {name:>6}: simulate {seconds:.2f} s, {steps:,} steps",
                      flush=True)  # fmt: skip
    change = sums["after"] / sums["before"] - 1.0
    print(f"sums: before ({args.rev}) {sums['before']:.2f} s, after {sums['after']:.2f} s "
          f"({change:+.1%})")  # fmt: skip


if __name__ == "__main__":
    main()
