"""`workbench calibrate` on the zoo's `tiny` model: the real engine's steps stored as a
profile over the designed grid (the small `test` grid), resumable, bad input in one line."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("transformers")

import duckdb
import torch

from kernels.grouped_attention import CALL_COST
from real_backend.calibration.grid import IDLE_PROBE_OUTPUT_TOKENS, get_grid
from real_backend.calibration.measure import calibrate, resolve_target
from real_backend.model.loading import load_checkpoint
from workbench.cli import main
from workbench.store import ResultsStore
from workbench.store.profiles import VERIFY_REVISION

pytestmark = pytest.mark.slow  # serves the grid's probes on a real model (seconds each)


def _interrupt_at(probe: str) -> Callable[[int, int, str], None]:
    """A progress callback that stops the calibration as `probe` is about to start."""

    def progress(done: int, total: int, name: str) -> None:
        if name == probe:
            raise KeyboardInterrupt

    return progress


def _calibrate_cli(db: Path, zoo: Path, *more: str) -> list[str]:
    return ["calibrate", "--model", "tiny", "--zoo-dir", str(zoo), "--grid", "test",
            "--db", str(db), "--no-progress", *more]  # fmt: skip


def test_calibrate_stores_every_probe_step_and_exports_csv(
    tiny_zoo: Path, tmp_path: Path, capsys
) -> None:
    db, csv = tmp_path / "c.duckdb", tmp_path / "profile.csv"
    assert main(_calibrate_cli(db, tiny_zoo, "--csv", str(csv))) == 0
    out = capsys.readouterr().out
    assert "profile 'tiny-cpu-fp32'" in out and "measured 8 probes" in out
    assert "kind: calibrated, profile: tiny-cpu-fp32" in out and csv.is_file()
    with ResultsStore.open(db, read_only=True) as store:
        (profile,) = store.profiles()
        points = store.profile_points(profile.profile_id)
    assert profile.complete and profile.device == "cpu" and profile.dtype == "fp32"
    assert profile.model_shape["num_layers"] == 2 and profile.threads >= 1
    assert {p.kind for p in points} == {"decode", "prefill", "mixed", "verify"}
    assert all(p.step_s > 0 and p.forward_s > 0 for p in points)
    # A batch of 4 equal requests: decode steps whose context grows by 4 keys each step.
    decodes = [p for p in points if p.probe == "decode-b4-p48@1" and p.kind == "decode"]
    contexts = [p.decode_context_sum for p in decodes]
    assert contexts == list(range(4 * 49, 4 * 49 + 4 * len(decodes), 4))
    assert [p.decode_context_max for p in decodes] == [c // 4 for c in contexts]
    assert profile.info["kernels"] == "grouped"  # the CPU default
    assert profile.info["decode_attention"] == "exact"  # priced by the context sum
    heads, head_dim = profile.model_shape["num_attention_heads"], profile.model_shape["head_dim"]
    assert profile.info["one_call_padding"] == CALL_COST / (heads * head_dim)
    engine = load_checkpoint(Path(profile.checkpoint), torch.float32, "cpu")  # fused as served
    assert profile.info["linear"] == profile.linear == engine.linear_impl
    # One client thinking 20 ms between requests: each prompt wakes an idle engine, and its
    # step costs from the arrival; no other probe sleeps between steps.
    woken = [p for p in points if p.idle_before_s > 0]
    assert {p.probe for p in woken} == {"idle-t20-o32@1"} and len(woken) == 2
    assert all(0.01 < p.idle_before_s < 0.05 and p.kind == "prefill" for p in woken)
    idle_decodes = [p for p in points if p.probe == "idle-t20-o32@1" and p.kind == "decode"]
    assert len(idle_decodes) == 3 * (IDLE_PROBE_OUTPUT_TOKENS - 1)  # a spell before each wake
    # Verification of width 2: two more tokens per sequence, each seeing its predecessors.
    verify = next(p for p in points if p.kind == "verify")
    batch, keys = verify.decode_batch_size, verify.decode_context_sum
    assert verify.decode_extra_tokens == 2 * batch
    assert verify.decode_extra_context_sum == 2 * keys + 3 * batch
    assert main(_calibrate_cli(db, tiny_zoo)) == 0  # again: nothing to measure
    out = capsys.readouterr().out
    assert "is complete already" in out and "older grid" not in out
    # A grid grown since the profile was measured: said so, the profile still complete.
    with duckdb.connect(str(db)) as con:
        con.execute("DELETE FROM profile_points WHERE probe = 'decode-b4-p48@1'")
    assert main(_calibrate_cli(db, tiny_zoo)) == 0
    out = capsys.readouterr().out
    assert "is complete already" in out
    assert "measured with an older grid: it lacks 1 probe run(s) of today's test grid" in out
    assert profile.verify_revision == VERIFY_REVISION
    # A profile whose verifications were measured the old way is not complete: measured anew.
    info = {k: v for k, v in profile.info.items() if k != "verify_revision"}
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE profiles SET info = ?", [json.dumps(info)])
    assert main(_calibrate_cli(db, tiny_zoo)) == 0
    assert "measured 8 probes" in capsys.readouterr().out
    with ResultsStore.open(db, read_only=True) as store:
        old, new = store.profiles()
    assert (old.verify_revision, new.verify_revision) == (0, VERIFY_REVISION)
    # Nor is one begun before the one-call rule was recorded (priced without the rule).
    info = {k: v for k, v in new.info.items() if k != "one_call_padding"}
    with duckdb.connect(str(db)) as con:
        con.execute(
            "UPDATE profiles SET info = ? WHERE profile_id = ?", [json.dumps(info), new.profile_id]
        )
    assert main(_calibrate_cli(db, tiny_zoo)) == 0
    assert "measured 8 probes" in capsys.readouterr().out
    with ResultsStore.open(db, read_only=True) as store:
        assert "one_call_padding" in store.profiles()[-1].info


def test_an_apar_model_is_calibrated_with_forks_on_cue(
    apar_tiny_zoo: Path, tmp_path: Path, capsys
) -> None:
    """A model with the fork tokens runs the grid's fork probe too: two roots fork together
    on cue, each fork's two rows in the decode forward, priced by the fit's fork terms."""
    cli = ["calibrate", "--model", "apar-tiny", "--zoo-dir", str(apar_tiny_zoo), "--grid",
           "test", "--db", str(tmp_path / "a.duckdb"), "--no-progress",
           "--name", "0755"]  # fmt: skip
    assert main(cli) == 0
    out = capsys.readouterr().out
    assert "measured 9 probes" in out and "APAR forks beyond their rows" in out
    # The line to paste names the profile as YAML reads it back (an octal number unquoted).
    usage = next(line for line in out.splitlines() if line.startswith("use it with: "))
    pasted = yaml.safe_load(usage.removeprefix("use it with: ").split(" (for")[0])
    assert pasted == {"cost_model": {"kind": "calibrated", "profile": "0755"}}
    with ResultsStore.open(tmp_path / "a.duckdb", read_only=True) as store:
        (profile,) = store.profiles()
        points = store.profile_points(profile.profile_id)
    forks = [p for p in points if p.decode_forks]
    assert {p.probe for p in forks} == {"fork-b2-t2@1"} and {p.kind for p in forks} == {"fork"}
    # Roots of 20 tokens forking every 8 while under 4 branches: at 16 and 8 tokens left.
    assert [(p.decode_forks, p.decode_batch_size) for p in forks] == [(2, 2), (2, 4)]
    assert all(p.decode_extra_tokens == 4 for p in forks)  # the fork and child tokens


def test_an_interrupted_calibration_resumes_where_it_stopped(
    tiny_zoo: Path, tmp_path: Path
) -> None:
    target = resolve_target("tiny", "cpu", "fp32", str(tiny_zoo))
    probes = [run.name for run in get_grid("test", 2048).runs()]
    with ResultsStore.open(tmp_path / "r.duckdb") as store:
        with pytest.raises(KeyboardInterrupt):
            calibrate(target, store, grid_name="test", progress=_interrupt_at(probes[2]))
        (partial,) = store.profiles()
        assert not partial.complete
        assert store.profile_probes_done(partial.profile_id) == set(probes[:2])
        outcome = calibrate(target, store, grid_name="test")
        assert outcome.skipped == sorted(probes[:2]) and outcome.measured == probes[2:]
        assert outcome.profile.profile_id == partial.profile_id and outcome.profile.complete
        assert store.profile_probes_done(partial.profile_id) == set(probes)


def test_an_unknown_model_gets_one_line(tmp_path: Path, capsys) -> None:
    code = main(["calibrate", "--model", "no-such-model", "--db", str(tmp_path / "x.duckdb")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "unknown model 'no-such-model'" in err and "tiny" in err


def test_an_unbuilt_zoo_model_names_the_build_command(tmp_path: Path, capsys) -> None:
    code = main(_calibrate_cli(tmp_path / "x.duckdb", tmp_path / "empty-zoo"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "workbench zoo build tiny" in err


def test_cuda_without_a_gpu_gets_one_line(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = main(_calibrate_cli(tmp_path / "x.duckdb", tiny_zoo, "--device", "cuda"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and "no CUDA device" in err and len(err.splitlines()) == 1


def test_the_kernels_measured_are_the_ones_asked_for(tiny_zoo: Path, tmp_path: Path) -> None:
    target = resolve_target("tiny", "cpu", "fp32", str(tiny_zoo), "reference")
    probes = [run.name for run in get_grid("test", 2048).runs()]
    with ResultsStore.open(tmp_path / "k.duckdb") as store:
        with pytest.raises(KeyboardInterrupt):
            calibrate(target, store, grid_name="test", progress=_interrupt_at(probes[1]))
        (padded,) = store.profiles()
        assert padded.info["kernels"] == "reference"
        assert padded.info["decode_attention"] == "padded"
        assert padded.info["one_call_padding"] == 0  # the reference never cuts
