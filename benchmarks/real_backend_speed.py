"""Real backend speed: our engine vs `transformers.generate` on the same checkpoint (CPU or CUDA).

Opt-in. Two measurements (greedy, fixed output lengths, EOS ignored by both sides):
- batch 1: one request at a time, tokens/s over the generated tokens;
- 32 concurrent requests whose prompt and output lengths spread like the shipped
  Vicuna response lengths (data/seqsched, scaled down by --scale): our continuous
  batching (all 32 arrive at t=0) vs `generate` on one padded batch of 32, which must
  run to the longest output; aggregate useful tokens/s.

    python benchmarks/real_backend_speed.py CHECKPOINT_FOLDER [--threads 2] [--scale 8]
        [--kernels reference] [--device cuda --dtype bf16]

On CUDA both sides run in the same dtype; each side runs once untimed first (Triton's
compilation and cuBLAS's handles stay out of the numbers; the CPU figures were measured
without such a run) and a timed run ends on a device synchronisation.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from real_backend.engine import RealEngine, ServeOptions
from real_backend.model import Transformer
from real_backend.model.loading import load_checkpoint
from real_backend.prompts import synthetic_prompts
from real_backend.serve import DTYPES
from workbench.scenario.system import VanillaDecoderConfig
from workbench.scheduling.continuous import ContinuousBatching
from workbench.workload.requests import Workload

LENGTHS = (
    Path(__file__).resolve().parent.parent / "data" / "seqsched" / "alpaca-val-10k-length.json"
)
BLOCK = 16


def spread_lengths(n: int, scale: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Output lengths from real Vicuna responses (scaled down); prompts ~ a third of them."""
    records = json.loads(LENGTHS.read_text())
    real = np.array([r["L_t0.0"] for r in records])
    rng = np.random.default_rng(seed)
    outputs = np.maximum(1, rng.choice(real, n) // scale)
    prompts = np.maximum(4, rng.choice(real, n) // (3 * scale))
    return prompts.astype(np.int64), outputs.astype(np.int64)


def ours(model: Transformer, prompts: list[list[int]], outputs: np.ndarray, batch: int) -> float:
    """Seconds for our engine to serve the requests, `batch` at most at a time (the model is
    loaded once beforehand, like transformers' side)."""
    longest = max(len(p) for p in prompts) + int(outputs.max())
    num_blocks = batch * (-(-longest // BLOCK)) * 2 + 8
    policy = ContinuousBatching(
        num_blocks=num_blocks, block_size=BLOCK, max_batch_size=batch, max_batched_tokens=8192
    )
    workload = Workload(
        arrival_s=np.zeros(len(prompts)),
        prompt_tokens=np.array([len(p) for p in prompts]),
        output_tokens=outputs,
    )
    options = ServeOptions(VanillaDecoderConfig(kind="vanilla"), seed=0)
    engine = RealEngine(model, model.new_cache(num_blocks, BLOCK), policy, options)
    start = time.perf_counter()
    engine.serve(workload, prompts)
    synchronize()
    return time.perf_counter() - start


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def hf_generate(hf, prompts: list[list[int]], outputs: np.ndarray, pad_id: int) -> float:
    """Seconds for `generate` on one left-padded batch run to the longest output."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts], device=hf.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=hf.device)
    n = int(outputs.max())
    config = transformers.GenerationConfig(
        max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=pad_id
    )
    start = time.perf_counter()
    with torch.inference_mode():
        hf.generate(ids, attention_mask=mask, generation_config=config)
    synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scale", type=int, default=8, help="divide real lengths by this")
    parser.add_argument("--single", type=int, default=3, help="requests for the batch-1 case")
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument(
        "--kernels", choices=["auto", "triton", "grouped", "reference"], default="auto",
        help="our engine's attention kernels (auto: grouped on CPU, Triton on CUDA)",
    )  # fmt: skip
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = DTYPES[args.dtype]
    hf = transformers.AutoModelForCausalLM.from_pretrained(args.checkpoint, dtype=dtype)
    hf = hf.to(args.device).eval()
    model = load_checkpoint(args.checkpoint, dtype=dtype, device=args.device)
    model.use_kernels(args.kernels)
    print(f"device {args.device} ({_device_name(args.device)}), dtype {args.dtype}, "
          f"kernels {model.kernel_set().name}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}")  # fmt: skip
    vocab = hf.config.vocab_size
    prompt_lens, output_lens = spread_lengths(32, args.scale, seed=0)
    prompts = synthetic_prompts(prompt_lens, vocab, seed=0)

    single = slice(0, args.single)
    warm = args.device == "cuda"  # one untimed run first on CUDA
    tokens_1 = int(output_lens[single].sum())
    t_ours_1 = timed(
        args.repeat, lambda: ours(model, prompts[single], output_lens[single], 1), warm
    )
    t_hf_1 = timed(
        args.repeat,
        lambda: sum(
            hf_generate(hf, [p], output_lens[i : i + 1], 0) for i, p in enumerate(prompts[single])
        ),
        warm,
    )
    report("batch 1", tokens_1, t_ours_1, t_hf_1)
    useful = int(output_lens.sum())
    t_ours = timed(args.repeat, lambda: ours(model, prompts, output_lens, 32), warm)
    t_hf = timed(args.repeat, lambda: hf_generate(hf, prompts, output_lens, 0), warm)
    report(f"32 concurrent (longest output {int(output_lens.max())})", useful, t_ours, t_hf)


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def timed(repeat: int, run, warm: bool) -> list[float]:
    if warm:
        run()  # untimed on CUDA: kernel compilation, library handles, allocator growth
    return sorted(run() for _ in range(repeat))


def report(label: str, tokens: int, ours_s: list[float], hf_s: list[float]) -> None:
    """Median tokens/s of each side, its range, and the ratio of medians."""
    med_ours, med_hf = ours_s[len(ours_s) // 2], hf_s[len(hf_s) // 2]

    def rate(times: list[float], median: float) -> str:
        return f"{tokens / median:.1f} tok/s [{tokens / times[-1]:.0f}-{tokens / times[0]:.0f}]"

    print(
        f"{label}: {tokens} tokens, median of {len(ours_s)}  ours {rate(ours_s, med_ours)}  "
        f"transformers {rate(hf_s, med_hf)}  ratio {med_hf / med_ours:.2f}x"
    )


if __name__ == "__main__":
    main()
