"""Source rewrites that remove a graph break, by cause: Python source in, Python source out.

Each rewrite looks at the statement at a break site and, when its shape is one it knows,
returns the file's new text. Nothing here decides whether a rewrite is right: the verifier
(``dynscope._capture.fix.verify``) reruns the patched program and only then calls it
verified. No torch import: this is text.

The rewrites, in the order they are tried for a category:

- ``guard side effect``: a print, logging, warnings or timing statement runs only outside
  compiled code (``if not torch.compiler.is_compiling():``; a timing assignment becomes a
  conditional expression so later lines still find the name).
- ``branch to torch.where``: an ``if`` on a tensor whose branches only assign names (or
  return) becomes ``torch.where`` per name (``.item()`` in the test dropped: a tensor test).
- ``branch to torch.cond``: the same ``if`` with several statements per branch becomes
  ``torch.cond`` over two local functions.
- checks (:mod:`.checks`): an ``if`` on a tensor whose body only reports runs in eager code
  only; one whose body only raises becomes an ``assert`` Dynamo traces, and an ``assert`` whose
  message is an f-string gets a constant one.
- ``keep it a tensor``: ``.item()``, ``sum/max/min(t.tolist())``, ``float(t)``/``int(t)`` at the
  site become detached tensor expressions (no gradient, as a Python number has none).
- ``mask instead of select``: ``x[mask].sum()`` becomes ``torch.where(mask, x, 0).sum()``.
- ``scatter instead of bincount``: ``torch.bincount(x, minlength=n)`` becomes a scatter of ones
  into ``n`` zeros (a size known before the values are read); the counts of the values present
  (``bincount``, its nonzero entries) placed back into zeros at ``unique``'s values, as the
  scatter they equal.
- ``randint instead of random_``: ``torch.empty(shape, dtype=d).random_(a, b)`` becomes
  ``torch.randint(a, b, shape, dtype=d)`` (Dynamo does not trace ``Tensor.random_``).
- ``clone instead of deepcopy``: ``copy.deepcopy(t)`` becomes ``t.clone()``.
- ``detach instead of requires_grad = False`` (or ``requires_grad_(False)``).
- state and control flow (:mod:`.state`): a module deep-copied and called at once as a call with
  its detached state, ``autograd.grad`` in forward as ``torch.func``, generators and a loop's
  first match as tensor ops, a loop's early stop as a stop mask, a logged loss kept a tensor.
- host round trips and data-dependent selections (:mod:`.host`): a numpy round trip as torch
  ops, ``.tolist()`` lengths of a ragged pooling as a masked segment reduction, a selection or
  a nonzero index that is only reduced as a mask, a loop over experts as dense routing,
  ``math.*`` of ``.item()`` as ``torch.*``.
- selections read inside one statement (:mod:`.masks`): ``f(x[m]).sum()``, a loss of ``p[m]``
  and ``y[m]``, ``cross_entropy`` of selected positions (``ignore_index``), ``x[m] = y[m]``,
  as ops over every element with the mask applied by ``torch.where``.
- shortcuts (:mod:`.branches`, tried last): an ``if`` on a tensor that only exits (``break`` in a
  ``for``, ``continue``, ``return``) dropped, or one side of an ``if``/``else`` kept alone; each
  verified only where the run took the shortcut (``Rewrite.taken``: lines that must have run).
- rows written back (:mod:`.host`): ``idx = c.nonzero()...`` then ``x[idx] = f(y[idx])`` as every
  row computed and ``x.copy_(torch.where(c, f(y), x))``.
- numbers read back (:mod:`.numbers`): a per-element list over ``.tolist()`` as tensor ops; a
  ring buffer's pointer read as an int kept a tensor, its writes as ``index_copy_``.
- a comprehension Dynamo is handed as a frame of its own (:mod:`.frames`): the same list built
  by a loop in the function's frame.
- numpy over Python numbers (:mod:`.scalars`): a schedule numpy computes from plain numbers,
  read back with ``float()``, computed with ``math`` instead.
"""

from __future__ import annotations

import ast
import copy
from typing import TYPE_CHECKING

