"""A self-contained HTML page: inline CSS, figures embedded as base64 PNG, text escaped."""

from __future__ import annotations

import base64
from html import escape

from reports.content import FigureImage, Report, Table

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.facts dt { font-weight: 600; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f2f2f2; } .text { text-align: left; }
.scroll { overflow-x: auto; } .note { color: #555; font-size: 0.85em; }
figure { margin: 1em 0; } figure img { max-width: 100%; }
figcaption { color: #555; font-size: 0.85em; }
"""


def render_html(report: Report) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(report.title)}</h1>",
        _facts(report.facts),
        *(_table(table) for table in report.tables),
        *(_figure(figure) for figure in report.figures),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


def _facts(facts: list[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return f'<dl class="facts">{items}</dl>'


def _table(table: Table) -> str:
    def cells(tag: str, values: list[str]) -> str:
        return "".join(
            f"<{tag}{' class=text' if i < table.text_columns else ''}>{escape(v)}</{tag}>"
            for i, v in enumerate(values)
        )

    head = cells("th", table.headers)
    body = "\n".join(f"<tr>{cells('td', row)}</tr>" for row in table.rows)
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
        f'src="data:image/png;base64,{data}">{caption}</figure>'
    )
