"""Print the figures docs/architecture.md and issue 33's closing note quote, for any checkout.

    python scripts/architecture_metrics.py [ROOT]

ROOT is a checkout (default: this one). Prints: modules and lines of the package; every
function over 80 lines (def to last line, docstring included); the import circles among
modules (imports run at import time, i.e. at module level outside ``if TYPE_CHECKING:``) and,
apart, the circles when function-level imports count too (in checkouts before the model
stopped importing a renderer, its one declared door into ``dynscope._render`` left out); and the modules that spell a PyTorch trace record
kind as a string literal (the places that know a record kind); and the places outside the
registry that test what kind a record is (``kind_tests``).
"""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path

#: PyTorch's trace record kinds dynscope reads (metadata keys and artifact names).
RECORD_KINDS = frozenset({
    "dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics",
    "create_symbol", "optimize_ddp_split_child", "symbolic_shape_specialization", "guard_added_fast",
    "dynamo_graph_break_reason", "recompile_reasons", "aot_forward_graph", "aot_backward_graph",
    "aot_inference_graph", "inductor_output_code", "chromium_event", "inductor_post_grad_graph",
    "inductor_provenance_tracking_node_mappings", "inductor_provenance_tracking_kernel_stack_traces",
    "fx_graph_cache_hit", "fx_graph_cache_miss", "fx_graph_cache_bypass", "aotautograd_cache_hit",
    "aotautograd_cache_miss", "aotautograd_cache_bypass", "inductor_collective_schedule",
    "graph_execution", "inductor_aot_wrapper_code", "inductor_aot_kernel_code", "graph_dump", "artifact",
})
DOOR = "dynscope._render"
LONG = 80


def _module(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", "") == "TYPE_CHECKING" or getattr(test, "attr", "") == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], *, nested: bool, typing: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``body``: at module level (``nested`` False) or at any depth;
    those under ``if TYPE_CHECKING:`` only when ``typing``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif _is_type_checking(node) and not typing:
            found += _imports(node.orelse, nested=nested, typing=typing)  # type: ignore[attr-defined]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not nested:
            continue
        else:
            for name in ("body", "orelse", "finalbody", "handlers"):
                inner = [n for n in getattr(node, name, []) if isinstance(n, ast.AST)]
                found += _imports(inner, nested=nested, typing=typing)  # type: ignore[arg-type]
    return found


def _edges(package: Path, *, nested: bool, typing: bool = False) -> dict[str, set[str]]:
    paths = {_module(p, package): p for p in sorted(package.rglob("*.py"))}
    edges: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        out: set[str] = set()
        for node in _imports(_tree(path).body, nested=nested, typing=typing):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths]
                targets = subs if len(subs) == len(node.names) else [*subs, base]
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                # An edge to one's own parent package says nothing about layering.
                if target and target != name and not name.startswith(target + "."):
                    out.add(target)
        edges[name] = out
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative enough here)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


#: The one module that may test what kind a record is (the registry itself).
REGISTRY_MODULE = "dynscope/_torch/records.py"


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once a run (the figures read each module several ways)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _registry_names(tree: ast.Module) -> set[str]:
    """Names a module imported from the registry module (``from dynscope._torch.records import X``)."""
    return {
        a.asname or a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "dynscope._torch.records"
        for a in node.names
    }


def _names_a_kind(node: ast.expr, imported: set[str]) -> bool:
    """True when ``node`` is a record kind or a set of kinds: ``records.X`` (X upper case), a
    name imported from the registry, or a kind's string."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "records":
        return node.attr.isupper()
    if isinstance(node, ast.Name):
        return node.id in imported and node.id.isupper()
    if isinstance(node, ast.Constant):
        return node.value in RECORD_KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(e, imported) for e in node.elts)
    return False


#: What dynscope calls a trace record in code (``ev.name``, ``raw.kind``): its kind compared
#: with anything is a test of its kind, whatever the other side is called.
_RECORD_VARIABLES = frozenset({"ev", "event", "raw"})


def _record_kind(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr in ("name", "kind")
            and isinstance(node.value, ast.Name) and node.value.id in _RECORD_VARIABLES)


def kind_tests(root: Path) -> list[str]:
    """The places outside the registry that test what kind a record is: every comparison
    (``==``, ``!=``, ``in``, ``not in``) one side of which is a record kind or a set of kinds
    (``ev.name == records.X``, ``name in records.NAME_ONLY``, ``kind in (records.A, records.B)``),
    or a record's own kind (``ev.name in _SOME_KINDS``), as ``path:line``. A lookup in a handler table (``_HANDLERS.get(ev.name)``) is not a test."""
    found = []
    for path in sorted((root / "dynscope").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == REGISTRY_MODULE:
            continue
        tree = _tree(path)
        imported = _registry_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                    _names_a_kind(side, imported) or _record_kind(side) for side in (node.left, *node.comparators)):
                found.append(f"{rel}:{node.lineno}")
    return found


def figures(root: Path) -> dict[str, object]:
    """The figures docs/architecture.md quotes, for the checkout at ``root``."""
    package = root / "dynscope"
    paths = sorted(package.rglob("*.py"))
    trees = {p: _tree(p) for p in paths}
    longest = sorted(
        ((n.end_lineno or n.lineno) - n.lineno + 1, f"{p.relative_to(root)}:{n.name}")
        for p, t in trees.items() for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )[::-1]
    every = _edges(package, nested=True)
    typed = _edges(package, nested=True, typing=True)
    return {
        "modules": len(paths),
        "lines": sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths),
        "over": [(name, n) for n, name in longest if n > LONG],
        "longest": [(name, n) for n, name in longest[:5]],
        "circles": _circles(_edges(package, nested=False)),
        "circles_nested": _circles({m: (t - {DOOR} if m.startswith("dynscope._model") else t) for m, t in every.items()}),
        "circles_typed": _circles({m: (t - {DOOR} if m.startswith("dynscope._model") else t) for m, t in typed.items()}),
        "knowing": sorted(
            f"{p.relative_to(root)} ({', '.join(sorted(kinds))})"
            for p, t in trees.items()
            if (kinds := {n.value for n in ast.walk(t) if isinstance(n, ast.Constant) and n.value in RECORD_KINDS})
        ),
        "kind_tests": kind_tests(root),
    }


def main(root: Path) -> None:
    f = figures(root)
    print(f"modules: {f['modules']}, lines: {f['lines']}")
    over = f["over"]
    print(f"functions over {LONG} lines: {len(over)}" + "".join(f"\n  {name} {n}" for name, n in over))  # type: ignore[attr-defined]
    print("longest five: " + ", ".join(f"{name} {n}" for name, n in f["longest"]))  # type: ignore[attr-defined]
    print(f"module-level import circles: {f['circles']}")
    print(f"circles with function-level imports (an older checkout's model door left out): {f['circles_nested']}")
    print(f"circles counting type-checking imports too (the same): {f['circles_typed']}")
    knowing = f["knowing"]
    print(f"modules that spell a record kind: {len(knowing)}" + "".join(f"\n  {k}" for k in knowing))  # type: ignore[arg-type]
    tests = f["kind_tests"]
    print(f"places that test a record kind: {len(tests)}" + "".join(f"\n  {t}" for t in tests))  # type: ignore[arg-type]


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