from dynscope._capture.fix import (
    aliases,
    checks,
    frames,
    histograms,
    host,
    masks,
    numbers,
    rnns,
    scalars,
    signatures,
    sizes,
    state,
    topk,
)
from dynscope._capture.fix.branches import (
    appended_where,
    cond,
    conditional,
    early_return,
    elementwise,
    flag_first,
    listed_elementwise,
    shortcut_else,
    shortcut_exit,
    shortcut_if,
    state_where,
    where,
)
from dynscope._capture.fix.checks import REPORTING_CALLS, called_name
from dynscope._capture.fix.statements import (
    Made,
    Rewrite,
    Text,
    block_of,
    combined,
    function_of,
    holder_of,
    indent_unit,
    line_of,
    names_loaded,
    names_stored,
    parsed,
    read_later,
    refused,
    replaced,
    statement_at,
    transformed,
    transformed_statement,
    unified_diff,
    unparsed,
)
from dynscope._lexicon.break_categories import (
    BRANCH,
    DEEPCOPY,
    DYNAMIC_SHAPE,
    GENERATOR,
    LOGGING,
    OTHER,
    REQUIRES_GRAD,
    SCALAR,
    UNSUPPORTED_CALL,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Rewrite", "candidates", "combined", "unified_diff"]

GUARD = "guard side effect"
TENSOR = "keep it a tensor"
MASK = "mask instead of select"
CLONE = "clone instead of deepcopy"
DETACH = "detach instead of requires_grad = False"
COUNT = "scatter instead of bincount"

_TIMING = {"time", "perf_counter", "monotonic", "process_time", "time_ns", "perf_counter_ns", "monotonic_ns"}
_REDUCTIONS = {"sum": "sum", "max": "max", "min": "min"}


def candidates(source: str, lineno: int, category: str) -> tuple[list[Rewrite], str]:
    """The rewrites that apply to the statement at ``lineno``, in the order to try them, and,
    when there is none, why."""
    try:
        parsed(source)
    except SyntaxError as err:
        return [], f"the file does not parse ({err.msg})"
    alias = aliases.torch_alias(source)
    if alias is not None:  # import torch as th: made on the file with th read as torch, written back as th
        found, why = candidates(aliases.as_named(source, alias), lineno, category)
        back = [rw for rw in (aliases.from_named(r, source, alias) for r in found) if rw is not None]
        return back, why if back or not found else f"the rewrite of line {lineno} could not name torch as {alias}"
    stmt = statement_at(source, lineno)
    if stmt is None:
        return [], f"no statement at line {lineno}"
    why = refused(stmt, source)
    if why:
        return [], why
    makers = _BY_CATEGORY.get(category, ())
    if not makers:
        return [], f"no rewrite is known for a {category!r} break"
    found = []
    said: list[str] = []  # why a maker that knows the shape writes no rewrite of it
    text = Text(source, indent_unit(line_of(source, stmt.lineno), stmt.col_offset))
    for make in makers:
        try:
            new = make(stmt, text)
        except Exception as err:  # noqa: BLE001 - one maker's defect must not stop fix: the others run, and it is said
            said.append(f"the rewrite maker {make.__name__} failed on this statement ({type(err).__name__}: {err}; "
                        "a defect in dynscope: please report it)")
            continue
        if new is None:
            continue
        if isinstance(new, str):
            said.append(new)
            continue
        made = new if isinstance(new, Made) else Made(*new)
        found.append(replaced(source, made.first or stmt, made.lines, made.name, made.note, made.last, made.taken,
                              made.skipped, made.silenced, made.unchecked))
    if said and all(rw.taken or rw.skipped for rw in found):
        # Only a shortcut dropped, where a rewrite that knows the shape said why none keeps the
        # outputs (the loop's stop decides a returned length): the reason stands.
        found = []
    if not found:
        return [], "; ".join(said) or f"the statement at line {lineno} is not a shape a {category!r} rewrite knows"
    return found, ""


# -- guard side effect -------------------------------------------------------------------------


def _is_timing(expr: ast.expr) -> bool:
    return any(called_name(n) in _TIMING for n in ast.walk(expr) if isinstance(n, ast.Call))


def _guard(stmt: ast.stmt, text: Text) -> Made | None:
    if isinstance(stmt, ast.Expr) and called_name(stmt.value) in REPORTING_CALLS | _TIMING:
        own = text.statement_lines(stmt)
        reports = checks.silenced([stmt]) if called_name(stmt.value) in REPORTING_CALLS else ()
        return Made(["if not torch.compiler.is_compiling():", *(text.unit + ln for ln in own)], GUARD, (
            "the statement runs in eager code only; under torch.compile it is skipped: what it prints or logs is not "
            "said there (verified only where the run reached it and said nothing through it)"), silenced=reports)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _is_timing(stmt.value):
        value = text.of(stmt.value)
        return Made([f"{text.of(stmt.targets[0])} = {value} if not torch.compiler.is_compiling() else 0.0"], GUARD, (
            "the timing runs in eager code only; under torch.compile the value is 0.0"))
    return None


# -- keep it a tensor ----------------------------------------------------------------------------


class _Tensorised(ast.NodeTransformer):
    def __init__(self, *, zero_dim: bool = False, names: bool = False) -> None:
        self.changed = False
        # int(self.step), float(x): a name read back as a number (tried only where nothing else in
        # the statement reads a tensor back: a name may as well hold a Python number)
        self.names = names
        # .item() as .detach().reshape(()): the 0-dim tensor .item() reads, where the tensor had
        # one element in another shape (Mask2Former's torch.as_tensor([n]): a (1,) would make
        # every loss it divides a (1,) too)
        self.zero_dim = zero_dim
        # the nodes this rewrite made (float()/torch.tensor() around them go), by id, held so no id is reused
        self.made: dict[int, ast.AST] = {}

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
            # A Python number carries no gradient: neither does the detached tensor.
            self.changed = True
            kept = _detached(f.value)
            if self.zero_dim:
                kept = ast.Call(func=ast.Attribute(value=kept, attr="reshape"), args=[ast.Tuple(elts=[], ctx=ast.Load())],
                                keywords=[])
            return self._made(kept)
        if (isinstance(f, ast.Name) and f.id in _REDUCTIONS and len(node.args) == 1 and not node.keywords
                and isinstance(node.args[0], ast.Call) and isinstance(node.args[0].func, ast.Attribute)
                and node.args[0].func.attr == "tolist"):
            self.changed = True
            return self._made(_detached(ast.Call(func=ast.Attribute(value=node.args[0].func.value,
                                                                    attr=_REDUCTIONS[f.id]), args=[], keywords=[])))
        if (isinstance(f, ast.Name) and f.id in ("float", "int") and len(node.args) == 1 and not node.keywords
                and (_reads_tensor(node.args[0]) or self.names and isinstance(node.args[0], (ast.Name, ast.Attribute)))
                and id(node.args[0]) not in self.made):
            # float(x.sum()), int(torch.quantile(...)): the call's value is a tensor read back
            self.changed = True
            kept = _detached(node.args[0])
            if f.id == "int":  # int() truncates toward zero, as .long() does (a no-op on an int tensor)
                kept = ast.Call(func=ast.Attribute(value=kept, attr="long"), args=[], keywords=[])
            elif not _reads_tensor(node.args[0]):  # float(self.step): a name's dtype unknown, a counter's integral
                kept = ast.Call(func=ast.Attribute(value=kept, attr="float"), args=[], keywords=[])
            return self._made(kept)
        around_made = len(node.args) == 1 and not node.keywords and id(node.args[0]) in self.made
        if around_made and isinstance(f, ast.Name) and f.id == "float":
            return node.args[0]
        if (around_made and isinstance(f, ast.Attribute) and f.attr == "tensor" and isinstance(f.value, ast.Name)
                and f.value.id == "torch"):
            return node.args[0]
        return node

    def _made(self, node: ast.expr) -> ast.expr:
        self.made[id(node)] = node
        return node


# Methods whose value is a Python number, not a tensor: int(x.size(0)) reads no tensor back.
_NUMBER_METHODS = {"size", "dim", "numel", "item", "tolist", "nelement", "element_size", "stride", "__len__"}


def _reads_tensor(node: ast.expr) -> bool:
    """Whether ``node`` is a tensor-valued call: a method of a tensor (``x.sum()``) or a
    ``torch.*`` function, not a size, a length or a Python builtin."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
        # int(lengths[b, k]): an element of a tensor (at a site where a tensor is read back; an
        # element of a list or a size would make the patch raise, and the verifier refuse it)
        return not (isinstance(node.value, ast.Attribute) and node.value.attr in ("shape", "ndim")) \
            and not isinstance(node.slice, ast.Slice)
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if not isinstance(f, ast.Attribute) or f.attr in _NUMBER_METHODS:
        return False
    return not any(isinstance(n, ast.Attribute) and n.attr in ("shape", "ndim") for n in ast.walk(node)) and not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("len", "int", "float", "round")
        for n in ast.walk(node))


def _detached(node: ast.expr) -> ast.expr:
    return ast.Call(func=ast.Attribute(value=node, attr="detach"), args=[], keywords=[])


# Calls whose arguments are sizes (Python ints under torch.compile: a tensor there is read back).
_SIZE_METHODS = {"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_full", "new_empty", "narrow",
                 "unflatten", "tile", "split", "chunk", "topk", "kthvalue", "roll", "resize_", "unfold"}
_SIZE_FUNCTIONS = {"zeros", "ones", "empty", "full", "arange", "randn", "rand", "randint", "randperm", "eye",
                   "linspace", "range", "narrow", "split", "topk", "roll"}


def _size_read(source: str, stmt: ast.stmt) -> str | None:
    """Why a number the statement binds must stay a number: the first later read of a name it
    binds as a size (``x.view(n, -1)``, ``torch.arange(n)``, ``range(n)``, ``x[:n]``), said
    with its line; None when no name it binds is read so."""
    names = {t.id for t in ast.walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    if not names:
        return None
    fn = function_of(source, stmt)
    end = stmt.end_lineno or stmt.lineno
    for n in ast.walk(fn if fn is not None else parsed(source)):
        parts: list[ast.AST] = []
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "topk" \
                and topk.summed_topk(source, n):
            continue  # its k stays a tensor there (topk.counted_topk)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SIZE_METHODS:
            parts = list(n.args)
        elif isinstance(n, ast.Call) and (
                (isinstance(n.func, ast.Name) and n.func.id == "range")
                or (isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                    and n.func.value.id == "torch" and n.func.attr in _SIZE_FUNCTIONS)):
            parts = list(n.args)
        elif isinstance(n, ast.Slice):
            parts = [p for p in (n.lower, n.upper, n.step) if p is not None]
        for part in parts:
            read = next((r for r in ast.walk(part) if isinstance(r, ast.Name) and r.id in names
                         and isinstance(r.ctx, ast.Load) and r.lineno > end), None)
            if read is not None:
                return (f"`{read.id}` is read as a size at line {read.lineno} (`{ast.unparse(n)[:60]}`): kept a tensor, "
                        "torch.compile reads it back as a number there, and the break would move to that line")
    return None


def _tensor(stmt: ast.stmt, text: Text) -> Made | str | None:
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)):
        return None
    if (sized := _size_read(text.source, stmt)) is not None:
        return sized
    note = "the value stays a 0-dim tensor, detached as a Python number is (type promotion as for a number)"
    return transformed(stmt, _Tensorised(), TENSOR, note) or transformed(stmt, _Tensorised(names=True), TENSOR, (
        f"{note}; the name read back by int()/float() holds a tensor"))


TENSOR_CHECKED = "keep it a tensor, its type check taking one"
_NUMBER_TYPES = {"float", "int", "Number", "numbers.Number", "np.floating", "np.integer"}


def _number_check(stmt: ast.stmt | None, name: str) -> ast.Assert | None:
    """``assert isinstance(name, (float, int))``: a check that the name holds a Python number
    (and does not take a tensor yet)."""
    if not (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Call) and called_name(stmt.test) == "isinstance"
            and len(stmt.test.args) == 2 and isinstance(stmt.test.args[0], ast.Name) and stmt.test.args[0].id == name):
        return None
    kinds = stmt.test.args[1]
    names = [unparsed(k) for k in (kinds.elts if isinstance(kinds, ast.Tuple) else [kinds])]
    return stmt if names and all(n in _NUMBER_TYPES for n in names) else None


def _tensor_checked(stmt: ast.stmt, text: Text) -> Made | None:
    """``v = v.item()`` under ``if isinstance(v, torch.Tensor):``, then ``assert isinstance(v,
    (float, int))`` (the ``MetricLogger.update`` and ``TensorboardLogger.update`` of DeiT, MAE,
    BEiT, ConvNeXt and DINO): the value kept a detached tensor, and the check taking a tensor too.
    What the meters then keep (tensors of the same values) the verifier compares."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    holder = holder_of(text.source, stmt)
    if not (isinstance(holder, ast.If) and stmt in holder.body and not holder.orelse):
        return None
    block, at = block_of(text.source, holder)
    check = _number_check(block[at + 1] if at + 1 < len(block) else None, name)
    if check is None or _size_read(text.source, stmt) is not None:
        return None
    kept = transformed(stmt, _Tensorised(), TENSOR_CHECKED, "")
    if kept is None:
        return None
    body = [ln for s in holder.body for ln in (kept.lines if s is stmt else text.statement_lines(s))]
    test = copy.deepcopy(check.test)
    kinds = test.args[1]  # type: ignore[attr-defined]
    tensor = ast.Attribute(value=ast.Name("torch"), attr="Tensor")
    test.args[1] = ast.Tuple(elts=[*(kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]), tensor],  # type: ignore[attr-defined]
                             ctx=ast.Load())
    message = f", {text.of(check.msg)}" if check.msg is not None else ""
    lines = [f"if {text.of(holder.test)}:", *(text.unit + ln if ln else ln for ln in body),
             f"assert {unparsed(test)}{message}"]
    return Made(lines, TENSOR_CHECKED, (
        f"`{name}` stays a 0-dim tensor, detached as a Python number is, and the type check after it takes a tensor "
        "too: what it is handed to (a meter, a writer) keeps tensors of the same values"), first=holder, last=check)


