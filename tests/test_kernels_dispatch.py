"""The kernel switch, and the model runner's forward with Triton kernels equal to the references."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from kernel_helpers import kernel_device  # noqa: E402

DEVICE = kernel_device()  # before triton is imported: the interpreter needs setting first

from tiny_models import TINY_SHAPE  # noqa: E402

from kernels.dispatch import select_kernels  # noqa: E402
from real_backend.model.config import ModelArgs  # noqa: E402
from real_backend.model.transformer import SeqStep, Transformer  # noqa: E402


def test_references_anywhere_and_grouped_auto_off_cuda():
    assert select_kernels("reference", DEVICE).name == "reference"
    assert select_kernels("grouped", DEVICE).name == "grouped"
    assert select_kernels("auto", "cpu").name == "grouped"
    with pytest.raises(ValueError, match="one of auto, triton, grouped, reference"):
        select_kernels("cuda", "cpu")  # type: ignore[arg-type]


def test_forcing_triton_runs_it_here():
    pytest.importorskip("triton")
    kernels = select_kernels("triton", DEVICE)
    assert kernels.name == "triton"
    assert kernels.paged_tree_attention.__module__ == "kernels.triton_attention"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_triton_without_interpreter_or_cuda_is_refused_and_never_imported_lazily():
    pytest.importorskip("triton")
    script = textwrap.dedent(
        """
        import sys
        from kernels.dispatch import KernelUnavailable, select_kernels
        assert select_kernels("auto", "cpu").name == "grouped"
        assert "triton" not in sys.modules, "the reference path imported triton"
        try:
            select_kernels("triton", "cpu")
        except KernelUnavailable as e:
            print(e)
        else:
            raise SystemExit("forcing triton on CPU without the interpreter was accepted")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "interpreter" in done.stdout


def test_scenario_field_takes_the_three_choices():
    from pydantic import ValidationError

    from workbench.scenario.system import ModelConfig

    assert ModelConfig(name="tiny").kernels == "auto"
    assert ModelConfig(name="tiny", kernels="triton").kernels == "triton"
    with pytest.raises(ValidationError):
        ModelConfig(name="tiny", kernels="cuda")


def tiny_transformer(seed: int) -> Transformer:
    """Random weights (not the init's small ones) on the kernel device."""
    args = ModelArgs(
        vocab_size=101,
        dim=TINY_SHAPE["hidden_size"],
        n_layers=TINY_SHAPE["num_hidden_layers"],
        n_heads=TINY_SHAPE["num_attention_heads"],
        n_kv_heads=TINY_SHAPE["num_key_value_heads"],
        head_dim=TINY_SHAPE["hidden_size"] // TINY_SHAPE["num_attention_heads"],
        intermediate_size=TINY_SHAPE["intermediate_size"],
    )
    model = Transformer(args)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    return model.to(DEVICE).eval()


# Prefill of two prompts (lengths across a block boundary), two decode steps, a token tree.
PLANS = [
    [SeqStep("a", list(range(1, 21))), SeqStep("b", [5, 6, 7])],
    [SeqStep("a", [30]), SeqStep("b", [31])],
    [SeqStep("b", [32]), SeqStep("a", [33])],
    [SeqStep("a", [40, 41, 42, 43, 44], parents=[-1, 0, 0, 1, -1]), SeqStep("b", [50, 51])],
]


def run_plans(model: Transformer, choice: str) -> list[torch.Tensor]:
    model.use_kernels(choice)  # type: ignore[arg-type]
    cache = model.new_cache(num_blocks=12, block_size=16)
    return [logits for plan in PLANS for logits in model.step(cache, plan)]


def test_model_forward_with_triton_equals_the_references():
    pytest.importorskip("triton")
    model = tiny_transformer(seed=0)
    expected = run_plans(model, "reference")
    got = run_plans(model, "triton")
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4)


