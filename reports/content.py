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
    row_titles: list[str] = field(default_factory=list)  # per row: the first cell's tooltip


@dataclass
class FigureImage:
    name: str  # file stem of the PNG written beside report.md
    title: str
    png: bytes  # rendered at FIGURE_DPI: sharp on high-density screens
    caption: str = ""
    width_px: int = 700  # the width it is shown at (CSS pixels)


@dataclass
class Report:
    title: str
    facts: list[tuple[str, str]]  # (label, value) lines under the title
    warnings: list[str] = field(default_factory=list)  # results not to trust as they are
    headline: list[Table] = field(default_factory=list)  # the answer: shown first
    figures: list[FigureImage] = field(default_factory=list)  # then the comparisons
    tables: list[Table] = field(default_factory=list)  # the details
    detail_figures: list[FigureImage] = field(default_factory=list)  # per run, last

    @property
    def all_figures(self) -> list[FigureImage]:
        return [*self.figures, *self.detail_figures]