TENSOR_0D = "keep it a 0-dim tensor"
_WHOLE = {"sum", "mean", "max", "min", "prod", "norm", "std", "var", "any", "all", "amax", "amin", "logsumexp"}


def _zero_dim(node: ast.expr) -> bool:
    """A value taken for 0-dim: a name (a loss), or a reduction over everything (``x.sum()``,
    ``torch.mean(x)``)."""
    if isinstance(node, (ast.Name, ast.Attribute)):
        return True
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _WHOLE
            and not node.keywords):
        return False
    torch_fn = isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
    return len(node.args) == (1 if torch_fn else 0)


def _tensor_0d(stmt: ast.stmt, text: Text) -> Made | None:
    """:func:`_tensor` with ``.item()`` as ``.detach().reshape(())``: tried after it, for a
    one-element tensor of another shape."""
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)) or not any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "item" and not n.args
            and not _zero_dim(n.func.value) for n in ast.walk(stmt)):
        return None  # every .item() reads a name (a loss) or a whole reduction: .detach() is already 0-dim
    if _size_read(text.source, stmt) is not None:
        return None  # said once, by _tensor
    return transformed(stmt, _Tensorised(zero_dim=True), TENSOR_0D, (
        "the value stays a tensor of no dimensions (as .item() required one element), detached as a Python number "
        "is (type promotion as for a number)"))


