"""Print the figures docs/architecture.md and issue 33's closing note quote, for any checkout.

    python scripts/architecture_metrics.py [ROOT]

ROOT is a checkout (default: this one). Prints: modules and lines of the package; every
function over 80 lines (def to last line, docstring included); the import circles among
modules (imports run at import time, i.e. at module level outside ``if TYPE_CHECKING:``) and,
apart, the circles when function-level imports count too, leaving out the model's one
declared door into ``dynscope._render``; and the modules that spell a PyTorch trace record
kind as a string literal (the places that know a record kind).
"""

from __future__ import annotations

import ast
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
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, nested=nested, typing=typing):
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


def main(root: Path) -> None:
    package = root / "dynscope"
    paths = sorted(package.rglob("*.py"))
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in paths}
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)
    print(f"modules: {len(paths)}, lines: {lines}")
    longest = sorted(
        ((n.end_lineno or n.lineno) - n.lineno + 1, f"{p.relative_to(root)}:{n.name}")
        for p, t in trees.items() for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    )[::-1]
    over = [f"{name} {n}" for n, name in longest if n > LONG]
    print(f"functions over {LONG} lines: {len(over)}" + "".join(f"\n  {o}" for o in over))
    print("longest five: " + ", ".join(f"{name} {n}" for n, name in longest[:5]))
    print(f"module-level import circles: {_circles(_edges(package, nested=False))}")
    every = _edges(package, nested=True)
    without_door = {m: (t - {DOOR} if m.startswith("dynscope._model") else t) for m, t in every.items()}
    print(f"circles with function-level imports, the model's door left out: {_circles(without_door)}")
    typed = _edges(package, nested=True, typing=True)
    typed = {m: (t - {DOOR} if m.startswith("dynscope._model") else t) for m, t in typed.items()}
    print(f"circles counting type-checking imports too, the door left out: {_circles(typed)}")
    knowing = sorted(
        f"{p.relative_to(root)} ({', '.join(sorted(kinds))})"
        for p, t in trees.items()
        if (kinds := {n.value for n in ast.walk(t) if isinstance(n, ast.Constant) and n.value in RECORD_KINDS})
    )
    print(f"modules that spell a record kind: {len(knowing)}" + "".join(f"\n  {k}" for k in knowing))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
