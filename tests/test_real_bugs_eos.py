"""Issue 21 #5: every id of a list-valued `eos_token_id` ends a response, and a checkpoint's
generation_config.json (int or list) takes precedence over config.json, as in transformers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from workbench.cli import main  # noqa: E402
from workbench.store.db import ResultsStore  # noqa: E402

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml"
# "R": the zoo `tiny` model emits it often on the quickstart prompts, so as a second EOS id
# it ends responses early (issue 21's example).
SECOND_EOS = 52


def zoo_with_eos(tiny_zoo: Path, folder: Path, config_eos, generation_eos="absent") -> Path:
    """A copy of the zoo `tiny` pair whose target names these EOS ids ("absent": no
    generation_config.json)."""
    shutil.copytree(tiny_zoo / "tiny", folder / "tiny")
    target = folder / "tiny" / "target"
    config = json.loads((target / "config.json").read_text())
    config["eos_token_id"] = config_eos
    (target / "config.json").write_text(json.dumps(config))
    generation = target / "generation_config.json"
    if generation_eos == "absent":
        generation.unlink(missing_ok=True)
    else:
        generation.write_text(json.dumps({"eos_token_id": generation_eos}))
    return folder


def output_tokens(zoo: Path, db: Path) -> np.ndarray:
    args = ["--set", f"model.zoo_dir={zoo}", "--set", "workload.ignore_eos=false"]
    args += ["--set", "workload.num_requests=8", "--no-progress"]
    args += ["--set", "workload.arrival={kind: batch}"]  # batches independent of the wall clock
    assert main(["run", str(SCENARIO), "--db", str(db), *args]) == 0
    with ResultsStore.open(db, read_only=True) as store:
        (run,) = store.list_runs()
        requests = store.load_records(run["run_id"]).requests
    assert (requests.status == "finished").all()
    return requests.output_tokens


def test_every_listed_eos_id_ends_a_response(tiny_zoo: Path, tmp_path: Path) -> None:
    first_only = output_tokens(zoo_with_eos(tiny_zoo, tmp_path / "a", 1), tmp_path / "a.db")
    both = output_tokens(zoo_with_eos(tiny_zoo, tmp_path / "b", [1, SECOND_EOS]), tmp_path / "b.db")
    assert (both <= first_only).all()
    assert (both < first_only).sum() >= 2  # the second id ended responses early


@pytest.mark.parametrize(
    ("config_eos", "generation_eos"),
    [
        ([1, 52], "absent"),
        (1, [1, 52]),
        ([3, 4], 52),
        (1, None),
        (None, [52, 7]),
    ],
)
def test_eos_ids_are_the_ones_transformers_stops_at(
    tiny_zoo: Path, tmp_path: Path, config_eos, generation_eos
) -> None:
    from real_backend.serve import eos_token_ids

    zoo_with_eos(tiny_zoo, tmp_path, config_eos, generation_eos)
    target = tmp_path / "tiny" / "target"
    hf = transformers.AutoModelForCausalLM.from_pretrained(target)
    expected = hf.generation_config.eos_token_id  # what `generate` stops at
    ids = set() if expected is None else {expected} if isinstance(expected, int) else set(expected)
    assert eos_token_ids(target) == ids
