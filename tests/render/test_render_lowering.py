"""Pictures below Dynamo: kernel- and time-coloured graph pictures, AOT graph pictures.

Most tests draw from a stored report of a real training step compiled by Inductor with
kernel times (tests/golden/reports/lowered_train.json, written by
scripts/record_golden_reports.py); one compiles a tiny model live to get a kernel that
fuses several nodes.

Goldens (tests/golden/lowered_train_graph1_{kernel,time,backward}.dot): after an
intended change to the pictures, re-make them with
``.venv/bin/python -m pytest -q tests/render/test_render_lowering.py --update-golden`` and read
the diff before keeping it.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest
import torch

import dynscope
from dynscope import InputError
from dynscope._model import AotGraph, Graph, Kernel, Lowering, Node
from dynscope._model.ops import op_category
from dynscope._render.bundle import render_bundle
from dynscope._render.dot import NODE_BUDGET, aot_graph_to_dot
from dynscope._render.palette import KERNEL_PALETTE, PALETTE
from dynscope._render.pictures import lay_out
from dynscope._render.svg import dot_to_svg
from tests.conftest import normalise
from tests.render.test_text_golden import stored

if TYPE_CHECKING:
    from pathlib import Path


# Every node line of a DOT picture: (id, its attributes).
_NODE_LINE = re.compile(r"^\s*(n_\w+) \[(.*)\];$", re.MULTILINE)

HOSTILE = 'a"b\\c{d}</title><script>alert(1)</script>\nx;]'


def _fills(dot: str) -> dict[str, str]:
    """Node id -> fill colour, read from the DOT text."""
    out = {}
    for node_id, attrs in _NODE_LINE.findall(dot):
        fill = re.search(r'fillcolor="(#[0-9a-f]{6})"', attrs)
        assert fill, f"node {node_id} has no fill: {attrs}"
        out[node_id] = fill.group(1)
    return out


def _attrs(dot: str, node_id: str) -> str:
    found = dict(_NODE_LINE.findall(dot))
    assert node_id in found, f"{node_id} not drawn"
    return found[node_id]


@pytest.fixture(scope="module")
def train() -> dynscope.Report:
    return stored("lowered_train")


@pytest.fixture(scope="module")
def fused() -> dynscope.Report:
    """A live Inductor compile: sin, mul, add, relu fuse into one C++ kernel; matmul is extern."""

    class Fused(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (x.sin() * 2 + 1).relu() @ x.t()

    return dynscope.report(Fused(), torch.randn(8, 8), inner="inductor")


def test_goldens(golden, train) -> None:
    graph = train.graph(1)
    golden.check("lowered_train_graph1_kernel.dot", normalise(graph.to_dot(color_by="kernel")))
    golden.check("lowered_train_graph1_time.dot", normalise(graph.to_dot(color_by="time")))
    low = graph.lowering
    assert low is not None and low.backward is not None
    golden.check("lowered_train_graph1_backward.dot", normalise(low.backward.to_dot(low)))


def test_auto_colours_by_kernel_when_lowered(train) -> None:
    graph = train.graph(1)
    assert graph.to_dot() == graph.to_dot(color_by="kernel")
    assert "fill: the forward kernel each node was fused into" in graph.to_dot()


def test_op_colouring_ignores_the_lowering(train) -> None:
    # "op" draws a lowered graph exactly as the same graph without its lowering.
    graph = train.graph(1)
    assert graph.to_dot(color_by="op") == dataclasses.replace(graph, lowering=None).to_dot()
    assert dataclasses.replace(graph, lowering=None).to_dot(color_by="auto") == graph.to_dot(color_by="op")
    assert "peripheries" not in graph.to_dot(color_by="op")


def test_kernel_colours_and_extern_border(train) -> None:
    dot = train.graph(1).to_dot(color_by="kernel")
    fills = _fills(dot)
    # linear -> extern_kernels.addmm (the first forward kernel), relu -> cpp_fused_relu_threshold_backward_0.
    assert fills["n_linear"] == KERNEL_PALETTE[0]
    assert fills["n_relu"] == KERNEL_PALETTE[1]
    assert "peripheries=2" in _attrs(dot, "n_linear")
    assert "peripheries=2" not in _attrs(dot, "n_relu")
    assert "cpp_fused_relu_threshold_backward_0 \u00b7 cpp \u00b7 5.3 us (1%)" in _attrs(dot, "n_relu")
    # Inputs are in no kernel and stay as in the op picture.
    assert fills["n_l_x_"] == PALETTE["input"]
    # The legend names each forward kernel in its colour, and no backward kernel.
    assert re.search(r'k_0 \[label="extern_kernels.addmm[^"]*", fillcolor="' + KERNEL_PALETTE[0], dot)
    assert "cpp_fused_sum_1" not in dot


@pytest.mark.slow
def test_one_kernel_one_colour_live(fused) -> None:
    (graph,) = fused.graphs
    low = graph.lowering
    assert low is not None
    multi = [k for k in low.kernels if len(k.nodes) > 1]
    assert multi, f"expected a kernel fusing several nodes: {low.kernels}"
    dot = graph.to_dot()
    fills = _fills(dot)
    by_kernel = {k.name: {fills["n_" + name] for name in k.nodes} for k in low.kernels}
    for name, colours in by_kernel.items():
        assert len(colours) == 1, f"{name} drawn in {colours}"
    distinct = [next(iter(c)) for c in by_kernel.values()]
    assert len(set(distinct)) == len(distinct) == len(low.kernels)
    extern = next(k for k in low.kernels if k.kind == "extern")
    assert all("peripheries=2" in _attrs(dot, "n_" + name) for name in extern.nodes)
    # An inference graph: one AOT picture, kind "inference".
    assert low.forward is not None and low.forward.kind == "inference" and low.backward is None
    assert 'digraph "aot_inference"' in low.forward.to_dot(low)


def test_time_shades_by_share(train) -> None:
    graph = train.graph(1)
    low = graph.lowering
    assert low is not None and low.profiled_ms
    dot = graph.to_dot(color_by="time")
    fills = _fills(dot)
    # linear's kernel (addmm, 20.2 us) takes more time than relu's (5.3 us): a redder fill
    # (less green), and each node says its time and share of the profiled time.
    assert int(fills["n_linear"][3:5], 16) < int(fills["n_relu"][3:5], 16) < 255
    assert "20.2 us (5%)" in _attrs(dot, "n_linear")
    assert "5.3 us (1%)" in _attrs(dot, "n_relu")
    assert "white 0% to red 100%" in dot


@pytest.mark.slow
def test_time_splits_a_kernel_over_its_nodes(fused) -> None:
    # The live report is untimed: "time" falls back to kernels and says so.
    (graph,) = fused.graphs
    dot = graph.to_dot(color_by="time")
    assert "coloured by kernel: the kernels were not timed" in dot
    assert graph.to_dot(color_by="time").replace(
        "\\ncoloured by kernel: the kernels were not timed (run report(timing=True) to shade by time)", ""
    ) == graph.to_dot(color_by="kernel")
    # Given times, a fused kernel's time is split evenly over its nodes.
    low = graph.lowering
    assert low is not None
    timed = dataclasses.replace(
        low,
        profiled_ms=1.0,
        kernels=tuple(dataclasses.replace(k, time_ms=0.4, share=0.4) for k in low.kernels),
    )
    multi = next(k for k in timed.kernels if len(k.nodes) > 1)
    each = 0.4 / len(multi.nodes)
    dot = dataclasses.replace(graph, lowering=timed).to_dot(color_by="time")
    for name in multi.nodes:
        assert f"({each:.0%})" in _attrs(dot, "n_" + name)


def test_colouring_without_lowering_says_so(train) -> None:
    bare = dataclasses.replace(train.graph(1), lowering=None)
    assert "coloured by op category: no Inductor lowering to colour by kernel" in bare.to_dot(color_by="kernel")


def test_bad_color_by(train) -> None:
    with pytest.raises(InputError, match="color_by='heat' is not a colouring; use one of 'auto', 'op'"):
        train.graph(1).to_dot(color_by="heat")


def test_fallback_and_unmapped_borders(train) -> None:
    graph = train.graph(1)
    low = graph.lowering
    assert low is not None
    fallback = Kernel(name="aten.sort.stable", kind="fallback", graph="forward", nodes=("linear",))
    low = dataclasses.replace(low, kernels=(fallback,), unmapped=("relu",))
    dot = dataclasses.replace(graph, lowering=low).to_dot()
    assert 'style="rounded,filled,dashed", color="#b2182b"' in _attrs(dot, "n_linear")
    assert 'style="rounded,filled,dotted", color="#888888"' in _attrs(dot, "n_relu")
    assert "not traced to any kernel" in _attrs(dot, "n_relu")


def test_aot_backward_marks_saved_and_tangents(train) -> None:
    low = train.graph(1).lowering
    assert low is not None and low.backward is not None and low.saved_for_backward is not None
    dot = low.backward.to_dot(low)
    fills = _fills(dot)
    for name in low.saved_for_backward.names:  # le, permute_1
        assert f'label="saved {name}\\n' in _attrs(dot, "n_" + name)
        assert "penwidth=2" in _attrs(dot, "n_" + name)
    assert fills["n_tangents_1"] != fills["n_primals_3"]
    assert fills["n_mm"] == PALETTE["matmul/conv"]
    assert "2 tensors saved by the forward (768 B)" in dot
    # Without the lowering nothing is called saved.
    assert "saved le" not in low.backward.to_dot()


def test_aten_op_categories() -> None:
    assert op_category("aten.mm.default") == "matmul/conv"
    assert op_category("aten.sum.dim_IntList") == "reduction"
    assert op_category("aten.permute.default") == "view/reshape"
    assert op_category("aten.relu.default") == "pointwise"
    assert op_category("torch.nn.functional.linear") == "matmul/conv"


def test_big_aot_graph_is_summarised() -> None:
    nodes = tuple(Node(name=f"relu_{i}", op="call_function", target="aten.relu.default") for i in range(NODE_BUDGET + 1))
    aot = AotGraph(kind="forward", node_count=len(nodes), op_count=len(nodes),
                   op_counts=(("aten.relu.default", len(nodes)),), nodes=nodes)
    dot = aot_graph_to_dot(aot)
    assert f"not drawn node by node: {NODE_BUDGET + 1} nodes to draw > {NODE_BUDGET}" in dot
    assert f"relu x{NODE_BUDGET + 1}" in dot
    assert "n_relu_0" in aot_graph_to_dot(aot, max_nodes=None)  # asked for in full
    assert "n_relu_0" not in dot


def _hostile_graph(graph: Graph) -> Graph:
    """Graph 1 with hostile node names, kernel names, source lines and AOT node names."""
    low = graph.lowering
    assert low is not None and low.backward is not None
    rename = {"relu": HOSTILE, "linear": HOSTILE + "2"}
    nodes = tuple(
        dataclasses.replace(n, name=rename.get(n.name, n.name), args=tuple(rename.get(a, a) for a in n.args))
        for n in graph.nodes
    )
    kernels = tuple(
        dataclasses.replace(
            k,
            name=HOSTILE + k.name,
            nodes=tuple(rename.get(name, name) for name in k.nodes),
            source_lines=((HOSTILE, 1),),
            aten_ops=(HOSTILE,),
        )
        for k in low.kernels
    ) + (Kernel(name=HOSTILE, kind="fallback", nodes=(HOSTILE,)),)
    aot_names = {"le": HOSTILE, "mm": HOSTILE + "{}", "tangents_1": HOSTILE + "t"}
    backward = dataclasses.replace(
        low.backward,
        nodes=tuple(
            dataclasses.replace(
                n,
                name=aot_names.get(n.name, n.name),
                target=n.target and HOSTILE + n.target,
                args=tuple(aot_names.get(a, a) for a in n.args),
            )
            for n in low.backward.nodes
        ),
    )
    saved = dataclasses.replace(low.saved_for_backward, names=(HOSTILE, "permute_1"))
    low = dataclasses.replace(low, kernels=kernels, backward=backward, saved_for_backward=saved, unmapped=(HOSTILE + "2",))
    return dataclasses.replace(graph, nodes=nodes, lowering=low)


def test_hostile_strings_still_render(train) -> None:
    graph = _hostile_graph(train.graph(1))
    low = graph.lowering
    assert low is not None and low.backward is not None
    for dot in (graph.to_dot(color_by="kernel"), graph.to_dot(color_by="time"), low.backward.to_dot(low)):
        svg = dot_to_svg(dot)  # real Graphviz: raises if the DOT does not parse
        assert "<script" not in svg
        root = ET.fromstring(svg)
        texts = "".join(root.itertext())
        assert "alert(1)" in texts  # the hostile text is shown, as text
    # The hostile node is still one node, coloured by its kernel, with the fallback border.
    dot = graph.to_dot(color_by="kernel")
    (line,) = [x for x in dot.splitlines() if 'x;]" [label="relu' in x]
    assert line.strip().startswith('"n_a\\"b\\\\c{d}</title><script>alert(1)</script>\\nx;]" [')
    assert f'fillcolor="{KERNEL_PALETTE[1]}"' in line and 'color="#b2182b"' in line


@pytest.mark.heavy  # a whole bundle drawn with Graphviz
def test_report_pictures_and_bundle(train, tmp_path: Path) -> None:
    program, graphs, aot = lay_out(train).as_tuple()
    assert program.startswith("<svg") and set(graphs) == {0, 1, 2}
    assert set(aot) == {(g, kind) for g in (0, 1, 2) for kind in ("forward", "backward")}
    assert "saved le" in aot[(1, "backward")]
    stale = tmp_path / "graph_9_backward.svg"
    stale.write_text("old")
    other = tmp_path / "graph_1_notes.svg"
    other.write_text("mine")
    render_bundle(train, tmp_path)
    for g in (0, 1, 2):
        for kind in ("forward", "backward"):
            ET.parse(tmp_path / f"graph_{g}_{kind}.svg")
    assert not stale.exists()
    assert other.read_text() == "mine"
    # The page inlines the AOT pictures and the kernel-coloured graph pictures.
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert page.count("AOT backward graph") >= 3 and "saved permute_1" in page
    assert "kernel each node was fused into" in page
    assert "AOT forward graph" in train.to_html(pictures=True)


def test_aot_kind_never_makes_a_path(train, tmp_path: Path) -> None:
    graph = train.graph(1)
    low = graph.lowering
    assert low is not None and low.forward is not None
    odd = dataclasses.replace(low, forward=dataclasses.replace(low.forward, kind="../../escape"), backward=None)
    rep = dataclasses.replace(train, graphs=(dataclasses.replace(graph, lowering=odd),))
    folder = tmp_path / "bundle"
    render_bundle(rep, folder)
    assert not (tmp_path / "escape.svg").exists()
    assert sorted(p.name for p in folder.glob("*.svg")) == ["graph_1.svg", "program.svg"]


def test_lowering_is_plain_data() -> None:
    # AotGraph/Lowering pictures are drawn from plain data: a hand-made AotGraph draws.
    aot = AotGraph(kind="inference", node_count=0, op_count=0)
    assert "known by its op counts only" in aot_graph_to_dot(aot, Lowering())
