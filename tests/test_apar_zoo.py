"""The zoo's APAR model end to end: `workbench zoo build apar-tiny` forks on held-out
structured prompts and not on unstructured ones, `scenarios/apar_real.yaml` runs with it,
and the simulator replaying that run's trees reproduces its steps per request."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from workbench.cli import main
from workbench.invariants import violations
from workbench.store.db import ResultsStore

pytestmark = pytest.mark.slow
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "apar_real.yaml"


def test_the_model_card_records_the_fork_rates(apar_tiny_zoo: Path) -> None:
    card = json.loads((apar_tiny_zoo / "apar-tiny" / "card.json").read_text())
    assert card["apar"]["structured"]["fork_rate"] >= 0.75
    assert card["apar"]["unstructured"]["fork_rate"] == 0.0
    # Banned from forking, it writes details inline: the fork-banned run is a vanilla baseline.
    assert card["apar"]["structured"]["banned_inline_rate"] >= 0.75
    tokenizer = json.loads((apar_tiny_zoo / "apar-tiny" / "target" / "tokenizer.json").read_text())
    assert {"[Fork]", "[Child]"} <= {t["content"] for t in tokenizer["added_tokens"]}


def test_the_draft_shares_the_targets_tokenizer_and_agrees_with_it(apar_tiny_zoo: Path) -> None:
    """APAR with speculative decoding needs a draft of the APAR model: `<entry>/draft`, a
    checkpoint with the target's vocabulary, fork and child tokens included."""
    from real_backend.model.loading import load_checkpoint
    from real_backend.zoo import resolve_zoo_model

    entry = apar_tiny_zoo / "apar-tiny"
    assert resolve_zoo_model("apar-tiny", "draft", apar_tiny_zoo) == entry / "draft"
    target, draft = load_checkpoint(entry / "target"), load_checkpoint(entry / "draft")
    assert draft.args.vocab_size == target.args.vocab_size
    assert draft.args.n_layers < target.args.n_layers
    added = {
        role: {t["content"]: t["id"] for t in _tokenizer(entry / role)["added_tokens"]}
        for role in ("target", "draft")
    }
    assert {"[Fork]", "[Child]"} <= set(added["draft"])
    assert added["draft"] == added["target"]
    assert _tokenizer(entry / "draft") == _tokenizer(entry / "target")
    card = json.loads((entry / "card.json").read_text())
    assert card["draft"]["parameters"] < card["target"]["parameters"]
    assert card["draft"]["distill"] > 0
    for agreement in (card["greedy_agreement"], *card["greedy_agreement_by_kind"].values()):
        assert 0.0 < agreement <= 1.0
    assert set(card["greedy_agreement_by_kind"]) == {"structured", "code"}


def _tokenizer(folder: Path) -> dict:
    return json.loads((folder / "tokenizer.json").read_text())


def test_the_real_scenario_forks_on_lists_and_the_simulator_replays_it(
    apar_tiny_zoo: Path, tmp_path: Path
) -> None:
    db = tmp_path / "r.duckdb"
    common = [
        "--set",
        f"model.zoo_dir={apar_tiny_zoo}",
        "--set",
        "workload.num_requests=10",
        "--set",
        "workload.arrival={kind: batch}",
        "--set",
        "workload.output_tokens.value=96",
        "--set",
        "scheduler.kv_cache.num_blocks=200",
    ]
    assert main(["run", str(SCENARIO), "--db", str(db), "--no-progress", *common]) == 0
    with ResultsStore.open(db) as store:
        (real_row,) = store.list_runs()
        real = store.load_records(real_row["run_id"])
    trees = real.branches.trees()
    r = real.requests
    categories = dict(zip(r.request_id.tolist(), r.category.tolist(), strict=True))
    forked = {rid: tree.branches > 1 for rid, tree in trees.items()}
    structured = [forked[r] for r, c in categories.items() if c == "structured"]
    assert structured and np.mean(structured) >= 0.75
    assert not any(forked[r] for r, c in categories.items() if c == "unstructured")
    assert violations(real, kv_blocks=200) == []
    replay = [
        *common,
        "--set",
        f"decoder.calibrate_from={real_row['run_id']}",
        "--set",
        "cost_model={kind: fixed_step, step_ms: 5}",
    ]
    assert main(["run", str(SCENARIO), "--backend", "sim", "--db", str(db), *replay]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        sim_row = next(r for r in store.list_runs() if r["backend"] == "sim")
        sim = store.load_records(sim_row["run_id"])
    for f in fields(real.emissions):  # the same steps per request, the same tokens in each
        assert np.array_equal(getattr(real.emissions, f.name), getattr(sim.emissions, f.name))
