"""Which way imports point: one floor per layer, none pointing up, and reading needs no torch.

The graph is built statically from every import statement of every dynscope module,
imports inside functions and methods included (they run later, but they tie the modules
together all the same), except those under ``if TYPE_CHECKING:`` (never run). Imports by a
name string (``importlib.import_module``: the lazy tables of ``dynscope`` and
``dynscope._torch``) are deferrals on purpose and are not seen. ``from pkg import sub`` where
``sub`` is a module is an edge to ``pkg.sub`` only, and an edge to a module's own parent
package (``dynscope._model.diff`` -> ``dynscope._model``) is left out: Python runs the parent
first in any case, so such an edge says nothing about layering. The top package ``dynscope``
is a front end, so an edge to it is always kept.

The floors, bottom up (docs/architecture.md, DESIGN.md "Layers"):

- leaves: ``dynscope._errors``, ``_format``, ``_write``, ``_progress``, ``_hooks`` and the torch-free
  phrasebooks of ``dynscope._lexicon``: import nothing of dynscope but the error tree ``dynscope._errors``
  (which imports nothing of dynscope at run time);
- the model, ``dynscope._model.*``: leaves only (its output shortcuts reach the renderers through
  a loader ``dynscope/__init__`` hands it, not by an import: no edge points up;
- render, ``dynscope._render.*``: leaves, the model, render; never capture, never torch;
- read, ``dynscope._read.*``: the builder and the readers of logs and saved reports: leaves,
  the model, ``dynscope._torch``'s format modules, read; never capture, never render, and
  never torch (imported one by one in a fresh process below: torch never loads);
- capture, ``dynscope._capture.*``, and ``dynscope._torch.*``: never render;
- front ends (``dynscope``, ``_cli``, ``pytest_plugin``, ``_testing``, ``__main__``, ``watch``): anything.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dynscope"
TRACE_LOGS = ROOT / "tests" / "traces"
STORED = ROOT / "tests" / "golden" / "reports"

FRONT_ENDS = frozenset({
    "dynscope", "dynscope.__main__", "dynscope._cli", "dynscope.pytest_plugin", "dynscope._testing", "dynscope.watch",
})
#: Shared leaves, and the plain-text rules about PyTorch's names (dynscope._lexicon).
LEAVES = frozenset({
    "dynscope._errors", "dynscope._format", "dynscope._write", "dynscope._progress", "dynscope._hooks",
    "dynscope._lexicon", "dynscope._lexicon.wording", "dynscope._lexicon.break_categories",
})
DOOR = "dynscope._render"
#: The error tree: a leaf every floor may import (the other leaves import nothing of dynscope).
ERRORS = "dynscope._errors"

#: floor -> the floors it may import (front ends and the torch/capture floors are checked
#: by the cycle test and the forbidden list below).
ALLOWED = {
    "leaf": frozenset(),
    "model": frozenset({"leaf", "model"}),
    "door": frozenset({"leaf", "model", "render"}),
    "render": frozenset({"leaf", "model", "render"}),
    "read": frozenset({"leaf", "model", "read", "torch"}),
}
FORBIDDEN = {"capture": frozenset({"render", "door"}), "torch": frozenset({"render", "door"})}
#: Floors whose modules never import torch, not even inside a function.
TORCH_FREE_FLOORS = ("leaf", "model", "door", "render", "read")


def floor(module: str) -> str:
    """The floor a dynscope module lives on."""
    if module in FRONT_ENDS:
        return "front"
    if module in LEAVES:
        return "leaf"
    if module == DOOR:
        return "door"
    for prefix, name in (("dynscope._model", "model"), ("dynscope._render.", "render"),
                         ("dynscope._read", "read"), ("dynscope._capture", "capture"),
                         ("dynscope._torch", "torch")):
        if module == prefix or module.startswith(prefix.rstrip(".") + "."):
            return name
    return "unplaced"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_statements(nodes: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement under ``nodes``, at any depth (functions, ``except`` handlers,
    ``match`` cases...), except in the body of ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in nodes:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            found += _import_statements(node.orelse)  # the else branch does run
        else:
            found += _import_statements(list(ast.iter_child_nodes(node)))  # type: ignore[arg-type]
    return found


def _resolve(name: str, modules: set[str]) -> str:
    """The module ``name`` lives in: itself, or its longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


