"""Big models on the page: identical graphs folded, repeated blocks drawn once, large
pictures kept off the page, and search and zoom in a real headless Chromium."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest
import torch
from torch import nn

import dynscope
from dynscope._model.structure import structure_hash
from dynscope._render.dot import REPEAT_MIN_NODES, DotOptions, graph_to_dot
from dynscope._render.html import INLINE_SVG_MAX
from tests.render.test_html_browser import _run

if TYPE_CHECKING:
    from pathlib import Path

BLOCKS = 40
TAIL = 100


class Block(nn.Module):
    """One of many identical blocks (a stand-in for a transformer layer)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(torch.nn.functional.gelu(self.fc(x)))


class Big(nn.Module):
    """Two stacks of 40 identical blocks, each its own graph (explicit breaks between them),
    then a tail of 100 layers that all differ (one large picture that nothing folds)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Sequential(*(Block() for _ in range(BLOCKS)))
        self.second = nn.Sequential(*(Block() for _ in range(BLOCKS)))
        self.tail = nn.Sequential(*(nn.Sequential(nn.Linear(16 + i, 17 + i), nn.ReLU()) for i in range(TAIL)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        torch._dynamo.graph_break()
        x = self.second(x)
        torch._dynamo.graph_break()
        return self.tail(x)


@pytest.fixture(scope="module")
def big() -> dynscope.Report:
    rep = dynscope.report(Big(), torch.randn(2, 16))
    assert rep.graph_count == 3, rep.summary()
    return rep


@pytest.fixture(scope="module")
def bundle(big: dynscope.Report, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return big.render(tmp_path_factory.mktemp("big"))


def _section(page: str, graph_id: int) -> str:
    start = page.index(f'<section id="graph-{graph_id}"')
    return page[start:page.index("</section>", start)]


@pytest.mark.heavy
def test_identical_graphs_share_a_structure_hash(big: dynscope.Report, tmp_path: Path) -> None:
    first, second, tail = big.graphs
    assert first.node_count == second.node_count > 300
    assert structure_hash(first) == structure_hash(second) != structure_hash(tail)
    # Names differ between the two graphs (other parameters), the hash does not; it survives JSON.
    assert [n.name for n in first.nodes] != [n.name for n in second.nodes]
    big.save(tmp_path / "r.json")
    loaded = dynscope.load(tmp_path / "r.json")
    assert [structure_hash(g) for g in loaded.graphs] == [structure_hash(g) for g in big.graphs]


@pytest.mark.heavy
def test_repeated_blocks_are_drawn_once_with_a_count(big: dynscope.Report) -> None:
    dot = big.graphs[0].to_dot()
    assert f"x{BLOCKS} (identical blocks, drawn once)" in dot
    drawn = re.findall(r"^\s+n_\w+ \[label=", dot, re.MULTILINE)
    assert len(drawn) < 10, "one block's nodes plus input and output, not 40 blocks' worth"
    # The block still reads the input and feeds the output.
    assert re.search(r"n_l_x_ -> n_\w+", dot) and re.search(r"n_\w+ -> n_output", dot)
    every = graph_to_dot(big.graphs[0], DotOptions(fold_repeats=False))
    assert "identical blocks" not in every
    assert len(re.findall(r"^\s+n_\w+ \[label=", every, re.MULTILINE)) == 4 * BLOCKS + 2
    # Weights drawn as inputs: only the drawn block's four (and the input and output).
    weights = big.graphs[0].to_dot(fold_params=False)
    assert "identical blocks" in weights and weights.count("shape=ellipse") == 4 + 2
    # The tail's 100 layers all differ: nothing to fold, every op drawn.
    tail = big.graphs[2]
    assert "identical blocks" not in tail.to_dot()
    assert len(re.findall(r"^\s+n_\w+ \[label=", tail.to_dot(), re.MULTILINE)) >= 2 * TAIL


class Towers(nn.Module):
    """Three identical blocks side by side (each reads the input; their sum is the output)
    in a graph big enough to fold repeats: parallel blocks are not a repeat."""

    def __init__(self) -> None:
        super().__init__()
        self.towers = nn.ModuleList(Block() for _ in range(3))
        self.tail = nn.Sequential(*(nn.Sequential(nn.Linear(16 + i, 17 + i), nn.ReLU()) for i in range(40)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tail(self.towers[0](x) + self.towers[1](x) + self.towers[2](x))


def test_parallel_identical_blocks_are_not_folded() -> None:
    rep = dynscope.report(Towers(), torch.randn(2, 16), coverage=False)
    (graph,) = rep.graphs
    assert graph.node_count >= REPEAT_MIN_NODES
    dot = graph.to_dot()
    assert "identical blocks" not in dot
    assert all(f'"cluster_towers.{i}"' in dot for i in range(3))


@pytest.mark.heavy
def test_bundle_page_is_small_folds_graphs_and_keeps_large_pictures_off(big: dynscope.Report, bundle: Path) -> None:
    page = (bundle / "index.html").read_text()
    assert len(page.encode()) < 600_000, len(page.encode())
    # The graph table: one row per graph, linked; the folded one links to graph 0.
    table = page[page.index('<table class="graph-table">'):]
    table = table[:table.index("</table>")]
    assert table.count("<tr>") == 1 + big.graph_count
    assert "same graph as 0" in table and '<a href="#graph-0">graph 0</a>' in table
    folded = _section(page, 1)
    assert "The same graph as" in folded and "graphs 0 and 1 are the same graph" in folded
    assert "<svg" not in folded
    # Graph 2's picture is too large to inline: on demand from its file.
    svg = (bundle / "graph_2.svg").read_text()
    assert len(svg) > INLINE_SVG_MAX
    tail = _section(page, 2)
    assert 'data-picture="off-page"' in tail and "<svg" not in tail
    assert 'data-src="graph_2.svg"' in tail and '<a href="graph_2.svg">' in tail
    assert "<svg" in _section(page, 0)


@pytest.mark.heavy
def test_single_file_page_leaves_large_pictures_out(big: dynscope.Report) -> None:
    page = big.to_html(pictures=True)
    tail = _section(page, 2)
    assert "<svg" not in tail and "rep.render(folder)" in tail and "button" not in tail
    # It stays self-contained: its CSP loads no file at all.
    assert "img-src data:;" in page and "'self'" not in page


@pytest.mark.browser
def test_big_page_in_chromium_searches_zooms_and_shows_pictures(bundle: Path, tmp_path: Path) -> None:
    uri = (bundle / "index.html").as_uri()
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", uri + "#find=layer_norm"], tmp_path / "p1")
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<html[^>]*>", dom).group(0)))
    body = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<body[^>]*>", dom).group(0)))
    assert body["errors"] == "0" and body["blocked"] == "0" and body["ready"] == "yes"
    # One layer_norm per drawn block: graph 0's (graph 1 is folded into it); the tail has none.
    assert root["find-hits"] == "1", root
    assert 'class="node hit"' in dom and 'class="node dim"' in dom
    assert int(root["zoom-controls"]) >= 2  # the program and graph 0
    assert "<button" in dom and 'title="zoom in"' in dom
    # By source line: the block's one line made its four ops.
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", uri + "#find=self.norm(torch"], tmp_path / "p4")
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<html[^>]*>", dom).group(0)))
    assert int(root["find-hits"]) >= 4, root
    # "relu" is in no picture on the page (graph 0 has gelu), only in the off-page tail's code.
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", uri + "#find=relu"], tmp_path / "p2")
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<html[^>]*>", dom).group(0)))
    assert root["find-hits"] == "0" and root["find-code"] == "2", "relu only in the off-page tail's code"
    # Following the table's link to graph 2 shows its picture from graph_2.svg, allowed by the CSP.
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", uri + "#graph-2"], tmp_path / "p3")
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<html[^>]*>", dom).group(0)))
    body = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', re.search(r"<body[^>]*>", dom).group(0)))
    assert root.get("pictures-loaded") == "1" and "pictures-failed" not in root, root
    assert body["blocked"] == "0" and body["errors"] == "0"
    assert '<img src="graph_2.svg"' in dom
