"""Each report section built once, as plain data: its title, its tables (columns, rows,
notes), its entries (one per break site...) and its sentences. The terminal summary
(dynscope._render.section_text) and the page (dynscope._render.section_html) lay the same
blocks out, so the two views of a section show the same rows and say the same words; the
layout (widths, wrapping, markup, folding) is each formatter's own.

Pure: model in, data out; every figure and phrase comes from the model or the phrasebook
(dynscope._render.words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dynscope._format import clip, human_bytes, location, ms, percent, plural
from dynscope._lexicon.wording import resume_label
from dynscope._render.figures import memory_order
from dynscope._render.words import (
    cache_text,
    call_chain_text,
    compile_parts,
    cost_text,
    end_to_end_lines,
    fix_first_line,
    gave_up_text,
    in_graphs_text,
    known_text,
    lowering_phase_lines,
    measurement_text,
    memory_methods,
    memory_notes,
    owner_text,
    phases_text,
    program_memory_line,
    samples_text,
    saved_text,
    warning_lines,
)

if TYPE_CHECKING:
    from dynscope._model import GraphBreak, Report

__all__ = [
    "MEMORY_HEADERS",
    "Column",
    "Entry",
    "Field",
    "Listing",
    "Section",
    "Table",
    "below_dynamo",
    "breaks",
    "compile_time",
    "end_to_end",
    "coverage",
    "memory",
    "memory_rows",
    "warnings",
]

#: Which view shows a column: both ("") or only the terminal or only the page.
View = Literal["", "text", "html"]


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`.

    ``style`` says what its cells are ("code": text from a program; "cat": a category tag;
    "graph": a graph id the page links to its section); ``only`` names the one view that
    shows it, for a column too wide for a terminal or too terse for a page.
    """

    header: str
    style: str = ""
    only: View = ""


