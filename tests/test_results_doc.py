"""docs/results.md tells the truth: its tables list exactly the columns (and types) of a new
database, and its Python examples run as they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tokenizer_folders import tokenizer_folder

from workbench.store import ResultsStore

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "results.md"
SECTION = re.compile(r"^### `(\w+)` \((table|view)\)$")
RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def _documented() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """Section name → (table or view, [(column or `table.*`, type)]) from the doc."""
    sections: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if match := SECTION.match(line):
            current = match.group(1)
            sections[current] = (match.group(2), [])
        elif line.startswith("## "):
            current = None
        elif current and line.startswith("| ") and not line.startswith("| column"):
            name, sql_type = (cell.strip() for cell in line.strip("|").split("|")[:2])
            sections[current][1].append((name, sql_type))
    return sections


def _actual() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    with ResultsStore.open(":memory:") as store:
        con = store.connection
        kinds = dict(
            con.execute(
                "SELECT table_name, table_type FROM information_schema.tables "
                "WHERE table_schema = 'main'"
            ).fetchall()
        )
        columns = con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
        ).fetchall()
    actual: dict[str, tuple[str, list[tuple[str, str]]]] = {
        name: ("view" if kind == "VIEW" else "table", []) for name, kind in kinds.items()
    }
    for table, column, sql_type in columns:
        actual[table][1].append((column, sql_type))
    return actual


def _expand(
    rows: list[tuple[str, str]], actual: dict[str, tuple[str, list[tuple[str, str]]]]
) -> dict[str, str]:
    """Column → type, with `table.*` rows (that table's columns not listed otherwise) and
    `name_{1..16}` ranges expanded."""
    columns: dict[str, str] = {}
    for name, sql_type in rows:
        if match := re.fullmatch(r"`(\w+)\.\*`", name):
            columns |= {c: t for c, t in actual[match.group(1)][1] if c not in dict(rows)}
        elif match := RANGE.search(name):
            low, high = int(match.group(1)), int(match.group(2))
            columns |= {RANGE.sub(str(i), name): sql_type for i in range(low, high + 1)}
        else:
            columns[name] = sql_type
    return columns


def test_every_table_and_column_is_documented_and_none_invented() -> None:
    documented, actual = _documented(), _actual()
    assert set(documented) == set(actual)
    for name, (kind, rows) in documented.items():
        assert kind == actual[name][0], name
        assert _expand(rows, actual) == dict(actual[name][1]), name


# ---------------------------------------------------------------------- examples


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


@pytest.fixture
def repo_like_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder where the examples' relative paths resolve: the scenarios and data
    of this checkout, and a tokenizer folder (the zoo tiny's tokenizer, trained in ~1 s)."""
    for name in ("scenarios", "data"):
        (tmp_path / name).symlink_to(ROOT / name)
    tokenizer_folder(tmp_path / "tokenizer")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


def test_the_doc_has_its_examples() -> None:
    blocks = _python_blocks()
    assert len(blocks) == 4  # the API tour, then the three examples
    titles = re.findall(r"^### (.+)$", DOC.read_text().split("## Examples")[1], flags=re.M)
    assert titles[:3] == [
        "Compare two decoders",
        "TTFT against the arrival rate, from a sweep",
        "Per-category breakdown",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4), ids=["tour", "decoders", "sweep", "categories"])
def test_example_runs(index: int, repo_like_folder: Path) -> None:
    code = _python_blocks()[index]
    exec(compile(code, f"{DOC.name} block {index}", "exec"), {"__name__": "__doc_example__"})