def _unpacked(stmt: ast.stmt, text: Text) -> tuple[list[str], str, str] | str | None:
    """``h, w = size.tolist()`` as ``h, w = size.detach().unbind(0)``: one 0-dim tensor a name."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], (ast.Tuple, ast.List))
            and all(isinstance(e, ast.Name) for e in stmt.targets[0].elts) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "tolist"
            and not stmt.value.args and not stmt.value.keywords):
        return None
    if (sized := _size_read(text.source, stmt)) is not None:
        return sized
    return [f"{text.of(stmt.targets[0])} = {text.of(stmt.value.func.value)}.detach().unbind(0)"], TENSOR, (
        "the numbers stay 0-dim tensors, one a name, detached as Python numbers are: they are used only where a "
        "tensor serves (arithmetic, clamp bounds), not as sizes, indices or Python conditions")


# -- masks, copies, requires_grad ----------------------------------------------------------------


class _Masked(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        # Only x[x <cmp> c].sum(): the mask has x's own shape (a mask of another shape would
        # broadcast from the right), and a sum over everything (no dim).
        if (isinstance(f, ast.Attribute) and f.attr == "sum" and not node.args and not node.keywords
                and isinstance(f.value, ast.Subscript) and isinstance(f.value.slice, ast.Compare)
                and ast.dump(f.value.slice.left) == ast.dump(f.value.value)):
            sub = f.value
            self.changed = True
            kept = ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="where"),
                            args=[sub.slice, sub.value, ast.Constant(0)], keywords=[])
            return ast.Call(func=ast.Attribute(value=kept, attr="sum"), args=[], keywords=[])
        return node


class _Counted(ast.NodeTransformer):
    """``torch.bincount(x, minlength=n)`` (or ``x.bincount(minlength=n)``), no weights, as
    ``torch.zeros(n, dtype=torch.long, device=x.device).scatter_add(0, x, torch.ones_like(x))``:
    the counts at a size known before the values are read."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "bincount"):
            return node
        method = not (isinstance(f.value, ast.Name) and f.value.id == "torch")
        args = [f.value, *node.args] if method else list(node.args)
        minlength = next((k.value for k in node.keywords if k.arg == "minlength"), args[2] if len(args) > 2 else None)
        weights = next((k.value for k in node.keywords if k.arg == "weights"), args[1] if len(args) > 1 else None)
        if len(args) < 1 or minlength is None or weights is not None or any(
                k.arg not in ("minlength", "input") for k in node.keywords):
            return node
        values = args[0]
        self.changed = True
        zeros = ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="zeros"), args=[minlength], keywords=[
            ast.keyword(arg="dtype", value=ast.Attribute(value=ast.Name("torch"), attr="long")),
            ast.keyword(arg="device", value=ast.Attribute(value=copy.deepcopy(values), attr="device"))])
        ones = ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="ones_like"), args=[copy.deepcopy(values)],
                        keywords=[])
        return ast.Call(func=ast.Attribute(value=zeros, attr="scatter_add"), args=[ast.Constant(0), values, ones],
                        keywords=[])