@functools.cache
def import_edges(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {imported module of the same package: line of the first such import}.

    Cached: every test reads the same tree (callers must not change the result)."""
    paths = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    modules = set(paths)
    top = package.name
    edges: dict[str, dict[str, int]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found: dict[str, int] = {}
        for node in _import_statements(tree.body):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative: from . import x / from ..y import z
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules]
                # `from pkg import sub` needs pkg.sub; `from pkg import thing` needs pkg.
                targets = subs if len(subs) == len(node.names) else [*subs, base]
            ancestors = {".".join(name.split(".")[:i]) for i in range(2, name.count(".") + 1)}
            for target in targets:
                if target != top and not target.startswith(top + "."):
                    continue
                resolved = _resolve(target, modules)
                if resolved and resolved != name and resolved not in ancestors:
                    found.setdefault(resolved, node.lineno)
        edges[name] = found
    return edges


def torch_imports(package: Path = PACKAGE) -> dict[str, list[int]]:
    """module -> lines that import torch (any depth, TYPE_CHECKING blocks excepted)."""
    found: dict[str, list[int]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _import_statements(tree.body):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0) and any(n == "torch" or n.startswith("torch.") for n in names):
                found.setdefault(_module_name(path, package), []).append(node.lineno)
    return found


def _where(module: str, line: int) -> str:
    path = module.replace(".", "/")
    path += "/__init__.py" if (ROOT / path).is_dir() else ".py"
    return f"{path}:{line}"


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle [a, b, ..., a] through each strongly connected set of modules."""
    g = nx.DiGraph([(a, b) for a, targets in graph.items() for b in targets])
    cycles = []
    for component in sorted((c for c in nx.strongly_connected_components(g) if len(c) > 1), key=min):
        cycle = nx.find_cycle(g.subgraph(component), source=min(component))
        cycles.append([a for a, _ in cycle] + [cycle[0][0]])
    return cycles


def _door_edges(graph: dict[str, dict[str, int]]) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in graph.items() for b in targets if floor(a) == "model" and b == DOOR}


# -- the graph builder itself ------------------------------------------------------------------


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import c\n")
    (pkg / "a.py").write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import typing_only\nelse:\n    import pkg.runs\n"
        "def f():\n    from pkg.sub.c import thing\n    return thing\n"
        "class K:\n    def m(self):\n        from . import b\n"
        "try:\n    pass\nexcept ImportError:\n    import pkg.fallback\n"
    )
    for name in ("b", "typing_only", "runs", "fallback"):
        (pkg / f"{name}.py").write_text("")
    (pkg / "sub" / "c.py").write_text("import os\nfrom pkg.sub import d\nfrom pkg import b\nfrom pkg.sub import VALUE\n")
    (pkg / "sub" / "d.py").write_text("def g():\n    import pkg\n    import torch.fx\n")
    edges = import_edges(pkg)
    assert set(edges["pkg.a"]) == {"pkg.runs", "pkg.sub.c", "pkg.b", "pkg.fallback"}  # function, method, else, except
    assert edges["pkg.a"]["pkg.sub.c"] == 8
    assert set(edges["pkg.sub.c"]) == {"pkg.sub.d", "pkg.b"}  # not its own parent package pkg.sub
    assert set(edges["pkg.sub.d"]) == {"pkg"}  # the top package is a front end: kept
    assert edges["pkg.sub"] == {"pkg.sub.c": 1}
    assert torch_imports(pkg) == {"pkg.sub.d": [3]}


def test_cycles_are_found_and_named() -> None:
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 1}}) == []


