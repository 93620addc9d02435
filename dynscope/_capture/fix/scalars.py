"""numpy over Python numbers, as Python's own ``math``.

- ``math instead of numpy over plain numbers``: a schedule computed with numpy's functions of
  plain numbers (consistency models' ``np.ceil(np.sqrt(step / total * ...)).astype(np.int32)``,
  ``np.exp(-c / scales)``, a cosine warm-up's ``np.cos(np.pi * t)``), then read back with
  ``float()``/``int()`` or used as a Python number. Under ``torch.compile`` Dynamo traces numpy
  as tensors, so the number read back is a tensor's value and the graph breaks there. The
  statements that compute what the site reads (followed back through the function) use
  ``math.ceil``, ``math.sqrt``, ``max``... instead: Python numbers throughout, which Dynamo
  folds into constants.

Text only (no torch import); the verifier reruns the patched program (an array among the
values makes ``math`` raise there, and the patch is not verified).
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    contains,
    dtype_name,
    function_of,
    imports,
    names_loaded,
    names_stored,
    numpy_names,
    text_before,
    trailing_comment,
    unparsed,
)

__all__ = ["NUMPY_MATH", "numpy_math"]

NUMPY_MATH = "math instead of numpy over plain numbers"

# numpy's elementwise functions of one number and Python's counterpart of each (the same value
# for a number; math.ceil/floor give an int where numpy gives a float of the same value).
_FUNCS = {
    "ceil": "math.ceil", "floor": "math.floor", "trunc": "math.trunc", "sqrt": "math.sqrt", "exp": "math.exp",
    "expm1": "math.expm1", "log": "math.log", "log2": "math.log2", "log10": "math.log10", "log1p": "math.log1p",
    "sin": "math.sin", "cos": "math.cos", "tan": "math.tan", "tanh": "math.tanh", "sinh": "math.sinh",
    "cosh": "math.cosh", "arcsin": "math.asin", "arccos": "math.acos", "arctan": "math.atan",
    "arctan2": "math.atan2", "hypot": "math.hypot", "isnan": "math.isnan", "isinf": "math.isinf",
    "isfinite": "math.isfinite", "fabs": "math.fabs", "abs": "abs", "absolute": "abs", "maximum": "max",
    "minimum": "min", "float64": "float", "double": "float", "int64": "int", "int32": "int", "intc": "int",
}
_CONSTANTS = {"pi": "math.pi", "e": "math.e", "inf": "math.inf", "nan": "math.nan"}
_ARGS = {"arctan2": 2, "hypot": 2, "maximum": 2, "minimum": 2}  # how many numbers each takes (1 otherwise)
_INTS = {"int", "int8", "int16", "int32", "int64", "intc", "intp", "long", "uint8"}
_FLOATS = {"float", "float64", "double"}


def _reads_numpy(node: ast.AST, np_: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == np_ for n in ast.walk(node))


def _dtype(node: ast.expr, np_: str) -> str | None:
    """"int" or "float" for ``np.int32``, ``int``, ``"int64"``...; None for another dtype."""
    name = dtype_name(node, {np_})
    return "int" if name in _INTS else "float" if name in _FLOATS else None


def _spelled(dotted: str, args: list[ast.expr]) -> ast.Call:
    head, _, attr = dotted.rpartition(".")
    func: ast.expr = ast.Attribute(value=ast.Name(id=head, ctx=ast.Load()), attr=attr, ctx=ast.Load()) if head \
        else ast.Name(id=attr, ctx=ast.Load())
    return ast.Call(func=func, args=args, keywords=[])


class _ToMath(ast.NodeTransformer):
    """numpy's functions of numbers -> math's (``np.clip(x, a, b)`` -> ``min(max(x, a), b)``),
    ``.astype(<int dtype>)`` -> ``int(...)``; ``refused`` names the first numpy use it cannot
    translate (an array made, an axis, a dtype kept)."""

    def __init__(self, np_: str) -> None:
        self.np_ = np_
        self.refused = ""
        self.used_math = False

    def _of_numpy(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self.np_:
            return node.attr
        return None

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        name = self._of_numpy(node)
        if name in _CONSTANTS:
            self.used_math = True
            return _spelled(_CONSTANTS[name], []).func
        if name is not None:
            self.refused = self.refused or f"`{self.np_}.{name}` has no counterpart for a number here"
            return node
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        f = node.func
        name = self._of_numpy(f)
        if name is not None:
            args = [self.visit(a) for a in node.args]
            if node.keywords or any(isinstance(a, ast.Starred) for a in args):
                self.refused = self.refused or f"`{self.np_}.{name}(...)` is called with keywords (an axis, a dtype, out=)"
                return node
            if any(_methods_left(a) for a in args):
                self.refused = self.refused or f"`{self.np_}.{name}(...)` reads a method's result (an array's)"
                return node
            if name == "clip" and len(args) == 3:
                return _spelled("min", [_spelled("max", [args[0], args[1]]), args[2]])
            if name in _FUNCS and len(args) == _ARGS.get(name, 1):
                self.used_math = self.used_math or _FUNCS[name].startswith("math.")
                return _spelled(_FUNCS[name], args)
            self.refused = self.refused or f"`{self.np_}.{name}(...)` has no counterpart for a number here"
            return node
        if isinstance(f, ast.Attribute) and f.attr == "astype":
            kind = _dtype(node.args[0], self.np_) if len(node.args) == 1 and not node.keywords else None
            if kind is None:  # float32, a string dtype, copy=: a number of another precision
                self.refused = self.refused or "`.astype()` to a dtype Python's numbers do not have"
                return node
            value = self.visit(f.value)
            if _methods_left(value):
                self.refused = self.refused or "`.astype()` of an array's value"
                return node
            return _spelled(kind, [value])
        return self.generic_visit(node)


def _simple(s: ast.stmt) -> bool:
    return isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr))


def _feeding(fn: ast.AST, stmt: ast.stmt, np_: str) -> list[ast.stmt]:
    """The simple statements of the function, up to the site, that compute with numpy a name
    the site reads (followed back through the statements that read those names in turn)."""
    before = sorted((s for s in ast.walk(fn) if isinstance(s, ast.stmt) and _simple(s) and s.lineno < stmt.lineno
                     and not any(isinstance(d, (ast.FunctionDef, ast.Lambda)) and d is not fn and contains(d, s)
                                 for d in ast.walk(fn))), key=lambda s: s.lineno)
    wanted = names_loaded(stmt.test if isinstance(stmt, (ast.If, ast.While)) else stmt)
    grew = True
    while grew:
        grew = False
        for s in before:
            if names_stored(s) & wanted and not names_loaded(s) <= wanted:
                wanted |= names_loaded(s)
                grew = True
    chain = [s for s in before if names_stored(s) & wanted]
    if any(_from_tensor(s) for s in chain):
        return []  # an array made from a tensor (``t.numpy()``): the round trip's rewrite, not this one
    return [s for s in chain if _reads_numpy(s, np_)] + ([stmt] if _simple(stmt) and _reads_numpy(stmt, np_) else [])


_FROM_TENSOR = {"numpy", "tolist", "item", "cpu", "detach"}


def _from_tensor(s: ast.stmt) -> bool:
    """The statement reads a tensor's values back (``t.numpy()``, ``t.tolist()``...)."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _FROM_TENSOR
               for n in ast.walk(s))


