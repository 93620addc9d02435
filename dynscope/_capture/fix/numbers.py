"""Numbers read back from a tensor, kept tensors where they are used.

- ``per-element list as tensor ops``: ``[f(c) for c in t.tolist()]`` (in the site's statement,
  or ``vals = t.tolist()`` and a ``torch.tensor([f(c) for c in vals])`` after it) where ``f``
  is arithmetic, ``math.*``, ``max``/``min`` with a number, ``float``/``int``/``abs`` or a
  conditional expression, as ``f`` over the tensor (``math.log1p`` -> ``torch.log1p``,
  ``max(c, 1)`` -> ``.clamp(min=1)``, ``a if c > 0 else b`` -> ``torch.where``); a
  ``torch.tensor(that list, dtype=d)`` after it becomes ``.to(d)``.
- ``pointer kept a tensor``: ``p = int(self.ptr)`` whose uses are a ring buffer's writes
  (``buf[:, p:p + n] = v``) and the pointer's own update, as ``buf.index_copy_(1, (p +
  torch.arange(n)) % buf.shape[1], v)`` with ``p`` a 0-dim tensor; a write of a number from
  the pointer on (``scores[:, p:] = -inf``) as ``masked_fill_`` of the positions at or past it.
- ``index by a one-element tensor``: ``a[t]`` where ``t`` is a 0-dim tensor (a diffusion
  scheduler's ``self.alphas_cumprod[timestep]``: indexing reads ``t`` as a number) as
  ``a[t.reshape(1)][0]``, a gather of the same row.
- ``length mask instead of per-row slices``: ``for b, n in enumerate(lengths.tolist()):
  x[b, n:] = v`` (or ``x[b, :n]``) as one ``x.masked_fill_`` of the positions at or past (or
  before) each row's length; ``for row, n in zip(X, L): row[:n] = v`` (rows zipped with their
  lengths) the same over ``X``.
- ``gather of windows instead of a loop over rows``: ``for i in range(n): out[i] = x[i, :,
  s[i]:s[i] + k]`` as one ``torch.gather`` of each row's window.
- ``gather instead of a roll by a tensor``: ``torch.roll(x, -int(t), -1)`` as a gather of each
  position's source, the shift a 0-dim tensor.
- ``int() of a numpy number instead of its item``: ``np.ceil(np.log(n)).astype("int").item()``
  as ``int(np.ceil(np.log(n)))``.
- ``every index visited instead of the nonzero ones``: ``hit = torch.nonzero(c, as_tuple=True)[0].tolist()``
  read only by ``for i in hit:`` loops that write through an index reading ``i``, as
  ``hit = range(c.shape[0])``.
- ``one index instead of picks stacked``: ``torch.stack([x[:, idx[i]] for i in range(k)],
  dim=-1)`` as ``x[:, idx[:k]]``.

Text only (no torch import); the verifier reruns the patched program.
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    dtype_name,
    enumerated_list,
    function_of,
    holder_of,
    names_loaded,
    names_stored,
    numpy_names,
    paren,
    parsed,
    read_later,
    substituted,
    transformed_statement,
    unparsed,
)

__all__ = ["ELEMENTS", "INDEX", "KEPT", "LENGTHS", "LIST", "NUMPY_ITEM", "NUMPY_KEPT", "PICKED", "POINTER", "PREFIX", "RANGED", "ROLLED", "SLICED", "TRIM",
           "VISITED", "WINDOWS", "ZIPPED", "indexed_by_tensor", "length_fill", "lengths_kept", "loop_over_elements",
           "nonzero_visited", "numpy_item", "numpy_kept", "per_element_list", "pointer_kept", "prefix_sums", "ranged_fill", "rolled", "sliced_write", "stacked_picks",
           "trim_dropped", "windowed_rows", "zipped_fill"]

LIST = "per-element list as tensor ops"
NUMPY_ITEM = "int() of a numpy number instead of its item"
VISITED = "every index visited instead of the nonzero ones"
POINTER = "pointer kept a tensor"
INDEX = "index by a one-element tensor"
LENGTHS = "length mask instead of per-row slices"

_MATH = {"sqrt", "exp", "log", "log2", "log10", "log1p", "expm1", "tanh", "sin", "cos", "tan", "atan", "erf",
         "floor", "ceil", "fabs", "pow"}


def _expr(src: str) -> ast.expr:
    return ast.parse(src, mode="eval").body


def _method_of(node: ast.expr, name: str) -> str:
    """``node.name()`` as Python writes it (parentheses only where precedence needs them)."""
    return unparsed(ast.Call(func=ast.Attribute(value=node, attr=name), args=[], keywords=[]))


def _tolist_of(node: ast.AST) -> ast.expr | None:
    """``t`` of ``t.tolist()``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "tolist" \
            and not node.args and not node.keywords:
        return node.func.value
    return None


class _Elementwise(ast.NodeTransformer):
    """An element's expression as the same expression over the whole tensor; ``bad`` when the
    element is used otherwise (an index, a call of something else)."""

    def __init__(self, var: str, tensor: ast.expr) -> None:
        self.var, self.tensor = var, tensor
        self.bad = False

    def _uses(self, node: ast.AST) -> bool:
        return self.var in names_loaded(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.tensor) if node.id == self.var else node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if self._uses(node):
            self.bad = True
        return node

    def _refused(self, node: ast.AST) -> ast.AST:
        # Not elementwise over a tensor: a comprehension over the element (a row iterated: ColBERT's
        # [[x not in skiplist for x in d] for d in ids.tolist()]), `in` (membership in a list, not
        # equality per element), `and`/`or` (Python's truth of a whole tensor).
        if self._uses(node):
            self.bad = True
        return node

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        return self._refused(node)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> ast.AST:
        return self._refused(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        return self._refused(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        if any(isinstance(op, (ast.In, ast.NotIn, ast.Is, ast.IsNot)) for op in node.ops):
            return self._refused(node)
        return self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        if not self._uses(node.test):
            return self.generic_visit(node)
        out = self.generic_visit(node)
        assert isinstance(out, ast.IfExp)
        return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="where"),
                        args=[out.test, out.body, out.orelse], keywords=[])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if not self._uses(node):
            return node
        f = node.func
        args = [self.visit(a) for a in node.args]
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "math" \
                and f.attr in _MATH and not node.keywords:
            name = {"fabs": "abs"}.get(f.attr, f.attr)
            return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr=name), args=args, keywords=[])
        if isinstance(f, ast.Name) and f.id in ("max", "min") and len(args) == 2 and not node.keywords:
            (t, other) = (args[0], args[1]) if self._uses(node.args[0]) else (args[1], args[0])
            if self._uses(node.args[0]) and self._uses(node.args[1]):
                func = "maximum" if f.id == "max" else "minimum"
                return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr=func), args=args, keywords=[])
            bound = "min" if f.id == "max" else "max"
            return ast.Call(func=ast.Attribute(value=t, attr="clamp"), args=[], keywords=[ast.keyword(bound, other)])
        if isinstance(f, ast.Name) and f.id in ("float", "int", "abs") and len(args) == 1 and not node.keywords:
            method = {"float": "float", "int": "long", "abs": "abs"}[f.id]
            return ast.Call(func=ast.Attribute(value=args[0], attr=method), args=[], keywords=[])
        self.bad = True
        return node


def _over_tensor(comp: ast.ListComp, tensor: ast.expr) -> ast.expr | None:
    """``[f(c) for c in ...]`` as ``f`` over ``tensor``; None when it is not elementwise."""
    if len(comp.generators) != 1:
        return None
    gen = comp.generators[0]
    if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name):
        return None
    fix = _Elementwise(gen.target.id, tensor)
    out = fix.visit(copy.deepcopy(comp.elt))
    if fix.bad or gen.target.id not in names_loaded(comp.elt):
        return None
    assert isinstance(out, ast.expr)
    return out


