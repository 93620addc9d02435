"""DOT pictures of captured graphs and of the whole program. Pure: model in, text out.

Colours come from a fixed palette keyed by op category (documented in
docs/reading-a-report.md), so the same graph always looks the same.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dynscope._errors import InputError
from dynscope._format import clip, human_bytes, location, ms, percent, plural
from dynscope._lexicon.wording import base_function, resume_label, resume_site
from dynscope._model.ops import op_category
from dynscope._model.order import break_hosts, program_order
from dynscope._model.structure import heavy_readers, repeated_blocks, repeated_runs
from dynscope._render.causes import explained
from dynscope._render.palette import AOT_COLOURS, BORDERS, PALETTE, kernel_colour, time_colour
from dynscope._render.words import grads_text, speedup_text

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dynscope._model import AotGraph, Frame, Graph, Kernel, Lowering, Node, Report, Timing

__all__ = [
    "COLOR_BY",
    "HUB_READERS",
    "NODE_BUDGET",
    "PALETTE",
    "REPEAT_MIN_NODES",
    "DotOptions",
    "aot_graph_plan",
    "aot_graph_to_dot",
    "dot_id",
    "graph_plan",
    "graph_to_dot",
    "program_to_dot",
    "quote",
]

#: Most nodes a picture draws one by one unless asked for every node (``full``): Graphviz
#: lays out a few hundred nodes in module boxes in about a second, thousands in minutes.
#: Past it a graph is drawn at the deepest module level that fits, else as its most used ops.
NODE_BUDGET = 600


#: A value read by more nodes than this (a symbolic size every view reads) is drawn without
#: its edges, which would tie the whole picture together (minutes in Graphviz), unless full.
HUB_READERS = 24

#: From this many nodes up, repeated sibling blocks (same module class, same inner
#: structure) are drawn once with a count; smaller graphs are drawn node by node.
REPEAT_MIN_NODES = 150

#: What a graph picture's fill colours can show (DotOptions.color_by).
COLOR_BY = ("auto", "op", "kernel", "time")

#: Kernels named one by one in a kernel-coloured picture's legend.
_LEGEND_KERNELS = 12


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
    # Fill colours: "op" (op category), "kernel" (the forward kernel a node was fused into),
    # "time" (share of the graph's time), "auto" ("kernel" when the graph has kernels).
    color_by: str = "auto"
    # Repeated sibling blocks (same module class, same inner structure) drawn once with a
    # count, in graphs of REPEAT_MIN_NODES nodes or more.
    fold_repeats: bool = True
    # Most nodes drawn one by one (NODE_BUDGET); None draws every node and every edge (full).
    max_nodes: int | None = NODE_BUDGET


def graph_to_dot(graph: Graph, options: DotOptions | None = None) -> str:
    """DOT source for one captured graph (:func:`graph_plan`'s DOT)."""
    return graph_plan(graph, options)[0]


def graph_plan(graph: Graph, options: DotOptions | None = None) -> tuple[str, str]:
    """DOT source for one captured graph, and what the picture leaves out and why ("" when
    every node is drawn), for the page to say beside it.

    Graphs known only from the trace (no node data) become a one-box summary. In graphs of
    REPEAT_MIN_NODES nodes or more, sibling module blocks of one class and identical inner
    structure (12 transformer layers) are drawn once, in a box labelled with the count
    ("x12"); without module paths, identical stretches of ops one after the other are.
    ``options.fold_repeats=False`` draws every block. Past ``options.max_nodes`` nodes to
    draw (NODE_BUDGET) the graph is drawn at the deepest module level that fits, else as a
    box of its most used ops, and values read by more than HUB_READERS nodes lose their
    edges; ``max_nodes=None`` draws every node. ``options.color_by`` picks what the fill
    colours show (see DotOptions); the picture's label says what they mean.

    Raises:
        InputError: ``options.color_by`` is not one of COLOR_BY.
    """
    opts = options or DotOptions()
    mode, mode_note = _colour_mode(graph, opts.color_by)
    title = f"graph {graph.id} ({graph.compile_id}) {graph.frame}: {plural(graph.op_count, 'graph op')}, {graph.node_count} nodes"
    if not graph.nodes:
        return _summary_dot(f"graph_{graph.id}", title + " (known from the trace only)", graph.op_counts), ""
    hidden = {n.name for n in graph.nodes if opts.fold_params and n.is_param}
    fold = _fold(graph.nodes, hidden, opts)
    notes = list(fold.notes)
    depth = opts.depth
    if depth is None and opts.max_nodes is not None and fold.drawn > opts.max_nodes:
        depth = _fitting_depth(graph.nodes, hidden, opts.max_nodes)
        if depth is None:
            why = f"{plural(fold.drawn, 'node')} to draw > {opts.max_nodes}, and no module level fits"
            note = f"not drawn node by node ({why}): its most used ops; Graph.to_svg(full=True) draws every node"
            return _summary_dot(f"graph_{graph.id}", title + "\n" + note, graph.op_counts), note
        fold = _Fold(hubs=fold.hubs)
        boxes = _drawn_count(graph.nodes, hidden, {}, depth)
        notes = [f"drawn at module level {depth} ({plural(boxes, 'node')} drawn): "
                 f"{plural(_drawn_count(graph.nodes, hidden, {}, None), 'node')} > {opts.max_nodes}; "
                 "Graph.to_svg(full=True) draws every node", *_hub_notes(fold.hubs)]
    note = "; ".join(notes)
    if note:
        title += "\n" + note
    looks: dict[str, _Look] = {}
    legend: list[str] = []
    if mode != "op" and graph.lowering is not None:
        looks, legend, meaning = _lowering_looks(graph, graph.lowering, mode)
        title += "\n" + meaning
    if mode_note:
        title += "\n" + mode_note
    lines = [
        f"digraph {quote('graph_' + str(graph.id))} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8, color="#555555"];',
        f"  label={quote(title)}; labelloc=t; fontname=\"Helvetica\";",
        *legend,
    ]
    by_name = {n.name: n for n in graph.nodes}
    collapsed, tree = _node_tree(graph, hidden, fold, depth, looks, by_name)
    lines.extend(_clusters(tree, fold.counts))
    lines.extend(_edges(graph.nodes, hidden, fold, collapsed, by_name, opts.edge_labels))
    lines.append("}")
    return "\n".join(lines) + "\n", note


def _node_tree(
    graph: Graph, hidden: set[str], fold: _Fold, depth: int | None, looks: dict[str, _Look], by_name: dict[str, Node],
) -> tuple[dict[str, str], dict[tuple[tuple[str, str], ...], list[str]]]:
    """(node name -> the box it is collapsed into, the cluster tree: module path prefix ->
    the node lines drawn inside it), the collapsed module boxes included."""
    collapsed, collapsed_info = _collapse(graph.nodes, depth)
    tree: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for n in graph.nodes:
        if n.name in hidden or n.name in collapsed or n.name in fold.same_as:
            continue
        stack = fold.stack.get(n.name, n.module_stack if n.is_op else ())
        if depth is not None:
            stack = stack[:depth]
        tree.setdefault(tuple(stack), []).append(
            _node_line(n, graph, hidden, by_name, looks.get(n.name), fold.hubs.get(n.name, 0)))
    for cid, (path, cls, cats) in sorted(collapsed_info.items()):
        total = sum(cats.values())
        main = cats.most_common(1)[0][0]
        label = f"{_one_line(path or 'model')} ({_one_line(cls)})\n{plural(total, 'graph op')}"
        stack_key = next(
            tuple(by_name[name].module_stack[: (depth or 1) - 1]) for name, c in collapsed.items() if c == cid
        )
        tree.setdefault(stack_key, []).append(
            f"    {cid} [label={quote(label)}, shape=box3d, fillcolor=\"{PALETTE[main]}\", tooltip={quote(path)}];"
        )
    return collapsed, tree


@dataclass(frozen=True)
class _Fold:
    """What a picture folds: repeats drawn once, values drawn without their edges."""

    same_as: Mapping[str, str] = field(default_factory=dict)  # node of a repeat not drawn -> its twin
    member: Mapping[str, list[tuple[int, int]]] = field(default_factory=dict)  # node -> (group, block)
    counts: Mapping[str, int] = field(default_factory=dict)  # cluster path of a drawn block -> copies
    stack: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # cluster of a run's first block
    hubs: Mapping[str, int] = field(default_factory=dict)  # value drawn without edges -> its readers
    notes: tuple[str, ...] = ()
    drawn: int = 0  # nodes the picture draws

    def skips(self, arg: str, user: str) -> bool:
        """True for an edge not drawn: from a hub, or one the first block already draws."""
        return arg in self.hubs or (bool(self.same_as) and _between_repeats(arg, user, self.same_as, self.member))


def _fold(nodes: tuple[Node, ...], hidden: set[str], opts: DotOptions) -> _Fold:
    """Repeats (by module block, or by stretches of ops where no node has a module path)
    and, under a node budget, hubs."""
    same_as: dict[str, str] = {}
    member: dict[str, list[tuple[int, int]]] = {}
    counts: dict[str, int] = {}
    stack: dict[str, tuple[tuple[str, str], ...]] = {}
    notes: list[str] = []
    if opts.fold_repeats and opts.depth is None and len(nodes) >= REPEAT_MIN_NODES:
        if any(n.module_stack for n in nodes):
            same_as, member, counts = repeated_blocks(nodes, hidden)
        else:
            same_as, member, stack, counts = _runs_as_clusters(nodes, hidden)
        _hide_unread_inputs(nodes, hidden, same_as)
        if counts:
            folded = sum(1 for n in same_as.values() if n)
            times = ", ".join(f"x{c}" for c in list(counts.values())[:4]) + (", ..." if len(counts) > 4 else "")
            notes.append(f"{plural(len(counts), 'repeated block')} ({times}) drawn once, with the count "
                         f"({plural(folded, 'node')} not drawn again)")
    hubs = {} if opts.max_nodes is None else {
        k: v for k, v in heavy_readers(nodes, HUB_READERS).items() if k not in hidden and k not in same_as}
    notes.extend(_hub_notes(hubs))
    return _Fold(same_as, member, counts, stack, hubs, tuple(notes), _drawn_count(nodes, hidden, same_as, opts.depth))


def _hub_notes(hubs: Mapping[str, int]) -> list[str]:
    if not hubs:
        return []
    named = ", ".join(f"{k} by {v}" for k, v in sorted(hubs.items(), key=lambda kv: -kv[1])[:3])
    return [f"{plural(len(hubs), 'value')} read by many nodes drawn without their edges ({named})"]


def _runs_as_clusters(nodes: tuple[Node, ...], hidden: set[str]) -> tuple[
        dict[str, str], dict[str, list[tuple[int, int]]], dict[str, tuple[tuple[str, str], ...]], dict[str, int]]:
    """repeated_runs as clusters: each run's first stretch in a box "repeat k" with its count."""
    same_as, member, runs = repeated_runs(nodes, hidden)
    stack: dict[str, tuple[tuple[str, str], ...]] = {}
    counts: dict[str, int] = {}
    for gid, (period, copies) in runs.items():
        path = f"repeat {gid + 1}"
        counts[path] = copies
        for name, where in member.items():
            if (gid, 0) in where:
                stack[name] = ((path, plural(period, "op")),)
    return same_as, member, stack, counts


def _hide_unread_inputs(nodes: tuple[Node, ...], hidden: set[str], same_as: dict[str, str]) -> None:
    """Inputs drawn as nodes (weights with fold_params=False, an AOT graph's primals) that
    only blocks not drawn read: not drawn either (mapped to themselves, so no edge of
    theirs is drawn)."""
    if not same_as:
        return
    users: dict[str, list[str]] = {}
    for n in nodes:
        for arg in n.args:
            users.setdefault(arg, []).append(n.name)
    for n in nodes:
        if not n.is_op and n.name not in hidden and users.get(n.name) and all(u in same_as for u in users[n.name]):
            same_as[n.name] = ""


def _drawn_count(nodes: tuple[Node, ...], hidden: set[str], same_as: Mapping[str, str], depth: int | None) -> int:
    """How many nodes a picture draws: nodes not hidden nor folded, a module deeper than
    ``depth`` as one box."""
    boxes: set[str] = set()
    count = 0
    for n in nodes:
        if n.name in hidden or n.name in same_as:
            continue
        if depth is not None and n.is_op and len(n.module_stack) > depth:
            boxes.add(n.module_stack[depth - 1][0] if depth > 0 else "")
        else:
            count += 1
    return count + len(boxes)


def _fitting_depth(nodes: tuple[Node, ...], hidden: set[str], budget: int) -> int | None:
    """The deepest module level at which the picture draws at most ``budget`` nodes."""
    deepest = max((len(n.module_stack) for n in nodes), default=0)
    for depth in range(deepest - 1, 0, -1):
        if _drawn_count(nodes, hidden, {}, depth) <= budget:
            return depth
    return None


def _collapse(nodes: tuple[Node, ...], depth: int | None) -> tuple[dict[str, str], dict[str, tuple[str, str, Counter[str]]]]:
    """Nodes deeper than ``depth``, one box per module path: (node -> box id, box id ->
    (path, class, op categories inside))."""
    collapsed: dict[str, str] = {}
    info: dict[str, tuple[str, str, Counter[str]]] = {}
    if depth is None:
        return collapsed, info
    for n in nodes:
        if n.is_op and len(n.module_stack) > depth:
            path, cls = n.module_stack[depth - 1] if depth > 0 else ("", "program")
            cid = dot_id("m_" + (path or "root"))
            collapsed[n.name] = cid
            info.setdefault(cid, (path, cls, Counter()))[2][op_category(n.target)] += 1
    return collapsed, info


def _edges(nodes: tuple[Node, ...], hidden: set[str], fold: _Fold, collapsed: Mapping[str, str],
           by_name: Mapping[str, Node], edge_labels: bool) -> list[str]:
    """One edge per (drawn source, drawn user), labelled with the value's shape."""
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for n in nodes:
        if n.name in hidden:
            continue
        dst = collapsed.get(n.name, _ident(fold.same_as.get(n.name) or n.name))
        for arg in n.args:
            if arg in hidden or arg not in by_name or fold.skips(arg, n.name):
                continue
            src = collapsed.get(arg, _ident(fold.same_as.get(arg) or arg))
            if src == dst or (src, dst) in seen:
                continue
            seen.add((src, dst))
            label = _shape(by_name[arg]) if edge_labels else ""
            out.append(f"  {src} -> {dst}" + (f" [label={quote(label)}]" if label else "") + ";")
    return out


def _summary_dot(name: str, title: str, op_counts: tuple[tuple[str, int], ...], short: Callable[[str], str] | None = None) -> str:
    """A one-box picture: the graph's most used ops under its title."""
    short = short or _short_target
    ops = "\n".join(f"{short(_one_line(t))} x{n}" for t, n in op_counts[:12])
    return "\n".join([
        f"digraph {quote(name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        f"  label={quote(title)}; labelloc=t; fontname=\"Helvetica\";",
        f"  summary [label={quote(ops or 'no op data')}, fillcolor=\"{PALETTE['other']}\"];",
        "}",
    ]) + "\n"


def _node_line(n: Node, graph: Graph, hidden: set[str], by_name: dict[str, Node], look: _Look | None = None,
               readers: int = 0) -> str:
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
    if readers:
        label += f"\nread by {readers} nodes (edges not drawn)"
    if look is None:
        return (
            f"    {_ident(n.name)} [label={quote(label)}, shape={shape}, "
            f"fillcolor=\"{PALETTE[category]}\", tooltip={quote(tooltip)}];"
        )
    fill = look.fill or PALETTE[category]
    if look.label:
        label += "\n" + look.label
    if look.tooltip:
        tooltip = look.tooltip + "\n" + tooltip
    return (
        f"    {_ident(n.name)} [label={quote(label)}, shape={shape}, "
        f"fillcolor=\"{fill}\", tooltip={quote(tooltip)}{look.attrs}];"
    )


# -- colouring by kernel or time -----------------------------------------------------------


@dataclass(frozen=True)
class _Look:
    """How lowering changes one node's drawing."""

    fill: str = ""  # fill colour; "" keeps the op category's
    label: str = ""  # a line added to the label
    tooltip: str = ""  # lines put before the node's own tooltip
    attrs: str = ""  # extra DOT attributes (borders), starting with ", "


def _colour_mode(graph: Graph, color_by: str) -> tuple[str, str]:
    """(the colouring to draw, a note when it is not the one asked for)."""
    if color_by not in COLOR_BY:
        raise InputError(f"color_by={color_by!r} is not a colouring; use one of {', '.join(map(repr, COLOR_BY))}")
    lowering = graph.lowering
    kernels = _forward_kernels(lowering) if lowering is not None else ()
    if color_by == "auto":
        return ("kernel" if kernels else "op"), ""
    if color_by == "op":
        return "op", ""
    if lowering is None or not kernels:
        why = "no Inductor lowering" if lowering is None else "no forward kernels"
        return "op", f"coloured by op category: {why} to colour by {color_by}"
    if color_by == "time" and not _timed(lowering):
        return "kernel", "coloured by kernel: the kernels were not timed (run report(timing=True) to shade by time)"
    return color_by, ""


def _forward_kernels(lowering: Lowering) -> tuple[Kernel, ...]:
    """Kernels that compute the Dynamo graph's nodes (the forward or inference graph's)."""
    return tuple(k for k in lowering.kernels if k.graph != "backward")


def _timed(lowering: Lowering) -> bool:
    return bool(lowering.graph_ms) and any(k.time_ms is not None for k in _forward_kernels(lowering))


def _kernel_line(k: Kernel) -> str:
    """"cpp_fused_relu_0 · cpp · 12.0 us (31%)": a kernel, its kind and its time when timed."""
    text = f"{k.name} \u00b7 {k.kind}"
    if k.time_ms is not None:
        text += f" \u00b7 {ms(k.time_ms)}"
        if k.share is not None:
            text += f" ({percent(k.share)})"
    return text


def _lowering_looks(graph: Graph, lowering: Lowering, mode: str) -> tuple[dict[str, _Look], list[str], str]:
    """Per-node looks, legend lines and what the colours mean, for "kernel" or "time"."""
    kernels = _forward_kernels(lowering)
    colour = {id(k): kernel_colour(i) for i, k in enumerate(kernels)}
    unmapped = set(lowering.unmapped)
    total = lowering.graph_ms or 0.0
    looks: dict[str, _Look] = {}
    for n in graph.nodes:
        mine = [k for k in kernels if n.name in k.nodes]
        if not mine and n.name not in unmapped:
            if mode == "time" and n.is_op:
                looks[n.name] = _Look(fill=time_colour(0.0), label="no kernel")
            continue
        attrs = ""
        if any(k.kind == "extern" for k in mine):
            attrs += ", peripheries=2"
        if any(k.kind == "fallback" for k in mine):
            attrs += f', style="rounded,filled,dashed", color="{BORDERS["fallback"]}", penwidth=2'
        elif n.name in unmapped:
            attrs += f', style="rounded,filled,dotted", color="{BORDERS["unmapped"]}", penwidth=2'
        tip = "\n".join(_kernel_line(k) for k in mine) or "not traced to any kernel"
        if mode == "kernel":
            looks[n.name] = _Look(fill=colour[id(mine[0])] if mine else "", tooltip=tip, attrs=attrs)
            continue
        # A kernel's time is split evenly over the nodes it computes.
        node_ms = sum(k.time_ms / len(k.nodes) for k in mine if k.time_ms is not None)
        share = node_ms / total if total else 0.0
        timed = f"{ms(node_ms)} ({percent(share)})" if node_ms > 0 else "untimed"
        if share > 0.35:  # dark red: white text stays readable
            attrs += ', fontcolor="#ffffff"'
        looks[n.name] = _Look(
            fill=time_colour(share),
            label=timed,
            tooltip=f"this node: {timed} of {ms(total)} per run\n{tip}",
            attrs=attrs,
        )
    marks = (
        "double border: library call (extern); dashed red: ATen fallback (not lowered); "
        "dotted grey: not traced to a kernel"
    )
    if mode == "time":
        what = "forward and backward" if lowering.backward is not None else "the graph"
        meaning = (
            f"fill: share of the graph's time per call ({ms(total)}, {what}), white 0% to red 100%; "
            f"a kernel's time is split evenly over the nodes it computes\n{marks}"
        )
        return looks, [], meaning
    meaning = f"fill: the {kernels[0].graph} kernel each node was fused into (legend)\n{marks}"
    return looks, _kernel_legend(kernels, colour), meaning


def _kernel_legend(kernels: tuple[Kernel, ...], colour: dict[int, str]) -> list[str]:
    """A boxed list of the kernels in their colours (the first _LEGEND_KERNELS of them)."""
    # A space in the cluster name: no module path makes it, so it never meets a module box.
    out = [
        f"  subgraph {quote('cluster_ kernels')} {{",
        f"    label={quote('kernels (' + kernels[0].graph + ')')}; style=\"rounded\"; color=\"#999999\"; fontsize=9;",
    ]
    for i, k in enumerate(kernels[:_LEGEND_KERNELS]):
        attrs = ", peripheries=2" if k.kind == "extern" else ""
        if k.kind == "fallback":
            attrs = f', style="rounded,filled,dashed", color="{BORDERS["fallback"]}", penwidth=2'
        tip = _kernel_line(k)
        if k.source_lines:
            tip += "\n" + "\n".join(location(f, n, full=True) for f, n in k.source_lines[:5])
        if k.aten_ops:
            tip += "\nfuses " + ", ".join(k.aten_ops[:8])
        out.append(
            f"    k_{i} [label={quote(_kernel_line(k))}, fillcolor=\"{colour[id(k)]}\", fontsize=8, "
            f"tooltip={quote(tip)}{attrs}];"
        )
    ids = [f"k_{i}" for i in range(min(len(kernels), _LEGEND_KERNELS))]
    if len(kernels) > _LEGEND_KERNELS:
        more = len(kernels) - _LEGEND_KERNELS
        out.append(f'    k_more [label="{more} more", shape=plaintext, style="", fontsize=8];')
        ids.append("k_more")
    # Stacked in one column (invisible edges): side by side, a long legend would make the
    # picture wider than the graph and push the graph out of view.
    if len(ids) > 1:
        out.append(f"    {' -> '.join(ids)} [style=invis];")
    out.append("  }")
    return out


def _between_repeats(a: str, b: str, same_as: Mapping[str, str], member: Mapping[str, list[tuple[int, int]]]) -> bool:
    """True for an edge drawn by the first block already: inside a repeat not drawn, or from
    one block of a group to another (layer 3 -> layer 4)."""
    if a in same_as and b in same_as:
        return True
    blocks = dict(member.get(a, ()))
    return any(gid in blocks and blocks[gid] != i for gid, i in member.get(b, ()))


def _clusters(tree: dict[tuple[tuple[str, str], ...], list[str]], counts: Mapping[str, int] | None = None) -> list[str]:
    """Nested subgraph clusters for module paths (sorted for stable output); a path in
    ``counts`` stands for that many identical blocks and its label says so."""
    out: list[str] = []
    keys = sorted(tree)
    out.extend(tree.get((), []))

    def emit(prefix: tuple[tuple[str, str], ...], indent: str) -> None:
        children = sorted({k[: len(prefix) + 1] for k in keys if len(k) > len(prefix) and k[: len(prefix)] == prefix})
        for child in children:
            path, cls = child[-1]
            out.append(f"{indent}subgraph {quote('cluster_' + path)} {{")
            label = f"{path} ({cls})"
            style = "rounded,dashed"
            if counts and path in counts:
                label += f" x{counts[path]} (identical blocks, drawn once)"
                style = "rounded,bold"
            out.append(f"{indent}  label={quote(label)}; style=\"{style}\"; color=\"#999999\";")
            for line in tree.get(child, []):
                out.append(f"{indent}  {line.strip()}")
            emit(child, indent + "  ")
            out.append(f"{indent}}}")

    emit((), "  ")
    return out


# -- AOT graphs ----------------------------------------------------------------------------


def aot_graph_to_dot(aot: AotGraph, lowering: Lowering | None = None, *, max_nodes: int | None = NODE_BUDGET) -> str:
    """DOT source for one AOTAutograd graph (:func:`aot_graph_plan`'s DOT)."""
    return aot_graph_plan(aot, lowering, max_nodes=max_nodes)[0]


def aot_graph_plan(aot: AotGraph, lowering: Lowering | None = None, *, max_nodes: int | None = NODE_BUDGET) -> tuple[str, str]:
    """DOT source for one graph AOTAutograd handed to Inductor (forward, backward or
    inference), and what the picture leaves out and why ("" when every node is drawn).

    ATen ops are filled by op category (as in graph_to_dot); inputs are told apart:
    ``primals_*`` (the graph's inputs and parameters), ``tangents_*`` (incoming gradients)
    and, in a backward graph, the activations the forward saved (``lowering``'s
    saved_for_backward names), with their shapes. Identical stretches of ops one after the
    other (12 layers) are drawn once in a box with their count, and values read by more
    than HUB_READERS nodes lose their edges; a graph still over ``max_nodes`` nodes to draw
    (NODE_BUDGET; None: no limit), or one known only by counts, is drawn as one box of its
    most used ops, and says so. With ``max_nodes=None`` (full) nothing is folded.
    """
    sft = lowering.saved_for_backward if lowering is not None else None
    saved = set(sft.names) if sft is not None and aot.kind == "backward" else set()
    title = f"AOT {aot.kind} graph: {plural(aot.op_count, 'op')}, {plural(aot.node_count, 'node')}"
    if aot.kind == "backward" and sft is not None:
        title += f"; {plural(sft.count, 'tensor')} saved by the forward ({human_bytes(sft.bytes)})"
    if aot.kind == "backward" and lowering is not None and lowering.recomputed:
        title += f"; {plural(len(lowering.recomputed), 'forward op')} recomputed"
    if lowering is not None:
        mine = [k for k in lowering.kernels if k.graph == aot.kind]
        title += f"; Inductor made {plural(len(mine), 'kernel')}"
    if not aot.nodes:
        return _summary_dot("aot_" + aot.kind, title + "\nknown by its op counts only", aot.op_counts, _aten_short), ""
    fold = _fold(aot.nodes, set(), DotOptions(max_nodes=max_nodes, fold_repeats=max_nodes is not None))
    if max_nodes is not None and fold.drawn > max_nodes:
        note = (f"not drawn node by node: {plural(fold.drawn, 'node')} to draw > {max_nodes}; its most used ops "
                "(AotGraph.to_svg(full=True) draws every node)")
        return _summary_dot("aot_" + aot.kind, title + "\n" + note, aot.op_counts, _aten_short), note
    note = "; ".join(fold.notes)
    lines = [
        f"digraph {quote('aot_' + aot.kind)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#555555"];',
    ]
    inputs = [n.name for n in aot.nodes if n.op == "placeholder"]
    key = ["white ellipses: inputs and parameters (primals)"]
    if any(name.startswith("tangents") for name in inputs):
        key.append("pink: incoming gradients (tangents)")
    recomputed = set(lowering.recomputed) if lowering is not None and aot.kind == "backward" else set()
    if saved:
        key.append("yellow, orange border: activations saved by the forward, with their size")
    if recomputed:
        key.append("dashed orange border: forward ops computed again instead of saved")
    key.append("ops filled by category")
    label = title + chr(10) + "; ".join(key) + (chr(10) + note if note else "")
    lines.append(f"  label={quote(label)}; labelloc=t; fontname=\"Helvetica\";")
    tree: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for n in aot.nodes:
        if n.name not in fold.same_as:
            tree.setdefault(fold.stack.get(n.name, ()), []).append(
                _aot_node_line(n, saved, recomputed, fold.hubs.get(n.name, 0)))
    lines.extend(_clusters(tree, fold.counts))
    by_name = {n.name: n for n in aot.nodes}
    lines.extend(_edges(aot.nodes, set(), fold, {}, by_name, edge_labels=False))
    lines.append("}")
    return "\n".join(lines) + "\n", note


