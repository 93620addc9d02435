"""The report's tables about graphs, built once as data (dynscope._render.blocks): every
graph on one row, one graph's Inductor kernels, the program's costliest kernels. The
terminal and the page lay the same rows out; a column only one of them has room for (the
terminal's timing columns, the page's longer lists) says so (``Column.only``).

Pure: model in, data out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import location
from dynscope._lexicon.wording import resume_label
from dynscope._render.blocks import Amount, Cell, Column, Items, Table
from dynscope._render.figures import runs_shown
from dynscope._render.words import (
    grads_text,
    inputs_text,
    kernel_label,
    memory_cell,
    pass_label,
    runs_text,
    samples_text,
    speedup_text,
    timing_notes,
)

if TYPE_CHECKING:
    from dynscope._model import Graph, Kernel, Lowering, Report, Timing

__all__ = ["TOP_KERNELS_SHOWN", "code_anchor", "frame_label", "graphs", "kernels", "timing", "top_kernels"]

#: The costliest kernels the terminal lists (the page lists twice as many).
TOP_KERNELS_SHOWN = 5


def frame_label(graph: Graph) -> str:
    """"forward (model.py:12)": the graph's frame, and where it starts."""
    name = resume_label(graph.frame) or "?"
    if graph.split_by == "ddp_bucket":  # DDP's optimizer split it: not a graph break
        name += " [DDP bucket split]"
    return f"{name} ({location(graph.filename, graph.lineno)})" if graph.filename else name


def graphs(rep: Report) -> Table:
    """Every graph on one row: its compile, frame, size and inputs, how often it ran and its
    peak memory where counted; the terminal adds each graph's timing (the page shows that in
    the graph's own part)."""
    timed = any(g.timing for g in rep.graphs)
    # Forward+backward columns only when a graph was timed for training: an inference
    # report reads as it always did.
    trains = any(g.timing is not None and g.timing.trains for g in rep.graphs)
    measured = any(g.memory is not None for g in rep.graphs)
    runs = runs_shown(rep)
    columns = [Column("id"), Column("compile", only="text"), Column("frame"), Column("graph ops"),
               Column("nodes", only="text"), Column("inputs")]
    columns += [Column("runs")] if runs else []
    columns += [Column("peak eager -> compiled")] if measured else []
    if timed:
        columns += [Column(h, only="text") for h in ("eager", "inductor", "speedup", "samples")]
    if trains:
        columns += [Column(h, only="text") for h in ("fwd+bwd eager", "fwd+bwd inductor", "grads")]
    rows = []
    for g in rep.graphs:
        row: list[object] = [g.id, g.compile_id, frame_label(g), g.op_count, g.node_count or "-", inputs_text(g) or "-"]
        row += [runs_text(g, rep.calls)] if runs else []
        row += [memory_cell(g.memory)] if measured else []
        row += _timing_cells(g.timing) if timed else []
        row += _train_cells(g.timing) if trains else []
        rows.append(tuple(row))
    return Table(tuple(columns), tuple(rows))


def ops(g: Graph) -> Table:
    """The graph's ops by kind, most first, with their counts (its page part and its card)."""
    return Table((Column("graph op", "code"), Column("count")), tuple((t, str(n)) for t, n in g.op_counts))


def timing(g: Graph) -> Table | None:
    """One graph's timing, a row per mode: eager against compiled, the samples, the build's
    seconds, the numerics, forward+backward for a training graph, and each doubt about the
    figures (a "notes" cell: the page lists them in its row; the terminal says them under
    its table of graphs, several graphs at once); None when the graph was not timed."""
    if not g.timings:
        return None
    # Forward+backward columns only for a training graph: an inference graph reads as before.
    trains = any(t.trains for t in g.timings)
    columns = [Column(h) for h in ("mode", "device", "eager", "compiled", "speedup", "samples", "compile s",
                                   "max abs err")]
    columns += [Column(h) for h in ("fwd+bwd eager", "fwd+bwd compiled", "grads")] if trains else []
    columns.append(Column("notes", "notes"))

    def train_cells(t: Timing) -> list[object]:
        if not trains:
            return []
        if not t.trains:
            return ["", "", "-"]
        compiled = "failed" if t.train_error else _ms(t.train_compiled_ms)
        return [_ms(t.train_eager_ms), compiled, grads_text(t)]

    rows = []
    for t in g.timings:
        if t.failed:
            cells: list[object] = [t.mode, t.device, "", "", "failed", "", "", ""]
        else:
            cells = [t.mode, t.device, _ms(t.eager_ms), _ms(t.compiled_ms), speedup_text(t), samples_text(t),
                     f"{t.compile_s:.2f}", f"{t.max_abs_err:.2e}"]
        rows.append((*cells, *train_cells(t), tuple(timing_notes(t))))
    return Table(tuple(columns), tuple(rows))


