"""Pictures: DOT (golden), SVG (valid XML with the right labels), networkx, program view.

Every test here draws fixed data, so a torch upgrade cannot move it (STYLE.md 16): reports
stored from real compiles (tests/golden/reports, written by scripts/record_golden_reports.py),
reports hypothesis makes up (the strategies of tests/model/test_model_json.py) and dataclasses
built in the test; short outputs are compared whole. What a live compile captures (counts,
sites, which graphs are known from the trace only, which frames fell back) is tested where
it is about meaning: tests/capture/test_corpus.py, tests/render/test_display_truth.py, tests/render/test_text_golden.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings

import dynscope
from dynscope._model import Frame, Graph, Node, Report, TensorMeta
from dynscope._model.ops import op_category
from dynscope._render.dot import NODE_BUDGET
from dynscope._render.palette import PALETTE
from tests.conftest import ROOT, normalise
from tests.model.test_model_json import reports
from tests.render.test_text_golden import STORED, stored

if TYPE_CHECKING:
    from pathlib import Path

SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def mlp_report() -> dynscope.Report:
    return stored("mlp")


@pytest.fixture(scope="module")
def print_report() -> dynscope.Report:
    return stored("print_model")


def test_graph_dot_golden(golden) -> None:
    # Rendered from a stored report (tests/render/test_text_golden.py says why).
    graph = stored("mlp").graphs[0]
    golden.check("mlp_graph0.dot", normalise(graph.to_dot()))
    golden.check("mlp_graph0_depth1.dot", normalise(graph.to_dot(depth=1)))
    golden.check("mlp_graph0_params.dot", normalise(graph.to_dot(fold_params=False)))


def test_program_dot_golden(golden) -> None:
    golden.check("print_model_program.dot", normalise(stored("print_model").program_dot()))


# Everything a report draws, as text, for every stored report: run in fresh processes with
# different hash seeds, since colours and orders must come from names, never from id() or
# set order (STYLE.md 5).
_DRAW_ALL = """
import json, sys
from pathlib import Path
import dynscope
out = {}
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    rep = dynscope.load(path)
    out[path.stem] = [rep.summary(), rep.program_dot(), rep.to_html(pictures=False), rep._repr_html_()]
    for g in rep.graphs:
        out[path.stem] += [g.to_dot(), g.to_dot(depth=1), g.to_dot(fold_params=False)]
        if g.lowering is not None:
            out[path.stem] += [g.to_dot(color_by="kernel"), g.to_dot(color_by="time")]
