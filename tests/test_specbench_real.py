"""`scenarios/specbench_real.yaml`: real prompts on the real backend and the simulator alike."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from workbench.cli import main
from workbench.records import RunRecords
from workbench.scenario.loader import load_scenario
from workbench.store.db import ResultsStore
from workbench.workload.prompt_files import read_questions

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "specbench_real.yaml"


@pytest.fixture(scope="module")
def runs(tiny_zoo: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The shipped scenario run on both backends into one database."""
    db = tmp_path_factory.mktemp("spec") / "r.duckdb"
    zoo = ["--set", f"model.zoo_dir={tiny_zoo}"]
    assert main(["run", str(SCENARIO), "--db", str(db), *zoo, "--no-progress"]) == 0
    assert main(["run", str(SCENARIO), "--backend", "sim", "--db", str(db), *zoo]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        records = {r["backend"]: store.load_records(r["run_id"]) for r in store.list_runs()}
    return db, records


def test_real_and_sim_see_identical_prompt_and_output_lengths(runs: tuple[Path, dict]) -> None:
    _, records = runs
    real, sim = records["real"].requests, records["sim"].requests
    assert (real.status == "finished").all() and (sim.status == "finished").all()
    assert np.array_equal(real.prompt_tokens, sim.prompt_tokens)
    assert np.array_equal(real.output_tokens, sim.output_tokens)  # ignore_eos
    assert len(set(real.prompt_tokens.tolist())) > 5  # real prompts vary in length


def test_requests_carry_their_category(runs: tuple[Path, dict]) -> None:
    _, records = runs
    prompts = load_scenario(SCENARIO).workload.prompts
    assert prompts is not None and prompts.categories is not None
    real: RunRecords = records["real"]
    sim: RunRecords = records["sim"]
    assert real.requests.category.tolist() == sim.requests.category.tolist()
    assert set(real.requests.category) == set(prompts.categories)  # the draw asks all six
    known = {q.category for q in read_questions(prompts.file)}
    assert set(real.requests.category) <= known


def test_category_survives_export_and_is_in_the_metrics_view(
    runs: tuple[Path, dict], tmp_path: Path
) -> None:
    db, records = runs
    expected: dict[str, int] = {}
    for category in records["real"].requests.category:
        expected[category] = expected.get(category, 0) + 2  # real + sim
    out = tmp_path / "requests.parquet"
    assert main(["export", "requests", "--db", str(db), "--out", str(out)]) == 0
    query = f"SELECT category, count(*) FROM read_parquet('{out}') GROUP BY ALL"
    assert dict(duckdb.sql(query).fetchall()) == expected
    with ResultsStore.open(db, read_only=True) as store:
        rows = store.connection.sql("SELECT category, count(*) FROM request_metrics GROUP BY ALL")
        assert dict(rows.fetchall()) == expected
