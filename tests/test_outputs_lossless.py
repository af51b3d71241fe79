"""What real runs answered is stored (`outputs`), and the decoder report says from the
database alone whether greedy speculative and lookahead runs emitted exactly their vanilla
twin's tokens (issue 16)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from workbench.cli import main
from workbench.lossless import compare_outputs
from workbench.records import OutputRecords
from workbench.store.db import ResultsStore

pytest.importorskip("torch")

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
# All at once: the batches, and so fp32's rounding in them, are the same on every run
# (wall-clock Poisson arrivals would batch differently from run to run).
SMALL = [
    "workload.num_requests=4", "workload.output_tokens={kind: fixed, value: 20}",
    "workload.arrival={kind: batch}",
]  # fmt: skip


def _run(path: Path, db: Path, zoo: Path, *overrides: str) -> None:
    sets = [f"model.zoo_dir={zoo}", *SMALL, *overrides]
    args = [x for item in sets for x in ("--set", item)]
    assert main(["run", str(path), "--db", str(db), "--json", *args]) == 0


@pytest.fixture(scope="module")
def decoded_db(tiny_zoo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A speculative and a lookahead run beside their vanilla twins, real, on zoo `tiny`."""
    db = tmp_path_factory.mktemp("lossless") / "runs.duckdb"
    for name in ("speculative_real.yaml", "lookahead_real.yaml"):
        _run(SCENARIOS / name, db, tiny_zoo)
        _run(SCENARIOS / name, db, tiny_zoo, "decoder={kind: vanilla}")
    return db


def _lossless_cells(db: Path, out: Path) -> list[str]:
    assert main(["report", "--db", str(db), "--out", str(out)]) == 0
    lines = (out / "report.md").read_text().splitlines()
    start = lines.index(next(x for x in lines if "speed-up over vanilla" in x)) + 2
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    column = table[0].index("Lossless")
    return [row[column] for row in table[2:]]  # past the header and its rule


def test_outputs_are_stored_with_their_text(decoded_db: Path, tmp_path: Path) -> None:
    with ResultsStore.open(decoded_db, read_only=True) as store:
        runs = store.list_runs()
        outputs = store.load_outputs(runs[0]["run_id"])
    assert outputs is not None and outputs.request_id.tolist() == [0, 1, 2, 3]
    assert all(len(tokens) == 20 for tokens in outputs.token_ids)
    assert all(isinstance(text, str) and text for text in outputs.text)
    out = tmp_path / "outputs.parquet"
    assert main(["export", "outputs", "--db", str(decoded_db), "--out", str(out)]) == 0
    assert duckdb.sql(f"SELECT count(*) FROM '{out}'").fetchall() == [(16,)]


def test_greedy_decoders_show_lossless_yes(decoded_db: Path, tmp_path: Path) -> None:
    assert _lossless_cells(decoded_db, tmp_path / "report") == ["yes", "yes"]


def test_a_planted_difference_shows_where(decoded_db: Path, tmp_path: Path) -> None:
    planted = tmp_path / "planted.duckdb"
    planted.write_bytes(decoded_db.read_bytes())
    with duckdb.connect(str(planted)) as con:
        (speculative,) = con.execute(
            "SELECT run_id FROM runs WHERE decoder = 'speculative'"
        ).fetchone()
        con.execute(
            "UPDATE outputs SET token_ids = list_concat(token_ids[1:7], [0], token_ids[9:]) "
            "WHERE run_id = ? AND request_id = 2",
            [speculative],
        )
    cells = _lossless_cells(planted, tmp_path / "report")
    assert "no (request 2, token 7)" in cells and "yes" in cells


def test_sampling_and_missing_outputs_are_not_compared() -> None:
    ours = OutputRecords(__import__("numpy").array([0]), [[1, 2, 3]], ["x"])
    assert compare_outputs(ours, None).verdict == "n/a"
    shorter = OutputRecords(__import__("numpy").array([0]), [[1, 2]], ["x"])
    assert compare_outputs(ours, shorter).cell() == "no (request 0, token 2)"


def test_a_database_from_before_outputs_reads_and_migrates(tmp_path: Path) -> None:
    import workbench as wb

    path = tmp_path / "v7.duckdb"
    ResultsStore.open(path).close()
    with duckdb.connect(str(path)) as con:  # as schema 7 left it
        con.execute("DROP TABLE outputs")
        con.execute("UPDATE schema_version SET version = 7")
    assert wb.open(str(path)).outputs().height == 0  # read-only: read as it is
    with ResultsStore.open(path) as store:  # writable: migrated
        tables = store.connection.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_name = 'outputs'"
        ).fetchall()
    assert tables == [("outputs",)]
