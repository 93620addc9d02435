"""Branches on a tensor's value as tensor code: one assignment or return a branch as
``torch.where``, several as ``torch.cond`` with the names a branch reads first as operands.

Its own module because two families of rewrites use it: the branch rewrites proper
(:mod:`.rewrites`) and the generator rewrites (:mod:`.state`), which make an ``if`` over a
generator a tensor test and hand the ``if`` on.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable
from dataclasses import replace

from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    contains,
    enumerated_list,
    function_of,
    names_loaded,
    numpy_names,
    parsed,
    read_later,
    rows_set,
    substituted,
    transformed_statement,
    unparsed,
)

__all__ = ["COND", "CONDITIONAL", "EARLY", "ELEMENTWISE", "FLAG_FIRST", "STATE_WHERE", "WHERE", "appended_where", "cond",
           "conditional", "early_return", "elementwise", "flag_first", "listed_elementwise", "narrowed", "shortcut_else",
           "shortcut_exit", "shortcut_if", "state_where", "tensor_tested", "tensor_test", "where"]

WHERE = "branch to torch.where"
COND = "branch to torch.cond"
EARLY = "early return to torch.where"
STATE_WHERE = "state update to torch.where"
SHORTCUT = "shortcut dropped"


class _TensorTest(ast.NodeTransformer):
    """A branch test as a tensor expression: ``.item()``, ``bool()``, ``float()`` dropped;
    ``int(<call or index>)`` as ``.long()``, which truncates toward zero as ``int()`` does
    (``int(n)`` of a plain name stays: it may be a Python number); ``and``/``or``/``not`` as
    ``&``/``|``/``~`` only over comparisons and calls (``mask is not None and ...`` relies on
    short-circuiting, a plain name may be a Python bool): else ``refused``."""

    def __init__(self) -> None:
        self.refused = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args:
            return node.func.value
        if isinstance(node.func, ast.Name) and node.func.id in ("bool", "float") and len(node.args) == 1:
            return node.args[0]
        if (isinstance(node.func, ast.Name) and node.func.id == "int" and len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], (ast.Call, ast.Subscript))):
            return ast.Call(func=ast.Attribute(value=node.args[0], attr="long", ctx=ast.Load()), args=[], keywords=[])
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        if not all(isinstance(v, ast.Call) or (isinstance(v, ast.Compare) and not any(
                isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in v.ops)) for v in node.values):
            self.refused = True
        node = self.generic_visit(node)  # type: ignore[assignment]
        op: ast.operator = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
        out = node.values[0]
        for v in node.values[1:]:
            out = ast.BinOp(left=out, op=op, right=v)
        return out

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.op, ast.Not):
            return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="logical_not"), args=[node.operand],
                            keywords=[])
        return node


def tensor_test(test: ast.expr) -> str | None:
    """The test as a tensor expression; None when it cannot be one safely."""
    t = _TensorTest()
    out = unparsed(t.visit(copy.deepcopy(test)))
    return None if t.refused else out


def _assigns(body: list[ast.stmt]) -> dict[str, ast.expr] | None:
    """name -> value for a branch that only assigns plain names, once each; None otherwise."""
    out: dict[str, ast.expr] = {}
    for s in body:
        pairs = _unpacked_pairs(s)
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            pairs = [(s.targets[0].id, s.value)]
        elif isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            pairs = [(s.target.id, ast.BinOp(left=ast.Name(s.target.id), op=s.op, right=s.value))]
        if pairs is None:
            return None
        for name, value in pairs:
            if name in out:
                return None
            out[name] = value
    return out


def _unpacked_pairs(s: ast.stmt) -> list[tuple[str, ast.expr]] | None:
    """``a, b = x, y`` as (a, x), (b, y) where assigning them one after the other is the same
    (no value reads a name bound before it: an adaptive ODE step's ``t0, y, f0 = t0 + dt, y1,
    f1``; ``a, b = b, a`` is not); None for any other statement."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Tuple)
            and isinstance(s.value, ast.Tuple) and len(s.targets[0].elts) == len(s.value.elts)
            and all(isinstance(e, ast.Name) for e in s.targets[0].elts)
            and not any(isinstance(v, ast.Starred) for v in s.value.elts)):
        return None
    names = [e.id for e in s.targets[0].elts]  # type: ignore[attr-defined]
    if len(set(names)) != len(names):
        return None
    for i, value in enumerate(s.value.elts):
        if names_loaded(value) & set(names[:i]):
            return None
    return list(zip(names, s.value.elts, strict=True))


def _host_test(node: ast.expr, *, flags: bool = True) -> bool:
    """A test Python decides without reading a tensor's value: ``x is None``, ``x is not
    None``, a plain name or attribute (a flag: ``self.training``; with ``flags`` False, not:
    at the break site itself a bare name broke, so it holds a tensor), ``isinstance``/
    ``hasattr``, or ``not`` of one of these."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _host_test(node.operand, flags=flags)
    if isinstance(node, ast.Compare):
        return (all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
                or all(_host_value(v) for v in [node.left, *node.comparators]))
    if isinstance(node, ast.Call):
        return isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "hasattr", "callable")
    return flags and isinstance(node, (ast.Name, ast.Attribute))


# What a tensor carries beside its values, which Python reads without a graph break.
_HOST_ATTRIBUTES = {"dtype", "device", "ndim", "is_cuda", "is_sparse", "is_quantized", "layout", "training", "type"}


def _host_value(node: ast.expr) -> bool:
    """A value Python knows without reading a tensor's values: a constant, ``torch.float16``
    (an attribute of ``torch``), or a tensor's dtype, device, ndim (``x.dtype``, ``x.device.type``)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Attribute):
        if isinstance(node.value, ast.Name) and node.value.id == "torch":
            return True
        return node.attr in _HOST_ATTRIBUTES or (isinstance(node.value, ast.Attribute) and _host_value(node.value))
    return False


def _settings_test(node: ast.expr) -> bool:
    """A test Python decides (:func:`_host_test`), or a module's setting compared with a constant
    (``self.weight_ce != 0``: read as a number the constructor set; where it is a tensor after
    all, the break stays and the patch is not verified)."""
    if _host_test(node):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _settings_test(node.operand)

    def setting(v: ast.expr) -> bool:
        while isinstance(v, ast.Attribute):
            v = v.value
        return isinstance(v, ast.Name) and v.id == "self"
    sides = [node.left, *node.comparators] if isinstance(node, ast.Compare) else []
    return bool(sides) and any(setting(v) for v in sides) and all(setting(v) or _host_value(v) for v in sides)