def _counted(stmt: ast.stmt, text: Text) -> Made | None:
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)):
        return None
    return transformed(stmt, _Counted(), COUNT, (
        "every value is below minlength (bincount would grow its result past it; the scatter raises instead) "
        "and the values are 1-D (as bincount requires)"))


PLACED = "the counts scattered at their values instead of the present ones placed back"


def _bincount_of(value: ast.expr) -> ast.expr | None:
    """``x`` of ``torch.bincount(x)`` or ``x.bincount()`` with no other argument."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "bincount"
            and not value.keywords):
        return None
    torch_call = isinstance(value.func.value, ast.Name) and value.func.value.id == "torch"
    if torch_call:
        return value.args[0] if len(value.args) == 1 else None
    return value.func.value if not value.args else None


def _nonzero_kept(value: ast.expr, name: str) -> bool:
    """``c[c.nonzero()].squeeze()``, ``c[c > 0]``, ``c[c != 0]``: the nonzero entries of ``c``."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("squeeze", "flatten", "view", "reshape"):
        value = value.func.value
    if not (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == name):
        return False
    index = value.slice
    if isinstance(index, ast.Compare) and len(index.ops) == 1 and isinstance(index.ops[0], (ast.Gt, ast.NotEq)):
        return unparsed(index.left) == name and unparsed(index.comparators[0]) == "0"
    return unparsed(index) in (f"{name}.nonzero()", f"torch.nonzero({name})")


