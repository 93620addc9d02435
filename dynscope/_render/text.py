"""Terminal rendering of a Report: the summary's layout (tables, wrapping, sections).
Pure: model in, text out. The sections both views show are built once
(dynscope._render.sections) and laid out here by dynscope._render.section_text; what it
says in words it shares with the page (dynscope._render.words)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from dynscope._errors import InputError
from dynscope._format import (
    ADD_UP_TOLERANCE,
    clip,
    location,
    plural,
)
from dynscope._lexicon.wording import resume_label
from dynscope._model.order import program_order  # the one ordering, shared with the picture
from dynscope._render import graph_tables, sections
from dynscope._render.blocks import Entry, Group, Listing, Section, Table
from dynscope._render.section_text import entry_lines, flagged, group_lines, listing_lines, table_text
from dynscope._render.terminal import BAD, GOOD, PLAIN, TITLE, WARNING, Line, joined, lines_of
from dynscope._render.words import (
    CRASH_WORDS,
    advice_title,
    breaks_title_pieces,
    timing_doubts,
    totals_pieces,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

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


def id_ranges(ids: Sequence[int]) -> str:
    """"0, 2, 5-9": graph ids in order, runs of consecutive ids as ranges."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def graphs_table(rep: Report) -> str:
    """The table of captured graphs (dynscope._render.graph_tables.graphs)."""
    return table_text(graph_tables.graphs(rep))


def graph_timing_lines(rep: Report) -> list[str]:
    """One line per doubt about a graph's timing (first mode): failures, numerics, noise."""
    out: list[str] = []
    # One line per doubt: said of several graphs at once when it holds for them all (a
    # model of 14 small graphs gets one "both under 50 us" line, not 13).
    doubts: dict[str, list[tuple[int, str]]] = {}
    same: dict[tuple[str, tuple[object, ...]], list[Graph]] = {}
    for g in rep.graphs:
        if g.timing is not None:
            for i, (text, shared) in enumerate(timing_doubts(g.timing)):
                doubts.setdefault(shared or f"graph {g.id} #{i}", []).append((g.id, text))
            if g.code and not g.timing.failed:
                same.setdefault((g.code, g.inputs), []).append(g)
    for shared, held in doubts.items():
        if len(held) == 1:
            out.append(f"graph {held[0][0]}: {held[0][1]}")
        else:
            out.append(f"{len(held)} graphs ({id_ranges([gid for gid, _ in held])}): {shared}")
    # The same code on the same inputs cannot truly run at two speeds: a spread between
    # them is what the measurement is worth.
    for twins in same.values():
        ratios = [g.timing.speedup for g in twins if g.timing is not None]
        if len(twins) > 1 and min(ratios) > 0 and max(ratios) > min(ratios) * (1 + ADD_UP_TOLERANCE):
            ids = ", ".join(str(g.id) for g in twins)
            shown = ", ".join(f"{r:.2f}x" for r in ratios)
            out.append(
                f"graphs {ids} are the same code on the same inputs yet timed at {shown}: "
                f"the difference is measurement noise, and no one of these figures is firmer than that"
            )
    return out


def breaks_text(section: Section, *, width: int = 100) -> str:
    """The breaks section's table, then each site's entry."""
    lines: list[str] = []
    for block in section.blocks:
        if isinstance(block, Table):
            lines.append(table_text(block))
        elif isinstance(block, Entry):
            lines += ["", *entry_lines(block, width)]
    return "\n".join(lines)


def program_line(rep: Report) -> str:
    """The program in execution order, one arrow per step: each frame's graphs (a
    recompiled frame lists every variant) or "eager" for a frame Dynamo gave up on, then
    the breaks it hits."""
    graph_ids = {g.compile_id: g.id for g in rep.graphs}
    frames = {f.compile_id: f for f in rep.frames}
    steps = []
    for group, ends in program_order(rep):
        ids = [str(graph_ids[c]) for cids in group for c in cids if c in graph_ids]
        name = resume_label(frames[group[0][0]].function) or "?"
        if ids:
            steps.append(f"graph {' | '.join(ids)} {name}")
        elif any(frames[c].status == "failed" for cids in group for c in cids):
            steps.append(f"eager {name}")  # Dynamo gave up on the frame
        # A frame with nothing to compile and no break is left out: the picture shows it.
        steps.extend(f"BREAK {rep.breaks[i].location}" for i in ends)
    return " -> ".join(["call", *steps])


