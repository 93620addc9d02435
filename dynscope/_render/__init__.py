"""Renderers: model in, str/bytes out (text, DOT, HTML, card, SVG through Graphviz, the bundle).

This package's own namespace is the door the model's output shortcuts go through
(``Report.summary()``, ``to_html()``, ``render()``, ``Graph.to_svg()``, ``_repr_html_``..., in
``dynscope._model.display``): each calls one function below, through a loader of this package
that ``dynscope/__init__`` hands the model (the model imports no renderer). Each function imports its renderer when
called, so importing the model (or one renderer) loads no other renderer. The renderers
(bundle, svg) call each other, never the shortcuts; the model's properties that say a cause
in words (``Recompile.explained``) come through here too; front ends may use both.

The command line reaches output through here, the public API and the shared leaves only: the
functions at the end (control sequences stripped, terminal colour, diffs). Nothing but
rendering is named here: a page the CLI writes goes through ``dynscope._write`` (a leaf), a
bundle through the model's ``render(folder)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from dynscope._model import (
        Advice,
        AotGraph,
        Cause,
        ExportReport,
        Graph,
        GraphBreak,
        Lowering,
        MultiRankReport,
        RecompileFix,
        Report,
    )
    from dynscope._model.budget import Overrun
    from dynscope._model.cache import CacheDiff, CacheMiss, PartChange
    from dynscope._model.diff import ReportDiff
    from dynscope._model.fix import FixResult
    from dynscope._model.ranks import Divergence
    from dynscope._model.watch import Verdict

__all__ = [
    "advice_text",
    "aot_graph_dot",
    "aot_graph_svg",
    "break_card",
    "budget_exceeded",
    "budget_problems",
    "cache_change_todo",
    "cache_change_what",
    "cache_diff_summary",
    "cache_miss_head",
    "cache_miss_lines",
    "diff_text",
    "divergence_detail",
    "cause_changed",
    "cause_explained",
    "export_html",
    "export_text",
    "fix_html",
    "fix_text",
    "fix_words",
    "graph_card",
    "graph_dot",
    "graph_script",
    "graph_svg",
    "merged_bundle",
    "merged_html",
    "merged_text",
    "overrun_lines",
    "plain",
    "printable",
    "program_dot",
    "program_svg",
    "render_folder",
    "report_card",
    "report_html",
    "summary_text",
    "verdict_text",
]


def summary_text(rep: Report, *, color: bool | None = None) -> str:
    """The terminal summary; ``color`` None colours when stdout is a terminal (``Report.summary``)."""
    from dynscope._render.terminal import use_color
    from dynscope._render.text import render_summary

    return render_summary(rep, color=use_color(color))


def report_html(rep: Report, *, pictures: bool | None = None, full: bool = False, progress: bool | None = None) -> str:
    """The self-contained HTML page (``Report.to_html``)."""
    from dynscope._render.bundle import html_page

    return html_page(rep, pictures=pictures, full=full, progress=progress)


def report_card(rep: Report) -> str:
    """The compact notebook card (``Report._repr_html_``)."""
    from dynscope._render.card import render_card

    return render_card(rep)


def render_folder(rep: Report, folder: Path, *, full: bool = False, progress: bool | None = None) -> Path:
    """index.html, the SVGs and report.json written to ``folder`` (``Report.render``)."""
    from dynscope._render.bundle import render_bundle

    return render_bundle(rep, folder, full=full, progress=progress)


def merged_bundle(merged: MultiRankReport, folder: Path) -> Path:
    """A merged job's index.html and merged.json written to ``folder`` (``MultiRankReport.render``)."""
    from dynscope._render.bundle import render_merged_bundle

    return render_merged_bundle(merged, folder)


def program_dot(rep: Report) -> str:
    """DOT of the whole program (``Report.program_dot``)."""
    from dynscope._render.dot import program_to_dot

    return program_to_dot(rep)


def program_svg(rep: Report, path: str | Path | None = None) -> str:
    """SVG of the whole program, also written to ``path`` when given (``Report.program_svg``)."""
    from dynscope._render.dot import program_to_dot

    return _bounded_svg(program_to_dot(rep), path, "the program", ())


def _bounded_svg(dot: str, path: str | Path | None, title: str, ops: tuple[tuple[str, int], ...]) -> str:
    """``dot_to_svg`` under its time limit; past it, a box saying so (``pictures.note_svg``)."""
    from dynscope._render.pictures import note_svg, stopped_note
    from dynscope._render.svg import LayoutTimeout, dot_to_svg

    try:
        return dot_to_svg(dot, path)
    except LayoutTimeout as err:
        from pathlib import Path

        from dynscope._write import write_text

        svg = note_svg(title, stopped_note(err.seconds, ops=bool(ops)), ops)
        if path is not None:
            write_text(Path(path), svg)
        return svg


