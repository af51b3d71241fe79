"""The effective scenario as YAML with each field's description beside its value
(`workbench show --explain`)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel


def explain(model: BaseModel, indent: int = 0) -> list[str]:
    """YAML lines of `model`, each field followed by `# its description`."""
    pad = " " * indent
    data = model.model_dump(mode="json")
    lines = []
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        note = f"  # {_one_line(info.description)}" if info.description else ""
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:{note}")
            lines += explain(value, indent + 2)
        else:
            lines.append(f"{pad}{name}: {yaml_flow(data[name])}{note}")
    return lines


def yaml_flow(value: Any) -> str:
    """A value as one line of YAML flow style."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _one_line(text: str) -> str:
    return " ".join(text.split())