def _tensor_call(node: ast.AST) -> ast.Call | None:
    """``torch.tensor(x, ...)`` (or ``torch.as_tensor``)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("tensor", "as_tensor") \
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch" and len(node.args) == 1:
        return node
    return None


def _as_tensor_of(call: ast.Call, value: ast.expr) -> ast.expr:
    """``torch.tensor(list, dtype=d)`` of a list that is now a tensor: ``value.to(d)``."""
    dtype = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if dtype is None:
        return value
    return ast.Call(func=ast.Attribute(value=value, attr="to"), args=[dtype], keywords=[])


_NOTE = ("the list is only made into a tensor (or read elementwise): each element's arithmetic runs on the "
         "tensor in its dtype (float32 where Python computes in float64), detached as .tolist() is")


class _Listed(ast.NodeTransformer):
    """``[f(c) for c in SRC]`` (``SRC`` is ``t.tolist()`` or the name holding it) as ``f`` over
    the tensor; ``torch.tensor`` around it dropped."""

    def __init__(self, source: ast.expr | None, name: str | None, tensor: ast.expr) -> None:
        self.source, self.name, self.tensor = source, name, tensor
        self.changed = False
        self.replaced = 0  # comprehensions over the list made tensor ops
        self.bad = False

    def _ours(self, it: ast.expr) -> bool:
        if self.name is not None:
            return isinstance(it, ast.Name) and it.id == self.name
        return self.source is not None and unparsed(it) == unparsed(self.source)

    def _picked(self, node: ast.Call) -> ast.expr | None:
        """``torch.stack([h[i, e] for i, e in enumerate(SRC)])``: row i's entry at e, for every
        row at once (``h[torch.arange(n), SRC]``)."""
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "stack" and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch" and len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], ast.ListComp) and len(node.args[0].generators) == 1):
            return None
        comp = node.args[0]
        gen = comp.generators[0]
        it, target, elt = gen.iter, gen.target, comp.elt
        if gen.ifs or not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate"
                           and len(it.args) == 1 and self._ours(it.args[0])):
            return None
        if not (isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts)
                and isinstance(elt, ast.Subscript) and isinstance(elt.slice, ast.Tuple) and len(elt.slice.elts) >= 2):
            return None
        i, e = (x.id for x in target.elts)  # type: ignore[attr-defined]
        first, second, *rest = elt.slice.elts
        # The entry: e itself, or arithmetic of e and numbers (``n - 1``: each row's last position)
        arithmetic = all(isinstance(n, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.operator, ast.unaryop,
                                        ast.expr_context)) for n in ast.walk(second))
        if not (isinstance(first, ast.Name) and first.id == i and arithmetic and names_loaded(second) == {e}
                and all(isinstance(r, ast.Slice) and r.lower is None and r.upper is None and r.step is None for r in rest)
                and not names_loaded(elt.value) & {i, e}):
            return None
        t = unparsed(self.tensor)
        rows = f"torch.arange({t}.shape[0], device={t}.device)"
        entry = unparsed(substituted(second, e, self.tensor))
        return _expr(f"{unparsed(elt.value)}[{rows}, {entry}{''.join(', :' for _ in rest)}]")

    def visit_Call(self, node: ast.Call) -> ast.AST:
        picked = self._picked(node)
        if picked is not None:
            self.changed = True
            self.replaced += 1
            return picked
        call = _tensor_call(node)
        if call is not None and isinstance(call.args[0], ast.ListComp):
            inner = self.visit(call.args[0])
            if inner is not call.args[0]:
                assert isinstance(inner, ast.expr)
                return _as_tensor_of(call, inner)
        return self.generic_visit(node)

    def visit_ListComp(self, node: ast.ListComp) -> ast.AST:
        if len(node.generators) == 1 and self._ours(node.generators[0].iter):
            out = _over_tensor(node, self.tensor)
            if out is None:
                self.bad = True
                return node
            self.changed = True
            self.replaced += 1
            return out
        return self.generic_visit(node)


def per_element_list(stmt: ast.stmt, text: Text) -> Made | None:
    """``[f(c) for c in t.tolist()]`` as ``f`` over ``t``: see the module's docstring."""
    if not isinstance(stmt, (ast.Assign, ast.Return, ast.Expr, ast.AugAssign)):
        return None
    block, at = block_of(text.source, stmt)
    # 1. the comprehension at the site: [f(c) for c in t.tolist()]
    for comp in (n for n in ast.walk(stmt) if isinstance(n, ast.ListComp)):
        it = comp.generators[0].iter if comp.generators else None
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and len(it.args) == 1:
            it = it.args[0]  # enumerate(t.tolist()): row i's entry at each element (see _picked)
        src = _tolist_of(it) if it is not None else None
        if src is None or it is None:
            continue
        tensor = ast.Call(func=ast.Attribute(value=src, attr="detach"), args=[], keywords=[])
        fix = _Listed(it, None, tensor)
        new = fix.visit(copy.deepcopy(stmt))
        if fix.bad or not fix.changed:
            return None
        lines = unparsed(new).split("\n")
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        nxt = block[at + 1] if at + 1 < len(block) else None
        # weights = torch.tensor(weights, dtype=d) next: the list is a tensor already
        if isinstance(target, ast.Name) and isinstance(nxt, ast.Assign) and len(nxt.targets) == 1:
            call = _tensor_call(nxt.value)
            if call is not None and isinstance(call.args[0], ast.Name) and call.args[0].id == target.id:
                again = copy.deepcopy(nxt)
                again.value = _as_tensor_of(call, ast.Name(target.id))
                return Made([*lines, unparsed(again)], LIST, _NOTE, last=nxt)
        return Made(lines, LIST, _NOTE)
    # 2. vals = t.tolist() at the site, read after only by comprehensions made into tensors
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    src = _tolist_of(stmt.value)
    if src is None:
        return None
    name = stmt.targets[0].id
    out = [f"{name} = {_method_of(src, 'detach')}"]
    fix = _Listed(None, name, ast.Name(name, ast.Load()))
    last = None
    for s in block[at + 1:]:
        if name not in names_loaded(s):
            out += text.statement_lines(s)
            continue
        fix.changed, fix.replaced = False, 0
        new = fix.visit(copy.deepcopy(s))
        reads = sum(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(s))
        if fix.bad or not fix.changed or reads != fix.replaced:
            return None  # read otherwise than by a comprehension over it
        out += unparsed(new).split("\n")
        last = s
        if read_later(text.source, stmt, name, after=s):
            continue
        break
    if last is None or read_later(text.source, stmt, name, after=last):
        return None
    return Made(out, LIST, _NOTE, last=last)


# -- a ring buffer's pointer -------------------------------------------------------------------


