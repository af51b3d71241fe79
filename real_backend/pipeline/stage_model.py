"""One pipeline stage's share of the target: a contiguous layer range, plus the embedding on
the first stage and the final norm and LM head on the last, loaded from the checkpoint
without reading the other stages' tensors."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from kernels.dispatch import KernelChoice, KernelSet, select_kernels
from kernels.greedy import greedy_tokens
from real_backend.kv_cache import PagedKVCache
from real_backend.model.config import ModelArgs
from real_backend.model.inference_linear import InferenceLinear, prepack_pays
from real_backend.model.layers import RMSNorm, TransformerBlock, rope_cos_sin, rope_inv_freq
from real_backend.model.loading import _check_shapes, _dtype, _read_tensors, _weight_map
from real_backend.model.transformer import SeqStep, Transformer, prepare_step
from workbench.errors import WorkbenchError

# Between two layers a stage asks this whether to stop (its run was cancelled meanwhile).
ShouldStop = Callable[[], bool]


def layer_ranges(n_layers: int, stages: int, shares: list[float] | None) -> list[range]:
    """Contiguous layer ranges, head first: in proportion to `shares` (largest remainders
    first), else as even as possible with the extra layers on the first stages."""
    if stages > n_layers:
        raise WorkbenchError(
            f"{stages} pipeline stages but the model has {n_layers} layers: a stage needs one",
            field="hardware.pipeline_parallel",
        )
    weights = shares or [1.0] * stages
    if len(weights) != stages:
        raise WorkbenchError(
            f"layer_split has {len(weights)} shares for {stages} stages",
            field="decoder.pipeline.layer_split",
        )
    exact = [w / sum(weights) * n_layers for w in weights]
    counts = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(stages), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in by_remainder[: max(0, n_layers - sum(counts))]:
        counts[i] += 1
    while sum(counts) > n_layers:  # minimum of one layer each pushed the total over
        counts[max(range(stages), key=lambda i: (counts[i], -i))] -= 1
    starts = [sum(counts[:i]) for i in range(stages)]
    return [range(s, s + c) for s, c in zip(starts, counts, strict=True)]


class StageModel(nn.Module):
    """Layers `layers` of the target; `embed_tokens` on the first stage, `norm` and the LM
    head on the last. Parameter names are the full model's."""

    def __init__(self, args: ModelArgs, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        self.args = args
        self.layer_range = layers
        self.embed_tokens = nn.Embedding(args.vocab_size, args.dim) if first else None
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in layers)
        self.norm = RMSNorm(args.dim, args.rms_norm_eps) if last else None
        self.lm_head = nn.Linear(args.dim, args.vocab_size, bias=False) if last else None
        self.register_buffer("inv_freq", torch.empty(0), persistent=False)
        self.head: InferenceLinear | None = None
        self.kernels: KernelSet | None = None  # set by use_kernels
        self.layer_sleep_s = 0.0  # emulated slower node (PipelineOptions.emulated_layer_ms)

    @property
    def first(self) -> bool:
        return self.embed_tokens is not None

    @property
    def last(self) -> bool:
        return self.norm is not None

    def weight(self) -> torch.Tensor:
        return next(self.parameters())

    def use_kernels(self, choice: KernelChoice) -> KernelSet:
        """Attention and cache writes with `choice` (raises KernelUnavailable now if it
        cannot run here), as `Transformer.use_kernels`."""
        self.kernels = select_kernels(choice, self.weight().device)
        return self.kernels

    def kernel_set(self) -> KernelSet:
        return self.kernels if self.kernels is not None else self.use_kernels("auto")

    def new_cache(self, num_blocks: int, block_size: int) -> PagedKVCache:
        a, w = self.args, self.weight()
        return PagedKVCache(
            len(self.layers), num_blocks, block_size, a.n_kv_heads, a.head_dim, w.dtype,
            w.device, copy_blocks=self.kernel_set().copy_blocks,
        )  # fmt: skip

    @torch.inference_mode()
    def run(
        self,
        cache: PagedKVCache,
        step: SeqStep,
        hidden: torch.Tensor | None,  # (n, dim) from the previous stage; None on the first
        last_only: bool,
        should_stop: ShouldStop,
    ) -> torch.Tensor | None:
        """This stage's layers over one sequence's new tokens (a tree). Returns the hidden
        states for the next stage, (n, dim); on the last stage the greedy choice after each
        token, (n,) or (1,) with `last_only`; None when `should_stop` said so between layers
        (the KV written so far stays in the cache, to be freed with the sequence)."""
        inputs = prepare_step(cache, [step], self.kernel_set(), self.args.sliding_window)
        x = self.embed_tokens(inputs.tokens) if hidden is None else hidden  # (n, dim)
        cos, sin = rope_cos_sin(inputs.positions, self.inv_freq, x.dtype)  # (n, hd)
        for i, layer in enumerate(self.layers):
            if should_stop():
                return None
            x = layer(x, cos, sin, cache.k[i], cache.v[i], inputs.meta)
            if self.layer_sleep_s:
                time.sleep(self.layer_sleep_s)
        if not self.last:
            return x
        if last_only:
            x = x[-1:]  # (1, dim)
        logits = self.head(self.norm(x))  # (n | 1, vocab)
        return greedy_tokens(logits)  # (n | 1,)


