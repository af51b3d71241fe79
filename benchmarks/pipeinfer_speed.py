"""PipeInfer vs synchronous speculative decoding vs plain pipelining, real stages, batch 1.

Opt-in. One pipeline session (the same stage processes for every method); each request of
`scenarios/pipeinfer_real.yaml`'s workload is decoded by the methods of its sweep in turn
(PipeInfer as released, PipeInfer continuing its chain after commits, synchronous
speculative, plain pipelined; the order rotates per request), so the methods share the
machine's conditions; --repeat repeats the whole round. Reports per method: output
tokens/s (tokens over each request's service time, summed), mean TTFT and ITL, wasted
stage time, runs launched and cancelled, the ratios to the baselines, and whether all
methods emitted the same tokens.

    python benchmarks/pipeinfer_speed.py [--zoo small] [--zoo-dir DIR] [--stages 2]
        [--latency-ms 5] [--requests 6] [--new-tokens 64] [--repeat 1] [--json out.json]
        [--p-accept P] [--p-split P] [--max-draft-tokens N] [--max-branches N]
        [--max-runs-in-flight N]
        (drafting options of both speculative methods)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from real_backend.model.config import ModelArgs
from real_backend.pipeline.decoding import PipelineDecoding
from real_backend.pipeline.run_log import RunLog
from real_backend.pipeline.serve import (
    StagePlan,
    default_threads,
    load_drafter,
    pipeline_kv_blocks,
    running_pipeline,
    serve_requests,
)
from real_backend.pipeline.stage_model import layer_ranges
from real_backend.preflight import checkpoint_folder
from real_backend.prompts import request_prompts
from real_backend.serve import eos_token_ids
from workbench.metrics import summarize
from workbench.runner import with_model_source
from workbench.scenario.loader import load_scenario
from workbench.sweep import expand
from workbench.workload.generate import workload_for
from workbench.workload.requests import Workload

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pipeinfer_real.yaml"
METHODS = ("pipeinfer", "pipeinfer (continue)", "synchronous speculative", "pipeline")
DRAFTING_OPTIONS = (
    "p_accept", "p_split", "max_draft_tokens", "max_branches", "max_runs_in_flight",
)  # fmt: skip


def main() -> None:
    args = parse_args()
    overrides = [
        f"model.zoo={args.zoo}", f"hardware.pipeline_parallel={args.stages}",
        f"workload.num_requests={args.requests}", f"workload.output_tokens.value={args.new_tokens}",
    ] + ([f"model.zoo_dir={args.zoo_dir}"] if args.zoo_dir else [])  # fmt: skip
    base = load_scenario(SCENARIO, overrides=overrides)
    points = [with_model_source(p.scenario) for p in expand(base, source=str(SCENARIO))]
    decoders = [_adjusted(p.decoder, args) for p in points]
    configs = dict(zip(METHODS, decoders, strict=True))
    scenario = points[0]
    folder = checkpoint_folder(scenario)
    model_args = ModelArgs.from_folder(folder)
    workload = workload_for(scenario)
    prompts = request_prompts(workload, model_args.vocab_size, scenario.seed, eos_token_ids(folder))
    options = configs["pipeinfer"].pipeline
    plan = StagePlan(
        checkpoint=folder, dtype="float32", kernels="reference",
        ranges=layer_ranges(model_args.n_layers, args.stages, options.layer_split),
        num_blocks=pipeline_kv_blocks(scenario, workload), block_size=16, options=options,
        threads=default_threads(args.stages),
    )  # fmt: skip
    totals: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    outputs: dict[str, list[int]] = {}
    with running_pipeline(plan) as head:
        drafter = load_drafter(scenario, head, model_args, plan)
        for round_ in range(args.repeat):
            for rid in range(len(prompts)):
                shift = (rid + round_) % len(METHODS)
                for method in METHODS[shift:] + METHODS[:shift]:
                    summary, tokens = _one(
                        head, configs[method], drafter, prompts[rid], workload, rid
                    )
                    outputs.setdefault(f"{rid}/{method}", tokens)
                    for key, value in summary.items():
                        totals[method][key].append(value)
    report = _report(totals, outputs, len(prompts))
    report["setting"] = {
        "zoo": args.zoo, "stages": args.stages, "layers": [[r.start, r.stop] for r in plan.ranges],
        "latency_ms": args.latency_ms, "requests": len(prompts), "new_tokens": args.new_tokens,
        "repeat": args.repeat, "threads_per_stage": plan.threads,
        "decoders": {m: c.model_dump(mode="json") for m, c in configs.items()},
    }  # fmt: skip
    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def _one(head, config, drafter, prompt, workload, rid) -> tuple[dict, list[int]]:
    """One request by one method; its summary (the workbench's metrics) and its tokens."""
    one = Workload(np.zeros(1), np.array([len(prompt)]), workload.output_tokens[rid : rid + 1])
    log = RunLog(head.stages, time.perf_counter())
    decoding = PipelineDecoding(
        head, config, drafter if config.kind == "pipeinfer" else None, log, time.perf_counter
    )
    tokens: list[int] = []
    generate = decoding.generate

    def keep_tokens(*a, **k):
        commits = generate(*a, **k)
        tokens.extend(t for c in commits for t in c.tokens)
        return commits

    decoding.generate = keep_tokens
    records = serve_requests(head, decoding, one, [prompt], frozenset(), time.perf_counter)
    records.info["pipeline_runs"] = log.info()
    s = summarize(records)
    keys = {
        "tokens": "total_output_tokens", "seconds": "duration", "ttft_ms": "mean_ttft_ms",
        "itl_ms": "mean_itl_ms", "itl_n": "n_itl", "launched": "pipeline_runs_launched",
        "cancelled": "pipeline_runs_cancelled", "busy_s": "pipeline_stage_busy_s",
        "wasted_whole_s": "pipeline_wasted_whole_s",
        "wasted_partial_s": "pipeline_wasted_partial_s",
        "mean_in_flight": "pipeline_mean_runs_in_flight", "acceptance": "acceptance_rate",
        "tokens_per_step": "mean_tokens_per_decode_step",
    }  # fmt: skip
    return {ours: s.get(theirs) for ours, theirs in keys.items()}, tokens


def _report(totals, outputs, requests) -> dict:
    methods = {}
    for method, t in totals.items():
        itl_n = np.asarray(t["itl_n"], dtype=float)
        methods[method] = {
            "tokens_per_s": sum(t["tokens"]) / sum(t["seconds"]),
            "mean_ttft_ms": float(np.mean(t["ttft_ms"])),
            "mean_itl_ms": float(np.dot(t["itl_ms"], itl_n) / itl_n.sum()),
            "runs_launched": int(sum(t["launched"])),
            "runs_cancelled": int(sum(t["cancelled"])),
            "stage_busy_s": float(sum(t["busy_s"])),
            "wasted_whole_s": float(sum(t["wasted_whole_s"])),
            "wasted_partial_s": float(sum(t["wasted_partial_s"])),
            "mean_runs_in_flight": float(np.mean(t["mean_in_flight"])),
            "acceptance_rate": _mean(t["acceptance"]),
            "tokens_per_decode_step": _mean(t["tokens_per_step"]),
        }
    speed = {m: v["tokens_per_s"] for m, v in methods.items()}
    same = all(
        outputs[f"{r}/{m}"] == outputs[f"{r}/pipeline"] for r in range(requests) for m in METHODS
    )
    return {
        "methods": methods,
        "pipeinfer_over_synchronous": speed["pipeinfer"] / speed["synchronous speculative"],
        "pipeinfer_over_pipeline": speed["pipeinfer"] / speed["pipeline"],
        "continue_over_synchronous": speed["pipeinfer (continue)"]
        / speed["synchronous speculative"],
        "continue_over_pipeline": speed["pipeinfer (continue)"] / speed["pipeline"],
        "synchronous_over_pipeline": speed["synchronous speculative"] / speed["pipeline"],
        "identical_outputs": same,
    }


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def _adjusted(decoder, args: argparse.Namespace):
    """The scenario's decoder with this run's link latency and drafting options."""
    link = {"latency_ms": args.latency_ms} if args.latency_ms > 0 else None
    fields = {"pipeline": {**decoder.pipeline.model_dump(), "emulated_link": link}}
    if decoder.kind == "pipeinfer":
        for name in DRAFTING_OPTIONS:
            if getattr(args, name) is not None:
                fields[name] = getattr(args, name)
    return decoder.model_validate({**decoder.model_dump(), **fields})


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--zoo", default="small")
    p.add_argument("--zoo-dir", default=None)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument(
        "--latency-ms", type=float, default=5.0, help="emulated one-way link latency per hop"
    )
    p.add_argument("--requests", type=int, default=6)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", default=None)
    p.add_argument("--p-accept", type=float, default=None)
    p.add_argument("--p-split", type=float, default=None)
    p.add_argument("--max-draft-tokens", type=int, default=None)
    p.add_argument("--max-branches", type=int, default=None)
    p.add_argument("--max-runs-in-flight", type=int, default=None)
    return p.parse_args()


if __name__ == "__main__":
    main()