def narrowed(stmt: ast.If, test: ast.expr, body: list[ast.stmt]) -> ast.If:
    """An ``if`` of ``test`` over part of ``stmt``'s body, no ``else``, standing where ``stmt``
    stands (its lines and columns): what a rewrite of part of an ``if`` hands to another."""
    inner = ast.copy_location(ast.If(test=test, body=body, orelse=[]), stmt)
    inner.end_lineno, inner.end_col_offset = stmt.end_lineno, stmt.end_col_offset
    return inner


def _host_split(stmt: ast.If, text: Text, *, orelse: bool = False) -> tuple[str, ast.If] | None:
    """``if <host tests> and <tensor test>: ...`` (no else; with ``orelse``, an ``else`` too,
    which the ``if`` of the tensor test then keeps): the host tests as the file spells them and
    the ``if`` of the tensor test alone; None for another ``if``."""
    test = stmt.test
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)) or (stmt.orelse and not orelse):
        return None
    k = next((i for i, v in enumerate(test.values) if not _host_test(v)), len(test.values))
    host, rest = test.values[:k], test.values[k:]
    if not host or not rest:
        return None
    inner_test = rest[0] if len(rest) == 1 else ast.copy_location(ast.BoolOp(op=ast.And(), values=rest), rest[0])
    inner = narrowed(stmt, inner_test, stmt.body)
    inner.orelse = stmt.orelse
    return " and ".join(text.of(h) for h in host), inner


_SPLIT_NOTE = "; the Python test before `and` stays an `if` around it"


def _split_where(stmt: ast.If, text: Text) -> tuple[list[str], str, str] | None:
    """``if <host tests> and <tensor test>: ...`` as ``if <host tests>:`` around the
    torch.where of ``if <tensor test>: ...``: Python still decides what it can. With an
    ``else`` (``if self.cfg.mode is Mode.TRAIN and y.mean() > 0: ... else: ...``), the where
    picks between both branches and the ``else`` is kept for when the host tests fail too."""
    split = _host_split(stmt, text, orelse=True)
    made = where(split[1], text) if split is not None else None
    if split is None or made is None:
        return None
    lines, name, note = made
    out = [f"if {split[0]}:", *(text.unit + ln for ln in lines)]
    if stmt.orelse:
        if len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If) and _is_elif(stmt.orelse[0], text):
            return None  # an elif chain: its own tests are not the else's to repeat
        out += ["else:", *(text.unit + ln for ln in text.body_lines(stmt.orelse))]
        note += "; the else branch is also kept whole for when the Python test fails"
    return out, name, note + _SPLIT_NOTE


def _is_elif(stmt: ast.If, text: Text) -> bool:
    return text.lines[stmt.lineno - 1].lstrip().startswith("elif")


def where(stmt: ast.stmt, text: Text) -> tuple[list[str], str, str] | None:
    if not isinstance(stmt, ast.If):
        return None
    split = _split_where(stmt, text)
    if split is not None:
        return split
    test = tensor_test(stmt.test)
    if test is None:
        return None
    then, other = _assigns(stmt.body), _assigns(stmt.orelse) if stmt.orelse else {}
    note = "both branches give tensors of one shape and dtype (torch.where computes both)"
    if any(isinstance(v, ast.Constant) and v.value is None for side in (then, other) if side for v in side.values()):
        then = None  # a name set to None on one side: no tensor torch.where could pick
    if then is not None and other is not None and then:
        # An order both branches keep (a temporary of the else branch made before its uses).
        names = next((ns for ns in (list(dict.fromkeys([*then, *other])), list(dict.fromkeys([*other, *then])))
                      if _in_order(ns, then) and _in_order(ns, other)), [])
        if not names:
            return None
        # A name one branch makes for itself (`padding = ...` then `w = w + padding`), bound
        # nowhere before the if and read nowhere after it, is computed whatever the test.
        before = _bound_before(stmt, text)
        own = {n for n in names if (n in then) != (n in other) and n not in before}
        if any(_live_after(text.source, stmt, n) for n in own):
            return None  # read after the if on one path only: no value to give it on the other
        pred, lines = test, []
        if len(names) > 1:  # the test is read once, before any name it reads is rebound
            pred, lines = "_pred", [f"_pred = {test}"]
        lines += [f"{n} = {text.of(then[n] if n in then else other[n])}" if n in own else
                  f"{n} = torch.where({pred}, {text.of(then[n]) if n in then else n}, "
                  f"{text.of(other[n]) if n in other else n})" for n in names]
        if own:
            note += f"; {', '.join(f'`{n}`' for n in sorted(own))} is computed whatever the test"
        return lines, WHERE, note
    ret_then = stmt.body[0] if len(stmt.body) == 1 and isinstance(stmt.body[0], ast.Return) else None
    ret_else = stmt.orelse[0] if len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.Return) else None
    if ret_then is not None and ret_else is not None and ret_then.value is not None and ret_else.value is not None:
        return [f"return torch.where({test}, {text.of(ret_then.value)}, {text.of(ret_else.value)})"], WHERE, note
    return None


