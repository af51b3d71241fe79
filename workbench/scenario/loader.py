"""Load a scenario YAML: parse, apply overrides, validate, resolve paths; errors as one line."""

from __future__ import annotations

import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from workbench.errors import WorkbenchError
from workbench.scenario.scenario import Scenario


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read, override (`dotted.path=value`), validate and resolve a scenario file."""
    path = Path(path)
    data = read_yaml(path)
    for item in overrides or []:
        apply_override(data, item, source=str(path))
    return validate_scenario(data, source=str(path), base_dir=path.parent)


def read_yaml(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise WorkbenchError(
            "a folder, not a file: expected a scenario YAML file", source=str(path)
        )
    if not path.is_file():
        raise WorkbenchError("file not found", source=str(path))
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)
    except DuplicateKey as exc:
        raise WorkbenchError(str(exc), source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise WorkbenchError(f"not a UTF-8 text file ({exc.reason})", source=str(path)) from None
    except OSError as exc:
        raise WorkbenchError(f"cannot read ({exc.strerror})", source=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise WorkbenchError(f"{where}malformed YAML ({problem})", source=str(path)) from None
    if not isinstance(data, dict):
        raise WorkbenchError(
            "expected a mapping of scenario fields at the top level", source=str(path)
        )
    return data


class DuplicateKey(Exception):
    """A mapping names the same key twice."""


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (the plain loader
    keeps the last value silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(f"key {key!r} appears twice (lines {seen[key]} and {line})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def apply_override(data: dict[str, Any], item: str, *, source: str) -> None:
    """Set `a.b.c=value` in nested dicts; the value is parsed as YAML (numbers, lists...)."""
    if "=" not in item:
        raise WorkbenchError(f"--set expects dotted.path=value, got {item!r}", source=source)
    dotted, raw = item.split("=", 1)
    dotted = dotted.strip()
    if not dotted or "" in dotted.split("."):
        raise WorkbenchError(f"--set expects dotted.path=value, got {item!r}", source=source)
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise WorkbenchError(
            f"--set {dotted}: the value {raw!r} is not valid YAML ({problem})", source=source
        ) from None
    set_dotted(data, dotted, value, source=source)


def set_dotted(data: dict[str, Any], dotted: str, value: Any, *, source: str) -> None:
    keys = dotted.split(".")
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            where = ".".join(keys[: i + 1])
            raise WorkbenchError(f"cannot set {dotted}: {where} is not a mapping", source=source)
        node = child
    node[keys[-1]] = value


def validate_scenario(data: dict[str, Any], *, source: str, base_dir: Path) -> Scenario:
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, data, source) from None
    _resolve_paths(scenario, base_dir, source=source, prefix="")
    return scenario


# ------------------------------------------------------------------ error formatting


def _first_error(exc: ValidationError, data: dict[str, Any], source: str) -> WorkbenchError:
    errors = exc.errors(include_url=False)
    # An unknown key is usually a typo, and the cause of any "missing" error beside it.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = _data_path(err["loc"], data)
    dotted = ".".join(str(p) for p in loc)
    if err["type"] == "extra_forbidden":
        return WorkbenchError(_unknown_key_message(loc, data), source=source, field=dotted)
    if err["type"] == "union_tag_invalid":
        expected = err.get("ctx", {}).get("expected_tags", "")
        got = err.get("ctx", {}).get("tag")
        return WorkbenchError(
            f"unknown kind {got!r}; expected one of {expected}",
            source=source,
            field=f"{dotted}.kind",
        )
    if err["type"] == "union_tag_not_found":
        kinds = ", ".join(repr(k) for k in _union_kinds(loc, data))
        expected = f"; expected one of {kinds}" if kinds else ""
        return WorkbenchError(
            f"missing `kind` (selects the variant){expected}", source=source, field=dotted
        )
    if err["type"] == "missing":
        about = _field_description(loc, data)
        about = f" ({about.rstrip('.')})" if about else ""
        return WorkbenchError(f"required field is missing{about}", source=source, field=dotted)
    message = err["msg"]
    if "input" in err and not isinstance(err["input"], dict):
        message += f", got {err['input']!r}"
    return WorkbenchError(_expected(message), source=source, field=dotted or None)


def _expected(msg: str) -> str:
    msg = msg.replace("Value error, ", "")
    if msg == "Field required":
        return "required field is missing"
    if msg.startswith("Input should be "):
        rest = msg.removeprefix("Input should be ")
        comparative = rest.startswith(("greater", "less"))
        return "expected " + ("a value " if comparative else "") + rest
    return msg


def _data_path(loc: tuple[Any, ...], data: Any) -> list[Any]:
    """Pydantic locations include union tags (`kind` values); keep only real data keys."""
    path: list[Any] = []
    node = data
    for part in loc:
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and part < len(node)
        ):
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and node.get("kind") == part:
            continue  # a discriminated-union tag, not a key
        else:
            path.append(part)
            node = None
    return path


def _unknown_key_message(loc: list[Any], data: dict[str, Any]) -> str:
    known = _known_fields(loc[:-1], data)
    bad = str(loc[-1])
    close = difflib.get_close_matches(bad, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    listing = f" (known: {', '.join(sorted(known))})" if known and not close else ""
    return f"unknown key{hint}{listing}"


def _known_fields(parent: list[Any], data: dict[str, Any]) -> list[str]:
    model = _model_at(parent, data)
    return list(model.model_fields) if model is not None else []


def _field_description(loc: list[Any], data: dict[str, Any]) -> str:
    model = _model_at(loc[:-1], data)
    field = model.model_fields.get(str(loc[-1])) if model is not None and loc else None
    return (field.description or "") if field is not None else ""


def _union_kinds(loc: list[Any], data: dict[str, Any]) -> list[str]:
    """The `kind` values a discriminated-union field at `loc` accepts."""
    model = _model_at(loc[:-1], data)
    field = model.model_fields.get(str(loc[-1])) if model is not None and loc else None
    if field is None:
        return []
    kinds = []
    for candidate in _flatten(field.annotation):
        tag = getattr(candidate, "model_fields", {}).get("kind")
        if tag is not None:
            kinds.extend(typing.get_args(tag.annotation))
    return kinds


def _model_at(path: list[Any], data: dict[str, Any]) -> type[BaseModel] | None:
    """The model that validates the mapping at `path` (None when it cannot be told)."""
    model: Any = Scenario
    node: Any = data
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
        model = _field_model(model, str(part), node)
        if model is None:
            return None
    return model


def _field_model(model: type[BaseModel], name: str, node: Any) -> type[BaseModel] | None:
    field = model.model_fields.get(name)
    if field is None:
        return None
    candidates = [c for c in _flatten(field.annotation) if isinstance(c, type)]
    models = [c for c in candidates if issubclass(c, BaseModel)]
    if len(models) == 1:
        return models[0]
    kind = node.get("kind") if isinstance(node, dict) else None
    for m in models:
        tag = m.model_fields.get("kind")
        if tag is not None and kind in typing.get_args(tag.annotation):
            return m
    return None


def _flatten(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _flatten(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [x for a in typing.get_args(annotation) for x in _flatten(a)]
    return [annotation]


# ------------------------------------------------------------------ paths


def _resolve_paths(model: BaseModel, base_dir: Path, *, source: str, prefix: str) -> None:
    """Make relative file paths absolute (against the scenario's folder) and check they exist."""
    for name in type(model).model_fields:
        value = getattr(model, name)
        dotted = f"{prefix}{name}"
        if isinstance(value, Path):
            resolved = value if value.is_absolute() else (base_dir / value).resolve()
            if not resolved.exists():
                raise WorkbenchError(f"file not found: {value}", source=source, field=dotted)
            object.__setattr__(model, name, resolved)
        elif isinstance(value, BaseModel):
            _resolve_paths(value, base_dir, source=source, prefix=f"{dotted}.")