def _read_number(value: ast.expr) -> ast.expr | None:
    """``t`` of ``int(t)``, ``t.item()``, ``int(t.item())``."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "int" \
            and len(value.args) == 1 and not value.keywords:
        inner = value.args[0]
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "item":
            return inner.func.value
        return inner
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "item" \
            and not value.args:
        return value.func.value
    return None


def _full(node: ast.expr) -> bool:
    return isinstance(node, ast.Slice) and node.lower is None and node.upper is None and node.step is None


def _slice_write(target: ast.expr, name: str) -> tuple[ast.expr, int, ast.Slice] | None:
    """``buf[:, p:p + n]`` -> (buf, the dim, the slice): one slice that reads ``p``, full ones
    before it, nothing after it but full slices."""
    if not isinstance(target, ast.Subscript):
        return None
    parts = list(target.slice.elts) if isinstance(target.slice, ast.Tuple) else [target.slice]
    ours = [i for i, p in enumerate(parts) if isinstance(p, ast.Slice) and name in names_loaded(p)]
    if len(ours) != 1 or not all(_full(p) for i, p in enumerate(parts) if i != ours[0]):
        return None
    if name in names_loaded(target.value):
        return None
    sl = parts[ours[0]]
    assert isinstance(sl, ast.Slice)
    return target.value, ours[0], sl


def _width(sl: ast.Slice, name: str) -> ast.expr | None:
    """``n`` of ``p : p + n``."""
    if not (isinstance(sl.lower, ast.Name) and sl.lower.id == name and sl.step is None):
        return None
    up = sl.upper
    if isinstance(up, ast.BinOp) and isinstance(up.op, ast.Add) and isinstance(up.left, ast.Name) \
            and up.left.id == name and name not in names_loaded(up.right):
        return up.right
    return None


def pointer_kept(stmt: ast.stmt, text: Text) -> Made | None:
    """``p = int(self.ptr)`` then ring-buffer writes at ``p``: see the module's docstring."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    src = _read_number(stmt.value)
    if src is None:
        return None
    name = stmt.targets[0].id
    block, at = block_of(text.source, stmt)
    out = [f"{name} = {_method_of(src, 'detach')}.clone().reshape(())"]
    wrote, pending = False, []
    last: ast.stmt = stmt
    for s in block[at + 1:]:
        if name not in names_loaded(s):
            pending += text.statement_lines(s)
            continue
        out += pending
        pending, last = [], s
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and name in names_loaded(s.targets[0]):
            found = _slice_write(s.targets[0], name)
            if found is None:
                return None
            buf, dim, sl = found
            b = unparsed(buf)
            width = _width(sl, name)
            if width is not None:
                w = unparsed(width)
                index = f"({name} + torch.arange({w}, device={b}.device)) % {b}.shape[{dim}]"
                out.append(f"{b}.index_copy_({dim}, {index}, {unparsed(s.value)})")
            elif isinstance(s.value, (ast.Constant, ast.UnaryOp, ast.Call)) and not names_loaded(s.value) - {"float"}:
                pos = f"torch.arange({b}.shape[{dim}], device={b}.device)"
                bounds = [f"{pos} {op} {unparsed(v)}" for op, v in ((">=", sl.lower), ("<", sl.upper)) if v is not None]
                if sl.step is not None or not bounds:
                    return None
                where = bounds[0] if len(bounds) == 1 else " & ".join(f"({x})" for x in bounds)
                out.append(f"{b}.masked_fill_(({where}).view(-1, *[1] * ({b}.dim() - {dim + 1})), "
                           f"{unparsed(s.value)})")
            else:
                return None
            wrote = True
            continue
        if isinstance(s, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            return None
        out += text.statement_lines(s)  # arithmetic on the pointer and its update: a tensor serves
    if not wrote:
        return None
    return Made(out, POINTER, (
        "the number is a position in a buffer, used only to write there (a slice of known width, or from the "
        "position on) and in arithmetic; a write past the end wraps around (the slice would have been cut short "
        "and the assignment raised)"), last=last)


# -- a 0-dim tensor as an index -----------------------------------------------------------------

#: Calls that read a number back themselves: a statement with one breaks there, not at an index.
_READERS = frozenset({"item", "tolist", "int", "float", "bool", "len", "range"})


class _Gathered(ast.NodeTransformer):
    """``a[t]`` (``t`` a plain name or attribute, not a slice, a tuple or a number) as
    ``a[t.reshape(1)][0]``."""

    def __init__(self, lists: frozenset[str] = frozenset()) -> None:
        self.changed = 0
        self.lists = lists  # names bound to a Python list of tensors (a comprehension or a literal)
        self.stacked = False

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        index = node.slice
        if isinstance(node.ctx, ast.Load) and isinstance(index, (ast.Name, ast.Attribute)) \
                and isinstance(node.value, ast.Name) and node.value.id in self.lists:
            # perms[i] of a list of tensors: the list stacked, the row the tensor index gathers
            self.changed += 1
            self.stacked = True
            stack = ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="stack"), args=[node.value], keywords=[])
            one = ast.Call(func=ast.Attribute(value=index, attr="reshape"), args=[ast.Constant(1)], keywords=[])
            return ast.Subscript(value=ast.Subscript(value=stack, slice=one, ctx=ast.Load()), slice=ast.Constant(0),
                                 ctx=ast.Load())
        if isinstance(node.ctx, ast.Load) and isinstance(index, (ast.Name, ast.Attribute)):
            self.changed += 1
            one = ast.Call(func=ast.Attribute(value=index, attr="reshape"), args=[ast.Constant(1)], keywords=[])
            return ast.Subscript(value=ast.Subscript(value=node.value, slice=one, ctx=ast.Load()),
                                 slice=ast.Constant(0), ctx=ast.Load())
        return node


def indexed_by_tensor(stmt: ast.stmt, text: Text) -> Made | None:
    """A statement whose break is an index read back as a number: ``alpha = self.alphas[t]``
    with ``t`` a 0-dim tensor, and nothing else in it reading a number (``.item()``, ``int()``,
    ``len()``...), each ``a[name]`` as ``a[name.reshape(1)][0]``: the same element, gathered."""
    if not isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr)) or stmt.value is None:
        return None
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in _READERS:
                return None
    fn = function_of(text.source, stmt)
    bound: dict[str, list[ast.expr]] = {}
    for n in ast.walk(fn if fn is not None else parsed(text.source)):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    bound.setdefault(t.id, []).append(n.value)
    lists = frozenset(k for k, vs in bound.items() if len(vs) == 1 and isinstance(vs[0], (ast.ListComp, ast.List)))
    gather = _Gathered(lists)
    value = gather.visit(copy.deepcopy(stmt.value))
    if not gather.changed:
        return None
    new = copy.deepcopy(stmt)
    new.value = value
    stacked = ("; the list indexed holds tensors of one shape (stacked, the row picked is the element)"
               if gather.stacked else "")
    return Made(unparsed(new).split("\n"), INDEX, (
        "the index is a 0-dim integer tensor (a Python int has no reshape: not verified); a negative one counts "
        "from the end as before" + stacked))


# -- per-row slices by lengths read back --------------------------------------------------------


def length_fill(stmt: ast.stmt, text: Text) -> Made | None:
    """``for b, n in enumerate(<lengths>.tolist()): x[b, n:] = v`` (``x[b, :n] = v``; nothing
    else in the loop, ``v`` reading neither ``b`` nor ``n``) as ``x.masked_fill_(<positions at
    or past (before) each row's length>, v)``, the mask shaped to ``x``'s trailing dimensions."""
    loop = enumerated_list(stmt)
    write = stmt.body[0] if loop is not None else None  # type: ignore[attr-defined]
    if loop is None or not (isinstance(write, ast.Assign) and len(write.targets) == 1):
        return None
    b, n, lengths = loop
    target = write.targets[0]
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, (ast.Name, ast.Attribute))
            and isinstance(target.slice, ast.Tuple) and len(target.slice.elts) == 2):
        return None
    row, cols = target.slice.elts
    if not (isinstance(row, ast.Name) and row.id == b and isinstance(cols, ast.Slice) and cols.step is None):
        return None
    past = isinstance(cols.lower, ast.Name) and cols.lower.id == n and cols.upper is None
    before = isinstance(cols.upper, ast.Name) and cols.upper.id == n and cols.lower is None
    if not (past or before) or {b, n} & names_loaded(write.value):
        return None
    x, lens, v = text.of(target.value), text.of(lengths), text.of(write.value)
    positions = f"torch.arange({x}.shape[1], device={x}.device)"
    mask = f"({positions} {'>=' if past else '<'} {lens}[:, None])"
    return Made([_masked_write(x, mask, v)], LENGTHS, (
        f"`{lens}` holds one length per row of `{x}` (its first dimension), the loop covers every row"))


# -- a list of numbers read back and only measured ------------------------------------------------

KEPT = "list of numbers kept a tensor"
_MEASURES = {"max": "max", "min": "min", "sum": "sum"}


class _Measured(ast.NodeTransformer):
    """Reads of a list ``name`` that was a tensor's ``.tolist()`` as reads of the tensor:
    ``len(L)`` -> ``L.shape[0]``, ``max(L)`` -> ``L.max()`` (``min``, ``sum``; an ``int(...)``
    around it dropped inside a comparison, where a 0-dim tensor compares the same), ``x.new(L)``
    -> ``L.to(dtype=x.dtype, device=x.device)``, ``torch.tensor(L)`` -> ``torch.as_tensor(L).clone()``;
    ``bad`` when it is read any other way (iterated, indexed, tested as a list)."""

    def __init__(self, name: str) -> None:
        self.name, self.bad, self.used = name, False, False

    def _is_list(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id == self.name

    def _measure(self, node: ast.AST) -> ast.expr | None:
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 1
                and not node.keywords and self._is_list(node.args[0])):
            return None
        if node.func.id == "len":
            return _expr(f"{self.name}.shape[0]")
        if node.func.id in _MEASURES:
            return _expr(f"{self.name}.{_MEASURES[node.func.id]}()")
        return None

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        sides: list[ast.expr] = [node.left, *node.comparators]
        for i, side in enumerate(sides):
            arg = side.args[0] if isinstance(side, ast.Call) and len(side.args) == 1 else None
            if (isinstance(side, ast.Call) and isinstance(side.func, ast.Name) and side.func.id in ("int", "float")
                    and not side.keywords and isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name)
                    and arg.func.id in _MEASURES):
                inner = self._measure(arg)
                if inner is not None:
                    sides[i] = inner
                    self.used = True
                    continue
            sides[i] = self.visit(side)
        node.left, node.comparators = sides[0], sides[1:]
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        made = self._measure(node)
        if made is not None:
            self.used = True
            return made
        f = node.func
        if len(node.args) == 1 and self._is_list(node.args[0]):
            if isinstance(f, ast.Attribute) and f.attr == "new" and not node.keywords:
                self.used = True
                x = unparsed(self.visit(f.value))
                return _expr(f"{self.name}.to(dtype={x}.dtype, device={x}.device, copy=True)")
            if _tensor_call(node) is not None:  # torch.tensor(L), torch.as_tensor(L)
                self.used = True
                made = ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="as_tensor"),
                                args=node.args, keywords=node.keywords)
                # a copy, as torch.tensor(list) made one (as_tensor of a tensor is the tensor)
                return ast.Call(func=ast.Attribute(value=made, attr="clone"), args=[], keywords=[])
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.name:
            self.bad = True  # read as a list: iterated, indexed, passed on
        return node


