"""Serve a scenario's workload on a real model: the `real` backend of `workbench run`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import real_backend.length_predictor.predictor  # noqa: F401  (registers the learned predictor)
from kernels.dispatch import KernelChoice, KernelUnavailable
from real_backend.calibration.probe_engine import ProfilingEngine, probe_points
from real_backend.decoders.factory import build_decoder
from real_backend.engine import RealEngine, ServeOptions
from real_backend.kv_cache import PagedKVCache
from real_backend.model.config import ModelArgs
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import Transformer
from real_backend.outputs import output_records, output_tokenizer
from real_backend.preflight import check_real_scenario, checkpoint_folder
from real_backend.prompts import request_prompts
from workbench.errors import WorkbenchError
from workbench.records import RunRecords
from workbench.scenario.decoders import (
    PIPELINE_DECODER_KINDS,
    AparDecoderConfig,
    DecoderConfig,
    SamplingConfig,
    VanillaDecoderConfig,
    draft_of,
    lookahead_slots,
)
from workbench.scenario.kv_cache import KVCacheConfig
from workbench.scenario.scenario import Scenario
from workbench.scenario.seqsched import SequenceSchedulingConfig
from workbench.scenario.system import ContinuousBatchingConfig, SchedulerConfig
from workbench.scheduling.blocks import blocks_for
from workbench.scheduling.factory import build_policy, check_feasible
from workbench.scheduling.length_predictors import with_predictions
from workbench.scheduling.seqsched_rules import VBS_BATCH_SIZES
from workbench.scheduling.swap_space import swap_info
from workbench.workload.generate import workload_for
from workbench.workload.requests import Workload

GENERATION_CONFIG = "generation_config.json"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def serve_scenario(scenario: Scenario, progress=None, measure_steps: bool = False) -> RunRecords:
    """measure_steps: keep each step's work and wall time in `records.served_steps` (the
    calibration's points), for `--backend both` to price the real run's own steps."""
    check_real_scenario(scenario)
    if scenario.decoder.kind in PIPELINE_DECODER_KINDS:  # stage processes: its own server
        from real_backend.pipeline.serve import serve_pipeline

        return serve_pipeline(scenario, progress)
    if scenario.hardware.pipeline_parallel > 1:
        raise WorkbenchError(
            f"decoder {scenario.decoder.kind!r} runs on one device; pipeline stages run decoder "
            "kind pipeline (plain) or pipeinfer (speculative)",
            field="hardware.pipeline_parallel",
        )
    folder = checkpoint_folder(scenario)
    device = pick_device(scenario.hardware.gpu)
    # Everything that can refuse the configuration comes before any model runs.
    output_tokenizer(folder)  # the answers' text is written with it after serving
    eos = eos_token_ids(folder)
    stops = stop_token_ids(folder, scenario.workload.stop_texts)
    if isinstance(scenario.decoder, AparDecoderConfig):
        from real_backend.decoders.apar import fork_tokens

        fork_tokens(folder, scenario.decoder)  # a model without them is refused up front
        build_policy(scenario.scheduler, 1, branching=True)  # continuous batching only
    workload = workload_for(scenario)
    check_context(workload, ModelArgs.from_folder(folder), scenario)
    num_blocks = real_kv_blocks(scenario, workload)
    slots = lookahead_slots(scenario.decoder)
    check_feasible(
        scenario.scheduler,
        num_blocks,
        int(workload.prompt_tokens.max()),
        int((workload.prompt_tokens + workload.output_tokens).max()),
        source=None,
        lookahead_slots=slots,
    )
    workload = with_predictions(workload, scenario.scheduler, scenario.seed, folder)
    model = load_checkpoint(folder, dtype_of(scenario.model.dtype), device)
    kernels = use_kernels(model, scenario.model.kernels)
    prompts = request_prompts(workload, model.args.vocab_size, scenario.seed, eos)
    cache = model.new_cache(num_blocks, scenario.scheduler.kv_cache.block_size)
    options = ServeOptions(
        sampling=sampling_of(scenario.decoder),
        seed=scenario.seed,
        eos_token_ids=eos,
        ignore_eos=scenario.workload.ignore_eos,
        stop_token_ids=stops,
    )
    decoder = build_decoder(scenario.decoder, model, cache, draft_folder(scenario), folder)
    assert decoder.lookahead_slots == slots, "the feasibility check counted other slots"
    branching = isinstance(scenario.decoder, AparDecoderConfig)  # APAR requests fork
    # vLLM swaps requests with several live branches; not with a draft, whose cache would move too.
    swap = swap_blocks(scenario.scheduler.kv_cache, cache) if branching and slots == 0 else 0
    policy = build_policy(scenario.scheduler, num_blocks, slots, branching, swap)
    engine_class = ProfilingEngine if measure_steps else RealEngine
    engine = engine_class(model, cache, policy, options, decoder)
    records, outputs = engine.serve(workload, prompts, progress)
    if isinstance(engine, ProfilingEngine):
        records.served_steps = probe_points("served", engine.shapes, records.steps)
        records.served_drafts = [d for d in engine.drafts if d.forwards] or None
    records.outputs = output_records(outputs, folder)
    records.info.update(run_info(folder, device, scenario.model.dtype, num_blocks))
    records.info["kernels"] = kernels
    records.info["linear"] = model.linear_impl
    if branching:
        records.info.update(swap_info([policy]))
    if workload.category is not None:
        records.requests.category = workload.category
    return records


def swap_blocks(kv: KVCacheConfig, cache: PagedKVCache) -> int:
    """The host memory `kv.swap_space_gib` in blocks of `cache`."""
    return int(kv.swap_space_gib * (1 << 30) // cache.block_bytes)


def check_context(workload: Workload, args: ModelArgs, scenario: Scenario) -> None:
    """Refuse a request whose prompt + output the model has no positions for."""
    limit = args.context_tokens
    prompts, totals = workload.prompt_tokens, workload.prompt_tokens + workload.output_tokens
    where = f"the model's context is {limit} tokens ({context_origin(args)})"
    longest = int(np.argmax(prompts))
    if prompts[longest] > limit:
        field = "workload.prompts" if scenario.workload.prompts else "workload.prompt_tokens"
        raise WorkbenchError(
            f"request {longest} has a prompt of {int(prompts[longest])} tokens but {where}",
            field=field,
        )
    longest = int(np.argmax(totals))
    if totals[longest] > limit:
        raise WorkbenchError(
            f"request {longest} needs {int(prompts[longest])} prompt + "
            f"{int(workload.output_tokens[longest])} output = {int(totals[longest])} tokens but "
            f"{where}; shorten the outputs",
            field="workload.output_tokens",
        )


def context_origin(args: ModelArgs) -> str:
    """Where the context limit comes from, for error messages."""
    text = f"max_position_embeddings {args.max_position_embeddings}"
    if args.context_tokens != args.max_position_embeddings:
        text += f" × {args.rope_scaling['rope_type']} RoPE scaling factor"
        text += f" {args.rope_scaling['factor']:g}"
    return text


def sampling_of(decoder: DecoderConfig) -> SamplingConfig:
    """How prefill emissions pick tokens: the decoder's sampling, greedy for lookahead."""
    return decoder if isinstance(decoder, SamplingConfig) else VanillaDecoderConfig(kind="vanilla")


