"""Code Python runs as a frame of its own, written in the function's frame.

- ``comprehension as a loop``: ``return [f(k, v) for k, v in pairs]`` (or ``x = [...]``) where
  the break is a generator/iterator one at the comprehension: Python 3.11 runs a comprehension
  as a frame of its own (3.12 inlines it), and where Dynamo starts tracing at that frame (the
  function around it was skipped, or broke before it) the frame is handed an iterator it cannot
  step. The same list built by a ``for`` loop in the function's own frame, its filters as ``if``
  statements, is stepped by the function's trace.

Text only (no torch import); the verifier reruns the patched program.
"""

from __future__ import annotations

import ast

from dynscope._capture.fix.statements import Made, Text, function_of, names_loaded, names_stored, unparsed

__all__ = ["COMPREHENSION", "comprehension_loop"]

COMPREHENSION = "comprehension as a loop"

_SPARE = ("items", "built", "out", "result", "made")  # names tried for the list a return builds


def _listed(stmt: ast.stmt) -> tuple[ast.ListComp, str | None] | None:
    """The comprehension of ``return [...]`` or ``name = [...]``, and the name (None for a return)."""
    if isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.ListComp):
        return stmt.value, None
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.ListComp)):
        return stmt.value, stmt.targets[0].id
    return None


def _as_written(text: Text, node: ast.expr, indent: int) -> list[str] | None:
    """The expression's lines as the file writes them (the first from its column, the others
    with the statement's indentation, ``indent`` columns, taken off); None when a line does
    not start with that indentation."""
    if node.end_lineno is None or node.end_col_offset is None:
        return None
    raw = [ln.encode("utf-8") for ln in text.lines[node.lineno - 1: node.end_lineno]]
    raw[-1] = raw[-1][: node.end_col_offset]
    raw[0] = raw[0][node.col_offset:]
    out = [raw[0].decode("utf-8", "replace")]
    for ln in raw[1:]:
        if ln.strip() and ln[:indent].strip():
            return None
        out.append(ln[indent:].decode("utf-8", "replace"))
    return out


def comprehension_loop(stmt: ast.stmt, text: Text) -> Made | str | None:
    """The list a comprehension makes, built by a loop in the function's own frame."""
    found = _listed(stmt)
    fn = function_of(text.source, stmt)
    if found is None or fn is None:
        return None
    comp, name = found
    if any(g.is_async for g in comp.generators):
        return None
    loop_names = set().union(*(names_stored(g.target) for g in comp.generators))
    # The loop's names become the function's own: none may be one it uses elsewhere.
    elsewhere = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and not any(n is m for m in ast.walk(comp))}
    clash = sorted(loop_names & (elsewhere | {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}))
    if clash:
        return (f"the comprehension stays: its loop's name{'s' if len(clash) > 1 else ''} "
                f"{', '.join(f'`{n}`' for n in clash)} would become the function's own, and the function uses "
                f"{'them' if len(clash) > 1 else 'it'} elsewhere")
    if name is None or name in names_loaded(comp):
        taken = elsewhere | loop_names
        name = next((n for n in _SPARE if n not in taken), None)
        if name is None:
            return None
    lines = [f"{name} = []"]
    depth = 0
    for g in comp.generators:
        lines.append(text.unit * depth + f"for {text.of(g.target)} in {text.of(g.iter)}:")
        depth += 1
        for cond in g.ifs:
            lines.append(text.unit * depth + f"if {text.of(cond)}:")
            depth += 1
    element = _as_written(text, comp.elt, stmt.col_offset)
    if element is None:
        element = [unparsed(comp.elt)]
    lines.append(text.unit * depth + f"{name}.append({element[0]}")
    lines += [text.unit * depth + ln for ln in element[1:]]
    lines[-1] += ")"
    if isinstance(stmt, ast.Return):
        lines.append(f"return {name}")
    elif name != stmt.targets[0].id:  # type: ignore[attr-defined]
        lines.append(f"{stmt.targets[0].id} = {name}")  # type: ignore[attr-defined]
    return Made(lines, COMPREHENSION, (
        "the list is the same built by a loop; the loop's names are the function's own after it (none is used "
        "elsewhere in the function); a comprehension is a frame of its own on Python 3.11 only (3.12 inlines it)"))