def _list_guard(source: str, stmt: ast.stmt, name: str) -> ast.If | None:
    """The ``if not isinstance(name, list):`` whose body is only ``stmt``."""
    node = holder_of(source, stmt)
    if not (isinstance(node, ast.If) and node.body == [stmt] and not node.orelse):
        return None
    t = node.test
    guarded = (isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
               and unparsed(t.operand) in (f"isinstance({name}, list)", f"isinstance({name}, (list, tuple))"))
    return node if guarded else None


def lengths_kept(stmt: ast.stmt, text: Text) -> Made | None:
    """``L = t.tolist()`` (also under ``if not isinstance(L, list):``, espnet's ``make_pad_mask``)
    whose later reads only measure it (``len``, ``max``, ``min``, ``sum``) or make a tensor of it
    again (``x.new(L)``, ``torch.tensor(L)``): ``L`` kept a tensor, each read the tensor's own."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    tensor = _tolist_of(stmt.value)
    if tensor is None:
        return None
    guard = _list_guard(text.source, stmt, name)
    first: ast.stmt = guard if guard is not None else stmt
    if guard is not None:
        # a list given stays one too: as_tensor makes a tensor of either
        kept = substituted(tensor, name, _expr(f"torch.as_tensor({name})"))
    else:
        kept = tensor
    block, at = block_of(text.source, first)
    out = [f"{name} = {unparsed(kept)}"]
    last: ast.stmt | None = None
    pending: list[str] = []
    for s in block[at + 1:]:
        if name not in names_loaded(s):
            if name in names_stored(s):
                break
            pending += text.statement_lines(s)
            continue
        fix = _Measured(name)
        new = fix.visit(copy.deepcopy(s))
        if fix.bad or not fix.used or name in names_stored(s):
            return None
        out += pending + unparsed(new).split("\n")
        pending, last = [], s
    if last is None or read_later(text.source, first, name, after=last):
        return None
    return Made(out, KEPT, (
        f"`{name}` held one number per element of a 1-D tensor; it is that tensor now (a list given in its "
        "place is made one), and every read of it measures it or makes a tensor of it again"),
        first=first, last=last)


# -- a loop over a tensor's numbers, its results gathered and made a tensor ----------------------

ELEMENTS = "loop over the tensor's elements"


class _Stacked(ast.NodeTransformer):
    """``torch.tensor(L, dtype=d)`` (``torch.as_tensor``) of a list the loop filled with 0-dim
    tensors as ``torch.stack(L).to(d)``."""

    def __init__(self, lists: set[str]) -> None:
        self.lists, self.changed = lists, False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        call = _tensor_call(node)
        if call is not None and isinstance(call.args[0], ast.Name) and call.args[0].id in self.lists \
                and all(k.arg == "dtype" for k in call.keywords):
            self.changed = True
            return _as_tensor_of(call, _expr(f"torch.stack({call.args[0].id})"))
        return node


def _element_use_ok(body: list[ast.stmt], var: str) -> bool:
    """The loop's number is only computed with: never a test, an index, a size, a count or a
    Python conversion (where a 0-dim tensor does not serve as the number did)."""
    for node in (n for s in body for n in ast.walk(s)):
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)) and var in names_loaded(node.test):
            return False
        if isinstance(node, ast.Subscript) and var in names_loaded(node.slice):
            return False
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("range", "int", "len", "bool", "str", "round", "format")
                and any(var in names_loaded(a) for a in node.args)):
            return False
        if isinstance(node, (ast.JoinedStr, ast.FormattedValue)) and var in names_loaded(node):
            return False
        if isinstance(node, (ast.For, ast.While, ast.With, ast.Try, ast.Return, ast.Break, ast.Continue)):
            return False
    return True


def loop_over_elements(stmt: ast.stmt, text: Text) -> Made | None:
    """``for r in reversed(t.tolist()):`` (or ``for r in t.tolist():``) whose body only
    computes with ``r`` and appends to lists (a discounted return, step by step), the lists made
    tensors after it by ``torch.tensor(L, dtype=d)``: the loop over ``t``'s elements as 0-dim
    tensors (``list(t.detach().unbind(0))``), each list made a tensor by ``torch.stack``."""
    if not (isinstance(stmt, ast.For) and not stmt.orelse and isinstance(stmt.target, ast.Name)):
        return None
    it = stmt.iter
    backwards = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "reversed" \
        and len(it.args) == 1 and not it.keywords
    tensor = _tolist_of(it.args[0] if backwards else it)  # type: ignore[attr-defined]
    var = stmt.target.id
    if tensor is None or not _element_use_ok(stmt.body, var):
        return None
    lists = {n.func.value.id for s in stmt.body for n in ast.walk(s)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "append"
             and isinstance(n.func.value, ast.Name)}
    if not lists:
        return None
    elements = f"list({paren(unparsed(tensor))}.detach().unbind(0))"
    head = f"for {var} in {'reversed(' + elements + ')' if backwards else elements}:"
    lines = [head, *(text.unit + ln for ln in text.body_lines(stmt.body))]
    block, at = block_of(text.source, stmt)
    last: ast.stmt | None = None
    pending: list[str] = []
    for s in block[at + 1:]:
        touched = names_loaded(s) & lists
        if not touched:
            if names_stored(s) & lists:
                break
            pending += text.statement_lines(s)
            continue
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute) \
                and s.value.func.attr == "reverse" and not s.value.args:
            pending += text.statement_lines(s)  # L.reverse(): a list of tensors reverses the same
            continue
        fix = _Stacked(lists)
        new = fix.visit(copy.deepcopy(s))
        if not fix.changed or _read_unstacked(new, lists):
            return None  # a list read otherwise too (its length, an element): it holds tensors now
        lines += pending + unparsed(new).split("\n")
        pending, last = [], s
        if not any(read_later(text.source, stmt, n, after=s) for n in lists):
            break
    if last is None or any(read_later(text.source, stmt, n, after=last) for n in lists):
        return None
    return Made(lines, ELEMENTS, (
        f"`{var}` is one element of a 1-D tensor, used only in arithmetic (a 0-dim tensor serves as the number did, "
        "in the tensor's dtype where Python computed in float64); each list it fills is only made a tensor"),
        last=last)


def _read_unstacked(node: ast.AST, lists: set[str]) -> bool:
    """Whether ``node`` reads one of ``lists`` other than as ``torch.stack(L)``."""
    stacked = {id(a) for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == "stack" for a in n.args if isinstance(a, ast.Name)}
    return any(isinstance(n, ast.Name) and n.id in lists and isinstance(n.ctx, ast.Load) and id(n) not in stacked
               for n in ast.walk(node))




# -- a batch trimmed to its longest row ------------------------------------------------------------

TRIM = "trim to the longest row dropped"


def _read_back(value: ast.expr) -> ast.expr | None:
    """``t`` of ``int(t)`` or ``t.item()`` (the number read back)."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "int" \
            and len(value.args) == 1 and not value.keywords:
        return value.args[0]
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "item" \
            and not value.args:
        return value.func.value
    return None


def _trimmed_dim(node: ast.Subscript, name: str) -> int | None:
    """The dimension ``x[..., :name]`` (``x[:, :name]``, ``x[:name]``) trims; None for another read."""
    sl = node.slice
    parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
    last = parts[-1]
    if not (isinstance(last, ast.Slice) and last.lower is None and last.step is None
            and isinstance(last.upper, ast.Name) and last.upper.id == name):
        return None
    lead = parts[:-1]
    if any(isinstance(p, ast.Constant) and p.value is Ellipsis for p in lead):
        return -1 if len(lead) == 1 else None
    if all(isinstance(p, ast.Slice) and p.lower is None and p.upper is None and p.step is None for p in lead):
        return len(lead)
    return None


