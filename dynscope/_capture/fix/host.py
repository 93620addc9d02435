"""Rewrites for host round trips and data-dependent selections, by what the code does.

A value that leaves the graph (a numpy array, a Python list or number) or a selection whose
size depends on the data (``x[mask]``, ``nonzero``) breaks the graph. Each maker here sees the
break site's statement and the statements around it, and when the run of them is a shape it
knows, writes the same computation in tensor ops of static shape:

- ``torch ops instead of numpy``: ``a = x.detach().cpu().numpy()`` ... ``np.*`` ... back to
  torch (``torch.from_numpy``, ``float(...)``) as torch ops on the detached tensor.
- ``masked segment reduction``: ``lengths = t.tolist()`` and a pooling over ragged
  segments (``torch.stack([h[i, :n].mean(0) ...])``, ``torch.split(flat, lengths)``) as a
  masked or indexed reduction over all of them at once.
- ``masked reduction instead of select``: ``sel = x[mask]`` then ``sel.sum()``, ``.mean()``,
  ``.max()``, ``.numel()``... as reductions of ``torch.where(mask, x, fill)``.
- ``mask instead of nonzero``: ``keep = (scores > t).nonzero().squeeze(1)`` then
  ``boxes[keep]`` reduced, as the mask; a filtered tensor that is returned is refused, with
  the reason (its size is the data's).
- ``dense expert routing``: a loop over experts that gathers its tokens with ``torch.where``
  and scatters back (``out[idx] += ...``, ``index_add_``) as every expert on every token,
  weighted by its routing weight (zero where not routed).
- ``torch math instead of math``: ``math.sqrt(t.item())`` and the like as ``torch.sqrt(t)``;
  ``float() kept a tensor``: ``v = float(t)`` into Python arithmetic as ``v = t.detach()``.

Text only (no torch import); nothing here decides whether a rewrite is right: the verifier
reruns the patched program.
"""

from __future__ import annotations

import ast
import copy
from typing import TYPE_CHECKING

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    function_of,
    names_loaded,
    names_stored,
    paren,
    parsed,
    read_later,
    rows_set,
    substituted,
    unparsed,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["COUNT_GUARD", "COUNT_KEPT", "DENSE", "ENDS", "FLOAT", "MASK_WORDS", "MATH", "NONZERO", "NUMPY", "PADDED", "PER_ROW", "SCATTER", "SEGMENT", "SELECT", "UNSORTED", "FILL", "Reduced", "Selection", "count_guard", "count_kept",
           "dense_experts", "distinct_spread", "masked_select", "math_to_torch", "nonzero_end", "numpy_to_torch", "padded_targets", "paren", "scattered_rows", "segment_reduction", "sorted_mask_back"]

NUMPY = "torch ops instead of numpy"
SEGMENT = "masked segment reduction"
SELECT = "masked reduction instead of select"
NONZERO = "mask instead of nonzero"
SCATTER = "every row computed, the indexed ones kept"
DENSE = "dense expert routing"
MATH = "torch math instead of math"
FLOAT = "float() kept a tensor"
COUNT_KEPT = "count kept a tensor"

_Maker = Made | str | None


# -- shared: the statements after a site ------------------------------------------------------


def _expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def _call(node: ast.AST, owner: str | None = None) -> str:
    """The name a call calls (``np.clip`` -> "clip" when ``owner`` is "np"); "" otherwise."""
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    if owner is None:
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == owner:
        return f.attr
    return ""


def _method(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(receiver, name) of a method call ``recv.name(...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.value, node.func.attr
    return None



def _target(stmt: ast.stmt) -> str | None:
    """The one plain name an assignment binds."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def _read_outside(source: str, stmt: ast.stmt, run: list[ast.stmt], name: str) -> bool:
    """Whether ``name`` is read in the site's function outside the replaced run where the run's
    value would reach it: after the run, or anywhere when a loop around the site runs it again."""
    scope: ast.AST = function_of(source, stmt) or parsed(source)
    inside = {id(n) for s in run for n in ast.walk(s)}
    end = max(s.end_lineno or s.lineno for s in run)
    looped = any(isinstance(n, (ast.For, ast.While)) and n is not stmt and any(c is stmt for c in ast.walk(n))
                 for n in ast.walk(scope))
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in inside
               and (looped or n.lineno > end) for n in ast.walk(scope))


def _reads(stmt: ast.stmt) -> set[str]:
    """The names a statement reads, an augmented assignment's target too (``a += 1`` reads ``a``)."""
    own = {stmt.target.id} if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) else set()
    return names_loaded(stmt) | own


def _simple(stmt: ast.stmt) -> bool:
    """A statement the rewrites may transform whole: no block of its own."""
    return isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr))


def _lines(text: Text, stmt: ast.stmt, new: ast.stmt | None) -> list[str]:
    """A statement of a replaced run: as written when unchanged (comments kept), else unparsed."""
    if new is None or ast.dump(new) == ast.dump(stmt):
        return text.statement_lines(stmt)
    return unparsed(new).split("\n")


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_zero(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0 and not isinstance(node.value, bool)


def _dim0(call: ast.Call) -> bool:
    """A reduction over dim 0 (``.sum(0)``, ``.sum(dim=0)``)."""
    return (len(call.args) == 1 and _is_zero(call.args[0]) and not call.keywords) or (
        not call.args and len(call.keywords) == 1 and call.keywords[0].arg == "dim" and _is_zero(call.keywords[0].value))


# -- 1. numpy round trip -------------------------------------------------------------------------


# np.<name> -> torch.<name>, and how its arguments are renamed.
_NP_FUNCS = {
    "clip": "clamp", "exp": "exp", "log": "log", "sqrt": "sqrt", "abs": "abs", "absolute": "abs", "tanh": "tanh",
    "square": "square", "log1p": "log1p", "expm1": "expm1", "sign": "sign", "floor": "floor", "ceil": "ceil",
    "sin": "sin", "cos": "cos", "exp2": "exp2", "log2": "log2", "log10": "log10", "maximum": "maximum",
    "minimum": "minimum", "where": "where", "mean": "mean", "sum": "sum", "max": "amax", "min": "amin",
    "amax": "amax", "amin": "amin", "std": "std", "var": "var", "argsort": "argsort", "argmax": "argmax",
    "argmin": "argmin", "cumsum": "cumsum", "nanmean": "nanmean", "nansum": "nansum", "round": "round",
    "quantile": "quantile", "percentile": "quantile", "median": "median", "isnan": "isnan",
    "isfinite": "isfinite", "logical_and": "logical_and", "logical_or": "logical_or", "matmul": "matmul",
    "trapz": "trapezoid", "digitize": "bucketize", "asarray": "", "array": "", "sort": "sort",
    "take_along_axis": "take_along_dim",
}
_NP_METHODS = {"mean": "mean", "sum": "sum", "max": "amax", "min": "amin", "std": "std", "var": "var",
               "clip": "clamp", "argmax": "argmax", "argmin": "argmin", "argsort": "argsort", "cumsum": "cumsum",
               "copy": "clone", "reshape": "reshape", "flatten": "flatten", "round": "round", "astype": "to",
               "item": "", "squeeze": "squeeze"}
_NP_KW = {"axis": "dim", "keepdims": "keepdim", "ddof": "correction", "a_min": "min", "a_max": "max",
          "decimals": "decimals"}
_NP_DTYPES = {"float16", "float32", "float64", "int32", "int64", "int8", "uint8", "bool_", "int16"}
_BACK = {"from_numpy", "tensor", "as_tensor"}


class _FromNumpy(ast.NodeTransformer):
    """numpy calls on the arrays of a round trip as torch calls on the tensors they come from."""

    def __init__(self, arrays: set[str]) -> None:
        self.arrays = arrays  # the names that hold arrays of the round trip
        self.refused = ""

    def _array(self, node: ast.AST) -> bool:
        """Whether an expression (of the original text) is a numpy array of the round trip."""
        if isinstance(node, ast.Name):
            return node.id in self.arrays
        if _numpy_source(node) is not None or _call(node, "np"):
            return True
        if isinstance(node, ast.Call):
            m = _method(node)
            return m is not None and m[1] not in ("item", "tolist") and self._array(m[0])
        if isinstance(node, ast.BinOp):
            return self._array(node.left) or self._array(node.right)
        if isinstance(node, ast.UnaryOp):
            return self._array(node.operand)
        if isinstance(node, ast.Subscript):
            return self._array(node.value)
        if isinstance(node, ast.Attribute):
            return node.attr == "T" and self._array(node.value)
        return False

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and self._array(node.value):
            # a[::-1] (np.argsort(a)[::-1]: descending): torch has no negative step, a flip says the same
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            flips = [i for i, p in enumerate(parts) if _whole(p, step="-1")]
            whole = all(_whole(p) or i in flips for i, p in enumerate(parts))
            if flips and whole:
                return ast.Call(func=ast.Attribute(value=self.visit(node.value), attr="flip"),
                                args=[ast.Constant(i) for i in flips], keywords=[])
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if node.attr == "size" and isinstance(node.ctx, ast.Load) and self._array(node.value):
            # numpy's a.size is the element count (a method call's .size never reaches here)
            return ast.Call(func=ast.Attribute(value=self.visit(node.value), attr="numel"), args=[], keywords=[])
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.value, ast.Name) and node.value.id == "np" and node.attr in _NP_DTYPES:
            return ast.Attribute(value=ast.Name("torch"), attr=node.attr.rstrip("_"))
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        root = node.func
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id == "np" and not _call(node, "np"):
            if unparsed(node.func) == "np.linalg.norm" and not any(k.arg == "ord" for k in node.keywords) \
                    and len(node.args) == 1:
                # ord None: the 2-norm of the flattened array (Frobenius for a matrix), or of each row along axis
                kw = self._kwargs(node)
                if kw is not None:
                    return _torch("linalg.vector_norm", [self.visit(node.args[0])], kw)
            self.refused = self.refused or f"{unparsed(node.func)} has no torch counterpart fix knows"
            return node
        src = _numpy_source(node)
        if src is not None:  # x.detach().cpu().numpy() -> x.detach().cpu(): the tensor it copies
            return self.visit(src)
        # What the arguments were (arrays or not) before they are rewritten.
        first_is_array = bool(node.args) and self._array(node.args[0])
        m = _method(node)
        on_array = m is not None and self._array(m[0])
        node.args = [self.visit(a) for a in node.args]
        for k in node.keywords:
            k.value = self.visit(k.value)
        name = _call(node, "np")
        if name:
            return self._np(node, name)
        if _call(node, "torch") in _BACK and first_is_array:
            # Back to torch: the value already is a tensor (dtype/device kept as asked).
            kw = [k for k in node.keywords if k.arg in ("dtype", "device")]
            return ast.Call(func=ast.Attribute(value=node.args[0], attr="to"), args=[], keywords=kw) if kw else node.args[0]
        if isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1 and first_is_array:
            return node.args[0]  # a 0-dim tensor stands for the Python float
        if isinstance(node.func, ast.Name) and node.func.id in ("int", "bool") and first_is_array:
            self.refused = f"{node.func.id}() of an array: a Python {node.func.id} (an index, a count), no tensor"
            return node
        if m is not None and on_array:
            return self._array_method(node, self.visit(m[0]), m[1])
        node.func = self.visit(node.func)
        return node

    def _kwargs(self, node: ast.Call) -> list[ast.keyword] | None:
        out = []
        for k in node.keywords:
            if k.arg not in _NP_KW:
                self.refused = f"numpy's {k.arg}= has no torch spelling here"
                return None
            out.append(ast.keyword(arg=_NP_KW[k.arg], value=k.value))
        return out

    def _np(self, node: ast.Call, name: str) -> ast.expr:
        if name not in _NP_FUNCS:
            self.refused = f"np.{name} has no torch counterpart fix knows"
            return node
        kw = self._kwargs(node)
        if kw is None:
            return node
        args = list(node.args)
        if name in ("asarray", "array"):
            if len(args) == 1 and self._array(args[0]) and not kw:
                return args[0]
            self.refused = f"np.{name} of Python values (numpy makes float64 of Python floats)"
            return node
        torch_name = _NP_FUNCS[name]
        if name in ("maximum", "minimum") and len(args) == 2:
            # torch.maximum takes two tensors; against a number it is a clamp.
            number = [isinstance(a, ast.Constant) or (isinstance(a, ast.UnaryOp) and isinstance(a.operand, ast.Constant))
                      for a in args]
            if number[0] != number[1]:
                arr, other = (args[1], args[0]) if number[0] else (args[0], args[1])
                bound = "min" if name == "maximum" else "max"
                return _torch("clamp", [arr], [ast.keyword(arg=bound, value=other)])
        if name in ("std", "var") and not any(k.arg == "correction" for k in kw):
            kw.append(ast.keyword(arg="correction", value=ast.Constant(0)))  # numpy's ddof=0
        if name == "percentile" and len(args) >= 2:
            args[1] = ast.BinOp(left=args[1], op=ast.Div(), right=ast.Constant(100))
        if name == "digitize" and len(args) >= 2 and isinstance(args[1], (ast.List, ast.Tuple)):
            args[1] = _torch("tensor", [args[1]], [ast.keyword(arg="dtype", value=ast.Attribute(
                value=args[0], attr="dtype"))])
        if name == "digitize":  # np.digitize(x, bins) counts bins[i-1] <= x < bins[i]: bucketize's right=True
            if len(args) != 2 or kw:
                self.refused = "np.digitize with right= (bucketize's sides differ)"
                return node
            kw = [ast.keyword(arg="right", value=ast.Constant(True))]
        if name == "sort":  # torch.sort returns (values, indices); numpy's default axis is the last, as torch's
            if len(args) == 2:
                kw.append(ast.keyword(arg="dim", value=args.pop()))
            return ast.Attribute(value=_torch("sort", args, kw), attr="values")
        if name == "take_along_axis" and len(args) == 3:
            kw.append(ast.keyword(arg="dim", value=args.pop()))
        if name == "median":
            kw_dim = [k for k in kw if k.arg == "dim"]
            call = _torch("median", args, kw)
            # torch.median with a dim returns (values, indices); without one, a tensor.
            return ast.Attribute(value=call, attr="values") if kw_dim else call
        if name == "cumsum" and not any(k.arg == "dim" for k in kw) and len(args) == 1:
            return _torch("cumsum", [ast.Call(func=ast.Attribute(value=args[0], attr="flatten"), args=[],
                                              keywords=[])], [ast.keyword(arg="dim", value=ast.Constant(0))])
        if name == "clip" and len(args) == 3 and isinstance(args[1], ast.Constant) and args[1].value is None:
            return _torch("clamp", [args[0]], [ast.keyword(arg="max", value=args[2])])
        if name == "round" and len(args) == 2:
            kw.append(ast.keyword(arg="decimals", value=args.pop()))
        if name in ("mean", "sum", "max", "min", "amax", "amin", "std", "var", "argmax", "argmin", "argsort",
                    "cumsum", "nanmean", "nansum", "median") and len(args) == 2:
            kw.append(ast.keyword(arg="dim", value=args.pop()))  # np.sum(a, 0): the axis, positionally
        return _torch(torch_name, args, kw)

    def _array_method(self, node: ast.Call, recv: ast.expr, meth: str) -> ast.expr:
        if meth not in _NP_METHODS:
            self.refused = f"the array method .{meth}() has no torch counterpart fix knows"
            return node
        kw = self._kwargs(node)
        if kw is None:
            return node
        if meth == "item":  # the 0-dim tensor stands for the number (it is detached: no gradient)
            return recv
        args = list(node.args)
        if meth in ("std", "var") and not any(k.arg == "correction" for k in kw):
            kw.append(ast.keyword(arg="correction", value=ast.Constant(0)))
        if meth in ("mean", "sum", "max", "min", "std", "var", "argmax", "argmin", "cumsum") and len(args) == 1:
            kw.append(ast.keyword(arg="dim", value=args.pop()))
        if meth == "reshape" and len(args) == 1 and isinstance(args[0], ast.Tuple):
            args = list(args[0].elts)
        return ast.Call(func=ast.Attribute(value=recv, attr=_NP_METHODS[meth]), args=args, keywords=kw)


