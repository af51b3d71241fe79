"""A speculative chain's verification against the calibration probe that prices it (opt-in).

The calibrated cost model prices a speculative step's target share from the grid's verify
probes (`real_backend/calibration/verify_probe.py`). This times, interleaved in one process
on a zoo target with a batch of sequences at a fixed context, the target's work of one
verification step (forward, acceptance, roll-back; no draft model) as:

- `decoder`: the speculative decoder's calls now (as `SpeculativeDecoder.decode_with` makes
  them after drafting: a chain on the causal path, accepted by `greedy_decisions` without
  parents; the drafter and the settling of the caches left out);
- `probe`: `VerifyWidthProbe.decode` itself (the same calls on copies of the newest token);
- `decoder_before` / `probe_before`: both as they were before 2026-11-27 (evening): the
  decoder sent its chain with explicit parents (the tree-mask path) and walked each
  sequence's tree in Python; the probe ran the causal forward and took each row's argmax
  (their inputs built at once, a little cheaper than the code of the day did: the gaps
  before are, if anything, understated).

Printed: medians per batch size, the decoder over the probe (before and now) and the
decoder now over before.

    python benchmarks/verify_probe_match.py [--zoo small] [--rounds 200] [--batch 1 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn.utils.rnn import pad_sequence

from kernels.verification import chain_parents, greedy_verify
from real_backend.calibration.verify_probe import VerifyWidthProbe
from real_backend.decoders.acceptance import greedy_decisions
from real_backend.decoders.base import DecodeRequest
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import SeqStep, Transformer
from real_backend.zoo.build import cache_root

ROOT = 7  # the newest token of every sequence (any id: timing only)
WARM_ROUNDS = 10


class Bench:
    def __init__(self, model: Transformer, batch: int, context: int, width: int) -> None:
        self.model, self.batch, self.context, self.width = model, batch, context, width
        gen = torch.Generator().manual_seed(0)
        self.cache = model.new_cache(batch * (context // 16 + 4) + 8, 16)
        vocab = model.args.vocab_size
        for b in range(batch):
            prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
            model.step(self.cache, [SeqStep(b, prompt)], last_only=True)
        self.drafts = [
            torch.randint(0, vocab, (width,), generator=gen).tolist() for _ in range(batch)
        ]
        self.verify_probe = VerifyWidthProbe(model, self.cache, width)
        prompt_ends = [ROOT] * 2  # a request's last token is the root, the rest is in the cache
        self.requests = [
            DecodeRequest(b, prompt_ends, max_new=64, generator=torch.Generator())
            for b in range(batch)
        ]

    def _roll_back(self) -> None:
        for b in range(self.batch):
            self.cache.truncate(b, self.context)

    def decoder(self) -> None:
        steps = [SeqStep(b, [ROOT, *d]) for b, d in enumerate(self.drafts)]
        logits = self.model.step(self.cache, steps)  # B × (1 + width, V)
        greedy_decisions(self.model.kernel_set(), self.drafts, logits, None)
        self._roll_back()

    def probe(self) -> None:
        self.verify_probe.decode(self.requests)  # keeps the root, as a step would
        self._roll_back()

    def decoder_before(self) -> None:
        parents = list(range(-1, self.width))  # a chain given as a tree
        steps = [SeqStep(b, [ROOT, *d], parents) for b, d in enumerate(self.drafts)]
        padded = pad_sequence(self.model.step(self.cache, steps), batch_first=True)
        lens = torch.full((self.batch,), self.width)
        tree = chain_parents(self.batch, self.width + 1).clone()  # walked sequence by sequence
        greedy_verify(padded, torch.tensor(self.drafts), lens, tree)[2].tolist()
        self._roll_back()

    def probe_before(self) -> None:
        steps = [SeqStep(b, [ROOT] * (1 + self.width)) for b in range(self.batch)]
        for rows in self.model.step(self.cache, steps):
            int(torch.argmax(rows[0]))
        self._roll_back()


def medians_ms(bench: Bench, rounds: int) -> dict[str, float]:
    """Each variant's median over `rounds`, the order reversed every other round."""
    variants: list[Callable[[], None]] = [
        bench.decoder_before,
        bench.decoder,
        bench.probe_before,
        bench.probe,
    ]
    times: dict[str, list[float]] = {v.__name__: [] for v in variants}
    for r in range(WARM_ROUNDS + rounds):
        for variant in variants if r % 2 == 0 else variants[::-1]:
            start = time.perf_counter()
            variant()
            if r >= WARM_ROUNDS:
                times[variant.__name__].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(ts) for name, ts in times.items()}


def comparison(ms: dict[str, float]) -> str:
    def ratio(a: str, b: str) -> str:
        return f"{100 * (ms[a] / ms[b] - 1):+.1f}%"

    return (
        f"decoder over probe: before {ratio('decoder_before', 'probe_before')}, now "
        f"{ratio('decoder', 'probe')}; decoder now over before "
        f"{ratio('decoder', 'decoder_before')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", default="small")
    parser.add_argument("--zoo-dir", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = load_checkpoint(cache_root(args.zoo_dir) / args.zoo / "target")
    for batch in args.batch:
        ms = medians_ms(Bench(model, batch, args.context, args.width), args.rounds)
        print(
            f"batch {batch}, context {args.context}, width {args.width}, {args.rounds} rounds "
            "(medians, ms): " + ", ".join(f"{name} {v:.3f}" for name, v in ms.items())
        )
        print(f"  {comparison(ms)}")


if __name__ == "__main__":
    main()