def graph_dot(graph: Graph, *, depth: int | None = None, fold_params: bool = True, color_by: str = "auto",
              full: bool = False) -> str:
    """DOT of one captured graph (``Graph.to_dot``; the options are ``DotOptions``')."""
    from dynscope._render.dot import NODE_BUDGET, DotOptions, graph_to_dot

    return graph_to_dot(graph, DotOptions(depth=depth, fold_params=fold_params, color_by=color_by,
                                          max_nodes=None if full else NODE_BUDGET, fold_repeats=not full))


def graph_svg(
    graph: Graph,
    path: str | Path | None = None,
    *,
    depth: int | None = None,
    fold_params: bool = True,
    color_by: str = "auto",
    full: bool = False,
) -> str:
    """SVG of one captured graph, also written to ``path`` when given (``Graph.to_svg``)."""
    dot = graph_dot(graph, depth=depth, fold_params=fold_params, color_by=color_by, full=full)
    return _bounded_svg(dot, path, f"graph {graph.id} ({graph.frame}), {graph.node_count} nodes", graph.op_counts)


def graph_script(
    graph: Graph,
    path: str | Path | None = None,
    *,
    timing: bool = True,
    mode: str | None = None,
    report: Report | None = None,
) -> str:
    """A standalone script that rebuilds one graph and times it eager against Inductor, also
    written to ``path`` when given (``Graph.to_script``; see dynscope._render.script)."""
    from pathlib import Path

    from dynscope._render.script import graph_script as script
    from dynscope._write import write_text

    text = script(graph, timing=timing, mode=mode, report=report)
    if path is not None:
        write_text(Path(path), text)
    return text


def graph_card(graph: Graph) -> str:
    """A graph's notebook card: its picture, or its summary when Graphviz is missing or
    does not work (``Graph._repr_html_``)."""
    from dynscope._errors import GraphvizNotFoundError
    from dynscope._render.card import graph_card as card
    from dynscope._render.svg import have_graphviz

    try:
        svg = graph_svg(graph) if have_graphviz() else None
    except GraphvizNotFoundError:  # a dot on PATH that does not work: as if missing
        svg = None
    return card(graph, svg)


def aot_graph_dot(aot: AotGraph, lowering: Lowering | None = None, *, full: bool = False) -> str:
    """DOT of one AOTAutograd graph; ``lowering`` marks a backward's saved activations (``AotGraph.to_dot``)."""
    from dynscope._render.dot import NODE_BUDGET, aot_graph_to_dot

    return aot_graph_to_dot(aot, lowering, max_nodes=None if full else NODE_BUDGET)


def aot_graph_svg(aot: AotGraph, path: str | Path | None = None, lowering: Lowering | None = None, *,
                  full: bool = False) -> str:
    """SVG of one AOTAutograd graph, also written to ``path`` when given (``AotGraph.to_svg``)."""
    return _bounded_svg(aot_graph_dot(aot, lowering, full=full), path, f"AOT {aot.kind} graph, {aot.node_count} nodes",
                        aot.op_counts)


def break_card(brk: GraphBreak) -> str:
    """A break site's notebook card (``GraphBreak._repr_html_``)."""
    from dynscope._render.card import break_card as card

    return card(brk)


def budget_problems(overruns: Sequence[Overrun], rep: Report) -> list[str]:
    """A budget's overruns as readable blocks, one each (``Budget.problems``)."""
    from dynscope._render.budget import problems_text

    return problems_text(overruns, rep)


def budget_exceeded(overruns: Sequence[Overrun], rep: Report) -> tuple[str, list[str]]:
    """The error a broken budget raises, in words: its message and its blocks (``Budget.check``)."""
    from dynscope._render.budget import exceeded_text

    return exceeded_text(overruns, rep)


def overrun_lines(overrun: Overrun, rep: Report) -> tuple[str, list[str]]:
    """One overrun's head and the lines under it (the command line's gates)."""
    from dynscope._render.budget import overrun_detail, overrun_head

    return overrun_head(overrun, rep), overrun_detail(overrun, rep)


def cause_explained(cause: Cause) -> str:
    """A failed guard said plainly, with its values (``Cause.explained``)."""
    from dynscope._render.causes import explained

    return explained(cause)


def cause_changed(cause: Cause) -> str:
    """What changed, as recompiles are grouped (``Cause.what_changed``)."""
    from dynscope._render.causes import what_changed

    return what_changed(cause)