def recompiles_section(rep: Report, *, width: int = 100) -> str:
    """Recompiles grouped by function and cause, each with its fix and what PyTorch said
    (the section's groups: dynscope._render.sections.recompiles)."""
    return "\n".join(line for group in sections.recompiles(rep).blocks if isinstance(group, Group)
                     for line in group_lines(group, width))


def advice_section(trials: Sequence[Trial], *, width: int = 100, empty: str = "") -> str:
    """"What each fix buys": one row per remedy (the order given: best first), then each
    remedy's code to add, its targets, and why it failed or what else to know. With no
    trials, why none was tried (``empty``, from ``Advice.note``) instead of an empty table."""
    if not trials:
        said = empty or "no remedy to try: no break site or recompile here has one dynscope knows how to try."
        return "\n".join(textwrap.wrap(f"What each fix buys: {said}", width, subsequent_indent="    "))
    lines: list[str] = []
    for block in sections.advice(trials).blocks:
        if isinstance(block, Table):
            lines.append(table_text(block))
        elif isinstance(block, Group):
            lines += ["", *group_lines(block, width)]
    return "\n".join(lines)


def compile_time_section(rep: Report) -> str:
    """Compile time: the user's compile (the header's figure) split by part and by phase, and
    apart from it, dynscope's own measurement builds."""
    section = sections.compile_time(rep)
    return "\n".join([section.lead, *(line for n in section.notes for line in wrap_figures(n))])


_FIGURE = re.compile(r"(\d) (s|ms|us|ns)\b")


def wrap_figures(text: str, width: int = 100) -> list[str]:
    """``text`` wrapped as an indented detail line, never between a figure and its unit
    ("3.60" at the end of one line, "s" on the next)."""
    kept = _FIGURE.sub("\\1\x00\\2", text)
    lines = textwrap.wrap(kept, width, initial_indent="    ", subsequent_indent="      ")
    return [line.replace("\x00", " ") for line in lines]


def memory_section(rep: Report) -> list[Line]:
    """The summary's "Memory" part: the whole call's peaks, then each graph's, those
    compile grew most first; [] when memory was not measured."""
    section = sections.memory(rep)
    if section is None:
        return []
    out = lines_of(section.title, TITLE)
    if section.lead:
        out += lines_of(f"    {section.lead}")
    for table in section.blocks:
        if isinstance(table, Table):
            out += lines_of("\n".join([table_text(table), *(f"    {n}" for n in table.notes)]))
    return [*out, *_warnings(flagged(section.notes)), _BLANK]


def coverage_lines(rep: Report) -> list[Line]:
    """The summary's "Coverage" line (a title) and its eager sites (the first few); [] when
    coverage was not measured."""
    section = sections.coverage(rep)
    if section is None:
        return []
    out = [f"{section.title}: {section.lead}"]
    for listing in section.blocks:
        if isinstance(listing, Listing):
            out += listing_lines(listing)
    return [*lines_of(out[0], TITLE), *_plain([*out[1:], *(f"    {n}" for n in section.notes)]), _BLANK]


def guards_line(rep: Report) -> str:
    """One line: how many guards, on how many compiles, of which kinds (most first)."""
    kinds: dict[str, int] = {}
    for g in rep.guards:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {n}" for k, n in top[:5]) + (", ..." if len(top) > 5 else "")
    compiles = len({g.compile_id for g in rep.guards})
    return f"{plural(len(rep.guards), 'guard')} on {plural(compiles, 'compile')}: {shown}"


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


