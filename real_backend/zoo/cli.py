"""`workbench zoo build [NAME] [--cache-dir DIR] [--force]` and `workbench zoo list`.

Light to import: torch and transformers load only when a build runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from real_backend.zoo.build import build, cache_root, default_cache_dir, is_built, read_card
from real_backend.zoo.specs import SPECS, roles_of
from workbench.errors import WorkbenchError, needs_real_extra


def add_zoo_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``zoo`` command to an argparse subparsers object (sets ``func``)."""
    zoo = sub.add_parser("zoo", help="build and list the small local model zoo")
    _fill(zoo)
    zoo.set_defaults(func=zoo_command)
    return zoo


def _fill(zoo: argparse.ArgumentParser) -> None:
    zsub = zoo.add_subparsers(dest="zoo_command", required=True)
    b = zsub.add_parser(
        "build", help="train a target/draft pair or an APAR model (reused when already built)"
    )
    b.add_argument("name", nargs="?", default="small", choices=list(SPECS), help="default small")
    b.add_argument("--cache-dir", help=f"zoo folder (default {default_cache_dir()})")
    b.add_argument("--force", action="store_true", help="rebuild even when built")
    ls = zsub.add_parser("list", help="the zoo entries and whether they are built")
    ls.add_argument("--cache-dir", help=f"zoo folder (default {default_cache_dir()})")


def zoo_command(args: argparse.Namespace) -> int:
    cache_dir = getattr(args, "cache_dir", None)
    if cache_dir is not None and Path(cache_dir).exists() and not Path(cache_dir).is_dir():
        raise WorkbenchError("a file, not a folder: expected the zoo's folder", field="--cache-dir")
    if args.zoo_command == "build":
        already = is_built(args.name, cache_dir) and not args.force
        with needs_real_extra("`zoo build` trains a model"):
            out = build(args.name, cache_dir, force=args.force, log=_stderr)
        card = read_card(args.name, cache_dir) or {}
        verb = "reused" if already else f"built in {card.get('build_seconds', '?')} s"
        print(f"{args.name}: {verb}: {out}")
        print("\n".join(f"  {role}: {out / role}" for role in roles_of(SPECS[args.name])))
        return 0
    if args.zoo_command == "list":
        cache = cache_root(cache_dir)
        for name, spec in SPECS.items():
            card = read_card(name, cache_dir) if is_built(name, cache_dir) else None
            state = "not built" if card is None else _summary_or_gap(card)
            print(f"{name:8s} {spec.description}\n         {state}")
        print(f"cache: {cache}")
        return 0
    raise ValueError(args.zoo_command)


def _summary_or_gap(card: dict[str, Any]) -> str:
    try:
        return _summary(card)
    except (KeyError, TypeError) as missing:
        return f"built, but its card lacks {missing} (rebuild with --force)"


def _summary(card: dict[str, Any]) -> str:
    if "apar" in card:
        t, a = card["target"], card["apar"]
        return (
            f"built: APAR model {t['parameters']:,} params, fork rate "
            f"{a['structured']['fork_rate']:.2f} structured / "
            f"{a['unstructured']['fork_rate']:.2f} unstructured, inline with the fork banned "
            f"{a['structured']['banned_inline_rate']:.2f}; draft "
            f"{card['draft']['parameters']:,} params, agreement {card['greedy_agreement']:.3f}"
        )
    t, d = card["target"], card["draft"]
    return (
        f"built: target {t['parameters']:,} params loss {t['heldout_loss']:.3f}, "
        f"draft {d['parameters']:,} params loss {d['heldout_loss']:.3f}, "
        f"agreement {card['greedy_agreement']:.3f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry: ``python -m real_backend.zoo build tiny``."""
    parser = argparse.ArgumentParser(prog="workbench zoo")
    _fill(parser)
    args = parser.parse_args(argv)
    try:
        return zoo_command(args)
    except WorkbenchError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
