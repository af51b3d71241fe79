"""Markdown: pipe tables and links to the PNG files written beside report.md."""

from __future__ import annotations

from reports.content import FigureImage, Report, Table


def render_markdown(report: Report) -> str:
    lines = [f"# {_inline(report.title)}", ""]
    lines += [f"- **{_inline(k)}**: {_inline(v)}" for k, v in report.facts]
    if report.warnings:
        lines += ["", "## Warnings", ""]
        lines += [f"- {_inline(warning)}" for warning in report.warnings]
    for table in report.headline:
        lines += ["", *_table(table)]
    for figure in report.figures:
        lines += ["", *_figure(figure)]
    for table in report.tables:
        lines += ["", *_table(table)]
    for figure in report.detail_figures:
        lines += ["", *_figure(figure)]
    return "\n".join(lines) + "\n"


def _inline(text: str) -> str:
    """One line, with the characters that would break a table cell or markup escaped."""
    text = " ".join(str(text).split())
    for char in ("\\", "|", "`", "<", ">"):
        text = text.replace(char, "\\" + char)
    return text


def _table(table: Table) -> list[str]:
    lines = [f"## {_inline(table.title)}", ""]
    lines.append("| " + " | ".join(_inline(h) for h in table.headers) + " |")
    align = ["---" if i < table.text_columns else "---:" for i in range(len(table.headers))]
    lines.append("|" + "|".join(align) + "|")
    lines += ["| " + " | ".join(_inline(cell) for cell in row) + " |" for row in table.rows]
    if table.note:
        lines += ["", f"_{_inline(table.note)}_"]
    return lines


def _figure(figure: FigureImage) -> list[str]:
    lines = [f"## {_inline(figure.title)}", "", f"![{_inline(figure.title)}]({figure.name}.png)"]
    if figure.caption:
        lines += ["", _inline(figure.caption)]
    return lines