def _unique_of(index: ast.expr) -> ast.expr | None:
    """``x`` of ``torch.unique(x)`` or ``x.unique()`` (sorted, as both are by default)."""
    if not (isinstance(index, ast.Call) and isinstance(index.func, ast.Attribute) and index.func.attr == "unique"
            and not index.keywords):
        return None
    if isinstance(index.func.value, ast.Name) and index.func.value.id == "torch":
        return index.args[0] if len(index.args) == 1 else None
    return index.func.value if not index.args else None


def _zeros_made(value: ast.expr) -> bool:
    """``torch.zeros(n, ...)`` with any chain of casts and moves after it (``.long().cuda()``)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in (
            "long", "int", "float", "double", "cuda", "cpu", "to"):
        value = value.func.value
    return isinstance(value, ast.Call) and unparsed(value.func) == "torch.zeros"


def _counts_placed(stmt: ast.stmt, text: Text) -> Made | None:
    """``c = torch.bincount(x)``, ``c = c[c.nonzero()].squeeze()``, ``z = torch.zeros(n, ...)``,
    ``z[torch.unique(x)] = c`` (benchmarking-gnns' class sizes, and code that copies it): the
    counts of the values present, placed back at those values in zeros, are the counts of every
    value, so ``z = z.scatter_add(0, x, ones)``: the sizes known before the values are read."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    c, x = stmt.targets[0].id, _bincount_of(stmt.value)
    block, at = block_of(text.source, stmt)
    if x is None or at + 1 >= len(block):
        return None
    kept = block[at + 1]
    if not (isinstance(kept, ast.Assign) and len(kept.targets) == 1 and isinstance(kept.targets[0], ast.Name)
            and kept.targets[0].id == c and _nonzero_kept(kept.value, c)):
        return None
    between: list[ast.stmt] = []
    for s in block[at + 2:]:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript) \
                and isinstance(s.value, ast.Name) and s.value.id == c:
            write = s.targets[0]
            z = write.value
            unique = _unique_of(write.slice)
            made = [b for b in between if isinstance(b, ast.Assign) and len(b.targets) == 1
                    and unparsed(b.targets[0]) == unparsed(z)]
            if unique is None or unparsed(unique) != unparsed(x) or not isinstance(z, ast.Name) or len(made) != 1 \
                    or not _zeros_made(made[0].value) or any(z.id in names_loaded(b) for b in between if b is not made[0]):
                return None
            if c in names_loaded(x) or read_later(text.source, s, c):
                return None
            zt, xt = text.of(z), text.of(x)
            lines = [ln for b in between for ln in text.statement_lines(b)]
            lines.append(f"{zt} = {zt}.scatter_add(0, {xt}, torch.ones_like({xt}, dtype={zt}.dtype))")
            return Made(lines, PLACED, (
                f"`{zt}` holds zeros before the write and every value of `{xt}` is below its length (the original "
                "raised IndexError otherwise, and so does the scatter)"), first=stmt, last=s)
        if c in names_loaded(s) or c in names_stored(s) or names_stored(s) & names_loaded(x):
            return None
        between.append(s)
    return None


RANDINT = "randint instead of random_"
_FACTORIES = {"empty", "zeros", "ones", "full"}  # a fresh tensor whose values random_ overwrites


NEW_IDIOM = "new_zeros / full_like instead of Tensor.new"