def draft_folder(scenario: Scenario) -> Path | None:
    """The draft checkpoint folder of a speculative (or speculating APAR) decoder; the runner
    resolves zoo names. Pipeline decoders load theirs on the head stage."""
    draft = draft_of(scenario.decoder)
    pipeline = scenario.decoder.kind in PIPELINE_DECODER_KINDS
    if draft is None or draft.config_path is None or pipeline:
        return None
    path = draft.config_path
    return path if path.is_dir() else path.parent


def use_kernels(model: Transformer, choice: KernelChoice) -> str:
    """Select the model's kernels now, so an impossible choice fails before serving; returns
    the implementation that runs ("triton", "grouped" or "reference")."""
    try:
        return model.use_kernels(choice).name
    except KernelUnavailable as e:
        raise WorkbenchError(str(e), field="model.kernels") from e


def pick_device(gpu: str) -> str:
    """`cpu` for `hardware.gpu: cpu`, else CUDA, which must be there: running a GPU
    scenario on the CPU instead would change what is measured."""
    if gpu == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        raise WorkbenchError(
            f"hardware.gpu is {gpu!r} but this machine has no CUDA device; "
            "set hardware.gpu: cpu to run the real backend on the CPU",
            field="hardware.gpu",
        )
    return "cuda"


