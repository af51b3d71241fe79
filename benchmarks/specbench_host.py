"""Spec-Bench's lookahead and speculative implementations against their HF eager baseline:
the host time a step spends outside the transformer layers (opt-in; runs Spec-Bench's own
code on CPU).

Spec-Bench's lookahead row (W7 N5 G7, `USE_FLASH=0`) runs LADE's Jacobi search
(`model/lade/` in hemingkx/Spec-Bench) over Hugging Face `transformers` 4.37.1; its
speculative row (SpS, the 68M Vicuna draft) runs that library's assisted generation with
Spec-Bench's copy of `assisted_decoding` (`model/sps/`, which also counts accepted tokens);
the baseline is the same library's greedy `generate`. On a GPU all three are host-bound at
batch 1, so what separates their steps beyond the kernels is host work: LADE's n-gram pool,
the lookahead inputs and positions, the multi-level attention mask, reading back every
position's argmax, and moving each accepted token's keys and values into place layer by
layer; SpS's assistant `generate` call per step (its set-up, a greedy loop of k draft
forwards keeping every draft logit), the verification's token matching and both caches'
cropping. This script measures that work on the CPU it runs on, per step: hooks time the
layers and the LM head of the target (and of the draft) as compute, which the simulator
prices as kernels; the rest is outside them (the prompt's forward is left out). A
least-squares fit over every step gives the outside time by layers and tokens, evaluated
at Spec-Bench's rows.

The model is the zoo's `small` (trained on the standard library's code, so that LADE's
n-gram pool fills and its guesses hit as on real text) made as deep as a Vicuna by
pass-through layers: copies of its last layer with the attention output and MLP down
projections zeroed, which run every op of a layer and add nothing to the residual stream,
so the deep model's greedy tokens are the 4-layer model's (checked: LADE's and SpS's equal
HF's). SpS's draft is the zoo's draft of `small` made 2 layers deep the same way, as deep
as Vicuna-68M.

It needs Spec-Bench's checkout and its pinned `transformers`, apart from the project's
(whose `tokenizers` encodes the prompts first: the pinned one cannot read the zoo's file):

    git clone https://github.com/hemingkx/Spec-Bench /tmp/specbench   # model/lade, model/sps
    pip install --target /tmp/tf437 --no-deps transformers==4.37.1 tokenizers==0.15.2 \\
        huggingface_hub==0.20.3
    python benchmarks/specbench_host.py encode --out /tmp/lade_prompts.json
    PYTHONPATH=/tmp/tf437 python benchmarks/specbench_host.py measure --decoder lade \\
        --specbench /tmp/specbench --prompts /tmp/lade_prompts.json --layers 32 40 60
    PYTHONPATH=/tmp/tf437 python benchmarks/specbench_host.py measure --decoder sps \\
        --specbench /tmp/specbench --prompts /tmp/lade_prompts.json --layers 32 40 60

Each decoder runs in its own process, as in Spec-Bench (one `evaluation/inference_*.py` per
method). Spec-Bench's code replaces library methods process-wide: LADE's `augment_all`
patches `GenerationMixin.greedy_search` (switched on per call by its `USE_LADE` environment
variable, which this script sets around each call as Spec-Bench's `eval.sh` does per run),
SpS's script sets `GenerationMixin.assisted_decoding`; this script does the same, in its own
process only: that code is what is measured.
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
BASELINE = "HF greedy"
DRAFT_BASELINE = "HF greedy, the draft alone"
METHODS = {
    "lade": (BASELINE, "LADE W7 N5 G7"),
    "sps": (BASELINE, "SpS, HF assisted", DRAFT_BASELINE),
}
DRAFT_LAYERS = 2  # Vicuna-68M's depth
FILL_STEPS = 2  # LADE's first decode steps fill its lookahead levels, without pool or guesses
PROMPT_MODULES = ("textwrap", "json/decoder", "csv", "shlex", "fractions", "heapq")  # stdlib


ROWS = {  # Spec-Bench's rows: (layers of the model, tokens per step) by decoder
    "lade": {
        "vicuna-7b on the rtx3090": (32, 1.65),
        "vicuna-13b on the a100": (40, 1.63),
        "vicuna-33b on the a100": (60, 1.61),
    },
    "sps": {
        "vicuna-7b on the rtx3090": (32, 2.29),
        "vicuna-13b on the a100": (40, 2.18),
        "vicuna-33b on the a100": (60, 2.01),
    },
}
# Draft forwards per step in the simulator's SpS scenarios: HF's heuristic schedule (k starts
# at 5, +2 after a step that accepts all, -1 otherwise) settles at a mean of 2.7-3.2 under
# i.i.d. acceptance at the rows' 2.01-2.29 tokens per step.
SPS_DRAFTS = 3


@dataclass(frozen=True)
class Step:
    """One decode step: its layers' time, its LM head's (compute, which a GPU's kernels
    price), the host time outside both (and outside the draft's forwards), the tokens it fed
    per sequence, the tokens it accepted beyond the first, and for SpS its draft forwards and
    their layers' and LM head's time."""

    layers: int
    inside_ms: float
    head_ms: float
    outside_ms: float
    width: int
    hits: int
    drafted: int = 0
    draft_ms: float = 0.0


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

    def ms(self) -> dict[str, torch.Tensor]:
        """Each event's times in ms, one per forward."""
        return {k: 1e3 * torch.tensor(v, dtype=torch.float64) for k, v in self.times.items()}

    def steps(self, emitted: list[int]) -> list[Step]:
        """Forward i emitted `emitted[i]` tokens. Each decode step after the warm-up (the
        prompt's forward and `FILL_STEPS` more) but the last: its layers, its LM head, and
        the rest until the next forward's first layer."""
        t = self.ms()
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


def sps_rounds(target: ForwardClock, draft: ForwardClock, accepted: list[int]) -> list[Step]:
    """SpS's steps, one per target forward (the first also prefills the prompt): from the end
    of one verification's LM head to the end of the next, less the target's layers and LM
    head and the draft forwards started in between (layers and LM head: compute). The first
    step (both models' prompts) and the last are left out."""
    t, d = target.ms(), draft.ms()
    if not len(t["start"]) == len(accepted) == len(target.widths):
        raise RuntimeError(f"{len(t['start'])} target forwards timed, {len(accepted)} counted")
    draft_compute = (d["end"] - d["start"]) + (d["headed"] - d["head"])
    steps = []
    for i in range(1, len(accepted) - 1):
        mine = (d["start"] > t["headed"][i - 1]) & (d["start"] < t["start"][i])
        inside = float(t["end"][i] - t["start"][i])
        head = float(t["headed"][i] - t["head"][i])
        drafts = float(draft_compute[mine].sum())
        span = float(t["headed"][i] - t["headed"][i - 1])
        steps.append(
            Step(
                target.count,
                inside,
                head,
                span - inside - head - drafts,
                target.widths[i],
                accepted[i] - 1,
                int(mine.sum()),
                drafts,
            )
        )
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    encode = commands.add_parser("encode", help="prompts as the zoo model's token ids")
    encode.add_argument("--zoo", type=Path, default=ZOO_SMALL, help="the model's folder")
    encode.add_argument("--prompt-tokens", type=int, default=300)
    encode.add_argument("--out", type=Path, required=True)
    run = commands.add_parser("measure", help="time a decoder and HF greedy (transformers 4.37.1)")
    run.add_argument("--decoder", choices=sorted(METHODS), default="lade")
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
    install_specbench(transformers, args.decoder)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, one thread\n")
    prompts = [torch.tensor([ids]) for ids in json.loads(args.prompts.read_text())]
    draft = None
    if args.decoder == "sps":
        draft = deepened(transformers, args.zoo.parent / "draft", DRAFT_LAYERS)
    methods = METHODS[args.decoder]
    runs: dict[str, list[Step]] = {method: [] for method in methods}
    for layers in args.layers:
        model = deepened(transformers, args.zoo, layers)
        for method, steps in measure(model, draft, prompts, args.new_tokens, methods).items():
            runs[method] += steps
    print(per_layers_table(runs))
    print(breakdown_table(runs[methods[1]], methods[1], "hits" if draft is None else "drafted"))
    if draft is None:
        print(fitted_table(runs, ROWS["lade"]))
    else:
        print(sps_fitted_table(runs, ROWS["sps"]))
    return 0


def install_specbench(transformers: Any, decoder: str) -> None:
    """What Spec-Bench's script for `decoder` does to the library before it generates."""
    if decoder == "lade":
        lade = importlib.import_module("model.lade.utils")
        lade.augment_all()
        lade.config_lade(LEVEL=5, WINDOW_SIZE=7, GUESS_SET_SIZE=7, DEBUG=0, USE_FLASH=0)  # eval.sh
    else:  # evaluation/inference_sps.py
        sps = importlib.import_module("model.sps.decoding")
        transformers.GenerationMixin.assisted_decoding = sps.assisted_decoding


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


def measure(
    model: Any,
    draft: Any | None,
    prompts: list[torch.Tensor],
    new_tokens: int,
    methods: tuple[str, ...],
) -> dict[str, list[Step]]:
    """HF greedy and the decoder on each prompt in turn: every decode step; the decoder's
    tokens checked against HF greedy's (both are lossless). With a draft, HF greedy on the
    draft alone too: its steps' outside time is what a draft forward costs in a plain loop."""
    steps: dict[str, list[Step]] = {method: [] for method in methods}
    for prompt in prompts:
        greedy = timed(model, None, prompt, new_tokens, False, steps[methods[0]])
        other = timed(model, draft, prompt, new_tokens, draft is None, steps[methods[1]])
        if other[: len(greedy)] != greedy:  # LADE may overshoot the limit in its last step
            raise RuntimeError(f"{methods[1]}'s tokens differ from HF greedy's")
        if draft is not None:
            timed(draft, None, prompt, new_tokens, False, steps[DRAFT_BASELINE])
    return steps


def timed(
    model: Any,
    draft: Any | None,
    prompt: torch.Tensor,
    new_tokens: int,
    lookahead: bool,
    into: list[Step],
) -> list[int]:
    """One generation's new tokens, its forwards timed and its steps appended to `into`."""
    clock = ForwardClock(model)
    draft_clock = ForwardClock(draft) if draft is not None else None
    try:
        tokens, emitted = generate(model, prompt, new_tokens, lookahead, draft)
    finally:
        clock.remove()
        if draft_clock is not None:
            draft_clock.remove()
    into += clock.steps(emitted) if draft_clock is None else sps_rounds(clock, draft_clock, emitted)
    return tokens


def per_layers_table(runs: dict[str, list[Step]]) -> str:
    lines = [
        "| layers | method | steps | tokens per forward | tokens per step "
        "| layers ms (median) | LM head ms (median) | outside ms (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for layers in sorted({s.layers for steps in runs.values() for s in steps}):
        for method, steps in runs.items():
            mine = [s for s in steps if s.layers == layers]
            if not mine:
                continue
            lines.append(
                f"| {layers} | {method} | {len(mine)} "
                f"| {statistics.fmean(s.width for s in mine):.1f} "
                f"| {1 + statistics.fmean(s.hits for s in mine):.2f} "
                f"| {statistics.median(s.inside_ms for s in mine):.2f} "
                f"| {statistics.median(s.head_ms for s in mine):.2f} "
                f"| {statistics.median(s.outside_ms for s in mine):.2f} |"
            )
    return "\n".join(lines) + "\n"


def breakdown_table(steps: list[Step], method: str, by: str) -> str:
    """The decoder's outside time by layers and by `by` (`hits`: tokens accepted beyond the
    first; `drafted`: draft forwards), measured (the fits below interpolate these)."""
    label = {"hits": "tokens accepted", "drafted": "draft forwards"}[by]
    lines = [
        f"| layers | {method}: {label} | steps | outside ms (median) |",
        "|---|---|---|---|",
    ]
    for layers in sorted({s.layers for s in steps}):
        for value in sorted({getattr(s, by) for s in steps}):
            mine = [s.outside_ms for s in steps if s.layers == layers and getattr(s, by) == value]
            if mine:
                shown = value + 1 if by == "hits" else value
                lines.append(
                    f"| {layers} | {shown} | {len(mine)} | {statistics.median(mine):.2f} |"
                )
    return "\n".join(lines) + "\n"


def fitted_table(runs: dict[str, list[Step]], rows: dict[str, tuple[int, float]]) -> str:
    """Least squares of each method's outside-the-layers time per step on 1, layers, hits
    and layers × hits (per accepted token LADE moves its KV entries layer by layer), and
    both at Spec-Bench's rows."""
    fits = {method: _fit(steps) for method, steps in runs.items()}
    lines = ["outside ms = a + b·layers + c·hits + d·layers·hits (hits: tokens beyond the first)"]
    lines += _coefficients(fits, "abcd")
    lines += [
        "",
        "| Spec-Bench row | layers | tokens per step | HF outside ms | LADE outside ms "
        "| LADE's extra ms per step |",
        "|---|---|---|---|---|---|",
    ]
    for row, (layers, per_step) in rows.items():
        hf, lookahead = (_predict(fits[m], _design(layers, per_step - 1.0)) for m in fits)
        lines.append(
            f"| {row} | {layers} | {per_step:.2f} | {hf:.2f} | {lookahead:.2f} "
            f"| {lookahead - hf:.2f} |"
        )
    return "\n".join(lines)


def sps_fitted_table(runs: dict[str, list[Step]], rows: dict[str, tuple[int, float]]) -> str:
    """SpS's outside time per step fitted on 1, layers, draft forwards and hits; HF greedy's
    as for LADE. At each row (k = `SPS_DRAFTS`): SpS's outside time less one HF greedy
    step's at the target's depth and k of HF greedy on the draft alone (what the simulator
    already charges as each forward's step overhead): the host work assisted generation
    adds; from the fits (the draft's: its steps' mean), and from medians throughout (SpS's
    steps with exactly k draft forwards at that depth, HF greedy's, the draft alone's)."""
    baseline, sps, _ = runs
    hf_fit = _fit(runs[baseline])
    sps_fit = _fit(runs[sps], sps=True)
    drafted = statistics.fmean(s.drafted for s in runs[sps])
    lines = [
        "HF greedy: outside ms = a + b·layers + c·hits + d·layers·hits",
        *_coefficients({baseline: hf_fit}, "abcd"),
        "SpS: outside ms = a + b·layers + c·drafts + d·hits (drafts: draft forwards in the step)",
        *_coefficients({sps: sps_fit}, "abcd"),
        f"SpS's measured steps: {drafted:.2f} draft forwards each (HF's heuristic k), "
        f"{statistics.fmean(s.draft_ms for s in runs[sps]):.2f} ms of draft compute",
        "",
        f"| Spec-Bench row | layers | tokens per step | SpS outside ms (k = {SPS_DRAFTS}) "
        "| HF outside ms, target | × k, draft | SpS's extra ms per step "
        "| the same from medians |",
        "|---|---|---|---|---|---|---|---|",
    ]
    draft_step = statistics.fmean(s.outside_ms for s in runs[DRAFT_BASELINE])
    for row, (layers, per_step) in rows.items():
        outside = _predict(sps_fit, _sps_design(layers, SPS_DRAFTS, per_step - 1.0))
        target_step = _predict(hf_fit, _design(layers, 0.0))
        extra = outside - target_step - SPS_DRAFTS * draft_step
        lines.append(
            f"| {row} | {layers} | {per_step:.2f} | {outside:.2f} | {target_step:.2f} "
            f"| {SPS_DRAFTS * draft_step:.2f} | {extra:.2f} | {_median_extra(runs, layers)} |"
        )
    return "\n".join(lines)


def _median_extra(runs: dict[str, list[Step]], layers: int) -> str:
    """SpS's extra at `layers` from medians: its steps with `SPS_DRAFTS` draft forwards, less
    HF greedy's step and `SPS_DRAFTS` of the draft alone's ("–" without such steps)."""
    baseline, sps, _ = runs
    mine = [s.outside_ms for s in runs[sps] if s.layers == layers and s.drafted == SPS_DRAFTS]
    greedy = [s.outside_ms for s in runs[baseline] if s.layers == layers]
    if not mine or not greedy:
        return "–"
    draft = statistics.median(s.outside_ms for s in runs[DRAFT_BASELINE])
    return f"{statistics.median(mine) - statistics.median(greedy) - SPS_DRAFTS * draft:.2f}"


def _coefficients(fits: dict[str, list[float]], names: str) -> list[str]:
    return [
        f"  {method}: " + ", ".join(f"{n} {v:.4f}" for n, v in zip(names, coef, strict=True))
        for method, coef in fits.items()
    ]


def _design(layers: float, hits: float) -> list[float]:
    return [1.0, layers, hits, layers * hits]


def _sps_design(layers: float, drafts: float, hits: float) -> list[float]:
    return [1.0, layers, drafts, hits]


def _fit(steps: list[Step], sps: bool = False) -> list[float]:
    """Least squares of the steps' outside time on `_design` (`_sps_design` if `sps`)."""
    if sps:
        rows = [_sps_design(s.layers, s.drafted, s.hits) for s in steps]
    else:
        rows = [_design(s.layers, s.hits) for s in steps]
    x = torch.tensor(rows, dtype=torch.float64)
    y = torch.tensor([[s.outside_ms] for s in steps], dtype=torch.float64)
    return torch.linalg.lstsq(x, y, driver="gelsd").solution.flatten().tolist()


def _predict(coef: list[float], design: list[float]) -> float:
    return sum(c * v for c, v in zip(coef, design, strict=True))


def generate(
    model: Any, prompt: torch.Tensor, new_tokens: int, lookahead: bool, draft: Any | None = None
) -> tuple[list[int], list[int]]:
    """(the new tokens, how many each forward emitted: LADE's and SpS's accept lengths, 1
    each for HF greedy). SpS when a draft is given."""
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
                assistant_model=draft,
            )
    finally:
        if before is None:
            del os.environ["USE_LADE"]
        else:
            os.environ["USE_LADE"] = before
    if lookahead or draft is not None:  # LADE's and SpS's generate: (ids, steps - 1, accepted)
        return out[0][0, prompt.shape[1] :].tolist(), [int(n) for n in out[2]]
    new = out[0, prompt.shape[1] :].tolist()
    return new, [1] * len(new)


if __name__ == "__main__":
    raise SystemExit(main())
