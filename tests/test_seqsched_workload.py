"""The sequence-scheduling workload: a ranked subset of a length trace, outputs of one
column, the oracle as the max of others, prompts from a distribution, all at t = 0."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scenario.workload import WorkloadConfig
from workbench.workload.generate import generate_workload
from workbench.workload.traces import read_ranked_rows, read_table

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data" / "seqsched" / "alpaca-val-10k-length.csv"
VBS_FCR = ROOT / "scenarios" / "seqsched" / "vbs_fcr.yaml"


def test_ranked_rows_skip_blank_cells_and_follow_the_rank(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("out,rank\n5,2\n6,\n7,0\n8,1\n")
    assert read_ranked_rows(csv, "rank").tolist() == [2, 3, 0]
    records = [{"out": 5, "rank": 1}, {"out": 6, "rank": None}, {"out": 7}, {"out": 8, "rank": 0}]
    js = tmp_path / "t.json"
    js.write_text(json.dumps(records))
    assert read_ranked_rows(js, "rank").tolist() == [3, 0]


@pytest.mark.parametrize(
    ("cells", "message"),
    [("1\n1", r"rank 1 appears twice \(line 2 and line 3\)"), ("1\nx", "whole number.*line 3")],
)
def test_bad_ranks_are_named(tmp_path: Path, cells: str, message: str) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text("rank\n" + cells + "\n")
    with pytest.raises(WorkbenchError, match=message):
        read_ranked_rows(csv, "rank")


def test_the_paper_subset_in_rank_order_with_the_oracle_over_four_samplings() -> None:
    scenario = load_scenario(VBS_FCR)
    w = generate_workload(scenario.workload, scenario.seed)
    table = read_table(DATA).columns
    rank = {int(r): i for i, r in enumerate(table["bench1024_seed42_rank"]) if r != ""}
    rows = [rank[k] for k in range(1024)]
    assert w.output_tokens.tolist() == [int(table["L_t0_0"][i]) for i in rows]
    assert w.oracle_tokens is not None
    assert w.oracle_tokens.tolist() == [int(table["L_max"][i]) for i in rows]
    assert np.all(w.arrival_s == 0.0)
    assert w.prompt_tokens.min() >= 32 and w.prompt_tokens.max() <= 256
    assert w.output_tokens.mean() == pytest.approx(125.22, abs=0.01)


def base(**trace: object) -> dict[str, object]:
    return {
        "num_requests": 4,
        "arrival": {"kind": "batch"},
        "lengths_from_trace": {"path": str(DATA), "output_column": "L_t0_0", **trace},
    }


def test_an_output_only_trace_takes_prompts_from_their_distribution() -> None:
    fixed = {"kind": "fixed", "value": 64}
    cfg = WorkloadConfig.model_validate(base(prompt_column=None) | {"prompt_tokens": fixed})
    w = generate_workload(cfg, 0)
    assert w.prompt_tokens.tolist() == [64] * 4 and w.oracle_tokens is None
    with pytest.raises(ValidationError, match="prompt lengths from prompt_tokens"):
        WorkloadConfig.model_validate(base(prompt_column=None))
    with pytest.raises(ValidationError, match="not output_tokens"):
        WorkloadConfig.model_validate(
            base(prompt_column=None) | {"prompt_tokens": fixed, "output_tokens": fixed}
        )
