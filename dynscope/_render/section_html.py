"""The page's layout of a section's blocks (dynscope._render.blocks): tables, entries with
their code excerpt, groups, lists. Pure: blocks in, markup out; every string from the report is
escaped here, on its way into markup."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import amount, few
from dynscope._render.blocks import Amount, Cell, Entry, Group, Items, Listing, Table
from dynscope._render.html_parts import esc, html_table, safe_url

if TYPE_CHECKING:
    from dynscope._render.blocks import Column, Field, Section, View

__all__ = [
    "capital", "entry_html", "folded_html", "group_html", "listing_html", "notes_html", "said_html", "section_html",
    "table_cells", "table_html",
]


def capital(text: str) -> str:
    """``text`` with its first letter upper case (a sentence or a label opening a paragraph)."""
    return text[:1].upper() + text[1:]


def _cell(column: Column, value: object, view: View) -> str:
    # The short view (the notebook card) stands alone: no part of a page to link to, and its
    # figures said short, as the terminal says them.
    linked = view != "short"
    if column.style == "notes":  # what to doubt about the row's figures, listed in it
        items = "".join(f"<li>{esc(n)}</li>" for n in value) if isinstance(value, tuple) else ""
        return f'<ul class="warn">{items}</ul>' if items else ""
    if isinstance(value, Amount):
        return esc(amount(value.value, value.unit, precise=linked))
    if isinstance(value, Items):
        listed = esc(few(value.names, 2 * value.shown))
        return f'<span title="{esc(value.hint)}">{listed}</span>' if value.hint and value.names else listed
    text = esc(value.text if isinstance(value, Cell) else value)
    if column.style == "code":
        text = f"<code>{text}</code>"
    elif column.style == "cat":
        text = f"<span class=cat>{text}</span>"
    elif column.style == "pre":
        text = f"<pre>{text}</pre>"
    elif column.style == "verdict" and text not in ("yes", "change your code"):
        text = f'<span class="warn">{text}</span>'  # a remedy that did not help is shown so, not hidden
    elif column.style == "graph" and linked:  # a graph's id, linked to its section
        text = f'<a href="#graph-{text}">{text}</a>'
    if isinstance(value, Cell) and value.hint:
        text = f'<span title="{esc(value.hint)}">{text}</span>'
    if isinstance(value, Cell) and value.href and linked:
        text = f'<a href="#{esc(value.href)}">{text}</a>'
    return text


def table_cells(table: Table, view: View = "html") -> tuple[list[str], list[list[str]]]:
    """The table's headers and every row's cells in ``view`` (the page's, or the card's
    "short": figures short, nothing linked), escaped and marked up by column style (for a
    table that adds columns of its own)."""
    columns, rows = table.view(view)
    cells = [[_cell(c, v, view) for c, v in zip(columns, row, strict=True)] for row in rows]
    return [esc(c.header) for c in columns], cells


def table_html(table: Table, attrs: str = "") -> str:
    """The table's page columns, every row, each cell escaped and marked up by its column's
    style; ``attrs`` (dynscope's own) go on the <table> tag."""
    headers, rows = table_cells(table)
    return html_table(headers, rows, attrs)


def said_html(table: Table) -> str:
    """Each row said as its sentence (``table.said``), an item of a list, its cells escaped
    and marked up by their columns' styles."""
    _, rows = table_cells(table)
    return "<ul>" + "".join(f"<li>{table.said.format(*row)}</li>" for row in rows) + "</ul>"


def folded_html(group: Group) -> str:
    """A folded group: its title as the summary; its tables (each with what it leaves out)
    and listings inside."""
    inner = []
    for block in group.blocks:
        if isinstance(block, Listing):
            inner.append(listing_html(block))
        else:
            inner.append(table_html(block) + (f"<p>{esc(block.rest)}</p>" if block.rest else ""))
    return f"<details><summary>{esc(group.title)}</summary>{''.join(inner)}</details>"


def section_html(section: Section, *, anchor: str = "", after_lead: str = "") -> str:
    """A section as the page shows it: its heading, its lead (or what it says when it has
    nothing), its blocks (a table said as sentences where the section says so for the page,
    else drawn; groups folded or headed), its notes. ``anchor``: the section's id on the
    page; ``after_lead``: markup the caller made (a picture) put after the lead."""
    opening = f'<section id="{esc(anchor)}">' if anchor else "<section>"
    out = [f"{opening}<h2>{esc(section.title)}</h2>"]
    if section.lead or not section.blocks and section.empty:
        out.append(f"<p>{esc(section.lead or section.empty)}</p>")
    out.append(after_lead)
    parts = []
    for block in section.blocks:
        if isinstance(block, Table):
            parts.append(said_html(block) if block.said and block.said_in in ("", "html") else table_html(block))
        elif isinstance(block, Listing):
            parts.append(listing_html(block))
        elif isinstance(block, Group):
            parts.append(folded_html(block) if block.folded else group_html(block))
        elif isinstance(block, Entry):
            parts.append(entry_html(block))
    return "".join(out) + "\n".join(parts) + notes_html(section.notes) + "</section>"


def group_html(group: Group) -> str:
    """A group as a heading (with its anchor), a paragraph per field, then each listing in
    full and each table with every row, under their own headings."""
    heading = f'<h3 id="{esc(group.anchor)}">{esc(group.title)}</h3>' if group.title else ""
    out = [heading, *(field_html(f) for f in group.fields)]
    for block in group.blocks:
        if isinstance(block, Listing):
            out.append(listing_html(block))
        elif block.rows:
            out.append((f"<h4>{esc(capital(block.title))}</h4>" if block.title else "") + table_html(block)
                       + notes_html(block.notes))
    return "".join(out)


def entry_html(entry: Entry) -> str:
    """An entry as a heading (with its anchor), its code excerpt (the line itself marked),
    then a paragraph per field."""
    lines = []
    for n, text in entry.excerpt:
        cls = ' class="hit"' if n == entry.hit else ""
        lines.append(f"<span{cls}>{n:5d}  {esc(text)}</span>")
    return (
        f'<h3 id="{esc(entry.anchor)}">{esc(entry.title)}</h3>'
        '<pre class="excerpt">' + "\n".join(lines) + "</pre>" + "".join(field_html(f) for f in entry.fields)
    )


def field_html(f: Field) -> str:
    """One field of an entry: a labelled paragraph, a block kept as it is, a link, a fold."""
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
    """Every item of the listing: in one paragraph after its label, or as a list under it."""
    if listing.style == "labelled":
        return f"<p>{esc(capital(listing.label))}: {esc(', '.join(listing.items))}</p>"
    if not listing.items:
        return ""
    items = "<ul>" + "".join(f"<li>{esc(x)}</li>" for x in listing.items) + "</ul>"
    return (f"<h4>{esc(capital(listing.label))}</h4>" if listing.label else "") + items


def notes_html(notes: list[str] | tuple[str, ...], cls: str = "warn") -> str:
    """Notes as a list (class ``cls``); "" when there are none."""
    items = "".join(f"<li>{esc(n)}</li>" for n in notes)
    if not items:
        return ""
    return f'<ul class="{cls}">{items}</ul>' if cls else f"<ul>{items}</ul>"
