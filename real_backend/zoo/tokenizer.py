"""Byte-level BPE trained on the corpus, saved so ``AutoTokenizer.from_pretrained`` loads it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL = [BOS, EOS, PAD]  # ids 0, 1, 2


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, extra_special: Sequence[str] = ()
) -> Tokenizer:
    """extra_special: more special tokens after SPECIAL (APAR's fork and child tokens)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL, *extra_special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return tok


def save_tokenizer(
    tok: Tokenizer, folder: Path, model_max_length: int, extra_special: Sequence[str] = ()
) -> None:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        additional_special_tokens=list(extra_special),
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    folder.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(folder)
    special = folder / "special_tokens_map.json"
    if not special.exists():  # transformers 5 folds it into tokenizer_config.json
        import json

        special.write_text(
            json.dumps({"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}, indent=2) + "\n"
        )


def encode_documents(tok: Tokenizer, texts: Sequence[str]) -> list[int]:
    """One stream: ``<|bos|> doc <|eos|>`` for each document, in order."""
    bos, eos = tok.token_to_id(BOS), tok.token_to_id(EOS)
    stream: list[int] = []
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        stream.append(bos)
        stream.extend(enc.ids)
        stream.append(eos)
    return stream
