"""torch over Python sizes, computed in Python.

Some programs build a tensor from sizes they already hold as Python ints, compute on it with
torch, and read the result back: under ``torch.compile`` the read (``.tolist()``) or the op
whose output size is the data's (``torch.unique_consecutive``) breaks the graph, though
nothing in it depends on a tensor's values. Python computes the same numbers, which Dynamo
folds into constants:

- ``range instead of torch.arange over sizes``: ``torch.arange(2, len(x.shape)).tolist()`` (a
  loss's reduced axes) as ``list(range(2, len(x.shape)))``;
- ``run ends of equal sizes in Python``: ``torch.cumsum(torch.unique_consecutive(torch.tensor(
  [inp.shape[-1] for inp in crops]), return_counts=True)[1], 0)`` (a multi-crop wrapper
  grouping its crops by resolution) as the list of the ends of the runs of equal sizes;
- ``elements of the sequence, not of an array``: ``idx = np.array(columns[name])`` read only as
  ``idx[0]``, ``idx[1]`` (slice bounds: a feature's column range in a CTR model's input) as
  ``idx = columns[name]``: Dynamo traces numpy arrays as tensors, so the elements came back as
  tensors and a slice at them read them back; the sequence's own elements are Python ints.

Text only (no torch import); the verifier reruns the patched program (a tensor among the
values makes ``range`` read it back, and the patch is not verified).
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    function_of,
    name_uses,
    names_stored,
    parsed,
    transformed_statement,
    unparsed,
)

__all__ = ["ELEMENTS", "RANGE", "RUN_ENDS", "arange_listed", "array_elements", "run_ends"]

RANGE = "range instead of torch.arange over sizes"
RUN_ENDS = "run ends of equal sizes in Python"
ELEMENTS = "elements of the sequence, not of an array"

_SIZE_CALLS = {"len", "int", "max", "min", "abs"}
_SIZE_METHODS = {"size", "dim", "numel"}


def _sized(node: ast.expr) -> bool:
    """An expression of Python numbers and sizes: constants, names, ``len(...)``, ``x.shape[i]``,
    ``x.ndim``, ``x.size(i)``, ``x.dim()`` and arithmetic of them (no tensor op)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if not (isinstance(f, ast.Name) and f.id in _SIZE_CALLS
                    or isinstance(f, ast.Attribute) and f.attr in _SIZE_METHODS) or n.keywords:
                return False
        elif isinstance(n, (ast.Lambda, ast.Await, ast.Yield, ast.ListComp, ast.GeneratorExp, ast.Dict)):
            return False
    return True


def _torch_call(node: ast.AST, name: str) -> ast.Call | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
        return node
    return None


class _Ranged(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "tolist" and not node.args and not node.keywords):
            return node
        arange = _torch_call(f.value, "arange")
        if arange is None or arange.keywords or not 1 <= len(arange.args) <= 3 or not all(map(_sized, arange.args)):
            return node
        self.changed = True
        ranged = ast.Call(func=ast.Name(id="range", ctx=ast.Load()), args=arange.args, keywords=[])
        return ast.Call(func=ast.Name(id="list", ctx=ast.Load()), args=[ranged], keywords=[])


def arange_listed(stmt: ast.stmt, text: Text) -> Made | None:
    """``torch.arange(<sizes>).tolist()`` as ``list(range(<sizes>))`` (see the module)."""
    return transformed_statement(stmt, _Ranged(), RANGE, (
        "the arguments are Python ints (a tensor there is read back by range: not verified); the list holds ints, as "
        "tolist() of an integer arange does"))