def test_floors_are_named() -> None:
    assert floor("dynscope") == "front" and floor("dynscope._cli") == "front"
    assert floor("dynscope._model") == floor("dynscope._model.codec") == "model"
    assert floor("dynscope._render") == "door" and floor("dynscope._render.text") == "render"
    assert floor("dynscope._capture.capture") == "capture" and floor("dynscope._torch.fx") == "torch"
    assert floor("dynscope._read.assemble") == floor("dynscope._read") == "read"
    assert floor("dynscope._lexicon.wording") == "leaf" and floor("dynscope._modelling") == "unplaced"


def test_the_graph_sees_dynscope() -> None:
    graph = import_edges()
    assert len(graph) > 30 and sum(map(len, graph.values())) > 60
    assert {"dynscope._model", "dynscope._render", "dynscope._capture", "dynscope._torch"} <= set(graph)
    assert any(floor(b) == "model" for b in graph["dynscope._read.assemble"])  # it builds the model


# -- the layout --------------------------------------------------------------------------------


def test_every_module_has_a_floor() -> None:
    unplaced = sorted(m for m in import_edges() if floor(m) == "unplaced")
    assert unplaced == [], f"modules on no floor (place them in a layer package, or name them here): {unplaced}"


def test_no_cycle_and_no_way_up_from_the_model() -> None:
    graph = import_edges()
    # The model imports nothing above it, not even late: its output shortcuts reach the
    # renderers through a loader the front end hands it (dynscope._model.display.use_renderers).
    assert _door_edges(graph) == set(), f"model modules importing the render door: {sorted(_door_edges(graph))}"
    cycles = _cycles(graph)
    lines = [" -> ".join(c) + "\n      via " + ", ".join(_where(a, graph[a][b]) for a, b in pairwise(c))
             for c in cycles]
    assert cycles == [], f"{len(cycles)} import cycle(s):\n  " + "\n  ".join(lines)


def test_the_model_shortcuts_reach_the_renderers_through_the_front_end() -> None:
    import dynscope
    from dynscope._model import display

    # Wired by dynscope/__init__, the loader gives the render door.
    assert display._load_door is not None and display._door() is importlib.import_module(DOOR)
    rep = dynscope.load(sorted(STORED.glob("*.json"))[0])
    assert rep.summary(color=False).splitlines()[0] == dynscope._render.summary_text(rep, color=False).splitlines()[0]
    wired = display._load_door
    try:
        display.use_renderers(None)  # type: ignore[arg-type]
        with pytest.raises(RuntimeError, match="renderers are not wired"):
            rep.summary()
    finally:
        display.use_renderers(wired)



def test_each_floor_imports_only_what_is_below_it() -> None:
    graph = import_edges()
    wrong = []
    for a, targets in sorted(graph.items()):
        fa = floor(a)
        for b, line in sorted(targets.items()):
            fb = floor(b)
            if b == ERRORS:
                continue  # every floor may raise dynscope's errors
            if (fa in ALLOWED and fb not in ALLOWED[fa]) or fb in FORBIDDEN.get(fa, ()):
                wrong.append(f"{_where(a, line)}: {a} ({fa}) imports {b} ({fb})")
    assert wrong == [], f"{len(wrong)} import(s) against the floors (module docstring):\n  " + "\n  ".join(wrong)


def test_lower_floors_never_import_torch() -> None:
    found = sorted(f"{_where(m, line)}: {m} ({floor(m)}) imports torch"
                   for m, lines in torch_imports().items() for line in lines if floor(m) in TORCH_FREE_FLOORS)
    assert found == [], "torch imported below capture:\n  " + "\n  ".join(found)


# -- at run time: reading a report needs no torch ----------------------------------------------


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _readers() -> list[str]:
    """Every torch-free module (found from the tree, so it follows moves) and the two front
    ends that read reports."""
    return sorted({"dynscope", "dynscope._cli"} | {m for m in import_edges() if floor(m) in TORCH_FREE_FLOORS})


