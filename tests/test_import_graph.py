"""Which way imports point: no cycle among dynscope's modules, and reading needs no torch.

The graph is built statically from each module's import-time imports: statements at
module level (inside ``if``/``try`` too, and class bodies), but not those under
``if TYPE_CHECKING:`` (never run) nor those inside functions (run on first call, after
every module has loaded). An edge to a module's own parent package is left out: Python
always runs the parent's ``__init__`` first, so it can never close a cycle.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import dynscope
from tests.corpus.programs import PrintModel, _x

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dynscope"

#: Modules that turn a saved report into text, pictures and pages: none may import torch.
READERS = (
    "dynscope",
    "dynscope._model.types",
    "dynscope._model.codec",
    "dynscope._render.text",
    "dynscope._render.dot",
    "dynscope._render.html",
    "dynscope._render.card",
    "dynscope._render.bundle",
    "dynscope._render.svg",
    "dynscope._write",
    "dynscope._model.diff",
    "dynscope._model.analysis",
    "dynscope._cli",
)
#: Renderers and analysis: model types for annotations only (a TYPE_CHECKING import).
PURE = ("_render.text", "_render.dot", "_render.html", "_render.card", "_render.bundle", "_render.svg", "_model.diff", "_model.analysis")
#: Shared helpers: leaves that import nothing from dynscope.
LEAVES = ("_format", "_render.palette", "_render.color")


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (see the module docstring)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                found += _import_time_statements(node.body)
            found += _import_time_statements(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                found += _import_time_statements(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            found += _import_time_statements(node.body)
    return found


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """dynscope module -> the dynscope modules it imports at import time."""
    paths = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node in _import_time_statements(tree.body):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
                continue
            base = node.module or ""
            if node.level:  # relative: from . import x / from .y import z
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets.add(base)
            # `from package import submodule` imports the submodule.
            targets.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths)
        ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t in targets if t in paths and t != name and t not in ancestors}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle as [a, b, ..., a], or [] when the graph has none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def test_the_graph_sees_dynscope_modules() -> None:
    graph = import_graph()
    assert "dynscope._torch.fx" in graph["dynscope._capture.backend"]  # from dynscope._torch.fx import ...
    assert "dynscope._torch" in graph["dynscope._capture.capture"]  # from dynscope import _torch
    assert "dynscope._model.types" in graph["dynscope._model.codec"]
    # Typing-only and function-local imports are not import-time edges.
    assert "dynscope._model.types" not in graph["dynscope._errors"]
    assert "dynscope._model.codec" not in graph["dynscope._model.types"]


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle == [], "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", PURE)
def test_renderers_import_model_types_for_typing_only(name: str) -> None:
    imports = import_graph()[f"dynscope.{name}"]
    assert "dynscope._model.types" not in imports, f"dynscope.{name} imports dynscope._model.types at run time"
    assert "dynscope._capture.capture" not in imports and "dynscope._capture.timing" not in imports


@pytest.mark.parametrize("name", LEAVES)
def test_shared_helpers_are_leaves(name: str) -> None:
    imports = import_graph()[f"dynscope.{name}"]
    assert imports == set(), f"dynscope._{name} imports {sorted(imports)}"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", READERS)
def test_reading_modules_do_not_import_torch(name: str) -> None:
    res = _run(f"import json, sys, {name}; print(json.dumps(sorted(sys.modules)))")
    assert res.returncode == 0, res.stderr
    loaded = json.loads(res.stdout)
    assert "torch" not in loaded, f"importing {name} imported torch"
    assert name in loaded


def test_reading_a_report_never_imports_torch(tmp_path: Path) -> None:
    # A real report, with graphs, a break site and a recompile, saved by this process.
    rep = dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])
    assert rep.graph_count and rep.break_count and rep.recompile_count
    saved = rep.save(tmp_path / "run.json")
    code = f"""
import sys
import dynscope
from dynscope._model.analysis import graph_stats
from dynscope._model.diff import diff_reports, render_diff
rep = dynscope.load({str(saved)!r})
assert rep.summary() and rep.program_dot() and rep.to_html(pictures=False)
assert all(g.to_dot() for g in rep.graphs) and graph_stats(rep.graphs[0])["nodes"]
assert render_diff(diff_reports(rep, rep))
assert (rep.render({str(tmp_path / "out")!r}) / "index.html").is_file()
assert dynscope._model.codec.report_from_dict(rep.to_dict()) == rep
print("torch" in sys.modules)
"""
    res = _run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False", "reading and rendering a saved report imported torch"


def test_report_still_loads_torch_on_use() -> None:
    res = _run("import sys, dynscope; f = dynscope.report; print('torch' in sys.modules, callable(f), "
               "dynscope.capture.__module__, dynscope.TimingOptions.__name__)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True", "dynscope", "TimingOptions"]
