"""A top-k whose ``k`` is a count read from the data, and whose values are only summed.

Hard-negative mining keeps "the hardest negatives, at most ratio times the positives": the
count is read back (``int(mask.sum())``), and ``torch.topk`` needs it as a number, so the
graph breaks at the read, and again at ``topk`` once the count is kept a tensor. Where every
later read of the top-k values is a whole sum (``negative_loss.sum()``), the same sum comes
from the whole descending sort with the entries from the k-th on zeroed: no size depends on
the data, and ``k`` stays a tensor. The indices must be unused. Text only (no torch import).
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    contains,
    function_of,
    names_loaded,
    names_stored,
    parsed,
    read_later,
    unparsed,
)

__all__ = ["TOPK_PREFIX", "counted_topk", "summed_topk"]

TOPK_PREFIX = "top-k by a count as a zeroed sort"

# Reads of a size, not of the data: int(x.size(0) * r) stays a number.
_SIZES = {"size", "numel", "dim", "shape", "ndim", "__len__"}


def _topk_call(value: ast.expr) -> tuple[ast.Call, bool] | None:
    """The ``topk`` call an assignment's value is, and whether the value is its values alone
    (``topk(...)[0]``, ``.values``) rather than the (values, indices) pair."""
    alone = False
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant) and value.slice.value == 0:
        value, alone = value.value, True
    elif isinstance(value, ast.Attribute) and value.attr == "values":
        value, alone = value.value, True
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "topk"):
        return None
    return value, alone


def _parts(call: ast.Call) -> tuple[ast.expr, ast.expr, bool] | None:
    """(the tensor, k, largest) of ``torch.topk(x, k)`` or ``x.topk(k)`` along the last dim;
    None for another dim, or an argument this rewrite does not read."""
    f = call.func
    assert isinstance(f, ast.Attribute)
    function = isinstance(f.value, ast.Name) and f.value.id == "torch"
    args = list(call.args)
    x = args.pop(0) if function and args else f.value if not function else None
    k = args.pop(0) if args else next((kw.value for kw in call.keywords if kw.arg == "k"), None)
    if x is None or k is None or args:
        return None
    largest = True
    for kw in call.keywords:
        if kw.arg == "k" or kw.arg == "sorted":
            continue
        if kw.arg == "dim" and isinstance(kw.value, ast.UnaryOp) and isinstance(kw.value.op, ast.USub) \
                and isinstance(kw.value.operand, ast.Constant) and kw.value.operand.value == 1:
            continue
        if kw.arg == "largest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, bool):
            largest = kw.value.value
            continue
        return None
    if isinstance(k, ast.Constant):
        return None  # a literal k reads nothing from the data
    return x, k, largest


def _values_and_indices(stmt: ast.stmt) -> tuple[ast.Call, str, str] | None:
    """(the topk call, the name of its values, the name of its indices or "") of ``v, i =
    topk(...)``, ``v = topk(...)[0]`` or ``v = topk(...).values``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    found = _topk_call(stmt.value)
    if found is None:
        return None
    call, alone = found
    target = stmt.targets[0]
    if alone and isinstance(target, ast.Name):
        return call, target.id, ""
    if (not alone and isinstance(target, ast.Tuple) and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)):
        v, i = (e.id for e in target.elts if isinstance(e, ast.Name))
        return call, v, i
    return None


