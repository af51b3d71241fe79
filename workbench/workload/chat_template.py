"""Render a Hugging Face chat template (Jinja) for one user message, as transformers does.

Chat templates from checkpoints are untrusted code: they run in Jinja's immutable sandbox.
The environment mirrors transformers' `apply_chat_template`: `trim_blocks`,
`lstrip_blocks`, loop controls, a `tojson` that keeps non-ASCII text, `raise_exception`,
`strftime_now`, and the `{% generation %}` block (which only marks assistant text for
training masks, so here it renders as its body).
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _GenerationBlock(Extension):
    tags = {"generation"}  # noqa: RUF012 (jinja's own class attribute)

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body).set_lineno(lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@functools.lru_cache(maxsize=8)
def _compile(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def render_user_prompt(template: str, text: str, special_tokens: dict[str, str]) -> str:
    """The template applied to one user message, with the assistant's turn opened.

    `special_tokens` (bos_token, eos_token, ...) are template variables, as transformers
    passes them. Raises jinja2.TemplateError on a broken template (the caller names the file).
    """
    return _compile(template).render(
        messages=[{"role": "user", "content": text}],
        add_generation_prompt=True,
        **special_tokens,
    )
