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
from typing import TYPE_CHECKING

from dynscope._format import clip, human_bytes, location, ms, percent, plural
from dynscope._lexicon.wording import resume_label
from dynscope._render.blocks import Block, Column, Entry, Field, Group, Listing, Section, Table
from dynscope._render.causes import explained, fix_words, what_changed
from dynscope._render.figures import memory_order, sizes_of
from dynscope._render.words import (
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
    trial_cells,
    trial_memory,
    trial_timed,
    trial_verdict,
    warning_lines,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynscope._model import GraphBreak, Report, Trial

__all__ = [
    "ADVICE_LEAD",
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
    "compile_time",
    "end_to_end",
    "coverage",
    "memory",
    "memory_rows",
    "recompiles",
    "trial_target",
    "warnings",
]

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
    title = "".join(text for text, _ in breaks_title_pieces(rep))
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
            Table(_FAILURE_COLUMNS, rows, notes=(UNSAID,) if any(row[4] == "-" for row in rows) else (),
                  title="every failed guard, per earlier cache entry", limit=FAILURES_SHOWN,
                  rest=f"... {plural(len(rows) - FAILURES_SHOWN, 'more row')} (Recompile.failures)"),
        )
        title = f"{plural(g.count, 'recompile')} of {resume_label(g.frame) or '?'}: {what_changed(g.cause)}"
        groups.append(Group(f"recompile-{n}", title, tuple(fields), blocks))
    return Section(f"Recompiles ({rep.recompile_count})", tuple(groups))


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
    return "\n".join(textwrap.wrap(t.target[0] + more, width, max_lines=3, placeholder=" ...", break_on_hyphens=False))


def advice(trials: Sequence[Trial]) -> Section:
    """"What each fix buys": one row per remedy (in the order given: best first) with the
    measured before -> after, then one group per remedy: the code to add, its targets, and
    why it failed or what else to know."""
    timed, memory = trial_timed(trials), trial_memory(trials)
    columns = [Column("#", only="text"), Column("remedy", clip=32), Column("code", "pre", only="html"),
               Column("target", only="text"), Column("target", only="html"),
               *(Column(h) for h in ("graphs", "breaks", "recompiles", "coverage")),
               *([Column("speedup")] if timed else []),
               *([Column("compiled peak"), Column("step")] if memory else []),
               Column("helped", "verdict"), Column("error / note", only="html")]
    rows = tuple(
        (i, t.remedy, t.code, trial_target(t), ", ".join(t.target) or "-",
         *trial_cells(t, timed=timed, memory=memory), trial_verdict(t), "; ".join(x for x in (t.error, t.note) if x))
        for i, t in enumerate(trials, 1)
    )
    groups = tuple(
        Group(f"remedy-{i}", f"[{i}] {t.remedy}: {trial_verdict(t)}", tuple(
            [Field("", t.code, "pre")]
            + ([Field("for", ", ".join(t.target))] if t.target else [])
            + ([Field("error", t.error)] if t.error else [])
            + ([Field("note", t.note)] if t.note else [])
        ))
        for i, t in enumerate(trials, 1)
    )
    return Section(advice_title(trials), (Table(tuple(columns), rows), *groups), lead=ADVICE_LEAD)