def _whole_sum(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether a read of a name is summed whole: ``v.sum()`` or ``torch.sum(v)``."""
    up = parents.get(id(node))
    if isinstance(up, ast.Attribute) and up.attr == "sum":
        call = parents.get(id(up))
        return isinstance(call, ast.Call) and call.func is up and not call.args and not call.keywords
    return (isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute) and up.func.attr == "sum"
            and isinstance(up.func.value, ast.Name) and up.func.value.id == "torch" and up.args == [node]
            and not up.keywords)


def _only_summed(source: str, stmt: ast.stmt, name: str) -> bool:
    """Whether every read of ``name`` after ``stmt`` in its function (in a loop around it: any
    read in the loop) is a whole sum, and there is at least one."""
    fn = function_of(source, stmt)
    scope: ast.AST = fn if fn is not None else parsed(source)
    loops = [n for n in ast.walk(scope) if isinstance(n, (ast.For, ast.While)) and contains(n, stmt)]
    parents = {id(child): node for node in ast.walk(scope) for child in ast.iter_child_nodes(node)}
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
             and not contains(stmt, n)
             and (n.lineno > (stmt.end_lineno or stmt.lineno) or any(contains(loop, n) for loop in loops))]
    return bool(reads) and all(_whole_sum(n, parents) for n in reads)


def summed_topk(source: str, call: ast.Call) -> bool:
    """Whether ``call`` (a ``topk`` of the file) is one :func:`counted_topk` rewrites: its
    values only summed, its indices unused, along the last dim. Its ``k`` is then no size."""
    for node in ast.walk(parsed(source)):
        if isinstance(node, ast.Assign) and contains(node.value, call):
            return _rewritable(source, node) is not None
    return False


def _rewritable(source: str, stmt: ast.stmt) -> tuple[ast.expr, ast.expr, bool, str] | None:
    found = _values_and_indices(stmt)
    if found is None:
        return None
    call, v, i = found
    parts = _parts(call)
    if parts is None or (i and i != "_" and read_later(source, stmt, i)) or not _only_summed(source, stmt, v):
        return None
    if v in names_loaded(parts[1]):
        return None  # the count reads the values' name: the mask's line would read the sorted values
    return (*parts, v)


class _Counted(ast.NodeTransformer):
    """A count's expression as a 0-dim tensor: ``int(e)``/``float(e)`` of data as ``e`` detached
    and cast (``torch.as_tensor(e)`` where ``e`` may be a Python number), ``e.item()`` as
    ``e.detach()``, builtin ``min``/``max`` of two as ``torch.minimum``/``torch.maximum`` (either
    side may be a Python number)."""

    def __init__(self) -> None:
        self.made: set[int] = set()
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args and not node.keywords:
            return self._made(_method(f.value, "detach"))
        if not isinstance(f, ast.Name) or node.keywords:
            return node
        if f.id in ("int", "float") and len(node.args) == 1 and not _reads_size(node.args[0]):
            arg = node.args[0]
            tensor = arg if id(arg) in self.made or _tensor_method(arg) else _as_tensor(arg)
            return self._made(_method(_method(tensor, "detach"), "long" if f.id == "int" else "float"))
        if f.id in ("min", "max") and len(node.args) == 2:
            torch_fn = ast.Attribute(value=ast.Name(id="torch", ctx=ast.Load()),
                                     attr="minimum" if f.id == "min" else "maximum", ctx=ast.Load())
            args = [a if id(a) in self.made else _as_tensor(a) for a in node.args]
            return self._made(ast.Call(func=torch_fn, args=args, keywords=[]))
        return node

    def _made(self, node: ast.expr) -> ast.expr:
        self.made.add(id(node))
        self.changed = True
        return node


def _tensor_method(node: ast.expr) -> bool:
    """``x.sum()``, ``mask.float().sum()``: a tensor's method, not a size, nor a Python call."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr not in _SIZES
            and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("math", "np", "numpy")))


def _reads_size(node: ast.expr) -> bool:
    """An expression of sizes only (``x.size(0) * r``, ``len(xs)``): no tensor read back."""
    sized = any(isinstance(n, ast.Attribute) and n.attr in _SIZES or
                isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" for n in ast.walk(node))
    data = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr not in _SIZES
               for n in ast.walk(node))
    return sized and not data


def _method(value: ast.expr, name: str) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=value, attr=name, ctx=ast.Load()), args=[], keywords=[])


def _as_tensor(value: ast.expr) -> ast.Call:
    torch_fn = ast.Attribute(value=ast.Name(id="torch", ctx=ast.Load()), attr="as_tensor", ctx=ast.Load())
    return ast.Call(func=torch_fn, args=[value], keywords=[])


def counted_topk(stmt: ast.stmt, text: Text) -> Made | None:
    """``v, _ = torch.topk(x, <count read from the data>)`` whose ``v`` is only summed later:
    the descending sort of ``x`` with every entry from the count on zeroed (see the module).
    At the statement that reads the count (``n = min(int(a.sum()), int(p * r))``) when the next
    statement to read it is such a topk of the same block: both, the count kept a tensor."""
    found = _rewritable(text.source, stmt)
    if found is not None:
        return Made(_sorted_prefix(found, text, copy.deepcopy(found[1])), TOPK_PREFIX, _note(found))
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    block, at = block_of(text.source, stmt)
    reader = next((s for s in block[at + 1:] if name in names_loaded(s) or name in names_stored(s)), None)
    topk_found = _rewritable(text.source, reader) if reader is not None else None
    if reader is None or topk_found is None or name not in names_loaded(topk_found[1]):
        return None
    counted = _Counted()
    value = counted.visit(copy.deepcopy(stmt.value))
    if not counted.changed:
        return None
    between = text.lines_between(stmt.end_lineno or stmt.lineno, reader.lineno, stmt.col_offset)
    return Made([f"{name} = {unparsed(value)}", *between, *_sorted_prefix(topk_found, text, topk_found[1])],
                 TOPK_PREFIX, f"`{name}` stays a 0-dim tensor; {_note(topk_found)}", last=reader)


def _sorted_prefix(found: tuple[ast.expr, ast.expr, bool, str], text: Text, k: ast.expr) -> list[str]:
    x, _, largest, v = found
    count = unparsed(_Counted().visit(k))
    return [
        f"{v} = torch.sort({text.of(x)}, dim=-1, descending={largest}).values",
        f"{v} = torch.where(torch.arange({v}.shape[-1], device={v}.device) < {count}, {v}, torch.zeros_like({v}))",
    ]


def _note(found: tuple[ast.expr, ast.expr, bool, str]) -> str:
    _, _, largest, v = found
    return (f"every later read of `{v}` is a whole sum: the {'largest' if largest else 'smallest'} k values sum the "
            "same as the sorted values with those from the k-th on zeroed, and k stays a tensor (ties give the same "
            "values; the gradient of a tie may go to another of the tied entries)")
