"""Fitted kernel parameters of one GPU: how far its GEMMs, elementwise kernels and
attention fall short of the datasheet peaks, as measured.

Every efficiency is a share of the GPU's catalog peak (16-bit tensor FLOP/s or memory
bandwidth), so one set of numbers serves any model shape on that GPU
(`simulator/cost_models/kernel_times.py` says how they are used). `source` says which
measurements they were fitted from, which were held out, and with which command; a user's
own fit (`workbench fit-cost-model`) is stored as JSON by `to_json` and read by `from_json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from workbench.errors import WorkbenchError

ELEMENTWISE_KINDS = ("norm", "rope", "activation", "residual_add", "embedding")
TEXT_FIELDS = ("gpu", "decode_attention_kernel", "source")
# The attention kernels a fit can describe, decode and prefill alike
# (simulator/cost_models/decode_attention.py, prefill_attention.py).
DECODE_KERNEL_NAMES = ("flash_decoding", "flash_varlen")
# The attention parameters a fit takes from its attention profile (or from another GPU's
# fit, `--attention-from`).
ATTENTION_PARAMETERS = (
    "decode_attention_launch_s",
    "decode_cta_s",
    "decode_cta_bandwidth_share",
    "decode_shared_cta_s",
    "decode_shared_cta_bandwidth_share",
    "decode_memory_efficiency",
    "decode_overlap",
    "decode_combine_launch_s",
    "decode_combine_per_split_s",
    "prefill_attention_launch_s",
    "prefill_cta_s",
    "prefill_cta_flops_share",
    "prefill_copy_bandwidth_share",
    "prefill_shared_cta_s",
    "prefill_shared_cta_flops_share",
    "prefill_shared_copy_bandwidth_share",
    "prefill_combine_s",
    "prefill_tail_share",
)
# Fields of older fit files, and the change that removed them.
_OLD_FIELDS = {
    "decode_attention_per_sequence_s": "the work-split decode attention",
    "elementwise_launch_s": "per-kind elementwise kernels",
    "attention_compute_efficiency": "the work-split prefill attention",
}


@dataclass(frozen=True)
class KernelFit:
    """Parameters of the fitted kernel model (times in seconds, efficiencies in (0, ∞)).

    GEMM: launch + smooth-max(compute, memory) with exponent `gemm_overlap` (1: no
    overlap, the two add up; ∞: the roofline's perfect overlap).
    Elementwise kernels, one pair of parameters per kind (`ELEMENTWISE_KINDS`): launch +
    bytes at a share of bandwidth. One pair for all five mispriced some by up to 2.7× (the
    residual add over, the embedding gather under; Vidur's profiles), errors that only
    cancelled in a layer's sum. Attention: decode and prefill kernels priced by how they lay
    their CTAs on the SMs, each CTA a fixed cost plus its key blocks at a share of one SM's
    bandwidth (decode) or FLOP/s (prefill), alone on its SM or sharing it.
    """

    gpu: str  # catalog name the fit was made for
    gemm_compute_efficiency: float
    gemm_memory_efficiency: float
    gemm_overlap: float
    gemm_launch_s: float
    norm_memory_efficiency: float  # RMSNorm / LayerNorm (both per layer, and the final one)
    norm_launch_s: float
    rope_memory_efficiency: float  # rotary embedding of q and k
    rope_launch_s: float
    activation_memory_efficiency: float  # SwiGLU / GELU
    activation_launch_s: float
    residual_add_memory_efficiency: float
    residual_add_launch_s: float
    embedding_memory_efficiency: float  # the token embedding gather, once per step
    embedding_launch_s: float
    decode_attention_launch_s: float
    decode_attention_kernel: str  # the profiled attention kernels: DECODE_KERNEL_NAMES
    decode_cta_s: float  # fixed cost of a CTA alone on its SM
    decode_cta_bandwidth_share: float  # its streaming rate, a share of bandwidth / SMs
    decode_shared_cta_s: float  # the same for each of two CTAs sharing an SM
    decode_shared_cta_bandwidth_share: float
    decode_memory_efficiency: float  # all CTAs together: a share of bandwidth
    decode_overlap: float  # smooth-max exponent of the busiest SM and the whole stream
    decode_combine_launch_s: float  # the split-KV combine kernel
    decode_combine_per_split_s: float  # per (sequence, head, split) it merges
    prefill_attention_launch_s: float
    prefill_cta_s: float  # fixed cost of a prefill CTA alone on its SM
    prefill_cta_flops_share: float  # its key blocks' FLOPs: a share of peak FLOP/s / SMs
    prefill_copy_bandwidth_share: float  # its copies of new keys: a share of bandwidth / SMs
    prefill_shared_cta_s: float  # the same three for a CTA sharing its SM
    prefill_shared_cta_flops_share: float
    prefill_shared_copy_bandwidth_share: float
    prefill_combine_s: float  # the split-KV combine kernel after a split prefill
    prefill_tail_share: float  # past one wave: the share of the longest CTA after the spread
    source: str  # data fitted on, data held out, how (free text)

    def to_json(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def from_json(cls, path: Path, field: str = "cost_model.fit_path") -> KernelFit:
        source = str(path)
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise WorkbenchError(
                f"cannot read ({exc.strerror}); expected a kernel fit written by "
                "`workbench fit-cost-model`",
                source=source,
                field=field,
            ) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise WorkbenchError(f"malformed JSON ({exc})", source=source, field=field) from None
        return cls.from_dict(data, source, field)

    @classmethod
    def from_dict(cls, data: Any, source: str, field: str) -> KernelFit:
        if not isinstance(data, dict):
            raise WorkbenchError("expected a JSON object of fit parameters", source=source)
        names = [f.name for f in fields(cls)]
        for old, change in _OLD_FIELDS.items():
            if old in data:
                raise WorkbenchError(
                    f"a kernel fit from before {change} (it has {old}); refit it with "
                    "`workbench fit-cost-model`",
                    source=source, field=field,
                )  # fmt: skip
        missing = [n for n in names if n not in data]
        unknown = [k for k in data if k not in names]
        if missing or unknown:
            what = f"missing {', '.join(missing)}" if missing else f"unknown {', '.join(unknown)}"
            raise WorkbenchError(f"not a kernel fit ({what})", source=source, field=field)
        for name in names:
            value = data[name]
            is_text = name in TEXT_FIELDS
            ok = isinstance(value, str) if is_text else _positive_number(value)
            if not ok:
                kind = "a string" if is_text else "a positive number"
                raise WorkbenchError(f"{name}: expected {kind}, got {value!r}", source=source)
        kernel = data["decode_attention_kernel"]
        if kernel not in DECODE_KERNEL_NAMES:
            raise WorkbenchError(
                f"decode_attention_kernel: expected one of {', '.join(DECODE_KERNEL_NAMES)}, "
                f"got {kernel!r}",
                source=source,
            )
        return cls(**data)


def _positive_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def attention_of(fit: KernelFit) -> dict[str, Any]:
    """`fit`'s attention parameters and decode kernel, to give another GPU's fit."""
    names = (*ATTENTION_PARAMETERS, "decode_attention_kernel")
    return {name: getattr(fit, name) for name in names}
