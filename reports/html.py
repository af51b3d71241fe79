"""A self-contained HTML page: inline CSS, figures embedded as base64 PNG, text escaped.

Warnings come first, then the headline tables and comparison figures (the answer), the
detail tables and the per-run figures. A run's id is the tooltip of its row name."""

from __future__ import annotations

import base64
from html import escape

from reports.content import FigureImage, Report, Table

CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1320px;
       padding: 0 1.5em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { font-weight: 600; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f2f2f2; } .text { text-align: left; }
.scroll { overflow-x: auto; } .note { color: #555; font-size: 0.85em; }
figure { margin: 1em 0; } figure img { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.85em; }
.warnings { background: #fff4e5; border-left: 4px solid #e8890c; padding: 0.4em 1em; }
.warnings li { margin: 0.3em 0; }
td[title] { cursor: help; text-decoration: underline dotted #999; }
"""


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(report.title)}</h1>",
        _facts(report.facts),
        _warnings(report.warnings),
        *(_table(table) for table in report.headline),
        *(_figure(figure) for figure in report.figures),
        *(_table(table) for table in report.tables),
        *(_figure(figure) for figure in report.detail_figures),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _facts(facts: list[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return f'<dl class="facts">{items}</dl>'


def _warnings(warnings: list[str]) -> str:
    if not warnings:
        return ""
    items = "".join(f"<li>{escape(w)}</li>" for w in warnings)
    return f'<h2>Warnings</h2>\n<div class="warnings"><ul>{items}</ul></div>'


def _table(table: Table) -> str:
    def cells(tag: str, values: list[str], title: str = "") -> str:
        out = []
        for i, value in enumerate(values):
            attrs = " class=text" if i < table.text_columns else ""
            if i == 0 and title:
                attrs += f' title="{escape(title)}"'
            out.append(f"<{tag}{attrs}>{escape(value)}</{tag}>")
        return "".join(out)

    head = cells("th", table.headers)
    titles = table.row_titles or [""] * len(table.rows)
    body = "\n".join(
        f"<tr>{cells('td', row, title)}</tr>" for row, title in zip(table.rows, titles, strict=True)
    )
    note = f'<p class="note">{escape(table.note)}</p>' if table.note else ""
    return (
        f'<h2>{escape(table.title)}</h2>\n<div class="scroll"><table><thead><tr>{head}</tr>'
        f"</thead>\n<tbody>\n{body}\n</tbody></table></div>{note}"
    )


def _figure(figure: FigureImage) -> str:
    data = base64.b64encode(figure.png).decode("ascii")
    caption = f"<figcaption>{escape(figure.caption)}</figcaption>" if figure.caption else ""
    return (
        f'<h2>{escape(figure.title)}</h2>\n<figure><img alt="{escape(figure.title)}" '
        f'width="{figure.width_px}" src="data:image/png;base64,{data}">{caption}</figure>'
    )
