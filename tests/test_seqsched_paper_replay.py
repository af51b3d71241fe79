"""The shipped sequence-scheduling scenarios against a replay of the paper's own benchmark
code on its length data: the same batches, steps, failures and counts.

The replay is a transcription, written from reading them, of zhengzangw/Sequence-Scheduling
`src/utils.py` (`schedule`: sort, VBS buckets, tail moves), `src/generate.py`
(`generate`: a batch runs until every row has emitted EOS or `max_length` iterations;
`generate_group`: with FCR `max_length` is the batch's predicted length, every row without
EOS is a failure, recomputed after the group in batches of the base size with the limit)
and `src/benchmark.py` (the counts). A row of length L emits EOS at iteration L (the data
counts a BOS, standing for the EOS iteration); a length over the limit was only measured
to exceed it, so that row never emits EOS.

`python tests/test_seqsched_paper_replay.py` prints the figures as the paper defines them
(docs/seqsched.md), with and without the paper code's recompute index slip: it recomputes
`prompt[i]` for i the failure's position in the scheduled order, not its group index.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from workbench.cli import main
from workbench.scenario.loader import load_scenario
from workbench.scheduling.length_predictors import with_predictions
from workbench.workload.generate import workload_for

ROOT = Path(__file__).resolve().parent.parent
SEQSCHED = ROOT / "scenarios" / "seqsched"
TRACE = ROOT / "data" / "seqsched" / "alpaca-val-10k-length.csv"
LIMIT, GROUP, BATCH = 512, 256, 16
VBS_SIZES = {50: 256, 100: 128, 150: 64, 200: 32, 250: 16, 300: 16}  # else 16
# scenario → (vbs, fcr); its predictions are read from the scenario
SCENARIOS = {
    "vanilla": (False, False),
    "sort": (False, False),
    "vbs": (True, False),
    "fcr": (False, True),
    "vbs_fcr": (True, True),
    "noisy_sort": (False, False),
    "noisy_vbs_fcr": (True, True),
}


@dataclass
class Row:
    """One request's final attempt, as benchmark.py counts it."""

    finished: bool
    batch_iterations: int  # of the batch it ran in last
    generated: int  # tokens it emitted there (its length if finished, else the cap)


@dataclass
class Replay:
    iterations: int  # forward passes: the sum of every batch's iterations
    failures: int  # FCR failures (first attempts without EOS)
    rows: list[Row]

    def paper_figures(self) -> dict[str, float]:
        """benchmark.py: length = batch iterations + 1; tokens = re-tokenized output + BOS."""
        length = sum(r.batch_iterations + 1 for r in self.rows)
        tokens = sum(r.generated + (0 if r.finished else 1) for r in self.rows)
        n = len(self.rows)
        return {
            "avg_length": length / n,
            "etr": tokens / length,
            "fcr": self.failures / n,
            "tokens": tokens,
        }