def trim_dropped(stmt: ast.stmt, text: Text) -> Made | None:
    """``n = int(lengths.max())`` (``int(mask.sum(1).max())``, ``.item()``) whose every read is
    the end of a slice that trims a tensor's dimension (``x = x[:, :n]``) or ``torch.arange(n)``:
    the longest row's length as the dimension's full size, ``n = x.shape[1]`` (the slices then
    keep everything, and no size is read back)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    inner = _read_back(stmt.value)
    if not (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in ("max", "amax")
            and not inner.args and not inner.keywords):
        return None
    fn = function_of(text.source, stmt)
    scope: ast.AST = fn if fn is not None else parsed(text.source)
    end = stmt.end_lineno or stmt.lineno
    first: tuple[int, ast.expr, int] | None = None  # (line, the trimmed tensor, its dimension)
    reads = 0
    aranges: set[int] = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "arange" \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == name:
            aranges.add(id(node.args[0]))
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store) and node.lineno > end:
            return None  # bound again: another value read after
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and node.lineno > end:
            dim = _trimmed_dim(node, name)
            if dim is not None:
                reads += 1
                if first is None or node.lineno < first[0]:
                    first = (node.lineno, node.value, dim)
    loads = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    if first is None or len(loads) != reads + len(aranges) or any(n.lineno <= end for n in loads):
        return None  # read otherwise too (a loop count, a log, a size of its own)
    _, tensor, dim = first
    if not isinstance(tensor, (ast.Name, ast.Attribute)) or _bound_between(scope, tensor, end, first[0]):
        return None
    if _comprehension_local(scope, tensor):
        # `{k: v[:, :n] for k, v in batch.items()}`: no one tensor outside names the size, and
        # an end of None keeps all of each (every read is a slice's end: no arange to feed)
        return None if aranges else Made([f"{name} = None"], TRIM, (
            f"trimming to the longest row changes no output: the positions past every row's length are padding "
            f"the model masks out (each row's values do not depend on it); `{name}` is now None, so each slice "
            f"that ends at it keeps all of its dimension"))
    return Made([f"{name} = {unparsed(tensor)}.shape[{dim}]"], TRIM, (
        f"trimming to the longest row changes no output: the positions past every row's length are padding the "
        f"model masks out (each row's values do not depend on it); `{name}` is now the full size of "
        f"`{unparsed(tensor)}`'s dimension {dim}, and each slice keeps all of it"))


def _comprehension_local(scope: ast.AST, tensor: ast.expr) -> bool:
    """Whether ``tensor`` (its root name) is a comprehension's own variable where it is read."""
    root = tensor
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name):
        return False
    for node in ast.walk(scope):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            bound = {n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
            if root.id in bound and any(n is root for n in ast.walk(node)):
                return True
    return False


def _bound_between(scope: ast.AST, tensor: ast.expr, after: int, before: int) -> bool:
    """Whether the name (or attribute) ``tensor`` is assigned on a line in (after, before)."""
    want = unparsed(tensor)
    return any(isinstance(n, ast.Assign) and after < n.lineno < before and any(unparsed(t) == want for t in n.targets)
               for n in ast.walk(scope))


# -- per-row slices by lengths in a loop over the rows' indices --------------------------------------

RANGED = "length mask instead of a loop over rows"
_SLICE_OPS = {ast.Add: "add_", ast.Sub: "sub_"}


def _loop_of(source: str, stmt: ast.stmt) -> ast.For | None:
    """The ``for`` whose whole body is ``stmt`` (no ``else``)."""
    node = holder_of(source, stmt)
    return node if isinstance(node, ast.For) and not node.orelse and node.body == [stmt] else None


def _write_of(stmt: ast.stmt) -> tuple[ast.expr, ast.expr, ast.operator | None] | None:
    """(target, value, operator) of ``t = v`` or ``t += v`` / ``t -= v`` (operator None for ``=``)."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return stmt.targets[0], stmt.value, None
    if isinstance(stmt, ast.AugAssign) and type(stmt.op) in _SLICE_OPS:
        return stmt.target, stmt.value, stmt.op
    return None


def _masked_write(x: str, mask: str, v: str, op: ast.operator | None = None) -> str:
    """The write of ``v`` where ``mask`` (over ``x``'s first two dimensions) is set, in place."""
    shaped = f"{mask}.reshape({x}.shape[0], {x}.shape[1], *[1] * ({x}.dim() - 2))"
    return (f"{x}.masked_fill_({shaped}, {v})" if op is None
            else f"{x}.{_SLICE_OPS[type(op)]}(torch.where({shaped}, {v}, 0))")


def ranged_fill(stmt: ast.stmt, text: Text) -> Made | None:
    """``for i in range(n): x[i, L[i]:] = v`` (``x[i, :L[i]]``, the positions first: ``x[L[i]:,
    i]``; ``+=``/``-=`` a number) as one op over every row: ``x.masked_fill_(<positions at or past
    (before) each row's length>, v)`` (``x.add_(torch.where(<mask>, v, 0))``), the mask laid along
    the two dimensions the slice and the row index name."""
    loop = _loop_of(text.source, stmt)
    if loop is None or not isinstance(loop.target, ast.Name):
        return None
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1):
        return None
    i, write = loop.target.id, _write_of(stmt)
    if write is None:
        return None
    target, value, op = write
    if not (isinstance(target, ast.Subscript) and isinstance(target.value, (ast.Name, ast.Attribute))
            and isinstance(target.slice, ast.Tuple) and len(target.slice.elts) == 2) or i in names_loaded(value):
        return None
    first, second = target.slice.elts
    rows_first = isinstance(first, ast.Name) and first.id == i
    row, cols = (first, second) if rows_first else (second, first)
    if not (isinstance(row, ast.Name) and row.id == i and isinstance(cols, ast.Slice) and cols.step is None):
        return None
    bound = cols.lower if cols.upper is None else cols.upper if cols.lower is None else None
    past = cols.upper is None
    if not (isinstance(bound, ast.Subscript) and isinstance(bound.value, (ast.Name, ast.Attribute))
            and isinstance(bound.slice, ast.Name) and bound.slice.id == i):
        return None
    x, lens = unparsed(target.value), unparsed(bound.value)
    dim = 1 if rows_first else 0
    positions = f"torch.arange({x}.shape[{dim}], device={x}.device)"
    per_row = f"{paren(lens)}.reshape(-1)"
    cmp = ">=" if past else "<"
    mask = (f"({positions}[None, :] {cmp} {per_row}[:, None])" if rows_first
            else f"({positions}[:, None] {cmp} {per_row}[None, :])")
    return Made([_masked_write(x, mask, unparsed(value), op)], RANGED, (
        f"`{lens}` holds one length per row (one entry each, in row order) and the loop covers every row of `{x}` "
        f"along dimension {1 - dim}; the value is one number for every position"), first=loop, last=loop)


# -- each row of a tensor zipped with its length, or enumerated lengths -----------------------------

ZIPPED = "length mask instead of a loop over lengths"


def _listed(node: ast.expr) -> str | None:
    """The text of a tensor a loop walks (``L.tolist()`` read as ``L``); None for anything but a
    name, an attribute or a subscript."""
    node = _tolist_of(node) or node
    return unparsed(node) if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) else None


def _walked(loop: ast.For) -> tuple[str, str, str, str] | None:
    """(the row's name, or the row index's; the length's name; the tensor written, "" when the
    loop gives an index; the lengths' text) of ``for r, n in zip(X, L)`` (either order; ``strict=``
    aside) or ``for i, n in enumerate(L)`` with ``L`` a tensor."""
    it, target = loop.iter, loop.target
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and isinstance(target, ast.Tuple)
            and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts)):
        return None
    a, b = (e.id for e in target.elts)  # type: ignore[attr-defined]
    if it.func.id == "enumerate" and len(it.args) == 1 and not it.keywords:
        lens = _listed(it.args[0])
        return None if lens is None else (a, b, "", lens)
    if it.func.id == "zip" and len(it.args) == 2 and all(k.arg == "strict" for k in it.keywords):
        first, second = _listed(it.args[0]), _listed(it.args[1])
        return None if first is None or second is None else (a, b, first, second)
    return None


