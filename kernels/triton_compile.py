"""Compile the Triton kernels for a GPU this machine lacks, and read what each compiled kernel uses.

Triton's interpreter checks the kernels' arithmetic on CPU but never lowers them. A kernel can
pass every interpreted test and still fail on a GPU. It can need more shared memory than the
card has, fail in ptxas, or spill registers to local memory, which costs bandwidth. This module
takes the calls the launchers plan (``plan_*``) for representative inputs and compiles each to a
cubin for a target architecture. It uses Triton's own specialisation: dtypes, 16-byte
alignment, and which integers are divisible by 16 or equal to 1. Triton's bundled ptxas then
reports registers, spills and stack for each kernel, and Triton's metadata gives the shared
memory. No GPU is needed.

    python -m kernels.triton_compile [--arch 80 90] [--full] [--json FILE]

Import it without ``TRITON_INTERPRET``: under the interpreter the kernels cannot be compiled.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

from kernels.errors import KernelUnavailable
from kernels.triton_attention import plan_paged_tree_attention
from kernels.triton_cache import plan_copy_blocks, plan_write_kv
from kernels.triton_runtime import INTERPRETED, KernelCall
from kernels.triton_verification import MAX_TREE_NODES, plan_greedy_verify

__all__ = [
    "MAX_SHARED_BYTES",
    "Case",
    "CompileFailure",
    "Resources",
    "cases",
    "compile_resources",
    "main",
]

if INTERPRETED:
    raise KernelUnavailable(
        "kernels.triton_compile compiles the kernels for a GPU: import it without TRITON_INTERPRET"
    )

# Largest shared memory one block may opt into, by compute capability (CUDA programming guide).
MAX_SHARED_BYTES = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
WARP_SIZE = 32


class CompileFailure(RuntimeError):
    """A planned call does not compile for the target (Triton or ptxas refused it)."""


@dataclass(frozen=True)
class Case:
    """One representative call of one launcher: a label, and the calls it plans."""

    label: str
    calls: tuple[KernelCall, ...]


@dataclass(frozen=True)
class Resources:
    """What one compiled kernel uses on one architecture."""

    case: str
    kernel: str
    capability: int
    num_warps: int
    registers: int  # per thread
    spill_store_bytes: int
    spill_load_bytes: int
    stack_bytes: int
    shared_bytes: int

    @property
    def fits_shared(self) -> bool:
        return self.shared_bytes <= MAX_SHARED_BYTES[self.capability]


def _specialise(call: KernelCall, backend: Any) -> tuple[dict, dict, dict, Any]:
    """Signature, constexprs, attributes and options exactly as Triton's launcher derives them."""
    kernel = call.kernel
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    kwargs = dict(call.kwargs)
    bound, specialisation, options = binder(*call.args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialisation, options
    )
    return signature, constexprs, attrs, options


def variant_key(call: KernelCall, capability: int = 90) -> str:
    """What Triton's launcher keys its compiled kernels on, for one planned call: the kernel,
    its specialised signature, constexprs, attributes and options. Two calls with the same
    key run the same compiled kernel; a new key is a compilation (and on a live run, a stall)."""
    backend = _backend(capability)
    signature, constexprs, attrs, options = _specialise(call, backend)
    return repr((call.name, signature, constexprs, attrs, options))


@functools.cache
def _backend(capability: int) -> Any:
    return make_backend(GPUTarget("cuda", capability, WARP_SIZE))


_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


