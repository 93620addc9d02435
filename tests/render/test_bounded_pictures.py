"""Every picture in bounded time (issue 30): a node budget, repeats drawn once in graphs of
any origin, values read by many nodes drawn without their edges, a time limit per ``dot``
call in a process that dies with dynscope, and a page that says what each picture left out.

The big graphs are data (tests/corpus/big_graphs.py) or a real TORCH_TRACE log of a
ViT-shaped model (tests/traces/torch-2.13/logs/vit-tiny.log.gz, recorded by
``CUDA_VISIBLE_DEVICES="" .venv/bin/python scripts/record_trace_logs.py vit-tiny``) whose
dynamic-batch AOT graph kept Graphviz busy past any limit before.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import dynscope
from dynscope._cli import main
from dynscope._model.structure import repeated_runs
from dynscope._render.dot import HUB_READERS, NODE_BUDGET, DotOptions, graph_plan
from tests.corpus.big_graphs import varied_graph

ROOT = Path(__file__).resolve().parents[2]
VIT_LOG = ROOT / "tests" / "traces" / "torch-2.13" / "logs" / "vit-tiny.log.gz"
STORED = ROOT / "tests" / "golden" / "reports"
TIMED_OUT = "did not finish laying this picture out"


def _notes(page: str) -> list[str]:
    return [html.unescape(n) for n in re.findall(r'<p class="picture-note">Picture: ([^<]*)\.</p>', page)]


def _drawn_nodes(svg: str) -> int:
    return svg.count('class="node"')


@pytest.fixture
def big_report() -> dynscope.Report:
    """The stored MLP report with its graph replaced by a 5,000-node UNet-like graph whose
    blocks mostly differ."""
    rep = dynscope.load(STORED / "mlp.json")
    big = dataclasses.replace(varied_graph(5000), compile_id=rep.graphs[0].compile_id, frame=rep.graphs[0].frame)
    return dataclasses.replace(rep, graphs=(big,))


def test_varied_5000_node_graph_is_drawn_under_the_budget(big_report: dynscope.Report, tmp_path: Path) -> None:
    graph = big_report.graphs[0]
    assert graph.node_count >= 5000
    folder = big_report.render(tmp_path / "out", progress=False)
    page = (folder / "index.html").read_text(encoding="utf-8")
    svg = (folder / "graph_0.svg").read_text(encoding="utf-8")
    # Laid out by Graphviz (not the stand-in box), within the node budget.
    assert TIMED_OUT not in page and 'class="not-laid-out"' not in svg
    assert 0 < _drawn_nodes(svg) <= NODE_BUDGET
    notes = _notes(page)
    assert any("drawn at module level 2" in n and f"{graph.node_count} nodes > {NODE_BUDGET}" in n for n in notes), notes
    # The symbolic batch every group_norm reads is named as drawn without its edges.
    assert any("drawn without their edges (s0 by" in n for n in notes), notes


def test_full_draws_every_node_and_the_plan_does_not() -> None:
    graph = varied_graph(800)
    folded, note = graph_plan(graph)
    full, full_note = graph_plan(graph, DotOptions(max_nodes=None, fold_repeats=False))
    assert full_note == "" and note
    assert full.count("shape=box,") + full.count("shape=ellipse") > folded.count("shape=box,") + folded.count("shape=ellipse")
    assert "box3d" in folded and "box3d" not in full
    assert "edges not drawn" not in full and f"read by {graph.nodes[-2].name}" not in full


def test_repeats_found_without_module_paths() -> None:
    # 12 identical stretches of 4 ops in series, each reading the stretch before; then a tail.
    from dynscope._model import Node, TensorMeta

    t = (TensorMeta(kind="tensor", shape=(2, 8), dtype="float32"),)
    nodes = [Node(name="x", op="placeholder", target="x", outputs=t),
             Node(name="stem", op="call_function", target="aten.relu.default", args=("x",), outputs=t)]
    prev = "stem"
    for layer in range(12):
        for k, target in enumerate(("aten.mm.default", "aten.add.Tensor", "aten.relu.default", "aten.mul.Tensor")):
            name = f"op_{layer}_{k}"
            nodes.append(Node(name=name, op="call_function", target=target, args=(prev, "x"), outputs=t))
            prev = name
    same_as, member, runs = repeated_runs(nodes, set())
    assert runs == {0: (4, 12)}
    assert len(same_as) == 44 and same_as["op_11_3"] == "op_0_3"
    # Parallel copies (each reads the input, not the one before) are not a run.
    parallel = [nodes[0]] + [
        Node(name=f"p{i}_{k}", op="call_function", target=tg, args=("x",) if k == 0 else (f"p{i}_{k - 1}",), outputs=t)
        for i in range(6) for k, tg in enumerate(("aten.mm.default", "aten.add.Tensor", "aten.relu.default"))
    ]
    assert repeated_runs(parallel, set())[2] == {}


def test_vit_trace_page_folds_layers_and_hubs_in_bounded_time(tmp_path: Path) -> None:
    out = tmp_path / "vit"
    assert main(["trace", str(VIT_LOG), "-o", str(out), "--quiet"]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    assert TIMED_OUT not in page
    notes = _notes(page)
    # The dynamic-batch inference graph: its 12 layers drawn once, its batch size without edges.
    assert any("repeated block (x11) drawn once" in n and "drawn without their edges" in n for n in notes), notes
    assert any("repeated block (x12) drawn once" in n for n in notes), notes
    rep = dynscope.load_trace(VIT_LOG)
    aot = rep.graphs[1].lowering.forward
    readers = max(sum(a == n.name for m in aot.nodes for a in m.args) for n in aot.nodes)
    assert readers > HUB_READERS  # the hub is real: PyTorch's own graph has it


@pytest.mark.heavy
def test_dot_stopped_for_time_is_a_note_on_the_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In full, the dynamic-batch graph ties its layout up past the limit: stopped, said, no dot left.
    monkeypatch.setenv("DYNSCOPE_DOT_TIMEOUT", "2")
    rep = dynscope.load_trace(VIT_LOG)
    start = time.monotonic()
    folder = rep.render(tmp_path / "full", full=True, progress=False)
    took = time.monotonic() - start
    page = (folder / "index.html").read_text(encoding="utf-8")
    notes = _notes(page)
    assert any(TIMED_OUT in n and "within 2 s" in n for n in notes), notes
    assert "dynscope bug" not in page
    assert 'class="not-laid-out"' in (folder / "graph_1_inference.svg").read_text(encoding="utf-8")
    assert took < 60, took  # bounded: the limit, not Graphviz, decided
    assert _dots_running() == []


def _dots_running() -> list[int]:
    """Pids of ``dot`` processes that are this test process's descendants or orphans of it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not (cmd and Path(cmd[0].decode(errors="replace")).name == "dot" and b"-Tsvg" in cmd):
            continue
        try:  # another pytest-xdist worker's dot, rendering its own page, is not this test's
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid in (os.getpid(), 1):
            found.append(int(proc.name))
    return found