def _bounded(bound: ast.expr | None, n: str, lens: str) -> str | None:
    """Each row's length as a tensor expression where a slice's bound is ``n`` (``lens``),
    ``min(n, k)`` (``lens.clamp(max=k)``) or ``max(n, k)``; None for any other bound."""
    if isinstance(bound, ast.Name) and bound.id == n:
        return paren(lens)
    if (isinstance(bound, ast.Call) and isinstance(bound.func, ast.Name) and bound.func.id in ("min", "max")
            and len(bound.args) == 2 and not bound.keywords):
        ours = [x for x in bound.args if isinstance(x, ast.Name) and x.id == n]
        other = [x for x in bound.args if not (isinstance(x, ast.Name) and x.id == n)]
        if len(ours) == 1 and len(other) == 1 and n not in names_loaded(other[0]):
            return f"{paren(lens)}.clamp({'max' if bound.func.id == 'min' else 'min'}={unparsed(other[0])})"
    return None


def zipped_fill(stmt: ast.stmt, text: Text) -> Made | None:
    """``for row, n in zip(X, L): row[:n] = v`` (``row[n:]``; zip's arguments either way round)
    or ``for i, n in enumerate(L): X[i, :n] = v`` (``L`` a tensor; a bound ``min(k, n)`` too;
    ``+=``/``-=`` a number) as one op over every row of ``X``: ``X.masked_fill_(<positions before
    (at or past) each row's length>, v)`` (``X.add_(torch.where(<mask>, v, 0))``). DPO's prompt
    mask: ``for mask, source_len in zip(loss_masks, prompt_id_lens): mask[:source_len] = False``;
    LightGCN's ideal DCG: ``for i, n in enumerate(n_test): test_matrix[i, :min(k, n)] = 1``."""
    loop = stmt if isinstance(stmt, ast.For) else _loop_of(text.source, stmt)
    if loop is None or loop.orelse or len(loop.body) != 1:
        return None
    walked, write = _walked(loop), _write_of(loop.body[0])
    if walked is None or write is None:
        return None
    target, value, op = write
    a, b, x, lens = walked
    if not isinstance(target, ast.Subscript):
        return None
    if not x:  # enumerate: X[i, <slice>]
        i, n = a, b
        sl = target.slice
        if not (isinstance(target.value, (ast.Name, ast.Attribute)) and isinstance(sl, ast.Tuple) and len(sl.elts) == 2
                and isinstance(sl.elts[0], ast.Name) and sl.elts[0].id == i):
            return None
        x, cols, names = unparsed(target.value), sl.elts[1], {i, n}
    else:  # zip: row[<slice>], the names following zip's arguments
        if not isinstance(target.value, ast.Name) or target.value.id not in (a, b):
            return None
        row, n = (a, b) if target.value.id == a else (b, a)
        if row == b:
            x, lens = lens, x
        cols, names = target.slice, {row, n}
    if not (isinstance(cols, ast.Slice) and cols.step is None) or names & names_loaded(value):
        return None
    past = cols.upper is None and cols.lower is not None
    per_row = _bounded(cols.lower if past else cols.upper, n, lens)
    if per_row is None or (not past and cols.lower is not None):
        return None
    positions = f"torch.arange({x}.shape[1], device={x}.device)"
    mask = f"({positions}[None, :] {'>=' if past else '<'} {per_row}.reshape(-1)[:, None])"
    return Made([_masked_write(x, mask, unparsed(value), op)], ZIPPED, (
        f"`{x}` is a tensor (a loop over its rows writes through views), `{lens}` holds one length per row in row "
        "order and the loop covers every row, and the value is one number for every position"), first=loop, last=loop)


# -- a window of each row from its own start, copied row by row ------------------------------------

WINDOWS = "gather of windows instead of a loop over rows"


def windowed_rows(stmt: ast.stmt, text: Text) -> Made | None:
    """``for i in range(n): out[i] = x[i, :, s[i]:s[i] + k]`` (the start and end bound to names
    first, as VITS' ``slice_segments`` does; any number of full slices between) as one gather
    along the last dimension: ``out.copy_(torch.gather(x, -1, (s.reshape(-1, 1, ..) +
    torch.arange(k)).expand(*x.shape[:-1], k)))``."""
    loop = stmt if isinstance(stmt, ast.For) else holder_of(text.source, stmt)
    if not (isinstance(loop, ast.For) and not loop.orelse and isinstance(loop.target, ast.Name)
            and isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "range"
            and len(loop.iter.args) == 1 and loop.body):
        return None
    i, *temps, last = loop.target.id, *loop.body
    bound: dict[str, ast.expr] = {}
    for s in temps:  # idx_str = ids_str[i]; idx_end = idx_str + segment_size
        if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
            return None
        held = ast.Tuple(elts=[s.value], ctx=ast.Load())
        for name, earlier in bound.items():
            held = substituted(held, name, earlier)
        bound[s.targets[0].id] = held.elts[0]
    if not (isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Subscript)):
        return None
    target, value = last.targets[0], last.value
    if not (isinstance(target.slice, ast.Name) and target.slice.id == i and isinstance(target.value, (ast.Name, ast.Attribute))
            and isinstance(value, ast.Subscript) and isinstance(value.value, (ast.Name, ast.Attribute))
            and isinstance(value.slice, ast.Tuple) and len(value.slice.elts) >= 2):
        return None
    first, *middle, window = value.slice.elts
    if not (isinstance(first, ast.Name) and first.id == i and all(_full(m) for m in middle)
            and isinstance(window, ast.Slice) and window.step is None and window.lower is not None
            and window.upper is not None):
        return None
    pair = ast.Tuple(elts=[window.lower, window.upper], ctx=ast.Load())  # a name alone is replaced whole
    for name, earlier in bound.items():
        pair = substituted(pair, name, earlier)
    lo, hi = pair.elts
    starts = lo.value if isinstance(lo, ast.Subscript) and isinstance(lo.slice, ast.Name) and lo.slice.id == i else None
    if not (starts is not None and isinstance(starts, (ast.Name, ast.Attribute)) and isinstance(hi, ast.BinOp)
            and isinstance(hi.op, ast.Add) and ast.dump(hi.left) == ast.dump(lo)
            and not names_loaded(hi.right) & ({i} | set(bound))):
        return None
    if any(read_later(text.source, loop, name) for name in bound):
        return None
    x, out, st, k = unparsed(value.value), unparsed(target.value), unparsed(starts), unparsed(hi.right)
    index = f"({st}.reshape(-1, *[1] * ({x}.dim() - 1)) + torch.arange({k}, device={x}.device))"
    return Made([f"{out}.copy_(torch.gather({x}, -1, {index}.expand(*{x}.shape[:-1], {k})))"], WINDOWS, (
        f"`{st}` holds one integer start per row of `{x}`, each window inside the row (a slice past the end is cut "
        "short, a gather raises), and the loop covers every row"), first=loop, last=loop)


# -- a roll by a number read back ---------------------------------------------------------------

ROLLED = "gather instead of a roll by a tensor"


class _Rolled(ast.NodeTransformer):
    """``torch.roll(x, -int(t), -1)`` (``x.roll(...)``, ``shifts=``/``dims=``) as a gather of each
    position's source along the last dimension, the shift kept a tensor."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "roll"):
            return node
        args = list(node.args)
        if isinstance(f.value, ast.Name) and f.value.id == "torch":
            if not args:
                return node
            x, rest = args[0], args[1:]
        else:
            x, rest = f.value, args
        named = {k.arg: k.value for k in node.keywords}
        shift = rest[0] if rest else named.get("shifts")
        dim = rest[1] if len(rest) > 1 else named.get("dims")
        if shift is None or not (isinstance(dim, ast.UnaryOp) and isinstance(dim.op, ast.USub)
                                 and isinstance(dim.operand, ast.Constant) and dim.operand.value == 1):
            return node
        kept = _Unwrapped().visit(copy.deepcopy(shift))
        if not isinstance(x, (ast.Name, ast.Attribute)) or ast.dump(kept) == ast.dump(shift):
            return node  # a roll by a Python number is no break; an expression for x would run thrice
        self.changed = True
        xs = unparsed(x)
        # out[j] = x[(j - shift) % n]; a shift of -t reads x[(j + t) % n]
        back = (f"+ {paren(unparsed(kept.operand))}" if isinstance(kept, ast.UnaryOp) and isinstance(kept.op, ast.USub)
                else f"- {paren(unparsed(kept))}")
        index = f"((torch.arange({xs}.shape[-1], device={xs}.device) {back}) % {xs}.shape[-1]).expand_as({xs})"
        return ast.parse(f"torch.gather({xs}, -1, {index})", mode="eval").body


class _Unwrapped(ast.NodeTransformer):
    """``int(t)`` of a tensor read as ``t`` (a 0-dim tensor shifts as the number did)."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if (isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], (ast.Subscript, ast.Name, ast.Attribute, ast.Call))):
            return ast.Call(func=ast.Attribute(value=node.args[0], attr="long"), args=[], keywords=[])
        return node


