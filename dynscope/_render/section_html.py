"""The page's layout of a section's blocks (dynscope._render.sections): tables, entries with
their code excerpt, lists. Pure: blocks in, markup out; every string from the report is
escaped here, on its way into markup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._render.html_parts import esc, html_table, safe_url

if TYPE_CHECKING:
    from dynscope._render.sections import Column, Entry, Field, Listing, Table

__all__ = ["capital", "entry_html", "listing_html", "notes_html", "table_html"]


def capital(text: str) -> str:
    """``text`` with its first letter upper case (a sentence or a label opening a paragraph)."""
    return text[:1].upper() + text[1:]


def _cell(column: Column, value: object) -> str:
    text = esc(value)
    if column.style == "code":
        return f"<code>{text}</code>"
    if column.style == "cat":
        return f"<span class=cat>{text}</span>"
    if column.style == "graph":  # a graph's id, linked to its section
        return f'<a href="#graph-{text}">{text}</a>'
    return text


def table_html(table: Table, attrs: str = "") -> str:
    """The table's page columns, each cell escaped and marked up by its column's style;
    ``attrs`` (dynscope's own) go on the <table> tag."""
    columns, rows = table.view("html")
    return html_table(
        [esc(c.header) for c in columns], ([_cell(c, v) for c, v in zip(columns, row, strict=True)] for row in rows),
        attrs,
    )


def entry_html(entry: Entry) -> str:
    """An entry as a heading (with its anchor), its code excerpt (the line itself marked),
    then a paragraph per field."""
    lines = []
    for n, text in entry.excerpt:
        cls = ' class="hit"' if n == entry.hit else ""
        lines.append(f"<span{cls}>{n:5d}  {esc(text)}</span>")
    return (
        f'<h3 id="{esc(entry.anchor)}">{esc(entry.title)}</h3>'
        '<pre class="excerpt">' + "\n".join(lines) + "</pre>" + "".join(_field_html(f) for f in entry.fields)
    )


def _field_html(f: Field) -> str:
    text = esc(f.text)
    if f.kind == "pre":
        return f'<pre class="detail">{text}</pre>'
    if f.kind == "folded":
        return f"<details><summary>{esc(f.label)}</summary><pre>{text}</pre></details>"
    if f.kind == "link":  # links from data are https or nothing
        url = safe_url(f.text)
        return f'<p><a href="{esc(url)}" rel="noopener noreferrer">{esc(f.words or f.text)}</a></p>' if url else ""
    if f.kind == "code":
        text = f"<code>{text}</code>"
    return f"<p><b>{esc(capital(f.label))}:</b> {text}</p>" if f.label else f"<p>{text}</p>"


def listing_html(listing: Listing) -> str:
    """Every item of the listing, in one paragraph."""
    return f"<p>{esc(capital(listing.label))}: {esc(', '.join(listing.items))}</p>"


def notes_html(notes: list[str] | tuple[str, ...], cls: str = "warn") -> str:
    """Notes as a list (class ``cls``); "" when there are none."""
    items = "".join(f"<li>{esc(n)}</li>" for n in notes)
    if not items:
        return ""
    return f'<ul class="{cls}">{items}</ul>' if cls else f"<ul>{items}</ul>"