class _NewIdiom(ast.NodeTransformer):
    """The old ``Tensor.new`` idioms Dynamo does not trace, as the factories that say the same:
    ``t.new(a, b).zero_()`` -> ``t.new_zeros(a, b)``, ``t.new(*s).fill_(c)`` -> ``t.new_full(s, c)``,
    ``t.new().resize_as_(u).fill_(c)`` -> ``torch.full_like(u, c, dtype=t.dtype, device=t.device)``
    (``.zero_()``: ``torch.zeros_like``; ``t`` and ``u`` one name: ``torch.full_like(u, c)``)."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr in ("zero_", "fill_") and not node.keywords
                and len(node.args) == (1 if f.attr == "fill_" else 0) and isinstance(f.value, ast.Call)):
            return node
        made = f.value  # t.new(...) or t.new().resize_as_(u)
        if (isinstance(made.func, ast.Attribute) and made.func.attr == "resize_as_" and len(made.args) == 1
                and not made.keywords and _new_of(made.func.value) == []):
            base = made.func.value.func.value  # type: ignore[attr-defined]
            like = made.args[0]
            same = unparsed(base) == unparsed(like)
            keywords = [] if same else [ast.keyword("dtype", ast.Attribute(value=base, attr="dtype")),
                                        ast.keyword("device", ast.Attribute(value=base, attr="device"))]
            name = "zeros_like" if f.attr == "zero_" else "full_like"
            self.changed = True
            return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr=name),
                            args=[like, *node.args], keywords=keywords)
        sizes = _new_of(made)
        if not sizes:
            return node
        base = made.func.value  # type: ignore[attr-defined]
        self.changed = True
        if f.attr == "zero_":
            return ast.Call(func=ast.Attribute(value=base, attr="new_zeros"), args=sizes, keywords=[])
        shape = sizes[0].value if len(sizes) == 1 and isinstance(sizes[0], ast.Starred) else \
            ast.Tuple(elts=sizes, ctx=ast.Load())
        return ast.Call(func=ast.Attribute(value=base, attr="new_full"), args=[shape, *node.args], keywords=[])


def _new_of(node: ast.expr) -> list[ast.expr] | None:
    """``t.new(*sizes)`` with no keywords: its size arguments (``[]`` for ``t.new()``); None for
    another call, or one whose argument may be data (a list, a tensor) rather than a size."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "new"
            and not node.keywords):
        return None
    if any(isinstance(a, (ast.List, ast.ListComp)) or (isinstance(a, ast.Constant) and not isinstance(a.value, int))
           for a in node.args):
        return None  # t.new([1, 2]): a tensor of those values
    return list(node.args)


def _new_idiom(stmt: ast.stmt, text: Text) -> Made | None:
    return transformed_statement(stmt, _NewIdiom(), NEW_IDIOM, (
        "the arguments of new() are sizes (not data: t.new(x) of a tensor or a list would copy values); the tensor "
        "made has the dtype and device of the one new() was called on, as before"))


class _Drawn(ast.NodeTransformer):
    """``torch.empty(shape, dtype=d, device=v).random_(a, b)`` as ``torch.randint(a, b, shape,
    dtype=d, device=v)``: Dynamo does not trace ``Tensor.random_``; ``torch.randint`` draws the
    same integers from the same generator."""

    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if not (isinstance(f, ast.Attribute) and f.attr == "random_" and not node.keywords and 1 <= len(node.args) <= 2):
            return node
        made = f.value
        if not (isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and isinstance(made.func.value, ast.Name)
                and made.func.value.id == "torch" and made.func.attr in _FACTORIES and made.args
                and all(k.arg in ("dtype", "device") for k in made.keywords)):
            return node
        size = made.args[0] if made.func.attr != "full" or len(made.args) == 2 else None
        if size is None or (made.func.attr != "full" and len(made.args) != 1):
            return node  # torch.zeros(2, 3) (sizes as arguments) or a full without its value: left
        bounds = node.args if len(node.args) == 2 else [ast.Constant(0), node.args[0]]
        if not any(k.arg == "dtype" for k in made.keywords):
            return node  # a float tensor's random_ draws floats: randint's default dtype would differ
        self.changed = True
        return ast.Call(func=ast.Attribute(value=ast.Name("torch"), attr="randint"), args=[*bounds, size],
                        keywords=made.keywords)


def _drawn(stmt: ast.stmt, text: Text) -> Made | None:
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)):
        return None
    return transformed(stmt, _Drawn(), RANDINT, (
        "the tensor drawn into is made on the spot (its values all overwritten), with its dtype given; "
        "torch.randint draws from the same generator as random_ (the same integers for the same seed)"))


ASTYPE = "astype without copy=False"