def _bound_before(stmt: ast.stmt, text: Text) -> set[str]:
    """The names bound whenever ``stmt`` runs: the function's arguments and what the
    statements before it in its block, and in the blocks around it, assign (not what an
    earlier ``if`` or loop body may or may not have assigned)."""
    stmt = _in_tree(text.source, stmt)
    fn = function_of(text.source, stmt)
    if fn is None:
        return {t.id for t in ast.walk(parsed(text.source)) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    names = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    block: list[ast.stmt] = fn.body
    while True:
        at = next((i for i, s in enumerate(block) if contains(s, stmt)), None)
        if at is None:
            return names
        for s in block[:at]:
            names |= _surely_bound(s)
        holder = block[at]
        if holder is stmt:
            return names
        if isinstance(holder, (ast.For, ast.AsyncFor)):
            names |= {t.id for t in ast.walk(holder.target) if isinstance(t, ast.Name)}
        block = next(b for b in _blocks(holder) if any(contains(s, stmt) for s in b))


def _in_tree(source: str, stmt: ast.stmt) -> ast.stmt:
    """The file's own statement standing where ``stmt`` stands (a narrowed ``if`` a rewrite
    made is no node of the file's tree; the outermost statement starting there): ``stmt``
    itself when it is one."""
    found = None
    for node in ast.walk(parsed(source)):
        if node is stmt:
            return stmt
        if found is None and isinstance(node, ast.stmt) and (node.lineno, node.col_offset) == (stmt.lineno,
                                                                                                stmt.col_offset):
            found = node
    return found or stmt


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement blocks a compound statement holds."""
    out = [getattr(stmt, f) for f in ("body", "orelse", "finalbody") if getattr(stmt, f, None)]
    out += [h.body for h in getattr(stmt, "handlers", [])]
    return out


def _surely_bound(stmt: ast.stmt) -> set[str]:
    """The names a statement binds whenever it runs to its end: a simple statement's targets,
    a ``with`` block's own statements; not what an ``if``, loop or ``try`` body binds."""
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        names = {t.id for item in stmt.items if item.optional_vars is not None
                 for t in ast.walk(item.optional_vars) if isinstance(t, ast.Name)}
        return names.union(*(_surely_bound(s) for s in stmt.body))
    if isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try)):
        return set()
    return {t.id for t in ast.walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}


def _live_after(source: str, stmt: ast.stmt, name: str) -> bool:
    """Whether the value ``name`` has after ``stmt`` can be read: a read after it in its block
    before the name is bound again (an ``if`` whose body binds it first and reads it after
    reads its own value). In a loop, any read in the function counts (the next turn reads it)."""
    stmt = _in_tree(source, stmt)
    fn = function_of(source, stmt)
    scope: ast.AST = fn if fn is not None else parsed(source)
    if any(isinstance(n, (ast.For, ast.While)) and contains(n, stmt) for n in ast.walk(scope)):
        return read_later(source, stmt, name)
    block, at = block_of(source, stmt)
    for s in block[at + 1:]:
        if isinstance(s, ast.If) and name not in names_loaded(s.test) and not s.orelse and s.body \
                and name in _surely_bound(s.body[0]) and name not in names_loaded(s.body[0]):
            continue  # binds its own value before it reads it; when not taken, the old one flows on
        if name in names_loaded(s):
            return True
        if name in _surely_bound(s):
            return False
    # After the block: a read further on in the function (the block is an if's or a with's).
    end = block[-1].end_lineno or block[-1].lineno
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > end
               for n in ast.walk(scope))


def _in_order(names: list[str], branch: dict[str, ast.expr]) -> bool:
    """Whether one ``torch.where`` per name, in ``names`` order, reads what the branch's own
    statements read: a name the branch assigned before is already the new value, any other
    still the old one."""
    pos = {n: i for i, n in enumerate(names)}
    order = list(branch)
    for k, (name, value) in enumerate(branch.items()):
        before = set(order[:k])
        for read in {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} & set(names) - {name}:
            if read in before and pos[read] > pos[name]:
                return False  # the branch reads its new value; the where would read the old one
            if read not in before and read in branch and pos[read] < pos[name]:
                return False  # the branch reads the old value; the where would read the new one
    return True


def _free_of_effects(body: list[ast.stmt]) -> bool:
    """Only assignments to plain names, no bare calls, no attribute or item stores."""
    for s in body:
        if not isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            return False
        targets = s.targets if isinstance(s, ast.Assign) else [s.target]
        if not all(isinstance(t, ast.Name) for t in targets):
            return False
    return True


def cond(stmt: ast.stmt, text: Text) -> tuple[list[str], str, str] | None:
    if not isinstance(stmt, ast.If) or not _free_of_effects(stmt.body) or not _free_of_effects(stmt.orelse):
        return None
    if len(stmt.body) < 2 and len(stmt.orelse) < 2:
        return None  # one statement a branch: torch.where says it plainer
    then, other = _stored(stmt.body), _stored(stmt.orelse)
    firsts = _read_first(stmt.body) | _read_first(stmt.orelse)
    # A name one branch binds for its own use (a temporary no later line reads) stays a local
    # of that branch's function: no operand (it has no value before the if), nothing returned.
    own = {n for n in {*then, *other} if (n not in then or n not in other) and n not in firsts
           and not _live_after(text.source, stmt, n)}
    names = [n for n in dict.fromkeys([*then, *other]) if n not in own]
    if not names:
        return None
    # Names a branch reads before it assigns them, or that only one branch assigns, come in
    # as torch.cond's operands (the values before the if): both branches take them all.
    operands = [n for n in names if n in firsts or n not in then or n not in other]
    params = ", ".join(operands)
    out = ", ".join(names) + ("," if len(names) == 1 else "")

    def branch(fn: str, body: list[ast.stmt]) -> list[str]:
        own = set(_stored(body))
        # torch.cond returns no operand as it is (no aliasing): an untouched one is cloned.
        ret = ", ".join(n if n in own else f"{n}.clone()" for n in names)
        unit = text.unit
        return [f"def {fn}({params}):", *(unit + ln for ln in text.body_lines(body)), f"{unit}return ({ret},)"]

    test = tensor_test(stmt.test)
    if test is None:
        return None
    ops = "(" + params + ("," if len(operands) == 1 else "") + ")"
    lines = [*branch("_then", stmt.body), *branch("_else", stmt.orelse),
             f"{out} = torch.cond({test}, _then, _else, {ops})"]
    return lines, COND, "both branches give tensors of one shape and dtype per name (torch.cond's rule)"


def _stored(body: list[ast.stmt]) -> list[str]:
    out = []
    for s in body:
        targets = s.targets if isinstance(s, ast.Assign) else [getattr(s, "target", None)]
        out += [t.id for t in targets if isinstance(t, ast.Name)]
    return out


def _read_first(body: list[ast.stmt]) -> set[str]:
    """Names the statements read before they assign them."""
    assigned: set[str] = set()
    read: set[str] = set()
    for s in body:
        value = getattr(s, "value", None)
        loads = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} if value is not None else set()
        if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
            loads.add(s.target.id)
        read |= loads - assigned
        assigned |= set(_stored([s]))
    return read


# -- an `if` per element: one where over the whole tensor --------------------------------------

