"""Terminal rendering of a Report: the summary's layout (tables, wrapping, sections).
Pure: model in, text out. The sections both views show are built once
(dynscope._render.sections) and laid out here by dynscope._render.section_text; what it
says in words it shares with the page (dynscope._render.words)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from dynscope._errors import InputError
from dynscope._format import FIGURE_GAP
from dynscope._render import graph_tables, sections
from dynscope._render.blocks import Entry, Group, Listing, Phrase, Section, Table
from dynscope._render.section_text import (
    entry_lines,
    flagged,
    group_lines,
    listing_lines,
    section_lines,
    table_text,
)
from dynscope._render.terminal import BAD, GOOD, PLAIN, TITLE, WARNING, Line, joined, lines_of

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dynscope._model import Graph, Report, Trial

# Terminal control sequences: CSI (ESC [ ... final byte, or the one-byte C1 CSI), OSC, DCS,
# SOS, PM and APC strings (up to BEL or ST), other two-byte ESC sequences; then any C0/C1
# control left over (tab and newline excepted) and DEL.
_CONTROL = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -~]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"
)


def strip_controls(text: str) -> str:
    """``text`` without terminal control sequences, for printing data to a terminal.

    A report's strings come from user code and from PyTorch; printed raw, an escape
    sequence in one (a file name, a break reason) could recolour, move the cursor, set the
    window title or hide lines. Newlines and tabs stay; everything else C0/C1 goes.
    """
    return _CONTROL.sub("", text)


def breaks_text(section: Section, *, width: int = 100) -> str:
    """The breaks section's table, then each site's entry."""
    lines: list[str] = []
    for block in section.blocks:
        if isinstance(block, Table):
            lines.append(table_text(block))
        elif isinstance(block, Entry):
            lines += ["", *entry_lines(block, width)]
    return "\n".join(lines)


def _group_text(section: Section, width: int = 100) -> str:
    """A section of groups (the recompiles), each group's lines one after the other."""
    return "\n".join(line for group in section.blocks if isinstance(group, Group) for line in group_lines(group, width))


def advice_section(trials: Sequence[Trial], *, width: int = 100, empty: str = "") -> str:
    """"What each fix buys": one row per remedy (the order given: best first), then each
    remedy's code to add, its targets, and why it failed or what else to know. With no
    trials, the section's title and why none was tried (``empty``, from ``Advice.note``)
    instead of an empty table."""
    section = sections.advice(trials, empty)
    if not section.blocks:
        return "\n".join(textwrap.wrap(f"{section.title}: {section.empty}", width, subsequent_indent="    "))
    return _advice_text(section, width)


def _advice_text(section: Section, width: int = 100) -> str:
    lines: list[str] = []
    for block in section.blocks:
        if isinstance(block, Table):
            lines.append(table_text(block))
        elif isinstance(block, Group):
            lines += ["", *group_lines(block, width)]
    return "\n".join(lines)


def _compile_time_text(section: Section) -> str:
    return "\n".join([section.lead, *(line for n in section.notes for line in wrap_figures(n))])


def wrap_figures(text: str, width: int = 100) -> list[str]:
    """``text`` wrapped as an indented detail line. Its figures were joined to their units by
    FIGURE_GAP where they were said, so no line ends in "3.60" with "s" on the next; written
    here as plain spaces."""
    lines = textwrap.wrap(text, width, initial_indent="    ", subsequent_indent="      ")
    return [line.replace(FIGURE_GAP, " ") for line in lines]


