"""Every picture of a report laid out in bounded time, with a note for each picture that
leaves something out.

The DOT is planned under a node budget (``dynscope._render.dot``: repeats drawn once,
module levels collapsed, values read by many nodes without their edges, past the budget a
box of the graph's most used ops); a picture of over QUICK_EDGES edges gets Graphviz's quick
placement (its note says so); each picture is then laid out by ``dot`` under a time
limit (``dynscope._render.svg``), several at once. A picture ``dot`` did not finish in time
becomes a small SVG written here, without Graphviz, that says so: a page always comes out,
and never waits on Graphviz for more than its limits.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dynscope._format import plural
from dynscope._progress import Progress
from dynscope._render.dot import NODE_BUDGET, DotOptions, aot_graph_plan, graph_plan, program_to_dot
from dynscope._render.svg import LayoutTimeout, dot_timeout_s, dot_to_svg, env_seconds, scope_ids

if TYPE_CHECKING:
    from dynscope._model import Report

__all__ = ["PAGE_BUDGET_S", "QUICK_EDGES", "Pictures", "lay_out", "note_svg", "page_budget_s", "quick", "stopped_note"]

#: Seconds all of one page's pictures may take to lay out (``DYNSCOPE_PAGE_BUDGET``
#: overrides); pictures not started by then are left out with a note.
PAGE_BUDGET_S = 60.0


def page_budget_s() -> float:
    """The time all of a page's layouts may take: ``DYNSCOPE_PAGE_BUDGET`` (seconds), else PAGE_BUDGET_S."""
    return env_seconds("DYNSCOPE_PAGE_BUDGET", PAGE_BUDGET_S)