def rolled(stmt: ast.stmt, text: Text) -> Made | None:
    """A statement that rolls a tensor along its last dimension by ``int()`` of a tensor
    (Autoformer's time-delay aggregation: ``torch.roll(values, -int(index[i]), -1)``), the roll
    as ``torch.gather(x, -1, ((arange(n) - shift) % n).expand_as(x))``."""
    return transformed_statement(stmt, _Rolled(), ROLLED, (
        "the shift is an integer tensor of no dimensions (one number for the whole roll), along the last dimension"))


# -- entries picked one index at a time, stacked ----------------------------------------------------

PICKED = "one index instead of picks stacked"


class _Picks(ast.NodeTransformer):
    """``torch.stack([x[:, idx[i]] for i in range(k)], dim=-1)`` (any number of full slices
    before the pick) as ``x[:, idx[:k]]``: one advanced index over the picks, in their order."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if not (unparsed(node.func) == "torch.stack" and len(node.args) == 1 and isinstance(node.args[0], ast.ListComp)
                and [(k.arg, unparsed(k.value)) for k in node.keywords] == [("dim", "-1")]):
            return node  # stacked along the first dimension, the picks would come first, not last
        comp = node.args[0]
        if len(comp.generators) != 1:
            return node
        gen = comp.generators[0]
        if not (isinstance(gen.target, ast.Name) and not gen.ifs and not gen.is_async and isinstance(gen.iter, ast.Call)
                and isinstance(gen.iter.func, ast.Name) and gen.iter.func.id == "range" and len(gen.iter.args) == 1):
            return node
        i, elt = gen.target.id, comp.elt
        if not (isinstance(elt, ast.Subscript) and isinstance(elt.value, (ast.Name, ast.Attribute))
                and isinstance(elt.slice, ast.Tuple) and len(elt.slice.elts) >= 2):
            return node
        *full, pick = elt.slice.elts
        if not (all(_full(f) for f in full) and isinstance(pick, ast.Subscript)
                and isinstance(pick.value, (ast.Name, ast.Attribute)) and isinstance(pick.slice, ast.Name)
                and pick.slice.id == i and i not in names_loaded(pick.value) | names_loaded(gen.iter)):
            return node
        self.changed = True
        head = ", ".join(":" for _ in full)
        return ast.parse(f"{unparsed(elt.value)}[{head}, {unparsed(pick.value)}[:{unparsed(gen.iter.args[0])}]]",
                         mode="eval").body


def stacked_picks(stmt: ast.stmt, text: Text) -> Made | None:
    """A statement that stacks, along the last dimension, the entries an index tensor picks one
    at a time (Autoformer's ``torch.stack([mean_value[:, index[i]] for i in range(top_k)],
    dim=-1)``: each ``index[i]`` read back as a number), the stack as one advanced index."""
    return transformed_statement(stmt, _Picks(), PICKED, (
        "the index is an integer tensor with at least as many entries as the range, and the picked dimension is "
        "the last (the picks land where the stack put them)"))


# -- a numpy number's item: int() of it ----------------------------------------------------------

_INT_NAMES = {"int", "int8", "int16", "int32", "int64", "long", "intp", "uint8"}
_FLOAT_NAMES = {"float", "float16", "float32", "float64", "double"}
_NUMPY = {"np", "numpy"}


def _dtype_kind(node: ast.expr) -> str | None:
    """``"int"`` or ``"float"`` for a dtype spelled as a string, a builtin or numpy's name
    (``"int"``, ``int``, ``np.int64``); None for another."""
    name = dtype_name(node, _NUMPY)
    return "int" if name in _INT_NAMES else "float" if name in _FLOAT_NAMES else None


def _numpy_call(node: ast.expr) -> bool:
    """Whether ``node`` is a call of numpy's (``np.ceil(np.log(n))``)."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id in _NUMPY)


class _NumpyItem(ast.NodeTransformer):
    """``np.f(...).astype("int").item()`` -> ``int(np.f(...))`` (``float`` likewise)."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "item" and not node.args and not node.keywords):
            return node
        cast = f.value
        if (isinstance(cast, ast.Call) and isinstance(cast.func, ast.Attribute) and cast.func.attr == "astype"
                and len(cast.args) == 1 and not cast.keywords and _numpy_call(cast.func.value)):
            kind = _dtype_kind(cast.args[0])
            if kind is not None:
                self.changed = True
                return ast.Call(func=ast.Name(id=kind, ctx=ast.Load()), args=[cast.func.value], keywords=[])
        return node


def numpy_item(stmt: ast.stmt, text: Text) -> Made | None:
    """``U = c * np.ceil(np.log(L)).astype("int").item()`` (Informer's sample count from a
    length): the item of a numpy number Dynamo made a tensor of is a non-tensor it cannot
    return; ``int(np.ceil(np.log(L)))`` is the same Python number, read as Dynamo reads one."""
    return transformed_statement(stmt, _NumpyItem(), NUMPY_ITEM, (
        "the numpy value is one number (its item and its int() agree; an array of several would make "
        "int() raise)"))


# -- the indices a nonzero listed, every one visited -----------------------------------------------

_FLATTENED = {"flatten", "squeeze", "view", "reshape", "ravel"}


def _nonzero_listed(value: ast.expr) -> ast.expr | None:
    """``c`` in ``torch.nonzero(c, as_tuple=True)[0].tolist()`` (``c.nonzero(as_tuple=True)[0]``,
    ``torch.where(c)[0]``, ``torch.nonzero(c).squeeze(-1)``, ``c.nonzero().flatten()``); None for
    another value."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "tolist"
            and not value.args and not value.keywords):
        return None
    inner = value.func.value
    if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant) and inner.slice.value == 0:
        made, tupled = inner.value, True
    elif isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr in _FLATTENED:
        made, tupled = inner.func.value, False
    else:
        return None
    if not isinstance(made, ast.Call) or not isinstance(made.func, ast.Attribute):
        return None
    as_tuple = any(k.arg == "as_tuple" and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in made.keywords)
    name, on_torch = made.func.attr, isinstance(made.func.value, ast.Name) and made.func.value.id == "torch"
    if name == "nonzero" and as_tuple == tupled:
        args = made.args if on_torch else [made.func.value, *made.args]
        return args[0] if len(args) == 1 else None
    if name == "where" and on_torch and tupled and len(made.args) == 1 and not made.keywords:
        return made.args[0]
    return None


