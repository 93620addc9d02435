"""Graph statistics with networkx."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynscope._format import location
from dynscope._render.palette import op_category

if TYPE_CHECKING:
    from dynscope._model.types import Graph


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
    its op counts. The hash is the same in every process (sha256, no ``hash()``).
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
        items = ["counts", [[t, c] for t, c in graph.op_counts]]
    text = json.dumps(items, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]