ELEMENTWISE = "per-element if to torch.where"


def _per_element(node: ast.expr, var: str) -> ast.expr | None:
    """``node`` with each ``t[var]`` read as ``t`` (the whole tensor); None when ``var`` is used
    otherwise (in arithmetic, as a slice bound, or indexing a non-name)."""
    class Whole(ast.NodeTransformer):
        def __init__(self) -> None:
            self.ok = True

        def visit_Subscript(self, sub: ast.Subscript) -> ast.AST:
            if isinstance(sub.slice, ast.Name) and sub.slice.id == var:
                if isinstance(sub.value, (ast.Name, ast.Attribute)):
                    return sub.value
                self.ok = False
            return self.generic_visit(sub)

        def visit_Name(self, name: ast.Name) -> ast.AST:
            if name.id == var:
                self.ok = False
            return name

    whole = Whole()
    out = whole.visit(copy.deepcopy(node))
    return out if whole.ok else None


def elementwise(stmt: ast.stmt, text: Text) -> Made | None:
    """``for i in range(len(m)): if <test of m[i]>: x[i] = <value>`` (no else, nothing else in
    the loop) as ``x.copy_(torch.where(<test of m>, <value>, x))``: the same elements set, in
    place as the loop set them. The mask is shaped to ``x``'s rows (``(-1, 1, ...)``), so a
    per-row test sets whole rows."""
    fn = function_of(text.source, stmt)
    loop = next((n for n in ast.walk(fn or parsed(text.source)) if isinstance(n, ast.For) and n.body == [stmt]),
                None)
    if (loop is None or loop.orelse or not isinstance(loop.target, ast.Name) or not isinstance(stmt, ast.If)
            or stmt.orelse or len(stmt.body) != 1 or not isinstance(stmt.body[0], ast.Assign)):
        return None
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1):
        return None
    var, assign = loop.target.id, stmt.body[0]
    target = assign.targets[0] if len(assign.targets) == 1 else None
    if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Name) and target.slice.id == var
            and isinstance(target.value, (ast.Name, ast.Attribute))):
        return None
    test, value = _per_element(stmt.test, var), _per_element(assign.value, var)
    if test is None or value is None or var in names_loaded(test) | names_loaded(value):
        return None
    mask = tensor_test(test)
    if mask is None:
        return None
    x = text.of(target.value)
    return Made([rows_set(x, mask, value)], ELEMENTWISE, (
        f"every element of the loop's range is one row of `{x}` and of the tensors indexed in the test (the loop "
        "runs over all of them, in order, each turn touching only its own row)"), first=loop, last=loop)


def listed_elementwise(stmt: ast.stmt, text: Text) -> Made | None:
    """``for j, c in enumerate(<t>.tolist()): if <test of c>: x[j] = <value>`` (no else, nothing
    else in the loop, ``c`` read only by the test) as ``x.copy_(torch.where(<test of t>, <value>,
    x))``: the number ``c`` is ``t``'s element j, so the test over ``t`` marks the same rows."""
    loop = enumerated_list(stmt)
    if loop is None:
        return None
    j, c, source = loop
    inner = stmt.body[0]  # type: ignore[attr-defined]
    if not (isinstance(inner, ast.If) and not inner.orelse and len(inner.body) == 1
            and isinstance(inner.body[0], ast.Assign) and len(inner.body[0].targets) == 1):
        return None
    target = inner.body[0].targets[0]
    if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Name) and target.slice.id == j
            and isinstance(target.value, (ast.Name, ast.Attribute))):
        return None
    test = _per_element(substituted(inner.test, c, source), j)
    value = _per_element(inner.body[0].value, j)
    # The number in the value would need its own row shape: only the test reads it.
    if test is None or value is None or c not in names_loaded(inner.test) or c in names_loaded(value):
        return None
    mask = tensor_test(test)
    if mask is None:
        return None
    x = text.of(target.value)
    return Made([rows_set(x, mask, value)], ELEMENTWISE, (
        f"`{text.of(source)}` has one element per row of `{x}` (the loop runs over all of them, each turn setting "
        "only its own row); the test compares each number as a tensor element (float32 where Python compared "
        "float64)"), first=stmt, last=stmt)


def _appended(body: list[ast.stmt]) -> tuple[ast.expr, ast.expr] | None:
    """(the list, the value) of a branch that is one ``lst.append(value)``; None otherwise."""
    if len(body) != 1 or not isinstance(body[0], ast.Expr):
        return None
    call = body[0].value
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "append"
            and isinstance(call.func.value, (ast.Name, ast.Attribute)) and len(call.args) == 1 and not call.keywords):
        return call.func.value, call.args[0]
    return None