def _whole(node: ast.AST, step: str = "") -> bool:
    """``:`` (``::-1`` with ``step="-1"``): a whole dimension, in order or reversed."""
    if not isinstance(node, ast.Slice) or node.lower is not None or node.upper is not None:
        return False
    return node.step is None if not step else node.step is not None and unparsed(node.step) == step


def _is_array_name(node: ast.AST, arrays: set[str]) -> bool:
    return isinstance(node, ast.Name) and node.id in arrays


def _torch(name: str, args: list[ast.expr], kw: list[ast.keyword]) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr=name), args=args, keywords=kw)


def _numpy_source(node: ast.AST) -> ast.expr | None:
    """The tensor of ``t.numpy()`` (``t.detach().cpu()``), None for anything else."""
    m = _method(node)
    if m is not None and m[1] == "numpy" and isinstance(node, ast.Call) and not node.args:
        force = _keyword(node, "force")
        recv = m[0]
        if force is not None:  # numpy(force=True) detaches and copies to the CPU itself
            recv = ast.Call(func=ast.Attribute(value=ast.Call(func=ast.Attribute(value=recv, attr="detach"), args=[],
                                                              keywords=[]), attr="cpu"), args=[], keywords=[])
        return recv
    return None


def _round_trip(source: str, stmt: ast.stmt) -> tuple[list[ast.stmt], int, int, set[str]] | None:
    """The numpy round trip the site is part of: its block, its first and last statement there
    (from ``a = t.numpy()`` to the last statement that reads an array of it) and the names that
    hold its arrays; None when the site reads no array of one."""
    block, at = block_of(source, stmt)
    start = None
    for i in range(at, -1, -1):  # the round trip's start: the nearest .numpy() at or before the site
        s = block[i]
        if isinstance(s, ast.Assign) and any(_numpy_source(n) is not None for n in ast.walk(s.value)) and _target(s):
            start = i
            break
    if start is None:
        return None
    arrays: set[str] = set()
    end = start
    for i in range(start, len(block)):
        s = block[i]
        if i == start or _reads(s) & arrays:
            if not _simple(s):
                return None  # a loop or branch over the arrays: out of reach
            end = i
            name = _target(s)
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(
                s, (ast.AugAssign, ast.AnnAssign)) else []
            if name is not None:
                if i == start or _FromNumpy(arrays)._array(s.value):  # type: ignore[attr-defined]
                    arrays.add(name)  # an array (a number or a tensor made of one needs no more rewriting)
                else:
                    arrays.discard(name)
            elif not all(_is_array_name(t, arrays) or (isinstance(t, ast.Subscript) and _is_array_name(t.value, arrays))
                         for t in targets):
                return None  # an array stored in an attribute or a tuple: followed no further
        elif names_stored(s) & arrays:
            arrays -= names_stored(s)
    return (block, start, end, arrays) if end >= at else None


def numpy_to_torch(stmt: ast.stmt, text: Text) -> _Maker:
    """A numpy round trip around the site (from ``a = t.numpy()`` to the last statement that
    reads an array of it) as torch ops on the tensor ``a`` came from."""
    source = text.source
    found = _round_trip(source, stmt)
    if found is None:
        return None
    block, start, end, arrays = found
    run = block[start:end + 1]
    if any(_read_outside(source, stmt, run, n) for n in arrays):
        return None
    fix = _FromNumpy(arrays)
    out: list[str] = []
    for s in run:
        if s is not run[0] and not _reads(s) & arrays:
            out += text.statement_lines(s)  # between the array's uses: as written
            continue
        new = fix.visit(copy.deepcopy(s))
        if fix.refused:
            return f"the numpy round trip from line {run[0].lineno} stays: {fix.refused}"
        out += _lines(text, s, new)
    return Made(out, NUMPY, (
        "numpy's ops and torch's agree (the vocabulary map: axis -> dim, keepdims -> keepdim, np.std/np.var "
        "with ddof=0 -> correction=0, np.max -> torch.amax; np.median is torch.median, the lower middle value "
        "for an even count where numpy averages the two); the arrays keep the tensor's dtype (float32 stays "
        "float32: no float64 from Python floats), a float() of an array stays a 0-dim tensor, detached as the "
        "array was"), first=block[start], last=run[-1])


# -- 2. .tolist() lengths into a ragged pooling ------------------------------------------------------


_POOL = {"sum": "sum", "mean": "mean", "amax": "amax", "max": "amax"}


def _pooled(elt: ast.expr, var: str) -> tuple[ast.expr, str] | None:
    """(the sliced tensor, the reduction) of ``var_sliced.sum(0)`` / ``.mean(0)`` / ``.amax(0)``
    / ``.max(0).values`` / ``.max(0)[0]``, the comprehension's element."""
    if isinstance(elt, ast.Attribute) and elt.attr == "values":
        elt = elt.value
        if not (isinstance(elt, ast.Call) and _method(elt) and _method(elt)[1] == "max"):  # type: ignore[index]
            return None
    elif isinstance(elt, ast.Subscript) and _is_zero(elt.slice):
        elt = elt.value
        if not (isinstance(elt, ast.Call) and _method(elt) and _method(elt)[1] == "max"):  # type: ignore[index]
            return None
    m = _method(elt)
    if m is None or m[1] not in _POOL or not isinstance(elt, ast.Call) or not _dim0(elt):
        return None
    return m[0], _POOL[m[1]]