def _memory(rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    """The summary's "Memory" part: the whole call's peaks, then each graph's, those
    compile grew most first."""
    out = lines_of(section.title, TITLE)
    if section.lead:
        out += lines_of(f"    {section.lead}")
    for table in section.blocks:
        if isinstance(table, Table):
            out += lines_of("\n".join([table_text(table), *(f"    {n}" for n in table.notes)]))
    return [*out, *_warnings(flagged(section.notes)), _BLANK]


def _coverage(rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    """The summary's "Coverage" line (a title) and its eager sites (the first few)."""
    out = [f"{section.title}: {section.lead}"]
    for listing in section.blocks:
        if isinstance(listing, Listing):
            out += listing_lines(listing)
    return [*lines_of(out[0], TITLE), *_plain([*out[1:], *(f"    {n}" for n in section.notes)]), _BLANK]


# -- below Dynamo: Inductor's kernels, compile phases, caches ---------------------------


def kernels_table(graph: Graph) -> str:
    """Every kernel of ``graph``'s lowering, slowest first, then a row for the profiled
    time spent outside kernels (wrapper code, allocation, launches).

    Raises:
        InputError: the graph has no lowering (it did not go through Inductor).
    """
    low = graph.lowering
    if low is None:
        raise InputError(
            f"graph {graph.id} has no lowering: only graphs compiled by Inductor have kernels; "
            "use dynscope.report(..., timing=True) or inner='inductor'"
        )
    return table_text(graph_tables.kernels(graph, low))


def _below_dynamo(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    """The summary's lines on Inductor's work: the program's costliest kernels (or that none
    was timed), compile time per phase with cache results and saved-for-backward bytes (the
    notes, figures kept with their units), then each graph's doubts about its lowering, flagged."""
    body: list[str] = []
    doubts: list[str] = []
    for block in section.blocks:
        if isinstance(block, Table):
            body += [table_text(block), *(f"    {n}" for n in block.notes)]
        elif isinstance(block, Phrase):
            body.append(f"    {block.text}")
        elif isinstance(block, Listing):
            doubts += flagged(block.items)
    body += [line for n in section.notes for line in wrap_figures(n)]
    return [*lines_of(section.title, TITLE), *_plain(body), *_warnings(doubts), _BLANK]


_BLANK = Line()


def _plain(texts: Sequence[str]) -> list[Line]:
    """Lines without a tone; a text may hold several lines (a table)."""
    return [line for t in texts for line in lines_of(t)]


def _warnings(texts: Sequence[str]) -> list[Line]:
    """"!" notes (and their wrapped lines), in the warning tone."""
    return [line for t in texts for line in lines_of(t, WARNING)]


def _title(text: str, *, bad: bool = False) -> Line:
    """A section title; ``bad``: the whole title is bad news (red inside the bold)."""
    return Line(((text, BAD if bad else PLAIN),), TITLE)


def _marked(phrase: Phrase, tone: str = PLAIN) -> Line:
    """A line of pieces, each painted by the tone it was made with."""
    return Line(tuple((text, BAD if mark == "bad" else PLAIN) for text, mark in phrase.pieces), tone)


def render_summary(rep: Report, *, color: bool = False) -> str:
    """The whole terminal summary. Deterministic for a given report.

    Args:
        rep: the report.
        color: add ANSI colour from each line's tone (dynscope._render.terminal); the text is
            otherwise the same.
    """
    return joined(summary_lines(rep), color=color).rstrip() + "\n"


def summary_lines(rep: Report) -> list[Line]:
    """The terminal summary as lines, each piece with the tone it is coloured by: the
    report's parts (dynscope._render.sections.document) in their order, each laid out by its
    key's layout here, or as a titled section (:func:`_section`)."""
    doc = sections.document(rep)
    by_key = {part.key: part for part in doc}
    return [line for part in doc for line in _LAYOUTS.get(part.key, _section)(rep, part, by_key)]


def _section(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    """A part as a title (red when its news is bad) over its body; nothing when it is empty."""
    if not (section.blocks or section.lead):
        return []
    return [_title(section.title, bad=section.tone == "bad"), *_plain(section_lines(section)), _BLANK]


def _header(_rep: Report, section: Section, doc: Mapping[str, Section]) -> list[Line]:
    """The title underlined, the totals, and the break site to fix first (the breaks' lead)."""
    totals = [_marked(b) for b in section.blocks if isinstance(b, Phrase)]
    lead = doc["breaks"].lead
    return [_title(section.title), *lines_of("=" * len(section.title)), *totals, *(lines_of(lead) if lead else []),
            _BLANK]


def _read_first(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    return [_title(section.title), *_warnings([f"    ! {w}" for w in section.notes]), _BLANK]


def _graphs(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    """The table of graphs (with each graph's first timing in its terminal columns), then the
    doubts about their timing; each graph's timing per mode (the groups) is the page's."""
    tables = [table_text(t) for t in section.blocks if isinstance(t, Table) and t.rows]
    return [_title(section.title), *_plain(tables or [section.empty]), *_warnings(flagged(section.notes)), _BLANK]


def _program(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    if not section.lead:
        return []
    steps = textwrap.wrap(section.lead, 100, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
    return [_title(section.title), *_plain(steps), _BLANK]


def _breaks(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    if not section.blocks:  # good news, said in one green line: the section's own words
        return [*lines_of(section.empty, GOOD), _BLANK]
    assert section.marked is not None
    return [_marked(section.marked, TITLE), *lines_of(breaks_text(section)), _BLANK]


def _recompiles(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    if not section.blocks:
        return []
    return [_title(section.title, bad=True), *lines_of(_group_text(section)), _BLANK]


def _advice(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    return [_title(section.title), *lines_of(_advice_text(section)), _BLANK]


def _timing(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    return [_title(section.title), *_plain([table_text(t) for t in section.blocks if isinstance(t, Table)]),
            *_warnings(flagged(section.notes)), _BLANK]


def _compile_time(_rep: Report, section: Section, _doc: Mapping[str, Section]) -> list[Line]:
    return [_title(section.title), *lines_of(_compile_time_text(section))]


#: How the terminal lays out a part, by its key; a part not named here is a titled section.
_LAYOUTS: dict[str, Callable[[Report, Section, Mapping[str, Section]], list[Line]]] = {
    "header": _header, "warnings": _read_first, "graphs": _graphs, "program": _program, "breaks": _breaks,
    "recompiles": _recompiles, "advice": _advice, "coverage": _coverage, "timing": _timing, "memory": _memory,
    "below-dynamo": _below_dynamo, "compile-time": _compile_time,
}