def _ptxas_report(ptx: str, capability: int) -> tuple[int, int, int, int]:
    """(registers, stack frame, spill stores, spill loads) from ``ptxas -v`` on Triton's PTX.

    A second ptxas run, with Triton's flags: Triton discards ptxas's log after a success, and
    a kernel found in Triton's cache is not assembled again."""
    arch = sm_arch_from_capability(capability)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [get_ptxas(capability).path, "-v", "--regAllocOptLevel=2", f"--gpu-name={arch}",
             str(source), "-o", str(Path(tmp) / "kernel.cubin")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    log = done.stdout + done.stderr
    used, spills = _PTXAS_USED.search(log), _PTXAS_SPILLS.search(log)
    if used is None or spills is None:
        raise RuntimeError(f"unexpected ptxas -v output: {log!r}")
    stack, stores, loads = (int(x) for x in spills.groups())
    return int(used.group(1)), stack, stores, loads


def _compile(call: KernelCall, target: GPUTarget, backend: Any) -> Any:
    signature, constexprs, attrs, options = _specialise(call, backend)
    source = ASTSource(call.kernel, signature, constexprs, attrs)
    with contextlib.redirect_stdout(io.StringIO()):  # on a ptxas failure Triton prints all PTX
        return triton.compile(source, target=target, options=options.__dict__)


def _reason(error: Exception) -> str:
    """The lines of a Triton or ptxas error that say what went wrong."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal" in line or "error   :" in line]
    return "; ".join(fatal or lines[:1]) or type(error).__name__


def compile_resources(case: Case, capability: int) -> list[Resources]:
    """Compile each of the case's calls for ``capability`` (e.g. 90) and report its resources.

    Raises ``CompileFailure`` when Triton or ptxas refuse a kernel for that target.
    """
    target = GPUTarget("cuda", capability, WARP_SIZE)
    backend = make_backend(target)
    found = []
    for call in case.calls:
        try:
            compiled = _compile(call, target, backend)
        except (
            Exception
        ) as e:  # Triton raises several unrelated types (PTXASError, CompilationError)
            raise CompileFailure(
                f"{case.label}: {call.name} does not compile for sm_{capability}: {_reason(e)}"
            ) from e
        registers, stack, stores, loads = _ptxas_report(compiled.asm["ptx"], capability)
        meta = compiled.metadata
        found.append(Resources(case.label, call.name, capability, meta.num_warps, registers,
                               stores, loads, stack, meta.shared))  # fmt: skip
    return found


# Representative inputs. Only shapes, dtypes and strides matter: the kernels never run here.

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
Mask = Literal["causal", "tree"]


@dataclass(frozen=True)
class AttentionShape:
    dtype: str
    head_dim: int
    block_size: int
    group: int  # query heads per kv head
    q_len: int  # new tokens per sequence
    mask: Mask
    num_splits: int
    n_kv: int = 8
    batch: int = 2
    context: int = 1000

    @property
    def label(self) -> str:
        return (f"attention {self.dtype} hd{self.head_dim} bs{self.block_size} g{self.group} "
                f"q{self.q_len} {self.mask} splits{self.num_splits}")  # fmt: skip


def _attention_case(shape: AttentionShape) -> Case:
    dtype = DTYPES[shape.dtype]
    B, Q, n_kv = shape.batch, shape.q_len, shape.n_kv
    blocks = -(-(shape.context + Q) // shape.block_size)
    cache = torch.empty((B * blocks, shape.block_size, n_kv, shape.head_dim), dtype=dtype)
    q = torch.empty((B, Q, n_kv * shape.group, shape.head_dim), dtype=dtype)
    tables = torch.arange(B * blocks).view(B, blocks)
    lens = torch.full((B,), shape.context)
    mask = None if shape.mask == "causal" else torch.ones((B, Q, Q), dtype=torch.bool).tril()
    calls, _ = plan_paged_tree_attention(
        q, cache, cache.clone(), tables, lens, torch.full((B,), Q), mask,
        shape.head_dim**-0.5, num_splits=shape.num_splits,
    )  # fmt: skip
    return Case(shape.label, tuple(calls))


def _cache_cases(dtype: str, head_dim: int, block_size: int, n_kv: int = 8) -> Iterator[Case]:
    cache = torch.empty((64, block_size, n_kv, head_dim), dtype=DTYPES[dtype])
    new = torch.empty((5, n_kv, head_dim), dtype=DTYPES[dtype])
    label = f"{dtype} hd{head_dim} bs{block_size}"
    calls = plan_write_kv(cache, cache.clone(), new, new.clone(), torch.arange(5))
    yield Case(f"write_kv {label}", tuple(calls))
    ids = torch.arange(4)
    yield Case(f"copy_blocks {label}", tuple(plan_copy_blocks(cache, cache.clone(), ids, ids + 4)))


def _verify_case(nodes: int, tree: bool, vocab: int = 32000) -> Case:
    B = 4
    logits = torch.empty((B, nodes, vocab), dtype=torch.float16)
    drafts = torch.zeros((B, nodes - 1), dtype=torch.int64)
    parents = torch.arange(-1, nodes - 1).repeat(B, 1) if tree else None
    calls, _ = plan_greedy_verify(logits, drafts, torch.full((B,), nodes - 1), parents)
    return Case(f"greedy_verify {'tree' if tree else 'chain'} T{nodes}", tuple(calls))


# decode, a chain of 8, a tree of 64, a prompt chunk of 128
STEP_KINDS: tuple[tuple[int, Mask], ...] = (
    (1, "causal"),
    (8, "tree"),
    (64, "tree"),
    (128, "causal"),
)


def _attention_shapes(full: bool) -> Iterator[AttentionShape]:
    """The issue's grid (dtypes, head dims 64/128, blocks 16/32, GQA, decode to trees, split-KV);
    without ``full``, every value of each axis at least once."""
    if full:
        for dtype in DTYPES:
            for head_dim in (64, 128):
                for block_size in (16, 32):
                    for group in (1, 4, 8):
                        for q_len, mask in (
                            (1, "causal"),
                            (8, "tree"),
                            (64, "tree"),
                            (128, "causal"),
                        ):
                            yield AttentionShape(dtype, head_dim, block_size, group, q_len, mask, 1)
                        yield AttentionShape(dtype, head_dim, block_size, group, 1, "causal", 8)
        return
    for dtype in DTYPES:
        yield AttentionShape(dtype, 128, 16, 4, 1, "causal", 1)  # decode
        yield AttentionShape(dtype, 128, 16, 4, 1, "causal", 8)  # decode, split-KV
        yield AttentionShape(dtype, 128, 16, 4, 64, "tree", 1)  # verification tree
    yield AttentionShape("fp16", 64, 32, 1, 8, "tree", 1)
    yield AttentionShape("bf16", 64, 16, 8, 128, "causal", 1)  # prefill chunk


def cases(full: bool = False) -> list[Case]:
    """Representative calls of every kernel (``full``: the whole attention grid)."""
    found = [_attention_case(shape) for shape in _attention_shapes(full)]
    for dtype in DTYPES if full else ("fp16",):
        found += _cache_cases(dtype, 128, 16)
    found += [_verify_case(5, tree=False), _verify_case(64, tree=True)]
    found += [_verify_case(MAX_TREE_NODES, tree=True)]  # the largest tree the walk accepts
    return found


def _row(r: Resources) -> str:
    spills = f"{r.spill_store_bytes}/{r.spill_load_bytes}"
    return (f"| {r.case} | {r.kernel} | sm_{r.capability} | {r.num_warps} | {r.registers} | "
            f"{spills} | {r.stack_bytes} | {r.shared_bytes} |")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--arch", type=int, nargs="+", default=[80, 90], choices=sorted(MAX_SHARED_BYTES)
    )
    parser.add_argument("--full", action="store_true", help="the whole attention grid")
    parser.add_argument("--json", type=Path, help="write every kernel's resources here too")
    args = parser.parse_args(argv)
    print("| case | kernel | arch | warps | registers | spill st/ld (B) | stack (B) | shared (B) |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    found: list[Resources] = []
    failures: list[str] = []
    for case in cases(args.full):
        for capability in args.arch:
            try:
                resources = compile_resources(case, capability)
            except CompileFailure as e:
                failures.append(str(e))
                continue
            for r in resources:
                found.append(r)
                print(_row(r), flush=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in found], indent=1))
    failures += [
        f"{r.case}: {r.kernel} needs {r.shared_bytes} B of shared memory, sm_{r.capability} "
        f"allows {MAX_SHARED_BYTES[r.capability]}"
        for r in found
        if not r.fits_shared
    ]
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