def appended_where(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: out.append(A) else: out.append(B)`` as ``out.append(torch.where(<test>,
    A, B))``: the one element each turn adds, picked."""
    if not isinstance(stmt, ast.If) or not stmt.orelse:
        return None
    then, other = _appended(stmt.body), _appended(stmt.orelse)
    test = tensor_test(stmt.test)
    if then is None or other is None or test is None or _host_test(stmt.test, flags=False) or ast.dump(then[0]) != ast.dump(other[0]):
        return None
    return Made([f"{text.of(then[0])}.append(torch.where({test}, {text.of(then[1])}, {text.of(other[1])}))"], WHERE, (
        "both values are tensors of one shape and dtype (torch.where computes both)"))


CONDITIONAL = "conditional expression to torch.where"


class _Conditional(ast.NodeTransformer):
    """``a if <tensor test> else b`` as ``torch.where(<test>, a, b)``; a test Python decides
    (``x is None``, a flag, ``isinstance``) stays a conditional expression, also where it is
    part of an ``and``/``or`` with a tensor test: ``a if P and T else b`` as ``torch.where(T, a,
    b) if P else b``, ``a if P or T else b`` as ``a if P else torch.where(T, a, b)`` (nnU-Net's
    ``ce if weight_ce != 0 and (ignore_label is None or num_fg > 0) else 0``)."""

    def __init__(self, numpy: tuple[str, set[str]] | None = None) -> None:
        self.changed = False
        # numpy's name in the file and the names bound to its results: a test of those is an
        # array's (Dynamo traces numpy as tensors), and np.where keeps the values arrays
        self.numpy = numpy

    def _of_numpy(self, test: ast.expr) -> bool:
        if self.numpy is None:
            return False
        alias, names = self.numpy
        return any((isinstance(n, ast.Name) and (n.id in names or n.id == alias)) for n in ast.walk(test))

    @staticmethod
    def _split(node: ast.IfExp) -> ast.IfExp | None:
        """The conditional with the parts of an ``and``/``or`` test that Python decides tested
        first, as conditionals of their own; None when the test is not such a mix."""
        test = node.test
        if not isinstance(test, ast.BoolOp):
            return None
        host = [v for v in test.values if _settings_test(v)]
        rest = [v for v in test.values if not _settings_test(v)]
        if not host or not rest:
            return None
        def joined(values: list[ast.expr]) -> ast.expr:
            return values[0] if len(values) == 1 else ast.BoolOp(op=test.op, values=values)
        inner = ast.IfExp(test=joined(rest), body=node.body, orelse=node.orelse)
        if isinstance(test.op, ast.And):
            return ast.IfExp(test=joined(host), body=inner, orelse=copy.deepcopy(node.orelse))
        return ast.IfExp(test=joined(host), body=copy.deepcopy(node.body), orelse=inner)

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        split = self._split(node)
        if split is not None:  # its own test Python decides: only what it holds may change
            return self.generic_visit(split)
        node = self.generic_visit(node)  # type: ignore[assignment]
        if _host_test(node.test) or isinstance(node.test, ast.Constant):
            return node
        test = tensor_test(node.test)
        if test is None:
            return node
        self.changed = True
        module = self.numpy[0] if self.numpy is not None and self._of_numpy(node.test) else "torch"
        return ast.Call(func=ast.Attribute(value=ast.Name(module), attr="where"),
                        args=[ast.parse(test, mode="eval").body, node.body, node.orelse], keywords=[])


def conditional(stmt: ast.stmt, text: Text) -> Made | None:
    """A statement whose conditional expression tests a tensor, with the conditional as a
    ``torch.where`` (``np.where`` where the test reads numpy's results: an array's, which Dynamo
    traces as a tensor)."""
    return transformed_statement(stmt, _Conditional(numpy_names(text.source, stmt)), CONDITIONAL, (
        "both values are computed (torch.where evaluates both: an index out of range or a division by zero on the "
        "side not taken still runs) and are tensors or numbers of one shape (np.where for numpy's: an array "
        "of no dimensions where numpy gave a scalar)"))


# -- an early return, a state update under a test ------------------------------------------------


class _CountClamped(ast.NodeTransformer):
    """Divisions by the count a test compares with zero as divisions by ``torch.where(<test>, 1,
    count)``: the count itself wherever the division's value is taken (a fractional count too),
    1 where it is not."""

    def __init__(self, count: ast.expr, test: str) -> None:
        self.count = ast.dump(count)
        self.test = test
        self.changed = False

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.op, (ast.Div, ast.FloorDiv)) and ast.dump(node.right) == self.count:
            self.changed = True
            node.right = ast.parse(f"torch.where({self.test}, 1, {ast.unparse(node.right)})", mode="eval").body
        return node


def _zero_count(test: ast.expr) -> ast.expr | None:
    """``cnt == 0`` (``0 == cnt``, ``cnt < 1``, ``cnt <= 0``): the count a test compares with zero."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    zero = lambda n: isinstance(n, ast.Constant) and n.value == 0 and not isinstance(n.value, bool)  # noqa: E731
    one = isinstance(right, ast.Constant) and right.value == 1 and not isinstance(right.value, bool)
    if isinstance(op, ast.Eq) and zero(right) or isinstance(op, ast.LtE) and zero(right) or isinstance(op, ast.Lt) and one:
        return _read_back(left)
    if isinstance(op, ast.Eq) and zero(left):
        return _read_back(right)
    return None


def _read_back(node: ast.expr) -> ast.expr:
    """The tensor ``cnt.item()``, ``int(cnt)`` or ``float(cnt)`` reads back (``cnt`` itself otherwise)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "item" and not node.args:
        return node.func.value
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float")
            and len(node.args) == 1 and not node.keywords):
        return node.args[0]
    return node


def early_return(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: return A`` and, to the end of its block, assignments of plain names
    and ``return B``, as the assignments and ``return torch.where(<test>, A, B)`` (part by part
    when both return tuples of one length). The test and A are read where the ``if`` stood (bound
    first when the assignments rebind a name they read); a test ``cnt == 0`` whose B divides by
    ``cnt`` divides by ``cnt.clamp(min=1)``, so the value not taken is finite and no NaN
    reaches the gradient through it."""
    if not isinstance(stmt, ast.If) or len(stmt.body) != 1:
        return None
    ret = stmt.body[0]
    if not isinstance(ret, ast.Return) or ret.value is None:
        return None
    test = tensor_test(stmt.test)
    if test is None or _host_test(stmt.test, flags=False):
        return None
    block, at = block_of(text.source, stmt)
    # ``else:`` around the rest (DBNet's masked L1 loss): the same, the ``else`` body the tail;
    # whatever follows the ``if`` is never reached, both branches having returned.
    tail = stmt.orelse or block[at + 1:]
    if not tail or not isinstance(tail[-1], ast.Return) or tail[-1].value is None or not _free_of_effects(tail[:-1]):
        return None
    early, late = ret.value, tail[-1].value
    a_parts = early.elts if isinstance(early, ast.Tuple) else [early]
    b_parts = late.elts if isinstance(late, ast.Tuple) else [late]
    if isinstance(early, ast.Tuple) != isinstance(late, ast.Tuple) or len(a_parts) != len(b_parts):
        return None
    if any(isinstance(v, ast.Constant) and v.value is None for v in [*a_parts, *b_parts]):
        return None
    rebound = set(_stored(tail[:-1]))
    lines: list[str] = []
    pred = test
    if names_loaded(stmt.test) & rebound:
        lines.append(f"_pred = {test}")
        pred = "_pred"
    then = [text.of(a) for a in a_parts]
    if any(names_loaded(a) & rebound for a in a_parts):
        lines.append(f"_early = {text.of(early)}")
        then = [f"_early[{i}]" for i in range(len(a_parts))] if isinstance(early, ast.Tuple) else ["_early"]
    note = ("the early return's value and the last one are tensors of one shape and dtype (torch.where computes "
            "both: the statements after the `if` run whatever the test)")
    count = _zero_count(stmt.test)
    clamped: list[str] = []

    def clamped_text(node: ast.AST) -> str | None:
        """A statement or value after the ``if`` dividing by the count made 1 where the test
        holds, or None when it does not divide by it: computed when the count is 0 too, it must
        stay finite (an infinity there makes the gradient NaN through torch.where, though not taken)."""
        if count is None:
            return None
        clamp = _CountClamped(count, pred)
        new = clamp.visit(copy.deepcopy(node))
        if not clamp.changed:
            return None
        clamped.append(text.of(count))
        return unparsed(new)

    for s in tail[:-1]:
        new_s = clamped_text(s)
        lines += text.body_lines([s]) if new_s is None else new_s.split("\n")
    other = [clamped_text(b) or text.of(b) for b in b_parts]
    if clamped:
        note += f"; the count `{clamped[0]}` divides as 1 where the test holds (those values are not taken)"
    picks = [a if a == b else f"torch.where({pred}, {a}, {b})" for a, b in zip(then, other, strict=True)]
    for i, (a, b) in enumerate(zip(a_parts, b_parts, strict=True)):
        keys = _dict_keys(a)
        if (keys is not None or _dict_keys(b) is not None) and (keys != _dict_keys(b) or then[i] != text.of(a)):
            return None  # dicts of other keys: torch.where picks tensors, not dicts
        if keys is not None:
            # dict(l1_loss=x) on both sides: a dict of where's, key by key
            values = [(k, text.of(va), clamped_text(vb) or text.of(vb)) for (k, va), (_, vb) in
                      zip(_dict_items(a), _dict_items(b), strict=True)]
            picks[i] = "dict(" + ", ".join(f"{k}={va if va == vb else f'torch.where({pred}, {va}, {vb})'}"
                                           for k, va, vb in values) + ")"
    lines.append(f"return {', '.join(picks)}")
    return Made(lines, EARLY, note, last=None if stmt.orelse else tail[-1])


def _dict_items(node: ast.expr) -> list[tuple[str, ast.expr]]:
    """The (key, value) pairs of ``dict(k=v, ...)`` or ``{"k": v, ...}``; [] for anything else."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args
            and all(k.arg is not None for k in node.keywords)):
        return [(str(k.arg), k.value) for k in node.keywords]
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) and k.value.isidentifier()
                                          for k in node.keys):
        return [(str(k.value), v) for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)]
    return []


def _dict_keys(node: ast.expr) -> list[str] | None:
    items = _dict_items(node)
    return [k for k, _ in items] if items else None


#: An augmented assignment's operator: its spelling and the operand that leaves the value as it is.
_IDENTITY: dict[type[ast.operator], tuple[str, str]] = {
    ast.Add: ("+", "0"), ast.Sub: ("-", "0"), ast.Mult: ("*", "1"), ast.Div: ("/", "1")}


#: In-place tensor methods whose out-of-place twin is the name without its underscore.
_TWINNED = frozenset({"abs_", "add_", "clamp_", "clamp_max_", "clamp_min_", "div_", "exp_", "lerp_", "masked_fill_",
                      "mul_", "neg_", "pow_", "relu_", "sigmoid_", "sqrt_", "sub_", "tanh_"})

_Update = Callable[[str], list[str]]  # the update's lines, given the test's text


def _args(call: ast.Call, text: Text) -> str | None:
    if any(k.arg is None for k in call.keywords):
        return None  # **kwargs: arguments it cannot name
    return ", ".join([text.of(a) for a in call.args] + [f"{k.arg}={text.of(k.value)}" for k in call.keywords])


def _in_place(stmt: ast.stmt, text: Text) -> _Update | None:
    """``t.clamp_(...)`` (an in-place method with an out-of-place twin, ``zero_``, ``fill_``,
    ``copy_``; a chain of them, ``t.mul_(0.9).add_(v)``) as ``t.copy_(torch.where(<test>, <the
    new value>, t))``; None otherwise."""
    call: ast.expr | None = stmt.value if isinstance(stmt, ast.Expr) else None
    chain: list[tuple[ast.Call, str]] = []
    while isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
        chain.append((call, call.func.attr))
        call = call.func.value
    base = call
    if not chain or not isinstance(base, (ast.Name, ast.Attribute, ast.Subscript)):
        return None
    t, new = text.of(base), text.of(base)
    for step, method in reversed(chain):
        args = _args(step, text)
        if args is None:
            return None
        if method in _TWINNED:
            new = f"{new}.{method[:-1]}({args})"
        elif method == "zero_" and not args:
            new = f"torch.zeros_like({t})"
        elif method == "fill_" and len(step.args) == 1 and not step.keywords:
            new = f"torch.full_like({t}, {args})"
        elif method == "copy_" and len(step.args) == 1 and not step.keywords:
            new = args
        else:
            return None
    return lambda pred: [f"{t}.copy_(torch.where({pred}, {new}, {t}))"]


def _update(stmt: ast.stmt, text: Text, bound: frozenset[str] = frozenset()) -> tuple[_Update, str] | None:
    """One statement of the body as an update made whatever the test (its lines, given the
    test), with what it updates; None for a statement that is not one. A local name is state
    too when it is ``bound`` before the ``if`` (LoFTR's ``c_pos_w = 0.0`` in its corner case:
    the weight it had otherwise is there to pick)."""
    local = _assigned_name(stmt) in bound
    state = (ast.Attribute, ast.Subscript, ast.Name) if local else (ast.Attribute, ast.Subscript)
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, state) and type(stmt.op) in _IDENTITY:
        target, value = text.of(stmt.target), text.of(stmt.value)
        op, same = _IDENTITY[type(stmt.op)]
        return (lambda pred: [f"{target} {op}= torch.where({pred}, {value}, {same})"]), target
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], state):
        target, value = text.of(stmt.targets[0]), text.of(stmt.value)
        return (lambda pred: [f"{target} = torch.where({pred}, {value}, {target})"]), target
    made = _in_place(stmt, text)
    if made is not None:
        return made, text.of(stmt.value.func.value)  # type: ignore[attr-defined]
    if (isinstance(stmt, ast.For) and not stmt.orelse and isinstance(stmt.target, ast.Name)
            and not names_loaded(stmt.iter) & {stmt.target.id}):
        # for p in self.net.parameters(): p.data.clamp_(...) - each turn updates in place
        inner = [_in_place(s, text) for s in stmt.body]
        if not inner or any(u is None for u in inner):
            return None
        header, unit = f"for {text.of(stmt.target)} in {text.of(stmt.iter)}:", text.unit
        return (lambda pred: [header, *(unit + ln for u in inner if u is not None for ln in u(pred))]), header
    return None


def _assigned_name(stmt: ast.stmt) -> str | None:
    """The local name ``stmt`` assigns or updates (``c_pos_w = 0.0``, ``n += 1``); None for any
    other statement."""
    target = (stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
              else stmt.target if isinstance(stmt, ast.AugAssign) else None)
    return target.id if isinstance(target, ast.Name) else None


def _no_grad(stmt: ast.stmt) -> bool:
    """``with torch.no_grad():`` (alone)."""
    return (isinstance(stmt, ast.With) and len(stmt.items) == 1 and stmt.items[0].optional_vars is None
            and ast.unparse(stmt.items[0].context_expr) in ("torch.no_grad()", "no_grad()"))


class _Predicated:
    """The updates of an ``if`` tree made whatever its tests, each picking by the tests on its
    path (``_pred``, ``_pred1``...: each test read once, where the ``if`` stood)."""

    def __init__(self, text: Text, bound: frozenset[str] = frozenset()) -> None:
        self.text, self.made = text, 0
        self.bound = bound  # the local names bound before the if: updates of them are state too
        self.lines: list[str] = []
        self.targets: list[str] = []
        self.state = False  # whether an update is of state proper (not only local names: a where's)

    def name(self) -> str:
        self.made += 1
        return "_pred" if self.made == 1 else f"_pred{self.made - 1}"

    def body(self, body: list[ast.stmt], pred: str, indent: str = "") -> bool:
        for s in body:
            if isinstance(s, ast.If) and _host_test(s.test, flags=False):
                # ``if weight is not None:`` inside: Python still decides it, around the updates
                self.lines.append(f"{indent}if {self.text.of(s.test)}:")
                if not self.body(s.body, pred, indent + self.text.unit):
                    return False
                if s.orelse:
                    self.lines.append(f"{indent}else:")
                    if not self.body(s.orelse, pred, indent + self.text.unit):
                        return False
            elif isinstance(s, ast.If):
                test = tensor_test(s.test)
                if test is None or _host_test(s.test, flags=False):
                    return False
                inner = self.name()
                self.lines.append(f"{indent}{inner} = {pred} & ({test})")
                if not self.body(s.body, inner, indent):
                    return False
                if s.orelse:
                    other = self.name()
                    self.lines.append(f"{indent}{other} = {pred} & ~{inner}")
                    if not self.body(s.orelse, other, indent):
                        return False
            elif _no_grad(s):
                self.lines.append(f"{indent}with {self.text.of(s.items[0].context_expr)}:")  # type: ignore[attr-defined]
                if not self.body(s.body, pred, indent + self.text.unit):  # type: ignore[attr-defined]
                    return False
            else:
                update = _update(s, self.text, self.bound)
                if update is None:
                    return False
                self.state = self.state or _assigned_name(s) is None
                self.lines += [indent + ln for ln in update[0](pred)]
                self.targets.append(update[1])
        return True


def state_where(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>:`` whose branches only update state - attributes or elements
    (``self.step += 1``, ``self.best = loss``, ``rates[b] = v``), tensors in place
    (``t.clamp_(-c, c)``, ``t.mul_(0.9).add_(v)``, also over a loop: ``for p in params:
    p.data.clamp_(-c, c)``), under ``torch.no_grad()`` or further tests, with an ``else`` - as the
    updates made whatever the tests, each picking by those on its path: ``self.step +=
    torch.where(<test>, 1, 0)``, ``self.best = torch.where(<test>, loss, self.best)``,
    ``t.copy_(torch.where(<test>, t.clamp(-c, c), t))``. Each test is read once, where its
    ``if`` stood, so an update made before it is seen as the ``if`` saw it."""
    if not isinstance(stmt, ast.If) or not stmt.body:
        return None
    split = _host_split(stmt, text)
    if split is not None:  # ``if self.training and <tensor test>:``: Python keeps its own part
        made = state_where(split[1], text)
        if made is None or made.first is not None or made.last is not None:
            return None
        return replace(made, lines=[f"if {split[0]}:", *(text.unit + ln for ln in made.lines)],
                       note=made.note + _SPLIT_NOTE)
    test = tensor_test(stmt.test)
    if test is None or _host_test(stmt.test, flags=False):  # Python decides it: not the break
        return None
    fn = function_of(text.source, stmt)
    if any(isinstance(n, ast.Name) and n.id.startswith("_pred") for n in ast.walk(fn or stmt)):
        return None  # the names it binds are taken
    simple = not stmt.orelse and len(stmt.body) == 1 and not isinstance(stmt.body[0], (ast.For, ast.If, ast.With))
    tree = _Predicated(text, frozenset(_bound_before(stmt, text)))
    if simple:
        ok = tree.body(stmt.body, test)
    else:
        pred = tree.name()
        # A bare flag would be the buffer itself, which an update in place then changes: a copy.
        bare = isinstance(stmt.test, (ast.Name, ast.Attribute, ast.Subscript))
        tree.lines.append(f"{pred} = {test}.clone()" if bare else f"{pred} = {test}")
        ok = tree.body(stmt.body, pred)
        if ok and stmt.orelse:
            other = tree.name()
            tree.lines.append(f"{other} = ~{pred}")
            ok = tree.body(stmt.orelse, other)
    if not ok or not tree.state:  # only local names: the where of a branch's own rewrite
        return None
    return Made(tree.lines, STATE_WHERE, (
        "what is updated holds a tensor (a buffer, a tensor attribute or element: a Python number would become a "
        "tensor), and each update is made whatever the tests, picking the old value where they fail (in place ones "
        "too, on every tensor a loop names)"))


# -- a shortcut taken on a tensor test, dropped -------------------------------------------------

_SHORTCUT_NOTE = ("the `if` only takes a shortcut: the general path gives the same outputs where the shortcut was "
                  "taken (shown on the calls where it was taken: verified only when it was taken at least once)")


def shortcut_exit(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: break`` (in a ``for`` loop), ``continue`` or ``return <value>``, the
    ``if`` alone: dropped, so the general path runs every time (padded chunks scanned too, an
    all-ones mask applied); so too ``if <tensor test>: mask = None``, an optional input dropped
    when it would change nothing (ESM's ``if not padding_mask.any(): padding_mask = None``: the
    all-False mask applied instead). Its evidence is the exit's line: it must have run in the
    unpatched run, where the outputs then show the general path agrees."""
    if not isinstance(stmt, ast.If) or stmt.orelse or len(stmt.body) != 1:
        return None
    exit_ = stmt.body[0]
    dropped_input = (isinstance(exit_, ast.Assign) and len(exit_.targets) == 1 and isinstance(exit_.targets[0], ast.Name)
                     and isinstance(exit_.value, ast.Constant) and exit_.value.value is None)
    if not (isinstance(exit_, (ast.Break, ast.Continue, ast.Return)) or dropped_input) or not tensor_tested(stmt):
        return None
    fn = function_of(text.source, stmt)
    loops = [n for n in ast.walk(fn or parsed(text.source)) if isinstance(n, (ast.For, ast.While)) and contains(n, stmt)]
    loop = loops[-1] if loops else None  # the innermost: ast.walk meets outer loops first
    if isinstance(exit_, (ast.Break, ast.Continue)) and not isinstance(loop, ast.For):
        return None  # a while loop's break may be its only exit: without it the loop would not end
    block, at = block_of(text.source, stmt)
    note = _SHORTCUT_NOTE + ("; the loop runs to its end (a for loop: bounded)" if isinstance(exit_, ast.Break) else "")
    if at + 1 < len(block):  # the if's lines go, the next statement stays where it was
        nxt = block[at + 1]
        return Made(text.statement_lines(nxt), SHORTCUT, note, last=nxt, taken=(exit_.lineno,))
    if at > 0:
        prev = block[at - 1]
        return Made(text.statement_lines(prev), SHORTCUT, note, first=prev, taken=(exit_.lineno,))
    return None


def shortcut_else(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: <shortcut> else: <general>`` as the general side alone (the
    ``else``): verified only when the shortcut ran in the unpatched run (then the outputs show
    the general side agrees with it there)."""
    return _one_side(stmt, text, keep_else=True)


def shortcut_if(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: <general> else: <shortcut>`` as the ``if``'s side alone: verified
    only when the ``else`` ran in the unpatched run."""
    return _one_side(stmt, text, keep_else=False)


def tensor_tested(stmt: ast.If | ast.Assert) -> bool:
    """Whether the ``if`` (the ``assert``) tests a tensor (not ``x is None``, a flag or a Python count)."""
    return tensor_test(stmt.test) is not None and not _host_test(stmt.test, flags=False)


def _one_side(stmt: ast.stmt, text: Text, *, keep_else: bool) -> Made | None:
    if not isinstance(stmt, ast.If) or not stmt.orelse or not tensor_tested(stmt):
        return None
    kept, dropped = (stmt.orelse, stmt.body) if keep_else else (stmt.body, stmt.orelse)
    if any(isinstance(n, (ast.Break, ast.Continue)) for s in kept for n in ast.walk(s)):
        return None  # a loop exit moved out of its if changes where the loop ends
    return Made(text.body_lines(kept), SHORTCUT, _SHORTCUT_NOTE, taken=(dropped[0].lineno,))



# -- a flag tested first -------------------------------------------------------------------------

FLAG_FIRST = "flag tested first"


def flag_first(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test> and DEBUG:`` (``or``; any flag Python decides: a name, ``self.debug``,
    ``x is None``) as ``if DEBUG and <tensor test>:``: the same test, its parts pure, but the flag
    read first, so where it decides (``DEBUG`` off) the tensor is never read and nothing breaks
    (NeRF's non-finite check behind a debug flag). Only the test's line changes."""
    if not isinstance(stmt, (ast.If, ast.While)) or not isinstance(stmt.test, ast.BoolOp):
        return None
    values = stmt.test.values
    flags = [v for v in values if _simple_flag(v)]
    rest = [v for v in values if not _simple_flag(v)]
    if not flags or not rest or values[: len(flags)] == flags:
        return None  # no flag, nothing but flags, or the flags already first
    if any(isinstance(n, (ast.NamedExpr, ast.Await, ast.Yield)) or isinstance(n, ast.Call) and not _pure_call(n)
           for v in values for n in ast.walk(v)):
        return None  # a part that may do something: its order is the program's
    if stmt.test.lineno != stmt.test.end_lineno:
        return None  # a test over several lines: left as it is
    own = text.statement_lines(stmt)
    old_test = text.of(stmt.test)
    if old_test not in own[0]:
        return None
    reordered = " and " if isinstance(stmt.test.op, ast.And) else " or "
    parts = [f"({text.of(v)})" if isinstance(v, (ast.BoolOp, ast.IfExp, ast.Lambda)) else text.of(v)
             for v in [*flags, *rest]]
    own[0] = own[0].replace(old_test, reordered.join(parts), 1)
    return Made(own, FLAG_FIRST, (
        "the test's parts are pure (reading them in another order changes nothing); where the flag does not decide "
        "it, the tensor is read and the break is there, as before"))


_PURE = {"isnan", "isinf", "isfinite", "any", "all", "sum", "mean", "max", "min", "abs", "isinstance", "hasattr",
         "numel", "dim", "size", "item", "float", "int", "bool", "len", "norm", "eq", "ne", "gt", "lt", "ge", "le"}


def _simple_flag(node: ast.expr) -> bool:
    """A flag that reads nothing a test before it could guard: a name (``DEBUG``), an attribute
    of a name (``self.verbose``), ``name is None`` / ``is not None``, ``not`` of one (not
    ``xs[i].flag``, which ``i < len(xs)`` before it may keep from raising)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _simple_flag(node.operand)
    if isinstance(node, ast.Compare):
        return (len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and isinstance(node.left, ast.Name)
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None)
    return isinstance(node, ast.Name) or isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)


def _pure_call(node: ast.Call) -> bool:
    """A call that reads a tensor and changes nothing: ``torch.isnan(x)``, ``x.any()``, ``isinstance``."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name in _PURE
