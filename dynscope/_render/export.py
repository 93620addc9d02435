"""An export report (``dynscope.export_report``) as text and as one self-contained page.

Pure: the exported graph's picture comes in as SVG text (or None), never drawn here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import location, plural
from dynscope._render.html import CSP, CSS, NO_PICTURES
from dynscope._render.html_parts import esc, html_table

if TYPE_CHECKING:
    from dynscope._model.export import ExportBlocker, ExportReport

__all__ = ["blocker_text", "render_export_html", "render_export_text"]

_STATES = {True: "exports", False: "still fails", None: "not tried"}


def render_export_text(rep: ExportReport) -> str:
    """The plain-text report: does it export, each blocker at its line with the fix,
    draft_export's findings, the suggested dynamic_shapes, the sizes, compile's breaks."""
    mode = "strict" if rep.strict else "non-strict"
    lines = [f"{rep.title}: " + (f"exports ({mode})" if rep.exported else f"does not export ({mode})")]
    if rep.error:
        lines.append(f"  error: {rep.error}")
    lines += ["  " + blocker_text(b).replace("\n", "\n  ") for b in rep.blockers]
    if rep.draft:
        lines.append(f"  draft_export found {plural(len(rep.draft), 'issue')}:")
        lines += ["    " + blocker_text(b).replace("\n", "\n    ") for b in rep.draft]
    s = rep.suggested_shapes
    if s is not None:
        state = f"still fails: {s.error}" if s.exported is False else _STATES[s.exported]
        lines.append(f"  suggested dynamic_shapes ({state}):")
        lines += ["    " + ln for ln in s.source.splitlines()]
    if rep.range_constraints:
        lines.append("  sizes: " + "; ".join(words for _, words in rep.range_constraints))
    if rep.compile_breaks:
        lines.append(
            f"  torch.compile: {plural(len(rep.compile_breaks), 'graph break')}, "
            f"{len(rep.break_blockers)} of them export blockers"
        )
        for c in rep.compile_breaks:
            verdict = f"blocks export ({c.blocker_kind})" if c.blocker else "does not block export"
            lines.append(f"    {location(c.filename, c.lineno)} [{c.category}]: {verdict}")
    lines += [f"  note: {n}" for n in rep.notes]
    return "\n".join(lines)


def blocker_text(b: ExportBlocker) -> str:
    """One blocker: "kind at file:line: what", its source line, its fix."""
    head = f"{b.kind}" + (f" at {b.where}" if b.where else "") + f": {b.summary}"
    lines = [head]
    if b.code:
        lines.append(f"    {b.code}")
    if b.fix:
        lines.append(f"  fix: {b.fix}")
    return "\n".join(lines)


def _blocker_rows(blockers: tuple[ExportBlocker, ...]) -> list[list[str]]:
    return [
        [esc(b.kind), f"<code>{esc(b.where or '-')}</code>", f"<pre>{esc(b.code)}</pre>", esc(b.summary), esc(b.fix),
         f"<details><summary>PyTorch's words</summary><pre>{esc(b.pytorch)}</pre></details>"]
        for b in blockers
    ]


def render_export_html(rep: ExportReport, *, graph_svg: str | None = None) -> str:
    """The whole page as a string; ``graph_svg``: the exported graph's picture
    (``Graph.to_svg()``), None when there is no graph or no Graphviz."""
    mode = "strict" if rep.strict else "non-strict"
    verdict = "exports" if rep.exported else "does not export"
    title = f"dynscope export: {rep.title}"
    parts = [f"<header><h1>{esc(title)}</h1><div class='totals'>{esc(verdict)} ({mode}); torch "
             f"{esc(rep.torch_version)}</div></header><main>"]
    if rep.error:
        parts.append(f"<section class='warnings'><h2>Error</h2><p>{esc(rep.error)}</p></section>")
    headers = ["kind", "where", "code", "what", "fix", "PyTorch"]
    if rep.blockers:
        parts.append(f"<section id='blockers'><h2>Blockers ({len(rep.blockers)})</h2>"
                     f"{html_table(headers, _blocker_rows(rep.blockers))}</section>")
    if rep.draft:
        parts.append(f"<section id='draft'><h2>draft_export's findings ({len(rep.draft)})</h2>"
                     f"{html_table(headers, _blocker_rows(rep.draft))}</section>")
    s = rep.suggested_shapes
    if s is not None:
        state = f"still fails: {s.error}" if s.exported is False else _STATES[s.exported]
        parts.append(f"<section id='suggested'><h2>Suggested dynamic_shapes ({esc(state)})</h2>"
                     f"<pre>{esc(s.source)}</pre></section>")
    if rep.compile_breaks:
        rows = [[f"<code>{esc(location(c.filename, c.lineno))}</code>", esc(c.category), f"<pre>{esc(c.code)}</pre>",
                 esc(f"blocks export ({c.blocker_kind})" if c.blocker else "does not block export")]
                for c in rep.compile_breaks]
        parts.append("<section id='compile'><h2>torch.compile's graph breaks, side by side</h2>"
                     f"{html_table(['site', 'category', 'code', 'export'], rows)}</section>")
    if rep.graph is not None:
        g = rep.graph
        source = {"export": "torch.export", "suggested": "torch.export with the suggested dynamic_shapes",
                  "draft_export": "draft_export (unsound: made on its assumptions)"}.get(rep.graph_source, rep.graph_source)
        sizes = "".join(f"<li>{esc(w)}</li>" for _, w in rep.range_constraints)
        inputs = ", ".join(esc(m.describe()) for m in g.inputs[:12]) + (" ..." if len(g.inputs) > 12 else "")
        parts.append(
            f"<section id='graph'><h2>The exported graph ({esc(source)})</h2><p>{plural(g.op_count, 'op')}; "
            f"inputs: {inputs}</p>" + (f"<ul>{sizes}</ul>" if sizes else "")
            + f"<div class='svgbox'>{graph_svg if graph_svg is not None else NO_PICTURES}</div>"
            f"<details><summary>code</summary><pre>{esc(g.code)}</pre></details></section>"
        )
    if rep.notes:
        parts.append("<section><h2>Notes</h2><ul>" + "".join(f"<li>{esc(n)}</li>" for n in rep.notes) + "</ul></section>")
    parts.append("</main>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
