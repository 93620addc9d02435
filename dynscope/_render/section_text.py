"""The terminal's layout of a section's blocks (dynscope._render.blocks): tables through
tabulate, entries and groups as indented lines wrapped to a width. Pure: blocks in, lines out."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from tabulate import tabulate

from dynscope._format import amount, clip, few
from dynscope._render.blocks import Amount, Cell, Entry, Group, Items, Listing, Table

if TYPE_CHECKING:
    from dynscope._render.blocks import Column, Field, Section

__all__ = ["entry_lines", "flagged", "group_lines", "listing_lines", "said_lines", "section_lines", "table_text"]


def _text_cell(column: Column, value: object) -> object:
    # Numbers stay numbers (tabulate aligns them); a Cell is its words.
    if isinstance(value, Cell):
        value = value.text
    elif isinstance(value, Amount):
        value = amount(value.value, value.unit)
    elif isinstance(value, Items):
        value = few(value.names, value.shown)
    elif column.style == "notes" and isinstance(value, tuple):
        value = "; ".join(value)
    return clip(str(value), column.clip) if column.clip else value


def said_lines(table: Table, indent: str = "    ") -> list[str]:
    """Each row said as its sentence (``table.said``), indented by ``indent``, its cells
    clipped as their columns say."""
    columns, rows = table.view("text")
    return [indent + table.said.format(*(_text_cell(c, v) for c, v in zip(columns, row, strict=True))) for row in rows]


def section_lines(section: Section, width: int = 100, *, said_indent: str = "    ") -> list[str]:
    """A section's body under its title: the lead (indented, wrapped unless flat), then its
    blocks (a table said as sentences where it says so, each indented by ``said_indent``,
    else drawn; a group folded on the page is left out: its lead said it), then its notes."""
    lines = []
    if section.lead:
        if section.lead_kind == "flat":
            lines.append(f"    {section.lead}")
        else:
            lines += textwrap.wrap(section.lead, width, initial_indent="    ", subsequent_indent="    ")
    for block in section.blocks:
        if isinstance(block, Table):
            lines += said_lines(block, said_indent) if block.said and block.said_in in ("", "text") else [table_text(block)]
            if block.limit and len(block.rows) > block.limit and block.rest:
                lines.append(f"    {block.rest}")  # a short table says what it left out
        elif isinstance(block, Listing):
            lines += _bullets(block, width)
        elif isinstance(block, Group) and not block.folded:
            lines += group_lines(block, width)
        elif isinstance(block, Entry):
            lines += entry_lines(block, width)
    return lines + flagged(section.notes, width)


def table_text(table: Table) -> str:
    """The table's terminal columns through tabulate ("simple"), its first ``limit`` rows."""
    columns, rows = table.view("text")
    if table.limit:
        rows = rows[: table.limit]
    body = [[_text_cell(c, v) for c, v in zip(columns, row, strict=True)] for row in rows]
    return tabulate(body, headers=[c.header for c in columns], tablefmt="simple")


def entry_lines(entry: Entry, width: int = 100) -> list[str]:
    """An entry as its title, its line, then one indented line (or wrapped lines) per field;
    folded fields are the page's alone (a terminal shows no folds)."""
    lines = [entry.title, f"    {entry.line}"]
    for f in entry.fields:
        lines += _field_lines(f, width)
    return lines


def group_lines(group: Group, width: int = 100) -> list[str]:
    """A group as its title, its fields indented under it (program text kept as it is, at
    the fields' own indent), then its listings and tables, each shortened to its limit."""
    lines = [group.title] if group.title else []  # a group of one untitled field is that field alone
    for f in group.fields:
        lines += _field_lines(f, width, pre="    ")
    for block in group.blocks:
        lines += _bullets(block, width) if isinstance(block, Listing) else _nested_table(block)
    return lines


def _bullets(listing: Listing, width: int) -> list[str]:
    if listing.style == "labelled":
        return listing_lines(listing)
    lines = [f"    {listing.label}:"] if listing.label and listing.items else []
    pad = "      " if listing.label else "    "
    for item in listing.items[: listing.limit]:
        lines += textwrap.wrap(f"- {item}", width, initial_indent=pad, subsequent_indent=pad + "  ")
    if len(listing.items) > listing.limit:
        lines.append(pad + listing.rest)
    return lines


def _nested_table(table: Table) -> list[str]:
    if not table.rows:
        return []
    lines = [f"    {table.title}:"] if table.title else []
    lines += ["      " + ln for ln in table_text(table).splitlines()]
    if table.limit and len(table.rows) > table.limit:
        lines.append(f"      {table.rest}")
    return lines + [f"      {n}" for n in table.notes]


def _field_lines(f: Field, width: int, pre: str = "      ") -> list[str]:
    said = f"{f.label}: {f.text}" if f.label else f.text
    if f.kind == "folded":
        return []
    if f.kind == "pre":
        return [pre + ln for ln in f.text.splitlines()]
    if f.kind in ("flat", "link"):  # one line: an address or a figure list is never broken
        return [f"    {said}"]
    # Program text (a call chain's "a.py:3 in f -> b.py:9 in g") breaks at spaces only.
    return textwrap.wrap(
        said, width, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=f.kind != "code"
    )


def listing_lines(listing: Listing) -> list[str]:
    """The first ``listing.limit`` items, one "    label: item" line each, then the rest said."""
    lines = [f"    {listing.label}: {item}" for item in listing.items[: listing.limit]]
    if len(listing.items) > listing.limit:
        lines.append(f"    {listing.label}: {listing.rest}")
    return lines


def flagged(notes: list[str] | tuple[str, ...], width: int = 100) -> list[str]:
    """Each note as "    ! ...", wrapped to ``width``."""
    return [
        line for n in notes for line in textwrap.wrap(n, width, initial_indent="    ! ", subsequent_indent="      ")
    ]
