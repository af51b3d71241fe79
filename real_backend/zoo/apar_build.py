"""Build an APAR zoo entry: tokenizer with fork/child tokens → masked training on a half
structured, half code mix → fork rates on held-out prompts → model card.

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
import torch.nn.functional as F

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
from real_backend.zoo.corpus import build_corpus
from real_backend.zoo.specs import AparSpec
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


def train_masked(
    model: Any,
    rows: torch.Tensor,  # (N, L) token ids
    masks: torch.Tensor,  # (N, L - 1) loss on targets
    spec: AparSpec,
    log: Any,
) -> dict[str, float]:
    """Next-token cross-entropy over the masked targets only (AdamW, warmup + cosine)."""
    tspec = spec.target_train
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": tspec.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=tspec.lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    gen = torch.Generator().manual_seed(spec.seed + 100)
    order = torch.empty(0, dtype=torch.long)
    model.train()
    t0, ema = time.perf_counter(), float("nan")
    for step in range(tspec.steps):
        if len(order) < tspec.batch_size:
            order = torch.cat([order, torch.randperm(len(rows), generator=gen)])
        idx, order = order[: tspec.batch_size], order[tspec.batch_size :]
        for group in opt.param_groups:
            group["lr"] = T.lr_at(step, tspec)
        loss = masked_ce(model, rows[idx], masks[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tspec.grad_clip)
        opt.step()
        ema = loss.item() if math.isnan(ema) else 0.9 * ema + 0.1 * loss.item()
        if step % 50 == 0 or step == tspec.steps - 1:
            log(f"  step {step + 1}/{tspec.steps} masked ce {loss.item():.3f} (ema {ema:.3f})")
    model.eval()
    return {"final_train_ce_ema": ema, "train_seconds": time.perf_counter() - t0}


def masked_ce(model: Any, rows: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=rows[:, :-1]).logits  # (B, L-1, V)
    ce = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1), reduction="none"
    )  # (B·(L-1),)
    weights = masks.reshape(-1).float()
    return (ce * weights).sum() / weights.sum().clamp(min=1.0)


@torch.no_grad()
def root_answer(
    model: Any, prompt: list[int], new: int, ids: dict[str, int], *, forks: bool = True
) -> list[int]:
    """The root branch's greedy tokens (up to `new`, EOS left out) under APAR's logit rules
    for a root: the child token never, no fork right after a fork, none at all if not `forks`."""
    fork_id = ids[FORK]
    inputs = torch.tensor([prompt])
    past, out_ids = None, []
    for _ in range(new):
        out = model(input_ids=inputs, past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].clone()
        logits[ids[CHILD]] = float("-inf")
        if not forks or (out_ids and out_ids[-1] == fork_id):
            logits[fork_id] = float("-inf")
        token = int(logits.argmax())
        if token == ids[EOS]:
            break
        out_ids.append(token)
        inputs = torch.tensor([[token]])
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
        info = train_masked(model, rows, masks, spec, log)
        held = [d for d in lists if d.heldout]
        h_ex = [ex for d in held for ex in examples(d, encode, ids[FORK], ids[CHILD], ids[EOS])]
        h_rows, h_masks = pack_examples(h_ex, spec.seq_len + 1, ids[PAD])
        with torch.no_grad():
            structured_loss = float(masked_ce(model, h_rows, h_masks))
        code_loss = T.heldout_loss(
            model, T.pack(encode_documents(tok, corpus.heldout), spec.seq_len + 1)[:16]
        )
        prompts = eval_prompts(lists, stdlib)
        log(f"[{spec.name}] fork rates on held-out prompts")
        rates = {
            kind: fork_rates(model, tok, p[: spec.eval_prompts], spec, lists=kind == "structured")
            for kind, p in prompts.items()
        }
        model.save_pretrained(folder / "target")
        save_tokenizer(tok, folder / "target", max_pos, extra_special=(FORK, CHILD))
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
        "target": {
            "parameters": T.n_params(model),
            "shape": asdict(spec.target),
            "train": asdict(spec.target_train),
            "train_seconds": round(info["train_seconds"], 2),
            "final_train_ce_ema": round(info["final_train_ce_ema"], 4),
            "heldout_structured_loss": round(structured_loss, 4),
            "heldout_code_loss": round(code_loss, 4),
        },
        "apar": rates,
        "build_seconds": round(time.perf_counter() - t0, 1),
        "threads": THREADS,
    }


def render_apar_card(card: dict[str, Any]) -> str:
    t, s, a = card["target"], card["structured"], card["apar"]
    return f"""# Zoo model `{card["name"]}`

{card["description"]}. Llama-shaped (RMSNorm, RoPE, GQA, SwiGLU, tied embeddings), trained
from scratch by `workbench zoo build {card["name"]}` with plain PyTorch on one CPU thread,
for APAR decoding (`decoder: {{kind: apar}}`): it writes the skeleton of a numbered list
and a fork token `{FORK}` where each item's detail belongs; the detail is written by a
child branch that starts with `{CHILD}`. A toy for measuring APAR honestly, not a
language model.

| | |
|---|---|
| parameters | {t["parameters"]:,} |
| layers x hidden | {t["shape"]["num_layers"]} x {t["shape"]["hidden_size"]} |
| training steps x batch | {t["train"]["steps"]} x {t["train"]["batch_size"]} |
| held-out loss, structured (masked) | {t["heldout_structured_loss"]:.3f} nats |
| held-out loss, code | {t["heldout_code_loss"]:.3f} nats |
| train seconds | {t["train_seconds"]:.1f} |

**Fork rate** (greedy root, up to {card["spec"]["eval_new_tokens"]} tokens, held-out
prompts): structured {a["structured"]["fork_rate"]:.2f} ({a["structured"]["mean_forks"]:.1f}
forks each, {a["structured"]["prompts"]} prompts), unstructured
{a["unstructured"]["fork_rate"]:.2f} ({a["unstructured"]["prompts"]} prompts). With the fork
token banned, the first item's detail follows it inline on
{a["structured"]["banned_inline_rate"]:.2f} of the structured prompts.

**Data.** Half of the training rows: {s["lists_train"]} numbered lists of the Python
{card["python_version"]} standard library's public functions, classes and methods with the
first paragraph of their docstrings (read with `ast`), as 1 + k causal sequences each
({s["train_sequences"]} sequences), and {s["inline_sequences"]} of the lists (of those short
enough to fit a row whole) also written sequentially with the details inline
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