def _ragged(call: ast.expr, lengths: str) -> tuple[str, str, str] | None:
    """``torch.stack([...])`` over prefixes of rows: (h, reduction, "rows") for
    ``[h[i, :n].R(0) for i, n in enumerate(lengths)]`` / ``[t[:n].R(0) for t, n in zip(h, lengths)]``;
    (flat, reduction, "split") for ``[p.R(0) for p in torch.split(flat, lengths)]``."""
    if not (_call(call, "torch") == "stack" and isinstance(call, ast.Call) and call.args
            and isinstance(call.args[0], ast.ListComp)):
        return None
    dim = call.args[1:] + [k.value for k in call.keywords if k.arg == "dim"]
    if len(call.args) + len(call.keywords) > 2 or any(not _is_zero(d) for d in dim) or \
            any(k.arg != "dim" for k in call.keywords):
        return None  # torch.stack(..., dim=0) only: the segments are rows
    comp = call.args[0]
    if len(comp.generators) != 1 or comp.generators[0].ifs or comp.generators[0].is_async:
        return None
    gen = comp.generators[0]
    it, target = gen.iter, gen.target
    if isinstance(target, ast.Name):  # for p in torch.split(flat, lengths)
        found = _pooled(comp.elt, target.id)
        split = _split_of(it, lengths)
        if found is None or split is None or not (isinstance(found[0], ast.Name) and found[0].id == target.id):
            return None
        return split, found[1], "split"
    if not (isinstance(target, ast.Tuple) and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)):
        return None
    a, n = (e.id for e in target.elts)  # type: ignore[attr-defined]
    found = _pooled(comp.elt, a)
    if found is None or not isinstance(found[0], ast.Subscript):
        return None
    sliced, red = found
    sl = sliced.slice  # type: ignore[attr-defined]
    if _call(it, None) == "enumerate" and isinstance(it, ast.Call) and len(it.args) == 1 and _is_name(it.args[0], lengths):
        # h[i, :n]: row i, its first n positions
        if isinstance(sl, ast.Tuple) and unparsed(sl).strip("()") == f"{a}, :{n}":
            return unparsed(sliced.value), red, "rows"  # type: ignore[attr-defined]
        return None
    if (_call(it, None) == "zip" and isinstance(it, ast.Call) and len(it.args) == 2 and _is_name(it.args[1], lengths)
            and all(k.arg == "strict" for k in it.keywords)
            and _is_name(sliced.value, a) and unparsed(sl) == f":{n}"):  # type: ignore[attr-defined]
        return unparsed(it.args[0]), red, "rows"
    return None


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _split_of(node: ast.expr, lengths: str) -> str | None:
    """``flat`` of ``torch.split(flat, lengths)`` / ``flat.split(lengths)`` (dim 0)."""
    if _call(node, "torch") == "split" and isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords \
            and _is_name(node.args[1], lengths):
        return unparsed(node.args[0])
    m = _method(node)
    if m is not None and m[1] == "split" and isinstance(node, ast.Call) and len(node.args) == 1 \
            and not node.keywords and _is_name(node.args[0], lengths):
        return unparsed(m[0])
    return None


def _segment_expr(flat_or_h: str, red: str, kind: str, lengths: str) -> tuple[list[str], str]:
    """(statements to put first, the pooled expression) for a reduction over every segment."""
    if kind == "rows":  # h: (batch, length, features); a row's first n positions
        keep = f"{lengths}_keep"
        pre = [f"{keep} = torch.arange({flat_or_h}.shape[1], device={flat_or_h}.device) < {lengths}[:, None]"]
        if red == "amax":
            return pre, f"torch.where({keep}[:, :, None], {flat_or_h}, float('-inf')).amax(1)"
        total = f"torch.where({keep}[:, :, None], {flat_or_h}, 0).sum(1)"
        if red == "mean":  # n past the row's end counts the row's length, as h[i, :n] does
            return pre, f"{total} / {lengths}.clamp(max={flat_or_h}.shape[1])[:, None]"
        return pre, total
    # flat: (total, features), split into consecutive segments: each row's segment by bucketize
    seg = f"{lengths}_segment"
    pre = [f"{seg} = torch.bucketize(torch.arange({flat_or_h}.shape[0], device={flat_or_h}.device), "
           f"{lengths}.cumsum(0), right=True)"]
    zeros = f"{flat_or_h}.new_zeros(({lengths}.shape[0],) + {flat_or_h}.shape[1:])"
    if red == "amax":
        return pre, (f"{zeros}.scatter_reduce(0, {seg}[:, None].expand_as({flat_or_h}), {flat_or_h}, 'amax', "
                     "include_self=False)")
    total = f"{zeros}.index_add(0, {seg}, {flat_or_h})"
    return pre, (f"{total} / {lengths}[:, None]" if red == "mean" else total)


def _appended(block: list[ast.stmt], at: int, loop: ast.For) -> tuple[str, ast.ListComp, ast.stmt] | None:
    """``acc = []`` then ``for ...: acc.append(elt)``: (acc, the comprehension it spells, the ``acc = []``)."""
    if loop.orelse or len(loop.body) != 1 or not isinstance(loop.body[0], ast.Expr):
        return None
    m = _method(loop.body[0].value)
    call = loop.body[0].value
    if m is None or m[1] != "append" or not isinstance(m[0], ast.Name) or not isinstance(call, ast.Call) \
            or len(call.args) != 1:
        return None
    acc = m[0].id
    init = next((s for s in block[at + 1:block.index(loop)] if _target(s) == acc
                 and isinstance(s.value, ast.List) and not s.value.elts), None)  # type: ignore[attr-defined]
    if init is None:
        return None
    comp = ast.ListComp(elt=call.args[0], generators=[ast.comprehension(target=loop.target, iter=loop.iter, ifs=[],
                                                                         is_async=0)])
    return acc, comp, init


def segment_reduction(stmt: ast.stmt, text: Text) -> _Maker:
    """``lengths = t.tolist()`` then a pooling over ragged segments (a comprehension, or a loop
    that appends to a list, stacked; a split) as one masked (or indexed) reduction over all
    segments; ``lengths`` stays the tensor."""
    name = _target(stmt)
    m = _method(stmt.value) if isinstance(stmt, ast.Assign) else None
    if name is None or m is None or m[1] != "tolist" or stmt.value.args:  # type: ignore[attr-defined]
        return _inline_segments(stmt, text)
    lengths = m[0]
    cpu = _method(lengths)
    if cpu is not None and cpu[1] == "cpu" and not lengths.args:  # type: ignore[attr-defined]
        lengths = cpu[0]  # t.cpu().tolist(): the lengths stay on the tensor's device
    source = text.source
    block, at = block_of(source, stmt)
    users = [s for s in block[at + 1:] if name in names_loaded(s)]
    if len(users) != 1:
        return None
    user = users[0]
    dropped: list[ast.stmt] = []  # what the rewrite makes unneeded: the split, the list and its loop
    alias, stands = "", ast.expr()  # a name that stands for a split or a comprehension, and what it stands for
    if isinstance(user, ast.For):
        appended = _appended(block, at, user)
        if appended is None:
            return None
        alias, stands, init = appended
        dropped = [init, user]
    elif isinstance(user, ast.Assign) and _split_of(user.value, name) is not None and _target(user):
        alias, stands, dropped = _target(user) or "", user.value, [user]
    elif not _simple(user):
        return None
    pool = user
    if alias:
        readers = [s for s in block[block.index(user) + 1:] if alias in names_loaded(s)]
        if len(readers) != 1 or not _simple(readers[0]):
            return None
        pool = readers[0]
    run = block[at:block.index(pool) + 1]
    if any(_read_outside(source, stmt, run, n) for n in (name, alias) if n):
        return None
    found: list[tuple[ast.Call, tuple[str, str, str]]] = []
    for node in ast.walk(pool):
        if not isinstance(node, ast.Call):
            continue
        probe = node
        if alias and len(node.args) == 1 and _is_name(node.args[0], alias) and isinstance(stands, ast.ListComp):
            probe = copy.deepcopy(node)  # torch.stack(pooled): the comprehension the loop spells
            probe.args[0] = stands
        elif alias and node.args and isinstance(node.args[0], ast.ListComp) \
                and _is_name(node.args[0].generators[0].iter, alias):
            probe = copy.deepcopy(node)  # a comprehension over parts: over the split itself
            probe.args[0].generators[0].iter = stands  # type: ignore[attr-defined]
        got = _ragged(probe, name)
        if got is not None:
            found.append((node, got))
    if len(found) != 1:
        return None
    call, (tensor, red, kind) = found[0]
    pre, pooled = _segment_expr(tensor, red, kind, name)
    new = _swap(pool, call, _expr(pooled))
    between = [ln for s in run[1:-1] if s is not user and s not in dropped for ln in text.statement_lines(s)]
    lines = [f"{name} = {unparsed(lengths)}", *between, *pre, *unparsed(new).split("\n")]
    note = ("the segments are prefixes of h's rows (h[i, :n]), h is (batch, length, features)" if kind == "rows"
            else "the segments are consecutive rows of the packed tensor and their lengths add up to its rows")
    return Made(lines, SEGMENT, (
        f"{note}; {name} is read only by the pooling; an empty segment's mean is 0/0 = nan as in eager, its sum 0, "
        "its max -inf (eager raises); max's gradient is split between tied values"), last=pool)


def _inline_segments(stmt: ast.stmt, text: Text) -> _Maker:
    """The pooling with its lengths read in place: ``torch.stack([h[i, :n].mean(0) for i, n in
    enumerate(lengths.tolist())])`` (``zip(h, lengths.tolist())``, ``torch.split(flat,
    lengths.tolist())``), ``lengths`` a name."""
    if not _simple(stmt):
        return None
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.ListComp)
                and len(node.args[0].generators) == 1):
            continue
        it = node.args[0].generators[0].iter
        holder = it.args if isinstance(it, ast.Call) else []
        at = next((k for k, a in enumerate(holder) if isinstance(a, ast.Call) and not a.args
                   and isinstance(a.func, ast.Attribute) and a.func.attr == "tolist"), None)
        if at is None:
            continue
        src = _method(holder[at])[0]  # type: ignore[index]
        cpu = _method(src)
        if cpu is not None and cpu[1] == "cpu" and not src.args:  # type: ignore[union-attr]
            src = cpu[0]
        if not isinstance(src, ast.Name):
            return None
        probe = copy.deepcopy(node)
        probe.args[0].generators[0].iter.args[at] = ast.Name(src.id, ast.Load())  # type: ignore[attr-defined]
        got = _ragged(probe, src.id)
        if got is None:
            return None
        tensor, red, kind = got
        pre, pooled = _segment_expr(tensor, red, kind, src.id)
        new = _swap(stmt, node, _expr(pooled))
        return Made([*pre, *unparsed(new).split("\n")], SEGMENT, (
            "the segments are prefixes of h's rows (h[i, :n]), h is (batch, length, features)" if kind == "rows" else
            "the segments are consecutive rows of the packed tensor and their lengths add up to its rows") + (
            "; an empty segment's mean is 0/0 = nan as in eager, its sum 0, its max -inf (eager raises)"))
    return None


