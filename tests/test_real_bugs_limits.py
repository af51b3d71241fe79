"""Issue 21 #6, #7 and a stop-text message: the real backend refuses, before anything runs
and with one line, requests past the model's context and KV configurations the decoder's
lookahead slots cannot fit; it sizes its own KV cache with those slots counted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from workbench.cli import main
from workbench.errors import WorkbenchError
from workbench.scenario.loader import load_scenario
from workbench.scheduling.blocks import blocks_for
from workbench.store.db import ResultsStore
from workbench.workload.generate import workload_for

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml"
TINY_CONTEXT = 2048  # the zoo `tiny` model's max_position_embeddings


def fixed(prompt: int, output: int) -> list[str]:
    return [
        f"workload.prompt_tokens={{kind: fixed, value: {prompt}}}",
        f"workload.output_tokens={{kind: fixed, value: {output}}}",
    ]


def run(zoo: Path, db: Path, capsys, overrides: list[str], backend: str = "real"):
    """(exit status, stderr) of `workbench run` on the quickstart scenario."""
    args = ["run", str(SCENARIO), "--backend", backend, "--db", str(db), "--no-progress"]
    for item in [f"model.zoo_dir={zoo}", *overrides]:
        args += ["--set", item]
    capsys.readouterr()
    code = main(args)
    return code, capsys.readouterr().err


def stored_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with ResultsStore.open(db, read_only=True) as store:
        return len(store.list_runs())


def assert_refused(code: int, err: str, db: Path, *words: str) -> None:
    assert code == 2
    assert err.startswith("error: ") and err.strip().count("\n") == 0  # one line
    for word in words:
        assert word in err
    assert stored_runs(db) == 0


# ---------------------------------------------------------------- #6: the model's context


@pytest.mark.parametrize(
    ("prompt", "output"), [(2100, 8), (2000, 100)], ids=["prompt", "prompt + output"]
)
def test_a_request_past_the_models_context_is_refused(
    tiny_zoo: Path, tmp_path: Path, capsys, prompt: int, output: int
) -> None:
    db = tmp_path / "r.duckdb"
    overrides = [*fixed(prompt, output), "workload.num_requests=2"]
    overrides += ["scheduler.max_batched_tokens=4096"]  # the batch budget is not what refuses
    code, err = run(tiny_zoo, db, capsys, overrides)
    assert_refused(code, err, db, str(TINY_CONTEXT), "max_position_embeddings", str(prompt))


def test_linear_rope_scaling_extends_the_context(tiny_zoo: Path, tmp_path: Path, capsys) -> None:
    """Position interpolation by 2 serves twice max_position_embeddings (as vLLM derives it)."""
    zoo = tmp_path / "zoo"
    shutil.copytree(tiny_zoo / "tiny", zoo / "tiny")
    config_path = zoo / "tiny" / "target" / "config.json"
    config = json.loads(config_path.read_text())
    config["rope_parameters"] = {"rope_theta": 10000.0, "rope_type": "linear", "factor": 2.0}
    config_path.write_text(json.dumps(config))
    budget = ["workload.num_requests=1", "scheduler.max_batched_tokens=8192"]
    code, err = run(zoo, tmp_path / "r.duckdb", capsys, [*fixed(2100, 4), *budget])
    assert code == 0, err
    db = tmp_path / "s.duckdb"
    code, err = run(zoo, db, capsys, [*fixed(4000, 97), *budget])  # 4097 tokens
    assert_refused(code, err, db, "4096", "4097")


def test_context_limit_follows_the_rope_scaling() -> None:
    from real_backend.model.config import ModelArgs

    base = dict(
        architectures=["LlamaForCausalLM"], hidden_size=64, num_attention_heads=4,
        num_hidden_layers=1, intermediate_size=128, vocab_size=32,
        max_position_embeddings=8192,
    )  # fmt: skip
    llama3 = {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    }  # fmt: skip
    assert ModelArgs.from_hf_config(base).context_tokens == 8192
    # llama3: max_position_embeddings already is the extended context
    assert ModelArgs.from_hf_config({**base, "rope_scaling": llama3}).context_tokens == 8192
    linear = {"rope_type": "linear", "factor": 4.0}
    assert ModelArgs.from_hf_config({**base, "rope_scaling": linear}).context_tokens == 32768


# ---------------------------------------------------------------- #7: lookahead slots

SPECULATIVE_K12 = "decoder={kind: speculative, num_speculative_tokens: 12, draft: {zoo: tiny}}"


def test_lookahead_slots_that_cannot_fit_are_refused_as_by_the_simulator(
    tiny_zoo: Path, tmp_path: Path, capsys
) -> None:
    overrides = [*fixed(60, 60), "workload.num_requests=1", SPECULATIVE_K12]
    overrides += ["scheduler.kv_cache={block_size: 4, num_blocks: 31}"]
    sim_code, sim_err = run(tiny_zoo, tmp_path / "s.duckdb", capsys, overrides, backend="sim")
    assert_refused(sim_code, sim_err, tmp_path / "s.duckdb", "lookahead slots", "31 usable")
    code, err = run(tiny_zoo, tmp_path / "r.duckdb", capsys, overrides)
    assert_refused(code, err, tmp_path / "r.duckdb")
    assert err == sim_err


def test_automatic_kv_sizing_counts_the_lookahead_slots() -> None:
    from real_backend.serve import real_kv_blocks

    scenario = load_scenario(
        SCENARIO, [*fixed(60, 60), "workload.num_requests=16", SPECULATIVE_K12]
    )
    workload = workload_for(scenario)
    per_request = blocks_for(60 + 60 - 1 + 12, 16)  # cached tokens + lookahead slots
    assert real_kv_blocks(scenario, workload) >= 16 * per_request  # max_batch_size 16


# ---------------------------------------------------------------- stop texts' tokenizer


def test_stop_texts_without_a_tokenizer_name_what_it_is_needed_for(tmp_path: Path) -> None:
    from real_backend.serve import stop_token_ids

    with pytest.raises(WorkbenchError) as caught:
        stop_token_ids(tmp_path, ["\n\n"])
    message = str(caught.value)
    assert "workload.stop_texts" in message and "tokenizer.json" in message
    assert "stop texts" in message and "prompts" not in message