def bucket(tokens: int) -> int:
    return -(-tokens // 50) * 50


def paper_schedule(predicted: list[int], vbs: bool) -> list[tuple[list[int], int]]:
    """(group indices, predicted length) per batch, in run order."""
    ranked = sorted(range(len(predicted)), key=lambda i: predicted[i])  # stable
    if not vbs:
        chunks = [ranked[i : i + BATCH] for i in range(0, len(ranked), BATCH)]
        return [(c, max(predicted[i] for i in c)) for c in chunks]
    by_bucket: dict[int, list[int]] = {}
    for i in ranked:
        by_bucket.setdefault(bucket(predicted[i]), []).append(i)
    keys = sorted(by_bucket)
    batches = []
    for k, key in enumerate(keys):
        size, members = VBS_SIZES.get(key, 16), by_bucket[key]
        for start in range(0, len(members), size):
            chunk = members[start : start + size]
            if key < max(predicted) and len(chunk) < max(size // 2, 16):
                by_bucket[keys[k + 1]].extend(chunk)
                break
            batches.append((chunk, key))
    return batches


def paper_generate(lengths: list[int], cap: int) -> tuple[int, list[Row]]:
    """One batch: it stops when every row has emitted EOS, or after `cap` iterations."""
    ends = [length if length <= LIMIT else None for length in lengths]
    finished = [end is not None and end <= cap for end in ends]
    iterations = max(e for e in ends if e is not None) if all(finished) else cap
    rows = [Row(f, iterations, e if f else cap) for f, e in zip(finished, ends, strict=True)]
    return iterations, rows


def replay(lengths: list[int], predicted: list[int], vbs: bool, fcr: bool, slip: bool) -> Replay:
    iterations, failures, rows = 0, 0, []
    for g in range(0, len(lengths), GROUP):
        group, guess = lengths[g : g + GROUP], predicted[g : g + GROUP]
        batches = paper_schedule(guess, vbs)
        outs: list[Row] = []
        for members, value in batches:
            n, out = paper_generate([group[i] for i in members], value if fcr else LIMIT)
            iterations, outs = iterations + n, outs + out
        if fcr:
            failed = [k for k, row in enumerate(outs) if not row.finished]  # positions
            order = [i for members, _ in batches for i in members]
            rerun = failed if slip else [order[k] for k in failed]  # the slip: positions
            failures += len(failed)
            for start in range(0, len(failed), BATCH):
                n, out = paper_generate([group[i] for i in rerun[start : start + BATCH]], LIMIT)
                iterations += n
                for k, row in zip(failed[start : start + BATCH], out, strict=True):
                    outs[k] = row
        rows += outs
    return Replay(iterations, failures, rows)


def scenario_inputs(name: str) -> tuple[list[int], list[int]]:
    """The scenario's true lengths (the trace's, before any cut) and predictions."""
    scenario = load_scenario(SEQSCHED / f"{name}.yaml")
    workload = with_predictions(workload_for(scenario), scenario.scheduler, scenario.seed)
    assert workload.predicted_tokens is not None
    predicted = workload.predicted_tokens
    if scenario.scheduler.order == "arrival":  # the paper's vanilla predicts the limit
        predicted = np.full(len(workload), LIMIT)
    return workload.output_tokens.tolist(), predicted.tolist()


def trace_lengths() -> list[int]:
    with TRACE.open() as f:
        rows = [r for r in csv.DictReader(f) if r["bench1024_seed42_rank"]]
    return [int(r["L_t0_0"]) for r in sorted(rows, key=lambda r: int(r["bench1024_seed42_rank"]))]


def simulated(name: str, db: Path) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(SEQSCHED / f"{name}.yaml"), "--db", str(db), "--json"]) == 0
    return json.loads(out.getvalue().splitlines()[0])  # the schedule ignores the cost model


def test_the_scenarios_replay_the_trace_the_paper_benchmarked() -> None:
    lengths, _ = scenario_inputs("vbs_fcr")
    assert lengths == trace_lengths()
    assert sum(length > LIMIT for length in lengths) == 12


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_simulator_runs_what_the_paper_code_runs(name: str, tmp_path: Path) -> None:
    vbs, fcr = SCENARIOS[name]
    paper = replay(*scenario_inputs(name), vbs=vbs, fcr=fcr, slip=False)
    ours = simulated(name, tmp_path / "runs.duckdb")
    n = len(paper.rows)
    steps = sum(r.batch_iterations for r in paper.rows)
    assert ours["decode_iterations"] == paper.iterations
    assert ours["fcr_ratio"] == paper.failures / n
    assert ours["avg_batch_length"] == pytest.approx(steps / n)  # the paper's length − 1
    useful = sum(r.generated for r in paper.rows)
    assert ours["effective_token_ratio_paper"] == pytest.approx(useful / steps)


def test_the_replay_fails_exactly_the_rows_over_the_limit_with_the_oracle() -> None:
    paper = replay(*scenario_inputs("vbs_fcr"), vbs=True, fcr=True, slip=False)
    assert paper.failures == 12 and sum(not r.finished for r in paper.rows) == 12


if __name__ == "__main__":
    for name in ("vanilla", "vbs_fcr", "noisy_sort", "noisy_vbs_fcr"):
        vbs, fcr = SCENARIOS[name]
        for slip in (False, True) if fcr else (False,):
            r = replay(*scenario_inputs(name), vbs=vbs, fcr=fcr, slip=slip)
            f = r.paper_figures()
            figures = f"avg length {f['avg_length']:.2f}  ETR {f['etr']:.4f}  FCR {f['fcr']:.4f}"
            print(
                f"{name:14} slip={slip!s:5} iterations {r.iterations:6d}  {figures}  "
                f"tokens {f['tokens']:.0f}"
            )
