"""Pictures: DOT (golden), SVG (valid XML with the right labels), networkx, program view."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest

import dynscope
from dynscope._model.types import Graph, Node, TensorMeta
from dynscope._render.dot import AUTO_COLLAPSE_NODES, PALETTE, op_category
from tests.conftest import normalise
from tests.corpus.markers import break_line
from tests.corpus.programs import MLP, PROGRAMS, PrintModel, _x
from tests.test_text_golden import stored

if TYPE_CHECKING:
    from pathlib import Path

SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def mlp_report() -> dynscope.Report:
    return dynscope.report(MLP(), _x(4, 8))


@pytest.fixture(scope="module")
def print_report() -> dynscope.Report:
    return dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])


def test_graph_dot_golden(golden) -> None:
    # Rendered from a stored report (tests/test_text_golden.py says why).
    graph = stored("mlp").graphs[0]
    golden.check("mlp_graph0.dot", normalise(graph.to_dot()))
    golden.check("mlp_graph0_depth1.dot", normalise(graph.to_dot(depth=1)))
    golden.check("mlp_graph0_params.dot", normalise(graph.to_dot(fold_params=False)))


def test_program_dot_golden(golden) -> None:
    golden.check("print_model_program.dot", normalise(stored("print_model").program_dot()))


def test_dot_is_deterministic() -> None:
    a = dynscope.report(MLP(), _x(4, 8)).graphs[0].to_dot()
    b = dynscope.report(MLP(), _x(4, 8)).graphs[0].to_dot()
    assert a == b


def test_svg_parses_and_has_labels(mlp_report, tmp_path: Path) -> None:
    g = mlp_report.graphs[0]
    svg = g.to_svg(tmp_path / "g.svg")
    assert (tmp_path / "g.svg").read_text() == svg
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG_NS}text")]
    assert texts.count("F.linear +W") == 3
    assert "F.relu" in texts and "softmax" in texts and "output" in texts
    titles = [t.text for t in root.iter(f"{SVG_NS}title")]
    assert any(t and "programs.py:" in t and "self.layers(x)" in t for t in titles), "tooltips carry source lines"
    clusters = [t for t in titles if t and t.startswith("cluster_")]
    assert "cluster_layers.0.0" in clusters
    fills = {p.get("fill") for p in root.iter(f"{SVG_NS}path")} | {p.get("fill") for p in root.iter(f"{SVG_NS}polygon")}
    assert PALETTE["matmul/conv"] in fills and PALETTE["pointwise"] in fills


def test_program_svg_shows_breaks_and_recompiles(print_report) -> None:
    root = ET.fromstring(print_report.program_svg())
    texts = " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))
    assert f"BREAK programs.py:{break_line(PrintModel)} x2" in texts
    assert "[logging/print side effect]" in texts
    assert "input x changed size in dim 0: compiled" in texts
    assert "graph 0 (0/0)" in texts and "graph 2 (0/1)" in texts


def test_networkx(mlp_report) -> None:
    g = mlp_report.graphs[0]
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == g.node_count
    linears = [n for n, d in nxg.nodes(data=True) if d["target"] == "torch.nn.functional.linear"]
    assert len(linears) == 3
    data = nxg.nodes[linears[0]]
    assert data["category"] == "matmul/conv" and data["shape"] == (4, 8) and data["module"].startswith("layers.")
    assert all("shape" in d for _, _, d in nxg.edges(data=True))
    from dynscope._model.analysis import graph_stats

    stats = graph_stats(g)
    assert stats["nodes"] == g.node_count and stats["depth"] >= 7
    assert stats["categories"]["matmul/conv"] == 3


def test_op_categories() -> None:
    assert op_category("torch.nn.functional.linear") == "matmul/conv"
    assert op_category("torch.conv2d") == "matmul/conv"
    assert op_category("sum") == "reduction"
    assert op_category("view") == "view/reshape"
    assert op_category("torch.cat") == "data movement"
    assert op_category("torch.nn.functional.gelu") == "pointwise"
    assert op_category("mystery_op") == "other"


def _big_graph(n_layers: int) -> Graph:
    nodes = [Node("x", "placeholder", "x", outputs=(TensorMeta("tensor", (4, 8), "float32", "cpu"),))]
    prev = "x"
    for i in range(n_layers):
        name = f"op{i}"
        nodes.append(Node(name, "call_function", "torch.relu", args=(prev,),
                          outputs=(TensorMeta("tensor", (4, 8), "float32", "cpu"),),
                          module_stack=(("layers", "Sequential"), (f"layers.{i // 10}", "Block"))))
        prev = name
    nodes.append(Node("output", "output", "output", args=(prev,)))
    return Graph(id=0, compile_id="0/0", frame="forward", filename="m.py", lineno=1,
                 node_count=len(nodes), op_count=n_layers, nodes=tuple(nodes))


def test_big_graph_collapses_and_says_so() -> None:
    dot = _big_graph(AUTO_COLLAPSE_NODES + 10).to_dot()
    assert "drawn at module level" in dot
    assert dot.count("shape=box3d") == 1  # everything under "layers" folded into one box
    small = _big_graph(30).to_dot(depth=2)
    assert small.count("shape=box3d") == 0 and "cluster_layers.2" in small
    assert _big_graph(30).to_dot(depth=1).count("shape=box3d") == 1


def test_graphviz_missing(monkeypatch: pytest.MonkeyPatch, mlp_report) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(dynscope.GraphvizNotFoundError, match="apt-get install graphviz.*brew install graphviz.*conda"):
        mlp_report.graphs[0].to_svg()
    assert mlp_report.graphs[0].to_dot().startswith("digraph")
    html = mlp_report.to_html()
    assert "Pictures need Graphviz" in html and "<svg" not in html
    assert mlp_report.to_json() and str(mlp_report)


def test_render_bundle_and_cli(print_report, tmp_path: Path) -> None:
    out = print_report.render(tmp_path / "bundle")
    names = sorted(p.name for p in out.iterdir())
    assert names == ["graph_0.svg", "graph_1.svg", "graph_2.svg", "graph_3.svg", "index.html",
                     "program.svg", "report.json", "summary.txt"]
    assert dynscope.load(out / "report.json") == print_report
    from dynscope._cli import main

    saved = print_report.save(tmp_path / "run.json")
    assert main(["render", str(saved), "-o", str(tmp_path / "from_cli")]) == 0
    page = (tmp_path / "from_cli" / "index.html").read_text()
    assert page.count("<svg") == 5 and 'id="program-view"' in page


def test_repr_html(mlp_report) -> None:
    # A notebook shows a compact card (tests/test_notebook.py), not the whole page.
    card = mlp_report._repr_html_()
    assert card.startswith('<div class="dynscope-card">') and len(card) < len(mlp_report.to_html()) / 2


def test_every_corpus_program_renders() -> None:
    for prog in PROGRAMS[:6]:
        model, calls = prog.make()
        rep = dynscope.report(model, calls=calls)
        ET.fromstring(rep.program_svg())
        for g in rep.graphs:
            ET.fromstring(g.to_svg())


def test_trace_only_graph_renders() -> None:
    import torch

    with dynscope.capture() as cap:
        torch.compile(lambda x: x.sin() + 1, backend="eager")(_x(3))
    (g,) = cap.report.graphs
    assert g.origin == "trace"
    root = ET.fromstring(g.to_svg())
    assert "known from the trace only" in " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))


def test_html_lists_frames_that_fell_back() -> None:
    prog = next(p for p in PROGRAMS if p.name == "loop_print")
    model, calls = prog.make()
    html = dynscope.report(model, calls=calls).to_html(pictures=False)
    assert "Frames that fell back to eager" in html and "loop_print_fn" in html


def test_recompile_without_a_named_guard_still_draws(print_report) -> None:
    # A loaded or hand-edited report may carry a recompile with no reasons (hypothesis
    # found one): the program picture says "recompiled" instead of failing.
    import dataclasses

    assert print_report.recompiles, "the corpus program recompiles"
    bare = tuple(dataclasses.replace(r, reasons=(), explained=()) for r in print_report.recompiles)
    rep = dataclasses.replace(print_report, recompiles=bare)
    dot = rep.program_dot()
    assert 'label="recompiled"' in dot
    assert "input x changed size" not in dot