def _aot_node_line(n: Node, saved: set[str], recomputed: set[str], readers: int) -> str:
    """One node of an AOT graph: inputs told apart (primals, tangents, saved activations)."""
    where = f"{location(n.filename, n.lineno)}: {n.source}" if n.source else ""
    attrs = ""
    if n.op == "placeholder":
        shape = "ellipse"
        if n.name in saved:
            size = n.outputs[0].nbytes if n.outputs else None
            shown = f"\n{human_bytes(size)}" if size is not None else ""
            fill, label = AOT_COLOURS["saved"], f"saved {_one_line(n.name)}\n{_shape(n)}{shown}"
            attrs = f', color="{BORDERS["saved"]}", penwidth=2'
            tooltip = f"{n.name}: saved by the forward for the backward"
        elif n.name.startswith("tangents"):
            fill, label = AOT_COLOURS["tangent"], f"{_one_line(n.name)}\n{_shape(n)}"
            tooltip = f"{n.name}: gradient of a forward output"
        else:
            fill, label = AOT_COLOURS["primal"], f"{_one_line(n.name)}\n{_shape(n)}"
            tooltip = f"{n.name}: input"
    elif n.op == "output":
        shape, fill, label, tooltip = "ellipse", PALETTE["output"], "output", "output"
    else:
        shape, fill = "box", PALETTE[op_category(n.target)]
        label = f"{_aten_short(_one_line(n.target))}\n{_shape(n)}"
        tooltip = f"{n.name} = {n.target}" + (f"\n{where}" if where else "")
        if n.name in recomputed:
            label = f"recomputed {label}"
            attrs = f', color="{BORDERS["saved"]}", penwidth=2, style="rounded,filled,dashed"'
            tooltip += "\nrecomputed: the forward computed it too; the partitioner chose to compute it again over saving it"
    if readers:
        label += f"\nread by {readers} nodes (edges not drawn)"
    return (
        f"  {_ident(n.name)} [label={quote(label)}, shape={shape}, fillcolor=\"{fill}\", "
        f"tooltip={quote(tooltip)}{attrs}];"
    )


