"""A graph's structure, apart from how it is drawn: its networkx form and statistics, a hash
that says two graphs compute the same thing, and the repeated blocks inside it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynscope._format import location
from dynscope._model.ops import op_category

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dynscope._model.graph import Graph, Node

__all__ = [
    "REPEAT_MIN_BLOCK_OPS",
    "graph_stats",
    "heavy_readers",
    "repeated_blocks",
    "repeated_runs",
    "structure_hash",
    "to_networkx",
]

#: A repeated block counts when it has at least this many ops (a repeated Linear alone
#: gains nothing from a box and a count).
REPEAT_MIN_BLOCK_OPS = 3


def to_networkx(graph: Graph) -> Any:
    """A ``networkx.DiGraph``: one node per FX node, edges from inputs to users.

    Node attributes: ``op``, ``target``, ``category``, ``shape`` (first output),
    ``dtype``, ``module`` (innermost module path), ``source`` ("file:line: code").
    Edge attributes: ``shape`` and ``dtype`` of the value carried.
    """
    import networkx as nx

    g = nx.DiGraph(graph_id=graph.id, compile_id=graph.compile_id, frame=graph.frame)
    by_name = {n.name: n for n in graph.nodes}
    for n in graph.nodes:
        first = n.outputs[0] if n.outputs else None
        g.add_node(
            n.name,
            op=n.op,
            target=n.target,
            category=op_category(n.target) if n.is_op else n.op,
            shape=tuple(first.shape) if first else (),
            dtype=first.dtype if first else "",
            module=n.module_stack[-1][0] if n.module_stack else "",
            source=f"{location(n.filename, n.lineno, full=True)}: {n.source}" if n.source else "",
        )
    for n in graph.nodes:
        for arg in n.args:
            if arg in by_name:
                src = by_name[arg].outputs[0] if by_name[arg].outputs else None
                g.add_edge(arg, n.name, shape=tuple(src.shape) if src else (), dtype=src.dtype if src else "")
    return g


def graph_stats(graph: Graph) -> dict[str, Any]:
    """Depth (longest path in ops), op categories and fan-out of one graph."""
    import networkx as nx

    g = to_networkx(graph)
    cats: dict[str, int] = {}
    for _, data in g.nodes(data=True):
        if data["op"] in ("call_function", "call_method", "call_module"):
            cats[data["category"]] = cats.get(data["category"], 0) + 1
    depth = nx.dag_longest_path_length(g) if g.number_of_nodes() and nx.is_directed_acyclic_graph(g) else 0
    return {
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "depth": depth,
        "categories": dict(sorted(cats.items())),
        "max_fan_out": max((d for _, d in g.out_degree()), default=0),
    }


def structure_hash(graph: Graph) -> str:
    """A stable hash of a graph's structure: its ops, their output shapes and dtypes, and
    its edges (as positions, not names).

    Two graphs with the same hash compute the same thing on the same shapes, so a page can
    draw them once ("graphs 3, 5, 7 are the same graph"). Node names, source lines, module
    paths and compile ids are left out: they differ between two captures of one function
    without changing what runs. A graph known only from the trace (no nodes) is hashed by
    its op counts and its inputs in order (shapes and dtypes). The hash is the same in every
    process (sha256, no ``hash()``).
    """
    import hashlib
    import json

    index = {n.name: i for i, n in enumerate(graph.nodes)}
    if graph.nodes:
        items: list[object] = [
            [n.op, n.target if n.is_op else "", [m.describe() for m in n.outputs],
             [index.get(a, -1) for a in n.args], n.is_param]
            for n in graph.nodes
        ]
    else:
        items = ["counts", [[t, c] for t, c in graph.op_counts], [[i.kind, i.shape, i.dtype] for i in graph.inputs]]
    text = json.dumps(items, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def repeated_blocks(nodes: Sequence[Node], hidden: set[str]) -> tuple[dict[str, str], dict[str, list[tuple[int, int]]], dict[str, int]]:
    """Sibling module blocks of one class and identical inner structure (12 transformer
    layers), which a picture can draw once with a count.

    Returns (node of a repeat not drawn -> its twin in the first block, node -> the
    (group, block number) of each repeated group it is in, first block's path -> block
    count). Blocks are compared by what they compute (ops, shapes, edges inside the block,
    which inputs are weights), not by names; repeats inside the first block fold too.
    """
    same_as: dict[str, str] = {}
    member: dict[str, list[tuple[int, int]]] = {}
    counts: dict[str, int] = {}
    drawn = [n for n in nodes if n.is_op and n.name not in hidden]
    position = {n.name: i for i, n in enumerate(drawn)}  # place among the ops, in run order
    ops = [n for n in drawn if n.module_stack]

    def fold(level: int, members: list[Node]) -> None:
        # Children of this level in the order they first run, with their nodes.
        children: dict[tuple[str, str], list[Node]] = {}
        for n in members:
            if len(n.module_stack) > level:
                children.setdefault(n.module_stack[level], []).append(n)
        keys = list(children)
        sign = {key: (key[1], _block_signature(key[0], children[key], hidden)) for key in keys}
        start = 0
        while start < len(keys):
            # A run: blocks one after the other, each reading the one before (layer 3 ->
            # layer 4), not parallel siblings (q, k, v projections) nor blocks with other
            # ops between them, which one box could not stand for.
            end = start + 1
            while (end < len(keys) and sign[keys[end]] == sign[keys[start]]
                   and _in_series(children[keys[end - 1]], children[keys[end]], position)):
                end += 1
            run, first = keys[start:end], keys[start]
            if len(run) > 1 and len(children[first]) >= REPEAT_MIN_BLOCK_OPS:
                gid = len(counts)
                counts[first[0]] = len(run)
                for i, key in enumerate(run):
                    for n, twin in zip(children[key], children[first], strict=True):
                        member.setdefault(n.name, []).append((gid, i))
                        if i:
                            same_as[n.name] = twin.name
            fold(level + 1, children[first])
            start = end

    fold(0, ops)
    for name, twin in same_as.items():  # a twin inside a folded inner repeat: its own twin
        while twin in same_as:
            twin = same_as[twin]
        same_as[name] = twin
    return same_as, member, counts


def _in_series(before: list[Node], after: list[Node], position: Mapping[str, int]) -> bool:
    """True when block ``after`` runs right after block ``before`` (each block's ops in one
    stretch, no other op between them) and reads something ``before`` made."""
    a = [position[n.name] for n in before]
    b = [position[n.name] for n in after]
    if max(a) - min(a) + 1 != len(a) or max(b) - min(b) + 1 != len(b) or min(b) != max(a) + 1:
        return False
    made = {n.name for n in before}
    return any(arg in made for n in after for arg in n.args)


def _block_signature(path: str, nodes: list[Node], hidden: set[str]) -> str:
    """What a module block computes, without its names: two blocks with one signature look
    the same when drawn."""
    index = {n.name: i for i, n in enumerate(nodes)}
    parts = []
    for n in nodes:
        inner = tuple((p[len(path):] if p.startswith(path) else p, c) for p, c in n.module_stack)
        args = tuple(index.get(a, "W" if a in hidden else "in") for a in n.args)
        parts.append(repr((n.op, n.target, tuple(m.describe() for m in n.outputs), inner, args)))
    return "\n".join(parts)


def repeated_runs(nodes: Sequence[Node], hidden: set[str]) -> tuple[dict[str, str], dict[str, list[tuple[int, int]]], dict[int, tuple[int, int]]]:
    """Blocks repeated one after the other in a graph's op sequence, found without module
    paths (AOTAutograd's graphs and graphs read from a trace carry none): 12 transformer
    layers print as 12 identical stretches of ops.

    Ops compare by target, output shapes, which inputs are weights, and where their
    arguments come from (how many ops back, or which input); a run of identical stretches
    counts when each reads the one before (layers in series, not parallel q, k, v) and a
    stretch has at least REPEAT_MIN_BLOCK_OPS ops.

    Returns (node of a repeat not drawn -> its twin in the first stretch, node -> [(run,
    stretch number)], run -> (its stretch length in ops, how many stretches)).
    """
    drawn = [n for n in nodes if n.is_op and n.name not in hidden]
    count = len(drawn)
    if count < 2 * REPEAT_MIN_BLOCK_OPS:
        return {}, {}, {}
    position = {n.name: i for i, n in enumerate(drawn)}
    # Coarse tokens (what each op is) give the candidate periods: the most common distances
    # between two ops of one kind.
    coarse = [repr((n.target, tuple(m.describe() for m in n.outputs), len(n.args))) for n in drawn]
    last: dict[str, int] = {}
    gaps: dict[int, int] = {}
    for i, tok in enumerate(coarse):
        if tok in last:
            gap = i - last[tok]
            if gap >= REPEAT_MIN_BLOCK_OPS:
                gaps[gap] = gaps.get(gap, 0) + 1
        last[tok] = i
    best: list[tuple[int, int, int]] = []  # (start, period, copies)
    best_saved = 0
    for period in sorted(gaps, key=lambda g: (-gaps[g] * g, g))[:6]:
        tokens = _fine_tokens(drawn, coarse, position, hidden, period)
        runs: list[tuple[int, int, int]] = []
        i = 0
        while i + period < count:
            if tokens[i] != tokens[i + period]:
                i += 1
                continue
            j = i
            while j + period < count and tokens[j] == tokens[j + period]:
                j += 1
            copies = (j - i) // period + 1
            if copies > 1 and _runs_in_series(drawn, i, period, copies, position):
                runs.append((i, period, copies))
                i += copies * period
            else:
                i = j + 1
        saved = sum((c - 1) * p for _, p, c in runs)
        if saved > best_saved:
            best, best_saved = runs, saved
    same_as: dict[str, str] = {}
    member: dict[str, list[tuple[int, int]]] = {}
    shape: dict[int, tuple[int, int]] = {}
    for gid, (start, period, copies) in enumerate(best):
        shape[gid] = (period, copies)
        for k in range(copies):
            for off in range(period):
                node = drawn[start + k * period + off]
                member.setdefault(node.name, []).append((gid, k))
                if k:
                    same_as[node.name] = drawn[start + off].name
    return same_as, member, shape


def _fine_tokens(drawn: Sequence[Node], coarse: Sequence[str], position: Mapping[str, int], hidden: set[str], period: int) -> list[str]:
    """Each op with where its arguments come from: an op at most ``period`` back by its
    distance (the same in every stretch), an op further back by its name (a mask or size
    every layer reads is the same node in each; a skip connection to another block is not),
    a weight as "W", another input as "in" (each layer reads weights of its own)."""
    out = []
    for i, n in enumerate(drawn):
        args = tuple(
            (i - position[a] if i - position[a] <= period else a) if a in position
            else ("W" if a in hidden else "in")
            for a in n.args
        )
        out.append(coarse[i] + repr(args))
    return out


def _runs_in_series(drawn: Sequence[Node], start: int, period: int, copies: int, position: Mapping[str, int]) -> bool:
    """True when each stretch of a run reads something the stretch before it made."""
    for k in range(1, copies):
        lo = start + (k - 1) * period
        block = drawn[lo + period : lo + 2 * period]
        if not any(lo <= position.get(a, -1) < lo + period for n in block for a in n.args):
            return False
    return True


def heavy_readers(nodes: Sequence[Node], limit: int) -> dict[str, int]:
    """Values read by more than ``limit`` nodes (a symbolic size that every view reads, a
    mask every layer reads) -> how many read them: drawn with all their edges, such a value
    ties the whole picture together and Graphviz's layout takes minutes."""
    readers: dict[str, set[str]] = {}
    for n in nodes:
        for a in n.args:
            readers.setdefault(a, set()).add(n.name)
    return {name: len(users) for name, users in readers.items() if len(users) > limit}
