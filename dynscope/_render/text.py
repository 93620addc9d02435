"""Terminal rendering of a Report: the summary's layout (tables, wrapping, sections).
Pure: model in, text out. What it says in words it shares with the page
(dynscope._render.words)."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from tabulate import tabulate

from dynscope._errors import InputError
from dynscope._format import (
    ADD_UP_TOLERANCE,
    clip,
    few,
    location,
    ms,
    percent,
    plural,
)
from dynscope._lexicon.wording import resume_label
from dynscope._model.order import program_order  # the one ordering, shared with the picture
from dynscope._render.terminal import paint_summary
from dynscope._render.words import (
    MEMORY_HEADERS,
    UNSAID,
    advice_title,
    cache_text,
    call_chain_text,
    compile_parts,
    cost_text,
    end_to_end_lines,
    failure_rows,
    fix_first_line,
    gave_up_text,
    grads_text,
    has_step_rows,
    in_graphs_text,
    inputs_text,
    kernel_label,
    known_text,
    lowering_phase_lines,
    measurement_text,
    memory_cell,
    memory_methods,
    memory_notes,
    memory_rows,
    owner_text,
    pass_label,
    phases_text,
    program_memory_line,
    runs_shown,
    runs_text,
    samples_text,
    saved_text,
    size_fix_line,
    sizes_of,
    source_label,
    speedup_text,
    timing_doubts,
    totals_line,
    trial_cells,
    trial_memory,
    trial_timed,
    trial_verdict,
    warning_lines,
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


def _frame_label(graph: Graph) -> str:
    name = resume_label(graph.frame) or "?"
    if graph.split_by == "ddp_bucket":  # DDP's optimizer split it: not a graph break
        name += " [DDP bucket split]"
    return f"{name} ({location(graph.filename, graph.lineno)})" if graph.filename else name


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
    """The table of captured graphs."""
    timed = any(g.timing for g in rep.graphs)
    # Forward+backward columns only when a graph was timed for training: an inference
    # report reads as it always did.
    trains = any(g.timing is not None and g.timing.trains for g in rep.graphs)
    measured = any(g.memory is not None for g in rep.graphs)
    runs = runs_shown(rep)
    headers = ["id", "compile", "frame", "graph ops", "nodes", "inputs"] + (["runs"] if runs else [])
    if measured:
        headers += ["peak eager -> compiled"]
    if timed:
        headers += ["eager", "inductor", "speedup", "samples"]
    if trains:
        headers += ["fwd+bwd eager", "fwd+bwd inductor", "grads"]
    rows = []
    for g in rep.graphs:
        row = [g.id, g.compile_id, _frame_label(g), g.op_count, g.node_count or "-", inputs_text(g)]
        if runs:
            row += [runs_text(g, rep.calls)]
        if measured:
            row += [memory_cell(g.memory)]
        if timed:
            t = g.timing
            if t is None:
                row += ["-", "-", "-", "-"]
            elif t.failed:
                row += [ms(t.eager_ms), "failed", "-", "-"]
            else:
                row += [ms(t.eager_ms), ms(t.compiled_ms), speedup_text(t), samples_text(t)]
            if trains:
                if t is None or not t.trains:
                    row += ["-", "-", "-"]
                elif t.train_error:
                    row += [ms(t.train_eager_ms), "failed", grads_text(t)]
                else:
                    row += [ms(t.train_eager_ms), ms(t.train_compiled_ms), grads_text(t)]
        rows.append(row)
    return tabulate(rows, headers=headers, tablefmt="simple")


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


def breaks_section(rep: Report, *, width: int = 100) -> str:
    """The table of distinct breaks, the costliest first, then each site's reason, fix and hints."""
    ranked = rep.breaks_by_cost()
    rows = [
        [i + 1, b.location, b.category, b.count, known_text(b.graphs_split, str(b.graphs_split)),
         known_text(b.recompiles_caused, str(b.recompiles_caused)), known_text(b.eager_ms, ms(b.eager_ms)),
         clip(b.source, 40)]
        for i, b in enumerate(ranked)
    ]
    headers = ["#", "location", "category", "count", "graphs", "recompiles", "eager/call", "code"]
    lines = [tabulate(rows, headers=headers, tablefmt="simple")]
    for i, b in enumerate(ranked):
        lines.append("")
        lines.append(f"[{i + 1}] {location(b.filename, b.lineno, full=True)} in {b.function or '?'}")
        lines.append(f"    {b.source}")
        lines.extend(textwrap.wrap(f"why: {b.reason}", width, initial_indent="    ", subsequent_indent="      "))
        if b.detail:
            lines.extend("      " + ln for ln in b.detail.splitlines())
        if len(b.call_chain) > 1:
            chain = call_chain_text(b)
            lines.extend(textwrap.wrap(f"called from: {chain}", width, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False))
        lines.append(f"    cost: {cost_text(rep, b)}")
        if b.gave_up:
            lines.extend(textwrap.wrap(gave_up_text(b), width, initial_indent="    ", subsequent_indent="      "))
        if b.library:
            lines.extend(textwrap.wrap(owner_text(b), width, initial_indent="    ", subsequent_indent="      "))
        lines.extend(textwrap.wrap(f"fix: {b.fix}", width, initial_indent="    ", subsequent_indent="      "))
        # PyTorch's hints speak to whoever wrote the break ("Remove the graph_break() call"):
        # where torch or a library breaks on purpose they are not the user's to follow.
        for hint in b.hints if b.actionable else ():
            lines.extend(textwrap.wrap(f"torch hint: {hint}", width, initial_indent="    ", subsequent_indent="      "))
        if b.doc_url:
            lines.append(f"    docs: {b.doc_url}")
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
    """Recompiles grouped by function and cause, each with its fix and what PyTorch said."""
    by_id = {r.compile_id: r for r in rep.recompiles}
    lines = []
    for g in rep.recompile_groups():
        lines.append(f"{plural(g.count, 'recompile')} of {resume_label(g.frame) or '?'}: {g.cause}")
        if g.fix:
            lines.extend(textwrap.wrap(f"fix: {g.fix}", width, initial_indent="    ", subsequent_indent="      "))
        lines.append(f"    compiles: {', '.join(g.compile_ids)}")
        said = dict.fromkeys(x for cid in g.compile_ids for x in (by_id[cid].explained or by_id[cid].reasons))
        for x in list(said)[:3]:
            lines.extend(textwrap.wrap(f"- {x}", width, initial_indent="    ", subsequent_indent="      "))
        if len(said) > 3:
            lines.append(f"    ... {plural(len(said) - 3, 'more failed guard')} (Report.recompiles)")
        sizes = sizes_of(rep, g.compile_ids)
        if sizes:
            lines.append("    where sizes were fixed or guarded:")
            for fx in sizes[:5]:
                lines.extend(textwrap.wrap(size_fix_line(fx), width, initial_indent="      ", subsequent_indent="        "))
            if len(sizes) > 5:
                lines.append(f"      ... {plural(len(sizes) - 5, 'more size')} (Frame.shapes)")
        rows = failure_rows(rep, g.compile_ids)
        if rows:
            lines.append("    every failed guard, per earlier cache entry:")
            table = tabulate(
                [[c, e, clip(w, 60), then, now, by] for c, e, w, then, now, by in rows[:8]],
                headers=["compile", "entry", "guard that failed", "compiled for", "called with", "found by"],
                tablefmt="simple",
            )
            lines.extend("      " + ln for ln in table.splitlines())
            if len(rows) > 8:
                lines.append(f"      ... {plural(len(rows) - 8, 'more row')} (Recompile.failures)")
            if any(now == "-" for *_, now, _ in rows[:8]):
                lines.append(f"      {UNSAID}")
    return "\n".join(lines)


