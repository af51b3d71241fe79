"""Load a Hugging Face checkpoint folder: config.json plus one or sharded safetensors files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from real_backend.model.config import ModelArgs
from real_backend.model.layers import rope_inv_freq
from real_backend.model.transformer import Transformer
from workbench.errors import WorkbenchError

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
# float64 serves exactness tests (near-tie argmaxes); real runs use the other three.
DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float64": torch.float64,
}


def load_checkpoint(
    folder: str | Path,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
) -> Transformer:
    """Build the model from ``folder/config.json`` and fill every parameter from safetensors."""
    folder = Path(folder)
    if not folder.is_dir():
        raise WorkbenchError("checkpoint folder does not exist", source=str(folder))
    dtype = _dtype(dtype, folder)
    args = ModelArgs.from_folder(folder)
    weight_files = _weight_map(folder)
    with torch.device("meta"):  # no memory until the checkpoint's tensors are assigned
        model = Transformer(args)
    state = _read_tensors(folder, weight_files, _expected_names(model), dtype, device)
    _check_shapes(model, state, folder)
    model.load_state_dict(state, strict=False, assign=True)
    if args.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    inv_freq = rope_inv_freq(args.head_dim, args.rope_theta, args.rope_scaling)
    model.inv_freq = inv_freq.to(device)  # non-persistent buffer, still on meta
    model.fuse()  # inference: fewer, larger matmuls (params stay as views)
    return model.eval()


def _dtype(dtype: torch.dtype | str, folder: Path) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise WorkbenchError(f"unsupported dtype {dtype}", source=str(folder), field="dtype")
        return dtype
    if dtype not in DTYPES:
        raise WorkbenchError(
            f"unsupported dtype {dtype!r}; expected one of {', '.join(DTYPES)}",
            source=str(folder),
            field="dtype",
        )
    return DTYPES[dtype]


def _weight_map(folder: Path) -> dict[str, Path]:
    """Checkpoint tensor name -> the safetensors file holding it."""
    index_path, single = folder / INDEX, folder / SINGLE
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as exc:
            raise WorkbenchError(
                f"not a safetensors index ({exc})", source=str(index_path), field="weight_map"
            ) from exc
        files = {name: folder / fname for name, fname in weight_map.items()}
        for path in set(files.values()):
            if not path.is_file():
                raise WorkbenchError(
                    f"shard {path.name} named in {INDEX} is missing", source=str(folder)
                )
        return files
    if single.is_file():
        with _opened(single) as f:
            return dict.fromkeys(f.keys(), single)
    raise WorkbenchError(f"no {SINGLE} or {INDEX} in checkpoint folder", source=str(folder))


def _expected_names(model: Transformer) -> dict[str, str]:
    """Our parameter name -> checkpoint tensor name (tied lm_head is not in the checkpoint)."""
    names = {}
    for name, _ in model.named_parameters(remove_duplicate=False):
        if name == "lm_head.weight" and model.args.tie_word_embeddings:
            continue
        names[name] = name if name.startswith("lm_head.") else f"model.{name}"
    return names


def _check_shapes(model: Transformer, state: dict[str, torch.Tensor], folder: Path) -> None:
    params = dict(model.named_parameters())
    for name, tensor in state.items():
        want = tuple(params[name].shape)
        if tuple(tensor.shape) != want:
            raise WorkbenchError(
                f"tensor has shape {tuple(tensor.shape)}, config.json implies {want}",
                source=str(folder),
                field=name if name.startswith("lm_head.") else f"model.{name}",
            )


def _read_tensors(
    folder: Path,
    files: dict[str, Path],
    expected: dict[str, str],
    dtype: torch.dtype,
    device: torch.device | str,
) -> dict[str, torch.Tensor]:
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for ours, theirs in expected.items():
        if theirs not in files:
            raise WorkbenchError("tensor missing from checkpoint", source=str(folder), field=theirs)
        by_file.setdefault(files[theirs], []).append((ours, theirs))
    state = {}
    for path, names in by_file.items():
        with _opened(path) as f:
            available = set(f.keys())
            for ours, theirs in names:
                if theirs not in available:
                    raise WorkbenchError(
                        "tensor missing from shard", source=str(path), field=theirs
                    )
                state[ours] = f.get_tensor(theirs).to(device=device, dtype=dtype)
    return state


@contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """A safetensors file open for reading; a damaged one is a one-line error naming it."""
    try:
        with safe_open(path, framework="pt", device="cpu") as handle:
            yield handle
    except SafetensorError as exc:
        raise WorkbenchError(f"not a readable safetensors file ({exc})", source=str(path)) from None