# A long prompt beside a short one, then steps whose rows the grouped attention splits.
GROUPED_PLANS = [
    [SeqStep("a", [1 + t % 100 for t in range(150)]), SeqStep("b", [5, 6, 7, 8, 9])],
    [SeqStep("a", [30]), SeqStep("b", [31, 32, 33])],
    [SeqStep("b", [34]), SeqStep("a", [35, 36], parents=[-1, -1]), SeqStep("c", [7] * 60)],
]


def test_model_forward_with_grouped_attention_equals_the_references():
    from kernels.grouped_attention import row_groups

    assert len(row_groups([150, 5], [150, 5], TINY_SHAPE["hidden_size"])) == 2
    model = tiny_transformer(seed=2)
    logits = {}
    for choice in ("reference", "grouped"):
        model.use_kernels(choice)  # type: ignore[arg-type]
        cache = model.new_cache(num_blocks=20, block_size=16)
        logits[choice] = [x for plan in GROUPED_PLANS for x in model.step(cache, plan)]
    for g, e in zip(logits["grouped"], logits["reference"], strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_use_kernels_refuses_before_changing_the_choice():
    model = tiny_transformer(seed=1)
    with pytest.raises(ValueError):
        model.use_kernels("fast")  # type: ignore[arg-type]
    assert model.kernel_choice == "auto"


def load_speed_benchmark(monkeypatch: pytest.MonkeyPatch):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "benchmarks" / "kernels_speed.py"
    spec = importlib.util.spec_from_file_location("kernels_speed", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "kernels_speed", module)  # dataclasses look it up
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_speed_benchmark_loads_and_refuses_without_cuda(tmp_path, capsys, monkeypatch):
    module = load_speed_benchmark(monkeypatch)
    assert module.main(["--out", str(tmp_path / "speed.json")]) == 2
    assert "needs a CUDA device" in capsys.readouterr().out


def test_speculative_trees_past_the_triton_walk_are_refused_before_any_step():
    pytest.importorskip("triton")
    from kernels.triton_verification import MAX_TREE_NODES
    from real_backend.decoders.factory import build_decoder
    from workbench.errors import WorkbenchError
    from workbench.scenario.decoders import SpeculativeDecoderConfig

    model = tiny_transformer(seed=2)
    model.use_kernels("triton")

    def build(max_nodes: int) -> None:
        tree = {"kind": "dynamic", "max_nodes": max_nodes}
        config = SpeculativeDecoderConfig(kind="speculative", tree=tree)  # type: ignore[arg-type]
        build_decoder(config, model, model.new_cache(4, 16), draft=model)

    build(MAX_TREE_NODES - 1)  # the root is a node too: 127 drafted tokens fit
    with pytest.raises(WorkbenchError, match="at most 127 drafted tokens") as error:
        build(MAX_TREE_NODES)
    assert error.value.field == "decoder.tree"


@pytest.mark.filterwarnings("ignore:.*flex_attention.*:UserWarning")  # eager flex on CPU
def test_speed_benchmark_baselines_compute_the_kernels_function(monkeypatch):
    """FlexAttention and SDPA, fed the benchmark's gathered K/V and masks, compute what the
    kernel computes; the benchmark checks this before timing them, and that check can fail."""
    from kernels.paged_attention import paged_tree_attention

    module = load_speed_benchmark(monkeypatch)
    shape = module.Shape(n_heads=8, n_kv=2, head_dim=16, block_size=16)
    inputs = module.paged_inputs(3, 37, 8, shape, torch.float32, tree=True, device="cpu")
    expected = paged_tree_attention(*inputs.args())  # (B, Q, nh, hd)
    flex, sdpa = module.flex_and_sdpa(inputs, compiled=False)
    module.check_agrees("flex_attention", flex(), expected)
    module.check_agrees("sdpa", sdpa(), expected)
    causal_only = inputs.tree_mask.clone()
    causal_only[:] = torch.ones_like(causal_only[0]).tril()  # a different mask: must disagree
    inputs.tree_mask = causal_only
    _, other = module.flex_and_sdpa(inputs, compiled=False)
    with pytest.raises(AssertionError, match="sdpa disagrees"):
        module.check_agrees("sdpa", other(), expected)
