"""A selection counted into a histogram, as every element with the left-out ones out of range.

Segmentation metrics count the pixels where prediction and label agree: ``intersection =
output[output == target]``, then ``torch.histc(intersection.float(), bins=K, min=0, max=K - 1)``
(the intersection-and-union of PSPNet's and many repositories' ``util.py``). The selection's
size is the data's, so Dynamo breaks there. ``torch.histc`` ignores the values outside
``[min, max]``, so every element with the ones the mask leaves out set below ``min`` counts
the same:

- ``every element, the left-out ones out of the histogram's range``: ``name = x[m]`` read only
  as ``torch.histc``'s input (``name``, ``name.float()``) with a constant ``min`` ->
  ``name = torch.where(m, x, min - 1)``.

Text only (no torch import); the verifier reruns the patched program (a dtype that cannot
hold ``min - 1``, an unsigned one, counts otherwise: not verified).
"""

from __future__ import annotations

import ast
from typing import TypeGuard

from dynscope._capture.fix.statements import Made, Text, function_of, name_uses, parsed, unparsed

__all__ = ["OUT_OF_RANGE", "histogram_selection"]

OUT_OF_RANGE = "every element, the left-out ones out of the histogram's range"

_CASTS = {"float", "double", "half", "long", "int"}


def _selection(value: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(``x``, ``m``) of ``x[m]`` where ``m`` is a comparison (a boolean mask of ``x``'s shape,
    as the rewrite assumes: another index makes ``torch.where`` raise, or broadcast)."""
    if not (isinstance(value, ast.Subscript) and isinstance(value.value, (ast.Name, ast.Attribute))):
        return None
    mask = value.slice
    if isinstance(mask, ast.Compare) and len(mask.ops) == 1 or (
            isinstance(mask, ast.UnaryOp) and isinstance(mask.op, ast.Invert)):
        return value.value, mask
    return None


def _histc_min(call: ast.Call) -> int | float | None:
    """The constant ``min`` a ``torch.histc`` call counts from, when it has one and a ``max``
    (``min=0, max=0`` is the data's own range: no value is out of it)."""
    kw = {k.arg: k.value for k in call.keywords}
    low = call.args[2] if len(call.args) > 2 else kw.get("min")
    high = call.args[3] if len(call.args) > 3 else kw.get("max")
    if low is None or high is None:
        return None
    value = low.operand if isinstance(low, ast.UnaryOp) and isinstance(low.op, ast.USub) else low
    if not (isinstance(value, ast.Constant) and isinstance(value.value, (int, float))
            and not isinstance(value.value, bool)):
        return None
    number = float(value.value) if isinstance(value.value, float) else int(value.value)
    number = -number if value is not low else number
    if number == 0 and isinstance(high, ast.Constant) and high.value == 0:
        return None
    return number


def _is_histc(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "histc"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and bool(node.args))


def _input_of(arg: ast.expr, name: str) -> bool:
    """``name`` itself, or cast (``name.float()``)."""
    while isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr in _CASTS \
            and not arg.args and not arg.keywords:
        arg = arg.func.value
    return isinstance(arg, ast.Name) and arg.id == name


def histogram_selection(stmt: ast.stmt, text: Text) -> Made | None:
    """``name = x[m]`` read only as ``torch.histc``'s input (see the module)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    picked = _selection(stmt.value)
    if picked is None:
        return None
    x, mask = picked
    name = stmt.targets[0].id
    fn = function_of(text.source, stmt)
    scope = fn if fn is not None else parsed(text.source)
    end = stmt.end_lineno or stmt.lineno
    reads, stores = name_uses(scope, name)
    histcs = [c for c in ast.walk(scope) if _is_histc(c) and _input_of(c.args[0], name)]
    inside = {id(n) for c in histcs for n in ast.walk(c.args[0])}
    if len(stores) != 1 or not reads or any(id(r) not in inside or r.lineno <= end for r in reads):
        return None  # read otherwise (its length, an index), before, or bound again: it stays a selection
    lows = {_histc_min(c) for c in histcs}
    if len(lows) != 1 or None in lows:
        return None
    low = lows.pop()
    assert low is not None
    out = low - 1
    return Made([f"{name} = torch.where({unparsed(mask)}, {unparsed(x)}, {out!r})"], OUT_OF_RANGE, (
        f"`{name}` is read only by torch.histc, which counts nothing below its min ({low!r}): every element, the "
        f"ones the mask leaves out set to {out!r}, counts the same (the tensor's dtype holds {out!r})"))