def fix_words(fix: RecompileFix) -> str:
    """What to do about a change that made a function recompile (``RecompileFix.words``)."""
    from dynscope._render.causes import fix_words as words

    return words(fix)


def cache_change_what(change: PartChange) -> str:
    """A changed part of a cache key, in words (``PartChange.what``)."""
    from dynscope._render.cache import change_what

    return change_what(change)


def cache_change_todo(change: PartChange) -> str:
    """What to do about a changed key part (``PartChange.todo``)."""
    from dynscope._render.cache import change_todo

    return change_todo(change)


def cache_miss_head(miss: CacheMiss) -> str:
    """A miss's head line (``CacheMiss.head``)."""
    from dynscope._render.cache import miss_head

    return miss_head(miss)


def cache_miss_lines(miss: CacheMiss) -> list[str]:
    """A miss and its causes in words (``CacheMiss.lines``)."""
    from dynscope._render.cache import miss_lines

    return miss_lines(miss)


def cache_diff_summary(diff: CacheDiff) -> str:
    """Two runs' cache lookups compared, as text (``CacheDiff.summary``)."""
    from dynscope._render.cache import diff_summary

    return diff_summary(diff)


def advice_text(advice: Advice) -> str:
    """The trials as a plain-text table, best first (``Advice.summary``)."""
    from dynscope._render.text import advice_section

    return str(advice_section(advice.trials, empty=advice.note))


def divergence_detail(divergence: Divergence) -> str:
    """What differs between the ranks, in words (``Divergence.detail``)."""
    from dynscope._render.divergences import detail

    return detail(divergence)


def verdict_text(verdict: Verdict, *, saved: str = "") -> str:
    """The words every rank of a watched job says (``Verdict.message``)."""
    from dynscope._render.divergences import verdict_text as said

    return said(verdict, saved=saved)


def merged_text(merged: MultiRankReport) -> str:
    """A merged job's divergences and ranks as plain text (``MultiRankReport.summary``)."""
    from dynscope._render.ranks import render_merged_text

    return render_merged_text(merged)


def merged_html(merged: MultiRankReport) -> str:
    """A merged job's self-contained HTML page (``MultiRankReport.to_html``)."""
    from dynscope._render.ranks import render_merged_html

    return render_merged_html(merged)


def fix_text(result: FixResult) -> str:
    """``dynscope.fix``'s patches and evidence as plain text (``FixResult.summary``)."""
    from dynscope._render.fix import fix_text as render

    return render(result)


def fix_html(result: FixResult) -> str:
    """``dynscope.fix``'s self-contained page (``FixResult.to_html``)."""
    from dynscope._render.fix import fix_html as render

    return render(result)


def export_text(rep: ExportReport) -> str:
    """An export report as plain text (``ExportReport.summary``)."""
    from dynscope._render.export import render_export_text

    return render_export_text(rep)


def export_html(rep: ExportReport, *, pictures: bool | None = None) -> str:
    """An export report's self-contained page, its graph drawn when Graphviz is there
    (``pictures`` None) or asked for (True) (``ExportReport.to_html``)."""
    from dynscope._render.export import render_export_html
    from dynscope._render.svg import have_graphviz

    svg = None
    draw = have_graphviz() if pictures is None else pictures
    if draw and rep.graph is not None:
        svg = graph_svg(rep.graph)
    return render_export_html(rep, graph_svg=svg)


# -- for the front ends: what the command line prints and writes besides the shortcuts ------


def plain(text: str) -> str:
    """``text`` with terminal control sequences removed (all the CLI prints of a report's text)."""
    from dynscope._render.text import strip_controls

    return strip_controls(text)


def printable(rep: Report) -> Report:
    """The report with terminal control sequences removed from every string in it.

    Stripped before rendering, so a control character cannot bend the layout either (a
    carriage return splits a table cell); the CLI strips the printed text again.
    """
    from dynscope._model.codec import report_from_dict
    from dynscope._render.text import strip_controls

    changed = False

    def clean(value: Any) -> Any:
        nonlocal changed
        if isinstance(value, str):
            # Most strings hold no control character at all: only those go through the regex.
            if value.isprintable():
                return value
            out = strip_controls(value)
            changed = changed or out != value
            return out
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    cleaned = clean(rep.to_dict())
    # Rebuilt only when a string changed: a report with nothing to strip is returned as it is.
    return report_from_dict(cleaned) if changed else rep


def diff_text(diff: ReportDiff) -> str:
    """A report diff as plain text (``dynscope diff``)."""
    from dynscope._render.diff import render_diff

    return str(render_diff(diff))