class _Uncopied(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "astype" and any(
                k.arg == "copy" and isinstance(k.value, ast.Constant) and k.value.value is False for k in node.keywords):
            self.changed = True
            node.keywords = [k for k in node.keywords if k.arg != "copy"]
        return node


def _astype_copied(stmt: ast.stmt, text: Text) -> Made | None:
    """``a.astype(np.float32, copy=False)`` as ``a.astype(np.float32)``: Dynamo traces numpy with
    torch's numpy layer, which has no ``copy=False``; the values are the same, a copy made where
    the dtype already was the one asked for."""
    if isinstance(stmt, (ast.If, ast.While, ast.For, ast.With, ast.Try)):
        return None
    return transformed(stmt, _Uncopied(), ASTYPE, (
        "nothing writes into the array later expecting the one it was made from to change (copy=False returned that "
        "very array where the dtype already matched; now it is a copy of the same values)"))


def _mask(stmt: ast.stmt, text: Text) -> Made | None:
    return transformed(stmt, _Masked(), MASK, "a sum over the selected values equals the masked sum")


class _Cloned(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        called = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if called == copy.deepcopy.__name__ and len(node.args) == 1:  # copy.deepcopy(x) or deepcopy(x)
            self.changed = True
            return ast.Call(func=ast.Attribute(value=node.args[0], attr="clone"), args=[], keywords=[])
        return node


def _clone(stmt: ast.stmt, text: Text) -> Made | None:
    return transformed(stmt, _Cloned(), CLONE, "the copied value is a tensor")


def _detach(stmt: ast.stmt, text: Text) -> tuple[list[str], str, str] | None:
    note = "nothing later needs the gradient of the value"
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
            and stmt.targets[0].attr == "requires_grad" and isinstance(stmt.targets[0].value, ast.Name)
            and isinstance(stmt.value, ast.Constant) and stmt.value.value is False):
        name = stmt.targets[0].value.id
        return [f"{name} = {name}.detach()"], DETACH, note
    if not isinstance(stmt, ast.Expr) or not isinstance(stmt.value, ast.Call):
        return None
    call = stmt.value
    f = call.func
    off = len(call.args) == 1 and isinstance(call.args[0], ast.Constant) and call.args[0].value is False
    if isinstance(f, ast.Attribute) and f.attr == "requires_grad_" and off and isinstance(f.value, ast.Name):
        name = f.value.id
        return [f"{name} = {name}.detach()"], DETACH, "nothing later needs the gradient of the value"
    return None


_BY_CATEGORY: dict[str, tuple[Callable[[ast.stmt, Text], tuple[list[str], str, str] | Made | str | None], ...]] = {
    LOGGING: (_guard,),
    UNSUPPORTED_CALL: (_guard, scalars.numpy_math, host.numpy_to_torch, _tensor, _astype_copied),
    # A per-element if over a range is one where over the tensor: before the state update, which
    # would keep the loop and pick element by element.
    BRANCH: (flag_first, scalars.numpy_math, masks.guarded_fill, state.tensor_ops, state.first_match, state.stop_mask, where, appended_where, early_return, elementwise,
             state_where, cond, checks.guarded_check, checks.asserted, checks.assert_message, conditional, shortcut_exit,
             shortcut_else, shortcut_if, checks.guard_dropped),
    # A print of loss.item(): guarded when kept a tensor fails; a loss kept for the record stays a tensor.
    SCALAR: (flag_first, sizes.arange_listed, sizes.run_ends, sizes.array_elements, numbers.numpy_kept, scalars.numpy_math, where, appended_where, early_return, state_where, cond, checks.guarded_check, checks.asserted, state.logged_value,
             topk.counted_topk, host.count_kept, host.count_guard, host.numpy_to_torch, host.segment_reduction, numbers.pointer_kept,
             numbers.per_element_list, listed_elementwise, host.math_to_torch, _tensor_checked, _tensor, _tensor_0d, _unpacked, _guard,
             numbers.indexed_by_tensor, numbers.length_fill, numbers.lengths_kept, numbers.loop_over_elements, numbers.trim_dropped, numbers.ranged_fill,
             numbers.zipped_fill, numbers.windowed_rows, numbers.rolled, numbers.stacked_picks, numbers.sliced_write, numbers.prefix_sums,
             state.reported_value, state.stop_mask, shortcut_exit, shortcut_else, shortcut_if, checks.guard_dropped),
    DYNAMIC_SHAPE: (sizes.run_ends, histograms.histogram_selection, _mask, _counted, _counts_placed, where, host.dense_experts, masks.indexed_write, masks.masked_assignment, masks.rows_reduced, masks.inline_selection,
                    host.masked_select, masks.bound_selection, masks.nonzero_tuple, masks.nonzero_column, masks.ignored_targets, host.scattered_rows, host.nonzero_end, host.padded_targets,
                    host.sorted_mask_back, host.distinct_spread, numbers.nonzero_visited),
    DEEPCOPY: (state.teacher_call, _clone),
    REQUIRES_GRAD: (state.func_grad, _detach),
    GENERATOR: (frames.comprehension_loop,),
    OTHER: (rnns.unrolled_recurrence, _new_idiom, signatures.signature_choice, _astype_copied, state.func_grad, state.made_in_forward, numbers.numpy_item, scalars.numpy_math, _drawn),  # autograd.grad (trace_autograd_ops off); nn.Parameter()
}

