"""Build the scenario's decoder over a loaded target model and its cache."""

from __future__ import annotations

from pathlib import Path

from real_backend.decoders.apar import AparDecoder, ForkTokens, branch_drafter, fork_tokens
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
        draft_model = _draft_model(config, model, draft)
        draft_cache = draft_model.new_cache(cache.allocator.num_blocks, cache.block_size)
        return SpeculativeDecoder(model, cache, Drafter(draft_model, draft_cache, config), config)
    if isinstance(config, LookaheadDecoderConfig):
        from real_backend.decoders.lookahead import LookaheadDecoder

        return LookaheadDecoder(model, cache, config)
    if isinstance(config, AparDecoderConfig):
        if checkpoint is None:
            raise WorkbenchError("APAR needs the model's checkpoint folder", field="model")
        tokens = fork_tokens(checkpoint, config)
        speculative = config.speculative_config()
        drafter = None
        if speculative is not None:
            field = "decoder.speculative.draft"
            if isinstance(draft, Path):
                check_draft_fork_tokens(draft, config, tokens, field)
            drafter = branch_drafter(_draft_model(speculative, model, draft, field), cache, config)
        return AparDecoder(model, cache, config, tokens, drafter)
    raise WorkbenchError(f"unknown decoder {config.kind!r}", field="decoder.kind")


def _draft_model(
    config: SpeculativeDecoderConfig,
    model: Transformer,
    draft: Path | Transformer | None,
    field: str = "decoder.draft",
) -> Transformer:
    """The draft model, checked against the target and the verification kernel."""
    if draft is None:
        raise WorkbenchError("speculative decoding needs a draft model", field=field)
    _check_verifiable(config, model, field.removesuffix(".draft"))
    return draft if isinstance(draft, Transformer) else load_draft(draft, model, field)


def check_draft_fork_tokens(
    folder: Path, config: AparDecoderConfig, target: ForkTokens, field: str
) -> None:
    """An APAR draft must number the fork and child tokens as the target does."""
    try:
        ids = fork_tokens(folder, config)
    except WorkbenchError as exc:
        raise WorkbenchError(f"the draft: {exc.detail}", field=field) from None
    if ids != target:
        raise WorkbenchError(
            f"the draft in {folder} numbers {config.fork_token} and {config.child_token} "
            f"{ids.fork} and {ids.child}, the target {target.fork} and {target.child}: a draft "
            "must share the target's tokenizer",
            field=field,
        )


def _check_verifiable(
    config: SpeculativeDecoderConfig, model: Transformer, section: str = "decoder"
) -> None:
    """Refuse, before any step, drafts larger than the verification kernel takes."""
    kernels = model.kernel_set()
    limit = kernels.max_tree_nodes
    if limit is not None and config.max_draft_tokens + 1 > limit:
        field = f"{section}.num_speculative_tokens" if config.tree is None else f"{section}.tree"
        raise WorkbenchError(
            f"the {kernels.name} verification kernel takes at most {limit - 1} drafted tokens "
            f"per step, this decoder drafts up to {config.max_draft_tokens}",
            field=field,
        )


def load_draft(folder: Path, target: Transformer, field: str = "decoder.draft") -> Transformer:
    """The draft on the target's device and dtype; it must share the target's vocabulary."""
    weight = target.embed_tokens.weight
    draft = load_checkpoint(folder, weight.dtype, weight.device)
    draft.use_kernels(target.kernel_choice)
    if draft.args.vocab_size != target.args.vocab_size:
        raise WorkbenchError(
            f"the draft in {folder} has a vocabulary of {draft.args.vocab_size} tokens, the target "
            f"{target.args.vocab_size}: a draft must share the target's tokenizer",
            field=field,
        )
    return draft
