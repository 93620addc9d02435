"""Each report section built once, as plain data: its title, its tables (columns, rows,
notes), its entries (one per break site...) and its sentences. The terminal summary
(dynscope._render.section_text) and the page (dynscope._render.section_html) lay the same
blocks out, so the two views of a section show the same rows and say the same words; the
layout (widths, wrapping, markup, folding) is each formatter's own.

Pure: model in, data out; every figure and phrase comes from the model or the phrasebook
(dynscope._render.words).
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import TYPE_CHECKING

from dynscope._format import ADD_UP_TOLERANCE, clip, human_bytes, location, ms, percent, plural
from dynscope._lexicon.wording import resume_label
from dynscope._model.cache import HIT, MISS, per_compile_seconds
from dynscope._model.order import program_order  # the one ordering, shared with the picture
from dynscope._render import graph_tables
from dynscope._render.blocks import Block, Column, Entry, Field, Group, Listing, Phrase, Section, Table
from dynscope._render.causes import explained, fix_words, target_words, what_changed
from dynscope._render.figures import memory_order, sizes_of
from dynscope._render.words import (
    ADVICE_NONE,
    ADVICE_TITLE,
    CACHE_LABELS,
    CRASH_WORDS,
    PROGRAM_LEGEND,
    UNSAID,
    advice_title,
    breaks_title_pieces,
    cache_text,
    call_chain_text,
    compile_parts,
    cost_text,
    end_to_end_lines,
    failure_rows,
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
    size_fix_line,
    timing_doubts,
    totals_pieces,
    trial_cells,
    trial_memory,
    trial_timed,
    trial_verdict,
    warning_lines,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynscope._model import Frame, Graph, GraphBreak, Report, Trial

__all__ = [
    "ADVICE_LEAD",
    "document",
    "graph_timing_lines",
    "graphs",
    "header",
    "KERNELS_NOT_TIMED",
    "id_ranges",
    "program",
    "program_line",
    "MEMORY_HEADERS",
    "Column",
    "Entry",
    "Field",
    "Group",
    "Listing",
    "Section",
    "Table",
    "advice",
    "below_dynamo",
    "breaks",
    "compile_caches",
    "compile_time",
    "end_to_end",
    "coverage",
    "crashes",
    "fallbacks",
    "guards",
    "memory",
    "memory_rows",
    "recompiles",
    "timing_anchor",
    "trial_target",
    "warnings",
]

# -- the document: every part, in order ---------------------------------------------------


def document(rep: Report, *, warned: tuple[str, ...] = ()) -> tuple[Section, ...]:
    """Every part of the report, each built once, in the order the summary reads them: the
    header, what to read first, the graphs, the program, its breaks, recompiles, remedies,
    compiles that raised, frames that fell back, guards, coverage, timing, memory, what
    Inductor did, the compile caches' lookups and compile time. A part the report has nothing for is left out; one a view
    shows even when empty (breaks, recompiles, guards) says so in its ``empty``.

    The terminal reads them in this order; the card picks the ones it has room for; the page
    reads them in this order too, with its own two placements: compile time under the
    header's figure, and the guards then the graphs last, before each graph's own part.

    Args:
        rep: the report.
        warned: what a view adds to "Read this first" of its own (a page without its pictures).
    """
    parts = (
        header(rep), warnings(rep, warned), graphs(rep), program(rep), breaks(rep), recompiles(rep),
        advice(rep.trials) if rep.trials else None, crashes(rep), fallbacks(rep), guards(rep), coverage(rep),
        end_to_end(rep), memory(rep), below_dynamo(rep), compile_caches(rep), compile_time(rep),
    )
    return tuple(part for part in parts if part is not None)


def header(rep: Report) -> Section:
    """The report's title and its totals in one line (the counts that are bad news marked);
    the torch that compiled, as its lead (the page and the card say it under the totals)."""
    title = f"dynscope report: {rep.title}" if rep.title else "dynscope report"
    totals = Phrase(tuple((text, "bad" if bad else "") for text, bad in totals_pieces(rep)))
    return Section(title, (totals,), key="header", lead=f"torch {rep.torch_version}" if rep.torch_version else "")


def graphs(rep: Report) -> Section:
    """The graphs: every graph on one row (dynscope._render.graph_tables.graphs, the table the
    terminal adds each graph's first timing to), then one group per timed graph with its timing
    per mode (:func:`timing_anchor`; the page shows it in that graph's own part), and each doubt
    about their timing, said of several graphs at once where it holds for them all."""
    timed = (
        Group(timing_anchor(g.id), f"graph {g.id}", blocks=(table,))
        for g in rep.graphs if (table := graph_tables.timing(g)) is not None
    )
    return Section(f"Graphs ({rep.graph_count})", (graph_tables.graphs(rep), *timed),
                   notes=tuple(graph_timing_lines(rep)), key="graphs", empty="(none captured)")


def timing_anchor(graph_id: int) -> str:
    """The anchor of graph ``graph_id``'s timing group in the graphs part (:func:`graphs`)."""
    return f"timing-{graph_id}"


def program(rep: Report) -> Section:
    """The program in execution order: the terminal writes it as one line of steps
    (:func:`program_line`, the lead, shown only when the program has a break or a recompile);
    the page draws it, the note saying how to read the picture (the terminal has none)."""
    line = program_line(rep) if rep.breaks or rep.recompiles else ""
    return Section("Program (in execution order)", lead=line, key="program", lead_kind="code",
                   notes=(PROGRAM_LEGEND,))


def id_ranges(ids: Sequence[int]) -> str:
    """"0, 2, 5-9": graph ids in order, runs of consecutive ids as ranges."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


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


# -- graph breaks ---------------------------------------------------------------------------

_BREAK_COLUMNS = (
    Column("#"), Column("location", "code"), Column("category", "cat"), Column("count"), Column("graphs"),
    Column("recompiles"), Column("eager/call"),
    # The terminal has room for the line's code, the page for the whole reason.
    Column("code", "code", only="text"), Column("reason", only="html", short=False),
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
    marked = Phrase(tuple((text, "bad" if bad else "") for text, bad in breaks_title_pieces(rep)))
    if not ranked:
        return Section(marked.text, key="breaks", tone="good", empty="Graph breaks: none", marked=marked)
    entries = tuple(_break_entry(rep, i, b) for i, b in enumerate(ranked, 1))
    return Section(marked.text, (Table(_BREAK_COLUMNS, rows), *entries), lead=fix_first_line(rep), key="breaks",
                   marked=marked)


def _break_entry(rep: Report, i: int, b: GraphBreak) -> Entry:
    return break_entry(b, index=i, cost=cost_text(rep, b))


def break_entry(b: GraphBreak, *, index: int = 0, cost: str = "") -> Entry:
    """One break site at length, the ``index``-th of its report (0: the site alone, as its
    notebook card shows it) with its ``cost`` in the report ("" when not known)."""
    fields = [Field("why", b.reason)]
    if b.detail:
        fields.append(Field("", b.detail, "pre"))
    if len(b.call_chain) > 1:
        fields.append(Field("called from", call_chain_text(b), "code"))
    if cost:
        fields.append(Field("cost", cost, "flat"))
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
    at = f"{location(b.filename, b.lineno, full=True)} in {b.function or '?'}"
    return Entry(
        anchor=f"break-{index}" if index else "break",
        title=f"[{index}] {at}" if index else f"Graph break at {at}",
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
    return Section("Coverage", tuple(blocks), lead=lead, notes=notes, key="coverage")


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
    steps = any(g.memory is not None and not g.memory.error and g.memory.trains for g in memory_order(rep))
    legend = (MEMORY_LEGEND if steps else MEMORY_LEGEND_FORWARD) if rows else ()
    columns = tuple(Column(h, "graph" if h == "graph" else "") for h in MEMORY_HEADERS)
    table = (Table(columns, tuple(tuple(r) for r in rows), legend),) if rows else ()
    return Section(
        f"Memory ({memory_methods(rep)}; peaks above the inputs, outputs included)",
        table,
        lead=program_memory_line(rep),
        notes=tuple(memory_notes(rep)),
        key="memory",
    )


# -- what to read first ---------------------------------------------------------------------


def warnings(rep: Report, extra: tuple[str, ...] = ()) -> Section | None:
    """"Read this first": what makes the counts incomplete or the report unusual (and
    ``extra``, what a view adds of its own: a page without its pictures); None when nothing."""
    lines = (*warning_lines(rep), *extra)
    return Section("Read this first", notes=lines, key="warnings") if lines else None


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
        key="compile-time",
    )


# -- frames Dynamo did not compile; guards --------------------------------------------------

#: A frame as the terminal says it: compile, function, where, and why (the terminal keeps
#: the first 80 characters of why; the page all of it).
_FRAME_COLUMNS = (Column("compile", "code"), Column("function"), Column("where", "code"), Column("why", clip=80))
_FRAME_SAID = "{0} {1} ({2}): {3}"


def _frame_rows(frames: Sequence[Frame]) -> tuple[tuple[object, ...], ...]:
    return tuple((f.compile_id, f.function, location(f.filename, f.lineno), f.fail_summary) for f in frames)


def crashes(rep: Report) -> Section | None:
    """The compiles that raised into the user's program (what that means, then each frame);
    None when none did."""
    crashed = [f for f in rep.frames if f.status == "crashed"]
    if not crashed:
        return None
    table = Table(_FRAME_COLUMNS, _frame_rows(crashed), said=_FRAME_SAID)
    return Section("The compile that raised into your program", (table,), lead=CRASH_WORDS, key="crashes")


def fallbacks(rep: Report) -> Section | None:
    """The frames Dynamo gave up on (they ran eagerly): what that means, then each frame, said
    as a sentence on the terminal and as a table row on the page; None when none did."""
    failed = [f for f in rep.frames if f.status == "failed"]
    if not failed:
        return None
    table = Table(_FRAME_COLUMNS, _frame_rows(failed), said=_FRAME_SAID, said_in="text")
    return Section("Frames that fell back to eager", (table,),
                   lead="Dynamo gave up on these functions; they run eagerly, and only what they call is compiled.",
                   key="fallbacks", tone="bad")


#: Guards listed one by one per compile on the page; the rest are counted by kind.
GUARDS_SHOWN = 100

_GUARD_COLUMNS = (Column("kind"), Column("source", "code"), Column("check", "code"), Column("from code", "code"))


def guards(rep: Report) -> Section:
    """The guards: one line of how many, on how many compiles, of which kinds (most first);
    then each compile's guards, folded (the page's): the first :data:`GUARDS_SHOWN`, and the
    table's ``rest`` counts the others by kind."""
    if not rep.guards:
        return Section("Guards", key="guards", empty="No guards recorded.")
    kinds = Counter(g.kind for g in rep.guards)
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {n}" for k, n in top[:5]) + (", ..." if len(top) > 5 else "")
    compiles = dict.fromkeys(g.compile_id for g in rep.guards)
    lead = f"{plural(len(rep.guards), 'guard')} on {plural(len(compiles), 'compile')}: {shown}"
    groups = []
    for cid in compiles:
        mine = [g for g in rep.guards if g.compile_id == cid]
        # A big model has thousands of guards (several per parameter): the first ones are
        # listed and the rest counted by kind, so the guards do not outweigh the page.
        rows = tuple((g.kind, g.source, g.detail, g.user_line) for g in mine[:GUARDS_SHOWN])
        rest = Counter(g.kind for g in mine[GUARDS_SHOWN:])
        more = (f"{len(mine) - GUARDS_SHOWN} more guards (" + ", ".join(f"{k} x{n}" for k, n in rest.most_common())
                + "): all are in report.json and rep.guards.")
        table = Table(_GUARD_COLUMNS, rows, rest=more if rest else "")
        groups.append(Group(f"guards-{cid}", f"{cid}: {len(mine)} guards", blocks=(table,), folded=True))
    return Section("Guards", tuple(groups), lead=lead, key="guards", lead_kind="flat")


# -- timing, end to end ---------------------------------------------------------------------

_END_TO_END_COLUMNS = (
    Column("mode"), Column("device"), Column("eager"), Column("compiled"), Column("speedup"),
    Column("samples", short=False), Column("first call"), Column("in graphs"),
    # A terminal row (and the card's) says a failure in a few words; the page gives the whole message.
    Column("error", only="html", short=False),
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
    return Section("Timing (end to end)", (Table(_END_TO_END_COLUMNS, tuple(rows)),), notes=tuple(end_to_end_lines(rep)),
                   key="timing")


# -- below Dynamo ---------------------------------------------------------------------------


#: What the program's part below Dynamo says in place of its costliest kernels when none was
#: timed (a lowering read from the compile's trace has no kernel times).
KERNELS_NOT_TIMED = Phrase((("kernels not timed (dynscope.report(..., timing=True) times them)", ""),))


def below_dynamo(rep: Report) -> Section | None:
    """What Inductor did for the program: how many kernels in how many lowered graphs, its
    costliest kernels (dynscope._render.graph_tables.top_kernels, or that none was timed), then
    its compile per phase (each line says whose compile it is: the user's, the header's
    figure, or dynscope's timed builds, not in it), its caches and the bytes saved for the
    backward (the notes), and each graph's doubts about its lowering (a listing: the page says
    them in that graph's own part); None when no graph was lowered."""
    lowerings = [(g, g.lowering) for g in rep.graphs if g.lowering is not None]
    if not lowerings:
        return None
    lowered = [g for g, _ in lowerings]
    count = sum(len(low.kernels) for _, low in lowerings)
    lines = [*lowering_phase_lines(rep), ("cache", cache_text(lowered)), ("saved for backward", saved_text(lowered))]
    top = graph_tables.top_kernels(rep)
    doubts = tuple(f"graph {g.id}: {n}" for g, low in lowerings for n in low.notes)
    blocks: list[Block] = [top if top.rows else KERNELS_NOT_TIMED]
    if doubts:
        blocks.append(Listing("", doubts, len(doubts), style="bullets"))
    return Section(
        f"Below Dynamo ({plural(count, 'kernel')} in {plural(len(lowered), 'lowered graph')})",
        tuple(blocks),
        notes=tuple(f"{label}: {text}" for label, text in lines if text),
        key="below-dynamo",
    )


# -- the compile caches ---------------------------------------------------------------------

#: Cache lookups a short view lists (misses and bypasses first; the page lists them all).
LOOKUPS_SHOWN = 8

_LOOKUP_COLUMNS = (
    Column("compile", "code"), Column("function", "code"), Column("cache"), Column("result"),
    Column("seconds"), Column("why", clip=70), Column("key", "code", only="html", short=False),
)
#: PyTorch's cache_status_detailed, said plainly.
_DETAIL_WORDS = {"full_miss": "not in the cache", "guard_miss": "in the cache, its shape guards failed"}
_RESULT_ORDER = {"bypass": 0, "miss": 1, "hit": 2}


def compile_caches(rep: Report) -> Section | None:
    """Every lookup in AOTAutograd's and Inductor's FX graph caches, per compile: hit, miss or
    bypass, the seconds a hit saved or the compile after a miss took, why it was bypassed (or
    PyTorch's detail), the key; misses and bypasses first. None when nothing was logged."""
    lookups = sorted(rep.cache_lookups, key=lambda lk: (_RESULT_ORDER.get(lk.result, 3), lk.compile_id, lk.ordinal))
    if not lookups:
        return None
    rows = tuple(
        (lk.compile_id or "?", resume_label(lk.frame) or "?", CACHE_LABELS.get(lk.cache, lk.cache),
         lk.result,
         "-" if lk.seconds is None else f"{'saved' if lk.result == 'hit' else 'took'} {lk.seconds:.2f} s",
         lk.bypass_reason or _DETAIL_WORDS.get(lk.detail, "" if lk.detail == "hit" else lk.detail), lk.key or "-")
        for lk in lookups)
    by = Counter(lk.result for lk in lookups)
    saved, took = per_compile_seconds(lookups, HIT), per_compile_seconds(lookups, MISS)
    lead = (f"{plural(len(lookups), 'lookup')}: {by['hit']} hit ({saved:.2f} s of compiling saved), "
            f"{by['miss']} missed ({took:.2f} s compiling after them; each compile counted once), "
            f"{by['bypass']} bypassed; why a run missed "
            "what another hit, part by part of the key: dynscope.cache_diff(a, b) or `dynscope cache-diff A B`")
    table = Table(_LOOKUP_COLUMNS, rows, limit=LOOKUPS_SHOWN,
                  rest=f"... {plural(len(rows) - LOOKUPS_SHOWN, 'more lookup')} (the page, Report.cache_lookups)")
    # No tone: a first run misses by nature; a warm start that should not is cache_diff's to say.
    return Section("Compile caches", (table,), lead=lead, key="caches")


# -- recompiles -----------------------------------------------------------------------------

#: The failed-guard explanations, the sizes and the failed-guard rows a short view shows per
#: cause (the page shows them all).
SAID_SHOWN, SIZES_SHOWN, FAILURES_SHOWN = 3, 5, 8

_FAILURE_COLUMNS = (
    Column("compile", "code"), Column("entry", "code"), Column("guard that failed", clip=60),
    Column("compiled for"), Column("called with"), Column("found by"),
)


def recompiles(rep: Report) -> Section:
    """The recompiles, one group per function and cause: its fix, its compiles, what
    PyTorch said failed, the sizes those compiles fixed or guarded, and every failed guard
    per earlier cache entry."""
    by_id = {r.compile_id: r for r in rep.recompiles}
    groups = []
    for n, g in enumerate(rep.recompile_groups(), 1):
        fix = fix_words(g.fix) if g.fix is not None else ""
        fields = ([Field("fix", fix)] if fix else []) + [Field("compiles", ", ".join(g.compile_ids), "flat")]
        said = tuple(dict.fromkeys(
            x for cid in g.compile_ids for x in (tuple(map(explained, by_id[cid].causes)) or by_id[cid].raw_reasons)))
        sizes = tuple(size_fix_line(fx) for fx in sizes_of(rep, g.compile_ids))
        rows = tuple(tuple(row) for row in failure_rows(rep, g.compile_ids))
        blocks: tuple[Listing | Table, ...] = (
            Listing("", said, SAID_SHOWN, f"... {plural(len(said) - SAID_SHOWN, 'more failed guard')} (Report.recompiles)",
                    "bullets"),
            Listing("where sizes were fixed or guarded", sizes, SIZES_SHOWN,
                    f"... {plural(len(sizes) - SIZES_SHOWN, 'more size')} (Frame.shapes)", "bullets"),
            Table(_FAILURE_COLUMNS, rows, notes=(UNSAID,) if any(
                      not f.now for cid in g.compile_ids for f in by_id[cid].failures) else (),
                  title="every failed guard, per earlier cache entry", limit=FAILURES_SHOWN,
                  rest=f"... {plural(len(rows) - FAILURES_SHOWN, 'more row')} (Recompile.failures)"),
        )
        title = f"{plural(g.count, 'recompile')} of {resume_label(g.frame) or '?'}: {what_changed(g.cause)}"
        groups.append(Group(f"recompile-{n}", title, tuple(fields), blocks))
    return Section(f"Recompiles ({rep.recompile_count})", tuple(groups), key="recompiles",
                   tone="bad" if groups else "", empty="No recompiles.")


# -- advice: what each remedy bought (Report.trials, filled by dynscope.advise) -------------

ADVICE_LEAD = (
    "Each remedy was run on its own, in isolation, on the same inputs; before -> after are the measured counts. "
    "A remedy helped when it removed breaks or recompiles (fewer of them, not as many at other lines), was "
    "measured faster, or (memory remedies) cut the compiled peak, with the outputs still equal to eager's; one "
    "that only moved a break says from which line to which."
)


def trial_target(t: Trial, width: int = 30) -> str:
    """What the remedy addresses, wrapped at word boundaries to lines of at most ``width``
    characters (three at most, the rest shortened with "..."): the first target and "+N"
    for the others ("-" when it names nothing). The groups under the table list them all."""
    if not t.target:
        return "-"
    more = f", +{len(t.target) - 1}" if len(t.target) > 1 else ""
    return "\n".join(textwrap.wrap(target_words(t.target[0]) + more, width, max_lines=3, placeholder=" ...",
                                   break_on_hyphens=False))


def advice(trials: Sequence[Trial], note: str = "") -> Section:
    """"What each fix buys": one row per remedy (in the order given: best first) with the
    measured before -> after, then one group per remedy: the code to add, its targets, and
    why it failed or what else to know. With no trials, a section with no blocks whose
    ``empty`` says why none was tried (``note``, from ``Advice.note``)."""
    if not trials:
        return Section(ADVICE_TITLE, key="advice", empty=note or ADVICE_NONE)
    timed, memory = trial_timed(trials), trial_memory(trials)
    columns = [Column("#", only="text"), Column("remedy", clip=32), Column("code", "pre", only="html"),
               Column("target", only="text"), Column("target", only="html"),
               *(Column(h) for h in ("graphs", "breaks", "recompiles", "coverage")),
               *([Column("speedup")] if timed else []),
               *([Column("compiled peak"), Column("step")] if memory else []),
               Column("helped", "verdict"), Column("error / note", only="html")]
    rows = tuple(
        (i, t.remedy, t.code, trial_target(t), ", ".join(map(target_words, t.target)) or "-",
         *trial_cells(t, timed=timed, memory=memory), trial_verdict(t), "; ".join(x for x in (t.error, t.note) if x))
        for i, t in enumerate(trials, 1)
    )
    groups = tuple(
        Group(f"remedy-{i}", f"[{i}] {t.remedy}: {trial_verdict(t)}", tuple(
            [Field("", t.code, "pre")]
            + ([Field("for", ", ".join(map(target_words, t.target)))] if t.target else [])
            + ([Field("error", t.error)] if t.error else [])
            + ([Field("note", t.note)] if t.note else [])
        ))
        for i, t in enumerate(trials, 1)
    )
    return Section(advice_title(trials), (Table(tuple(columns), rows), *groups), lead=ADVICE_LEAD, key="advice")