def _swap(stmt: ast.stmt, old: ast.AST, new: ast.expr) -> ast.stmt:
    """A copy of ``stmt`` with its node ``old`` replaced by ``new`` (the file's tree is shared:
    never changed in place)."""
    memo: dict[int, object] = {}
    out = copy.deepcopy(stmt, memo)
    twin = memo.get(id(old))

    class _Swap(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            return new if node is twin else super().visit(node)

    swapped = _Swap().visit(out)
    assert isinstance(swapped, ast.stmt)
    return swapped


# -- 3./4. select then reduce; nonzero then index ------------------------------------------------


class Selection:
    """A selection ``value[mask]`` (mask of value's leading dims) whose reductions become masked."""

    def __init__(self, value: ast.expr, mask: str, made: ast.expr, rows: bool = False,
                 same: bool | None = None) -> None:
        self.value, self.mask = unparsed(value), mask  # the mask's expression, or the name it is bound to
        self.rows = rows  # the mask is 1-D (a row mask, from nonzero): dim 0 of the selection is the value's
        # x[x > t]: the mask has x's shape, no reshape needed (a caller that knows more says so)
        self.same = same if same is not None else (
            isinstance(made, ast.Compare) and unparsed(made.left) == unparsed(value))

    def widened(self, value: str | None = None) -> str:
        """The mask as ``torch.where`` needs it against the value (or ``value``): itself when it
        has the value's shape, else with a 1 for each of the value's trailing dimensions (a mask
        broadcasts from the right; a selection's mask covers the leading dimensions)."""
        if self.same:
            return self.mask
        m = paren(self.mask)
        return f"{m}.view(*{m}.shape, *[1] * ({paren(value or self.value)}.dim() - {m}.dim()))"

    def masked(self, fill: str) -> str:
        return f"torch.where({self.widened()}, {self.value}, {fill})"

    def over_rows(self, masked: str, reduction: str) -> str:
        """A reduction over dim 0 of the selection: the mask's dimensions of the value."""
        if self.rows:
            return f"{masked}.{reduction}(0)"
        return f"{masked}.flatten(0, {paren(self.mask)}.dim() - 1).{reduction}(0)"

    def count(self) -> str:  # len(x[mask]): the selected rows
        return f"{paren(self.mask)}.sum()"

    def numel(self) -> str:
        if self.same:
            return self.count()
        return f"({paren(self.mask)}.sum() * ({paren(self.value)}.numel() // {paren(self.mask)}.numel()))"


FILL = {"sum": "0", "mean": "0", "max": "float('-inf')", "amax": "float('-inf')", "min": "float('inf')",
         "amin": "float('inf')"}


def _as_method(node: ast.AST) -> ast.AST:
    """``torch.mean(x, 0)`` as ``x.mean(0)``: torch's function form of a reduction (or of
    ``numel``), read as the method it equals; any other node as it is."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name) \
            and node.func.value.id == "torch" and (node.func.attr in FILL or node.func.attr == "numel") \
            and node.args and not isinstance(node.args[0], ast.Starred) \
            and not any(k.arg in (None, "input") for k in node.keywords):
        return ast.Call(func=ast.Attribute(value=node.args[0], attr=node.func.attr, ctx=ast.Load()),
                        args=node.args[1:], keywords=node.keywords)
    return node


class Reduced(ast.NodeTransformer):
    """Reductions of selections as reductions of masks; ``bad`` when a selection is read otherwise."""

    def __init__(self, sels: dict[str, Selection], index: dict[str, tuple[str, ast.expr]]) -> None:
        self.sels = sels  # name -> its selection
        self.index = index  # name of a nonzero index -> the mask it came from (1-D): its name, its expression
        self.bad = ""
        self.used = False

    def _sel(self, node: ast.AST) -> Selection | None:
        if isinstance(node, ast.Name) and node.id in self.sels:
            return self.sels[node.id]
        taken = _rows_taken(node, set(self.index))
        if taken is not None:
            return Selection(taken[0], *self.index[taken[1]], rows=True)
        return None

    def _reduced(self, node: ast.AST) -> str | None:
        """The masked form of a reduction of a selection, None when ``node`` is none."""
        node = _as_method(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
                and len(node.args) == 1:
            arg = node.args[0]
            if isinstance(arg, ast.Name) and arg.id in self.index:
                return f"{paren(self.index[arg.id][0])}.sum()"
            s = self._sel(arg)
            return s.count() if s else None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape" \
                and _is_zero(node.slice):
            inner = node.value.value
            if isinstance(inner, ast.Name) and inner.id in self.index:
                return f"{paren(self.index[inner.id][0])}.sum()"
            s = self._sel(inner)
            return s.count() if s else None
        if isinstance(node, ast.Attribute) and node.attr == "values" and isinstance(node.value, ast.Call):
            m = _method(node.value)
            s = self._sel(m[0]) if m else None
            if s and m and m[1] in ("max", "min") and _dim0(node.value):
                if s.same and not s.rows:
                    return f"{s.masked(FILL[m[1]])}.a{m[1]}()"  # x[x > t] is 1-D: dim 0 is everything
                return s.over_rows(s.masked(FILL[m[1]]), f"a{m[1]}")
        m = _method(node)
        if m is None or not isinstance(node, ast.Call):
            return None
        recv, name = m
        if isinstance(recv, ast.Name) and recv.id in self.index and name in ("numel", "size") and (
                not node.args or _is_zero(node.args[0])) and len(node.args) == (1 if name == "size" else 0):
            return f"{paren(self.index[recv.id][0])}.sum()"
        s = self._sel(recv)
        if s is None:
            return None
        if name == "numel" and not node.args and not node.keywords:
            return s.numel()
        if name == "size" and len(node.args) == 1 and _is_zero(node.args[0]):
            return s.count()
        if name not in FILL:
            return None
        everything = not node.args and not node.keywords
        if name in ("max", "min") and not everything:
            return None  # .max(0) is (values, indices): only with .values
        if everything:
            red = {"max": "amax", "min": "amin"}.get(name, name)
            if name == "mean":
                return f"{s.masked('0')}.sum() / {s.numel()}"
            return f"{s.masked(FILL[name])}.{red}()"
        if _dim0(node) and name not in ("max", "min"):
            if s.same and not s.rows:  # x[x > t] is 1-D: dim 0 is everything
                return self._reduced(ast.Call(func=node.func, args=[], keywords=[]))
            if name == "mean":
                return f"{s.over_rows(s.masked('0'), 'sum')} / {s.count()}"
            return s.over_rows(s.masked(FILL[name]), name)
        return None

    def visit(self, node: ast.AST) -> ast.AST:
        out = self._reduced(node)
        if out is not None:
            self.used = True
            return _expr(out)
        if isinstance(node, ast.Name) and (node.id in self.sels or node.id in self.index) and isinstance(node.ctx, ast.Load):
            self.bad = self.bad or node.id
            return node
        return super().visit(node)


def _rows_taken(node: ast.AST, index: set[str]) -> tuple[ast.expr, str] | None:
    """(the tensor, the index name) of rows taken by a nonzero index: ``y[keep]``, ``y[keep, :]``,
    ``y.index_select(0, keep)``, ``torch.index_select(y, 0, keep)``."""
    if isinstance(node, ast.Subscript):
        sl = node.slice
        first, rest = (sl.elts[0], sl.elts[1:]) if isinstance(sl, ast.Tuple) and sl.elts else (sl, [])
        whole = all(isinstance(r, ast.Slice) and r.lower is None and r.upper is None and r.step is None for r in rest)
        if isinstance(first, ast.Name) and first.id in index and whole:
            return node.value, first.id
        return None
    if not isinstance(node, ast.Call) or node.keywords:
        return None
    m = _method(node)
    if m is not None and m[1] == "index_select" and len(node.args) == 2 and _is_zero(node.args[0]) \
            and isinstance(node.args[1], ast.Name) and node.args[1].id in index:
        return m[0], node.args[1].id
    if _call(node, "torch") == "index_select" and len(node.args) == 3 and _is_zero(node.args[1]) \
            and isinstance(node.args[2], ast.Name) and node.args[2].id in index:
        return node.args[0], node.args[2].id
    return None


def _nonzero_mask(value: ast.expr) -> ast.expr | None:
    """The 1-D mask of a row index made by nonzero: ``c.nonzero().squeeze(1)`` (``.squeeze()``),
    ``torch.nonzero(c).squeeze(-1)``, ``.flatten()``/``.view(-1)``/``[:, 0]``,
    ``torch.where(c)[0]``, ``c.nonzero(as_tuple=True)[0]``."""
    if isinstance(value, ast.Subscript) and _is_zero(value.slice):
        inner = value.value
        if _call(inner, "torch") == "where" and isinstance(inner, ast.Call) and len(inner.args) == 1:
            return inner.args[0]
        as_tuple = _keyword(inner, "as_tuple") if isinstance(inner, ast.Call) else None
        if isinstance(as_tuple, ast.Constant) and as_tuple.value is True:
            return _nonzero_of(inner)
        return None
    if isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Tuple) and len(value.slice.elts) == 2 \
            and isinstance(value.slice.elts[0], ast.Slice) and _is_zero(value.slice.elts[1]):
        return _nonzero_of(value.value)
    m = _method(value)
    if m is None or not isinstance(value, ast.Call):
        return None
    recv, name = m
    flat = (name == "squeeze" and not value.args and not value.keywords) or (
        name in ("squeeze",) and len(value.args) == 1 and isinstance(value.args[0], (ast.Constant, ast.UnaryOp))
            and unparsed(value.args[0]) in ("1", "-1")) or (name == "flatten" and not value.args) or (
        name in ("view", "reshape") and len(value.args) == 1 and unparsed(value.args[0]) == "-1")
    return _nonzero_of(recv) if flat else None


def _nonzero_of(node: ast.expr) -> ast.expr | None:
    if _call(node, "torch") == "nonzero" and isinstance(node, ast.Call) and len(node.args) == 1:
        return node.args[0]
    m = _method(node)
    if m is not None and m[1] == "nonzero" and isinstance(node, ast.Call) and not node.args:
        return m[0]
    return None


def _returns(stmts: list[ast.stmt], names: set[str], index: set[str]) -> str:
    """The selection (a name, or ``x[keep]``) a return statement hands back as it is (itself, or
    an item of the returned tuple): its size is the output's."""
    for s in stmts:
        if not isinstance(s, ast.Return) or s.value is None:
            continue
        items = s.value.elts if isinstance(s.value, (ast.Tuple, ast.List)) else [s.value]
        for n in items:
            if isinstance(n, ast.Name) and n.id in names:
                return n.id
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id in index:
                return unparsed(n)
    return ""


def _selection(value: ast.expr, nz: ast.expr | None) -> tuple[ast.expr, str, str] | None:
    """The mask a selection reads, which rewrite it is and its note; None for no selection."""
    if nz is not None:
        return nz, NONZERO, ("the index only selects rows that are then reduced (a sum, mean, max, min or "
                             "count over them): the mask's reductions equal the selection's; a count is a "
                             "0-dim int64 tensor where it was a Python int")
    if isinstance(value, ast.Subscript) and not isinstance(value.slice, (ast.Slice, ast.Tuple, ast.Constant)):
        return value.slice, SELECT, ("the index is a boolean mask of the selected tensor's leading dimensions; "
                                     "the selected values are floating point (max and min fill with -inf and "
                                     "inf); a count is a 0-dim int64 tensor where it was a Python int")
    return None


def masked_select(stmt: ast.stmt, text: Text) -> _Maker:
    """``sel = x[mask]`` (or ``keep = mask.nonzero()...`` and ``x[keep]``) whose only uses are
    reductions (sum, mean, max, min, counts) as reductions of ``torch.where(mask, x, fill)``."""
    name = _target(stmt)
    if name is None or not isinstance(stmt, ast.Assign):
        return None
    source = text.source
    block, at = block_of(source, stmt)
    value = stmt.value
    nz = _nonzero_mask(value)
    sels: dict[str, Selection] = {}
    index: dict[str, tuple[str, ast.expr]] = {}
    fn = function_of(source, stmt)
    taken = {n.id for n in ast.walk(fn or parsed(source)) if isinstance(n, ast.Name)}
    # A mask that is an expression is bound once, to a name of its own, where the selection was.
    mask_name = f"{name}_mask" if f"{name}_mask" not in taken else ""
    kind = _selection(value, nz)
    if kind is None:
        return None
    mask, rewrite, note = kind
    first: list[str] = []
    said = unparsed(mask)
    if not isinstance(mask, ast.Name) and mask_name:
        first, said = [f"{mask_name} = {said}"], mask_name
    if nz is not None:
        index[name] = (said, mask)
    else:
        sels[name] = Selection(value.value, said, mask)  # type: ignore[attr-defined]
    watch = set(names_loaded(value))  # names whose values the masked form reads later: not rebound in between
    out: list[str] = []
    dropped: set[int] = set()  # statements that bind an indexed copy (kept = boxes[keep]): read as the mask
    last = at
    for i in range(at + 1, len(block)):
        s = block[i]
        if not names_loaded(s) & (set(sels) | set(index)):
            continue
        if not _simple(s):
            return None
        t = _target(s)
        rows = _rows_taken(s.value, set(index)) if t is not None and isinstance(s, ast.Assign) else None
        if t is not None and rows is not None:
            if t in names_loaded(rows[0]) and any(t in names_loaded(block[k]) for k in range(at + 1, i)):
                return None  # scores = scores[keep] after a read of the old scores: one name, two values
            sels[t] = Selection(rows[0], *index[rows[1]], rows=True)
            watch |= names_loaded(rows[0])
            dropped.add(i)
            continue
        last = i
    if any(names_stored(block[i]) & watch for i in range(at + 1, last + 1) if i not in dropped):
        return None  # the tensor or the mask is rebound between the selection and its reduction
    run = block[at:last + 1]
    tracked_all = set(sels) | set(index)
    returned = _returns(block[at + 1:], tracked_all, set(index))
    if returned:
        return (f"`{returned}` is returned and its size is the data's (how many rows the mask keeps): no "
                "rewrite keeps that shape static. Setting torch._dynamo.config.capture_dynamic_output_shape_ops "
                "= True lets Dynamo trace the nonzero (your choice: fix never sets config)")
    if last == at or any(_read_outside(source, stmt, run, n) for n in tracked_all):
        return None
    fix = Reduced(sels, index)
    out += first
    for i, s in enumerate(run[1:], at + 1):
        if i in dropped:
            continue  # kept = boxes[keep]: read as the mask where it is reduced
        if not names_loaded(s) & tracked_all:
            out += text.statement_lines(s)
            continue
        new = fix.visit(copy.deepcopy(s))
        if fix.bad:
            return None
        out += _lines(text, s, new)  # type: ignore[arg-type]
    if not fix.used or not out:
        return None
    return Made(out, rewrite, note, last=block[last])


class _AllRows(ast.NodeTransformer):
    """An expression over rows taken by a nonzero index (``y[keep]``, ``y.index_select(0,
    keep)``) as the same expression over every row; ``bad`` when it reads the index otherwise."""

    def __init__(self, index: str) -> None:
        self.index, self.bad = index, False

    def visit(self, node: ast.AST) -> ast.AST:
        rows = _rows_taken(node, {self.index})
        if rows is not None:
            return super().visit(rows[0])
        sl = node.slice if isinstance(node, ast.Subscript) else None
        if (isinstance(node, ast.Subscript) and isinstance(sl, ast.Tuple) and sl.elts
                and isinstance(sl.elts[0], ast.Name) and sl.elts[0].id == self.index):
            # y[keep, :1]: every row, the other dimensions indexed as they were
            every = ast.Subscript(value=node.value, slice=ast.Tuple(elts=[ast.Slice(), *sl.elts[1:]], ctx=ast.Load()),
                                  ctx=ast.Load())
            return super().visit(every)
        if isinstance(node, ast.Name) and node.id == self.index:
            self.bad = True
        return super().visit(node)


def scattered_rows(stmt: ast.stmt, text: Text) -> _Maker:
    """``keep = <nonzero of c>`` then ``x[keep] = f(y[keep], ...)`` (the index read nowhere else)
    as ``x.copy_(torch.where(c, f(y, ...), x))``: every row computed, the rows the index names
    kept, in place as the assignment set them (FPN boxes pooled per level, rows refreshed by a test)."""
    name = _target(stmt)
    if name is None or not isinstance(stmt, ast.Assign):
        return None
    cond = _nonzero_mask(stmt.value)
    picked = _picked_index(stmt.value) if cond is None else None
    if cond is None and picked is None:
        return _selected_rows(stmt, name, text)
    made = _index_rows(stmt, name, text, cond, picked)
    # `a = x[mask]` looks like an index a mask picks; where nothing indexes by `a`, it is a
    # selection of rows (YOLOv8's boxes of every (gt, anchor) pair the mask keeps).
    return _selected_rows(stmt, name, text) if made is None and picked is not None else made


def _index_rows(stmt: ast.Assign, name: str, text: Text, cond: ast.expr | None,
                picked: tuple[ast.expr, ast.expr] | None) -> _Maker:
    """:func:`scattered_rows` for an index: the rows it names written back."""
    block, at = block_of(text.source, stmt)
    nxt = block[at + 1] if at + 1 < len(block) else None
    guarded = isinstance(nxt, ast.If) and not nxt.orelse and _not_empty(nxt.test, name)
    # `if keep.numel() > 0:` around the writes: with no row named, each where writes nothing.
    run = nxt.body if guarded else block[at + 1:]  # type: ignore[union-attr]
    notes = ["the value is computed row by row (run on every row, the rows the index leaves out are dropped by "
             "torch.where: a row's value does not depend on which other rows were selected) and is finite there"]
    if picked is not None:
        # The rows an index picked by a mask names: a count of picks per row, scattered.
        base, mask = (_flat(unparsed(n)) for n in picked)
        def rows_of(x: str, dim: int = 0) -> str:
            return (f"torch.zeros({x}.shape[{dim}], dtype=torch.int64, device={x}.device)"
                    f".index_add(0, {base}, {mask}.long()) > 0")
        notes.append("the index is an integer index of the target's rows (repeated rows are written the same value)")
    else:
        cond_text = unparsed(cond)  # type: ignore[arg-type]

        def rows_of(x: str, dim: int = 0) -> str:
            return cond_text
    watched = names_loaded(stmt.value)  # rebound before a write: the rows named would differ
    lines: list[str] = []
    last: ast.stmt | None = None
    for s in run:
        if name not in names_loaded(s):
            if names_stored(s) & (watched | {name}) or not _simple(s):
                return None
            lines += text.statement_lines(s)
            continue
        written = _row_write(s, name, rows_of)
        if written is None:
            return None
        lines.append(written)
        last = s
        if not read_later(text.source, stmt, name, after=s):
            break
    if last is None:
        return None
    if guarded:
        if last is not run[-1] or read_later(text.source, stmt, name, after=nxt):
            return None
        notes.append("the test around the writes only asks whether any row is named")
        last = nxt
    elif read_later(text.source, stmt, name, after=last):
        return None
    return Made(lines, SCATTER, "; ".join(notes), last=last)


def _row_write(s: ast.stmt, index: str, rows_of: Callable[[str, int], str]) -> str | None:
    """``x[index] = f(y[index])`` as ``x.copy_(torch.where(<rows>, f(y), x))``; ``x[:, index] =
    v`` (``v`` reading no index) the same over ``x``'s second dimension; None for another statement."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)):
        return None
    target = s.targets[0]
    if not isinstance(target.value, (ast.Name, ast.Attribute)):
        return None
    x = unparsed(target.value)
    if isinstance(target.slice, ast.Name) and target.slice.id == index:
        every = _AllRows(index)
        value = every.visit(copy.deepcopy(s.value))
        return None if every.bad else rows_set(x, rows_of(x, 0), value)  # type: ignore[arg-type]
    sl = target.slice
    if (isinstance(sl, ast.Tuple) and len(sl.elts) == 2 and isinstance(sl.elts[0], ast.Slice)
            and sl.elts[0].lower is None and sl.elts[0].upper is None and sl.elts[0].step is None
            and isinstance(sl.elts[1], ast.Name) and sl.elts[1].id == index and index not in names_loaded(s.value)):
        # the columns the index names: the mask laid along the second dimension
        cols = f"({rows_of(x, 1)}).reshape((1, -1) + (1,) * ({x}.dim() - 2))"
        return f"{x}.copy_(torch.where({cols}, {unparsed(s.value)}, {x}))"
    return None


def _picked_index(value: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(index, mask) of ``index[mask]`` where the mask is boolean by its look (a comparison, a
    ``mask``-like name, ``m.view(-1)``): the entries of an index a mask keeps."""
    if not isinstance(value, ast.Subscript) or isinstance(value.slice, (ast.Slice, ast.Tuple, ast.Constant)):
        return None
    mask = value.slice
    inner = mask
    m = _method(inner)
    while m is not None and m[1] in ("view", "reshape", "flatten", "bool") and isinstance(inner, ast.Call):
        inner = m[0]
        m = _method(inner)
    boolean = isinstance(inner, ast.Compare) or (
        isinstance(inner, ast.BinOp) and isinstance(inner.op, (ast.BitAnd, ast.BitOr))) or (
        isinstance(inner, (ast.Name, ast.Attribute)) and _looks_boolean(unparsed(inner)))
    return (value.value, mask) if boolean else None


def _flat(src: str) -> str:
    """``src`` as a 1-D tensor (as it is when it already ends in ``.view(-1)``)."""
    return src if src.endswith((".view(-1)", ".reshape(-1)", ".flatten()")) else f"{paren(src)}.reshape(-1)"


#: Words in a name that say it holds a boolean mask (``keep``, ``valid_mask``, ``selected``).
MASK_WORDS = ("mask", "keep", "valid", "selected")


def _looks_boolean(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return last.startswith(("is_", "has_")) or any(w in last for w in MASK_WORDS)


def _not_empty(test: ast.expr, name: str) -> bool:
    """``test`` only asks whether the index ``name`` holds an entry: ``name.numel() > 0``,
    ``len(name) > 0``, ``name.numel()``, ``name.shape[0] > 0``, ``name.size(0) > 0``."""
    size = test.left if isinstance(test, ast.Compare) else test
    if isinstance(test, ast.Compare) and not (
            len(test.ops) == 1 and isinstance(test.ops[0], (ast.Gt, ast.NotEq)) and _is_zero(test.comparators[0])):
        return False
    text = unparsed(size)
    return text in (f"{name}.numel()", f"len({name})", f"{name}.shape[0]", f"{name}.size(0)", f"{name}.nelement()")


def _selected_rows(stmt: ast.Assign, name: str, text: Text) -> _Maker:
    """``a = x[m]`` (and more selections by the same mask after it), statements that read none
    of them, then ``y[m] = f(a, ...)`` as the statements and ``y.copy_(torch.where(m, f(x, ...),
    y))``, the mask widened over ``y``'s trailing dimensions: every row computed (a
    mixture-of-depths block run on every token), the selected ones written back in place."""
    value = stmt.value
    if not (isinstance(value, ast.Subscript) and isinstance(value.slice, (ast.Name, ast.Attribute, ast.Compare))):
        return None
    mask = value.slice
    sels: dict[str, ast.expr] = {name: value.value}
    block, at = block_of(text.source, stmt)
    watched = names_loaded(mask) | names_loaded(value.value)  # rebound between: the rows would differ
    kept: list[str] = []
    final: ast.Assign | None = None
    for s in block[at + 1:]:
        t = _target(s)
        if (t is not None and isinstance(s, ast.Assign) and isinstance(s.value, ast.Subscript) and t not in sels
                and ast.dump(s.value.slice) == ast.dump(mask) and not names_loaded(s.value.value) & set(sels)):
            sels[t] = s.value.value
            watched |= names_loaded(s.value.value)
            continue
        if (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)
                and ast.dump(s.targets[0].slice) == ast.dump(mask)
                and isinstance(s.targets[0].value, (ast.Name, ast.Attribute))):
            final = s
            break
        if names_loaded(s) & set(sels) or names_stored(s) & (watched | set(sels)) or not _simple(s):
            return None
        kept += text.statement_lines(s)
    if final is None:
        return None
    new_value: ast.expr = final.value
    for n, whole in sels.items():
        new_value = substituted(new_value, n, whole)
    if any(read_later(text.source, stmt, n, after=final) for n in sels):
        return None
    x, m = unparsed(final.targets[0].value), unparsed(mask)  # type: ignore[attr-defined]
    widened = f"({m}).reshape(({m}).shape + (1,) * ({x}.dim() - ({m}).dim()))"
    return Made([*kept, f"{x}.copy_(torch.where({widened}, {unparsed(new_value)}, {x}))"], SCATTER, (
        "the index is a boolean mask of the leading dimensions; what is written back is computed row by row "
        "(run on every row, the rows the mask leaves out dropped by torch.where: a row's value does not depend on "
        "which other rows were selected) and is finite there"), last=final)


ENDS = "first or last nonzero as argmax"


def nonzero_end(stmt: ast.stmt, text: Text) -> _Maker:
    """``i = m.nonzero()[-1]`` (``[0]``; ``torch.nonzero(m)``) of a 1-D mask: the last (first)
    position that holds, as an argmax over the positions, the same one-element index."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Subscript)):
        return None
    sl, inner = stmt.value.slice, stmt.value.value
    end = unparsed(sl) if isinstance(sl, (ast.Constant, ast.UnaryOp)) else ""
    m = _nonzero_of(inner) if end in ("0", "-1") else None
    if m is None:
        return None
    ms = paren(unparsed(m))
    if end == "-1":
        value = f"({ms}.ne(0).long() * torch.arange({ms}.shape[0], device={ms}.device)).argmax().reshape(1)"
    else:
        value = f"{ms}.ne(0).int().argmax().reshape(1)"
    return Made([f"{text.of(stmt.targets[0])} = {value}"], ENDS, (
        "the mask is 1-D and holds somewhere (with none, nonzero()[...] raises where the argmax gives 0)"))


UNSORTED = "sorted mask scattered back"


def _sorted_by(source: str, stmt: ast.stmt, name: str) -> bool:
    """Whether ``name`` is bound in ``stmt``'s function by a sort's indices: ``_, name =
    torch.sort(...)`` (``x.sort(...)``) or ``name = x.argsort(...)`` (``torch.argsort``), on the
    last dimension (no ``dim`` other than -1)."""
    fn = function_of(source, stmt)
    for node in ast.walk(fn or parsed(source)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        call, target = node.value, node.targets[0]
        dim = _keyword(call, "dim")
        if dim is not None and unparsed(dim) != "-1":
            continue
        kind = _call(call, "torch") or (_method(call) or (None, ""))[1]
        if (kind == "sort" and isinstance(target, ast.Tuple) and len(target.elts) == 2
                and isinstance(target.elts[1], ast.Name) and target.elts[1].id == name):
            return True
        if kind == "argsort" and isinstance(target, ast.Name) and target.id == name:
            return True
    return False


def sorted_mask_back(stmt: ast.stmt, text: Text) -> _Maker:
    """``remove = sorted_indices[sorted_mask]`` then ``logits[remove] = v`` (top-p sampling, as
    run_generation and minGPT write it) as ``logits.masked_fill_(sorted_mask.scatter(-1,
    sorted_indices, sorted_mask), v)``: the sorted mask put back in the vocabulary's order."""
    name = _target(stmt)
    value = stmt.value if isinstance(stmt, ast.Assign) else None
    if not (name and isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
            and isinstance(value.slice, ast.Name)):
        return None
    perm, mask = value.value.id, value.slice.id
    block, at = block_of(text.source, stmt)
    nxt = block[at + 1] if at + 1 < len(block) else None
    if not (isinstance(nxt, ast.Assign) and len(nxt.targets) == 1 and isinstance(nxt.targets[0], ast.Subscript)
            and isinstance(nxt.targets[0].slice, ast.Name) and nxt.targets[0].slice.id == name
            and isinstance(nxt.targets[0].value, (ast.Name, ast.Attribute))
            and isinstance(nxt.value, (ast.Constant, ast.Name, ast.Attribute, ast.UnaryOp))):
        return None
    if not _sorted_by(text.source, stmt, perm) or read_later(text.source, stmt, name, after=nxt):
        return None
    x = unparsed(nxt.targets[0].value)
    return Made([f"{x}.masked_fill_({mask}.scatter(-1, {perm}, {mask}), {unparsed(nxt.value)})"], UNSORTED, (
        "the indices are a sort's over the last dimension (a permutation) and the mask is boolean, of their shape; "
        "the value is one number"), last=nxt)


# -- 5. top-k routing over experts -------------------------------------------------------------------


class _Dense(ast.NodeTransformer):
    """An expert's gathered tokens as all tokens: ``x[tok]`` -> ``x``, ``w[tok, slot]`` -> the
    routing weight of every token (zero where not routed)."""

    def __init__(self, tok: str, slot: str | None, routing: str) -> None:
        self.tok, self.slot, self.routing = tok, slot, routing
        self.weighted = False  # a routing weight multiplies the expert's output
        self.bad = ""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        sl = node.slice
        elts = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
        names = [e.id if isinstance(e, ast.Name) else None for e in elts]
        if self.slot is not None and names[:2] in ([self.tok, self.slot], [self.slot, self.tok]):
            routing = self.routing if names[0] == self.tok else f"{self.routing}.T"
            dim = 1 if names[0] == self.tok else 0
            weight = _expr(f"({unparsed(self.visit(node.value))} * {routing}).sum({dim})")
            self.weighted = True
            rest = elts[2:]
            if not rest:
                return weight
            return ast.Subscript(value=weight, slice=ast.Tuple(elts=[ast.Slice(), *rest]), ctx=ast.Load())
        if self.tok in names:
            new = [ast.Slice() if n == self.tok else e for n, e in zip(names, elts, strict=True)]
            value = self.visit(node.value)
            if len(new) == 1:
                return value  # x[tok] -> x
            return ast.Subscript(value=value, slice=ast.Tuple(elts=new), ctx=ast.Load())
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in (self.tok, self.slot):
            self.bad = node.id
        return node


def _update(s: ast.stmt, tok: str) -> tuple[str, ast.expr] | None:
    """(accumulator, value) of ``out[tok] += value`` or ``out.index_add_(0, tok, value)``."""
    if isinstance(s, ast.AugAssign) and isinstance(s.op, ast.Add) and isinstance(s.target, ast.Subscript) \
            and _is_name(s.target.slice, tok):
        return unparsed(s.target.value), s.value
    call = s.value if isinstance(s, (ast.Expr, ast.Assign)) else None
    m = _method(call) if isinstance(call, ast.Call) else None
    if not (isinstance(call, ast.Call) and m and len(call.args) == 3 and _is_zero(call.args[0])
            and _is_name(call.args[1], tok)):
        return None
    if isinstance(s, ast.Expr) and m[1] == "index_add_":
        return unparsed(m[0]), call.args[2]
    if isinstance(s, ast.Assign) and m[1] == "index_add" and len(s.targets) == 1 \
            and unparsed(s.targets[0]) == unparsed(m[0]):  # out = out.index_add(0, tok, value)
        return unparsed(m[0]), call.args[2]
    return None


def _routing_of(value: ast.expr) -> tuple[list[str], ast.expr] | None:
    """(index names, mask) of ``a, b = torch.where(m)`` / ``idx = torch.where(m)[0]`` and the nonzero forms."""
    if _call(value, "torch") == "where" and isinstance(value, ast.Call) and len(value.args) == 1:
        return ["", ""], value.args[0]  # two names: the caller's targets
    as_tuple = _keyword(value, "as_tuple") if isinstance(value, ast.Call) else None
    if isinstance(as_tuple, ast.Constant) and as_tuple.value is True:
        inner = _nonzero_of(value)
        return (["", ""], inner) if inner is not None else None
    mask = _nonzero_mask(value)
    return ([""], mask) if mask is not None else None


def dense_experts(stmt: ast.stmt, text: Text) -> _Maker:
    """A loop body that gathers an expert's tokens with ``torch.where`` / ``nonzero`` and
    scatters its output back as the expert on every token, weighted by its routing (zero
    where not routed)."""
    source = text.source
    block, at = block_of(source, stmt)
    loops = [n for n in ast.walk(parsed(source)) if isinstance(n, ast.For) and n.body is block]
    if not loops:
        return None
    if isinstance(stmt, (ast.AugAssign, ast.Assign)):
        masked = _masked_update(stmt, text)
        if masked is not None:
            return masked
    if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
        return None
    found = _routing_of(stmt.value)
    if found is None:
        return None
    kinds, mask = found
    target = stmt.targets[0]
    if len(kinds) == 2 and isinstance(target, ast.Tuple) and len(target.elts) == 2 \
            and all(isinstance(e, ast.Name) for e in target.elts):
        first, second = (e.id for e in target.elts)  # type: ignore[attr-defined]
    elif len(kinds) == 1 and isinstance(target, ast.Name):
        first, second = target.id, ""
    else:
        return None
    rest = block[at + 1:]
    updates = [(i, u) for i, s in enumerate(rest) if (u := _update(s, first) or (_update(s, second) if second else None))]
    if len(updates) != 1:
        return None
    i_upd, (acc, _) = updates[0]
    tok = first if _update(rest[i_upd], first) else second
    slot = (second if tok == first else first) or None
    m = unparsed(mask)
    # The routing of every token to this expert, tokens first: (tokens, slots) for two indices.
    routing = paren(m) if tok == first else f"{paren(m)}.T"
    dense = _Dense(tok, slot, routing)
    # top_x_list = top_x.tolist() ("faster to index with lists"): the list indexes as the tensor does
    aliases = {a: i for s in rest[: i_upd + 1] if (a_i := _listed_index(s, {tok, slot})) for a, i in [a_i]}
    out: list[str] = []
    for s in rest[: i_upd + 1]:
        if _listed_index(s, {tok, slot}):
            continue
        for alias, index in aliases.items():
            s = substituted(s, alias, ast.Name(index, ctx=ast.Load()))
        if isinstance(s, ast.If) and not s.orelse and len(s.body) == 1 and isinstance(s.body[0], ast.Continue) \
                and names_loaded(s.test) & {tok, slot}:
            continue  # `if idx.numel() == 0: continue`: no empty expert once every token runs
        if not _simple(s):
            return None
        if not names_loaded(s) & {tok, slot}:
            out += text.statement_lines(s)
            continue
        upd = _update(s, tok)
        new: ast.AST = _expr(unparsed(dense.visit(copy.deepcopy(upd[1])))) if upd else dense.visit(copy.deepcopy(s))
        if dense.bad:
            return None
        if upd:
            value = unparsed(new)
            if slot is None or not dense.weighted:
                # no routing weight zeroes the tokens not routed here: a mask does
                # (the value has the accumulator's dimensions: a row of it per token)
                rows = paren(m) if slot is None else f"{paren(routing)}.any(1)"
                value = f"torch.where({rows}.view(-1, *[1] * ({paren(acc)}.dim() - 1)), {value}, 0)"
            # out = out.index_add(...) made a new tensor: so does the dense form (out may alias another)
            out.append(f"{acc} = {acc} + {value}" if isinstance(s, ast.Assign) else f"{acc} += {value}")
        else:
            out += _lines(text, s, new)  # type: ignore[arg-type]
    last = rest[i_upd]
    if any(_read_outside(source, stmt, [stmt, *rest[: i_upd + 1]], n) for n in (tok, slot, *aliases) if n):
        return None
    return Made(out, DENSE, (
        "every expert runs on every token (the cost: experts x tokens instead of top-k x tokens) and its output "
        "is weighted by the token's routing weight, zero where the token is not routed to it; the expert works "
        "token by token (nothing in it mixes the tokens it is given), and a token picks an expert at most once"),
        last=last)


def _listed_index(s: ast.stmt, indices: set[str | None]) -> tuple[str, str] | None:
    """(the list's name, the index's) of ``top_x_list = top_x.tolist()``, one of ``indices``."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
        return None
    m = _method(s.value) if isinstance(s.value, ast.Call) and not s.value.args else None
    if m is None or m[1] != "tolist" or not isinstance(m[0], ast.Name) or m[0].id not in indices:
        return None
    return s.targets[0].id, m[0].id


def _masked_update(stmt: ast.AugAssign | ast.Assign, text: Text) -> Made | None:
    """``out[m] += v`` / ``out[m] = v`` in an expert loop, ``m`` a boolean mask of the tokens and
    ``v`` of ``x[m]``, ``w[m, None]``: ``v`` on every token, kept where ``m`` holds."""
    target = stmt.target if isinstance(stmt, ast.AugAssign) else (stmt.targets[0] if len(stmt.targets) == 1 else None)
    if not isinstance(target, ast.Subscript) or not isinstance(target.slice, ast.Name):
        return None
    if isinstance(stmt, ast.AugAssign) and not isinstance(stmt.op, ast.Add):
        return None
    m, acc = target.slice.id, unparsed(target.value)
    dense = _Dense(m, None, "")
    value = dense.visit(copy.deepcopy(stmt.value))
    if dense.bad or m not in names_loaded(stmt.value):
        return None
    rows = f"{m}.view(-1, *[1] * ({paren(acc)}.dim() - 1))"
    if isinstance(stmt, ast.AugAssign):
        line = f"{acc} += torch.where({rows}, {unparsed(value)}, 0)"
    else:
        line = f"{acc} = torch.where({rows}, {unparsed(value)}, {acc})"
    return Made([line], DENSE, (
        "every expert runs on every token (the cost: experts x tokens instead of the routed ones) and its output is "
        f"kept where {m} holds; {m} is a boolean mask of the tokens (dim 0), and the expert works token by token "
        "(nothing in it mixes the tokens it is given)"))


# -- 6. .item() and float() into math.* --------------------------------------------------------------


_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "log2": "log2", "log10": "log10", "log1p": "log1p",
         "expm1": "expm1", "tanh": "tanh", "sin": "sin", "cos": "cos", "tan": "tan", "atan": "atan",
         "fabs": "abs", "floor": "floor", "ceil": "ceil", "pow": "pow", "erf": "erf", "isnan": "isnan",
         "isinf": "isinf", "isfinite": "isfinite"}


_PY_NUMBERS = {"int", "len", "round", "bool"}


class _MathTensor(ast.NodeTransformer):
    """``.item()`` -> ``.detach()``, ``float(t)`` -> ``t.detach()``, ``math.f`` of such a tensor ->
    ``torch.f``, ``max``/``min`` of such a tensor and a number -> ``torch.clamp``."""

    def __init__(self, numbers: set[str], *, site: bool = False) -> None:
        self.numbers = numbers  # names that hold the numbers, tensors now
        self.site = site  # the break site's own statement: a float() there reads a tensor
        self.changed = False  # a math call (or max/min) became a torch call
        self.floated = False  # a float(t) of the site became t.detach()
        # the nodes this rewrite made tensors, by id; the dict holds the nodes too, so that an id is
        # not reused by a node made after a statement's copy is dropped (it was: CI saw a number as a tensor)
        self.tensorish: dict[int, ast.AST] = {}
        self.lone_float = False  # the site's statement holds one float() call
        self.lone_int = False  # the site's statement is ``n = int(<tensor>)``

    def _tensor(self, node: ast.AST) -> bool:
        """Whether the expression is a tensor now: made one by this rewrite (itself or a part
        of it: ``sum(float(g) for g in gs)`` sums tensors), or reading a name that holds one.
        ``int(...)``, ``len(...)``, ``round(...)`` give Python numbers whatever they read."""
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _PY_NUMBERS \
                and id(node) not in self.tensorish:
            return False
        return any(id(n) in self.tensorish for n in ast.walk(node)) or bool(names_loaded(node) & self.numbers)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
            return self._mark(_detach(f.value))
        if isinstance(f, ast.Name) and f.id == "float" and len(node.args) == 1 and not node.keywords:
            arg = node.args[0]
            if self._tensor(arg):
                return self._mark(arg)
            if self.site and not isinstance(arg, ast.Constant) and (not isinstance(arg, ast.Name) or self.lone_float):
                # float(t) broke here (no .item() in the statement): t is a tensor; a bare name only
                # when it is the statement's one float() (float(n) may be of a Python number)
                self.floated = True
                return self._mark(_detach(arg))
            return node
        if isinstance(f, ast.Name) and f.id == "int" and self.site and self.lone_int:
            # int(t) broke here: t stays a tensor, truncated toward zero as int() does (an int
            # tensor as it is); kept only when math follows (a count or an index needs a number)
            long = ast.Call(func=ast.Attribute(value=_detach(node.args[0]), attr="long"), args=[], keywords=[])
            return self._mark(long)
        name = _call(node, "math")
        if name in _MATH and node.args and any(self._tensor(a) for a in node.args):
            self.changed = True
            if name == "log" and len(node.args) == 2:  # math.log(x, base): the base stays a number
                base = ast.Call(func=ast.Attribute(value=ast.Name("math"), attr="log"), args=[node.args[1]], keywords=[])
                return self._mark(ast.BinOp(left=_torch("log", [node.args[0]], []), op=ast.Div(), right=base))
            return self._mark(_torch(_MATH[name], list(node.args), []))
        if isinstance(f, ast.Name) and f.id in ("max", "min") and len(node.args) == 2 and not node.keywords:
            a, b = node.args
            if self._tensor(a) != self._tensor(b):
                t, other = (a, b) if self._tensor(a) else (b, a)
                self.changed = True
                bound = "min" if f.id == "max" else "max"
                return self._mark(_torch("clamp", [t], [ast.keyword(arg=bound, value=other)]))
        return node

    def _mark(self, node: ast.expr) -> ast.expr:
        self.tensorish[id(node)] = node
        return node


def _detach(node: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Attribute(value=node, attr="detach"), args=[], keywords=[])


def _number_source(stmt: ast.stmt) -> bool:
    """The statement reads a tensor into a number (``.item()`` or ``float(...)``)."""
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and ((isinstance(n.func, ast.Attribute) and n.func.attr == "item" and not n.args)
                                        or (isinstance(n.func, ast.Name) and n.func.id == "float")):
            return True
    return False


def _int_source(stmt: ast.stmt) -> bool:
    """``n = int(<not a constant>)`` with no other number read: at a break site, int() of a tensor."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return False
    v = stmt.value
    return (isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "int" and len(v.args) == 1
            and not v.keywords and not isinstance(v.args[0], ast.Constant) and not _number_source(stmt))


def math_to_torch(stmt: ast.stmt, text: Text) -> _Maker:
    """A number read from a tensor (``.item()``, ``float(t)``) and put through ``math.*`` (in
    the site's statement or the next ones of its block), kept a tensor and put through the
    torch function of that name."""
    if not _simple(stmt) or _round_trip(text.source, stmt) is not None:
        return None  # a number read from a numpy array: the round trip's rewrite, or none
    block, at = block_of(text.source, stmt)
    name = _target(stmt)
    inted = _int_source(stmt)
    if not _number_source(stmt) and not inted:
        # math.f(v) of a tensor v (the break a kept tensor moved here): the math call reads it
        fix = _MathTensor({n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)} - {"math", "torch"}, site=True)
        new = fix.visit(copy.deepcopy(stmt))
        return Made(_lines(text, stmt, new), MATH, _MATH_NOTE) if fix.changed else None
    calls = [n for n in ast.walk(stmt) if isinstance(n, ast.Call)]
    has_item = any(isinstance(n.func, ast.Attribute) and n.func.attr == "item" and not n.args for n in calls)
    floats = [n for n in calls if isinstance(n.func, ast.Name) and n.func.id == "float"]
    # With an .item() in the statement the break is the .item()'s: its float()s stay as they are
    fix = _MathTensor({name} if name is not None else set(), site=not has_item)
    fix.lone_float = len(floats) == 1
    fix.lone_int = inted
    out = _lines(text, stmt, fix.visit(copy.deepcopy(stmt)))
    changed, last = fix.changed, None
    fix.site = False
    pending: list[str] = []
    for s in block[at + 1:] if name is not None else []:
        if names_loaded(s) & fix.numbers and _simple(s):
            fix.changed = False
            new = fix.visit(copy.deepcopy(s))
            if fix.changed:
                out += pending + _lines(text, s, new)
                pending, last, changed = [], s, True
                if names_stored(s) & fix.numbers:
                    break
                continue
        if names_stored(s) & fix.numbers:
            break  # the name holds something else from here
        pending += text.statement_lines(s)
    if not changed:
        if fix.floated and name is not None:
            # float(t) into Python arithmetic: the keep-it-a-tensor rewrite of .item(), for float()
            only = _MathTensor(set(), site=True)
            only.lone_float = fix.lone_float
            return Made(_lines(text, stmt, only.visit(copy.deepcopy(stmt))), FLOAT, (
                "the value stays a 0-dim tensor, detached as a Python float is, in the tensor's dtype (type promotion "
                "as for a number; an int tensor stays int: floor division and a use as a count or an index differ)"))
        return None  # no math on the number: "keep it a tensor" says it plainer
    note = _MATH_NOTE + ("; int(t) is t.long(), truncated toward zero as int() does, and what it feeds is a tensor "
                         "(true division gives float32, not a Python float)" if inted else "")
    return Made(out, MATH, note, last=last)


