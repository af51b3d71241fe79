"""A model's tokenizer for prompts, without torch: the ids transformers would give the model.

Reads a Hugging Face tokenizer folder with the `tokenizers` library: `tokenizer.json`, and
beside it `tokenizer_config.json` (special tokens, `chat_template`), `chat_template.jinja`
(transformers >= 4.47 saves the template there; it wins over the config's entry, as in
transformers) and `special_tokens_map.json` (fills special tokens the config lacks).

- With a chat template: the rendered text is encoded *without* adding special tokens, as
  `AutoTokenizer.apply_chat_template(tokenize=True)` does; the template writes BOS itself.
- Without one: `tokenizer.json`'s post-processor adds BOS (or not), as `AutoTokenizer(text)`
  does. transformers >= 5 ignores `add_bos_token` in the config when a tokenizer.json is
  there, so it is not read here either.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from tokenizers import Tokenizer

from workbench.errors import WorkbenchError
from workbench.workload.chat_template import render_user_prompt

TOKENIZER_FILE = "tokenizer.json"
SIDE_FILES = ("tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")
SPECIAL_TOKEN_KEYS = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip


@dataclass(frozen=True)
class PromptTokenizer:
    tokenizer: Tokenizer
    chat_template: str | None  # None: the folder has no chat template
    special_tokens: dict[str, str]  # template variables: bos_token, eos_token, ...
    source: Path  # the tokenizer.json, for error messages

    def encode(self, texts: list[str], *, use_chat_template: bool) -> list[list[int]]:
        """Token ids of each text as a user prompt (templated when asked and available)."""
        if use_chat_template and self.chat_template is not None:
            rendered = [self._render(text) for text in texts]
            encodings = self.tokenizer.encode_batch(rendered, add_special_tokens=False)
        else:
            encodings = self.tokenizer.encode_batch(texts, add_special_tokens=True)
        return [e.ids for e in encodings]

    def _render(self, text: str) -> str:
        assert self.chat_template is not None
        try:
            return render_user_prompt(self.chat_template, text, self.special_tokens)
        except jinja2.TemplateError as exc:
            raise WorkbenchError(
                f"the chat template failed: {exc}", source=str(self.source), field="chat_template"
            ) from None


def load_prompt_tokenizer(path: Path, *, field: str) -> PromptTokenizer:
    """The tokenizer of a folder, or of a tokenizer.json file and the files beside it."""
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise WorkbenchError(
            f"no {TOKENIZER_FILE} in {path}: needed to tokenize prompts", field=field
        )
    versions = tuple(_mtime_ns(file.parent / name) for name in SIDE_FILES)
    return _load_cached(str(file), file.stat().st_mtime_ns, versions)


def _mtime_ns(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.is_file() else None


@functools.lru_cache(maxsize=4)
def _load_cached(
    path: str, mtime_ns: int, side_versions: tuple[int | None, ...]
) -> PromptTokenizer:
    """Parsed once per process (a sweep tokenizes at every point); edited files are reread."""
    file = Path(path)
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust library raises plain Exception subclasses
        raise WorkbenchError(f"not a tokenizers file ({exc})", source=str(file)) from None
    folder = file.parent
    config = _read_json(folder / "tokenizer_config.json")
    return PromptTokenizer(
        tokenizer=tokenizer,
        chat_template=_chat_template(folder, config),
        special_tokens=_special_tokens(config, _read_json(folder / "special_tokens_map.json")),
        source=file,
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WorkbenchError(f"malformed JSON ({exc})", source=str(path)) from None
    if not isinstance(data, dict):
        raise WorkbenchError("expected a JSON object", source=str(path))
    return data


def _chat_template(folder: Path, config: dict[str, Any]) -> str | None:
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return template
    # A list of named templates: transformers uses the one named "default".
    named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(named.get("default"), str):
        return named["default"]
    raise WorkbenchError(
        f"chat_template has no template named 'default' (has {sorted(map(str, named))})",
        source=str(folder / "tokenizer_config.json"),
        field="chat_template",
    )


def _special_tokens(config: dict[str, Any], legacy_map: dict[str, Any]) -> dict[str, str]:
    tokens = {}
    for key in SPECIAL_TOKEN_KEYS:
        value = config.get(key, legacy_map.get(key))
        if isinstance(value, dict):  # a serialised AddedToken
            value = value.get("content")
        if isinstance(value, str):
            tokens[key] = value
    return tokens