def _aten_short(target: str) -> str:
    """"aten.mm.default" -> "mm", "aten.sum.dim_IntList" -> "sum.dim_IntList": what people call the op."""
    if target.startswith("aten."):
        target = target[len("aten."):]
    return target.removesuffix(".default")


# -- whole program -------------------------------------------------------------------------


def program_to_dot(rep: Report) -> str:
    """The whole call in execution order (:func:`program_order`): graphs as boxes, each break
    between the compiles that hit it and the resume functions after it, recompiles beside."""
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
    frame_by_cid = {f.compile_id: f for f in rep.frames}
    hosts = break_hosts(rep)
    function = {f.compile_id: f.function for f in rep.frames}
    previous: list[str] = ["start"]
    box_of: dict[str, str] = {}
    lines.append('  start [label="call", shape=circle, style=filled, fillcolor="#333333", fontcolor=white, width=0.5, group=main];')
    for group, ends in program_order(rep):
        mains = []
        for cids in group:
            main_cid = cids[0]
            main_id = box_of[main_cid] = _box(lines, main_cid, graphs_by_cid.get(main_cid), frame_by_cid.get(main_cid))
            mains.append(main_id)
            # After a break, the resume function at its line; otherwise whatever ran last.
            into = [
                f"break_{i}" for i in range(len(rep.breaks)) if f"break_{i}" in previous
                and resume_site(function[main_cid]) == (base_function(rep.breaks[i].function), rep.breaks[i].lineno)
            ]
            for p in into or previous:
                lines.append(f"  {p} -> {main_id};")
            # Recompiled variants in a row to the right, each reached by the guard that failed.
            before = main_id
            for other in cids[1:]:
                vid = box_of[other] = _box(lines, other, graphs_by_cid.get(other), frame_by_cid.get(other), variant=True)
                rec = recompile_by_cid.get(other)
                # A loaded or hand-made report may name no failed guard.
                why = next(iter(tuple(map(explained, rec.causes)) or rec.raw_reasons), "recompiled") if rec else "recompiled"
                lines.append(f"  {{ rank=same; {main_id}; {vid}; }}")
                lines.append(f"  {before} -> {vid} [style=dashed, color=\"#b2182b\", label={quote(_wrap(why, 40))}];")
                before = vid
        # The next step runs after this one's breaks (each reached from the compiles that
        # hit it), or straight after this step when it hit none.
        previous = [f"break_{i}" for i in ends] or mains
        for i in ends:
            b = rep.breaks[i]
            bid = f"break_{i}"
            label = (
                f"BREAK {_one_line(b.location)} x{b.count}\n{_one_line(clip(b.source, 48))}\n"
                f"[{_one_line(b.category)}]"
            )
            tooltip = f"{location(b.filename, b.lineno, full=True)}: {b.reason}"
            lines.append(
                f"  {bid} [label={quote(label)}, shape=octagon, style=filled, fillcolor=\"#fddbc7\", "
                f"color=\"#b2182b\", tooltip={quote(tooltip)}, group=main];"
            )
            main_ids = set(mains)
            for cid in hosts[i]:
                # Only the main chain places the break: a recompiled variant's edge to it
                # does not pull it sideways (the chain stays one straight, readable column).
                extra = "" if box_of[cid] in main_ids else " [constraint=false]"
                lines.append(f"  {box_of[cid]} -> {bid}{extra};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _box(lines: list[str], cid: str, graph: Graph | None, frame: Frame | None, *, variant: bool = False) -> str:
    node_id = dot_id("c_" + cid)
    func = getattr(frame, "function", "") or (graph.frame if graph else "")
    func = resume_label(func)
    if graph is not None:
        label = f"graph {graph.id} ({_one_line(cid)})\n{_one_line(func)}\n{plural(graph.op_count, 'graph op')}, {graph.node_count} nodes"
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
        f"  {node_id} [label={quote(label)}, shape=box, style=\"{style}\", fillcolor=\"{fill}\", "
        f"tooltip={quote(tooltip[:300])}{'' if variant else ', group=main'}];"
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