def below_dynamo_section(rep: Report) -> list[Line]:
    """The summary's lines on Inductor's work: top kernels of the program, compile time
    per phase with cache results, saved-for-backward bytes; [] when no graph was lowered."""
    section = sections.below_dynamo(rep)
    if section is None:
        return []
    lowered = [g for g in rep.graphs if g.lowering is not None]
    body: list[str] = []
    top = graph_tables.top_kernels(rep)
    if top.rows:
        body += [table_text(top), *(f"    {n}" for n in top.notes)]
    else:
        body.append("    kernels not timed (dynscope.report(..., timing=True) times them)")
    body += [line for n in section.notes for line in wrap_figures(n)]
    notes = flagged([f"graph {g.id}: {n}" for g in lowered if g.lowering is not None for n in g.lowering.notes])
    return [*lines_of(section.title, TITLE), *_plain(body), *_warnings(notes), _BLANK]


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


def _pieces(pieces: Sequence[tuple[str, bool]], tone: str = PLAIN) -> Line:
    """A line made of pieces marked bad news or not."""
    return Line(tuple((text, BAD if bad else PLAIN) for text, bad in pieces), tone)


def render_summary(rep: Report, *, color: bool = False) -> str:
    """The whole terminal summary. Deterministic for a given report.

    Args:
        rep: the report.
        color: add ANSI colour from each line's tone (dynscope._render.terminal); the text is
            otherwise the same.
    """
    return joined(summary_lines(rep), color=color).rstrip() + "\n"


def summary_lines(rep: Report) -> list[Line]:
    """The terminal summary as lines, each piece with the tone it is coloured by."""
    title = f"dynscope report: {rep.title}" if rep.title else "dynscope report"
    breaks = sections.breaks(rep)
    out = [_title(title), *lines_of("=" * len(title)), _pieces(totals_pieces(rep))]
    if rep.breaks:
        out += lines_of(breaks.lead)
    out.append(_BLANK)
    warnings = sections.warnings(rep)
    if warnings is not None:
        out += [_title(warnings.title), *_warnings([f"    ! {w}" for w in warnings.notes]), _BLANK]
    out += [_title(f"Graphs ({rep.graph_count})"), *lines_of(graphs_table(rep) if rep.graphs else "(none captured)")]
    out += [*_warnings(flagged(graph_timing_lines(rep))), _BLANK]
    if rep.breaks or rep.recompiles:
        out.append(_title("Program (in execution order)"))
        out += _plain(textwrap.wrap(program_line(rep), 100, initial_indent="    ", subsequent_indent="      ",
                                    break_on_hyphens=False))
        out.append(_BLANK)
    if rep.breaks:
        out += [_pieces(breaks_title_pieces(rep), TITLE), *lines_of(breaks_text(breaks)), _BLANK]
    else:
        out += [*lines_of("Graph breaks: none", GOOD), _BLANK]
    if rep.recompiles:
        out += [_title(f"Recompiles ({rep.recompile_count})", bad=True), *lines_of(recompiles_section(rep)), _BLANK]
    if rep.trials:
        out += [_title(advice_title(rep.trials)), *lines_of(advice_section(rep.trials)), _BLANK]
    crashed = [f for f in rep.frames if f.status == "crashed"]
    if crashed:
        out.append(_title("The compile that raised into your program"))
        out += _plain(textwrap.wrap(CRASH_WORDS, 100, initial_indent="    ", subsequent_indent="    "))
        out += _plain([f"    {f.compile_id} {f.function} ({location(f.filename, f.lineno)}): {clip(f.fail_summary, 80)}"
                       for f in crashed])
        out.append(_BLANK)
    failed = [f for f in rep.frames if f.status == "failed"]
    if failed:
        out.append(_title("Frames that fell back to eager", bad=True))
        out += _plain([f"    {f.compile_id} {f.function} ({location(f.filename, f.lineno)}): {clip(f.fail_summary, 80)}"
                       for f in failed])
        out.append(_BLANK)
    if rep.guards:
        out += [_title("Guards"), *lines_of("    " + guards_line(rep)), _BLANK]
    out += coverage_lines(rep)
    if rep.timing:
        timed = sections.end_to_end(rep)
        assert timed is not None
        out += [_title(timed.title), *_plain([table_text(t) for t in timed.blocks if isinstance(t, Table)]),
                *_warnings(flagged(timed.notes)), _BLANK]
    out += memory_section(rep)
    out += below_dynamo_section(rep)
    out += [_title("Compile time"), *lines_of(compile_time_section(rep))]
    return out
