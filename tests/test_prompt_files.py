"""`workload.prompts`: which question each request asks, in which order, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from tokenizer_folders import tokenizer_folder

from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.scenario.workload import WorkloadConfig
from workbench.store.db import ResultsStore
from workbench.workload.generate import generate_workload
from workbench.workload.prompt_files import read_questions
from workbench.workload.prompt_tokenizer import load_prompt_tokenizer

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "data" / "prompts"
SPECBENCH = PROMPTS / "specbench_question.jsonl"
MT_BENCH = PROMPTS / "mt_bench.jsonl"
VICUNA = PROMPTS / "vicuna_bench.jsonl"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenizer_folder(tmp_path_factory.mktemp("tok"))


def _config(n: int = 30, **prompts: Any) -> WorkloadConfig:
    return WorkloadConfig.model_validate(
        {
            "num_requests": n,
            "arrival": {"kind": "poisson", "rate_per_s": 2.0},
            "output_tokens": {"kind": "uniform", "low": 4, "high": 40},
            "prompts": {"file": SPECBENCH, **prompts},
        }
    )


def _texts(path: Path, turn: int = 0) -> list[str]:
    return [q.turns[turn] for q in read_questions(path)]


def _ids_of(tokenizer: Path, texts: list[str]) -> list[list[int]]:
    return load_prompt_tokenizer(tokenizer, field="t").encode(texts, use_chat_template=False)


def test_file_order_takes_questions_in_order_and_cycles(tokenizer: Path) -> None:
    w = generate_workload(_config(200, file=VICUNA), 0, tokenizer=tokenizer)  # 80 questions
    expected = _ids_of(tokenizer, _texts(VICUNA))
    assert w.prompt_ids == [expected[i % 80] for i in range(200)]
    assert w.prompt_tokens.tolist() == [len(ids) for ids in w.prompt_ids]
    categories = [q.category for q in read_questions(VICUNA)]
    assert w.category is not None and w.category.tolist() == [
        categories[i % 80] for i in range(200)
    ]


def test_shuffle_is_reproducible_and_each_pass_uses_every_question(tokenizer: Path) -> None:
    config = _config(160, file=VICUNA, order="shuffle")
    a, b = (generate_workload(config, 5, tokenizer=tokenizer) for _ in range(2))
    assert a.prompt_ids == b.prompt_ids
    ids = _ids_of(tokenizer, _texts(VICUNA))
    index = {tuple(x): i for i, x in enumerate(ids)}
    assert len(index) == 80  # every question tokenizes differently: tell them apart
    order = [index[tuple(p)] for p in a.prompt_ids]
    assert sorted(order[:80]) == sorted(order[80:]) == list(range(80))
    assert order[:80] != list(range(80))


def test_shuffle_differs_across_seeds_and_leaves_other_components_alone(tokenizer: Path) -> None:
    config = _config(50, order="shuffle")
    a, b = (
        generate_workload(config, 1, tokenizer=tokenizer),
        generate_workload(config, 2, tokenizer),
    )
    assert a.prompt_ids != b.prompt_ids
    in_order = generate_workload(_config(50), 1, tokenizer=tokenizer)
    assert np.array_equal(a.arrival_s, in_order.arrival_s)
    assert np.array_equal(a.output_tokens, in_order.output_tokens)


def test_outputs_stay_drawn_while_prompt_lengths_come_from_the_prompts(tokenizer: Path) -> None:
    real = generate_workload(_config(40), 3, tokenizer=tokenizer)
    synthetic = generate_workload(
        WorkloadConfig.model_validate(
            {
                "num_requests": 40,
                "arrival": {"kind": "poisson", "rate_per_s": 2.0},
                "prompt_tokens": {"kind": "fixed", "value": 7},
                "output_tokens": {"kind": "uniform", "low": 4, "high": 40},
            }
        ),
        3,
    )
    assert np.array_equal(real.output_tokens, synthetic.output_tokens)
    assert np.array_equal(real.arrival_s, synthetic.arrival_s)
    assert synthetic.prompt_ids is None and synthetic.category is None


def test_category_filter_keeps_only_those_categories(tokenizer: Path) -> None:
    w = generate_workload(_config(100, categories=["qa", "coding"]), 0, tokenizer=tokenizer)
    assert w.category is not None and set(w.category) == {"qa", "coding"}
    wanted = [q for q in read_questions(SPECBENCH) if q.category in {"qa", "coding"}]
    assert w.category.tolist()[:90] == [q.category for q in wanted]  # 10 coding, then 80 qa


def test_second_turn_of_multi_turn_questions(tokenizer: Path) -> None:
    w = generate_workload(_config(80, file=MT_BENCH, turn=1), 0, tokenizer=tokenizer)
    assert w.prompt_ids == _ids_of(tokenizer, _texts(MT_BENCH, turn=1))


def test_unknown_category_names_the_file_and_field(tokenizer: Path) -> None:
    with pytest.raises(WorkbenchError) as err:
        generate_workload(_config(categories=["qa", "poetry"]), 0, tokenizer=tokenizer)
    assert err.value.source == str(SPECBENCH) and err.value.field == "workload.prompts.categories"
    assert "'poetry'" in str(err.value) and "\n" not in str(err.value)


def test_turn_out_of_range_names_the_file_and_field(tokenizer: Path) -> None:
    with pytest.raises(WorkbenchError) as err:
        generate_workload(_config(turn=1), 0, tokenizer=tokenizer)  # 400 have one turn
    assert err.value.source == str(SPECBENCH) and err.value.field == "workload.prompts.turn"
    assert "400 of 480" in str(err.value)


def test_malformed_question_file(tmp_path: Path, tokenizer: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"category": "a", "turns": ["hi"]}) + "\n{not json\n")
    with pytest.raises(WorkbenchError, match="line 2: malformed JSON") as err:
        generate_workload(_config(file=bad), 0, tokenizer=tokenizer)
    assert err.value.source == str(bad)
    bad.write_text(json.dumps({"category": "a", "turns": []}) + "\n")
    with pytest.raises(WorkbenchError, match="line 1: expected `turns`"):
        generate_workload(_config(file=bad), 0, tokenizer=tokenizer)


def test_prompts_exclude_prompt_lengths() -> None:
    with pytest.raises(ValueError, match="drop prompt_tokens"):
        WorkloadConfig.model_validate(
            {**_config().model_dump(), "prompt_tokens": {"kind": "fixed", "value": 3}}
        )


# ------------------------------------------------------------ through the CLI, catalog model


def _catalog_scenario(tmp_path: Path, **prompts: Any) -> list[str]:
    """A simulator scenario on a catalog model (no tokenizer) with Spec-Bench prompts."""
    scenario = {
        "name": "catalog-prompts",
        "seed": 0,
        "workload": _config(40, order="shuffle", **prompts).model_dump(mode="json"),
        "model": {"name": "llama-3-8b"},
        "hardware": {"gpu": "h100-sxm"},
        "scheduler": {"kind": "continuous"},
    }
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return ["run", str(path), "--db", str(tmp_path / "r.duckdb")]


def test_catalog_model_without_a_tokenizer_is_one_clear_line(tmp_path: Path, capsys) -> None:
    assert main(_catalog_scenario(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "workload.prompts" in err and "tokenizer" in err and "catalog.yaml" in err


def test_catalog_model_with_a_named_tokenizer_sees_real_prompt_lengths(
    tmp_path: Path, tokenizer: Path
) -> None:
    file = tokenizer / "tokenizer.json"  # a tokenizer.json works as well as its folder
    assert main(_catalog_scenario(tmp_path, tokenizer=str(file))) == 0
    expected = generate_workload(_config(40, order="shuffle"), 0, tokenizer=tokenizer)
    with ResultsStore.open(tmp_path / "r.duckdb", read_only=True) as store:
        records = store.load_records(store.list_runs()[0]["run_id"])
    assert records.requests.prompt_tokens.tolist() == expected.prompt_tokens.tolist()
    assert expected.category is not None
    assert records.requests.category.tolist() == expected.category.tolist()


def test_prompts_without_output_lengths_is_one_clear_line(tmp_path: Path, capsys) -> None:
    args = _catalog_scenario(tmp_path)
    data = yaml.safe_load(Path(args[1]).read_text())
    del data["workload"]["output_tokens"]
    Path(args[1]).write_text(yaml.safe_dump(data))
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "catalog.yaml: workload: prompts needs output_tokens" in err


def test_tokenizing_prompts_needs_neither_torch_nor_transformers(tokenizer: Path) -> None:
    code = (
        "import sys; from pathlib import Path;"
        "from workbench.scenario.workload import WorkloadConfig;"
        "from workbench.workload.generate import generate_workload;"
        f"c = WorkloadConfig.model_validate({_config(5).model_dump(mode='json')!r});"
        f"w = generate_workload(c, 0, tokenizer=Path({str(tokenizer)!r}));"
        "print(len(w.prompt_ids), 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["5", "False", "False"]
