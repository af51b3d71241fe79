"""Run under torchrun by test_pipeline_torchrun: rank 0 decodes a saved random model over
the torchrun ranks (the stages a scenario would use there), plainly and with PipeInfer on
random drafts, and compares with single-process greedy decoding. Exit code 0: equal."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from decoder_models import random_model
from pipeline_helpers import ScriptedDrafter, decode, greedy, stage_plan

from real_backend.pipeline.serve import running_pipeline
from real_backend.pipeline.torchrun_main import run_ranks
from workbench.scenario.decoders import PipeInferDecoderConfig, PipelineDecoderConfig

PROMPTS, OUTPUTS = [[3, 1, 4, 1, 5]], [12]


def head(checkpoint: Path, layers: int, seed: int) -> int:
    world = int(os.environ["WORLD_SIZE"])  # set by torchrun
    model = random_model(64, layers=layers, seed=seed)
    expected = [greedy(model, PROMPTS[0], OUTPUTS[0])]
    drafter = ScriptedDrafter({tuple(PROMPTS[0]): PROMPTS[0] + expected[0]}, "random", 64)
    configs = [
        (PipelineDecoderConfig(kind="pipeline"), None),
        (PipeInferDecoderConfig(kind="pipeinfer", max_draft_tokens=4), drafter),
    ]
    with running_pipeline(stage_plan(checkpoint, layers, world)) as pipeline_head:
        emitted = [decode(pipeline_head, c, PROMPTS, OUTPUTS, d)[0] for c, d in configs]
    ok = all(e == expected for e in emitted)
    print(f"torchrun, {world} stages:", "equal to greedy" if ok else f"DIFFERENT {emitted}")
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(1)
    folder, layers, seed = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    run_ranks(lambda: head(folder, layers, seed))