_MATH_NOTE = ("the number stays a 0-dim tensor, detached as a Python number is, and math.f becomes torch.f in the "
              "tensor's dtype (float32 where Python computes in float64; math.floor/ceil give a float tensor, "
              "not an int: a count or an index fails)")


# -- a count read back as a Python int only to divide by ------------------------------------------


class _Bounded(ast.NodeTransformer):
    """``max(n, c)`` as ``n.clamp(min=c)`` and ``min(n, c)`` as ``n.clamp(max=c)`` (either order)
    for the one name ``n``; ``used`` counts every other read of it."""

    def __init__(self, name: str) -> None:
        self.name, self.changed = name, False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Name) and f.id in ("max", "min") and len(node.args) == 2 and not node.keywords):
            return node
        mine = [a for a in node.args if isinstance(a, ast.Name) and a.id == self.name]
        other = [a for a in node.args if not (isinstance(a, ast.Name) and a.id == self.name)]
        if len(mine) != 1 or len(other) != 1 or self.name in names_loaded(other[0]):
            return node
        self.changed = True
        bound = "min" if f.id == "max" else "max"
        return ast.Call(func=ast.Attribute(value=mine[0], attr="clamp"), args=[],
                        keywords=[ast.keyword(arg=bound, value=other[0])])


def _counted_value(value: ast.expr) -> ast.expr | None:
    """``int(c)`` / ``float(c)`` / ``c.item()`` of a count (``<...>.sum()``, ``<...>.count_nonzero()``,
    ``torch.count_nonzero(...)``): the count ``c``; None otherwise."""
    inner: ast.expr | None = None
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("int", "float") \
            and len(value.args) == 1 and not value.keywords:
        inner = value.args[0]
    elif (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "item"
          and not value.args):
        inner = value.func.value
    if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in ("sum", "count_nonzero") and not inner.keywords):
        return None
    return inner


