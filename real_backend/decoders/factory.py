"""Build the scenario's decoder over a loaded target model and its cache."""

from __future__ import annotations

from pathlib import Path

from real_backend.decoders.base import Decoder
from real_backend.decoders.drafter import Drafter
from real_backend.decoders.speculative import SpeculativeDecoder
from real_backend.decoders.vanilla import VanillaDecoder
from real_backend.kv_cache import PagedKVCache
from real_backend.model.loading import load_checkpoint
from real_backend.model.transformer import Transformer
from workbench.errors import WorkbenchError
from workbench.scenario.decoders import (
    AparDecoderConfig,
    DecoderConfig,
    LookaheadDecoderConfig,
    SpeculativeDecoderConfig,
    VanillaDecoderConfig,
)


def build_decoder(
    config: DecoderConfig,
    model: Transformer,
    cache: PagedKVCache,
    draft: Path | Transformer | None = None,  # a checkpoint folder, or a draft loaded once
    checkpoint: Path | None = None,  # the target's folder (APAR reads its fork tokens there)
) -> Decoder:
    if isinstance(config, VanillaDecoderConfig):
        return VanillaDecoder(model, cache, config)
    if isinstance(config, SpeculativeDecoderConfig):
        if draft is None:
            raise WorkbenchError("speculative decoding needs a draft model", field="decoder.draft")
        _check_verifiable(config, model)
        if not isinstance(draft, Transformer):
            draft = load_draft(draft, model)
        draft_cache = draft.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft, draft_cache, config), config)
    if isinstance(config, LookaheadDecoderConfig):
        from real_backend.decoders.lookahead import LookaheadDecoder

        return LookaheadDecoder(model, cache, config)
    if isinstance(config, AparDecoderConfig):
        from real_backend.decoders.apar import AparDecoder, fork_tokens

        if checkpoint is None:
            raise WorkbenchError("APAR needs the model's checkpoint folder", field="model")
        return AparDecoder(model, cache, config, fork_tokens(checkpoint, config))
    raise WorkbenchError(f"unknown decoder {config.kind!r}", field="decoder.kind")


def _check_verifiable(config: SpeculativeDecoderConfig, model: Transformer) -> None:
    """Refuse, before any step, drafts larger than the verification kernel takes."""
    kernels = model.kernel_set()
    limit = kernels.max_tree_nodes
    if limit is not None and config.max_draft_tokens + 1 > limit:
        field = "decoder.num_speculative_tokens" if config.tree is None else "decoder.tree"
        raise WorkbenchError(
            f"the {kernels.name} verification kernel takes at most {limit - 1} drafted tokens "
            f"per step, this decoder drafts up to {config.max_draft_tokens}",
            field=field,
        )


def load_draft(folder: Path, target: Transformer) -> Transformer:
    """The draft on the target's device and dtype; it must share the target's vocabulary."""
    weight = target.embed_tokens.weight
    draft = load_checkpoint(folder, weight.dtype, weight.device)
    draft.use_kernels(target.kernel_choice)
    if draft.args.vocab_size != target.args.vocab_size:
        raise WorkbenchError(
            f"the draft in {folder} has a vocabulary of {draft.args.vocab_size} tokens, the target "
            f"{target.args.vocab_size}: a draft must share the target's tokenizer",
            field="decoder.draft",
        )
    return draft
