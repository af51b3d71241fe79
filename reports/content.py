"""What a report holds, independent of how it is rendered (HTML or Markdown)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]  # already formatted cells, one list per row
    note: str = ""
    text_columns: int = 1  # leading columns holding text (left-aligned); the rest are numbers


@dataclass
class FigureImage:
    name: str  # file stem of the PNG written beside report.md
    title: str
    png: bytes
    caption: str = ""


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]  # (label, value) lines under the title
    tables: list[Table] = field(default_factory=list)
    figures: list[FigureImage] = field(default_factory=list)
