"""Tokenizer folders for prompt tests: the zoo `tiny` tokenizer, with or without a template.

The tokenizer is the zoo's own (`train_tokenizer` on the stdlib corpus with the `tiny`
spec), trained in about a second with the `tokenizers` library alone; no torch needed.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import Tokenizer, processors

from real_backend.zoo.corpus import build_corpus
from real_backend.zoo.specs import get_spec
from real_backend.zoo.tokenizer import BOS, EOS, PAD, train_tokenizer

# Llama-2-chat style: BOS written by the template, roles checked with raise_exception.
LLAMA2_TEMPLATE = (
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('roles must alternate user/assistant') }}{% endif %}"
    "{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + message['content'] | trim + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] | trim + ' ' + eos_token }}{% endif %}"
    "{% endfor %}"
)
# ChatML style over several lines: exercises trim_blocks / lstrip_blocks and the
# {% generation %} block; no BOS.
CHATML_TEMPLATE = """{% for message in messages %}
    {% if loop.first and message['role'] != 'system' %}
<|im_start|>system
You are a helpful assistant.<|im_end|>
    {% endif %}
<|im_start|>{{ message['role'] }}
{{ message['content'] }}<|im_end|>
{% endfor %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% generation %}{% endgeneration %}
{% endif %}"""
# JSON messages: exercises the tojson filter (non-ASCII kept) and a BOS from the template.
TOJSON_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m | tojson }}{% endfor %}>"


@functools.lru_cache(maxsize=1)
def zoo_tiny_tokenizer_json() -> str:
    spec = get_spec("tiny")
    corpus = build_corpus(spec.train_bytes, spec.heldout_bytes)
    return train_tokenizer(corpus.train, spec.vocab_size).to_str()


def tokenizer_folder(
    folder: Path,
    *,
    chat_template: str | None = None,
    template_file: bool = False,
    bos_post_processor: bool = False,
) -> Path:
    """tokenizer.json + tokenizer_config.json; the template in the config or in
    chat_template.jinja; optionally a post-processor that adds BOS (as Llama's does)."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_str(zoo_tiny_tokenizer_json())
    if bos_post_processor:
        bos_id = tok.token_to_id(BOS)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
        )
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None and template_file:
        (folder / "chat_template.jinja").write_text(chat_template)
    elif chat_template is not None:
        config["chat_template"] = chat_template
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return folder