def count_kept(stmt: ast.stmt, text: Text) -> _Maker:
    """``n = int(mask.sum())`` then ``loss / max(n, 1)`` as ``n = mask.sum().detach()`` then
    ``loss / n.clamp(min=1)``: the count stays a tensor, the statements after it in the block
    that bound it by ``max``/``min`` clamp it instead."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    count = _counted_value(stmt.value)
    if count is None:
        return None
    name = stmt.targets[0].id
    block, at = block_of(text.source, stmt)
    later = block[at + 1:]
    readers = [i for i, s in enumerate(later) if name in _reads(s)]
    if not readers:
        return None
    run = later[: readers[-1] + 1]
    if read_later(text.source, stmt, name, after=run[-1]):
        return None  # read past its block (returned, say): there a Python int may be what is wanted
    lines = [f"{name} = {unparsed(count)}.detach()"]
    bounded = False
    for s in run:
        if name in _reads(s) and not _simple(s):
            return None  # a loop or an `if` over the count: it needs the number
        new = _Bounded(name)
        out = new.visit(copy.deepcopy(s)) if name in _reads(s) else s
        bounded |= new.changed
        lines += _lines(text, s, out)
    if not bounded:
        return None  # nothing bounds it: the plain keep-it-a-tensor rewrite says it
    return Made(lines, COUNT_KEPT, (
        "the count stays a tensor (detached, as a Python number is) and `max`/`min` with a number become "
        "`clamp`; every other use of it takes a tensor (arithmetic, not a size, an index or a Python condition)"),
        last=run[-1])


COUNT_GUARD = "empty count as torch.where"


class _ByCount(ast.NodeTransformer):
    """Divisions by the count ``n`` as divisions by ``n.clamp(min=1)``: the branch taken when the
    count is 0 no longer divides by it, but ``torch.where`` computes both (0/0 would send a NaN
    through the gradient of the side not taken)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.op, (ast.Div, ast.FloorDiv)) and _is_name(node.right, self.name):
            node.right = _expr(f"{self.name}.clamp(min=1)")
        return node