def test_reading_modules_do_not_import_torch() -> None:
    # One fresh process imports them one by one: torch, once loaded, stays in sys.modules, so
    # the first module after which it is there is the one that imported it.
    readers = _readers()
    res = _run(f"import importlib, json, sys\nfor name in {readers!r}:\n    importlib.import_module(name)\n"
               "    if 'torch' in sys.modules:\n        print(json.dumps(name))\n        break\n"
               "else:\n    print(json.dumps(None))")
    assert res.returncode == 0, res.stderr
    culprit = json.loads(res.stdout)
    assert culprit is None, f"importing {culprit} imported torch (checked in order: {readers})"


@pytest.mark.heavy  # a fresh Python reading every stored report
def test_reading_a_report_never_imports_torch(tmp_path: Path) -> None:
    # Stored reports from real compiles (scripts/record_golden_reports.py): graphs, break
    # sites, a recompile, lowering and advice between them. Everything a reader does, through
    # the public API and the command line: load, show, diff, render, the shortcuts.
    code = f"""
import contextlib, io, sys
from pathlib import Path
import dynscope
from dynscope._cli import main
stored = sorted(Path({str(STORED)!r}).glob("*.json"))
assert len(stored) >= 4, stored
for path in stored:
    rep = dynscope.load(path)
    assert rep.summary() and rep.program_dot() and rep.to_html(pictures=False) and rep._repr_html_()
    assert all(g.to_dot() for g in rep.graphs)
    assert dynscope.load(rep.save(Path({str(tmp_path)!r}) / path.name)) == rep
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["show", str(path)]) == 0
        assert main(["diff", str(stored[0]), str(path)]) in (0, 1)
        assert main(["render", str(path), "-o", str(Path({str(tmp_path)!r}) / path.stem)]) == 0
    assert (Path({str(tmp_path)!r}) / path.stem / "index.html").is_file()
print("torch" in sys.modules)
"""
    res = _run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False", "reading and rendering a saved report imported torch"


@pytest.mark.heavy  # a fresh Python reading every recorded release's logs
def test_reading_a_trace_never_imports_torch(tmp_path: Path) -> None:
    # Real TORCH_TRACE logs of every recorded release (tests/traces/torch-*/logs): one rank, a job's
    # folder of two ranks (read in parallel processes too), the command line on both.
    code = f"""
import contextlib, io, sys
from pathlib import Path
import dynscope
from dynscope._cli import main
logs = sorted(Path({str(TRACE_LOGS)!r}).glob("torch-*/logs"))
assert len(logs) >= 4, logs  # 2.11, 2.13, 2.14, 2.15
for folder in logs:
    rep = dynscope.load_trace(folder / "corpus-print_break.log")
    assert rep.summary() and rep.to_html(pictures=False)
    job = dynscope.load_trace(folder / "ddp-2ranks")
    assert job.ranks == (0, 1) and dynscope.load_trace(folder / "ddp-2ranks", jobs=2) == job
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["trace", str(folder / "ddp-2ranks"), "-o", str(Path({str(tmp_path)!r}) / folder.parent.name)]) == 0
        assert main(["show", str(folder / "inductor-train.log")]) == 0
print("torch" in sys.modules)
"""
    res = _run(code)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False", "reading a trace log imported torch"


@pytest.mark.heavy
def test_report_still_loads_torch_on_use() -> None:
    res = _run("import sys, dynscope; f = dynscope.report; print('torch' in sys.modules, callable(f), "
               "dynscope.capture.__module__, dynscope.TimingOptions.__name__)")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["True", "True", "dynscope", "TimingOptions"]


def test_the_cli_is_a_front_end_on_the_public_api() -> None:
    # Issue 33: the command line reaches dynscope through its public names, the render door
    # and the shared leaves only (formats, progress, the error tree), never past them into the
    # floors; the door names rendering only (issue 46), not the leaves' helpers.
    reached = set(import_edges()["dynscope._cli"])
    assert reached <= {"dynscope", DOOR} | LEAVES, sorted(reached - {"dynscope", DOOR} - LEAVES)
    assert {"dynscope", DOOR} <= reached