# -- advice: what each remedy bought (Report.trials, filled by dynscope.advise) ---------


def trial_target(t: Trial, width: int = 30) -> str:
    """What the remedy addresses, wrapped at word boundaries to lines of at most ``width``
    characters (three at most, the rest shortened with "..."): the first target and "+N"
    for the others ("-" when it names nothing). The section below the table lists them all."""
    if not t.target:
        return "-"
    more = f", +{len(t.target) - 1}" if len(t.target) > 1 else ""
    return "\n".join(textwrap.wrap(t.target[0] + more, width, max_lines=3, placeholder=" ...", break_on_hyphens=False))


def advice_section(trials: Sequence[Trial], *, width: int = 100, empty: str = "") -> str:
    """"What each fix buys": one row per remedy (the order given: best first), then each
    remedy's code to add, its targets, and why it failed or what else to know. With no
    trials, why none was tried (``empty``, from ``Advice.note``) instead of an empty table."""
    if not trials:
        said = empty or "no remedy to try: no break site or recompile here has one dynscope knows how to try."
        return "\n".join(textwrap.wrap(f"What each fix buys: {said}", width, subsequent_indent="    "))
    timed, memory = trial_timed(trials), trial_memory(trials)
    headers = ["#", "remedy", "target", "graphs", "breaks", "recompiles", "coverage"]
    headers += ["speedup"] if timed else []
    headers += ["compiled peak", "step"] if memory else []
    headers += ["helped"]
    rows = [
        [i + 1, clip(t.remedy, 32), trial_target(t), *trial_cells(t, timed=timed, memory=memory), trial_verdict(t)]
        for i, t in enumerate(trials)
    ]
    lines = [tabulate(rows, headers=headers, tablefmt="simple")]
    for i, t in enumerate(trials):
        lines.append("")
        lines.append(f"[{i + 1}] {t.remedy}: {trial_verdict(t)}")
        lines.extend("    " + ln for ln in t.code.splitlines())
        if t.target:
            lines.extend(textwrap.wrap(f"for: {', '.join(t.target)}", width, initial_indent="    ", subsequent_indent="      "))
        if t.error:
            lines.extend(textwrap.wrap(f"error: {t.error}", width, initial_indent="    ", subsequent_indent="      "))
        if t.note:
            lines.extend(textwrap.wrap(f"note: {t.note}", width, initial_indent="    ", subsequent_indent="      "))
    return "\n".join(lines)