def load_stage(
    folder: str | Path,
    layers: range,
    first: bool,
    last: bool,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
) -> StageModel:
    """Read only this stage's tensors from the checkpoint (a tied LM head reads the
    embedding on the last stage) and prepare them for inference like `load_checkpoint`."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkbenchError("checkpoint folder does not exist", source=str(folder))
    dtype = _dtype(dtype, folder)
    args = ModelArgs.from_folder(folder)
    with torch.device("meta"):
        full = Transformer(args)  # only to name and shape the tensors: no memory
        stage = StageModel(args, layers, first, last)
    names = _stage_names(args, layers, first, last)
    state = _read_tensors(folder, _weight_map(folder), names, dtype, device)
    _check_shapes(full, state, folder)
    state = _renumber(state, layers)
    tied = last and args.tie_word_embeddings
    head_weight = (
        state.get("embed_tokens.weight") if first else state.pop("embed_tokens.weight", None)
    )
    missing, unexpected = stage.load_state_dict(state, strict=False, assign=True)
    if unexpected or set(missing) != ({"lm_head.weight"} if tied else set()):
        raise AssertionError(f"stage tensors do not match: {missing=} {unexpected=}")
    if tied:
        stage.lm_head.weight = nn.Parameter(head_weight, requires_grad=False)
    stage.inv_freq = rope_inv_freq(args.head_dim, args.rope_theta, args.rope_scaling).to(device)
    _fuse(stage)
    return stage.eval()


def _stage_names(args: ModelArgs, layers: range, first: bool, last: bool) -> dict[str, str]:
    """Full-model parameter name → checkpoint tensor name, for this stage's tensors."""
    with torch.device("meta"):
        block = TransformerBlock(args)
    names = {
        f"layers.{i}.{name}": f"model.layers.{i}.{name}"
        for i in layers
        for name, _ in block.named_parameters()
    }
    if first or (last and args.tie_word_embeddings):
        names["embed_tokens.weight"] = "model.embed_tokens.weight"
    if last:
        names["norm.weight"] = "model.norm.weight"
        if not args.tie_word_embeddings:
            names["lm_head.weight"] = "lm_head.weight"
    return names


def _renumber(state: dict[str, torch.Tensor], layers: range) -> dict[str, torch.Tensor]:
    """Full-model names → this module's: layer i is its layer i - first."""
    out = {}
    for name, tensor in state.items():
        if name.startswith("layers."):
            index, rest = name.removeprefix("layers.").split(".", 1)
            out[f"layers.{int(index) - layers.start}.{rest}"] = tensor
        else:
            out[name] = tensor
    return out


def _fuse(stage: StageModel) -> None:
    weight = stage.weight()
    prepack = prepack_pays(weight.dtype, weight.device.type)
    for layer in stage.layers:
        layer.self_attn.fuse(prepack)
        layer.mlp.fuse(prepack)
    if stage.lm_head is not None:
        stage.head = InferenceLinear(stage.lm_head.weight, None, prepack)
