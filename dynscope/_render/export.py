"""An export report (``dynscope.export_report``) as text and as one self-contained page, both
walking one document of sections (:func:`export_document`).

Pure: the exported graph's picture comes in as SVG text (or None), never drawn here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import location, plural
from dynscope._render.blocks import Column, Field, Group, Listing, Section, Table
from dynscope._render.html import CSP, CSS, NO_PICTURES
from dynscope._render.html_parts import esc
from dynscope._render.section_html import section_html
from dynscope._render.section_text import group_lines, section_lines

if TYPE_CHECKING:
    from dynscope._model.export import ExportBlocker, ExportReport

__all__ = ["blocker_text", "export_document", "render_export_html", "render_export_text"]

_STATES = {True: "exports", False: "still fails", None: "not tried"}


def _verdict(rep: ExportReport) -> str:
    mode = "strict" if rep.strict else "non-strict"
    return f"{'exports' if rep.exported else 'does not export'} ({mode})"


def _blocker(anchor: str, b: ExportBlocker) -> Group:
    """One blocker: "kind at file:line: what", then its source line, its fix, PyTorch's
    words (the page's alone, folded)."""
    fields = [Field("", b.code, "code")] if b.code else []
    if b.fix:
        fields.append(Field("fix", b.fix))
    if b.pytorch:
        fields.append(Field("PyTorch's words", b.pytorch, "folded"))
    return Group(anchor=anchor, title=f"{b.kind}" + (f" at {b.where}" if b.where else "") + f": {b.summary}",
                 fields=tuple(fields))


_GRAPH_SOURCE = {"export": "torch.export", "suggested": "torch.export with the suggested dynamic_shapes",
                 "draft_export": "draft_export (unsound: made on its assumptions)"}


def export_document(rep: ExportReport) -> tuple[Section, ...]:
    """Every part of the export report, in order, built once: the head (title, verdict,
    torch), the error, the blockers, draft_export's findings, the suggested dynamic_shapes,
    the sizes, torch.compile's breaks side by side, the exported graph (the page draws its
    picture in it), the notes. The text and the page walk it."""
    doc = [Section(rep.title, lead=f"{_verdict(rep)}; torch {rep.torch_version}" if rep.torch_version else _verdict(rep),
                   key="head", lead_kind="flat")]
    if rep.error:
        doc.append(Section("Error", lead=rep.error, key="error", tone="bad"))
    if rep.blockers:
        doc.append(Section(f"Blockers ({len(rep.blockers)})", key="blockers", tone="bad",
                           blocks=tuple(_blocker(f"blocker-{i}", b) for i, b in enumerate(rep.blockers))))
    if rep.draft:
        doc.append(Section(f"draft_export found {plural(len(rep.draft), 'issue')}", key="draft",
                           blocks=tuple(_blocker(f"draft-{i}", b) for i, b in enumerate(rep.draft))))
    s = rep.suggested_shapes
    if s is not None:
        state = f"still fails: {s.error}" if s.exported is False else _STATES[s.exported]
        doc.append(Section(f"Suggested dynamic_shapes ({state})", key="suggested",
                           blocks=(Group("suggested-source", "", (Field("", s.source, "pre"),)),)))
    if rep.range_constraints:
        doc.append(Section("Sizes", key="sizes", blocks=(
            Listing("", tuple(words for _, words in rep.range_constraints), len(rep.range_constraints),
                    style="bullets"),)))
    if rep.compile_breaks:
        rows = tuple((location(c.filename, c.lineno), c.category, c.code,
                      f"blocks export ({c.blocker_kind})" if c.blocker else "does not block export")
                     for c in rep.compile_breaks)
        doc.append(Section(
            f"torch.compile: {plural(len(rep.compile_breaks), 'graph break')}, {len(rep.break_blockers)} of them export "
            "blockers", key="compile", blocks=(Table(_COMPILE, rows, said="{0} [{1}]: {2}", said_in="text"),)))
    if rep.graph is not None:
        g = rep.graph
        inputs = ", ".join(m.describe() for m in g.inputs[:12]) + (" ..." if len(g.inputs) > 12 else "")
        doc.append(Section(f"The exported graph ({_GRAPH_SOURCE.get(rep.graph_source, rep.graph_source)})",
                           lead=f"{plural(g.op_count, 'op')}; inputs: {inputs}", key="graph",
                           blocks=(Group("graph-code", "", (Field("code", g.code, "folded"),)),)))
    if rep.notes:
        doc.append(Section("Notes", key="notes", blocks=(Listing("", rep.notes, len(rep.notes), style="bullets"),)))
    return tuple(doc)


_COMPILE = (Column("site", "code"), Column("category"), Column("code", "pre", only="html"), Column("export"))


def render_export_text(rep: ExportReport) -> str:
    """The plain-text report: the head line, then each part under its title (a part of one
    sentence on its title's line)."""
    head, *parts = export_document(rep)
    lines = [f"{head.title}: {_verdict(rep)}"]
    for section in parts:
        if not section.blocks:
            lines.append(f"{section.title}: {section.lead}")
            continue
        lines.append(f"{section.title}:")
        lines += ["  " + ln if ln else ln for ln in section_lines(section)]
    return "\n".join(ln.rstrip() for ln in lines)


def blocker_text(b: ExportBlocker) -> str:
    """One blocker as the export report's text says it: "kind at file:line: what", its
    source line, its fix (the blockers section's own group)."""
    return "\n".join(group_lines(_blocker("", b)))


def render_export_html(rep: ExportReport, *, graph_svg: str | None = None) -> str:
    """The whole page as a string; ``graph_svg``: the exported graph's picture
    (``Graph.to_svg()``), None when there is no graph or no Graphviz."""
    head, *parts = export_document(rep)
    title = f"dynscope export: {head.title}"
    body = [f"<header><h1>{esc(title)}</h1><div class='totals'>{esc(head.lead)}</div></header><main>"]
    for section in parts:
        if section.key == "graph":  # the picture between the lead and the folded code
            picture = f"<div class='svgbox'>{graph_svg if graph_svg is not None else NO_PICTURES}</div>"
            body.append(section_html(section, anchor="graph", after_lead=picture))
        else:
            body.append(section_html(section, anchor=section.key))
    body.append("</main>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")