def compile_time_section(rep: Report) -> str:
    """Compile time: the user's compile (the header's figure) split by part and by phase, and
    apart from it, dynscope's own measurement builds."""
    t = rep.compile_time
    # An ahead-of-time compile (AOTInductor) has no Python frame: said as what it is.
    ahead = sum(1 for f in rep.frames if not f.compile_id)  # every Dynamo compile has an id
    counted = [plural(len(rep.frames) - ahead, "frame compile")] if len(rep.frames) > ahead else []
    counted += [plural(ahead, "ahead-of-time compile")] if ahead else []
    lines = [f"total {compile_parts(rep.compile_time)} over {' and '.join(counted) or '0 frame compiles'}"]
    if t.phases:
        lines += wrap_figures(f"your program's compile (the header's figure) per phase: {phases_text(list(t.phases))}")
    measured = measurement_text(rep)
    if measured:
        lines += wrap_figures(measured)
    return "\n".join(lines)


_FIGURE = re.compile(r"(\d) (s|ms|us|ns)\b")


def wrap_figures(text: str, width: int = 100) -> list[str]:
    """``text`` wrapped as an indented detail line, never between a figure and its unit
    ("3.60" at the end of one line, "s" on the next)."""
    kept = _FIGURE.sub("\\1\x00\\2", text)
    lines = textwrap.wrap(kept, width, initial_indent="    ", subsequent_indent="      ")
    return [line.replace("\x00", " ") for line in lines]