@dataclass(frozen=True)
class Pictures:
    """A report's pictures as SVG (element ids scoped for one page) and, per picture that
    leaves something out, what and why ("program", "graph <id>", "graph <id> <kind>")."""

    program: str
    graphs: dict[int, str] = field(default_factory=dict)
    aot: dict[tuple[int, str], str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def as_tuple(self) -> tuple[str, dict[int, str], dict[tuple[int, str], str]]:
        """(program, graphs, AOT graphs), as the page and the bundle take them."""
        return self.program, self.graphs, self.aot


@dataclass(frozen=True)
class _Job:
    key: str  # the note's key: "program", "graph 3", "graph 3 forward"
    gid: int | None  # the graph it draws; None for the program
    kind: str  # the AOT graph's kind ("forward"...); "" for the graph itself or the program
    dot: str
    note: str  # what the plan left out ("" for none)
    title: str  # what the picture is, for a picture dot could not finish
    ops: tuple[tuple[str, int], ...]  # its most used ops, for that picture
    prefix: str  # element id prefix on the page


#: Pictures with more edges than this are laid out with Graphviz's quick placement
#: (QUICK_LAYOUT): dense AOT graphs (a GPT-2 train step's forward, 450 nodes and 700 edges
#: with 150 parameters read far below) took ``dot`` 45 s of network simplex, 1-3 s so.
QUICK_EDGES = 300
#: The graph attributes of the quick placement: one pass of network simplex for ranks and
#: positions (nslimit1, nslimit), a tenth of the crossing-minimisation passes (mclimit).
QUICK_LAYOUT = {"nslimit": "1", "nslimit1": "1", "mclimit": "0.1"}


def quick(dot: str, note: str) -> tuple[str, str]:
    """``dot`` with the quick placement when it has over QUICK_EDGES edges, and its note saying so."""
    edges = dot.count(" -> ")
    start = dot.find("{")
    if edges <= QUICK_EDGES or start < 0:
        return dot, note
    attrs = "".join(f" {k}={v};" for k, v in QUICK_LAYOUT.items())
    said = (f"laid out with Graphviz's quick placement ({edges} edges, over {QUICK_EDGES}: "
            f"{', '.join(f'{k}={v}' for k, v in QUICK_LAYOUT.items())}), so edges may cross more than they need to")
    return dot[:start + 1] + attrs + dot[start + 1:], f"{note}; {said}" if note else said


def _jobs(rep: Report, full: bool) -> list[_Job]:
    budget = None if full else NODE_BUDGET
    jobs = [_Job("program", None, "", program_to_dot(rep), "", "the program", (), "program-")]
    for g in rep.graphs:
        dot, note = quick(*graph_plan(g, DotOptions(max_nodes=budget, fold_repeats=not full)))
        jobs.append(_Job(f"graph {g.id}", g.id, "", dot, note, f"graph {g.id} ({g.frame}), {g.node_count} nodes",
                         g.op_counts, f"g{g.id}-"))
        low = g.lowering
        for aot in (low.forward, low.backward) if low is not None else ():
            if aot is None:
                continue
            dot, note = quick(*aot_graph_plan(aot, low, max_nodes=budget))
            jobs.append(_Job(f"graph {g.id} {aot.kind}", g.id, aot.kind, dot, note,
                             f"graph {g.id}'s AOT {aot.kind} graph, {aot.node_count} nodes",
                             aot.op_counts, f"g{g.id}-{aot.kind}-"))
    return jobs


def lay_out(rep: Report, *, full: bool = False, progress: Progress | None = None) -> Pictures:
    """Every picture of the page (program, graphs, AOT graphs), laid out several at once.

    Args:
        rep: the report.
        full: draw every node of every graph (no node budget); the time limits still hold.
        progress: where to say which picture is being laid out.

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed or does not work.
    """
    jobs = _jobs(rep, full)
    limit, deadline = dot_timeout_s(), time.monotonic() + page_budget_s()
    show = progress or Progress("render", show=False)
    show.phase(f"laying out {plural(len(jobs), 'picture')}", total=len(jobs))

    def one(job: _Job) -> tuple[str, str]:
        left = deadline - time.monotonic()
        if left <= 0:
            note = f"not laid out: the page's {page_budget_s():g} s for pictures were spent on the others"
            return note_svg(job.title, note, job.ops), note
        try:
            return dot_to_svg(job.dot, timeout_s=min(limit, left)), job.note
        except LayoutTimeout as err:
            note = stopped_note(err.seconds, job.note, ops=bool(job.ops))
            return note_svg(job.title, note, job.ops), note
        finally:
            show.advance(job.key)

    workers = max(1, min(4, os.cpu_count() or 1, len(jobs)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dynscope-dot") as pool:
        done = list(pool.map(one, jobs))
    show.done()
    program = ""
    graphs: dict[int, str] = {}
    aot: dict[tuple[int, str], str] = {}
    notes: dict[str, str] = {}
    for job, (svg, note) in zip(jobs, done, strict=True):
        svg = scope_ids(svg, job.prefix)
        if note:
            notes[job.key] = note
        if job.gid is None:
            program = svg
        elif not job.kind:
            graphs[job.gid] = svg
        else:
            aot[(job.gid, job.kind)] = svg
    return Pictures(program=program, graphs=graphs, aot=aot, notes=notes)


def stopped_note(seconds: float, tried: str = "", *, ops: bool = True) -> str:
    """What stands for a picture ``dot`` did not finish within ``seconds`` (``tried``: what the
    picture it was laying out had already left out; ``ops``: its most used ops are shown)."""
    note = (f"Graphviz did not finish laying this picture out within {seconds:g} s and was stopped; "
            + ("shown: its most used ops. Draw" if ops else "draw")
            + " less (Graph.to_svg(depth=1)) or allow more time (DYNSCOPE_DOT_TIMEOUT=<seconds>)")
    return note + (f" (the picture tried: {tried})" if tried else "")


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def note_svg(title: str, note: str, ops: tuple[tuple[str, int], ...] = ()) -> str:
    """A small SVG, made without Graphviz, that stands for a picture not laid out: what it
    is, why it is not drawn, and its most used ops."""
    import textwrap

    lines = [title, *textwrap.wrap(note, 90)]
    if ops:
        lines += ["", *(f"{t} x{n}" for t, n in ops[:12])]
    height = 22 + 16 * len(lines)
    width = 12 + 7 * max((len(line) for line in lines), default=20)
    bold = ' font-weight="bold"'
    rows = "".join(
        f'<text x="10" y="{24 + 16 * i}" font-family="Helvetica,sans-serif" font-size="12"'
        f'{bold if i == 0 else ""}>{_xml(line)}</text>'
        for i, line in enumerate(lines)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}pt" height="{height}pt" '
        f'viewBox="0 0 {width} {height}" class="not-laid-out"><g id="graph0" class="graph">'
        f'<rect x="1" y="1" width="{width - 2}" height="{height - 2}" fill="#fff7ec" stroke="#b2182b"/>'
        f"{rows}</g></svg>"
    )
