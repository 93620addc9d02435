"""Compact HTML for notebooks: a report's card, a graph's picture, a break's code. Pure.

``Report._repr_html_`` shows a card, not the page: the page of a real model runs to
megabytes, and a notebook stores every output in its .ipynb file. The card says what the
summary's first lines say (counts, the break sites to fix, recompiles, coverage, speedup,
the costliest kernels) and how to get the rest. A notebook is one page shared with other
outputs, so the style is scoped: every selector starts with ``.dynscope-card``; there is
no script and nothing is fetched. Every string from user code or PyTorch is escaped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dynscope._format import clip, location, plural
from dynscope._lexicon.wording import resume_label
from dynscope._render import graph_tables, sections
from dynscope._render.blocks import Group, Listing, Phrase, Section, Table
from dynscope._render.html_parts import asset, esc, html_table
from dynscope._render.section_html import capital, field_html, table_cells
from dynscope._render.words import inputs_text

if TYPE_CHECKING:

    from dynscope._model import Graph, GraphBreak, Report

__all__ = ["CARD_CSS", "TOP", "break_card", "graph_card", "render_card"]

#: How many break sites, recompile causes, warnings and kernels a card lists (the page has all).
TOP = 5

# The card's style is a file (assets/card.css); the block opens on a new line after <style>,
# as it always has.
CARD_CSS = "\n" + asset("card.css")


def _card(body: str) -> str:
    return f'<div class="dynscope-card"><style>{CARD_CSS}</style>{body}</div>'


def _marked(phrase: Phrase) -> str:
    """A line of pieces, those made as bad news (breaks, recompiles above zero) marked."""
    return "".join(f'<span class="ds-bad">{esc(t)}</span>' if tone == "bad" else esc(t) for t, tone in phrase.pieces)


def _more(shown: int, total: int, what: str) -> str:
    return f'<div class="ds-hint">+{plural(total - shown, what)} more</div>' if total > shown else ""


def _speedup(section: Section) -> str:
    """The end-to-end timing section's table in the card's columns (mode, device, the two
    times, the speedup, the first call), under the section's own title."""
    tables = [b for b in section.blocks if isinstance(b, Table)]
    return _heading(section) + "".join(html_table(*table_cells(t, "short")) for t in tables)


def _heading(section: Section) -> str:
    """A section's title as the card's heading, its bad news marked as it was made."""
    return f"<h4>{_marked(section.marked) if section.marked else esc(section.title)}</h4>"


def _breaks(section: Section) -> str:
    """The breaks section's first rows (the costliest sites first, as in the summary), in the
    card's columns, under the section's own title."""
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    headers, rows = table_cells(table, "short")
    return _heading(section) + html_table(headers, rows[:TOP]) + _more(TOP, len(rows), "site")


def _recompiles(section: Section) -> str:
    """The recompiles section's groups (a function and its cause each), the first few."""
    groups = [g for g in section.blocks if isinstance(g, Group)]
    items = "".join(f"<li>{esc(clip(g.title, 200))}</li>" for g in groups[:TOP])
    return _heading(section) + f"<ul>{items}</ul>" + _more(TOP, len(groups), "cause")


def _coverage(section: Section) -> str:
    """The coverage section's lead and its first eager sites."""
    eager = [b for b in section.blocks if isinstance(b, Listing)]
    sites = ", ".join(f"<code>{esc(site)}</code>" for b in eager for site in b.items[:3])
    return f"<h4>{esc(section.title)}</h4>{esc(section.lead)}" + (f"; eager: {sites}" if sites else "")


def _kernels(section: Section | None) -> str:
    """The first rows of the below-Dynamo section's costliest kernels, in the card's columns;
    "" when nothing was lowered or no kernel was timed."""
    tables = [b for b in section.blocks if isinstance(b, Table)] if section is not None else []
    if not tables:
        return ""
    headers, rows = table_cells(tables[0], "short")
    return f"<h4>{esc(capital(tables[0].title))}</h4>" + html_table(headers, rows[:TOP])  # the table's own title