def timing_section(rep: Report) -> str:
    """End-to-end timing per mode."""
    rows = []
    for m in rep.timing:
        if m.error:
            rows.append([m.mode, m.device, "-", "-", "-", "-", "-", f"failed: {clip(m.error, 40)}"])
            continue
        rows.append([
            m.mode, m.device, ms(m.eager_ms), ms(m.compiled_ms),
            f"{m.speedup:.2f}x" + (" ?" if m.below_resolution else " ~" if m.noisy else ""),
            samples_text(m), f"{m.first_call_s:.2f} s", in_graphs_text(m),
        ])
    return tabulate(
        rows,
        headers=["mode", "device", "eager", "compiled", "speedup", "samples", "first call", "in graphs"],
        tablefmt="simple",
    )


def memory_section(rep: Report) -> list[str]:
    """The summary's "Memory" part: the whole call's peaks, then each graph's, those
    compile grew most first; [] when memory was not measured."""
    if rep.memory is None and not any(g.memory is not None for g in rep.graphs):
        return []
    out = [f"Memory ({memory_methods(rep)}; peaks above the inputs, outputs included)"]
    line = program_memory_line(rep)
    if line:
        out.append(f"    {line}")
    rows = memory_rows(rep)
    if rows:
        out.append(tabulate(rows, headers=MEMORY_HEADERS, tablefmt="simple"))
        # The legend of the rows shown: an inference report has forward rows only.
        if has_step_rows(rows):
            out.append("    run: forward is one call of the graph, fwd+bwd one step through its backward (a training graph has both)")
            out.append("    saved: what the forward keeps for the backward (tensors); recomputed: forward ops the backward computes again")
        else:
            out.append("    run: forward is one call of the graph")
    return [*out, *_flagged(memory_notes(rep)), ""]


def guards_line(rep: Report) -> str:
    """One line: how many guards, on how many compiles, of which kinds (most first)."""
    kinds: dict[str, int] = {}
    for g in rep.guards:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {n}" for k, n in top[:5]) + (", ..." if len(top) > 5 else "")
    compiles = len({g.compile_id for g in rep.guards})
    return f"{plural(len(rep.guards), 'guard')} on {plural(compiles, 'compile')}: {shown}"


def _flagged(notes: list[str], width: int = 100) -> list[str]:
    """Each note as "    ! ...", wrapped to ``width``."""
    return [
        line for n in notes for line in textwrap.wrap(n, width, initial_indent="    ! ", subsequent_indent="      ")
    ]


def _share(value: float | None) -> str:
    return percent(value)


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
    rows: list[list[object]] = []
    for k in low.kernels_by_time():
        rows.append([
            kernel_label(k.name, 48), k.kind, pass_label(k), k.calls,
            ms(k.time_ms) if k.time_ms is not None else "-", _share(k.share),
            few(k.aten_ops), few(k.nodes), few([source_label(s) for s in k.source_lines], 2),
        ])
    outside = low.outside_kernels_ms
    if outside is not None:
        share = outside / low.graph_ms if low.graph_ms else None
        rows.append(["(outside kernels)", "-", "-", "-", ms(outside), _share(share),
                     "wrapper code, allocation", "-", "-"])
    headers = ["kernel", "kind", "pass", "calls", "time", "share", "fused ops", "nodes", "source"]
    return tabulate(rows, headers=headers, tablefmt="simple")


