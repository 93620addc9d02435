"""The blocks a report section is built of (dynscope._render.sections): tables, entries,
listings and groups, as plain frozen data. A section is built once from the model; the
terminal (dynscope._render.section_text) and the page (dynscope._render.section_html) each
lay the same blocks out, so the two views show the same rows and say the same words.

Pure data: nothing here reads a report or formats a figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Amount", "Block", "Cell", "Column", "Entry", "Field", "FieldKind", "Group", "Items", "Listing", "Phrase", "Section",
    "Table", "Tone", "Unit", "View",
]

#: Which view shows a column: both ("") or only the terminal or only the page; "short" is
#: the notebook card's (an HTML view of a few rows), which shows the columns marked ``short``.
View = Literal["", "text", "html", "short"]

#: What a section's title says of the news under it: "" none, "bad" (breaks, recompiles,
#: fallbacks: the terminal paints it red), "good" (nothing went wrong: green). Colour and
#: emphasis come from the tone given where the section is made, never from its words.
Tone = Literal["", "bad", "good"]


@dataclass(frozen=True)
class Cell:
    """A table cell with more to it on the page: ``href`` an anchor on the page (without
    "#") the cell links to, ``hint`` what the page shows on hover. The terminal shows the
    ``text`` alone."""

    text: str
    href: str = ""
    hint: str = ""
    # What the cell stands for where cells are compared across columns (a ranks' table marks
    # a row whose columns differ): the value itself, not its words; "" compares the text.
    key: str = ""

    def __str__(self) -> str:
        return self.text


#: What an :class:`Amount` measures: milliseconds, a share (0.5 is half), bytes.
Unit = Literal["ms", "share", "bytes"]


@dataclass(frozen=True)
class Amount:
    """A figure and its unit, as measured; each view says it its own way (the terminal short,
    "3.1 ms", "12%"; the page precise, "3.1416 ms", "12.3%"). ``value`` None: not measured."""

    value: float | None
    unit: Unit


@dataclass(frozen=True)
class Items:
    """A list of names (ops, nodes, source lines) in one cell: the terminal shows the first
    ``shown``, the page twice as many, each with "+k" for the rest; ``hint``: what the page
    shows on hover."""

    names: tuple[str, ...]
    shown: int = 3
    hint: str = ""


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`.

    ``style`` says what its cells are ("code": text from a program; "cat": a category tag;
    "graph": a graph id the page links to its section; "pre": lines kept as they are;
    "verdict": a remedy's verdict, marked on the page when it did not help; "notes": a tuple
    of doubts about the row, a list on the page); ``only`` names
    the one view that shows it, for a column too wide for a terminal or too terse for a
    page; ``clip``: the most characters the terminal shows of a cell (0: all); ``short``:
    whether a short view (the notebook card) shows it, whatever ``only`` says.
    """

    header: str
    style: str = ""
    only: View = ""
    clip: int = 0
    short: bool = True


@dataclass(frozen=True)
class Table:
    """Rows of cells under ``columns``; ``notes`` are what the rows need said about them.

    ``title``: the heading said above it inside a group ("" for none); ``limit``: the rows
    the terminal shows (0: all; the page shows them all), and ``rest`` says what it left out.
    ``said``: a few rows read better as sentences than as a grid: the sentence each row is
    said with (``str.format`` over its cells, "{0} {1} ({2}): {3}"), in the views ``said_in``
    names ("" both); each other view draws the grid.
    """

    columns: tuple[Column, ...]
    rows: tuple[tuple[object, ...], ...]
    notes: tuple[str, ...] = ()
    title: str = ""
    limit: int = 0
    rest: str = ""
    said: str = ""
    said_in: View = ""

    def view(self, name: View) -> tuple[list[Column], list[list[object]]]:
        """The columns ``name`` ("text", "html" or "short") shows, and each row's cells in them."""
        keep = [i for i, c in enumerate(self.columns) if (c.short if name == "short" else c.only in ("", name))]
        return [self.columns[i] for i in keep], [[row[i] for i in keep] for row in self.rows]


#: How a field is laid out: "line" (a sentence, wrapped), "flat" (one line, never wrapped),
#: "code" (program text: wrapped only at spaces; code markup), "pre" (kept line by line),
#: "link" (a documentation link), "folded" (long, on the page behind a summary only).
FieldKind = Literal["line", "flat", "code", "pre", "link", "folded"]


@dataclass(frozen=True)
class Field:
    """One labelled fact of an :class:`Entry` ("why", "fix"...; "" for a sentence that
    says what it is itself). ``words``: a link's words (its ``text`` is the address)."""

    label: str
    text: str
    kind: FieldKind = "line"
    words: str = ""


@dataclass(frozen=True)
class Entry:
    """One item told at length (a break site): a title, the program line it is about with
    the lines around it (``excerpt``, ``hit`` the line's number), then its fields."""

    anchor: str
    title: str
    line: str
    excerpt: tuple[tuple[int, str], ...]
    hit: int
    fields: tuple[Field, ...]


@dataclass(frozen=True)
class Listing:
    """Items of one kind ("eager: site x3"); a short view shows the first ``limit`` and
    then ``rest`` (said of those it leaves out); a long view shows them all.

    ``style``: "labelled" (each item after the label, "eager: site x3") or "bullets" (the
    items under ``label`` as a heading, or under nothing when it is "").
    """

    label: str
    items: tuple[str, ...]
    limit: int
    rest: str = ""
    style: Literal["labelled", "bullets"] = "labelled"


@dataclass(frozen=True)
class Group:
    """A titled part of a section told without a program line (one recompile cause, one
    remedy tried): its fields, then the listings and tables under it. ``folded``: on the
    page behind its title; the terminal, which shows no folds, leaves it out (the section's
    lead says what the folded groups hold, in one line)."""

    anchor: str
    title: str
    fields: tuple[Field, ...] = ()
    blocks: tuple[Listing | Table, ...] = ()
    folded: bool = False


@dataclass(frozen=True)
class Phrase:
    """A line said in pieces, each with its tone: a count that is bad news ("bad") is marked
    where it is made, so the terminal paints it and the card marks it without reading the
    words back."""

    pieces: tuple[tuple[str, Tone], ...]

    @property
    def text(self) -> str:
        """The words, without tones."""
        return "".join(text for text, _ in self.pieces)


Block = Table | Entry | Listing | Group | Phrase


@dataclass(frozen=True)
class Section:
    """A part of the report: its ``title``, the ``lead`` sentence read first, its blocks, and
    the ``notes`` said under them (what to read the figures with).

    ``key``: what the section is ("breaks", "guards"...), by which a view places it or lays it
    out its own way (the page puts the graphs last, beside each graph's own part); ``tone``:
    what its title says of the news under it; ``empty``: what a view that shows every part
    says in place of this one's blocks when it has none ("No guards recorded."); ``lead_kind``:
    how the lead is laid out ("flat": a list of figures kept on one line); ``marked``: the
    title in pieces when only part of it is news ("Graph breaks (5 events at 2 sites)", the
    events bad).
    """

    title: str
    blocks: tuple[Block, ...] = ()
    lead: str = ""
    notes: tuple[str, ...] = ()
    key: str = ""
    tone: Tone = ""
    empty: str = ""
    lead_kind: FieldKind = "line"
    marked: Phrase | None = None
