"""Hardware and model catalogs, Hugging Face config parsing, did-you-mean errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from simulator.catalogs.hardware import GPU_CATALOG, get_gpu
from simulator.catalogs.models import (
    MODEL_CATALOG,
    dtype_bytes,
    get_model,
    model_from_hf_config,
    resolve_model,
)
from workbench.errors import WorkbenchError
from workbench.scenario.system import ModelConfig

# Published parameter counts (model cards / config-derived totals).
PUBLISHED_PARAMS = {
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 69.0e9,
    "llama-3-8b": 8.03e9,
    "llama-3-70b": 70.6e9,
    "mistral-7b": 7.24e9,
    "qwen2-7b": 7.62e9,
}

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "vocab_size": 128256,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_param_counts_match_published_sizes(name: str) -> None:
    assert get_model(name).num_params == pytest.approx(PUBLISHED_PARAMS[name], rel=0.01)


def test_llama2_7b_kv_bytes_per_token_fp16() -> None:
    assert get_model("llama-2-7b").kv_bytes_per_token(dtype_bytes("fp16")) == 524288


def test_gqa_shrinks_kv() -> None:
    # Llama-2-70B keeps 8 KV heads of 128 over 80 layers: 2·80·8·128·2 bytes.
    assert get_model("llama-2-70b").kv_bytes_per_token(2) == 327680


def test_dtype_bytes() -> None:
    assert [dtype_bytes(d) for d in ("fp16", "bf16", "fp32", "fp8")] == [2, 2, 4, 1]
    with pytest.raises(WorkbenchError, match="int4"):
        dtype_bytes("int4")


def test_catalog_entries_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_gpu("h100-sxm").memory_bytes = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        MODEL_CATALOG["x"] = get_model("llama-2-7b")  # type: ignore[index]


def test_gpu_catalog_has_required_entries_with_dense_flops() -> None:
    assert {"a100-80gb", "h100-sxm", "h200", "l40s", "cpu"} <= set(GPU_CATALOG)
    assert get_gpu("a100-80gb").peak_tensor_flops == 312e12  # dense, not 624 sparse
    assert get_gpu("h200").memory_bandwidth_bytes_s > get_gpu("h100-sxm").memory_bandwidth_bytes_s


def test_every_profiled_gpu_is_in_the_catalog_with_a_price() -> None:
    """Vidur profiles A100, H100 and A40; Spec-Bench ran on an RTX 3090."""
    a40, rtx3090 = get_gpu("a40"), get_gpu("rtx3090")
    assert a40.memory_bandwidth_bytes_s == 696e9 and a40.peak_tensor_flops == 149.7e12
    assert rtx3090.peak_tensor_flops == 71e12  # fp32 accumulate: half the fp16-accumulate rate
    priced = {name: spec.hourly_price_usd for name, spec in GPU_CATALOG.items()}
    assert priced.pop("cpu") is None  # no source for a generic socket
    assert all(price is not None and price > 0 for price in priced.values())
    assert priced["rtx3090"] < priced["a40"] < priced["a100-80gb"] < priced["h100-sxm"]


def test_fitted_gpus_carry_their_own_or_a_named_sibling_fit() -> None:
    own = {
        name
        for name, spec in GPU_CATALOG.items()
        if spec.kernel_fit and spec.kernel_fit.gpu == name
    }
    assert own == {"a100-80gb", "h100-sxm", "a40"}
    assert get_gpu("h200").kernel_fit is get_gpu("h100-sxm").kernel_fit  # same GH100 die
    assert get_gpu("rtx3090").kernel_fit is get_gpu("a40").kernel_fit  # same GA102 die
    assert get_gpu("l40s").kernel_fit is None and get_gpu("cpu").kernel_fit is None


def test_fp8_peak_falls_back_without_fp8_tensor_cores() -> None:
    assert get_gpu("h100-sxm").peak_flops("fp8") > get_gpu("h100-sxm").peak_flops("bf16")
    assert get_gpu("a100-80gb").peak_flops("fp8") == get_gpu("a100-80gb").peak_flops("fp16")


@pytest.mark.parametrize(("typo", "suggestion"), [("a100", "a100-80gb"), ("h100", "h100-sxm")])
def test_unknown_gpu_suggests_closest(typo: str, suggestion: str) -> None:
    with pytest.raises(WorkbenchError, match=f"did you mean '{suggestion}'") as info:
        get_gpu(typo)
    assert info.value.field == "hardware.gpu"


def test_unknown_model_suggests_closest() -> None:
    with pytest.raises(WorkbenchError, match="did you mean 'llama-2-7b'") as info:
        resolve_model(ModelConfig(name="llama2-7b"))
    assert info.value.field == "model.name"


def _write_config(folder: Path, data: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_hf_config_folder_matches_catalog_shape(tmp_path: Path) -> None:
    _write_config(tmp_path / "llama3", LLAMA3_8B_CONFIG)
    spec = model_from_hf_config(tmp_path / "llama3", name="mine")
    assert spec == dataclasses.replace(get_model("llama-3-8b"), name="mine")


def test_hf_config_defaults_kv_heads_and_head_dim(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k != "num_key_value_heads"}
    spec = model_from_hf_config(_write_config(tmp_path, data))
    assert spec.num_kv_heads == 32
    assert spec.head_dim == 128


def test_hf_config_explicit_head_dim(tmp_path: Path) -> None:
    data = LLAMA3_8B_CONFIG | {"head_dim": 64}
    assert model_from_hf_config(_write_config(tmp_path, data)).head_dim == 64


def test_hf_config_missing_key_names_file_and_key(tmp_path: Path) -> None:
    data = {k: v for k, v in LLAMA3_8B_CONFIG.items() if k != "intermediate_size"}
    path = _write_config(tmp_path, data)
    with pytest.raises(WorkbenchError) as info:
        model_from_hf_config(path)
    assert info.value.source == str(path)
    assert info.value.field == "intermediate_size"


def test_hf_config_bad_json_names_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(WorkbenchError, match="malformed JSON") as info:
        model_from_hf_config(path)
    assert info.value.source == str(path)


def test_config_path_wins_over_name(tmp_path: Path) -> None:
    path = _write_config(tmp_path, LLAMA3_8B_CONFIG)
    spec = resolve_model(ModelConfig(name="llama-2-7b", config_path=path))
    assert spec.name == "llama-2-7b"
    assert spec.vocab_size == 128256