def nonzero_visited(stmt: ast.stmt, text: Text) -> Made | None:
    """``hit = torch.nonzero(c, as_tuple=True)[0].tolist()`` read only as ``for i in hit:`` whose
    body only writes through an index that reads ``i`` (``out[mask[:, i]] = expert_i(x[mask[:, i]])``,
    Switch Transformers' loop over the experts a batch routed to) as ``hit = range(c.shape[0])``:
    an index the filter left out selects nothing, so its turn writes nothing, and every turn's
    write is the masked one its own rewrite makes."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    counted = _nonzero_listed(stmt.value)
    name = stmt.targets[0].id
    fn = function_of(text.source, stmt)
    if counted is None or fn is None:
        return None
    end = stmt.end_lineno or stmt.lineno
    reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
             and n.lineno > end]  # hit = nonzero(hit)...: the statement's own read is the filtered tensor
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.iter, ast.Name) and n.iter.id == name]
    if not loops or len(reads) != len(loops):
        return None  # read otherwise (len(hit), hit[0]): the list itself matters
    for loop in loops:
        if loop.orelse or not isinstance(loop.target, ast.Name) or loop.lineno < stmt.lineno:
            return None
        i = loop.target.id
        for s in loop.body:
            targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, ast.AugAssign) else []
            if not targets or not all(isinstance(t, ast.Subscript) and i in names_loaded(t.slice) for t in targets):
                return None
    return Made([f"{name} = range({paren(unparsed(counted))}.shape[0])"], VISITED, (
        "the filtered tensor is one-dimensional, and an index it leaves out selects nothing in the loop's writes "
        "(each write goes through a mask or index that is empty for it), so visiting it changes nothing"))


SLICED = "where over the positions instead of a slice at a tensor"


def _cut(index: ast.expr) -> tuple[int, ast.expr, bool] | None:
    """(the dimension, the bound, whether it is the start) of an index that is full slices but
    one, cut at one end only (``[:, c:]``, ``[:c]``); None for any other index."""
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    cut = None
    for d, p in enumerate(parts):
        if not isinstance(p, ast.Slice) or p.step is not None:
            return None
        if p.lower is None and p.upper is None:
            continue
        if cut is not None or (p.lower is not None and p.upper is not None):
            return None
        bound = p.lower if p.lower is not None else p.upper
        assert bound is not None
        if isinstance(bound, (ast.Constant, ast.UnaryOp)):
            return None  # a number (no break there) or a negative bound (counted from the end)
        cut = (d, bound, p.lower is not None)
    return cut


def sliced_write(stmt: ast.stmt, text: Text) -> Made | None:
    """``ws[:, c:] = new[:, c:]`` (or a number) where ``c`` is a tensor (StyleGAN's style-mixing
    cutoff drawn on the device): the positions at or past ``c`` along that dimension take the new
    values, ``ws.copy_(torch.where(torch.arange(ws.shape[1], device=ws.device).view(-1, 1...) >= c,
    new, ws))``: the slice's size is the data's, the where's is not."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)):
        return None
    target = stmt.targets[0]
    x = target.value
    cut = _cut(target.slice)
    if cut is None or not isinstance(x, (ast.Name, ast.Attribute)):
        return None
    d, bound, start = cut
    value = stmt.value
    if isinstance(value, ast.Subscript) and ast.dump(value.slice) == ast.dump(target.slice):
        new = text.of(value.value)
    elif isinstance(value, ast.Constant) and isinstance(value.value, (int, float)):
        new = text.of(value)
    else:
        return None
    xs = text.of(x)
    # the positions along dimension d, shaped to broadcast over the dimensions after it
    positions = f"torch.arange({xs}.shape[{d}], device={xs}.device).view(-1, *[1] * ({xs}.dim() - {d + 1}))"
    test = f"{positions} {'>=' if start else '<'} {text.of(bound)}"
    return Made([f"{xs}.copy_(torch.where({test}, {new}, {xs}))"], SLICED, (
        f"`{text.of(bound)}` is a non-negative integer (a negative one counts from the end in a slice, not here) and "
        f"the value written is `{new}` whole, of `{xs}`'s shape (the slice taken of both alike)"))


NUMPY_KEPT = "numpy value kept an array"


class _FloatDropped(ast.NodeTransformer):
    """``float(<numpy value>)`` as the value: under torch.compile numpy's arrays are tensors, and
    ``float()`` reads one back to the host."""

    def __init__(self, names: set[str], alias: str) -> None:
        self.names, self.alias = names, alias
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.func, ast.Name) and node.func.id == "float" and len(node.args) == 1 and not node.keywords:
            arg = node.args[0]
            if isinstance(arg, (ast.Subscript, ast.Call)) and any(
                    isinstance(n, ast.Name) and (n.id in self.names or n.id == self.alias) for n in ast.walk(arg)):
                self.changed = True
                return self._gathered(arg)
        return node

    def _gathered(self, arg: ast.expr) -> ast.expr:
        """``a[np.argmax(c)]`` as ``a[np.argmax(c).reshape(1)][0]``: indexing reads a 0-dim index
        back as a number (the break moves there); a one-element index gathers the same element."""
        if not isinstance(arg, ast.Subscript):
            return arg
        index = arg.slice
        if (isinstance(index, ast.Call) and isinstance(index.func, ast.Attribute) and index.func.attr in _ARG_EXTREMES
                and isinstance(index.func.value, ast.Name) and index.func.value.id == self.alias
                and len(index.args) == 1 and not index.keywords):
            one = ast.Call(func=ast.Attribute(value=index, attr="reshape", ctx=ast.Load()), args=[ast.Constant(1)],
                           keywords=[])
            return ast.Subscript(value=ast.Subscript(value=arg.value, slice=one, ctx=ast.Load()),
                                 slice=ast.Constant(0), ctx=ast.Load())
        return arg


_ARG_EXTREMES = {"argmax", "argmin"}  # numpy's index of one element, read back as a number when it indexes


def numpy_kept(stmt: ast.stmt, text: Text) -> Made | None:
    """``cutoff = float(sorted_probs[np.argmax(cum > top_p)])`` (RWKV's top-p sampling on the
    host): ``float()`` of a numpy element reads the array Dynamo made a tensor of back to Python;
    kept an array (of no dimensions), it compares and computes as the number did."""
    found = numpy_names(text.source, stmt)
    if found is None or not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr)):
        return None
    alias, names = found
    return transformed_statement(stmt, _FloatDropped(names, alias), NUMPY_KEPT, (
        "the value is used in numpy's arithmetic and comparisons, where an array of no dimensions serves as the "
        "number did (not as a size, an index or a Python condition)"))


PREFIX = "prefix sums gathered instead of a sum per element"


class _Bound(ast.NodeTransformer):
    """A slice's end written of a loop's number (``min(int(n), k)``) as the same of the tensor it
    runs over: ``int(n)`` -> ``L.long()``, ``min(e, k)`` -> ``e.clamp(max=k)``; ``bad`` when the
    number is used otherwise."""

    def __init__(self, var: str, over: ast.expr) -> None:
        self.var, self.over = var, over
        self.bad = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        f = node.func
        if isinstance(f, ast.Name) and f.id == "int" and len(node.args) == 1 and isinstance(node.args[0], ast.Name) \
                and node.args[0].id == self.var:
            return _expr(f"{paren(unparsed(self.over))}.long()")
        if isinstance(f, ast.Name) and f.id in ("min", "max") and len(node.args) == 2 and not node.keywords:
            a, b = (self.visit(copy.deepcopy(x)) for x in node.args)
            inner, bound = (a, b) if self.var_in(node.args[0]) else (b, a)
            if self.var_in(bound):
                self.bad = True
                return node
            return _expr(f"{paren(unparsed(inner))}.clamp({'max' if f.id == 'min' else 'min'}={unparsed(bound)})")
        self.bad = self.bad or self.var_in(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.var:
            return _expr(f"{paren(unparsed(self.over))}.long()")
        return node

    def var_in(self, node: ast.AST) -> bool:
        return self.var in names_loaded(node)


def prefix_sums(stmt: ast.stmt, text: Text) -> Made | None:
    """``torch.Tensor([w[:min(int(n), k)].sum() for n in counts])`` (a recommender's ideal DCG:
    the weights of the first ``min(n, k)`` ranks summed per row) as the prefix sums of ``w``
    gathered at each row's end: ``torch.cat([w.new_zeros(1), w.cumsum(0)])[counts.long().clamp(max=k)]``."""
    if not isinstance(stmt, (ast.Assign, ast.Return, ast.Expr)) or stmt.value is None:
        return None

    class _Swap(ast.NodeTransformer):
        changed = False

        def visit_Call(self, node: ast.Call) -> ast.AST:
            node = self.generic_visit(node)  # type: ignore[assignment]
            f = node.func
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"
                    and f.attr in ("Tensor", "tensor", "stack") and len(node.args) == 1
                    and isinstance(node.args[0], ast.ListComp) and not node.keywords):
                return node
            comp = node.args[0]
            gen = comp.generators[0]
            elt = comp.elt
            if len(comp.generators) != 1 or gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name):
                return node
            if not (isinstance(elt, ast.Call) and isinstance(elt.func, ast.Attribute) and elt.func.attr == "sum"
                    and not elt.args and not elt.keywords and isinstance(elt.func.value, ast.Subscript)):
                return node
            sliced = elt.func.value
            cut = sliced.slice
            if not (isinstance(cut, ast.Slice) and cut.lower is None and cut.step is None and cut.upper is not None):
                return node
            w = sliced.value
            if gen.target.id in names_loaded(w):
                return node
            bound = _Bound(gen.target.id, gen.iter)
            end = bound.visit(copy.deepcopy(cut.upper))
            if bound.bad or gen.target.id in names_loaded(end):
                return node
            self.changed = True
            ws = unparsed(w)
            return _expr(f"torch.cat([{paren(ws)}.new_zeros(1), {paren(ws)}.cumsum(0)])[{unparsed(end)}]")

    swap = _Swap()
    new = swap.visit(copy.deepcopy(stmt))
    if not swap.changed:
        return None
    return Made(unparsed(new).split("\n"), PREFIX, (
        "the summed tensor is one-dimensional (its prefix sums, led by a zero, are what each slice sums), the loop "
        "runs over a tensor of non-negative counts, and the result's dtype is the summed tensor's (torch.Tensor "
        "made float32)"))
