"""The terminal's layout of a section's blocks (dynscope._render.sections): tables through
tabulate, entries as indented lines wrapped to a width. Pure: blocks in, lines out."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from tabulate import tabulate

if TYPE_CHECKING:
    from dynscope._render.sections import Entry, Field, Listing, Table

__all__ = ["entry_lines", "flagged", "listing_lines", "table_text"]


def table_text(table: Table) -> str:
    """The table's terminal columns through tabulate ("simple")."""
    columns, rows = table.view("text")
    return tabulate(rows, headers=[c.header for c in columns], tablefmt="simple")


def entry_lines(entry: Entry, width: int = 100) -> list[str]:
    """An entry as its title, its line, then one indented line (or wrapped lines) per field;
    folded fields are the page's alone (a terminal shows no folds)."""
    lines = [entry.title, f"    {entry.line}"]
    for f in entry.fields:
        lines += _field_lines(f, width)
    return lines


def _field_lines(f: Field, width: int) -> list[str]:
    said = f"{f.label}: {f.text}" if f.label else f.text
    if f.kind == "folded":
        return []
    if f.kind == "pre":
        return ["      " + ln for ln in f.text.splitlines()]
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