def render_card(rep: Report) -> str:
    """The report as a compact HTML card: title, counts, the top break sites, recompile
    causes, coverage, speedup when timed, top kernels when lowered, and how to get the
    whole page. Small whatever the model's size (each list stops at ``TOP``)."""
    head = sections.header(rep)  # the summary's title and totals, the bad counts marked where made
    totals = "".join(_marked(b) for b in head.blocks if isinstance(b, Phrase))
    if head.lead:
        totals += f", {esc(head.lead)}"
    out = [f'<div class="ds-title">{esc(head.title)}</div>', f'<div class="ds-totals">{totals}</div>']
    warned = sections.warnings(rep)
    if warned is not None:
        items = "".join(f"<li>{esc(clip(w, 300))}</li>" for w in warned.notes[:TOP])
        out.append(f'<ul class="ds-warn">{items}</ul>' + _more(TOP, len(warned.notes), "note"))
    timing = sections.end_to_end(rep)
    if timing is not None:
        out.append(_speedup(timing))
    breaks = sections.breaks(rep)
    out.append(_breaks(breaks) if rep.breaks else f'<h4 class="ds-good">{esc(breaks.empty)}</h4>')
    if rep.recompiles:
        out.append(_recompiles(sections.recompiles(rep)))
    coverage = sections.coverage(rep)
    if coverage is not None:
        out.append(_coverage(coverage))
    out.append(_kernels(sections.below_dynamo(rep)))
    out.append(
        '<div class="ds-hint">The whole report: <code>rep.render("out/")</code> writes index.html with '
        "every graph's picture, <code>rep.to_html()</code> returns that page, <code>print(rep)</code> "
        "prints the text summary; <code>rep.graphs[i]</code> shows a graph's picture and "
        "<code>rep.breaks[i]</code> a break's code.</div>"
    )
    return _card("".join(out))


def _graph_title(graph: Graph) -> str:
    where = f" ({location(graph.filename, graph.lineno)})" if graph.filename else ""
    inputs = inputs_text(graph, 4)
    return (
        f'<div class="ds-title">Graph {graph.id} <code>{esc(resume_label(graph.frame))}</code>{esc(where)}</div>'
        f"<div>compile {esc(graph.compile_id)}: {plural(graph.op_count, 'graph op')}, "
        f"{plural(graph.node_count, 'node')}; inputs: {esc(inputs or '-')}</div>"
    )


def graph_card(graph: Graph, svg: str | None) -> str:
    """A graph in a notebook: its title and its picture (``svg``, laid out by the caller);
    with no picture (Graphviz not installed), its op counts and how to get Graphviz."""
    if svg is not None:
        return _card(_graph_title(graph) + f'<div class="ds-svg">{svg}</div>')
    ops = graph_tables.ops(graph)
    headers, rows = table_cells(replace(ops, rows=ops.rows[:10]), "short")
    return _card(
        _graph_title(graph)
        + "<h4>Graph ops</h4>" + html_table(headers, rows)
        + _more(10, len(graph.op_counts), "op kind")
        + '<div class="ds-hint">The picture needs Graphviz\'s <code>dot</code> program (Debian/Ubuntu: '
        "<code>apt-get install graphviz</code>; macOS: <code>brew install graphviz</code>); "
        "<code>graph.code</code> is the graph as Python.</div>"
    )


def break_card(brk: GraphBreak) -> str:
    """A break site in a notebook: the code around it with the line marked, then the site's
    entry as the page tells it (why Dynamo broke, dynscope's fix, PyTorch's hints and its
    page, https links only): one entry, built once in ``sections.break_entry``."""
    entry = sections.break_entry(brk)
    lines = []
    for n, text in entry.excerpt:
        # The marker shows the line even where the style is stripped (an untrusted notebook).
        if n == entry.hit:
            lines.append(f'<span class="ds-hit">&gt;{n:5d}  {esc(text)}</span>')
        else:
            lines.append(f" {n:5d}  {esc(text)}")
    return _card(
        f'<div class="ds-title">Graph break at <code>{esc(location(brk.filename, brk.lineno, full=True))}</code> '
        f"in <code>{esc(brk.function or '?')}</code></div>"
        f'<div><span class="ds-cat">{esc(brk.category)}</span> {esc(plural(brk.count, "break"))} here</div>'
        "<pre>" + "\n".join(lines) + "</pre>" + "".join(field_html(f) for f in entry.fields)
    )
