"""Terminal rendering of a Report. Pure: model in, text out."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING

from tabulate import tabulate

from dynscope._format import clip, location, ms, plural
from dynscope._torch.wording import resume_label

if TYPE_CHECKING:
    from dynscope._model import Graph, Report

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


def totals_line(rep: Report) -> str:
    """One line of totals."""
    parts = [
        plural(rep.graph_count, "graph"),
        f"{plural(rep.break_count, 'graph break')} at {plural(len(rep.breaks), 'site')}",
        plural(rep.recompile_count, "recompile"),
    ]
    if rep.resume_count:
        parts.append(plural(rep.resume_count, "resume frame"))
    if rep.coverage is not None:
        parts.append(f"coverage {rep.coverage.ratio:.0%}")
    parts.append(f"compile {rep.compile_time.total_s:.2f} s")
    return ", ".join(parts)


def _inputs(graph: Graph, limit: int = 3) -> str:
    """The graph's own inputs first; parameters and buffers only counted."""
    user, params = graph.user_inputs()
    text = ", ".join(m.describe() for m in user[:limit])
    if len(user) > limit:
        text += f", +{len(user) - limit}"
    if params:
        text += f" (+{params} params)" if text else f"{params} params"
    return text


def _frame_label(graph: Graph) -> str:
    name = resume_label(graph.frame) or "?"
    return f"{name} ({location(graph.filename, graph.lineno)})" if graph.filename else name


def graphs_table(rep: Report) -> str:
    """The table of captured graphs."""
    timed = any(g.timing for g in rep.graphs)
    headers = ["id", "compile", "frame", "ops", "nodes", "inputs"]
    if timed:
        headers += ["eager", "inductor", "speedup"]
    rows = []
    for g in rep.graphs:
        row = [g.id, g.compile_id, _frame_label(g), g.op_count, g.node_count or "-", _inputs(g)]
        if timed:
            t = g.timing
            if t is None:
                row += ["-", "-", "-"]
            elif t.failed:
                row += [ms(t.eager_ms), "failed", "-"]
            else:
                flag = " ~" if t.noisy else ""
                row += [ms(t.eager_ms), ms(t.compiled_ms), f"{t.speedup:.2f}x{flag}"]
        rows.append(row)
    return tabulate(rows, headers=headers, tablefmt="simple")


def breaks_section(rep: Report, *, width: int = 100) -> str:
    """The table of distinct breaks, then each site's reason, fix and hints."""
    rows = [
        [i + 1, b.location, b.category, b.count, clip(b.source, 40)]
        for i, b in enumerate(rep.breaks)
    ]
    lines = [tabulate(rows, headers=["#", "location", "category", "count", "code"], tablefmt="simple")]
    for i, b in enumerate(rep.breaks):
        lines.append("")
        lines.append(f"[{i + 1}] {location(b.filename, b.lineno, full=True)} in {b.function or '?'}")
        lines.append(f"    {b.source}")
        lines.extend(textwrap.wrap(f"why: {b.reason}", width, initial_indent="    ", subsequent_indent="      "))
        lines.extend(textwrap.wrap(f"fix: {b.fix}", width, initial_indent="    ", subsequent_indent="      "))
        for hint in b.hints:
            lines.extend(textwrap.wrap(f"torch hint: {hint}", width, initial_indent="    ", subsequent_indent="      "))
        if b.doc_url:
            lines.append(f"    docs: {b.doc_url}")
    return "\n".join(lines)


def recompiles_section(rep: Report) -> str:
    """Each recompile with its failed guards in words."""
    lines = []
    for r in rep.recompiles:
        lines.append(f"{r.compile_id} {r.frame}:")
        for said in r.explained or r.reasons:
            lines.append(f"    - {said}")
    return "\n".join(lines)


def compile_time_section(rep: Report) -> str:
    """Compile time split by phase."""
    t = rep.compile_time
    text = f"total {t.total_s:.3f} s (dynamo {t.dynamo_s:.3f} s, backend {t.backend_s:.3f} s"
    if t.inductor_s:
        text += f", inductor {t.inductor_s:.3f} s"
    return text + f") over {plural(len(rep.frames), 'frame compile')}"


def timing_section(rep: Report) -> str:
    """End-to-end timing per mode."""
    rows = []
    for m in rep.timing:
        if m.error:
            rows.append([m.mode, m.device, "-", "-", "-", "-", f"failed: {clip(m.error, 40)}"])
            continue
        share = f"{m.in_graphs_ms / m.compiled_ms:.0%}" if m.compiled_ms > 0 and m.in_graphs_ms else "-"
        rows.append([
            m.mode, m.device, ms(m.eager_ms), ms(m.compiled_ms),
            f"{m.speedup:.2f}x" + (" ~" if m.noisy else ""), f"{m.first_call_s:.2f} s", share,
        ])
    return tabulate(
        rows,
        headers=["mode", "device", "eager", "compiled", "speedup", "first call", "in graphs"],
        tablefmt="simple",
    )


def guards_line(rep: Report) -> str:
    """One line: how many guards, on how many compiles, of which kinds (most first)."""
    kinds: dict[str, int] = {}
    for g in rep.guards:
        kinds[g.kind] = kinds.get(g.kind, 0) + 1
    top = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{k} {n}" for k, n in top[:5]) + (", ..." if len(top) > 5 else "")
    compiles = len({g.compile_id for g in rep.guards})
    return f"{plural(len(rep.guards), 'guard')} on {plural(compiles, 'compile')}: {shown}"


def warning_lines(rep: Report) -> list[str]:
    """What makes the counts incomplete or the report unusual, one line each."""
    out = []
    if rep.unparsed:
        out.append(
            f"{plural(rep.unparsed, 'PyTorch trace message')} dynscope could not read: "
            f"counts may be short (check() fails until this is 0 or allow_unparsed=True)"
        )
    out.extend(rep.notes)
    return out


def render_summary(rep: Report) -> str:
    """The whole terminal summary. Deterministic for a given report."""
    title = f"dynscope report: {rep.title}" if rep.title else "dynscope report"
    out = [title, "=" * len(title), totals_line(rep), ""]
    warnings = warning_lines(rep)
    if warnings:
        out += ["Read this first", *(f"    ! {w}" for w in warnings), ""]
    out += [f"Graphs ({rep.graph_count})", graphs_table(rep) if rep.graphs else "(none captured)", ""]
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
        out.append(f"Coverage: {c.ratio:.1%} of torch ops ran in graphs ({c.ops_in_graphs} in graphs, {c.ops_eager} eager)")
        for site, n in c.eager_sites[:5]:
            out.append(f"    eager: {site} x{n}")
        out.append("")
    if rep.timing:
        out += ["Timing (end to end)", timing_section(rep), ""]
    out += ["Compile time", compile_time_section(rep)]
    return "\n".join(out).rstrip() + "\n"
