"""Build a zoo entry: corpus -> tokenizer -> target -> draft -> evaluation -> model card.

Layout of ``<cache>/<name>/``: ``target/`` and ``draft/`` (Hugging Face checkpoint folders,
tokenizer files included; an APAR entry's are built by `apar_build.py`),
``MODEL_CARD.md`` and ``card.json``. A build writes into
``<name>.partial/`` and renames it at the end, so a folder with ``card.json`` is complete.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from real_backend.zoo.specs import AparSpec, ZooSpec, get_spec, roles_of
from workbench.errors import WorkbenchError

ROLES = ("target", "draft")
CARD = "card.json"


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "decoding-workbench" / "zoo"


def cache_root(cache_dir: Path | str | None = None) -> Path:
    """The zoo folder: ``cache_dir`` if given, else ``~/.cache/decoding-workbench/zoo``."""
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def is_built(name: str, cache_dir: Path | str | None = None) -> bool:
    """Both checkpoints and the card are there, and the card's spec is today's spec."""
    root = cache_root(cache_dir) / name
    if not all((root / r / "config.json").is_file() for r in roles_of(get_spec(name))):
        return False
    card = read_card(name, cache_dir)
    spec = json.loads(json.dumps(asdict(get_spec(name))))
    return card is not None and card.get("spec") == spec


def resolve_zoo_model(name: str, role: str = "target", cache_dir: Path | str | None = None) -> Path:
    """The checkpoint folder of a built zoo model, or a WorkbenchError naming the command."""
    roles = roles_of(get_spec(name))
    if role not in roles:
        raise WorkbenchError(
            f"zoo model {name!r} has no {role!r}; it has {', '.join(roles)}", field="role"
        )
    cache = cache_root(cache_dir)
    if not is_built(name, cache):
        extra = "" if cache_dir is None else f" --cache-dir {cache}"
        raise WorkbenchError(
            f"zoo model {name!r} is not built (or was built from another spec) in {cache}; "
            f"build it with `workbench zoo build {name}{extra}`",
            field="zoo",
        )
    return cache / name / role


def read_card(name: str, cache_dir: Path | str | None = None) -> dict[str, Any] | None:
    """The model's card; None when there is none or it cannot be read (a damaged card is no
    card: the model counts as not built, and a build writes it again)."""
    path = cache_root(cache_dir) / name / CARD
    try:
        card = json.loads(path.read_text()) if path.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return card if isinstance(card, dict) else None


def build(
    name: str,
    cache_dir: Path | str | None = None,
    force: bool = False,
    log: Any = None,
) -> Path:
    """Build (or reuse) the zoo entry ``name``; returns ``<cache>/<name>``."""
    spec = get_spec(name)
    cache = cache_root(cache_dir)
    out = cache / name
    if is_built(name, cache) and not force:
        return out
    log = log or (lambda msg: None)
    partial = cache / f"{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        card, text = _build_and_render(spec, partial, log)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # a failed build leaves nothing behind
        raise
    (partial / CARD).write_text(json.dumps(card, indent=2, sort_keys=True) + "\n")
    (partial / "MODEL_CARD.md").write_text(text)
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    return out


def _build_and_render(
    spec: ZooSpec | AparSpec, folder: Path, log: Any
) -> tuple[dict[str, Any], str]:
    if isinstance(spec, AparSpec):
        from real_backend.zoo.apar_build import build_apar_into, render_apar_card

        card = build_apar_into(spec, folder, log)
        return card, render_apar_card(card)
    card = _build_into(spec, folder, log)
    return card, render_card(card)


def _build_into(spec: ZooSpec, folder: Path, log: Any) -> dict[str, Any]:
    from real_backend.zoo import train as T
    from real_backend.zoo.corpus import build_corpus
    from real_backend.zoo.tokenizer import encode_documents, save_tokenizer, train_tokenizer

    t0 = time.perf_counter()
    with T.training_threads(2):
        log(f"[{spec.name}] corpus")
        corpus = build_corpus(spec.train_bytes, spec.heldout_bytes)
        log(f"[{spec.name}] tokenizer (vocab {spec.vocab_size})")
        tok = train_tokenizer(corpus.train, spec.vocab_size)
        train_stream = encode_documents(tok, corpus.train)
        held_stream = encode_documents(tok, corpus.heldout)
        train_blocks = T.pack(train_stream, spec.seq_len + 1)
        held_blocks = T.pack(held_stream, spec.seq_len + 1)[: spec.eval_blocks]
        if len(held_blocks) == 0 or len(train_blocks) < spec.target_train.batch_size:
            raise WorkbenchError(f"corpus too small for {spec.name!r}", field="zoo")
        max_pos = max(2048, spec.seq_len)
        models: dict[str, Any] = {}
        stats: dict[str, dict[str, Any]] = {}
        for i, role in enumerate(ROLES):
            shape = spec.target if role == "target" else spec.draft
            tspec = spec.target_train if role == "target" else spec.draft_train
            config = T.make_config(shape, spec.vocab_size, max_pos)
            model = T.new_model(config, spec.seed + i)
            log(f"[{spec.name}] {role}: {T.n_params(model):,} parameters")
            teacher = models.get("target") if role == "draft" else None
            distill = spec.distill if teacher is not None else 0.0
            info = T.train_model(
                model, train_blocks, tspec, spec.seed + 100 + i, teacher, distill, log
            )
            loss = T.heldout_loss(model, held_blocks)
            models[role] = model
            stats[role] = {
                "parameters": T.n_params(model),
                "shape": asdict(shape),
                "train": asdict(tspec),
                "distill": distill,
                "training_tokens": tspec.steps * tspec.batch_size * spec.seq_len,
                "train_seconds": round(info["train_seconds"], 2),
                "final_train_ce_ema": round(info["final_train_ce_ema"], 4),
                "heldout_loss": round(loss, 4),
                "heldout_perplexity": round(math.exp(loss), 3),
            }
            log(f"[{spec.name}] {role}: held-out loss {loss:.3f}")
            target_dir = folder / role
            model.save_pretrained(target_dir)
            save_tokenizer(tok, target_dir, max_pos)
        log(f"[{spec.name}] agreement")
        agreement = T.greedy_agreement(models["target"], models["draft"], held_blocks)
        prompt_rows = held_blocks[: spec.accept_prompts, : spec.accept_prompt_len]
        drafting = T.greedy_drafting(
            models["target"], models["draft"], prompt_rows, spec.accept_new_tokens, spec.draft_k
        )
    return {
        **T.card_header(spec),
        "corpus": {
            **corpus.summary(),
            "train_tokens": len(train_stream),
            "heldout_tokens": len(held_stream),
            "heldout_eval_tokens": int(held_blocks[:, 1:].numel()),
        },
        "tokenizer": {"type": "byte-level BPE", "vocab_size": tok.get_vocab_size()},
        "uniform_loss": round(math.log(spec.vocab_size), 4),
        "target": stats["target"],
        "draft": stats["draft"],
        "greedy_agreement": round(agreement, 4),
        "greedy_drafting": {k: round(v, 4) for k, v in drafting.items()},
        "build_seconds": round(time.perf_counter() - t0, 1),
        "threads": 2,
    }


def render_card(card: dict[str, Any]) -> str:
    c, t, d = card["corpus"], card["target"], card["draft"]
    g = card["greedy_drafting"]
    rows = [
        ("parameters", f"{t['parameters']:,}", f"{d['parameters']:,}"),
        ("layers x hidden", shape_text(t["shape"]), shape_text(d["shape"])),
        ("training tokens", f"{t['training_tokens']:,}", f"{d['training_tokens']:,}"),
        ("distillation weight", f"{t['distill']}", f"{d['distill']}"),
        ("held-out loss (nats)", f"{t['heldout_loss']:.3f}", f"{d['heldout_loss']:.3f}"),
        ("held-out perplexity", f"{t['heldout_perplexity']:.2f}", f"{d['heldout_perplexity']:.2f}"),
        ("train seconds", f"{t['train_seconds']:.1f}", f"{d['train_seconds']:.1f}"),
    ]
    table = "\n".join(f"| {a} | {b} | {e} |" for a, b, e in rows)
    return f"""# Zoo model `{card["name"]}`

