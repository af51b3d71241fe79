"""Bad input through the CLI: exit 2 and one `error:` line naming file, field and expectation."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from workbench.cli import main
from workbench.store.db import ResultsStore

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "splitwise_conv.csv"

MINIMAL: dict[str, Any] = {
    "name": "minimal",
    "seed": 1,
    "workload": {
        "num_requests": 20,
        "arrival": {"kind": "poisson", "rate_per_s": 4.0},
        "prompt_tokens": {"kind": "fixed", "value": 64},
        "output_tokens": {"kind": "fixed", "value": 8},
    },
    "model": {"name": "llama-3-8b"},
    "hardware": {"gpu": "h100-sxm"},
    "scheduler": {"kind": "continuous"},
}


# ---------------------------------------------------------------------- helpers


def scenario(**changes: Any) -> dict[str, Any]:
    """MINIMAL with `dotted__path=value` changes (a value of DELETE removes the key)."""
    data = copy.deepcopy(MINIMAL)
    for key, value in changes.items():
        *parents, last = key.split("__")
        node = data
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return data


DELETE = object()


def write(tmp_path: Path, data: dict[str, Any] | str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def fails(capsys: pytest.CaptureFixture[str], args: list[str], *expected: str) -> str:
    """Run the CLI in-process; assert exit 2 and one `error:` line holding every substring."""
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith("error: "), line
    for part in expected:
        assert part in line, f"{part!r} not in {line!r}"
    return line


def validate_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any] | str, *expected: str
) -> str:
    path = write(tmp_path, data)
    return fails(capsys, ["validate", str(path)], str(path), *expected)


def run_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any], *expected: str
) -> str:
    """`workbench run` must fail with the message and leave no database it created."""
    path = write(tmp_path, data)
    db = tmp_path / "results.duckdb"
    line = fails(capsys, ["run", str(path), "--db", str(db), "--no-progress"], *expected)
    assert not db.exists()
    return line


def mutate(change: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
    data = copy.deepcopy(MINIMAL)
    change(data)
    return data


# ---------------------------------------------------------------------- the file itself


def test_minimal_fixture_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL, "ok.yaml")
    assert main(["validate", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    fails(capsys, ["validate", str(missing)], str(missing), "file not found")


def test_malformed_yaml_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "name: t\nseed: 1\nworkload: [1, 2\nmodel: x\n"
    validate_fails(tmp_path, capsys, text, "line 4", "malformed YAML")


def test_not_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(b"\xff\xfe\x00 name: x")
    fails(capsys, ["validate", str(path)], str(path), "UTF-8")


def test_top_level_not_a_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    validate_fails(tmp_path, capsys, "- a\n- b\n", "expected a mapping")


# ---------------------------------------------------------------------- keys


def test_unknown_top_level_key_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = mutate(lambda d: d.__setitem__("schedular", d.pop("scheduler")))
    validate_fails(tmp_path, capsys, data, "schedular", "unknown key", "did you mean 'scheduler'")


def test_unknown_nested_key_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = scenario(scheduler__max_batch_sise=8)
    validate_fails(
        tmp_path, capsys, data, "scheduler.max_batch_sise", "did you mean 'max_batch_size'"
    )


def test_unknown_key_inside_a_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__arrival={"kind": "poisson", "rate_per_sec": 2})
    validate_fails(
        tmp_path, capsys, data, "workload.arrival.rate_per_sec", "did you mean 'rate_per_s'"
    )


@pytest.mark.parametrize(
    ("key", "section", "bad", "allowed"),
    [
        ("workload__arrival", {"rate_per_s": 1}, "poison", ["'poisson'", "'gamma'", "'trace'"]),
        ("workload__prompt_tokens", {"value": 8}, "zipf", ["'fixed'", "'uniform'", "'empirical'"]),
        ("scheduler", {}, "fifo", ["'continuous'", "'static'"]),
        ("cost_model", {}, "magic", ["'roofline'", "'vidur_profile'"]),
    ],
)
def test_unknown_kind_lists_the_kinds(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    section: dict[str, Any],
    bad: str,
    allowed: list[str],
) -> None:
    data = scenario(**{key: {"kind": bad, **section}})
    dotted = key.replace("__", ".") + ".kind"
    validate_fails(tmp_path, capsys, data, dotted, f"unknown kind {bad!r}", *allowed)


def test_missing_kind_lists_the_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__arrival__kind=DELETE)
    validate_fails(tmp_path, capsys, data, "workload.arrival:", "missing `kind`", "'poisson'")


def test_missing_required_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__num_requests=DELETE)
    validate_fails(tmp_path, capsys, data, "workload.num_requests", "required field is missing")


# ---------------------------------------------------------------------- values


def test_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__arrival__rate_per_s="fast")
    validate_fails(tmp_path, capsys, data, "workload.arrival.rate_per_s", "number", "'fast'")


@pytest.mark.parametrize(
    ("changes", "dotted", "expected"),
    [
        ({"workload__arrival__rate_per_s": -1}, "workload.arrival.rate_per_s", "greater than 0"),
        (
            {"workload__arrival": {"kind": "gamma", "rate_per_s": 1, "cv": 0}},
            "workload.arrival.cv",
            "greater than 0",
        ),
        (
            {"scheduler__kv_cache": {"gpu_memory_utilization": 1.5}},
            "scheduler.kv_cache.gpu_memory_utilization",
            "less than or equal to 1",
        ),
        ({"workload__num_requests": 0}, "workload.num_requests", "greater than 0"),
    ],
)
def test_out_of_range(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    changes: dict[str, Any],
    dotted: str,
    expected: str,
) -> None:
    validate_fails(tmp_path, capsys, scenario(**changes), dotted, expected)


def test_uniform_high_below_low(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__prompt_tokens={"kind": "uniform", "low": 100, "high": 10})
    validate_fails(tmp_path, capsys, data, "workload.prompt_tokens", "high (10)", "low (100)")


def test_both_length_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__lengths_from_trace={"path": str(TRACE)})
    validate_fails(tmp_path, capsys, data, "workload:", "lengths_from_trace", "not both")


def test_no_length_source(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(workload__prompt_tokens=DELETE, workload__output_tokens=DELETE)
    validate_fails(tmp_path, capsys, data, "workload:", "prompt_tokens", "lengths_from_trace")


@pytest.mark.parametrize(
    ("key", "section", "dotted"),
    [
        ("workload__arrival", {"kind": "trace", "path": "nope.csv"}, "workload.arrival.path"),
        (
            "workload__prompt_tokens",
            {"kind": "empirical", "path": "nope.csv", "column": "x"},
            "workload.prompt_tokens.path",
        ),
    ],
)
def test_data_file_not_found(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    key: str,
    section: dict[str, Any],
    dotted: str,
) -> None:
    validate_fails(tmp_path, capsys, scenario(**{key: section}), dotted, "file not found: nope.csv")


def test_csv_column_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(
        workload__prompt_tokens={"kind": "empirical", "path": str(TRACE), "column": "n"}
    )
    run_fails(
        tmp_path,
        capsys,
        data,
        str(TRACE),
        "no column 'n'",
        "'arrived_at'",
        "'num_prefill_tokens'",
        "'num_decode_tokens'",
    )


# ---------------------------------------------------------------------- run-time checks


def test_unknown_gpu_did_you_mean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_fails(
        tmp_path, capsys, scenario(hardware__gpu="h100-sxn"), "hardware.gpu", "'h100-sxm'"
    )
    assert str(tmp_path / "bad.yaml") in line


def test_unknown_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = run_fails(
        tmp_path, capsys, scenario(model__name="gpt-9"), "model.name", "'gpt-9'", "llama-3-8b"
    )
    assert str(tmp_path / "bad.yaml") in line


def test_weights_do_not_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(model__name="llama-2-70b", hardware__gpu="a100-80gb")
    line = run_fails(tmp_path, capsys, data, "hardware.tensor_parallel", "GiB")
    assert str(tmp_path / "bad.yaml") in line


def test_chunk_below_batch_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(
        scheduler={
            "kind": "continuous",
            "chunked_prefill": True,
            "chunk_size": 64,
            "max_batch_size": 128,
        }
    )
    line = run_fails(tmp_path, capsys, data, "scheduler.chunk_size", "max_batch_size (128)")
    assert str(tmp_path / "bad.yaml") in line


# ---------------------------------------------------------------------- CLI input


def test_set_without_equals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL)
    fails(capsys, ["validate", str(path), "--set", "seed"], str(path), "--set", "'seed'")


def test_set_with_bad_yaml_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL)
    fails(capsys, ["validate", str(path), "--set", "seed=[1"], str(path), "--set seed", "YAML")


def test_set_value_validated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL)
    args = ["validate", str(path), "--set", "workload.arrival.rate_per_s=-3"]
    fails(capsys, args, str(path), "workload.arrival.rate_per_s", "greater than 0")


def test_sweep_over_unknown_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(sweep={"grid": {"workload.arival.rate_per_s": [1, 2]}})
    path = write(tmp_path, data)
    db = tmp_path / "results.duckdb"
    args = ["run", str(path), "--db", str(db), "--no-progress"]
    fails(capsys, args, str(path), "workload.arival.rate_per_s", "did you mean 'arrival'")
    assert not db.exists()  # failed before anything ran


def test_sweep_with_a_bad_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(sweep={"grid": {"workload.arrival.rate_per_s": [1, -2]}})
    path = write(tmp_path, data)
    db = tmp_path / "results.duckdb"
    args = ["run", str(path), "--db", str(db), "--no-progress"]
    fails(capsys, args, str(path), "workload.arrival.rate_per_s", "greater than 0")
    assert not db.exists()


def test_sweep_with_no_values(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = scenario(sweep={"grid": {"seed": []}})
    validate_fails(tmp_path, capsys, data, "sweep.grid.seed", "non-empty")


def test_corrupt_database_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, MINIMAL, "ok.yaml")
    db = tmp_path / "results.duckdb"
    garbage = os.urandom(64) + b"not a database" * 100
    db.write_bytes(garbage)
    fails(capsys, ["run", str(path), "--db", str(db), "--no-progress"], str(db))
    assert db.read_bytes() == garbage
    fails(capsys, ["runs", "--db", str(db)], str(db))
    assert db.read_bytes() == garbage


def test_entry_point_exit_code_and_no_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, scenario(scheduler__max_batch_sise=8))
    done = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("error: ")
    assert "scheduler.max_batch_sise" in done.stderr


def test_a_missing_real_extra_package_is_one_line_and_anything_else_propagates() -> None:
    from workbench.errors import WorkbenchError, needs_real_extra

    what = "calibration runs the real backend"
    with pytest.raises(WorkbenchError) as caught, needs_real_extra(what, field="backend"):
        raise ModuleNotFoundError("No module named 'torch._C'", name="torch._C")
    assert caught.value.one_line() == (
        "backend: calibration runs the real backend: that needs the `real` extra (torch is "
        "missing): pip install -e '.[real]' -c constraints.txt"
    )
    # a missing core module is a bug, not a machine's install: it propagates
    with pytest.raises(ModuleNotFoundError), needs_real_extra(what):
        raise ModuleNotFoundError("No module named 'duckdb'", name="duckdb")


@pytest.mark.parametrize(
    ("command", "what"),
    [
        (["predictor", "train", "--model-zoo", "tiny"], "training a length predictor"),
        (["calibrate", "--model", "tiny"], "calibration runs the real backend"),
    ],
)
def test_a_command_of_the_real_extra_without_torch(
    tmp_path: Path, command: list[str], what: str
) -> None:
    """A machine without torch (blocked in a fresh interpreter) gets the one-line error."""
    blocked = "import sys; sys.modules['torch'] = None; from workbench.cli import main; "
    done = subprocess.run(
        [sys.executable, "-c", blocked + "sys.exit(main(sys.argv[1:]))", *command],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {what}")
    assert "torch is missing" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ("scheduler.max_batch_size=4", "scheduler.max_batch_size"),
        ("workload.arrival.concurrency=3", "workload.arrival"),
    ],
)
def test_validate_refuses_what_a_pipeline_run_would(
    capsys: pytest.CaptureFixture[str], change: str, field: str
) -> None:
    """The batch-1 pipeline decoders' own checks run in `validate`, not only in `run`."""
    path = str(Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_sim.yaml")
    assert main(["validate", path]) == 0
    capsys.readouterr()
    fails(capsys, ["validate", path, "--set", change], path, field, "one request at a time")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "x.yaml", "--backend", "gpu"], "workbench run: argument --backend: invalid"),
        (["plan", "x.yaml", "--workers", "-3"], "--workers: expected a whole number of 1"),
        (["plan", "x.yaml", "--workers", "0"], "--workers: expected a whole number of 1"),
        (["export", "nope"], "workbench export: argument table: invalid choice"),
    ],
)
def test_argument_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and expected in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("option", "value"),
    [("--temperature", "nan"), ("--temperature", "-1"), ("--heldout", "2"), ("--max-new", "0")],
)
def test_predictor_options_out_of_range_are_named(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    fails(
        capsys, ["predictor", "train", "--model-zoo", "tiny", option, value], f"{option}: expected"
    )


def test_a_later_sweep_point_refused_before_the_first_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any work, an existing database keeps what it held and nothing more."""
    db = tmp_path / "results.duckdb"
    assert (
        main(["run", str(write(tmp_path, MINIMAL, "ok.yaml")), "--db", str(db), "--no-progress"])
        == 0
    )
    capsys.readouterr()
    data = scenario(sweep={"grid": {"scheduler.kv_cache.num_blocks": [1000, 2]}})
    path = write(tmp_path, data)
    fails(
        capsys, ["run", str(path), "--db", str(db), "--no-progress"], "num_blocks': 2", "KV blocks"
    )
    with ResultsStore.open(db, read_only=True) as store:
        assert len(store.list_runs()) == 1


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"hardware__tensor_parallel": 2}, "hardware.tensor_parallel: the real backend serves one"),
        ({"hardware__replicas": 2}, "hardware.replicas: the real backend serves one"),
        ({}, "model: the real backend needs weights"),
    ],
)
def test_validate_refuses_what_the_real_backend_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], changes: dict[str, Any], expected: str
) -> None:
    """Checked before anything loads (no torch needed), as a run would refuse them."""
    validate_fails(tmp_path, capsys, scenario(backend="real", **changes), expected)


def test_a_rate_too_low_for_float_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = scenario(workload__arrival__rate_per_s=1e-300)  # 4e301 s: latencies lost in rounding
    validate_fails(tmp_path, capsys, data, "workload.arrival", "expected a higher rate")
    assert (
        main(["validate", str(write(tmp_path, scenario(workload__arrival__rate_per_s=1e-6)))]) == 0
    )


def test_a_folder_given_as_the_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "scenario.yaml"
    folder.mkdir()
    fails(capsys, ["validate", str(folder)], str(folder), "a folder, not a file")


def test_calibrate_refuses_its_csv_path_before_measuring(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    db = tmp_path / "c.duckdb"
    args = ["calibrate", "--model", "no-such-folder", "--db", str(db), "--csv"]
    fails(capsys, [*args, str(tmp_path)], "--csv: a folder, not a file")
    fails(capsys, [*args, str(tmp_path / "no" / "p.csv")], "--csv: folder does not exist")
    assert not db.exists()  # refused before the model is looked for or anything stored


def test_a_draft_tree_too_large_for_a_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = {"kind": "static", "branching": [64, 64, 64]}  # 266,304 nodes: a 66 GiB mask
    decoder = {"kind": "speculative", "draft": {"name": "llama-3.2-1b"}, "tree": tree}
    data = scenario(decoder=decoder)
    validate_fails(tmp_path, capsys, data, "decoder", "266,304 tokens a step", "at most 1,024")


@pytest.mark.parametrize("name", ["   ", "a\nb", "", "x ", "ID-PREFIX"])
def test_a_profile_name_scenarios_could_not_name_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pytest.importorskip("torch")
    from calibration_helpers import grid_works, points_of, profile, store_profile

    db = tmp_path / "p.duckdb"
    with ResultsStore.open(db) as store:
        stored = store_profile(store, profile(), points_of(grid_works()[:3], [1e-3] * 3))
    name = stored.profile_id[:6] if name == "ID-PREFIX" else name
    args = ["calibrate", "--model", "no-such-folder", "--db", str(db), "--name", name]
    fails(capsys, args, "--name: ")
    with ResultsStore.open(db, read_only=True) as store:
        assert [p.profile_id for p in store.profiles()] == [stored.profile_id]


def test_calibrate_names_model_for_an_unbuilt_zoo_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    args = ["calibrate", "--model", "tiny", "--zoo-dir", str(tmp_path / "empty")]
    fails(capsys, [*args, "--db", str(tmp_path / "c.duckdb")], "--model: zoo model 'tiny'")


def test_a_lookahead_step_too_large(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    decoder = {"kind": "lookahead", "window": 200, "ngram": 50, "candidates": 5}
    data = scenario(decoder=decoder)  # 200 x 49 + 5 x 49 = 10,045 tokens a sequence a step
    validate_fails(tmp_path, capsys, data, "decoder", "10,045 tokens a sequence")
