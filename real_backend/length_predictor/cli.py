"""`workbench predictor train`: train a learned length predictor for a zoo model or a
checkpoint, print its held-out errors against the constant baselines, save it.

Light to import: torch loads only when training runs.
"""

from __future__ import annotations

import argparse
import codecs
import json
import math
import sys
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parents[2] / "data" / "prompts"
DEFAULT_PROMPTS = ("mt_bench.jsonl", "vicuna_bench.jsonl", "specbench_question.jsonl")


def add_predictor_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``predictor`` command to an argparse subparsers object (sets ``func``)."""
    predictor = sub.add_parser("predictor", help="learned response-length predictors")
    psub = predictor.add_subparsers(dest="predictor_command", required=True)
    t = psub.add_parser("train", help="train one on the lengths a model actually produces")
    model = t.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-zoo", help="a built zoo model (its target), e.g. tiny")
    model.add_argument("--checkpoint", help="a checkpoint folder with its tokenizer")
    t.add_argument("--zoo-dir", help="zoo folder (default: the zoo's default cache)")
    t.add_argument(
        "--prompts", action="append", help="question file(s) (default: the shipped sets)"
    )
    t.add_argument(
        "--code-snippets", type=int, default=200, help="zoo held-out code prompts (default 200)"
    )
    t.add_argument("--out", help="output folder (default: <zoo>/<name>/length_predictor)")
    t.add_argument("--max-new", type=int, default=256, help="generation limit (default 256)")
    t.add_argument("--temperature", type=float, default=1.0, help="sampling (default 1; 0 greedy)")
    t.add_argument(
        "--stop", action="append", help=r"stop text besides EOS, escapes allowed (default '\n\n')"
    )
    t.add_argument("--eos-only", action="store_true", help="stop at EOS only")
    t.add_argument("--max-prompt-tokens", type=int, default=1024, help="skip longer prompts")
    t.add_argument("--heldout", type=float, default=0.2, help="held-out share (default 0.2)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1: toy models gain nothing)"
    )
    t.add_argument("--json", action="store_true", help="print the card as JSON only")
    predictor.set_defaults(func=predictor_command)
    return predictor


def predictor_command(args: argparse.Namespace) -> int:
    from workbench.errors import needs_real_extra

    _check_numbers(args)
    with needs_real_extra("training a length predictor runs the model"):
        import torch

        from real_backend.length_predictor.train import train_predictor

    options = _options(args)
    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        card = train_predictor(options, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    finally:
        torch.set_num_threads(threads)
    print(json.dumps(card) if args.json else format_card(card, options.out))
    return 0


def _check_numbers(args: argparse.Namespace) -> None:
    """Each option's range, the first one out of it named (NaN is out of every range)."""
    from workbench.errors import WorkbenchError

    checks = [
        ("--max-new", args.max_new, args.max_new >= 1, "a whole number of 1 or more"),
        ("--temperature", args.temperature, args.temperature >= 0, "a number >= 0 (0: greedy)"),
        ("--heldout", args.heldout, 0 < args.heldout < 1, "a share between 0 and 1"),
        ("--threads", args.threads, args.threads >= 1, "a whole number of 1 or more"),
    ]
    for flag, value, ok, expected in checks:
        if not ok or not math.isfinite(value):
            raise WorkbenchError(f"expected {expected}, got {value}", field=flag)


def _options(args: argparse.Namespace) -> Any:
    from real_backend.length_predictor.predictor import default_predictor_folder
    from real_backend.length_predictor.train import TrainOptions

    checkpoint = _checkpoint(args)
    stops = [] if args.eos_only else [codecs.decode(s, "unicode_escape") for s in args.stop or []]
    files = [Path(p) for p in args.prompts or []] or [PROMPTS_DIR / f for f in DEFAULT_PROMPTS]
    return TrainOptions(
        checkpoint=checkpoint,
        out=Path(args.out) if args.out else default_predictor_folder(checkpoint),
        prompt_files=files,
        zoo=args.model_zoo,
        code_snippets=args.code_snippets if args.model_zoo else 0,
        max_new=args.max_new,
        temperature=args.temperature,
        stop_texts=stops if (args.stop or args.eos_only) else ["\n\n"],
        max_prompt_tokens=args.max_prompt_tokens,
        heldout_share=args.heldout,
        seed=args.seed,
    )


def _checkpoint(args: argparse.Namespace) -> Path:
    from workbench.errors import WorkbenchError

    if args.checkpoint:
        folder = Path(args.checkpoint)
        if not (folder / "config.json").is_file():
            raise WorkbenchError("not a checkpoint folder (no config.json)", field="--checkpoint")
        return folder
    from real_backend.zoo.build import resolve_zoo_model

    cache = Path(args.zoo_dir).expanduser() if args.zoo_dir else None
    try:
        return resolve_zoo_model(args.model_zoo, "target", cache)
    except WorkbenchError as exc:
        raise WorkbenchError(exc.detail, field="--model-zoo") from None


def format_card(card: dict[str, Any], out: Path) -> str:
    head, data, held = card["head"], card["data"], card["heldout"]
    lengths = card["lengths"]
    rows = [("learned", held["learned"]), ("constant mean", held["constant_mean"]),
            ("constant median", held["constant_median"])]  # fmt: skip
    table = "\n".join(
        f"  {name:<16}{m['mae']:>7.1f}{m['within_50']:>11.1%}{m['within_100']:>12.1%}"
        f"{m['underestimated']:>8.1%}"
        for name, m in rows
    )
    return (
        f"predictor: {out}\n"
        f"  {data['samples']} prompts ({data['train']} train / {data['heldout']} held-out), "
        f"lengths mean {lengths['mean']:.0f}, {lengths['at_max_new']:.0%} at --max-new "
        f"{card['generation']['max_new']}\n"
        f"  head: {head['kind']} on {head['pooling']}-pooled hidden states, l2 {head['l2']}\n"
        f"  held-out        MAE  within 50  within 100   under\n{table}"
    )
