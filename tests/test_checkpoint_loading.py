"""Loading HF checkpoint folders: sharded files, dtypes, and one-line errors naming the culprit."""

from __future__ import annotations

import json
import shutil

import pytest
from tiny_models import TINY_SHAPE

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from real_backend.model import ModelArgs, load_checkpoint  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402

TINY = dict(**TINY_SHAPE, vocab_size=128)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**TINY)).eval()


@pytest.fixture
def single(hf_model, tmp_path):
    folder = tmp_path / "single"
    hf_model.save_pretrained(folder)
    return folder


def assert_same_weights(ours, hf_model):
    theirs = hf_model.state_dict()
    for name, p in ours.named_parameters():
        key = name if name.startswith("lm_head.") else f"model.{name}"
        torch.testing.assert_close(p.float(), theirs[key].float(), atol=0, rtol=0)


def test_sharded_checkpoint_loads(hf_model, tmp_path):
    folder = tmp_path / "sharded"
    hf_model.save_pretrained(folder, max_shard_size="40KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    assert_same_weights(load_checkpoint(folder), hf_model)


def test_single_file_and_dtypes(hf_model, single):
    assert_same_weights(load_checkpoint(single), hf_model)
    for dtype, expected in (("bfloat16", torch.bfloat16), (torch.float16, torch.float16)):
        model = load_checkpoint(single, dtype=dtype)
        assert {p.dtype for p in model.parameters()} == {expected}
    with pytest.raises(WorkbenchError, match="unsupported dtype"):
        load_checkpoint(single, dtype="int8")


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_missing_config(single):
    (single / "config.json").unlink()
    with pytest.raises(WorkbenchError) as exc:
        load_checkpoint(single)
    assert str(single) in one_line(exc) and "config.json" in one_line(exc)


def test_missing_weights_file(single):
    (single / "model.safetensors").unlink()
    with pytest.raises(WorkbenchError) as exc:
        load_checkpoint(single)
    assert str(single) in one_line(exc) and "model.safetensors" in one_line(exc)


def test_missing_tensor(single):
    path = single / "model.safetensors"
    tensors = safetensors_torch.load_file(path)
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    safetensors_torch.save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(WorkbenchError) as exc:
        load_checkpoint(single)
    assert exc.value.field == "model.layers.1.self_attn.k_proj.bias"
    assert str(single) in one_line(exc)


def test_missing_shard(hf_model, tmp_path):
    folder = tmp_path / "sharded"
    hf_model.save_pretrained(folder, max_shard_size="40KB")
    next(iter(folder.glob("model-*.safetensors"))).unlink()
    with pytest.raises(WorkbenchError, match="missing") as exc:
        load_checkpoint(folder)
    one_line(exc)


def test_wrong_shape(single):
    config = json.loads((single / "config.json").read_text())
    config["intermediate_size"] = 96
    (single / "config.json").write_text(json.dumps(config))
    with pytest.raises(WorkbenchError, match="shape") as exc:
        load_checkpoint(single)
    assert "mlp" in exc.value.field


def test_damaged_weights_file(single):
    path = single / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])  # a download cut short
    with pytest.raises(WorkbenchError, match="not a readable safetensors file") as exc:
        load_checkpoint(single)
    assert str(path) in one_line(exc)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ([1, 2], "expected a JSON object"),
        ({"vocab_size": -5}, "vocab_size: expected a positive integer, got -5"),
        ({"num_hidden_layers": 2.5}, "num_hidden_layers: expected a positive integer"),
        ({"hidden_size": "64"}, "hidden_size: expected a positive integer"),
    ],
)
def test_a_config_of_impossible_sizes(single, config, expected):
    path = single / "config.json"
    if isinstance(config, dict):
        config = {**json.loads(path.read_text()), **config}
    path.write_text(json.dumps(config))
    with pytest.raises(WorkbenchError, match=expected) as exc:
        load_checkpoint(single)
    assert str(path) in one_line(exc)


def test_unsupported_architecture(single, tmp_path):
    config = json.loads((single / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    config["model_type"] = "gpt2"
    (single / "config.json").write_text(json.dumps(config))
    with pytest.raises(WorkbenchError) as exc:
        load_checkpoint(single)
    text = one_line(exc)
    assert (
        "GPT2LMHeadModel" in text and "config.json" in text and exc.value.field == "architectures"
    )
    shutil.rmtree(single)
    with pytest.raises(WorkbenchError, match="does not exist"):
        load_checkpoint(single)


def test_model_args_from_v4_style_config():
    args = ModelArgs.from_hf_config(
        {
            "architectures": ["LlamaForCausalLM"],
            **TINY,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "attention_bias": True,
        }
    )
    assert args.rope_theta == 500000.0 and args.rope_scaling["rope_type"] == "llama3"
    assert args.qkv_bias and args.o_bias and args.head_dim == 16 and args.n_kv_heads == 2
    qwen = ModelArgs.from_hf_config({"model_type": "qwen2", **TINY})
    assert qwen.qkv_bias and not qwen.o_bias and qwen.rope_scaling is None
    with pytest.raises(WorkbenchError, match="rope type 'yarn'"):
        ModelArgs.from_hf_config(
            {"model_type": "llama", **TINY, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}
        )


def test_calibrating_a_damaged_checkpoint_stores_no_profile(single, tmp_path, capsys):
    from workbench.cli import main
    from workbench.store import ResultsStore

    path = single / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    db = tmp_path / "kept.duckdb"
    with ResultsStore.open(db):
        pass  # an existing database: must not gain a profile that never measured
    args = ["calibrate", "--model", str(single), "--grid", "test", "--no-progress"]
    assert main([*args, "--db", str(db)]) == 2
    assert "not a readable safetensors file" in capsys.readouterr().err
    with ResultsStore.open(db, read_only=True) as store:
        assert store.profiles() == []
    fresh = tmp_path / "fresh.duckdb"
    assert main([*args, "--db", str(fresh)]) == 2
    assert not fresh.exists()


def test_a_damaged_tokenizer_is_refused_before_serving(single, monkeypatch):
    from pathlib import Path

    import real_backend.serve as serve
    from workbench.scenario.loader import load_scenario

    (single / "tokenizer.json").write_text("garbage")
    scenario = load_scenario(
        Path(__file__).resolve().parent.parent / "scenarios" / "quickstart_real.yaml",
        ["model.zoo=null", f"model.config_path={single}", "workload.num_requests=2"],
    )
    monkeypatch.setattr(serve, "load_checkpoint", lambda *a, **k: pytest.fail("served first"))
    with pytest.raises(WorkbenchError, match="not a readable tokenizer") as exc:
        serve.serve_scenario(scenario)
    assert str(single / "tokenizer.json") in one_line(exc)
