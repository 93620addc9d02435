"""One self-contained HTML page for a report. Pure: model in, text out.

Inline CSS and SVG, no external fetches, works from file://. Every string that comes from
user code or torch is escaped, links from data are https or nothing, and a
Content-Security-Policy lets only dynscope's own inline style and script run (by their
sha256 hashes, no 'unsafe-inline'), so even a string that slipped through could not run
a script or a ``javascript:`` link.
"""

from __future__ import annotations

import base64
import hashlib
from typing import TYPE_CHECKING

from dynscope._format import few, location, percent, plural
from dynscope._model.structure import structure_hash
from dynscope._render import graph_tables, sections
from dynscope._render.blocks import Entry, Group, Listing, Phrase, Section, Table
from dynscope._render.figures import phase_seconds
from dynscope._render.graph_tables import code_anchor
from dynscope._render.html_parts import asset, esc, html_table
from dynscope._render.palette import PALETTE
from dynscope._render.section_html import (
    capital,
    entry_html,
    group_html,
    listing_html,
    notes_html,
    section_html,
    table_cells,
    table_html,
)
from dynscope._render.words import (
    PHASE_SOURCES,
    cache_text,
    compile_parts,
    human_bytes,
    inputs_text,
    memory_cell,
    phases_text,
    size_fix_line,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from dynscope._model import Frame, Graph, Report

__all__ = ["BUNDLE_CSP", "CSP", "CSS", "INLINE_SVG_MAX", "NO_PICTURES", "SCRIPT", "render_html"]


# The page's style and script are files (assets/report.css, assets/report.js), edited and
# linted as CSS and JS. Each block opens on a new line after its <style>/<script> tag, as
# the page always had; the CSP below allows exactly these strings (their sha256), so the
# page must inline them unchanged.
#: The page's stylesheet: assets/report.css, then one legend swatch per op category
#: (made from the palette, so the legend and the pictures never disagree on a colour).
CSS = "\n" + asset("report.css") + "".join(
    f".legend i.c{i}{{background:{colour}}}\n" for i, colour in enumerate(PALETTE.values())
)

#: The page's one script (assets/report.js): it records problems the page itself can see
#: (script errors, blocked fetches) where a headless browser test reads them back from the
#: DOM, and runs the zoom, the on-demand pictures and the node search.
SCRIPT = "\n" + asset("report.js")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


#: Only the page's own <style> and <script> blocks, matched by hash; no style attributes,
#: no other scripts, no javascript: URLs, no fetches, no forms, no <base>.
CSP = (
    f"default-src 'none'; style-src {_sha256(CSS)}; script-src {_sha256(SCRIPT)}; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)

#: The bundle's index.html: as CSP, and <img> may also show the picture files the bundle
#: wrote beside the page ('self': from file:// that is the page's own folder's files; an
#: SVG shown by <img> runs no script and fetches nothing).
BUNDLE_CSP = CSP.replace("img-src data:;", "img-src data: 'self';")

#: Pictures longer than this (characters of SVG) are not put in the page: the bundle's page
#: shows them on demand from their graph_<id>.svg file; Report.to_html() leaves them out.
INLINE_SVG_MAX = 250_000

#: What stands where a picture would be when the caller laid none out.
NO_PICTURES = (
    '<p class="warn">Pictures need Graphviz\'s <code>dot</code> program (Debian/Ubuntu: '
    '<code>apt-get install graphviz</code>; macOS: <code>brew install graphviz</code>).</p>'
)


def _breaks(section: Section) -> str:
    """The graph breaks' section: the site to fix first, the table of sites, each site at length."""
    out = [f"<p class=fixfirst><b>{esc(capital(section.lead))}</b></p>"] if section.blocks else [f"<p>{esc(section.empty)}</p>"]
    for block in section.blocks:
        if isinstance(block, Table):
            out.append(table_html(block))
        elif isinstance(block, Entry):
            out.append(entry_html(block))
    return f"<section><h2>{esc(section.title)}</h2>" + "\n".join(out) + "</section>\n"


def _recompiles(section: Section) -> str:
    """The recompiles, one part per function and cause (dynscope._render.sections.recompiles)."""
    groups = "".join(group_html(g) for g in section.blocks if isinstance(g, Group)) or f"<p>{esc(section.empty)}</p>"
    return f"<section><h2>{esc(section.title)}</h2>{groups}</section>\n"


def _timing(group: Group | None) -> str:
    """A graph's timing per mode (its group in the graphs part: dynscope._render.sections.graphs);
    "" when it was not timed."""
    return "" if group is None else "".join(table_html(t) for t in group.blocks if isinstance(t, Table))


# -- below Dynamo -------------------------------------------------------------------------


def _code_block(graph_id: int, side: str, code: str) -> str:
    """Output code, one span per line with an id to link to; folded."""
    lines = code.splitlines()
    body = "\n".join(
        f'<span id="{code_anchor(graph_id, side, n)}">{n:4d}  {esc(text)}</span>' for n, text in enumerate(lines, 1)
    )
    what = "backward" if side == "bwd" else "forward"
    return (
        f"<details><summary>Inductor output code, {what} ({plural(len(lines), 'line')})</summary>"
        f'<pre class="code" id="code-{graph_id}-{side}">{body}</pre></details>'
    )


def _note(note: str) -> str:
    """What a picture leaves out and why, said above it; "" for a picture drawn in full."""
    return f'<p class="picture-note">Picture: {esc(note)}.</p>' if note else ""


def _noted(note: str, svg: str) -> str:
    return _note(note) + svg


def _lowering(g: Graph, aot_svgs: Mapping[tuple[int, str], str], notes: Mapping[str, str] | None = None) -> str:
    """What Inductor made of one graph: kernels, saved tensors, phases, pictures, code."""
    low = g.lowering
    if low is None:
        return ""
    how = "the build dynscope measured on" if low.source == "timing" else "the compile PyTorch logged"
    facts = [f"Inductor ({esc(low.mode)}, {how}): {plural(len(low.kernels), 'kernel')}",
             f"{percent(low.mapped_share)} of the graph's compute nodes mapped to a kernel"]
    if low.unmapped:
        facts[-1] += f" (not mapped: {esc(few(list(low.unmapped), 8))})"
    if low.measured_ms is not None:
        facts.append(f"{low.measured_ms:.4f} ms per call (timer)")
    if low.profiled_ms is not None:
        facts.append(f"{low.profiled_ms:.4f} ms per call under the profiler")
    saved = low.saved_for_backward
    if saved is not None:
        facts.append(f"saved for backward: {plural(saved.count, 'tensor')}, {esc(human_bytes(saved.bytes))}"
                     + (f" ({saved.symbolic} of symbolic size, counted at size 1)" if saved.symbolic else ""))
    if low.recomputed:
        facts.append(f"recomputed in the backward instead of saved: {esc(few(list(low.recomputed), 8))}")
    if g.memory is not None and not g.memory.error:
        facts.append(f"memory: {esc(memory_cell(g.memory))} ({'forward+backward' if g.memory.trains else 'forward'} peak)")
    out = [f'<div class="lowering" id="lowering-{g.id}"><h3>Below Dynamo</h3><p>' + "; ".join(facts) + "</p>"]
    kernels = table_html(graph_tables.kernels(g, low), f'class="kernels" id="kernels-{g.id}"')
    out.append(kernels if low.kernels else "<p>No kernels listed.</p>")
    phases, cache = phases_text(phase_seconds([g])), cache_text([g])
    if phases:
        # Whose compile: the user's compile of this graph's frame, or dynscope's timed build.
        whose = PHASE_SOURCES.get(low.source, low.source)
        out.append(f"<p>Compile per phase ({esc(whose)}): {esc(phases)}</p>")
    if cache:
        out.append(f"<p>Cache: {esc(cache)}</p>")
    if low.notes:
        out.append('<ul class="warn">' + "".join(f"<li>{esc(n)}</li>" for n in low.notes) + "</ul>")
    for aot in (low.forward, low.backward):
        svg = aot_svgs.get((g.id, aot.kind)) if aot is not None else None
        if aot is not None and svg is not None:
            out.append(
                f"<h4>AOTAutograd {esc(aot.kind)} graph ({aot.op_count} ATen ops)</h4>"
                f"{_note((notes or {}).get(f'graph {g.id} {aot.kind}', ''))}"
                f'<div class="svgbox" id="aot-svg-{g.id}-{esc(aot.kind)}">{svg}</div>'
            )
    if low.code:
        out.append(_code_block(g.id, "fwd", low.code))
    if low.backward_code:
        out.append(_code_block(g.id, "bwd", low.backward_code))
    return "".join(out) + "</div>"


def _program_lowering(section: Section) -> str:
    """The program's part below Dynamo: its costliest kernels (or that none was timed), compile
    per phase, caches. Each graph's doubts about its lowering (the section's listing) are said
    in that graph's own part, beside its kernels."""
    out = [f'<section id="below-dynamo"><h2>{esc(section.title)}</h2>']
    for block in section.blocks:
        if isinstance(block, Table):
            out.append(f"<p>{esc(capital(block.title))}:</p>" + table_html(block, 'class="top-kernels"')
                       + "".join(f"<p>{esc(capital(n))}</p>" for n in block.notes))
        elif isinstance(block, Phrase):
            out.append(f"<p>{esc(capital(block.text))}.</p>")
    out += [f"<p>{esc(capital(n))}</p>" for n in section.notes]
    return "".join(out) + "</section>"


def _picture(g: Graph, svg: str | None, files: bool, no_pictures: str = NO_PICTURES) -> tuple[str, str, str]:
    """(what stands in the graph's picture box, the picture's state for the graph table,
    "inline", "off-page" or "none").

    A picture over INLINE_SVG_MAX stays out of the page: with ``files`` (the bundle wrote
    graph_<id>.svg beside the page) a button shows it on demand; without (a single-file
    page) a note says how to get it.
    """
    if svg is None:
        return no_pictures, "no picture", "none"
    if len(svg) <= INLINE_SVG_MAX:
        return svg, "picture on the page", "inline"
    size = human_bytes(len(svg.encode("utf-8", "replace")))
    name = f"graph_{g.id}.svg"
    if files:
        return (
            f'<p>This picture ({size}) is too large to put in the page. <button type="button" class="load" '
            f'data-src="{name}">Show it here</button> or open <a href="{name}">{name}</a>.</p>',
            f'picture on demand ({size}): <a href="{name}">{name}</a>', "off-page",
        )
    return (
        f'<p class="warn">This picture ({size}) is too large for a single-file page and is left out: '
        f"<code>rep.render(folder)</code> writes it to <code>{name}</code> and its index.html shows it on "
        "demand; <code>Graph.to_svg()</code> returns it.</p>",
        f"picture left out ({size})", "off-page",
    )


def _graph(
    g: Graph,
    svg: str | None,
    aot_svgs: Mapping[tuple[int, str], str] | None = None,
    *,
    files: bool = False,
    same: Sequence[int] = (),
    no_pictures: str = NO_PICTURES,
    frame: Frame | None = None,
    notes: Mapping[str, str] | None = None,
    timing: Group | None = None,
) -> str:
    """One graph's section; ``same`` lists the graphs of its structure (itself included)
    when there are several: the first is drawn, the others point to it. ``frame``: its
    compile, whose dynamic and fixed sizes are said beside the inputs. ``notes``: what its
    pictures leave out (see render_html's ``picture_notes``). ``timing``: its timing per
    mode, from the graphs part (None when not timed)."""
    notes = notes or {}
    head = (
        f'<h2>Graph {g.id} <small>({esc(g.compile_id)}, {esc(g.frame)}{_ddp_split(g)} in '
        f"{esc(location(g.filename, g.lineno))})</small></h2>"
    )
    if same and same[0] != g.id:
        return (
            f'<section id="graph-{g.id}" data-graph="{g.id}" data-picture="folded">{head}'
            f'<p>The same graph as <a href="#graph-{same[0]}">graph {same[0]}</a> (graphs '
            f"{_ids(same)} are the same graph: same ops, shapes and edges); its picture, ops and code are "
            f"there.</p>{_timing(timing)}{_lowering(g, aot_svgs or {}, notes)}</section>"
        )
    ops = table_html(graph_tables.ops(g))
    inputs = esc(inputs_text(g, None) or "none")  # parameters counted, as the summary counts them
    if frame is not None and (frame.shapes or frame.dynamic_sizes):
        said = [f"dynamic: {', '.join(frame.dynamic_sizes)}"] if frame.dynamic_sizes else []
        said += [size_fix_line(fx) for fx in frame.shapes if fx.kind == "fixed"]
        inputs += f" <small class='sizes'>({esc('; '.join(said))})</small>"
    box, _, where = _picture(g, svg, files, no_pictures)
    note = notes.get(f"graph {g.id}", "") if svg is not None else ""
    folded = f"<p>Graphs {_ids(same)} are the same graph (same ops, shapes and edges), drawn once here.</p>" if same else ""
    return (
        f'<section id="graph-{g.id}" data-graph="{g.id}" data-picture="{where}">{head}'
        f"<p>{plural(g.op_count, 'graph op')}, {g.node_count} nodes; inputs: {inputs}</p>{folded}"
        f'{_note(note)}<div class="svgbox" id="graph-svg-{g.id}">{box}</div>'
        f"{_timing(timing)}{_lowering(g, aot_svgs or {}, notes)}"
        f"<details><summary>graph ops</summary>{ops}</details>"
        f'<details><summary>code</summary><pre class="graph-code">{esc(g.code)}</pre></details></section>'
    )


def _ids(ids: Sequence[int]) -> str:
    """"3, 5 and 7"."""
    words = [str(i) for i in ids]
    return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else "".join(words)


def same_graphs(rep: Report) -> dict[int, list[int]]:
    """Graph id -> the ids of every graph of its structure (``structure_hash``), in order,
    for graphs that share it with another; a graph known only from the trace is never folded."""
    groups: dict[str, list[int]] = {}
    for g in rep.graphs:
        if g.nodes:
            groups.setdefault(structure_hash(g), []).append(g.id)
    return {i: ids for ids in groups.values() if len(ids) > 1 for i in ids}


def _graph_table(
    rep: Report, table: Table, svgs: Mapping[int, str], files: bool, same: Mapping[int, list[int]]
) -> str:
    """Every graph on one line (``table``: the graphs part's, dynscope._render.sections.graphs),
    with the state of its picture and a link to its section (or the section it is folded into)."""
    headers, rows = table_cells(table)
    for g, row in zip(rep.graphs, rows, strict=True):
        ids = same.get(g.id, [])
        if ids and ids[0] != g.id:
            status = f"same graph as {ids[0]}"
            link = f'<a href="#graph-{ids[0]}">graph {ids[0]}</a>'
        else:
            status = _picture(g, svgs.get(g.id), files)[1] if svgs else "no picture"
            if ids:
                status += f"; also graphs {_ids([i for i in ids if i != g.id])}"
            link = f'<a href="#graph-{g.id}">graph {g.id}</a>'
        status = ("Inductor failed; " if g.timing is not None and g.timing.failed else "") + status
        row += [status, link]
    return html_table([*headers, "status", "link"], rows, 'class="graph-table"')


def _legend() -> str:
    return '<p class="legend">' + "".join(
        f'<span><i class="c{i}"></i>{esc(name)}</span>' for i, name in enumerate(PALETTE)
    ) + "</p>"


def _end_to_end(section: Section) -> str:
    """The whole program timed per mode, then where the graphs' times do not add up to it."""
    tables = "".join(table_html(t) for t in section.blocks if isinstance(t, Table))
    return f"<section><h2>{esc(section.title)}</h2>{tables}{notes_html(section.notes)}</section>"


def _memory(section: Section) -> str:
    """The "Memory" part: the whole call's peaks and each graph's, those compile grew most
    first, with links to the graphs."""
    tables = "".join(
        table_html(t) + "".join(f"<p>{esc(capital(n))}.</p>" for n in t.notes)
        for t in section.blocks if isinstance(t, Table)
    )
    lead = f"<p>{esc(section.lead)}</p>" if section.lead else ""
    return f'<section id="memory"><h2>{esc(section.title)}</h2>{lead}{tables}{notes_html(section.notes)}</section>\n'


def _advice(section: Section) -> str:
    """"What each fix buys": the remedies dynscope.advise tried, best first, with the
    measured before -> after counts (the section's table: dynscope._render.sections.advice;
    its groups repeat the table's cells, which the page has room for)."""
    table = next(b for b in section.blocks if isinstance(b, Table))
    return (f'<section id="advice"><h2>{esc(section.title)}</h2><p>{esc(section.lead)}</p>'
            f"{table_html(table)}</section>\n")


def _warnings(section: Section) -> str:
    """What makes the counts incomplete (or the page lack its pictures), first on the page."""
    return f'<section class="warnings"><h2>{esc(section.title)}</h2>{notes_html(section.notes, "")}</section>\n'


def render_html(
    rep: Report,
    *,
    program_svg: str | None = None,
    graph_svgs: Mapping[int, str] | None = None,
    aot_svgs: Mapping[tuple[int, str], str] | None = None,
    picture_files: bool = False,
    pictures_note: str = "",
    picture_notes: Mapping[str, str] | None = None,
) -> str:
    """The whole page as a string. Pure: it never looks for or runs Graphviz.

    The caller lays the pictures out (``dynscope._render.pictures.lay_out``:
    ``dynscope._render.bundle`` does, for the bundle and ``Report.to_html``) and passes the
    SVG text; each picture left out is replaced by a note saying how to get Graphviz.

    Args:
        rep: the report.
        program_svg: the program picture (as ``Report.program_svg()`` draws it), or None.
        graph_svgs: graph id -> that graph's picture (as ``Graph.to_svg()`` draws it).
        aot_svgs: (graph id, ``AotGraph.kind``) -> the picture of that AOTAutograd graph;
            a lowered graph without one shows no AOT picture.
        picture_files: the page sits beside the graph_<id>.svg files (the bundle): a graph
            picture over INLINE_SVG_MAX characters is shown from its file on demand (and
            only then the page's CSP is BUNDLE_CSP, letting <img> load those files). False
            (a single-file page): such a picture is left out, with a note on how to get it.
        pictures_note: why there are no pictures when Graphviz is installed but failed
            (``dynscope._render.bundle`` passes the error): said in place of each picture and
            under "Read this first". Defaults to "" (the install hint when pictures are missing).
        picture_notes: what a picture leaves out and why ("program", "graph <id>", "graph
            <id> <kind>" -> note; ``dynscope._render.pictures.Pictures.notes``): said above it.

    Graphs of one structure (``structure_hash``) are drawn once; a table of every graph
    with links heads the graphs part, and a search box finds nodes across the pictures.
    """
    doc = sections.document(rep, warned=(f"No pictures: {pictures_note}",) if pictures_note else ())
    parts = {part.key: part for part in doc}
    head = parts["header"]
    no_pictures = f'<p class="warn">No pictures: {esc(pictures_note)}</p>' if pictures_note else NO_PICTURES
    notes = picture_notes or {}
    program = no_pictures if program_svg is None else _noted(notes.get("program", ""), program_svg)
    svgs = graph_svgs or {}
    same = same_graphs(rep)
    frames = {f.compile_id: f for f in rep.frames}
    # The page loads picture files only when one is off the page: else its CSP loads none.
    files = picture_files and any(len(svg) > INLINE_SVG_MAX for svg in svgs.values())
    graph_part = parts["graphs"]
    timings = {b.anchor: b for b in graph_part.blocks if isinstance(b, Group)}
    graphs = "\n".join(
        _graph(g, svgs.get(g.id), aot_svgs, files=picture_files, same=same.get(g.id, ()), no_pictures=no_pictures,
               frame=frames.get(g.compile_id), notes=notes, timing=timings.get(sections.timing_anchor(g.id)))
        for g in rep.graphs
    )
    body = []
    for part in doc:
        if part.key == "program":
            body.append(f"<section><h2>{esc(part.title)}</h2>{''.join(f'<p>{esc(n)}</p>' for n in part.notes)}\n"
                        f'<div class="svgbox" id="program-view">{program}</div></section>\n')
        elif part.key not in ("header", "compile-time", *_LAST):
            body.append(_LAYOUTS.get(part.key, section_html)(part))
    table = next(b for b in graph_part.blocks if isinstance(b, Table))
    last = [section_html(parts["guards"]),
            f'<section id="graphs"><h2>{esc(graph_part.title)}</h2>{_legend()}'
            f"{_graph_table(rep, table, svgs, picture_files, same)}</section>"]
    totals = "".join(b.text for b in head.blocks if isinstance(b, Phrase))
    ending = "\n".join(last)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{BUNDLE_CSP if files else CSP}">
<title>{esc(head.title)}</title><style>{CSS}</style><script>{SCRIPT}</script></head>
<body><header><h1>{esc(head.title)}</h1><div class="totals">{esc(totals)}</div>
<div>{esc(head.lead or "torch")}; compile {esc(compile_parts(rep.compile_time, 2))}</div>{_compile_detail(parts["compile-time"])}</header>
<nav class="find"><input type="search" id="find" placeholder="Find nodes: name, op or source line" aria-label="Find nodes by name, op or source line"> <span id="find-count"></span></nav>
<main>
{"".join(body)}
{ending}
{graphs}
</main></body></html>
"""


def _coverage(section: Section) -> str:
    """The coverage sentence, every eager site (the summary lists the first few) and what is
    not counted."""
    sites = "".join(listing_html(b) for b in section.blocks if isinstance(b, Listing))
    notes = "".join(f"<p>{esc(capital(n))}</p>" for n in section.notes)
    return f"<section><h2>{esc(section.title)}</h2><p>{esc(section.lead)}</p>{sites}{notes}</section>"


def _compile_detail(section: Section) -> str:
    """Under the header's compile figure: the same seconds by phase, and dynscope's own
    measurement builds apart from them; "" when there is neither."""
    return "".join(f"<div>{esc(capital(n))}</div>" for n in section.notes)


#: The page's layout of a part, by its key (a part not named here is laid out by
#: section_html); the header, the program picture and the graphs are laid out by render_html.
_LAYOUTS: dict[str, Callable[[Section], str]] = {
    "warnings": _warnings, "breaks": _breaks, "recompiles": _recompiles, "advice": _advice, "coverage": _coverage,
    "timing": _end_to_end, "memory": _memory, "below-dynamo": _program_lowering,
}

#: The parts the page keeps for its end, in this order (the graphs are followed by each
#: graph's own part); compile time is said under the header's figure instead.
_LAST = ("guards", "graphs")


def _ddp_split(g: Graph) -> str:
    """" [DDP bucket split]" for a piece DDP's optimizer split a compile into (not a break)."""
    return " [DDP bucket split]" if g.split_by == "ddp_bucket" else ""