def _empty_test(test: ast.expr, name: str) -> bool | None:
    """For ``n == 0`` / ``not n`` / ``n < 1``: True (the body is the empty case); for ``n > 0`` /
    ``n != 0`` / ``n >= 1`` / ``n``: False (the else is); None for another test."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_name(test.operand, name):
        return True
    if _is_name(test, name):
        return False
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and _is_name(test.left, name)
            and isinstance(test.comparators[0], ast.Constant)):
        return None
    op, c = type(test.ops[0]), test.comparators[0].value
    empty = {(ast.Eq, 0), (ast.Lt, 1), (ast.LtE, 0)}
    full = {(ast.NotEq, 0), (ast.Gt, 0), (ast.GtE, 1)}
    return True if (op, c) in empty else False if (op, c) in full else None


def count_guard(stmt: ast.stmt, text: Text) -> _Maker:
    """``n = int(mask.sum())`` then ``if n == 0: x = <empty> else: x = <... / n>`` as ``n`` kept
    a tensor and ``x = torch.where(n == 0, <empty>, <... / n.clamp(min=1)>)``."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    count = _counted_value(stmt.value)
    if count is None:
        return None
    name = stmt.targets[0].id
    block, at = block_of(text.source, stmt)
    nxt = block[at + 1] if at + 1 < len(block) else None
    if not isinstance(nxt, ast.If) or not nxt.orelse:
        return None
    empty_first = _empty_test(nxt.test, name)
    body = (nxt.body, nxt.orelse) if empty_first else (nxt.orelse, nxt.body)
    if empty_first is None or any(len(b) != 1 for b in body):
        return None
    empty, full = body
    if not all(isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               for s in (*empty, *full)) or _target(empty[0]) != _target(full[0]):
        return None
    if name in names_loaded(empty[0].value) or read_later(text.source, stmt, name, after=nxt):  # type: ignore[attr-defined]
        return None  # the count is read elsewhere: it may be wanted as a number
    kept = _ByCount(name).visit(copy.deepcopy(full[0].value))  # type: ignore[attr-defined]
    target = _target(empty[0])
    # int() truncates toward zero (a float count of 2.7 is 2), as .long() does: the test and the division see the same
    truncated = isinstance(stmt.value, ast.Call) and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id == "int"
    lines = [f"{name} = {unparsed(count)}.detach(){'.long()' if truncated else ''}",
             f"{target} = torch.where({name} == 0, {unparsed(empty[0].value)}, {unparsed(kept)})"]  # type: ignore[attr-defined]
    return Made(lines, COUNT_GUARD, (
        "both cases are computed (torch.where) and give tensors of one shape; the count divides as a tensor clamped "
        "to 1, so the empty case's division never runs on 0"), last=nxt)


