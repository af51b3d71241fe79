"""Build an APAR zoo entry: tokenizer with fork/child tokens → masked training on a half
structured, half code mix → fork rates on held-out prompts → a draft distilled from the
target on the same rows → its agreement with the target → model card.

Deterministic for a spec and a stdlib: it trains on one thread (on a shared 2-core machine
two threads wait on each other far more than they gain).
"""

from __future__ import annotations

import math
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from real_backend.zoo import train as T
from real_backend.zoo.apar_data import (
    CHILD,
    FORK,
    Example,
    doc_lists,
    eval_prompts,
    examples,
    inline_rows,
    writes_detail_inline,
)
from real_backend.zoo.apar_data import digest as lists_digest
from real_backend.zoo.build import shape_text
from real_backend.zoo.corpus import build_corpus
from real_backend.zoo.specs import AparSpec, ModelShape, TrainSpec
from real_backend.zoo.tokenizer import EOS, PAD, encode_documents, save_tokenizer, train_tokenizer
from workbench.errors import WorkbenchError

THREADS = 1


def pack_examples(
    items: list[Example], length: int, pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole examples packed first-fit into rows of `length` tokens (never split, so a child
    sequence always keeps its context), padded without loss. Returns (N, length) ids and
    (N, length − 1) loss masks over the targets ids[:, 1:]."""
    rows: list[list[int]] = []
    masks: list[list[bool]] = []
    for ex in items:
        ids, loss = list(ex.ids[:length]), list(ex.loss[:length])
        row = next((r for r, ids_ in enumerate(rows) if len(ids_) + len(ids) <= length), None)
        if row is None:
            rows.append([])
            masks.append([])
            row = len(rows) - 1
        # The first token of an example is never a target with loss (nothing precedes it in
        # the example), so packing after another example adds no loss across the boundary.
        rows[row] += ids
        masks[row] += [False, *loss[1:]]
    ids_t = torch.full((len(rows), length), pad_id, dtype=torch.long)
    mask_t = torch.zeros((len(rows), length), dtype=torch.bool)
    for r, (ids, loss) in enumerate(zip(rows, masks, strict=True)):
        ids_t[r, : len(ids)] = torch.tensor(ids)
        mask_t[r, : len(loss)] = torch.tensor(loss)
    return ids_t, mask_t[:, 1:]


def masked_ce(model: Any, rows: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the masked targets of `rows`."""
    return T.token_ce(model(input_ids=rows[:, :-1]).logits, rows[:, 1:], masks)


@torch.no_grad()
def root_answer(
    model: Any, prompt: list[int], new: int, ids: dict[str, int], *, forks: bool = True
) -> list[int]:
    """The root branch's greedy tokens (up to `new`, EOS left out) under APAR's logit rules
    for a root: the child token never, no fork right after a fork, none at all if not `forks`.
    Each token recomputes the whole sequence: a few thousand short forwards of a small model,
    and no reliance on the library's cache arguments, which `transformers` renames across
    versions (5.x deprecates `past_key_values` for `LlamaForCausalLM.forward`)."""
    fork_id = ids[FORK]
    tokens, out_ids = list(prompt), []
    for _ in range(new):
        logits = model(input_ids=torch.tensor([tokens])).logits[0, -1].clone()  # (V,)
        logits[ids[CHILD]] = float("-inf")
        if not forks or (out_ids and out_ids[-1] == fork_id):
            logits[fork_id] = float("-inf")
        token = int(logits.argmax())
        if token == ids[EOS]:
            break
        out_ids.append(token)
        tokens.append(token)
    return out_ids


def fork_rates(
    model: Any, tok: Any, prompts: list[str], spec: AparSpec, *, lists: bool = True
) -> dict[str, Any]:
    """How often the root forks on `prompts`; for list prompts (`lists`), also what it writes
    when forks are banned: whether the first item's detail follows its name inline (the
    vanilla baseline's text)."""
    ids = {t: tok.token_to_id(t) for t in (FORK, CHILD, EOS)}
    encoded = [tok.encode(p).ids for p in prompts]
    new = spec.eval_new_tokens
    counts = [root_answer(model, p, new, ids).count(ids[FORK]) for p in encoded]
    n = max(len(prompts), 1)
    rates = {
        "prompts": len(prompts),
        "fork_rate": round(sum(c > 0 for c in counts) / n, 4),
        "mean_forks": round(sum(counts) / n, 3),
    }
    if lists:
        banned = [tok.decode(root_answer(model, p, new, ids, forks=False)) for p in encoded]
        rates["banned_inline_rate"] = round(sum(map(writes_detail_inline, banned)) / n, 4)
    return rates


def build_apar_into(spec: AparSpec, folder: Path, log: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    with T.training_threads(THREADS):
        log(f"[{spec.name}] corpus and structured lists")
        corpus = build_corpus(spec.train_bytes, spec.heldout_bytes)
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        lists = doc_lists(stdlib, spec.max_items)
        train_lists = [d for d in lists if not d.heldout]
        texts = [
            *corpus.train,
            *(d.prompt + " ".join(f"`{n}`: {t}" for n, t in d.items) for d in train_lists),
        ]
        log(f"[{spec.name}] tokenizer (vocab {spec.vocab_size}, + {FORK} {CHILD})")
        tok = train_tokenizer(texts, spec.vocab_size, extra_special=(FORK, CHILD))
        ids = {t: tok.token_to_id(t) for t in (FORK, CHILD, EOS, PAD)}
        encode = lambda text: tok.encode(text).ids  # noqa: E731
        structured = [
            ex for d in train_lists for ex in examples(d, encode, ids[FORK], ids[CHILD], ids[EOS])
        ]
        inline = inline_rows(train_lists, encode, ids[EOS], spec)
        n_forked = len(structured)
        structured += inline
        s_rows, s_masks = pack_examples(structured, spec.seq_len + 1, ids[PAD])
        code = T.pack(encode_documents(tok, corpus.train), spec.seq_len + 1)
        n_code = round(len(s_rows) * (1 - spec.structured_share) / spec.structured_share)
        if len(code) == 0 or len(s_rows) == 0:
            raise WorkbenchError(f"corpus too small for {spec.name!r}", field="zoo")
        code = code[torch.arange(n_code) % len(code)]  # cycled if short: half and half
        rows = torch.cat([s_rows, code])
        masks = torch.cat([s_masks, torch.ones(len(code), spec.seq_len, dtype=torch.bool)])
        max_pos = max(2048, spec.seq_len)
        config = T.make_config(spec.target, spec.vocab_size, max_pos)
        model = T.new_model(config, spec.seed)
        log(f"[{spec.name}] model: {T.n_params(model):,} parameters, {len(rows)} rows")
        info = T.train_model(model, rows, spec.target_train, spec.seed + 100, log=log, masks=masks)
        held = [d for d in lists if d.heldout]
        h_ex = [ex for d in held for ex in examples(d, encode, ids[FORK], ids[CHILD], ids[EOS])]
        h_rows, h_masks = pack_examples(h_ex, spec.seq_len + 1, ids[PAD])
        h_code = T.pack(encode_documents(tok, corpus.heldout), spec.seq_len + 1)[:16]
        losses = heldout_losses(model, h_rows, h_masks, h_code)
        prompts = eval_prompts(lists, stdlib)
        log(f"[{spec.name}] fork rates on held-out prompts")
        rates = {
            kind: fork_rates(model, tok, p[: spec.eval_prompts], spec, lists=kind == "structured")
            for kind, p in prompts.items()
        }
        model.save_pretrained(folder / "target")
        save_tokenizer(tok, folder / "target", max_pos, extra_special=(FORK, CHILD))
        draft, draft_card = train_draft(spec, model, (rows, masks), (h_rows, h_masks, h_code), log)
        draft.save_pretrained(folder / "draft")
        save_tokenizer(tok, folder / "draft", max_pos, extra_special=(FORK, CHILD))
    return {
        **T.card_header(spec),
        "corpus": corpus.summary(),
        "structured": {
            "source": "python stdlib docstrings (ast): public functions, classes, methods",
            "lists_train": len(train_lists),
            "lists_heldout": len(held),
            "digest": lists_digest(lists),
            "train_sequences": n_forked,
            "inline_sequences": len(inline),
            "train_rows": len(s_rows),
            "code_rows": len(code),
        },
        "tokenizer": {
            "type": "byte-level BPE",
            "vocab_size": tok.get_vocab_size(),
            "fork_token": FORK,
            "child_token": CHILD,
            "fork_token_id": ids[FORK],
            "child_token_id": ids[CHILD],
        },
        "uniform_loss": round(math.log(spec.vocab_size), 4),
        "target": _role_stats(model, spec.target, spec.target_train, info, losses),
        **draft_card,
        "apar": rates,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "threads": THREADS,
    }


def train_draft(
    spec: AparSpec,
    target: Any,
    train: tuple[torch.Tensor, torch.Tensor],  # (rows, loss masks) the target trained on
    heldout: tuple[torch.Tensor, torch.Tensor, torch.Tensor],  # structured rows, masks, code
    log: Any,
) -> tuple[Any, dict[str, Any]]:
    """The draft, distilled from the finished target on its rows, and its card entries.

    It comes last, with seeds of its own (the target's + 1, as a ZooSpec pair's draft), so
    the target is what it would be without one."""
    (rows, masks), (h_rows, h_masks, h_code) = train, heldout
    max_pos = target.config.max_position_embeddings
    draft = T.new_model(T.make_config(spec.draft, spec.vocab_size, max_pos), spec.seed + 1)
    log(f"[{spec.name}] draft: {T.n_params(draft):,} parameters, distill {spec.distill}")
    info = T.train_model(
        draft, rows, spec.draft_train, spec.seed + 101, target, spec.distill, log, masks
    )
    losses = heldout_losses(draft, h_rows, h_masks, h_code)
    log(f"[{spec.name}] draft agreement on held-out rows")
    agreement = {
        "structured": T.greedy_agreement(target, draft, h_rows, masks=h_masks),
        "code": T.greedy_agreement(target, draft, h_code),
    }
    positions = {"structured": int(h_masks.sum()), "code": int(h_code[:, 1:].numel())}
    overall = sum(agreement[k] * positions[k] for k in agreement) / sum(positions.values())
    return draft, {
        "draft": {
            **_role_stats(draft, spec.draft, spec.draft_train, info, losses),
            "distill": spec.distill,
        },
        # Teacher-forced: the share of held-out positions with loss (structured: the
        # skeletons and the children's details; code: every position) where the draft's
        # argmax is the target's.
        "greedy_agreement": round(overall, 4),
        "greedy_agreement_by_kind": {k: round(v, 4) for k, v in agreement.items()},
        "agreement_positions": positions,
    }


def heldout_losses(
    model: Any, h_rows: torch.Tensor, h_masks: torch.Tensor, h_code: torch.Tensor
) -> dict[str, float]:
    """Held-out loss on the structured rows (masked) and on the code blocks."""
    with torch.no_grad():
        structured = float(masked_ce(model, h_rows, h_masks))
    return {"structured": structured, "code": T.heldout_loss(model, h_code)}


def _role_stats(
    model: Any,
    shape: ModelShape,
    tspec: TrainSpec,
    info: dict[str, float],
    losses: dict[str, float],
) -> dict[str, Any]:
    return {
        "parameters": T.n_params(model),
        "shape": asdict(shape),
        "train": asdict(tspec),
        "train_seconds": round(info["train_seconds"], 2),
        "final_train_ce_ema": round(info["final_train_ce_ema"], 4),
        "heldout_structured_loss": round(losses["structured"], 4),
        "heldout_code_loss": round(losses["code"], 4),
    }


def render_apar_card(card: dict[str, Any]) -> str:
    t, d, s, a = card["target"], card["draft"], card["structured"], card["apar"]
    g = card["greedy_agreement_by_kind"]
    rows = [
        ("parameters", f"{t['parameters']:,}", f"{d['parameters']:,}"),
        ("layers x hidden", shape_text(t["shape"]), shape_text(d["shape"])),
        ("training steps x batch", _steps(t["train"]), _steps(d["train"])),
        ("distillation weight", "0", f"{d['distill']}"),
        (
            "held-out loss, structured (masked)",
            f"{t['heldout_structured_loss']:.3f} nats",
            f"{d['heldout_structured_loss']:.3f} nats",
        ),
        (
            "held-out loss, code",
            f"{t['heldout_code_loss']:.3f} nats",
            f"{d['heldout_code_loss']:.3f} nats",
        ),
        ("train seconds", f"{t['train_seconds']:.1f}", f"{d['train_seconds']:.1f}"),
    ]
    table = "\n".join(f"| {r} | {x} | {y} |" for r, x, y in rows)
    return f"""# Zoo model `{card["name"]}`

{card["description"]}. Llama-shaped (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings), trained
from scratch by `workbench zoo build {card["name"]}` with plain PyTorch on one CPU thread,
for APAR decoding (`decoder: {{kind: apar}}`): it writes the skeleton of a numbered list
and a fork token `{FORK}` where each item's detail belongs; the detail is written by a
child branch that starts with `{CHILD}`. A toy for measuring APAR honestly, not a
language model. The draft (same tokenizer) is trained after the target on the same rows
and loss masks, distilled from it, for APAR with speculative decoding.

| | target | draft |
|---|---|---|
{table}

**Draft vs target.** Greedy agreement under teacher forcing on held-out rows (positions
with loss): {card["greedy_agreement"]:.3f} overall, structured {g["structured"]:.3f}, code
{g["code"]:.3f}.

**Fork rate** (greedy root, up to {card["spec"]["eval_new_tokens"]} tokens, held-out
prompts): structured {a["structured"]["fork_rate"]:.2f} ({a["structured"]["mean_forks"]:.1f}
forks each, {a["structured"]["prompts"]} prompts), unstructured
{a["unstructured"]["fork_rate"]:.2f} ({a["unstructured"]["prompts"]} prompts). With the fork
token banned, the first item's detail follows it inline on
{a["structured"]["banned_inline_rate"]:.2f} of the structured prompts.

**Data.** Half of the training rows: {s["lists_train"]} numbered lists of the Python
{card["python_version"]} standard library's public functions, classes and methods with the
first paragraph of their docstrings (read with `ast`), as 1 + k causal sequences each
({s["train_sequences"]} sequences), and {_inline_text(card)}
({s["train_rows"]} packed rows in all); {s["lists_heldout"]}
lists of held-out modules are kept for evaluation (`data/prompts/apar_stdlib.jsonl`). The
other half: {s["code_rows"]} rows of stdlib source code (corpus digest
`{card["corpus"]["digest"]}`). Lists digest `{s["digest"]}`: the stdlib differs between
Python versions, so a rebuild elsewhere may differ. Byte-level BPE, vocab
{card["tokenizer"]["vocab_size"]} (fork token id {card["tokenizer"]["fork_token_id"]}, child
token id {card["tokenizer"]["child_token_id"]}).

Versions: {", ".join(f"{k} {v}" for k, v in card["versions"].items())}.
Build time: {card["build_seconds"]:.1f} s.
"""


def _inline_text(card: dict[str, Any]) -> str:
    share, count = card["spec"]["inline_share"], card["structured"]["inline_sequences"]
    if card["spec"].get("inline_windows"):
        return (
            f"{share:.0%} of the lists also written sequentially with the details inline, long "
            f"ones cut into overlapping row-sized windows ({count} sequences)"
        )
    return (
        f"{count} of the lists (of those short enough to fit a row whole) also written "
        "sequentially with the details inline"
    )


def _steps(t: dict[str, Any]) -> str:
    return f"{t['steps']} x {t['batch_size']}"