def _hanging_dot(folder: Path) -> Path:
    """A ``dot`` on PATH that writes its pid and never returns (as Graphviz did on big graphs)."""
    folder.mkdir()
    script = folder / "dot"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import os, sys, time
        with open({str(folder / 'pids')!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")
        sys.stdin.read()
        while True:
            time.sleep(1)
        """), encoding="utf-8")
    script.chmod(0o755)
    return folder


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_dot_that_never_returns_gets_a_page_and_no_orphan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _hanging_dot(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("DYNSCOPE_DOT_TIMEOUT", "1")
    rep = dynscope.load(STORED / "mlp.json")
    start = time.monotonic()
    folder = rep.render(tmp_path / "out", progress=False)
    took = time.monotonic() - start
    page = (folder / "index.html").read_text(encoding="utf-8")
    assert any(TIMED_OUT in n and "within 1 s" in n for n in _notes(page)), _notes(page)
    assert took < 20, took
    pids = [int(p) for p in (fake / "pids").read_text().split()]
    assert pids and not [p for p in pids if _alive(p)]


@pytest.mark.heavy
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG and /proc")
def test_killing_dynscope_kills_its_dot(tmp_path: Path) -> None:
    fake = _hanging_dot(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "DYNSCOPE_DOT_TIMEOUT": "300",
           "PYTHONPATH": str(ROOT)}
    code = f"import dynscope; dynscope.load({str(STORED / 'mlp.json')!r}).render({str(tmp_path / 'out')!r})"
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.DEVNULL)
    pids_file = fake / "pids"
    deadline = time.monotonic() + 60
    while not (pids_file.exists() and pids_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert pids and all(_alive(p) for p in pids)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "dot outlived the dynscope that started it"


def test_program_picture_of_a_16_graph_report_stays_one_readable_column() -> None:
    # tests/golden/reports/many_graphs.json: .venv/bin/python scripts/record_golden_reports.py many_graphs
    rep = dynscope.load(STORED / "many_graphs.json")
    assert rep.graph_count == 16 and rep.recompile_count == 8
    svg = rep.program_svg()
    width = float(re.search(r'<svg width="([\d.]+)pt"', svg).group(1))
    # The main chain in one column, each recompiled variant beside it: about two boxes and
    # a label wide (before: each step drifted right, 1,685 pt wide, its words shrunk to fit).
    assert width < 800, width
    dot = rep.program_dot()
    assert dot.count("group=main") == 1 + 8 + 7  # the call, the first compiles, the break sites
    assert "[constraint=false]" in dot