def _counts_of(node: ast.expr) -> ast.expr | None:
    """The list ``L`` of ``torch.unique_consecutive(torch.tensor(L), return_counts=True)[1]``."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == 1):
        return None
    unique = _torch_call(node.value, "unique_consecutive")
    if unique is None or len(unique.args) != 1 or [(k.arg, getattr(k.value, "value", None)) for k in unique.keywords] != [
            ("return_counts", True)]:
        return None
    made = _torch_call(unique.args[0], "tensor")
    if made is None or len(made.args) != 1 or made.keywords:
        return None
    listed = made.args[0]
    if isinstance(listed, ast.ListComp) and _sized(listed.elt) or isinstance(listed, ast.List) and all(
            map(_sized, listed.elts)):
        return listed
    return None


def run_ends(stmt: ast.stmt, text: Text) -> Made | None:
    """``ends = torch.cumsum(torch.unique_consecutive(torch.tensor(L), return_counts=True)[1], 0)``
    of Python sizes ``L`` as the list of the ends of its runs of equal values (see the module)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    cumsum = _torch_call(stmt.value, "cumsum")
    if cumsum is None or not cumsum.args:
        return None
    dim = cumsum.args[1] if len(cumsum.args) == 2 else next((k.value for k in cumsum.keywords if k.arg == "dim"), None)
    if not (isinstance(dim, ast.Constant) and dim.value == 0) or len(cumsum.args) > 2:
        return None
    listed = _counts_of(cumsum.args[0])
    if listed is None:
        return None
    fn = function_of(text.source, stmt)
    taken = {n.id for n in ast.walk(fn if fn is not None else parsed(text.source)) if isinstance(n, ast.Name)}
    sizes = "_sizes"
    while sizes in taken:
        sizes = "_" + sizes
    end = stmt.targets[0].id
    return Made([
        f"{sizes} = {unparsed(copy.deepcopy(listed))}",
        f"{end} = [i + 1 for i in range(len({sizes})) if i + 1 == len({sizes}) or {sizes}[i + 1] != {sizes}[i]]",
    ], RUN_ENDS, (
        f"`{end}` is read as Python ints (a loop over it, slice ends), not as a tensor: it is now a list of the ends "
        "of the runs of equal values, the cumulative counts unique_consecutive gives"))


def _element_read(node: ast.AST) -> str | None:
    """The name ``n`` of ``n[<int>]`` (``n[-1]`` too) read, else None."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load)):
        return None
    at = node.slice.operand if isinstance(node.slice, ast.UnaryOp) and isinstance(node.slice.op, ast.USub) else node.slice
    return node.value.id if isinstance(at, ast.Constant) and type(at.value) is int else None


def _arrayed(stmt: ast.stmt, name: str) -> ast.expr | None:
    """``S`` of ``name = np.array(S)`` (``np.asarray``, ``numpy.array``; no dtype), else None."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == name and isinstance(stmt.value, ast.Call)):
        return None
    f, call = stmt.value.func, stmt.value
    if not (isinstance(f, ast.Attribute) and f.attr in ("array", "asarray") and isinstance(f.value, ast.Name)
            and f.value.id in ("np", "numpy") and len(call.args) == 1 and not call.keywords):
        return None
    return call.args[0]


def array_elements(stmt: ast.stmt, text: Text) -> Made | None:
    """``idx = np.array(S)`` earlier in the block, read only element by element (``idx[0]``,
    ``idx[-1]``), and the statement reading an element: ``idx = S``, the statements between
    kept (see the module)."""
    reads = {n for n in (_element_read(x) for x in ast.walk(stmt)) if n}
    if not reads:
        return None
    block, at = block_of(text.source, stmt)
    fn = function_of(text.source, stmt)
    scope = fn if fn is not None else parsed(text.source)
    for name in sorted(reads):
        bound = next((s for s in reversed(block[:at]) if name in names_stored(s)), None)
        held = _arrayed(bound, name) if bound is not None else None
        if held is None or bound is None:
            continue
        element_reads = {id(x.value) for x in ast.walk(scope) if isinstance(x, ast.Subscript) and _element_read(x) == name}
        loads, stores = name_uses(scope, name)
        if len(stores) != 1 or any(id(x) not in element_reads for x in loads):
            continue  # bound again, or read as an array (a method, arithmetic, passed on): it stays one
        between = text.lines_between(bound.end_lineno or bound.lineno, stmt.lineno, bound.col_offset)
        return Made([f"{name} = {text.of(held)}", *between, *text.statement_lines(stmt)], ELEMENTS, (
            f"`{name}` is read only element by element, and the sequence numpy made it from holds numbers (a list or "
            "a tuple): its own elements are the same numbers, as Python's, where the array's were numpy's (traced as "
            "tensors)"), first=bound, last=stmt)
    return None