def _methods_left(node: ast.AST) -> bool:
    """A method is still called (``abs(a).max()``): the value is an array, not a number."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and not (isinstance(n.func.value, ast.Name) and n.func.value.id == "math") for n in ast.walk(node))


def numpy_math(stmt: ast.stmt, text: Text) -> Made | str | None:
    """The site's numbers computed with ``math`` where numpy computed them from Python numbers."""
    found = numpy_names(text.source, stmt)
    np_ = found[0] if found is not None else None
    fn = function_of(text.source, stmt)
    if np_ is None or fn is None or not (_simple(stmt) or isinstance(stmt, (ast.If, ast.While))):
        return None
    if not _simple(stmt) and _reads_numpy(stmt, np_):
        return None  # numpy in a test, or in the body of the site: not rewritten as a whole
    changed = _feeding(fn, stmt, np_)
    if not changed:
        return None
    block, at = block_of(text.source, stmt)
    first = next((s for s in block[: at + 1] if any(contains(s, c) for c in changed)), None)
    if first is None or any(not any(contains(s, c) for s in block[: at + 1]) for c in changed):
        return None  # computed in an outer block than the site's: not followed
    fix = _ToMath(np_)
    new = {id(c): fix.visit(copy.deepcopy(c)) for c in changed}
    if fix.refused:
        return None  # an array among them (np.array, an axis, a method): not numbers, another rewrite's
    lines = text.lines[first.lineno - 1: stmt.end_lineno or stmt.lineno]
    for c in sorted(changed, key=lambda c: c.lineno, reverse=True):
        own = text.lines[c.lineno - 1]
        indent = text_before(own, c.col_offset)
        comment = trailing_comment(text.source, c)
        body = [indent + ln for ln in unparsed(new[id(c)]).split("\n")]
        body[-1] += comment
        lines[c.lineno - first.lineno: (c.end_lineno or c.lineno) - first.lineno + 1] = body
    base = text_before(text.lines[first.lineno - 1], first.col_offset)
    if any(ln.strip() and not ln.startswith(base) for ln in lines):
        return None  # a line of the span less indented than its first (a string over lines)
    out = [ln[len(base):] for ln in lines]
    if fix.used_math and not imports(text.source, "math"):
        if block is not fn.body:
            return "the numbers stay numpy's: the file does not `import math` (added at the function's top only)"
        out = ["import math", *out]
    return Made(out, NUMPY_MATH, (
        "the values numpy computes here are Python numbers, not arrays (an array would make math raise, and the patch "
        "would not verify); math.ceil and math.floor give an int where numpy gives a float of the same value"),
        first=first if first is not stmt else None, last=stmt if first is not stmt else None)