print(json.dumps(out))
"""


def test_drawing_is_the_same_in_every_process() -> None:
    runs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "NO_COLOR": "1"}
        res = subprocess.run([sys.executable, "-c", _DRAW_ALL, str(STORED)], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        runs.append(json.loads(res.stdout))
    assert len(runs[0]) >= 4 and all(runs[0].values())
    for name, texts in runs[0].items():
        assert texts == runs[1][name], f"drawing {name}.json differs between two processes"


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
    (site,) = print_report.breaks  # the stored site: the corpus may have moved since it was recorded
    assert f"BREAK programs.py:{site.lineno} x2" in texts
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
    from dynscope._model.structure import graph_stats

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
        # Each block of ten its own width: no two alike, so repeat folding cannot shrink it.
        nodes.append(Node(name, "call_function", "torch.relu", args=(prev,),
                          outputs=(TensorMeta("tensor", (4, 8 + i // 10), "float32", "cpu"),),
                          module_stack=(("layers", "Sequential"), (f"layers.{i // 10}", "Block"))))
        prev = name
    nodes.append(Node("output", "output", "output", args=(prev,)))
    return Graph(id=0, compile_id="0/0", frame="forward", filename="m.py", lineno=1,
                 node_count=len(nodes), op_count=n_layers, nodes=tuple(nodes))


def test_big_graph_collapses_and_says_so() -> None:
    dot = _big_graph(NODE_BUDGET + 10).to_dot()
    assert f"drawn at module level 1 (3 nodes drawn): {NODE_BUDGET + 12} nodes > {NODE_BUDGET}" in dot
    assert dot.count("shape=box3d") == 1  # everything under "layers" folded into one box
    # Asked for in full: every node, no box.
    full = _big_graph(NODE_BUDGET + 10).to_dot(full=True)
    assert full.count("shape=box3d") == 0 and full.count('[label="relu') == NODE_BUDGET + 10
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
    assert (out / "summary.txt").read_text(encoding="utf-8") == print_report.summary()
    from dynscope._cli import main

    saved = print_report.save(tmp_path / "run.json")
    assert main(["render", str(saved), "-o", str(tmp_path / "from_cli")]) == 0
    page = (tmp_path / "from_cli" / "index.html").read_text()
    assert page.count("<svg") == 5 and 'id="program-view"' in page
    assert page == (out / "index.html").read_text()


def test_repr_html(mlp_report) -> None:
    # A notebook shows a compact card (tests/render/test_notebook.py), not the whole page.
    card = mlp_report._repr_html_()
    assert card.startswith('<div class="dynscope-card">') and len(card) < len(mlp_report.to_html()) / 2


def test_every_stored_report_draws_valid_svg() -> None:
    for path in sorted(STORED.glob("*.json")):
        rep = dynscope.load(path)
        ET.fromstring(rep.program_svg())
        for g in rep.graphs:
            ET.fromstring(g.to_svg())


@settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reports)
def test_any_report_draws_valid_dot_and_page(rep: Report) -> None:
    # Made-up reports (any text, in any field) still draw: DOT that Graphviz reads, one page.
    for dot in (rep.program_dot(), *(g.to_dot() for g in rep.graphs)):
        assert dot.startswith("digraph ") and dot.rstrip().endswith("}")
    assert rep.summary() and rep.to_html(pictures=False).rstrip().endswith("</html>")


def test_one_made_up_report_draws_valid_svg() -> None:
    # Graphviz itself on a graph whose every name is hostile (test_any_report... draws DOT only:
    # one dot run per example would make it slow).
    hostile = 'a"b\\c{d}</title><script>x</script>\n;]'
    meta = (TensorMeta("tensor", (2, "s0"), "float32", "cpu"),)
    nodes = (Node(hostile, "placeholder", hostile, outputs=meta),
             Node("y", "call_function", hostile, args=(hostile,), outputs=meta, filename=hostile, source=hostile,
                  module_stack=((hostile, hostile),)),
             Node("output", "output", "output", args=("y",)))
    graph = Graph(id=0, compile_id="0/0", frame=hostile, filename=hostile, lineno=1, node_count=3, op_count=1,
                  nodes=nodes)
    rep = Report(graphs=(graph,), title=hostile)
    ET.fromstring(graph.to_svg())
    ET.fromstring(rep.program_svg())


def test_trace_only_graph_draws_its_op_counts() -> None:
    # A graph capture() knew from the trace only has op counts but no nodes: one summary box.
    graph = dataclasses.replace(stored("mlp").graphs[0], origin="trace", nodes=())
    assert graph.to_dot() == (
        'digraph "graph_0" {\n'
        "  rankdir=TB;\n"
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];\n'
        '  label="graph 0 (0/0) forward: 7 graph ops, 15 nodes (known from the trace only)"; labelloc=t; fontname="Helvetica";\n'
        '  summary [label="F.linear x3\\nF.relu x3\\nsoftmax x1", fillcolor="#e0e0e0"];\n'
        "}\n"
    )
    root = ET.fromstring(graph.to_svg())
    assert "known from the trace only" in " ".join(t.text or "" for t in root.iter(f"{SVG_NS}text"))


def test_html_lists_frames_that_fell_back() -> None:
    failed = Frame(compile_id="1/0", function="loop_print_fn", filename="<root>/tests/corpus/programs.py", lineno=7,
                   status="failed", fail_reason="skipped: a <loop> & more")
    clean = stored("print_model")
    html = dataclasses.replace(clean, frames=(*clean.frames, failed)).to_html(pictures=False)
    start = html.index("<section><h2>Frames that fell back to eager</h2>")
    assert html[start:html.index("</section>", start) + len("</section>")] == (
        "<section><h2>Frames that fell back to eager</h2><p>Dynamo gave up on these functions; "
        "they run eagerly, and only what they call is compiled.</p>"
        "<table><tr><th>compile</th><th>function</th><th>where</th><th>why</th></tr>"
        "<tr><td><code>1/0</code></td><td>loop_print_fn</td><td><code>programs.py:7</code></td>"
        "<td>skipped: a &lt;loop&gt; &amp; more</td></tr></table></section>"
    )
    assert "fell back" not in clean.to_html(pictures=False)


def test_recompile_without_a_named_guard_still_draws(print_report) -> None:
    # A loaded or hand-edited report may carry a recompile with no reasons (hypothesis
    # found one): the program picture says "recompiled" instead of failing.
    assert print_report.recompiles, "the stored program recompiles"
    bare = tuple(dataclasses.replace(r, raw_reasons=(), causes=(), fixes=()) for r in print_report.recompiles)
    rep = dataclasses.replace(print_report, recompiles=bare)
    dot = rep.program_dot()
    assert 'label="recompiled"' in dot
    assert "input x changed size" not in dot