PADDED = "padded targets to ctc_loss"


def padded_targets(stmt: ast.stmt, text: Text) -> _Maker:
    """``flat = labels.masked_select(mask)`` (Hugging Face's CTC heads: ``labels_mask = labels
    >= 0``) whose only later read is ``ctc_loss``'s targets: ``flat = labels.masked_fill(~mask,
    0)``, the padded ``(batch, S)`` targets ``ctc_loss`` reads row by row up to each row's target
    length (no longest target read back from the data)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    value = stmt.value
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "masked_select"
            and len(value.args) == 1 and not value.keywords):
        return None
    name = stmt.targets[0].id
    fn = function_of(text.source, stmt)
    scope: ast.AST = fn if fn is not None else parsed(text.source)
    reads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    # F.ctc_loss, nn.functional.ctc_loss, torch.ctc_loss: the call's name
    calls = [c for c in ast.walk(scope) if isinstance(c, ast.Call) and _call(c) == "ctc_loss"]
    as_targets = {id(c.args[1]) for c in calls if len(c.args) > 1} | {
        id(k.value) for c in calls for k in c.keywords if k.arg == "targets"}
    if not reads or any(id(n) not in as_targets for n in reads):
        return None  # read as the selected values somewhere else: they are the data's size
    labels, mask = paren(unparsed(value.func.value)), paren(unparsed(value.args[0]))
    return Made([f"{name} = {labels}.masked_fill(~{mask}, 0)"], PADDED, (
        "the labels are (batch, S), each row's selected targets its first ones (padding at the end, as the "
        "-100 Hugging Face pads with), and ctc_loss's target lengths count them (mask.sum(-1)): ctc_loss then "
        "reads the same targets from the padded rows (ctc_loss itself still breaks with tensor lengths: "
        "aten._ctc_loss.Tensor's output shape depends on them)"))


# -- distinct values computed once, spread back by the inverse ------------------------------------

PER_ROW = "every row instead of the distinct ones"


class _Spread(ast.NodeTransformer):
    """``E[inv]`` where ``E`` reads the distinct values ``u`` as ``E`` over ``x`` itself."""

    def __init__(self, u: str, inv: str, x: ast.expr) -> None:
        self.u, self.inv, self.x = u, inv, x
        self.changed = self.bad = False

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.slice, ast.Name) and node.slice.id == self.inv and self.u in names_loaded(node.value) \
                and self.inv not in names_loaded(node.value):
            self.changed = True
            return substituted(node.value, self.u, self.x)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in (self.u, self.inv):
            self.bad = True  # read otherwise: a count of distinct values, the inverse as data
        return node


def distinct_spread(stmt: ast.stmt, text: Text) -> _Maker:
    """``u, inv = torch.unique(x, return_inverse=True)`` then ``f(u, ...)[inv]`` (each read of
    ``u`` and ``inv`` in that shape) as ``f(x, ...)``: every row computed, not each distinct value
    once then spread back (a retrieval tower embedding each distinct item once)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Tuple)
            and len(stmt.targets[0].elts) == 2 and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts)
            and isinstance(stmt.value, ast.Call)):
        return None
    call, f = stmt.value, stmt.value.func
    named = {k.arg: unparsed(k.value) for k in call.keywords}
    if not (isinstance(f, ast.Attribute) and f.attr == "unique" and named.get("return_inverse") == "True"
            and not set(named) - {"return_inverse", "sorted"}):
        return None
    torch_fn = isinstance(f.value, ast.Name) and f.value.id == "torch"
    if len(call.args) != (1 if torch_fn else 0):
        return None
    x = call.args[0] if torch_fn else f.value
    u, inv = (e.id for e in stmt.targets[0].elts)  # type: ignore[attr-defined]
    block, at = block_of(text.source, stmt)
    lines: list[str] = []
    last: ast.stmt | None = None
    pending: list[str] = []  # statements between that read neither: kept as they are
    for s in block[at + 1:]:
        if names_stored(s) & ({u, inv} | names_loaded(x)):
            break  # rebound: what follows reads other values
        if not names_loaded(s) & {u, inv}:
            pending += text.statement_lines(s)
            continue
        spread = _Spread(u, inv, x)
        new = spread.visit(copy.deepcopy(s))
        if spread.bad or not spread.changed:
            return None
        lines += pending + unparsed(new).split("\n")
        pending, last = [], s
    if last is None or any(read_later(text.source, stmt, n, after=last) for n in (u, inv)):
        return None
    return Made(lines, PER_ROW, (
        f"what is computed from the distinct values is computed row by row (a row's value depends on its own "
        f"value only, not on which others are in the batch); it now runs once per row of `{unparsed(x)}`"), last=last)
