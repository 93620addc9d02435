"""DOT pictures of captured graphs and of the whole program. Pure: model in, text out.

Colours come from a fixed palette keyed by op category (documented in
docs/reading-a-report.md), so the same graph always looks the same.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynscope._format import clip, location, ms, plural
from dynscope._palette import PALETTE, op_category
from dynscope._render_text import grads_text, speedup_text
from dynscope._torch.wording import resume_label

if TYPE_CHECKING:
    from dynscope._model import Frame, Graph, Node, Report, Timing

__all__ = [
    "AUTO_COLLAPSE_NODES",
    "PALETTE",
    "DotOptions",
    "dot_id",
    "graph_to_dot",
    "op_category",
    "program_to_dot",
    "quote",
]

#: Above this many nodes a graph is drawn at module level automatically.
AUTO_COLLAPSE_NODES = 3000


# C0/C1 controls and DEL (Graphviz rejects some and the SVG would not be valid XML), and
# lone surrogates (undecodable bytes in a file name; not encodable as UTF-8).
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}


def quote(text: str) -> str:
    """The one DOT escaper: ``text`` as a DOT double-quoted string that shows it verbatim.

    Every string that reaches DOT goes through here (ids, labels, tooltips, URLs), so a
    quote or backslash in a file name, module key or op name can neither end the string
    (and inject attributes such as ``URL="javascript:..."``) nor make ``dot`` fail.
    Backslashes are doubled, so Graphviz's own escapes (``\\N``, ``\\G``, ``\\l``) never
    fire; a line break becomes a centred line break (``\\n``); a tab becomes a space; other
    control characters and lone surrogates become U+FFFD. (Graphviz reads these escapes in
    labels, tooltips and URLs; an id keeps the doubled backslashes, still one id per name.)
    """
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    text = _UNPRINTABLE.sub("\ufffd", text)
    return '"' + text.replace("\n", "\\n") + '"'


def dot_id(text: str) -> str:
    """A DOT id for ``text``: bare when it is a plain identifier, else quoted (see quote)."""
    if _BARE_ID.fullmatch(text) and text.lower() not in _KEYWORDS:
        return text
    return quote(text)


def _ident(name: str) -> str:
    """DOT id of an FX node (node names are identifiers, so these stay bare)."""
    return dot_id("n_" + name)


def _one_line(text: str) -> str:
    return " ".join(text.splitlines())


def _shape(node: Node) -> str:
    return ", ".join(m.describe() for m in node.outputs[:2]) + (" ..." if len(node.outputs) > 2 else "")


def _short_target(target: str) -> str:
    return target.replace("torch.nn.functional.", "F.").replace("torch.", "")


@dataclass(frozen=True)
class DotOptions:
    """How to draw one graph."""

    depth: int | None = None  # module nesting drawn as boxes; deeper modules become one node
    fold_params: bool = True  # hide parameter/buffer inputs, mark consumers "+W"
    edge_labels: bool = True  # shapes and dtypes on edges


def graph_to_dot(graph: Graph, options: DotOptions | None = None) -> str:
    """DOT source for one captured graph.

    Graphs known only from the trace (no node data) become a one-box summary. Graphs over
    AUTO_COLLAPSE_NODES nodes are drawn at module level (depth 1) unless ``depth`` is set,
    and the picture says so.
    """
    opts = options or DotOptions()
    title = f"graph {graph.id} ({graph.compile_id}) {graph.frame}: {graph.op_count} ops, {graph.node_count} nodes"
    lines = [
        f"digraph {quote('graph_' + str(graph.id))} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8, color="#555555"];',
    ]
    if not graph.nodes:
        lines.append(f"  label={quote(title + ' (known from the trace only)')}; labelloc=t;")
        ops = "\n".join(f"{_short_target(_one_line(t))} x{n}" for t, n in graph.op_counts[:12])
        lines.append(f"  summary [label={quote(ops or 'no op data')}, fillcolor=\"{PALETTE['other']}\"];")
        lines.append("}")
        return "\n".join(lines) + "\n"
    depth = opts.depth
    if depth is None and len(graph.nodes) > AUTO_COLLAPSE_NODES:
        depth = 1
        title += f" - drawn at module level: {len(graph.nodes)} nodes > {AUTO_COLLAPSE_NODES} (pass depth= to choose)"
    lines.append(f"  label={quote(title)}; labelloc=t; fontname=\"Helvetica\";")

    by_name = {n.name: n for n in graph.nodes}
    hidden = {n.name for n in graph.nodes if opts.fold_params and n.is_param}
    # Collapsed modules: nodes deeper than `depth` are drawn as one node per module path.
    collapsed: dict[str, str] = {}  # node name -> collapsed node id
    collapsed_info: dict[str, tuple[str, str, Counter[str]]] = {}
    for n in graph.nodes:
        if depth is not None and n.is_op and len(n.module_stack) > depth:
            path, cls = n.module_stack[depth - 1] if depth > 0 else ("", "program")
            cid = dot_id("m_" + (path or "root"))
            collapsed[n.name] = cid
            info = collapsed_info.setdefault(cid, (path, cls, Counter()))
            info[2][op_category(n.target)] += 1

    # Cluster tree: module path prefix -> node lines.
    tree: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for n in graph.nodes:
        if n.name in hidden or n.name in collapsed:
            continue
        stack = n.module_stack if n.is_op else ()
        if depth is not None:
            stack = stack[:depth]
        tree.setdefault(tuple(stack), []).append(_node_line(n, graph, hidden, by_name))
    for cid, (path, cls, cats) in sorted(collapsed_info.items()):
        total = sum(cats.values())
        main = cats.most_common(1)[0][0]
        label = f"{_one_line(path or 'model')} ({_one_line(cls)})\n{total} ops"
        stack_key = next(
            tuple(by_name[name].module_stack[: (depth or 1) - 1]) for name, c in collapsed.items() if c == cid
        )
        tree.setdefault(stack_key, []).append(
            f"    {cid} [label={quote(label)}, shape=box3d, fillcolor=\"{PALETTE[main]}\", tooltip={quote(path)}];"
        )
    lines.extend(_clusters(tree))

    seen_edges: set[tuple[str, str]] = set()
    for n in graph.nodes:
        if n.name in hidden:
            continue
        dst = collapsed.get(n.name, _ident(n.name))
        for arg in n.args:
            if arg in hidden or arg not in by_name:
                continue
            src = collapsed.get(arg, _ident(arg))
            if src == dst or (src, dst) in seen_edges:
                continue
            seen_edges.add((src, dst))
            label = _shape(by_name[arg]) if opts.edge_labels else ""
            attr = f" [label={quote(label)}]" if label else ""
            lines.append(f"  {src} -> {dst}{attr};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _node_line(n: Node, graph: Graph, hidden: set[str], by_name: dict[str, Node]) -> str:
    if n.op == "placeholder":
        category = "parameter" if n.is_param else "input"
        label = f"{_one_line(n.name)}\n{_shape(n)}"
        shape = "ellipse"
    elif n.op == "output":
        category, label, shape = "output", "output", "ellipse"
    elif n.op == "get_attr":
        category, label, shape = "parameter", f"{_one_line(n.target)}\n{_shape(n)}", "ellipse"
    else:
        category = op_category(n.target)
        folded = any(a in hidden for a in n.args)
        label = f"{_short_target(_one_line(n.target))}{' +W' if folded else ''}\n{_shape(n)}"
        shape = "box"
    tooltip = f"{location(n.filename, n.lineno)}: {n.source}" if n.source else n.name
    return (
        f"    {_ident(n.name)} [label={quote(label)}, shape={shape}, "
        f"fillcolor=\"{PALETTE[category]}\", tooltip={quote(tooltip)}];"
    )


def _clusters(tree: dict[tuple[tuple[str, str], ...], list[str]]) -> list[str]:
    """Nested subgraph clusters for module paths (sorted for stable output)."""
    out: list[str] = []
    keys = sorted(tree)
    out.extend(tree.get((), []))

    def emit(prefix: tuple[tuple[str, str], ...], indent: str) -> None:
        children = sorted({k[: len(prefix) + 1] for k in keys if len(k) > len(prefix) and k[: len(prefix)] == prefix})
        for child in children:
            path, cls = child[-1]
            out.append(f"{indent}subgraph {quote('cluster_' + path)} {{")
            out.append(f"{indent}  label={quote(f'{path} ({cls})')}; style=\"rounded,dashed\"; color=\"#999999\";")
            for line in tree.get(child, []):
                out.append(f"{indent}  {line.strip()}")
            emit(child, indent + "  ")
            out.append(f"{indent}}}")

    emit((), "  ")
    return out


# -- whole program -------------------------------------------------------------------------


def program_to_dot(rep: Report) -> str:
    """The whole call: frames in order, graphs as boxes, breaks between them, recompiles beside."""
    title = (
        f"{rep.title or 'program'}: {plural(rep.graph_count, 'graph')}, "
        f"{plural(rep.break_count, 'break')}, {plural(rep.recompile_count, 'recompile')}"
    )
    lines = [
        'digraph "program" {',
        "  rankdir=TB; nodesep=0.4; ranksep=0.35;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
        f"  label={quote(title)};",
        "  labelloc=t;",
    ]
    graphs_by_cid = {g.compile_id: g for g in rep.graphs}
    recompile_by_cid = {r.compile_id: r for r in rep.recompiles}
    frames_order: list[str] = []
    compiles: dict[str, list[str]] = {}
    for f in rep.frames:
        frame_no = f.compile_id.split("/")[0]
        if frame_no not in compiles:
            frames_order.append(frame_no)
        compiles.setdefault(frame_no, []).append(f.compile_id)
    frame_by_cid = {f.compile_id: f for f in rep.frames}
    breaks_after: dict[str, list[int]] = {}
    for i, b in enumerate(rep.breaks):
        breaks_after.setdefault(b.compile_ids[0] if b.compile_ids else "", []).append(i)

    previous: str | None = "start"
    lines.append('  start [label="call", shape=circle, style=filled, fillcolor="#333333", fontcolor=white, width=0.5];')
    drawn: set[int] = set()
    for frame_no in sorted(frames_order, key=_frame_key):
        cids = compiles[frame_no]
        main_cid = cids[0]
        main_id = _box(lines, main_cid, graphs_by_cid.get(main_cid), frame_by_cid.get(main_cid))
        if previous:
            lines.append(f"  {previous} -> {main_id};")
        # Recompiled variants in a row to the right, each reached by the guard that failed.
        before = main_id
        for other in cids[1:]:
            vid = _box(lines, other, graphs_by_cid.get(other), frame_by_cid.get(other), variant=True)
            rec = recompile_by_cid.get(other)
            # A loaded or hand-made report may name no failed guard.
            why = next(iter(rec.explained or rec.reasons), "recompiled") if rec else "recompiled"
            lines.append(f"  {{ rank=same; {main_id}; {vid}; }}")
            lines.append(f"  {before} -> {vid} [style=dashed, color=\"#b2182b\", label={quote(_wrap(why, 40))}];")
            before = vid
        previous = main_id
        for cid in cids:
            for i in breaks_after.get(cid, []):
                if i in drawn:
                    continue
                drawn.add(i)
                b = rep.breaks[i]
                bid = f"break_{i}"
                label = (
                    f"BREAK {_one_line(b.location)} x{b.count}\n{_one_line(clip(b.source, 48))}\n"
                    f"[{_one_line(b.category)}]"
                )
                tooltip = f"{location(b.filename, b.lineno, full=True)}: {b.reason}"
                lines.append(
                    f"  {bid} [label={quote(label)}, shape=octagon, style=filled, fillcolor=\"#fddbc7\", "
                    f"color=\"#b2182b\", tooltip={quote(tooltip)}];"
                )
                lines.append(f"  {previous} -> {bid};")
                previous = bid
    lines.append("}")
    return "\n".join(lines) + "\n"


def _frame_key(frame_no: str) -> tuple[int, int, str]:
    """Frames in numeric order; odd ids (hand-edited or foreign reports) after them."""
    try:
        return (0, int(frame_no), "")
    except ValueError:
        return (1, 0, frame_no)


def _box(lines: list[str], cid: str, graph: Graph | None, frame: Frame | None, *, variant: bool = False) -> str:
    node_id = dot_id("c_" + cid)
    func = getattr(frame, "function", "") or (graph.frame if graph else "")
    func = resume_label(func)
    if graph is not None:
        label = f"graph {graph.id} ({_one_line(cid)})\n{_one_line(func)}\n{graph.op_count} ops, {graph.node_count} nodes"
        if graph.timing is not None:
            label += "\n" + _timing_label(graph.timing)
        fill = "#d1e5f0" if not variant else "#f0f0f0"
        tooltip = f"{graph.filename}:{graph.lineno} {graph.frame}"
    else:
        status = getattr(frame, "status", "")
        what = "ran eagerly (Dynamo gave up)" if status == "failed" else "no graph (nothing to compile)"
        label = f"{_one_line(func)} ({_one_line(cid)})\n{what}"
        fill = "#f7f7f7"
        tooltip = getattr(frame, "fail_reason", "") or func
    style = "rounded,filled" + (",dashed" if variant else "")
    lines.append(
        f"  {node_id} [label={quote(label)}, shape=box, style=\"{style}\", fillcolor=\"{fill}\", tooltip={quote(tooltip[:300])}];"
    )
    return node_id


def _timing_label(t: Timing) -> str:
    """The compiled time and speedup as the summary writes it ("?", "~", numerics_ok=False);
    for a training graph also the forward+backward time, the gradient check or why backward
    failed, and a line when numerics were judged with eager-matching randomness."""
    if t.failed:
        return f"Inductor failed: {_one_line(clip(t.error, 40))}"
    if not t.trains:
        label = f"{ms(t.compiled_ms)} ({speedup_text(t)})"
    elif t.train_error:
        label = (f"{ms(t.compiled_ms)} fwd ({speedup_text(t)})\n"
                 f"backward failed: {_one_line(clip(t.train_error, 40))}")
    else:
        label = (f"{ms(t.compiled_ms)} fwd, {ms(t.train_compiled_ms)} fwd+bwd\n({speedup_text(t)})\n"
                 f"grads {grads_text(t)}")
    if t.numerics_mode == "fallback_random":
        label += "\nnumerics judged with eager-matching randomness"
    return label


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width)[:3])