@dataclass(frozen=True)
class Table:
    """Rows of cells under ``columns``; ``notes`` are what the rows need said about them."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[object, ...], ...]
    notes: tuple[str, ...] = ()

    def view(self, name: View) -> tuple[list[Column], list[list[object]]]:
        """The columns ``name`` ("text" or "html") shows, and each row's cells in them."""
        keep = [i for i, c in enumerate(self.columns) if c.only in ("", name)]
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
    then ``rest`` (said of those it leaves out); a long view shows them all."""

    label: str
    items: tuple[str, ...]
    limit: int
    rest: str = ""


Block = Table | Entry | Listing


@dataclass(frozen=True)
class Section:
    """A part of the report: its ``title``, the ``lead`` sentence read first, its blocks, and
    the ``notes`` said under them (what to read the figures with)."""

    title: str
    blocks: tuple[Block, ...] = ()
    lead: str = ""
    notes: tuple[str, ...] = ()


# -- graph breaks ---------------------------------------------------------------------------

_BREAK_COLUMNS = (
    Column("#"), Column("location", "code"), Column("category", "cat"), Column("count"), Column("graphs"),
    Column("recompiles"), Column("eager/call"),
    # The terminal has room for the line's code, the page for the whole reason.
    Column("code", only="text"), Column("reason", only="html"),
)


def breaks(rep: Report) -> Section:
    """The graph breaks: one row per site, the costliest first, then each site at length
    (reason, detail, call chain, cost, fix, PyTorch's hints and docs)."""
    ranked = rep.breaks_by_cost()
    rows = tuple(
        (i, b.location, b.category, b.count, known_text(b.graphs_split, str(b.graphs_split)),
         known_text(b.recompiles_caused, str(b.recompiles_caused)), known_text(b.eager_ms, ms(b.eager_ms)),
         clip(b.source, 40), b.reason)
        for i, b in enumerate(ranked, 1)
    )
    title = f"Graph breaks ({plural(rep.break_count, 'event')} at {plural(len(rep.breaks), 'site')})"
    if not ranked:
        return Section(title)
    entries = tuple(_break_entry(rep, i, b) for i, b in enumerate(ranked, 1))
    return Section(title, (Table(_BREAK_COLUMNS, rows), *entries), lead=fix_first_line(rep))


def _break_entry(rep: Report, i: int, b: GraphBreak) -> Entry:
    fields = [Field("why", b.reason)]
    if b.detail:
        fields.append(Field("", b.detail, "pre"))
    if len(b.call_chain) > 1:
        fields.append(Field("called from", call_chain_text(b), "code"))
    fields.append(Field("cost", cost_text(rep, b), "flat"))
    if b.gave_up:
        fields.append(Field("", gave_up_text(b)))
    if b.library:
        fields.append(Field("", owner_text(b)))
    fields.append(Field("fix", b.fix))
    # PyTorch's hints speak to whoever wrote the break ("Remove the graph_break() call"):
    # where torch or a library breaks on purpose they are not the user's to follow.
    fields += [Field("torch hint", hint) for hint in (b.hints if b.actionable else ())]
    if b.doc_url:
        fields.append(Field("docs", b.doc_url, "link", f"PyTorch documentation for {b.gb_id or b.gb_type}"))
    if b.torch_text:
        fields.append(Field("What PyTorch said", b.torch_text, "folded"))
    return Entry(
        anchor=f"break-{i}",
        title=f"[{i}] {location(b.filename, b.lineno, full=True)} in {b.function or '?'}",
        line=b.source,
        excerpt=b.excerpt or ((b.lineno, b.source),),
        hit=b.lineno,
        fields=tuple(fields),
    )


# -- coverage -------------------------------------------------------------------------------

#: Eager sites the short view lists (the JSON and the page list them all).
EAGER_SITES_SHOWN = 5


def coverage(rep: Report) -> Section | None:
    """Compile coverage: the share of the torch ops run inside graphs, the sites where torch
    ops ran eagerly (most first), and what is not counted; None when not measured."""
    c = rep.coverage
    if c is None:
        return None
    lead = (
        f"{percent(c.ratio, 1)} of the torch ops run were in graphs "
        f"(torch ops run: {c.ops_in_graphs} in graphs, {c.ops_eager} eagerly)"
    )
    rest = c.eager_sites[EAGER_SITES_SHOWN:]
    more = f"+{sum(n for _, n in rest)} more at {plural(len(rest), 'other site')} (all in the JSON and on the page)"
    blocks: list[Block] = []
    if c.eager_sites:
        blocks.append(Listing("eager", tuple(f"{site} x{n}" for site, n in c.eager_sites), EAGER_SITES_SHOWN, more))
    notes = (
        (f"not counted: {c.ops_dynamo} ops Dynamo ran to build graph arguments (its runtime, not your code)",)
        if c.ops_dynamo else ()
    )
    return Section("Coverage", tuple(blocks), lead=lead, notes=notes)


# -- memory ---------------------------------------------------------------------------------

MEMORY_HEADERS = ["graph", "frame", "run", "eager peak", "compiled peak", "ratio", "saved eager", "saved compiled",
                  "recomputed"]

#: The ``run`` of a training graph's forward+backward row (:func:`memory_rows`).
STEP_RUN = "fwd+bwd"


def _saved_cell(saved: int, count: int) -> str:
    return "-" if saved < 0 else f"{human_bytes(saved)} ({count})"


def _ratio_cell(eager: int, compiled: int) -> str:
    """"0.56x": compiled / eager; "1.00x" when neither allocates; "-" when only compiled does."""
    if eager > 0:
        return f"{compiled / eager:.2f}x"
    return "1.00x" if compiled == 0 else "-"


def memory_rows(rep: Report) -> list[list[str]]:
    """Rows of :data:`MEMORY_HEADERS`, the graphs that grew most first: one per graph, the
    forward; a training graph two, its forward and then its forward+backward step (both
    peaks are measured; the step's is the one the program makes). The saved tensors sit on
    the forward's row (the forward keeps them), the recomputed ops on the step's (the
    backward computes them)."""
    rows = []
    for g in memory_order(rep):
        m = g.memory
        assert m is not None
        who = [str(g.id), resume_label(g.frame)]
        if m.error:
            rows.append([*who, "-", "-", "-", "-", "-", "-", "not measured"])
            continue
        rows.append([
            *who, "forward", human_bytes(m.eager_peak), human_bytes(m.compiled_peak),
            _ratio_cell(m.eager_peak, m.compiled_peak),
            _saved_cell(m.eager_saved, m.eager_saved_count), _saved_cell(m.compiled_saved, m.compiled_saved_count),
            "-",
        ])
        if m.trains:
            recomputed = g.lowering.recomputed if g.lowering is not None else ()
            rows.append([
                *who, STEP_RUN, human_bytes(m.eager_train_peak), human_bytes(m.compiled_train_peak),
                _ratio_cell(m.eager_train_peak, m.compiled_train_peak), "-", "-", plural(len(recomputed), "op"),
            ])
    return rows


#: The memory table's legend, by the rows it holds: an inference report has forward rows only.
MEMORY_LEGEND = (
    "run: forward is one call of the graph, fwd+bwd one step through its backward (a training graph has both)",
    "saved: what the forward keeps for the backward (tensors); recomputed: forward ops the backward computes again",
)
MEMORY_LEGEND_FORWARD = ("run: forward is one call of the graph",)


def memory(rep: Report) -> Section | None:
    """Memory: how the peaks were measured, the whole call's peaks, then each graph's, those
    compile grew most first, with the legend of the rows shown; None when not measured."""
    if rep.memory is None and not any(g.memory is not None for g in rep.graphs):
        return None
    rows = memory_rows(rep)
    steps = any(row[2] == STEP_RUN for row in rows)
    legend = (MEMORY_LEGEND if steps else MEMORY_LEGEND_FORWARD) if rows else ()
    columns = tuple(Column(h, "graph" if h == "graph" else "") for h in MEMORY_HEADERS)
    table = (Table(columns, tuple(tuple(r) for r in rows), legend),) if rows else ()
    return Section(
        f"Memory ({memory_methods(rep)}; peaks above the inputs, outputs included)",
        table,
        lead=program_memory_line(rep),
        notes=tuple(memory_notes(rep)),
    )


# -- what to read first ---------------------------------------------------------------------


def warnings(rep: Report, extra: tuple[str, ...] = ()) -> Section | None:
    """"Read this first": what makes the counts incomplete or the report unusual (and
    ``extra``, what a view adds of its own: a page without its pictures); None when nothing."""
    lines = (*warning_lines(rep), *extra)
    return Section("Read this first", notes=lines) if lines else None


# -- compile time ---------------------------------------------------------------------------


def compile_time(rep: Report) -> Section:
    """Compile time: the user's compile (the header's figure) split by part and by phase
    over its compiles, and apart from it, what dynscope's own measurement cost."""
    t = rep.compile_time
    # An ahead-of-time compile (AOTInductor) has no Python frame: said as what it is.
    ahead = sum(1 for f in rep.frames if not f.compile_id)  # every Dynamo compile has an id
    counted = [plural(len(rep.frames) - ahead, "frame compile")] if len(rep.frames) > ahead else []
    counted += [plural(ahead, "ahead-of-time compile")] if ahead else []
    notes = [f"your program's compile (the header's figure) per phase: {phases_text(list(t.phases))}"] if t.phases else []
    measured = measurement_text(rep)
    return Section(
        "Compile time",
        lead=f"total {compile_parts(t)} over {' and '.join(counted) or '0 frame compiles'}",
        notes=(*notes, *([measured] if measured else [])),
    )


# -- timing, end to end ---------------------------------------------------------------------

_END_TO_END_COLUMNS = (
    Column("mode"), Column("device"), Column("eager"), Column("compiled"), Column("speedup"), Column("samples"),
    Column("first call"), Column("in graphs"),
    # A terminal row says a failure in a few words; the page gives the whole message.
    Column("error", only="html"),
)


def end_to_end(rep: Report) -> Section | None:
    """The whole program timed per mode (eager against compiled, first call, the share in
    graphs), then where the per-graph times do not add up to it; None when not timed."""
    if not rep.timing:
        return None
    rows = []
    for m in rep.timing:
        if m.error:
            rows.append((m.mode, m.device, "-", "-", "-", "-", "-", f"failed: {clip(m.error, 40)}", m.error))
            continue
        rows.append((
            m.mode, m.device, ms(m.eager_ms), ms(m.compiled_ms),
            f"{m.speedup:.2f}x" + (" ?" if m.below_resolution else " ~" if m.noisy else ""),
            samples_text(m), f"{m.first_call_s:.2f} s", in_graphs_text(m), "",
        ))
    return Section("Timing (end to end)", (Table(_END_TO_END_COLUMNS, tuple(rows)),), notes=tuple(end_to_end_lines(rep)))


# -- below Dynamo ---------------------------------------------------------------------------


def below_dynamo(rep: Report) -> Section | None:
    """What Inductor did for the program: how many kernels in how many lowered graphs, then
    its compile per phase (each line says whose compile it is: the user's, the header's
    figure, or dynscope's timed builds, not in it), its caches and the bytes saved for the
    backward; None when no graph was lowered."""
    lowered = [g for g in rep.graphs if g.lowering is not None]
    if not lowered:
        return None
    count = sum(len(g.lowering.kernels) for g in lowered if g.lowering is not None)
    lines = [*lowering_phase_lines(rep), ("cache", cache_text(lowered)), ("saved for backward", saved_text(lowered))]
    return Section(
        f"Below Dynamo ({plural(count, 'kernel')} in {plural(len(lowered), 'lowered graph')})",
        notes=tuple(f"{label}: {text}" for label, text in lines if text),
    )