def dtype_of(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise WorkbenchError(
            f"the real backend runs fp32, bf16 or fp16, not {name}", field="model.dtype"
        )
    return DTYPES[name]


def real_kv_blocks(scenario: Scenario, workload: Workload) -> int:
    """The scenario's block count, else room for a full batch of the longest request: its
    cached tokens (prompt + output − 1: the last one is never written) plus the decoder's
    lookahead slots."""
    sched = scenario.scheduler
    if sched.kv_cache.num_blocks is not None:
        return sched.kv_cache.num_blocks
    batch = largest_batch(sched)
    longest = int((workload.prompt_tokens + workload.output_tokens).max())
    held = longest - 1 + lookahead_slots(scenario.decoder)
    # 2% over the need: continuous batching keeps a 1% admission watermark.
    return int(batch * blocks_for(held, sched.kv_cache.block_size) * 1.02) + 1


def largest_batch(sched: SchedulerConfig) -> int:
    """The most sequences a batch of this scheduler can hold."""
    if isinstance(sched, ContinuousBatchingConfig):
        return sched.max_batch_size
    if isinstance(sched, SequenceSchedulingConfig):  # VBS batches short buckets bigger
        vbs = max(VBS_BATCH_SIZES.values()) if sched.vbs else 0
        return min(sched.group_size, max(vbs, sched.batch_size))
    return sched.batch_size


def stop_token_ids(folder: Path, texts: list[str]) -> frozenset[int]:
    """Every token of the model's vocabulary whose text contains one of `texts`."""
    if not texts:
        return frozenset()
    from workbench.workload.prompt_tokenizer import TOKENIZER_FILE, load_prompt_tokenizer

    if not (folder / TOKENIZER_FILE).is_file():
        raise WorkbenchError(
            f"no {TOKENIZER_FILE} in {folder}: needed to find the tokens of the stop texts",
            field="workload.stop_texts",
        )
    tokenizer = load_prompt_tokenizer(folder, field="workload.stop_texts").tokenizer
    found = frozenset(
        i
        for i in range(tokenizer.get_vocab_size())
        if any(text in tokenizer.decode([i], skip_special_tokens=False) for text in texts)
    )
    if not found:
        raise WorkbenchError(
            f"no token of the model's vocabulary contains any of {texts!r}",
            field="workload.stop_texts",
        )
    return found


def eos_token_ids(folder: Path) -> frozenset[int]:
    """Every id that ends a response, as transformers' `generate` reads them: the
    `eos_token_id` (an int or a list) of generation_config.json where the checkpoint has one
    (without that key there: none), else config.json's."""
    generation = folder / GENERATION_CONFIG
    path = generation if generation.is_file() else folder / "config.json"
    try:
        eos = json.loads(path.read_text()).get("eos_token_id")
    except json.JSONDecodeError as exc:
        raise WorkbenchError(f"invalid JSON: {exc}", source=str(path)) from None
    if eos is None:
        return frozenset()
    ids = [eos] if isinstance(eos, int) else eos
    if not isinstance(ids, list) or not all(isinstance(i, int) and i >= 0 for i in ids):
        raise WorkbenchError(
            f"expected a token id or a list of them, got {eos!r}",
            source=str(path),
            field="eos_token_id",
        )
    return frozenset(ids)


def run_info(folder: Path, device: str, dtype: str, num_blocks: int) -> dict[str, str]:
    info = {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "dtype": dtype,
        "torch": torch.__version__,
        "checkpoint": str(folder),
        "kv_blocks_per_replica": str(num_blocks),
    }
    card = folder.parent / "card.json"
    if card.is_file():
        info["model_card"] = card.read_text()
    return info