def _ms(value: float) -> Amount:
    """A time measured, as each view says it (the terminal short, the page precise); not
    measured when zero."""
    return Amount(value if value > 0 else None, "ms")


def _timing_cells(t: Timing | None) -> list[object]:
    if t is None:
        return ["-", "-", "-", "-"]
    if t.failed:
        return [_ms(t.eager_ms), "failed", "-", "-"]
    return [_ms(t.eager_ms), _ms(t.compiled_ms), speedup_text(t), samples_text(t)]


def _train_cells(t: Timing | None) -> list[object]:
    if t is None or not t.trains:
        return ["-", "-", "-"]
    if t.train_error:
        return [_ms(t.train_eager_ms), "failed", grads_text(t)]
    return [_ms(t.train_eager_ms), _ms(t.train_compiled_ms), grads_text(t)]


# -- kernels --------------------------------------------------------------------------------


def code_anchor(graph_id: int, side: str, line: int) -> str:
    """The page's id of line ``line`` of graph ``graph_id``'s output code, side "fwd" or "bwd"."""
    return f"g{graph_id}-{side}-L{line}"


def _kernel_cell(graph_id: int, low: Lowering, k: Kernel) -> Cell:
    """The kernel's name, linked to the line of the output code that calls it when known."""
    side = "bwd" if k.graph == "backward" else "fwd"
    code = low.backward_code if side == "bwd" else low.code
    known = 0 < k.code_line <= len(code.splitlines())
    return Cell(k.name, href=code_anchor(graph_id, side, k.code_line) if known else "")


def _sources(k: Kernel) -> Items:
    """A kernel's source lines as base names; the full paths on hover."""
    return Items(tuple(location(f, n) for f, n in k.source_lines), shown=2,
                 hint="\n".join(location(f, n, full=True) for f, n in k.source_lines))


_KERNEL_COLUMNS = (
    Column("kernel", only="text"), Column("kernel", "code", only="html"), Column("kind"), Column("pass"),
    Column("calls"), Column("time"), Column("share"), Column("fused ops"), Column("nodes"), Column("source"),
)


def kernels(graph: Graph, low: Lowering) -> Table:
    """Every kernel of the graph's lowering ``low``, slowest first, then a row for the
    profiled time spent outside kernels (wrapper code, allocation, launches)."""
    rows: list[tuple[object, ...]] = [
        (kernel_label(k.name, 48), _kernel_cell(graph.id, low, k), k.kind, pass_label(k), k.calls,
         Amount(k.time_ms, "ms"), Amount(k.share, "share"), Items(k.aten_ops), Items(k.nodes), _sources(k))
        for k in low.kernels_by_time()
    ]
    outside = low.outside_kernels_ms
    if outside is not None:
        share = outside / low.graph_ms if low.graph_ms else None
        rows.append(("(outside kernels)", "(outside kernels)", "-", "-", "-", Amount(outside, "ms"),
                     Amount(share, "share"), "wrapper code, allocation", "-", "-"))
    return Table(_KERNEL_COLUMNS, tuple(rows))


# The notebook card (the short view) shows the short name, unlinked (a card has no output
# code to link to), and leaves the lists out.
_TOP_COLUMNS = (
    Column("graph", "graph"), Column("kernel", "code", only="text"),
    Column("kernel", "code", only="html", short=False), Column("kind"), Column("pass"), Column("time"),
    Column("share"), Column("fused ops", short=False), Column("source", short=False),
)


def top_kernels(rep: Report) -> Table:
    """The timed kernels that cost the program most (time over each graph's runs), largest
    first: the terminal and the notebook card show the first TOP_KERNELS_SHOWN, the page twice
    as many."""
    rows = tuple(
        (g.id, kernel_label(k.name), _kernel_cell(g.id, g.lowering, k) if g.lowering else "", k.kind, pass_label(k),
         Amount(cost, "ms"), Amount(k.share, "share"), Items(k.aten_ops), _sources(k))
        for g, k, cost in rep.top_kernels(2 * TOP_KERNELS_SHOWN)
    )
    return Table(_TOP_COLUMNS, rows, notes=("time: over the graph's runs; share: of its graph's time",),
                 title="the kernels that cost the program most", limit=TOP_KERNELS_SHOWN)