def below_dynamo_section(rep: Report) -> list[str]:
    """The summary's lines on Inductor's work: top kernels of the program, compile time
    per phase with cache results, saved-for-backward bytes; [] when no graph was lowered."""
    lowered = [g for g in rep.graphs if g.lowering is not None]
    if not lowered:
        return []
    count = sum(len(g.lowering.kernels) for g in lowered if g.lowering is not None)
    out = [f"Below Dynamo ({plural(count, 'kernel')} in {plural(len(lowered), 'lowered graph')})"]
    top = rep.top_kernels(5)
    if top:
        rows = [
            [g.id, kernel_label(k.name), k.kind, pass_label(k), ms(cost), _share(k.share),
             few(k.aten_ops), few([source_label(s) for s in k.source_lines], 2)]
            for g, k, cost in top
        ]
        out.append(tabulate(
            rows, headers=["graph", "kernel", "kind", "pass", "time", "share", "fused ops", "source"],
            tablefmt="simple",
        ))
        out.append("    time: over the graph's runs; share: of its graph's time")
    else:
        out.append("    kernels not timed (dynscope.report(..., timing=True) times them)")
    # Each phases line says whose compile it is: the user's (the header's figure, all frames)
    # or dynscope's timed builds (not in it).
    lines = [
        *lowering_phase_lines(rep),
        ("cache", cache_text(lowered)),
        ("saved for backward", saved_text(lowered)),
    ]
    for label, text in lines:
        if text:
            out += wrap_figures(f"{label}: {text}")
    out += _flagged([f"graph {g.id}: {n}" for g in lowered if g.lowering is not None for n in g.lowering.notes])
    return [*out, ""]


def render_summary(rep: Report, *, color: bool = False) -> str:
    """The whole terminal summary. Deterministic for a given report.

    Args:
        rep: the report.
        color: add ANSI colour (dynscope._render.terminal.paint_summary); the text is otherwise the same.
    """
    title = f"dynscope report: {rep.title}" if rep.title else "dynscope report"
    out = [title, "=" * len(title), totals_line(rep)]
    if rep.breaks:
        out.append(fix_first_line(rep))
    out.append("")
    warnings = warning_lines(rep)
    if warnings:
        out += ["Read this first", *(f"    ! {w}" for w in warnings), ""]
    out += [f"Graphs ({rep.graph_count})", graphs_table(rep) if rep.graphs else "(none captured)"]
    out += [*_flagged(graph_timing_lines(rep)), ""]
    if rep.breaks or rep.recompiles:
        out += ["Program (in execution order)"]
        out += textwrap.wrap(program_line(rep), 100, initial_indent="    ", subsequent_indent="      ", break_on_hyphens=False)
        out += [""]
    if rep.breaks:
        out += [
            f"Graph breaks ({plural(rep.break_count, 'event')} at {plural(len(rep.breaks), 'site')})",
            breaks_section(rep),
            "",
        ]
    else:
        out += ["Graph breaks: none", ""]
    if rep.recompiles:
        out += [f"Recompiles ({rep.recompile_count})", recompiles_section(rep), ""]
    if rep.trials:
        out += [advice_title(rep.trials), advice_section(rep.trials), ""]
    failed = [f for f in rep.frames if f.status == "failed"]
    if failed:
        out.append("Frames that fell back to eager")
        for f in failed:
            out.append(f"    {f.compile_id} {f.function} ({location(f.filename, f.lineno)}): {clip(f.fail_summary, 80)}")
        out.append("")
    if rep.guards:
        out += ["Guards", "    " + guards_line(rep), ""]
    if rep.coverage is not None:
        c = rep.coverage
        out.append(
            f"Coverage: {percent(c.ratio, 1)} of the torch ops run were in graphs "
            f"(torch ops run: {c.ops_in_graphs} in graphs, {c.ops_eager} eagerly)"
        )
        for site, n in c.eager_sites[:5]:
            out.append(f"    eager: {site} x{n}")
        if len(c.eager_sites) > 5:
            rest = c.eager_sites[5:]
            out.append(f"    eager: +{sum(n for _, n in rest)} more at {plural(len(rest), 'other site')} (all in the JSON and on the page)")
        if c.ops_dynamo:
            out.append(f"    not counted: {c.ops_dynamo} ops Dynamo ran to build graph arguments (its runtime, not your code)")
        out.append("")
    if rep.timing:
        out += ["Timing (end to end)", timing_section(rep), *_flagged(end_to_end_lines(rep)), ""]
    out += memory_section(rep)
    out += below_dynamo_section(rep)
    out += ["Compile time", compile_time_section(rep)]
    text = "\n".join(out).rstrip() + "\n"
    return paint_summary(text) if color else text