{card["description"]}. Llama-shaped (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings), trained
from scratch by `workbench zoo build {card["name"]}` with plain PyTorch on 2 CPU threads.
Toy models for measuring decoders honestly, not for use as language models.

| | target | draft |
|---|---|---|
{table}

Uniform baseline: ln(vocab) = {card["uniform_loss"]:.3f} nats.

**Draft vs target.** Greedy agreement under teacher forcing on held-out text:
{card["greedy_agreement"]:.3f}. Greedy drafting with k={g["k"]}: {g["mean_accepted"]:.2f} drafted
tokens accepted per target step on average ({g["tokens_per_target_step"]:.2f} tokens per
target step, {int(g["rounds"])} rounds).

**Corpus.** Python {c["python_version"]} standard library sources ({c["stdlib"]}),
{c["train_files"]} train files ({c["train_bytes"]:,} bytes, {c["train_tokens"]:,} tokens),
{c["heldout_files"]} held-out files ({c["heldout_bytes"]:,} bytes, {c["heldout_tokens"]:,}
tokens; {c["heldout_eval_tokens"]:,} evaluated). Corpus digest `{c["digest"]}`: the stdlib
differs between Python patch versions, so a rebuild elsewhere may differ.
Byte-level BPE tokenizer, vocab {card["tokenizer"]["vocab_size"]}.

Versions: {", ".join(f"{k} {v}" for k, v in card["versions"].items())}.
Build time: {card["build_seconds"]:.1f} s.
"""


def shape_text(s: dict[str, int]) -> str:
    return f"{s['num_layers']} x {s['hidden_size']} ({s['num_heads']}/{s['num_kv_heads']} heads)"
