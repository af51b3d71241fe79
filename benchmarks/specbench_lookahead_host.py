"""Spec-Bench's lookahead implementation against its HF eager baseline: the host time a step
spends outside the transformer layers (opt-in; runs Spec-Bench's own code on CPU).

Spec-Bench's lookahead row (W7 N5 G7, `USE_FLASH=0`) runs LADE's Jacobi search
(`model/lade/` in hemingkx/Spec-Bench) over Hugging Face `transformers` 4.37.1; its baseline
is the same library's greedy `generate`. On a GPU both are host-bound at batch 1, so what
separates their steps beyond the kernels is host work: LADE's n-gram pool, the lookahead
inputs and positions, the multi-level attention mask, reading back every position's argmax,
and moving each accepted token's keys and values into place layer by layer. This script
measures that work on the CPU it runs on, per step: hooks time the layers and the LM head
(compute, which the simulator prices as kernels); the rest, from one forward's last layer
to the next forward's first, is outside them (the prompt's forward is left out). A least-squares fit
over every step gives the outside time by layers and accepted tokens, evaluated at
Spec-Bench's rows.

The model is the zoo's `small` (trained on the standard library's code, so that LADE's
n-gram pool fills and its guesses hit as on real text) made as deep as a Vicuna by
pass-through layers: copies of its last layer with the attention output and MLP down
projections zeroed, which run every op of a layer and add nothing to the residual stream,
so the deep model's greedy tokens are the 4-layer model's (checked: LADE's equal HF's).

It needs Spec-Bench's checkout and its pinned `transformers`, apart from the project's
(whose `tokenizers` encodes the prompts first: the pinned one cannot read the zoo's file):

    git clone https://github.com/hemingkx/Spec-Bench /tmp/specbench   # any commit with model/lade
    pip install --target /tmp/tf437 --no-deps transformers==4.37.1 tokenizers==0.15.2 \\
        huggingface_hub==0.20.3
    python benchmarks/specbench_lookahead_host.py encode --out /tmp/lade_prompts.json
    PYTHONPATH=/tmp/tf437 python benchmarks/specbench_lookahead_host.py measure \\
        --specbench /tmp/specbench --prompts /tmp/lade_prompts.json --layers 32 40 60

Spec-Bench's code switches LADE on through its own `USE_LADE` environment variable and
replaces `GenerationMixin.greedy_search` process-wide (its `augment_all`); this script sets
that variable around each call, as Spec-Bench's `eval.sh` does per run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ZOO_SMALL = Path.home() / ".cache" / "decoding-workbench" / "zoo" / "small" / "target"
METHODS = ("HF greedy", "LADE W7 N5 G7")
FILL_STEPS = 2  # LADE's first decode steps fill its lookahead levels, without pool or guesses
PROMPT_MODULES = ("textwrap", "json/decoder", "csv", "shlex", "fractions", "heapq")  # stdlib


ROWS = {  # Spec-Bench's lookahead rows: (layers of the model, tokens per step)
    "vicuna-7b on the rtx3090": (32, 1.65),
    "vicuna-13b on the a100": (40, 1.63),
    "vicuna-33b on the a100": (60, 1.61),
}


@dataclass(frozen=True)
class Step:
    """One decode step: its layers' time, its LM head's (compute, which a GPU's kernels
    price), the host time outside both, the tokens it fed per sequence and the tokens it
    accepted beyond the first."""

    layers: int
    inside_ms: float
    head_ms: float
    outside_ms: float
    width: int
    hits: int


class ForwardClock:
    """Times each forward's decoder layers (hooks on the first layer's input norm and the
    last layer's MLP: LADE calls the layers' `forward` directly, which skips hooks on the
    layers themselves, while their submodules are called as modules in both paths) and its
    LM head."""

    def __init__(self, model: Any) -> None:
        layers = model.model.layers
        self.count = len(layers)
        self.times: dict[str, list[float]] = {k: [] for k in ("start", "end", "head", "headed")}
        self.widths: list[int] = []
        self._hooks = (
            layers[0].input_layernorm.register_forward_pre_hook(self._start),
            layers[-1].mlp.register_forward_hook(self._mark("end")),
            model.lm_head.register_forward_pre_hook(self._mark("head")),
            model.lm_head.register_forward_hook(self._mark("headed")),
        )

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()

    def _start(self, _module: Any, args: tuple[Any, ...]) -> None:
        self.widths.append(int(args[0].shape[1]))  # hidden states: (B, T, C)
        self.times["start"].append(time.perf_counter())

    def _mark(self, event: str) -> Any:
        def hook(*_: Any) -> None:
            self.times[event].append(time.perf_counter())

        return hook

    def steps(self, emitted: list[int]) -> list[Step]:
        """Forward i emitted `emitted[i]` tokens. Each decode step after the warm-up (the
        prompt's forward and `FILL_STEPS` more) but the last: its layers, its LM head, and
        the rest until the next forward's first layer."""
        t = {k: 1e3 * torch.tensor(v, dtype=torch.float64) for k, v in self.times.items()}
        counts = {len(emitted), *(len(v) for v in t.values())}
        if len(counts) != 1:
            raise RuntimeError(f"{len(t['start'])} forwards timed, {len(emitted)} counted")
        head = t["headed"] - t["head"]
        between = t["start"][1:] - t["end"][:-1] - head[:-1]
        inside = t["end"] - t["start"]
        return [
            Step(
                self.count,
                float(inside[i]),
                float(head[i]),
                float(between[i]),
                self.widths[i],
                emitted[i] - 1,
            )
            for i in range(1 + FILL_STEPS, len(emitted) - 1)
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    encode = commands.add_parser("encode", help="prompts as the zoo model's token ids")
    encode.add_argument("--zoo", type=Path, default=ZOO_SMALL, help="the model's folder")
    encode.add_argument("--prompt-tokens", type=int, default=300)
    encode.add_argument("--out", type=Path, required=True)
    run = commands.add_parser("measure", help="time both methods (transformers 4.37.1)")
    run.add_argument("--specbench", type=Path, required=True, help="Spec-Bench checkout")
    run.add_argument("--prompts", type=Path, required=True, help="from `encode`")
    run.add_argument("--zoo", type=Path, default=ZOO_SMALL, help="the model's folder")
    run.add_argument("--layers", type=int, nargs="+", default=[32, 40, 60])
    run.add_argument("--new-tokens", type=int, default=160)
    args = parser.parse_args()
    if args.command == "encode":
        return encode_prompts(args.zoo, args.prompt_tokens, args.out)
    return measure_all(args)


def encode_prompts(zoo: Path, tokens: int, out: Path) -> int:
    """The opening `tokens` tokens of each of `PROMPT_MODULES`' source, as token ids."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(zoo / "tokenizer.json"))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prompts = []
    for module in PROMPT_MODULES:
        text = (stdlib / f"{module}.py").read_text(encoding="utf-8")
        prompts.append(tokenizer.encode(text).ids[:tokens])
    out.write_text(json.dumps(prompts))
    print(f"{len(prompts)} prompts of {tokens} tokens -> {out}")
    return 0


def measure_all(args: argparse.Namespace) -> int:
    transformers = importlib.import_module("transformers")
    if transformers.__version__ != "4.37.1":
        print(f"error: needs Spec-Bench's transformers 4.37.1, found {transformers.__version__}")
        return 2
    sys.path.insert(0, str(args.specbench))
    lade = importlib.import_module("model.lade.utils")
    lade.augment_all()
    lade.config_lade(LEVEL=5, WINDOW_SIZE=7, GUESS_SET_SIZE=7, DEBUG=0, USE_FLASH=0)  # eval.sh's
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, one thread\n")
    prompts = [torch.tensor([ids]) for ids in json.loads(args.prompts.read_text())]
    runs: dict[str, list[Step]] = {method: [] for method in METHODS}
    for layers in args.layers:
        model = deepened(transformers, args.zoo, layers)
        for method, steps in measure(model, prompts, args.new_tokens).items():
            runs[method] += steps
    print(per_layers_table(runs))
    print(by_hits_table(runs[METHODS[1]]))
    print(fitted_table(runs))
    return 0


def deepened(transformers: Any, zoo: Path, layers: int) -> Any:
    """The zoo model with pass-through layers appended up to `layers` (see the module's
    docstring): the same greedy tokens, a deep model's ops."""
    # Eager attention: transformers 4.37.1 uses SDPA only from torch 2.1.1, and Spec-Bench's
    # leaderboard ran torch 2.0.1, so both methods there ran eager attention with a 4D mask.
    model = transformers.LlamaForCausalLM.from_pretrained(zoo, attn_implementation="eager").eval()
    trained = model.model.layers
    config = model.config
    config.num_hidden_layers = layers
    deep = transformers.LlamaForCausalLM._from_config(config, attn_implementation="eager").eval()
    deep.load_state_dict(model.state_dict(), strict=False)  # the trained layers, norm, embedding
    for index in range(len(trained), layers):
        layer = deep.model.layers[index]
        layer.load_state_dict(trained[-1].state_dict())
        torch.nn.init.zeros_(layer.self_attn.o_proj.weight)
        torch.nn.init.zeros_(layer.mlp.down_proj.weight)
    return deep


def measure(model: Any, prompts: list[torch.Tensor], new_tokens: int) -> dict[str, list[Step]]:
    """Both methods on each prompt in turn: every decode step; LADE's tokens checked
    against HF greedy's (LADE is lossless)."""
    steps: dict[str, list[Step]] = {method: [] for method in METHODS}
    for prompt in prompts:
        outputs = []
        for method in METHODS:
            clock = ForwardClock(model)
            tokens, emitted = generate(model, prompt, new_tokens, method.startswith("LADE"))
            clock.remove()
            steps[method] += clock.steps(emitted)
            outputs.append(tokens)
        greedy, lookahead = outputs
        if lookahead[: len(greedy)] != greedy:  # LADE may overshoot the limit in its last step
            raise RuntimeError("LADE's tokens differ from HF greedy's")
    return steps


def per_layers_table(runs: dict[str, list[Step]]) -> str:
    lines = [
        "| layers | method | steps | tokens per forward | tokens per step "
        "| layers ms (median) | LM head ms (median) | outside ms (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for layers in sorted({s.layers for steps in runs.values() for s in steps}):
        for method, steps in runs.items():
            mine = [s for s in steps if s.layers == layers]
            lines.append(
                f"| {layers} | {method} | {len(mine)} "
                f"| {statistics.fmean(s.width for s in mine):.1f} "
                f"| {1 + statistics.fmean(s.hits for s in mine):.2f} "
                f"| {statistics.median(s.inside_ms for s in mine):.2f} "
                f"| {statistics.median(s.head_ms for s in mine):.2f} "
                f"| {statistics.median(s.outside_ms for s in mine):.2f} |"
            )
    return "\n".join(lines) + "\n"


def by_hits_table(steps: list[Step]) -> str:
    """LADE's outside time by layers and tokens accepted beyond the first, measured (the
    fit below interpolates these)."""
    lines = [
        "| layers | LADE steps accepting | steps | outside ms (median) |",
        "|---|---|---|---|",
    ]
    for layers in sorted({s.layers for s in steps}):
        for hits in sorted({s.hits for s in steps}):
            mine = [s.outside_ms for s in steps if s.layers == layers and s.hits == hits]
            if mine:
                lines.append(
                    f"| {layers} | {hits + 1} token(s) | {len(mine)} "
                    f"| {statistics.median(mine):.2f} |"
                )
    return "\n".join(lines) + "\n"


def fitted_table(runs: dict[str, list[Step]]) -> str:
    """Least squares of each method's outside-the-layers time per step on 1, layers, hits
    and layers × hits (per accepted token LADE moves its KV entries layer by layer), and
    both at Spec-Bench's rows."""
    fits = {method: _fit(steps) for method, steps in runs.items()}
    lines = ["outside ms = a + b·layers + c·hits + d·layers·hits (hits: tokens beyond the first)"]
    for method, coef in fits.items():
        terms = zip("abcd", coef, strict=True)
        lines.append(f"  {method}: " + ", ".join(f"{n} {v:.4f}" for n, v in terms))
    lines += [
        "",
        "| Spec-Bench row | layers | tokens per step | HF outside ms | LADE outside ms "
        "| LADE's extra ms per step |",
        "|---|---|---|---|---|---|",
    ]
    for row, (layers, per_step) in ROWS.items():
        hf, lookahead = (_predict(fits[m], layers, per_step - 1.0) for m in METHODS)
        lines.append(
            f"| {row} | {layers} | {per_step:.2f} | {hf:.2f} | {lookahead:.2f} "
            f"| {lookahead - hf:.2f} |"
        )
    return "\n".join(lines)


def _design(layers: float, hits: float) -> list[float]:
    return [1.0, layers, hits, layers * hits]


def _fit(steps: list[Step]) -> list[float]:
    x = torch.tensor([_design(s.layers, s.hits) for s in steps], dtype=torch.float64)
    y = torch.tensor([[s.outside_ms] for s in steps], dtype=torch.float64)
    return torch.linalg.lstsq(x, y, driver="gelsd").solution.flatten().tolist()


def _predict(coef: list[float], layers: float, hits: float) -> float:
    return sum(c * v for c, v in zip(coef, _design(layers, hits), strict=True))


def generate(
    model: Any, prompt: torch.Tensor, new_tokens: int, lookahead: bool
) -> tuple[list[int], list[int]]:
    """(the new tokens, how many each forward emitted: LADE's accept lengths, 1 each for HF
    greedy)."""
    before = os.environ.get("USE_LADE")
    os.environ["USE_LADE"] = "1" if lookahead else "0"  # Spec-Bench's switch
    try:
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                max_new_tokens=new_tokens,
                pad_token_id=0,
            )
    finally:
        if before is None:
            del os.environ["USE_LADE"]
        else:
            os.environ["USE_LADE"] = before
    if lookahead:  # LADE's generate: (ids, steps - 1, accept lengths)
        return out[0][0, prompt.shape[1] :].tolist(), list(out[2])
    new = out[0, prompt.shape[1] :].tolist()
    return new, [1] * len(new)


if __name__ == "__main__":
    raise SystemExit(main())
