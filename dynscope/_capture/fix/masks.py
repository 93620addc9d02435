"""Boolean-mask selections read inside one statement, as ops over every element.

``x[mask]`` has as many elements as the mask holds: its size is the data's, so Dynamo breaks
there. Where the statement only reduces what it selects, the same value comes from every
element with the mask applied by ``torch.where`` (static shapes):

- ``masked reduction inline``: ``f(x[m]).sum()`` (``.mean()``, ``.max()``, ``.min()``, a count,
  ``f`` elementwise or a submodule applied row by row) as ``torch.where(m, f(x), fill)``
  reduced; a mean divides by the count the mask holds.
- ``masked loss``: ``F.mse_loss(p[m], y[m])`` (``l1_loss``, ``smooth_l1_loss``,
  ``huber_loss``, ``binary_cross_entropy_with_logits``) as the loss of every element, the ones
  the mask leaves out set to zero first, summed and divided by the count.
- ``ignore_index instead of select``: ``F.cross_entropy(logits[m], y[m])`` (``nll_loss``) as
  the loss over every position with the unselected targets set to the ignored index.
- ``where instead of masked assignment``: ``x[m] = y[m]`` and ``x[m] += v`` as
  ``x.copy_(torch.where(m, ..., x))``: in place, as the assignment was.
- ``masked_fill for a write its test only guards``: ``if m.any(): x[m] = c`` as
  ``x.masked_fill_(m, c)`` (with no element set, the fill writes nothing).

The values the mask leaves out are never used: where the mask screens out non-finite values
(``~torch.isnan(y)``), they are set to zero before any arithmetic, so a NaN there cannot reach
a gradient. Text only (no torch import); the verifier reruns the patched program.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from dynscope._capture.fix.host import MASK_WORDS, Reduced, Selection, paren
from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    contains,
    function_of,
    holder_of,
    names_loaded,
    names_stored,
    parsed,
    read_later,
    statement_at,
    unparsed,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ROWS", "rows_reduced", "ASSIGN", "COLUMN", "nonzero_column", "BOUND", "WRITTEN", "FILL", "IGNORE", "IGNORED", "INLINE", "LOSS", "bound_selection", "filled", "guarded_fill",
           "ignored_targets", "inline_selection", "indexed_write", "masked_assignment", "nonzero_tuple", "same_mask", "INDEXED", "TUPLE"]

INLINE = "masked reduction inline"
LOSS = "masked loss instead of select"
IGNORE = "ignore_index instead of select"
ASSIGN = "where instead of masked assignment"

# Elementwise on their first argument (a method of the tensor, or torch.f / F.f of it).
_ELEMENTWISE = {
    "abs", "neg", "exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "square", "pow", "sigmoid", "tanh",
    "relu", "gelu", "silu", "softplus", "logsigmoid", "elu", "leaky_relu", "clamp", "clamp_min", "clamp_max", "clip",
    "float", "double", "half", "sin", "cos", "tan", "sinh", "cosh", "asinh", "atan", "erf", "erfc", "reciprocal",
    "sign", "floor", "ceil", "round", "nan_to_num", "softsign", "hardtanh", "mish", "selu", "celu",
    # copies, casts and moves: each element as it was
    "contiguous", "clone", "detach", "to", "long", "int", "type_as",
}
# Methods along the trailing dimensions given them (``x[m].sum(-1)``, ``.unsqueeze(-1)``): with a
# negative dimension each works within a selected row, and the same call on every row gives each
# row's result at its place.
_TRAILING = {"sum", "mean", "prod", "amax", "amin", "norm", "softmax", "log_softmax", "logsumexp", "unsqueeze",
             "squeeze", "cumsum", "flip", "std", "var"}
# torch functions elementwise on two tensors (torch.max(a, b) with two tensors, not a reduction).
_PAIRWISE = {"max", "min", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot"}
# Tensor methods of two operands, elementwise as their operators are (``a.eq(b)`` is ``a == b``).
_BINARY_METHODS = {"eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "div", "true_divide", "logical_and",
                   "logical_or", "logical_xor", "bitwise_and", "bitwise_or"}
# Calls whose result is an index, not a mask.
_INDEX_CALLS = {"arange", "argmax", "argmin", "argsort", "randint", "randperm", "long", "int", "nonzero", "where",
                "multinomial", "searchsorted", "bucketize", "topk", "sort", "unique"}
# Calls whose result is a boolean mask.
_MASK_CALLS = {
    "isnan", "isinf", "isfinite", "isneginf", "isposinf", "logical_and", "logical_or", "logical_not", "logical_xor",
    "eq", "ne", "gt", "lt", "ge", "le", "bool", "isin",
}
_SCREENS = {"isnan", "isinf", "isfinite", "isneginf", "isposinf"}  # masks that screen non-finite values out
# Losses that are zero where input and target are both zero; the last needs its output masked.
_LOSSES = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}
_LOSSES_MASKED = {"binary_cross_entropy_with_logits"}
_CLASS_LOSSES = {"cross_entropy", "nll_loss"}


# Loss modules and the functional each calls: nn.MSELoss()(p, y) is F.mse_loss(p, y).
_LOSS_MODULES = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss",
                 "HuberLoss": "huber_loss", "BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
                 "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss"}
_LOSS_KEYWORDS = {"reduction", "beta", "delta", "ignore_index"}


def _loss_module(value: ast.expr) -> tuple[str, list[ast.keyword]] | None:
    """``nn.MSELoss(...)`` as (the functional it calls, its keywords), where the functional
    takes those keywords alike; None for any other value."""
    if not isinstance(value, ast.Call) or value.args:
        return None
    loss = _LOSS_MODULES.get(_name_of(value))
    if loss is None or any(k.arg not in _LOSS_KEYWORDS for k in value.keywords):
        return None
    return loss, list(value.keywords)


@lru_cache(maxsize=8)
def _helpers(source: str) -> frozenset[str]:
    """Functions the file defines (module level or nested) or imports from its own package
    (``from .boxes import iou``): the user's own helpers. Read once a file, as its losses are."""
    tree = parsed(source)
    return frozenset({n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))} | {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0 for a in n.names})


@lru_cache(maxsize=8)
def _module_losses(source: str) -> dict[str, tuple[str, list[ast.keyword]]]:
    """``self.<attr> = nn.MSELoss(...)`` in the file: attr -> (the functional, its keywords), for
    attributes bound to one loss module only, with keywords the functional takes alike."""
    found: dict[str, set[str]] = {}
    made: dict[str, tuple[str, list[ast.keyword]]] = {}
    for n in ast.walk(parsed(source)):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Attribute)
                and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == "self"):
            continue
        attr, loss = n.targets[0].attr, _loss_module(n.value)
        found.setdefault(attr, set()).add("" if loss is None else ast.dump(n.value))
        if loss is not None:
            made[attr] = loss
    return {a: made[a] for a, values in found.items() if len(values) == 1 and "" not in values}


@lru_cache(maxsize=8)
def _module_lambdas(source: str) -> dict[str, ast.Lambda]:
    """``self.<attr> = lambda a, b: <expr>`` in the file: attr -> the lambda, for attributes
    bound to that one lambda only, taking plain positional parameters (no defaults, no
    ``*args``) and holding no scope of its own (no nested lambda or comprehension)."""
    found: dict[str, list[ast.expr]] = {}
    for n in ast.walk(parsed(source)):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) \
            else []
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                found.setdefault(t.attr, []).append(n.value if n.value is not None else ast.Constant(None))  # type: ignore[attr-defined]
    made: dict[str, ast.Lambda] = {}
    for attr, values in found.items():
        f = values[0]
        if len(values) != 1 or not isinstance(f, ast.Lambda):
            continue
        a = f.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or any(
                isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr)) for n in ast.walk(f.body)):
            continue
        made[attr] = f
    return made


def _applied(f: ast.Lambda, args: list[ast.expr]) -> ast.expr:
    """The lambda's body with each parameter read replaced by the argument given for it."""
    given = {a.arg: v for a, v in zip(f.args.args, args, strict=True)}

    class _Put(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return copy.deepcopy(given[node.id]) if node.id in given else node

    return _Put().visit(copy.deepcopy(f.body))


def _name_of(node: ast.AST) -> str:
    """The name a call calls (``F.mse_loss`` -> "mse_loss"), "" for none."""
    if not isinstance(node, ast.Call):
        return ""
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _same_expr(a: ast.AST, b: ast.AST) -> bool:
    return unparsed(a) == unparsed(b)


def _device_like(node: ast.expr) -> bool:
    """``x.device``, ``device``, ``self.device``, ``"cuda"``: what ``.to()`` moves to without a cast."""
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    if isinstance(node, ast.Name):
        return "device" in node.id
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(":")[0] in (
        "cpu", "cuda", "xpu", "mps")


class _Undeviced(ast.NodeTransformer):
    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (isinstance(node.func, ast.Attribute) and node.func.attr == "to" and len(node.args) == 1
                and not node.keywords and _device_like(node.args[0])):
            return node.func.value
        return node


def same_mask(a: ast.AST, b: ast.AST) -> bool:
    """Whether two masks are one: the same expression up to moves to a device (``m.to(x.device)``
    and ``m.to(y.device)``: a move keeps every value)."""
    if _same_expr(a, b):
        return True
    return unparsed(_Undeviced().visit(copy.deepcopy(a))) == unparsed(_Undeviced().visit(copy.deepcopy(b)))


def _is_torch(node: ast.expr) -> bool:
    """A module's name (``torch.eq(a, b)``), not a tensor whose method is called."""
    return isinstance(node, ast.Name) and node.id in ("torch", "F", "np", "numpy", "math")


@dataclass
class _Lifted:
    """An expression that equals ``base[mask]``: ``base`` is the same computation over every
    element; ``leaves`` are the selected tensors themselves (``x`` of ``x[m]``)."""

    base: ast.expr
    mask: ast.expr
    same: bool  # the mask has the base's shape (not only its leading dimensions)
    leaves: list[ast.expr]
    rowwise: bool = False  # a submodule was applied to the selection


class _Scope:
    """The function around a site: what its names are bound to, to tell a boolean mask
    (``keep = y != pad``) from an index (``for i in range(n)``)."""

    def __init__(self, source: str, stmt: ast.stmt) -> None:
        fn = function_of(source, stmt)
        scope: ast.AST = fn if fn is not None else parsed(source)
        self.values: dict[str, list[ast.expr]] = {}
        self.counters: set[str] = set()  # loop variables and other integers
        self.unknown: set[str] = set()  # parameters, unpacked results
        for n in ast.walk(scope):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        self.values.setdefault(t.id, []).append(n.value)
                    elif isinstance(t, (ast.Tuple, ast.List)):
                        self.unknown |= {e.id for e in t.elts if isinstance(e, ast.Name)}
            elif isinstance(n, (ast.For, ast.comprehension)):
                self.counters |= {e.id for e in ast.walk(n.target) if isinstance(e, ast.Name)}
        if fn is not None:
            self.unknown |= {a.arg for a in (*fn.args.args, *fn.args.kwonlyargs, *fn.args.posonlyargs)}
        self.selected: dict[str, tuple[ast.expr, bool]] = {}  # a name bound to a selection: its mask, same shape
        self.rowwise = False  # a name was bound to a submodule's or helper's work on the selected rows
        self.picked = False  # the write is x[m, c[m]] = v: one place per selected row
        self.helpers = _helpers(source)
        self.losses = _module_losses(source)
        self.lambdas = _module_lambdas(source)
        # loss_fct = nn.CrossEntropyLoss() in the function (bound once): its functional too
        self.local_losses = {n: loss for n, vs in self.values.items() if len(vs) == 1 and n not in self.unknown
                             and (loss := _loss_module(vs[0])) is not None}

    def functional(self, node: ast.Call) -> ast.Call:
        """``self.crit(p, y)`` where the file binds ``self.crit = nn.MSELoss(...)`` (or
        ``crit(p, y)`` where the function binds ``crit`` so) as the functional loss it is
        (``torch.nn.functional.mse_loss(p, y, ...)``); other calls as they are."""
        f = node.func
        if node.keywords:
            return node
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and f.attr in self.losses:
            name, shared = self.losses[f.attr]
        elif isinstance(f, ast.Name) and f.id in self.local_losses:
            name, shared = self.local_losses[f.id]
        else:
            return node
        keywords = copy.deepcopy(shared)  # the file's own nodes, cached for every site: never handed out
        return ast.Call(func=ast.Attribute(value=ast.Attribute(value=ast.Attribute(
            value=ast.Name("torch"), attr="nn"), attr="functional"), attr=name), args=node.args, keywords=keywords)

    def applied(self, node: ast.AST) -> ast.expr | None:
        """``self.loss_fn(p, y)`` where the file binds ``self.loss_fn = lambda a, b:
        torch.mean((a - b) ** 2)`` once: that body over ``p`` and ``y``; None for any other node."""
        if not isinstance(node, ast.Call) or node.keywords:
            return None
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and f.attr in self.lambdas and not any(isinstance(a, ast.Starred) for a in node.args) \
                and len(node.args) == len(self.lambdas[f.attr].args.args):
            lam = self.lambdas[f.attr]
            reads = [n.id for n in ast.walk(lam.body) if isinstance(n, ast.Name)]
            if any(reads.count(p.arg) > 1 and not isinstance(a, (ast.Name, ast.Constant))
                   for p, a in zip(lam.args.args, node.args, strict=True)):
                return None  # an argument the body reads twice would be computed twice
            return _applied(lam, node.args)
        return None

    def origin(self, node: ast.expr) -> ast.expr:
        """What a name was bound to when it was bound once (``valid`` -> ``~torch.isnan(y)``)."""
        if isinstance(node, ast.Name) and len(self.values.get(node.id, ())) == 1 and node.id not in self.unknown:
            return self.values[node.id][0]
        return node

    def is_mask(self, node: ast.expr, depth: int = 0) -> bool | None:
        """True for a boolean mask, False for what is not one (an int, a slice, an index made
        by arange or argsort), None unknown: a parameter or a call's result. An unknown index at
        a site where the selection's size is the data's is taken for a mask; an index of ints
        there makes ``torch.where`` raise, and the verifier refuses the patch."""
        if depth > 6:
            return None
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
            return True if self.is_mask(node.operand, depth + 1) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
            sides = (self.is_mask(node.left, depth + 1), self.is_mask(node.right, depth + 1))
            return True if True in sides else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            # mask * mask is a mask (two bool tensors multiply to bool): both sides must be
            sides = (self.is_mask(node.left, depth + 1), self.is_mask(node.right, depth + 1))
            return True if sides == (True, True) else None
        if isinstance(node, ast.Call):
            name = _name_of(node)
            if name in _MASK_CALLS:
                return True
            if name in _INDEX_CALLS:
                return False
            if name in ("clone", "detach", "contiguous") and isinstance(node.func, ast.Attribute):
                return self.is_mask(node.func.value, depth + 1)
            return None
        if isinstance(node, ast.Name):
            if node.id in self.counters:
                return False
            found = [self.is_mask(v, depth + 1) for v in self.values.get(node.id, ())] \
                if node.id not in self.unknown else []
            if found and all(found):
                return True
            if False in found:
                return False
            return True if any(w in node.id.lower() for w in MASK_WORDS) else None
        if isinstance(node, ast.Attribute):
            return True if any(w in node.attr.lower() for w in MASK_WORDS) else None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and self.is_mask(node.value, depth + 1):
            return True  # mask[:n], mask[i]: part of a mask is a mask
        return False  # a constant, a slice, a tuple of indices

    def screens(self, mask: ast.expr) -> bool:
        """Whether the mask screens out non-finite values (``~torch.isnan(y)``)."""
        return any(_name_of(n) in _SCREENS for n in ast.walk(self.origin(mask)))

    def same_shape(self, base: ast.expr, mask: ast.expr) -> bool:
        """Whether the mask is made from the selected tensor itself (``x[x > 0]``,
        ``y[~torch.isnan(y)]``): then it has its shape."""
        made = self.origin(mask)
        if isinstance(made, ast.UnaryOp):
            made = made.operand
        if isinstance(made, ast.BinOp) and isinstance(made.op, (ast.BitAnd, ast.BitOr, ast.BitXor, ast.Mult)):
            # (gt > lo) & (gt < hi): elementwise, so a side made from the tensor says its shape
            return self.same_shape(base, made.left) or self.same_shape(base, made.right)
        if isinstance(made, ast.Compare):
            return any(_same_expr(e, base) for e in (made.left, *made.comparators))
        if isinstance(made, ast.Call) and _name_of(made) in _SCREENS:
            return any(_same_expr(a, base) for a in made.args)
        return False

    def lift(self, node: ast.AST) -> _Lifted | None:
        """``node`` as a computation over every element and the mask that selects from it;
        None when it is not a selection (or selects with two masks)."""
        if isinstance(node, ast.Name) and node.id in self.selected:  # d = x[m] before: d is x[m] now
            mask, same = self.selected[node.id]
            return _Lifted(node, mask, same, [node])
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _from_the_end(node.slice) and not self._holds_selection(node.slice):
                # p[..., :2] of selected boxes: counted from the end, the same place in every row
                inner = self.lift(node.value)
                if inner is not None and not inner.same:
                    return _with_base(inner, ast.Subscript(value=inner.base, slice=node.slice, ctx=ast.Load()))
                return None
            if self.is_mask(node.slice) is not False and not self._holds_selection(node.value):
                return _Lifted(node.value, node.slice, self.same_shape(node.value, node.slice), [node.value])
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else []
            if (len(parts) > 1 and _in_rows(parts[1:]) and self.is_mask(parts[0]) is not False
                    and not self._holds_selection(node.value)):
                # g[m, :2]: the selected rows' first two columns; g[:, :2] is every row's
                every = ast.Tuple(elts=[ast.Slice(), *parts[1:]], ctx=ast.Load())
                return _Lifted(ast.Subscript(value=node.value, slice=every, ctx=ast.Load()), parts[0], False,
                               [node.value])
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.lift(node.operand)
            return None if inner is None else _with_base(inner, ast.UnaryOp(op=node.op, operand=inner.base))
        if isinstance(node, ast.BinOp) and not isinstance(node.op, ast.MatMult):
            op = node.op
            return self._elementwise(node.left, node.right, lambda a, b: ast.BinOp(left=a, op=op, right=b))
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            # (labels[m] == preds[m]): a comparison is elementwise, as arithmetic is
            ops = node.ops
            return self._elementwise(node.left, node.comparators[0],
                                     lambda a, b: ast.Compare(left=a, ops=ops, comparators=[b]))
        method = self._selecting_method(node)
        if method is not None:
            return method
        pair = self._binary_method(node)
        if pair is not None:
            return pair
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch" and node.func.attr in _PAIRWISE and len(node.args) == 2
                and not node.keywords):
            # torch.max(a[m], b[m]): elementwise on two selections by one mask
            left, right = self.lift(node.args[0]), self.lift(node.args[1])
            if left is not None and right is not None and same_mask(left.mask, right.mask):
                return _Lifted(ast.Call(func=node.func, args=[left.base, right.base], keywords=[]), left.mask,
                               left.same or right.same, left.leaves + right.leaves, left.rowwise or right.rowwise)
            return None
        if isinstance(node, ast.Call) and not any(self._holds_selection(k.value) for k in node.keywords):
            f = node.func
            name = _name_of(node)
            if isinstance(f, ast.Attribute) and name in _ELEMENTWISE:
                inner = self.lift(f.value)
                if inner is not None and not any(self._holds_selection(a) for a in node.args):
                    return _with_base(inner, ast.Call(func=ast.Attribute(value=inner.base, attr=name),
                                                      args=node.args, keywords=node.keywords))
                if name in _ELEMENTWISE and node.args and isinstance(f.value, ast.Name):  # torch.f(x[m]), F.f(...)
                    first = self.lift(node.args[0])
                    if first is not None and not any(self._holds_selection(a) for a in node.args[1:]):
                        return _with_base(first, ast.Call(func=f, args=[first.base, *node.args[1:]],
                                                          keywords=node.keywords))
            along = self._along_rows(node)
            if along is not None:
                return along
            helper = self._helper_call(node)
            if helper is not None:
                return helper
            # self.head(x[m]): a submodule applied to the selected rows, applied to every row (an
            # entry of the model's own list or dict of them too: self.experts[i], getattr(self.experts, name))
            if _own_module(f) and not self._holds_selection(f) and len(node.args) == 1 and not node.keywords:
                inner = self.lift(node.args[0])
                if inner is not None and not inner.same:
                    lifted = _with_base(inner, ast.Call(func=f, args=[inner.base], keywords=[]))
                    lifted.rowwise = True
                    return lifted
        return None

    def _selecting_method(self, node: ast.AST) -> _Lifted | None:
        """``x.masked_select(m)`` (``x[m]`` where the mask has x's shape, the elementwise
        selection torch.where makes: a mask that broadcasts counts fewer, which the verifier
        refuses), and ``p[m, :].view(-1, 4)`` of selected rows of 4 (SSD's box offsets: the rows
        as they were selected, so every row as it is; a last dimension of another size, the
        verifier refuses)."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return None
        if (node.func.attr == "masked_select" and len(node.args) == 1 and not node.keywords
                and self.is_mask(node.args[0]) is not False and not self._holds_selection(node.func.value)):
            return _Lifted(node.func.value, node.args[0], True, [node.func.value])
        if _rows_viewed(node):
            inner = self.lift(node.func.value)
            return inner if inner is not None and not inner.same else None
        return None

    def _binary_method(self, node: ast.AST) -> _Lifted | None:
        """``a[m].eq(b[m])`` (a masked accuracy's hits), ``.add``, ``.mul``...: a method of two
        operands is elementwise as the operator is."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _BINARY_METHODS
                and len(node.args) == 1 and not node.keywords and not _is_torch(node.func.value)):
            return None
        attr = node.func.attr
        return self._elementwise(node.func.value, node.args[0], lambda a, b: ast.Call(
            func=ast.Attribute(value=a, attr=attr), args=[b], keywords=[]))

    def _elementwise(self, left_node: ast.expr, right_node: ast.expr,
                     make: Callable[[ast.expr, ast.expr], ast.expr]) -> _Lifted | None:
        """An elementwise operation (``make``) of two operands: both selections by one mask,
        or one selection and a value that holds none (a number, a broadcast row)."""
        left, right = self.lift(left_node), self.lift(right_node)
        if left is not None and right is not None:
            if not same_mask(left.mask, right.mask):
                return None
            same = left.same or right.same  # an elementwise pair: one shape
            return _Lifted(make(left.base, right.base), left.mask, same,
                           left.leaves + right.leaves, left.rowwise or right.rowwise)
        one, other = (left, right_node) if left is not None else (right, left_node)
        if one is None or self._holds_selection(other):
            return None
        return _with_base(one, make(one.base, other) if left is not None else make(other, one.base))

    def _along_rows(self, node: ast.Call) -> _Lifted | None:
        """``x[m].sum(-1)``, ``.unsqueeze(-1)`` (dimensions counted from the end) and
        ``F.one_hot(y[m], n)`` (a dimension added at the end): each selected row's result at its
        place, so the same call on every row."""
        f, name = node.func, _name_of(node)
        if isinstance(f, ast.Attribute) and name in _TRAILING and _trailing(node):
            inner = self.lift(f.value)
            if inner is not None and not inner.same and not any(self._holds_selection(a) for a in node.args):
                return _with_base(inner, ast.Call(func=ast.Attribute(value=inner.base, attr=name),
                                                  args=node.args, keywords=node.keywords))
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"
                and name in _TRAILING and node.args
                and _trailing(ast.Call(func=f, args=node.args[1:], keywords=node.keywords))):
            # torch.norm(g[m], dim=-1, keepdim=True): the method's rule, the selection its first argument
            first = self.lift(node.args[0])
            if first is not None and not first.same and not any(self._holds_selection(a) for a in node.args[1:]):
                return _with_base(first, ast.Call(func=f, args=[first.base, *node.args[1:]], keywords=node.keywords))
        if name == "one_hot" and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and node.args:
            # the labels the mask leaves out are filled with class 0 first (filled): an ignored 255 would raise
            first = self.lift(node.args[0])
            if first is not None and not any(self._holds_selection(a) for a in node.args[1:]):
                return _Lifted(ast.Call(func=f, args=[first.base, *node.args[1:]], keywords=node.keywords),
                               first.mask, False, first.leaves, first.rowwise)
        return None

    def _helper_call(self, node: ast.Call) -> _Lifted | None:
        """``iou(p[m], t[m], eps=1e-7)``, ``self.dist_loss(d[m].view(-1, k), t[m])``: a function of
        the file (or a method or submodule of ``self``) given rows selected by one mask, and other
        arguments that select nothing, as the same call on every row. Taking it row by row is an
        assumption (said); a row regrouped by ``.view(-1, k)`` is given as the call regroups it."""
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and f.attr in self.lambdas:
            return None  # a lambda the class binds: its body is read where it is called (functional)
        own = (isinstance(f, ast.Name) and f.id in self.helpers) or (
            isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self")
        if not own or any(self._holds_selection(k.value) for k in node.keywords) or (
                len(node.args) == 1 and isinstance(f, ast.Attribute)):
            return None  # one argument of self's: the submodule rule below
        args: list[ast.expr] = []
        found: list[_Lifted] = []
        for a in node.args:
            lifted = self._regrouped(a)
            if lifted is None:
                if self._holds_selection(a):
                    return None
                args.append(a)
                continue
            if lifted.same or (found and not same_mask(found[0].mask, lifted.mask)):
                return None
            found.append(lifted)
            args.append(lifted.base)
        if not found:
            return None
        leaves = [leaf for lifted in found for leaf in lifted.leaves]
        return _Lifted(ast.Call(func=f, args=args, keywords=node.keywords), found[0].mask, False, leaves, True)

    def _regrouped(self, node: ast.expr) -> _Lifted | None:
        """A selection, or one regrouped into rows of k (``x[m].view(-1, k)``), lifted."""
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("view", "reshape")
                and node.args and unparsed(node.args[0]) == "-1" and not node.keywords
                and not any(self._holds_selection(a) for a in node.args)):
            inner = self.lift(node.func.value)
            return None if inner is None else _with_base(inner, ast.Call(
                func=ast.Attribute(value=inner.base, attr=node.func.attr), args=node.args, keywords=[]))
        return self.lift(node)

    def _holds_selection(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ("dtype", "device"):
            return False  # .to(probs.dtype): what the selection holds, not how many
        if any(isinstance(n, ast.Name) and n.id in self.selected for n in ast.walk(node)):
            return True
        return any(isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and self.is_mask(n.slice) is not False
                   for n in ast.walk(node))


def _rooted_at_self(node: ast.expr) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "self"


def _own_module(f: ast.expr) -> bool:
    """Whether a called expression is a submodule of the model's: ``self.head``, an entry of
    its own list or dict of them (``self.experts[i]``, ``self.blocks["a"]``), or one got by
    name (``getattr(self.experts, f"expert_{i}")``)."""
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        return True
    if isinstance(f, ast.Subscript) and _rooted_at_self(f.value) and isinstance(f.value, ast.Attribute):
        return True
    return (isinstance(f, ast.Call) and isinstance(f.func, ast.Name) and f.func.id == "getattr" and len(f.args) == 2
            and not f.keywords and isinstance(f.args[0], ast.Attribute) and _rooted_at_self(f.args[0]))


def _reduction(call: ast.Call) -> str | None:
    """The reduction a loss call asks for: its ``reduction=`` constant, "mean" when none is
    given, None when it is not a constant."""
    given = next((k.value for k in call.keywords if k.arg == "reduction"), None)
    if given is None:
        return "mean"
    return given.value if isinstance(given, ast.Constant) and isinstance(given.value, str) else None


def _summed_loss(call: ast.Call, name: str) -> bool:
    """Whether a call is another loss asked for its sum (``reduction="sum"`` given): its
    ``reduction="none"`` is taken to give one loss per row (said, and verified). A mean is
    not: how many losses it averages depends on how the function reduces each row."""
    return bool(name) and name not in _CLASS_LOSSES and _reduction(call) == "sum"


def _one_place(p: ast.expr) -> bool:
    """Whether an index part is a slice or a number (``:2``, ``0``, ``-1``)."""
    return (isinstance(p, ast.Slice) or (isinstance(p, ast.Constant) and type(p.value) is int)
            or (isinstance(p, ast.UnaryOp) and isinstance(p.operand, ast.Constant)))


def _in_rows(parts: list[ast.expr]) -> bool:
    """Whether index parts are slices or numbers only, none read from a tensor: they take the
    same place within every row."""
    return all(_one_place(p) and not any(isinstance(n, ast.Subscript) for n in ast.walk(p)) for p in parts)


def _from_the_end(index: ast.expr) -> bool:
    """Whether an index starts with ``...`` and then takes slices or numbers only (``[..., :2]``,
    ``[..., 0]``): it names the trailing dimensions, whatever leads them."""
    parts = index.elts if isinstance(index, ast.Tuple) else []
    return len(parts) > 1 and isinstance(parts[0], ast.Constant) and parts[0].value is Ellipsis and all(
        _one_place(p) for p in parts[1:])


def _trailing(call: ast.Call) -> bool:
    """Whether a method's dimensions are all given and all negative (``.sum(-1)``,
    ``.unsqueeze(dim=-1)``, ``.amax((-2, -1), keepdim=True)``): counted from the end, they name the
    same dimensions of a selection and of every row."""
    dims = [k.value for k in call.keywords if k.arg == "dim"] or call.args[:1]
    if len(dims) != 1 or len(call.args) > 1 or any(k.arg not in ("dim", "keepdim") for k in call.keywords):
        return False
    parts = dims[0].elts if isinstance(dims[0], ast.Tuple) else [dims[0]]
    return bool(parts) and all(isinstance(p, ast.UnaryOp) and isinstance(p.op, ast.USub)
                               and isinstance(p.operand, ast.Constant) and type(p.operand.value) is int for p in parts)


# Functions undefined or with an infinite derivative at zero: the values left out are set to 1 there.
_SINGULAR = {"log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"}


def _singular(base: ast.expr, leaves: list[ast.expr]) -> bool:
    """Whether the computation divides by a selected value or takes its log or root."""
    ids = {id(x) for x in leaves}

    def reads_leaf(n: ast.AST) -> bool:
        return any(id(m) in ids for m in ast.walk(n))

    for n in ast.walk(base):
        if isinstance(n, ast.Call) and _name_of(n) in _SINGULAR and reads_leaf(n):
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) and reads_leaf(n.right):
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) and reads_leaf(n.left) and not (
                isinstance(n.right, ast.Constant) and isinstance(n.right.value, int) and n.right.value >= 0):
            return True
    return False


def _labels(base: ast.expr, leaves: list[ast.expr]) -> bool:
    """Whether the computation reads a selected value as a class label (``F.one_hot``)."""
    ids = {id(x) for x in leaves}
    return any(isinstance(n, ast.Call) and _name_of(n) == "one_hot" and any(id(m) in ids for m in ast.walk(n))
               for n in ast.walk(base))


def filled(scope: _Scope, lifted: _Lifted) -> ast.expr:
    """The lifted computation with the values its mask leaves out replaced before any
    arithmetic meets them, where that arithmetic could make them non-finite: set to 1 under a
    log, a root or a division, to 0 where the mask screens NaN or inf out; as it is otherwise
    (and for a bare selection: no arithmetic)."""
    base = lifted.base
    if any(base is x for x in lifted.leaves):
        return base
    fill = "1" if _singular(base, lifted.leaves) else "0" if scope.screens(lifted.mask) or _labels(
        base, lifted.leaves) else ""
    if not fill:
        return base
    sel = Selection(lifted.leaves[0], unparsed(lifted.mask), lifted.mask, same=lifted.same)
    return _Filled(lifted.leaves, sel, fill).of(base)


def _with_base(lifted: _Lifted, base: ast.expr) -> _Lifted:
    return _Lifted(base, lifted.mask, lifted.same, lifted.leaves, lifted.rowwise)


def _simple(node: ast.expr) -> bool:
    """A name, ``self.x``, ``x[:, 0]``: cheap and short enough to write twice."""
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _simple(node.value)
    if isinstance(node, ast.Subscript):
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return _simple(node.value) and all(isinstance(p, (ast.Slice, ast.Constant, ast.Name)) for p in parts)
    return False


class _Filled(ast.NodeTransformer):
    """The selected tensors (the leaves) as ``torch.where(mask, x, 0)``: what the mask leaves out
    never meets arithmetic (a NaN there would reach the gradient through it)."""

    def __init__(self, leaves: list[ast.expr], mask: Selection, fill: str = "0") -> None:
        self.leaves = {id(x) for x in leaves}
        self.mask = mask
        self.fill = fill

    def of(self, base: ast.expr) -> ast.expr:
        """A copy of ``base`` with its leaves filled (the original tree is left as it is)."""
        memo: dict[int, object] = {}
        copied = copy.deepcopy(base, memo)
        self.leaves = {id(memo[i]) for i in self.leaves if i in memo}
        out = self.visit(copied)
        assert isinstance(out, ast.expr)
        return out

    def visit(self, node: ast.AST) -> ast.AST:
        if id(node) in self.leaves:
            return ast.parse(f"torch.where({self.mask.widened(unparsed(node))}, {unparsed(node)}, {self.fill})",
                             mode="eval").body
        return super().visit(node)


_ROWWISE = ("the submodule or helper works row by row (nothing in it mixes the rows it is given) and now runs on "
            "every row, the unselected ones too; their values are masked out, but a NaN or inf computed there would "
            "reach the gradient")


class _Inline(Reduced):
    """Reductions and losses of selections inside one statement, as masked ops."""

    def __init__(self, scope: _Scope, taken: set[str]) -> None:
        super().__init__({}, {})
        self.scope = scope
        self.taken = taken  # names in use in the function
        self.bound: list[str] = []  # lines that bind a computation used more than once
        self.assumes: set[str] = set()
        self.kinds: list[str] = []
        # the nodes of the masked reductions this made, by id; held, so that no id is reused
        self.made: dict[int, ast.AST] = {}

    def visit(self, node: ast.AST) -> ast.AST:
        body = self.scope.applied(node)
        if body is not None:
            # self.loss_fn(p, y): the lambda's body over the arguments, its reductions masked
            used, self.used = self.used, False
            inlined = self.visit(body)
            if self.used:
                self.assumes.add(f"`{unparsed(node.func)}` is the lambda the class binds once (its "  # type: ignore[attr-defined]
                                 "body is written in the call's place, masked: a later rebinding would not be seen)")
                return inlined
            self.used = used
            return ast.NodeTransformer.visit(self, node)
        out = self._reduced(node)
        if out is not None:
            self.used = True
            made = ast.parse(out, mode="eval").body
            self.made.update({id(n): n for n in ast.walk(made)})  # reads of a bound selection here are masked
            return made
        return ast.NodeTransformer.visit(self, node)

    def _temp(self, value: str) -> str:
        name = next(f"{stem}{i or ''}" for i in range(100) for stem in ("values",)
                    if f"{stem}{i or ''}" not in self.taken)
        self.taken.add(name)
        self.bound.append(f"{name} = {value}")
        return name

    def _selection(self, lifted: _Lifted) -> Selection:
        base = filled(self.scope, lifted)
        if lifted.rowwise:
            self.assumes.add(_ROWWISE)
        if not lifted.same and not _simple(base):
            base = ast.Name(self._temp(unparsed(base)))  # the value is read again for the mask's shape
        return Selection(base, unparsed(lifted.mask), lifted.mask, same=lifted.same)

    def _sel(self, node: ast.AST) -> Selection | None:
        lifted = self.scope.lift(node)
        if lifted is None:
            return None
        self.kinds.append(INLINE)
        return self._selection(lifted)

    def _reduced(self, node: ast.AST) -> str | None:
        bound, taken, kinds = len(self.bound), set(self.taken), len(self.kinds)
        if isinstance(node, ast.Call):
            node = self.scope.functional(node)
        name = _name_of(node)
        f = node.func if isinstance(node, ast.Call) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            name = ""  # self.mse_loss(...) is a module's call, whatever the name says: its arguments are its own
        if isinstance(node, ast.Call) and (name in _LOSSES or name in _LOSSES_MASKED or _summed_loss(node, name)):
            out = self._loss(node, name)
        elif isinstance(node, ast.Call) and name in _CLASS_LOSSES:
            out = self._class_loss(node)
        else:
            out = super()._reduced(node)
        if out is None:  # a selection looked at but not reduced here: nothing of it is kept
            del self.bound[bound:], self.kinds[kinds:]
            self.taken = taken
        return out

    def _pair(self, node: ast.Call) -> tuple[_Lifted, _Lifted] | None:
        if len(node.args) < 2:
            return None
        a, b = self.scope.lift(node.args[0]), self.scope.lift(node.args[1])
        if a is None or b is None or not same_mask(a.mask, b.mask) or len(node.args) > 2:
            return None
        return a, b

    def _loss(self, node: ast.Call, name: str) -> str | None:
        pair = self._pair(node)
        red = _reduction(node)
        known = name in _LOSSES or name in _LOSSES_MASKED
        # Another loss that takes reduction= (torchvision's generalized_box_iou_loss, the
        # project's own): its other keywords are settings (eps=), none may select.
        settings = ("reduction", "beta", "delta") if known else tuple(
            k.arg for k in node.keywords if k.arg and not self.scope._holds_selection(k.value))
        if pair is None or red not in (("mean", "sum") if known else ("sum",)) or any(
                k.arg not in settings for k in node.keywords):
            return None  # weight= and pos_weight= are per element: they would be selected too
        a, b = pair
        same = a.same or b.same
        self.kinds.append(LOSS)
        inputs = []
        for side in (a, b):
            sel = Selection(side.leaves[0], unparsed(side.mask), side.mask, same=same)
            inputs.append(unparsed(_Filled(side.leaves, sel).of(side.base)))
        rest = [f"{k.arg}={unparsed(k.value)}" for k in node.keywords if k.arg != "reduction" and k.arg in settings]
        func = unparsed(node.func)
        count = Selection(a.leaves[0], unparsed(a.mask), a.mask, same=same).numel()
        if name in _LOSSES:
            total = f"{func}({', '.join([*inputs, *rest])}, reduction='sum')"
        else:
            per = f"{func}({', '.join([*inputs, *rest])}, reduction='none')"
            # An elementwise loss has its inputs' shape; another gives one loss per row: the mask's
            where = Selection(a.leaves[0], unparsed(a.mask), a.mask, same=same).widened() if known else unparsed(a.mask)
            total = f"torch.where({where}, {per}, 0).sum()"
        self.assumes.add("the loss is zero where input and target are both zero (the unselected elements "
                         "are set to zero before it)" if name in _LOSSES else
                         "the unselected elements' losses are masked out before the sum" if known else
                         f"{func}(..., reduction='none') gives one loss per row, and reduction='sum' their sum "
                         "(the unselected rows, set to zero first, are masked out before it)")
        return total if red == "sum" else f"{total} / {count}"

    def _class_loss(self, node: ast.Call) -> str | None:
        # The loss reads its logits' rows whatever their leading shape (SSD's
        # ``F.cross_entropy(confidence.view(-1, num_classes), labels[mask], reduction="sum")``): the
        # reshapes that keep the rows are peeled, the logits of every row flattened below.
        pair = self._pair(ast.Call(func=node.func, args=[_peeled(a) for a in node.args], keywords=node.keywords))
        if pair is None or _reduction(node) not in ("mean", "sum"):
            return None  # reduction='none' returns one loss per selected target: its size is the data's
        logits, target = pair
        if target.base is not target.leaves[0] or target.rowwise:
            return None  # the targets must be the selected tensor itself
        ignore = next((k.value for k in node.keywords if k.arg == "ignore_index"), None)
        made = self.scope.origin(logits.mask)
        if ignore is None and isinstance(made, ast.Compare) and len(made.ops) == 1 \
                and isinstance(made.ops[0], ast.NotEq) and _same_expr(made.left, target.base):
            ignore = made.comparators[0]  # keep = y != pad: the pad is the index to ignore
        ignored = unparsed(ignore) if ignore is not None else "-100"
        already = isinstance(made, ast.Compare) and len(made.ops) == 1 and isinstance(made.ops[0], ast.NotEq) \
            and _same_expr(made.left, target.base) and unparsed(made.comparators[0]) == ignored
        y = unparsed(target.base)
        targets = f"{paren(y)}.flatten()" if already else f"torch.where({unparsed(logits.mask)}, {y}, {ignored}).flatten()"
        rest = [f"{k.arg}={unparsed(k.value)}" for k in node.keywords if k.arg != "ignore_index"]
        self.kinds.append(IGNORE)
        self.assumes.add("the targets are class indices, one per selected position (the mask covers every "
                         "dimension of the targets); an ignored position counts in neither the sum nor the mean")
        logits_all = unparsed(logits.base)
        return f"{unparsed(node.func)}({paren(logits_all)}.flatten(0, -2), {targets}, {', '.join([*rest, f'ignore_index={ignored}'])})"


def _left_selection(scope: _Scope, node: ast.AST, made: dict[int, ast.AST] | None = None) -> bool:
    """Whether a selection is still read as it is (not inside a masked reduction ``made``)."""
    if any(isinstance(n, ast.Name) and n.id in scope.selected and isinstance(n.ctx, ast.Load)
           and id(n) not in (made or {}) for n in ast.walk(node)):
        return True
    return any(isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load) and scope.is_mask(n.slice) is not False
               for n in ast.walk(node))


def _taken(source: str, stmt: ast.stmt) -> set[str]:
    fn = function_of(source, stmt)
    return {n.id for n in ast.walk(fn or parsed(source)) if isinstance(n, ast.Name)} | {
        a.arg for a in ast.walk(fn or parsed(source)) if isinstance(a, ast.arg)}


def _through_mask(target: ast.Subscript, value: ast.expr) -> bool:
    """Whether ``target``'s index may be a mask: it is no plain name (``rates[b]``, a position),
    or the value selects another tensor by the same index (``x[m] = y[m]``; ``rates[b]`` read
    back as the value kept is the target itself). A constant (``out["loss"]``, ``row[0]``) is
    a key or a place, never a mask."""
    if isinstance(target.slice, ast.Constant):
        return False
    if not isinstance(target.slice, ast.Name):
        return True
    return any(isinstance(n, ast.Subscript) and _same_expr(n.slice, target.slice)
               and not _same_expr(n.value, target.value) for n in ast.walk(value))


ROWS = "masked max or min over rows instead of select"


def _rows_of_selection(node: ast.expr) -> ast.Subscript | None:
    """``x[m].contiguous().view(N, -1)`` (``.reshape``; ``.contiguous()`` optional): the
    selection ``x[m]`` it regroups into rows of the same count each."""
    if not _rows_viewed(node) and not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                       and node.func.attr in ("view", "reshape") and len(node.args) == 2
                                       and unparsed(node.args[1]) == "-1" and not node.keywords):
        return None
    inner = node.func.value  # type: ignore[attr-defined]
    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "contiguous" \
            and not inner.args:
        inner = inner.func.value
    return inner if isinstance(inner, ast.Subscript) and isinstance(inner.ctx, ast.Load) else None


def rows_reduced(stmt: ast.stmt, text: Text) -> Made | None:
    """``v, i = torch.max(d[m].contiguous().view(N, -1), 1, keepdim=True)`` (``torch.min``; the hard
    example mining of re-identification repositories: every row's positives, as many in each row)
    as ``torch.max(torch.where(m, d, float('-inf')), 1, keepdim=True)``: the same values, each
    row's maximum over the entries its mask holds (``inf`` for a minimum). The indices then count
    every entry of the row, not only the selected ones: a name bound to them read later gets no
    rewrite."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value
    f = call.func
    if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch"
            and f.attr in ("max", "min") and len(call.args) >= 2 and unparsed(call.args[1]) in ("1", "-1")):
        return None
    selection = _rows_of_selection(call.args[0])
    scope = _Scope(text.source, stmt)
    if selection is None or scope.is_mask(selection.slice) is False or isinstance(selection.slice, ast.Tuple):
        return None
    target = stmt.targets[0]
    indices = target.elts[1] if isinstance(target, ast.Tuple) and len(target.elts) == 2 else None
    if not isinstance(target, ast.Tuple) or not isinstance(indices, ast.Name) or \
            read_later(text.source, stmt, indices.id):
        return None  # the indices read: they would count every entry of the row now
    fill = "float('-inf')" if f.attr == "max" else "float('inf')"
    new = copy.deepcopy(stmt)
    new.value.args[0] = ast.parse(  # type: ignore[attr-defined]
        f"torch.where({unparsed(selection.slice)}, {unparsed(selection.value)}, {fill})", mode="eval").body
    return Made(unparsed(new).split("\n"), ROWS, (
        "the index is a boolean mask of the tensor's shape holding as many entries in every row (the view into rows "
        "needed it); each row's maximum (minimum) over them is the same value; the indices now count every entry of "
        "the row, and nothing reads them"))


def inline_selection(stmt: ast.stmt, text: Text) -> Made | None:
    """A statement that reduces a boolean-mask selection inside one expression (``f(x[m]).sum()``,
    a loss of ``p[m]`` and ``y[m]``) as the same reduction of every element, masked."""
    if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)) or stmt.value is None:
        return None
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Subscript) and _through_mask(t, stmt.value)
                                            for t in stmt.targets):
        return None  # an assignment through a mask: masked_assignment
    scope = _Scope(text.source, stmt)
    fix = _Inline(scope, _taken(text.source, stmt))
    value = fix.visit(copy.deepcopy(stmt.value))
    if not fix.used or fix.bad or _left_selection(scope, value):
        return None  # nothing reduced, or a selection is still read as it is (its size is the data's)
    new = copy.deepcopy(stmt)
    new.value = value  # type: ignore[assignment]
    written = unparsed(new).split("\n")
    targets = [ast.get_source_segment(text.source, t) for t in stmt.targets] if isinstance(stmt, ast.Assign) else []
    if targets and all(t is not None and "\n" not in t for t in targets):
        written = [f"{' = '.join(map(str, targets))} = {unparsed(value)}"]  # the targets as the user wrote them
    kind = LOSS if LOSS in fix.kinds else IGNORE if IGNORE in fix.kinds else INLINE
    note = "; ".join(["the index is a boolean mask (of the selected tensor's leading dimensions)",
                      *sorted(fix.assumes)])
    return Made([*fix.bound, *written], kind, note)


_ASSIGNED = ("the index is a boolean mask of the assigned tensor's leading dimensions; the assigned value has the "
             "tensor's shape or broadcasts over the selected rows; the tensor is changed in place, as before")


def masked_assignment(stmt: ast.stmt, text: Text) -> Made | None:
    """``x[m] = y[m]`` (or ``= v``) and ``x[m] += v`` as ``x.copy_(torch.where(m, ..., x))``."""
    scope = _Scope(text.source, stmt)
    lines = _assigned(scope, stmt, text)
    if lines is None:
        return None
    if scope.picked:
        return Made(lines, ASSIGN, _PICKED)
    return Made(lines, ASSIGN, f"{_ASSIGNED}; {_ROWWISE}" if scope.rowwise else _ASSIGNED)


_PICKED = ("the index is a boolean mask of every dimension of the written tensor but the last, in which the "
           "second index names one place per selected row; the tensor is changed in place, as before")


def _assigned(scope: _Scope, stmt: ast.stmt, text: Text) -> list[str] | None:
    """The lines of :func:`masked_assignment` in ``scope`` (whose bound selections the value may
    read: the group of :func:`bound_selection`); None when the statement is no such write."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        target, value, op = stmt.targets[0], stmt.value, None
    elif isinstance(stmt, ast.AugAssign):
        target, value, op = stmt.target, stmt.value, stmt.op
    else:
        return None
    if not isinstance(target, ast.Subscript) or not _simple(target.value):
        return None
    picked = _picked_write(scope, target, value, op)
    if picked is not None:
        return picked
    if scope.is_mask(target.slice) is False:
        return None
    x, mask = target.value, target.slice
    lifted = scope.lift(value)
    if lifted is not None:
        if not same_mask(lifted.mask, mask):
            return None
        new_value: ast.expr = lifted.base
        scope.rowwise = scope.rowwise or lifted.rowwise  # x[m] = self.f(x[m]): f now runs on every row
    elif _left_selection(scope, value):
        return None
    else:
        new_value = value  # a number or a tensor that broadcasts over the selected rows
    same = scope.same_shape(x, mask) or (lifted is not None and lifted.same)
    sel = Selection(x, unparsed(mask), mask, same=same)
    xs = unparsed(x)
    if op is not None and type(op) not in _OPS:
        return None
    lines: list[str] = []
    if _reads_expr(new_value, x) or (op is not None and not isinstance(op, (ast.Add, ast.Sub))):
        # The value reads the tensor the copy_ then changes: an op that keeps its input for the
        # backward (max, a product) would find it changed. It reads a copy, as x[m] was one.
        before = next(n for n in (f"{_stem(x)}_before", *(f"{_stem(x)}_before{i}" for i in range(2, 99)))
                      if n not in _taken(text.source, stmt))
        lines.append(f"{before} = {xs}.clone()")
        replaced = _Replaced(xs, before).visit(copy.deepcopy(new_value))
        assert isinstance(replaced, ast.expr)
        new_value = replaced
        xs_read = before
    else:
        xs_read = xs
    v = unparsed(new_value)
    operand = v if isinstance(new_value, (ast.Constant, ast.Name, ast.Attribute, ast.Call, ast.Subscript)) else f"({v})"
    kept = v if op is None else f"{paren(xs_read)} {_OPS[type(op)]} {operand}"
    lines.append(f"{xs}.copy_(torch.where({sel.widened()}, {kept}, {xs}))")
    return lines


def _picked_write(scope: _Scope, target: ast.Subscript, value: ast.expr, op: ast.operator | None) -> list[str] | None:
    """``x[m, c[m]] = v`` (a one-hot of the selected rows' classes, FCOS's and RetinaNet's
    targets): every row's place ``c`` in the last dimension written where ``m`` holds, as
    ``x.copy_(torch.where(m.unsqueeze(-1) & (arange == c.unsqueeze(-1)), v, x))``. A row the mask
    leaves out is not written, whatever its ``c`` (a -1 for the background never matches)."""
    parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else []
    if op is not None or len(parts) != 2 or scope.is_mask(parts[0]) is False or scope._holds_selection(value):
        return None
    index = scope.lift(parts[1])
    if index is None or not index.same or not same_mask(index.mask, parts[0]) or index.rowwise:
        return None
    xs, m = unparsed(target.value), unparsed(parts[0])
    places = f"torch.arange({xs}.shape[-1], device={xs}.device)"
    written = f"{paren(m)}.unsqueeze(-1) & ({places} == {paren(unparsed(index.base))}.unsqueeze(-1))"
    scope.picked = True
    return [f"{xs}.copy_(torch.where({written}, {unparsed(value)}, {xs}))"]


def _reads_expr(node: ast.AST, target: ast.expr) -> bool:
    """Whether ``node`` reads the expression ``target`` (``x``, ``self.buf``) anywhere."""
    text = unparsed(target)
    return any(isinstance(n, (ast.Name, ast.Attribute, ast.Subscript)) and isinstance(getattr(n, "ctx", None), ast.Load)
               and unparsed(n) == text for n in ast.walk(node))


def _stem(target: ast.expr) -> str:
    """A name to build a temporary's from: ``gaussians.max_radii2D`` -> "max_radii2D"."""
    if isinstance(target, ast.Attribute):
        return target.attr
    if isinstance(target, ast.Name):
        return target.id
    return "value"


class _Replaced(ast.NodeTransformer):
    """Each read of the expression ``text`` as the name ``name``."""

    def __init__(self, text: str, name: str) -> None:
        self.text, self.name = text, name

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)) and unparsed(node) == self.text:
            return ast.Name(self.name, ctx=ast.Load())
        return super().visit(node)


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.BitOr: "|", ast.BitAnd: "&"}



BOUND = "masked reductions of a selection bound to a name"
WRITTEN = "selections bound to names, every row computed and written back through the mask"


def bound_selection(stmt: ast.stmt, text: Text) -> Made | None:
    """``d = f(x[m])`` whose later reads are all inside reductions (``(d ** 2).mean()``,
    ``d.sum()``) as ``d = f(x)`` over every element and those reductions masked. Selections by
    the same mask bound to other names after it (``p = p.masked_select(m)``, then ``y =
    y.masked_select(m)``, then ``loss(p, y)``), or computed from those names (``iou = box_iou(p[m],
    t[m])``, ``loss = iou * w``), go with it: each name holds every element. A name a reduction
    binds again (``loss = loss.sum() / n``) leaves the group there; an ``if`` whose test reads none
    of them is followed into (``if self.dfl:`` around a second loss)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    name = stmt.targets[0].id
    scope = _Scope(text.source, stmt)
    lifted = scope.lift(stmt.value)
    if lifted is None or name in names_loaded(lifted.mask):
        return None
    block, at = block_of(text.source, stmt)
    run = _Run(scope, text, lifted.mask, _Inline(scope, _taken(text.source, stmt)))
    scope.selected[name] = (lifted.mask, lifted.same)
    scope.rowwise = lifted.rowwise
    run.group.add(name)
    out = _bound_line(name, filled(scope, lifted))
    followed = run.follow(block[at + 1:])
    if followed is None or run.last is None:
        return None
    out += followed[0]
    if any(read_later(text.source, stmt, n, after=run.last) for n in run.group):
        return None
    out = _mask_named(out, lifted.mask, run.fix.taken)
    if scope.rowwise:
        run.fix.assumes.add(_ROWWISE)
    names = ", ".join(f"`{n}`" for n in sorted(run.group | run.left))
    reads = "each read is a reduction, masked, or a write through the mask" if run.written else \
        "each read is a reduction, masked"
    note = "; ".join([f"the index is a boolean mask (of the selected tensor's leading dimensions); {names} now "
                      f"hold{'s' if len(run.group | run.left) == 1 else ''} every element, and {reads}",
                      *sorted(run.fix.assumes)])
    return Made(out, WRITTEN if run.written else BOUND, note, last=run.last)


def _mask_named(lines: list[str], mask: ast.expr, taken: set[str]) -> list[str]:
    """The rewrite's lines with a mask that is an expression (``attention_mask.reshape(-1) > 0``),
    read more than once, computed once first (``keep = ...``) and read by that name: the mask's
    names are not bound again inside the run (it ends where they are), so the value is the same."""
    if isinstance(mask, (ast.Name, ast.Attribute)):
        return lines
    text = f"({unparsed(mask)})"
    if sum(ln.count(text) for ln in lines) < 2:
        return lines
    name = next(n for i in range(100) for stem in ("keep",) if (n := f"{stem}{i or ''}") not in taken)
    taken.add(name)
    return [f"{name} = {unparsed(mask)}", *(ln.replace(text, name) for ln in lines)]


class _Run:
    """The statements after a bound selection, followed while they read its group of names."""

    def __init__(self, scope: _Scope, text: Text, mask: ast.expr, fix: _Inline) -> None:
        self.scope, self.text, self.mask, self.fix = scope, text, mask, fix
        self.group: set[str] = set()  # names holding every element (a selection's, lifted)
        self.left: set[str] = set()  # names that held every element until a reduction bound them again
        self.watched = names_loaded(mask)  # rebound before the reads: the mask would not be the same
        self.last: ast.stmt | None = None  # the last statement that reads the group
        self.written = False  # the group is written back through the mask (out[m] = f(sel))

    def follow(self, stmts: list[ast.stmt]) -> tuple[list[str], list[str], bool] | None:
        """The lines of ``stmts`` rewritten up to the last read of the group, the lines after it
        as written, and whether the run ended inside them (a name bound again, the mask rebound:
        what follows is not its); None when a read is not a reduction."""
        out: list[str] = []
        pending: list[str] = []
        for k, s in enumerate(stmts):
            if names_stored(s) & self.watched:
                return out, pending + self.text.body_lines(stmts[k:]), True
            other = _also_selected(self.scope, s, self.mask, self.group)
            if other is not None:
                out += pending + _bound_line(*other)
                pending = []
                self.last = s
                continue
            if not names_loaded(s) & self.group:
                if names_stored(s) & self.group:  # bound again: what follows reads another value
                    return out, pending + self.text.body_lines(stmts[k:]), True
                if any(isinstance(n, ast.Subscript) and same_mask(n.slice, self.mask) for n in ast.walk(s)):
                    return None  # the mask selects again in a way no rewrite here takes: it would still break
                pending += self.text.statement_lines(s)
                continue
            if isinstance(s, ast.With) and not any(names_loaded(item) & self.group for item in s.items):
                # with torch.no_grad(): error = ((p - y) ** 2).mean(): its body runs once, in order
                inner = self.follow(s.body)
                if inner is None:
                    return None
                out += pending + [f"with {', '.join(unparsed(i) for i in s.items)}:"] + ["    " + ln if ln else ln for ln in inner[0] + inner[1]]
                pending, self.last = [], s
                if inner[2]:
                    return out, self.text.body_lines(stmts[k + 1:]), True
                continue
            if isinstance(s, ast.If) and not names_loaded(s.test) & self.group:
                branches = self._branches(s)
                if branches is None:
                    return None
                out += pending + branches
                pending, self.last = [], s
                continue
            write = s.targets[0] if isinstance(s, ast.Assign) and len(s.targets) == 1 else \
                s.target if isinstance(s, ast.AugAssign) else None
            if isinstance(write, ast.Subscript) and same_mask(write.slice, self.mask):
                # out[m] = tokens + w * self.block(tokens): written back through the mask, every row
                lines = _assigned(self.scope, s, self.text)
                if lines is None:
                    return None
                out += pending + lines
                pending, self.last = [], s
                self.fix.assumes.add(_ASSIGNED)
                self.written = True
                continue
            if not isinstance(s, (ast.Assign, ast.AugAssign, ast.Return, ast.Expr)) or s.value is None:
                return None
            self.fix.used = False
            value = self.fix.visit(copy.deepcopy(s.value))
            if not self.fix.used or self.fix.bad or _left_selection(self.scope, value, self.fix.made):
                return None  # read as it is somewhere: its size is the data's
            new = copy.deepcopy(s)
            new.value = value  # type: ignore[assignment]
            out += pending + self.fix.bound + unparsed(new).split("\n")
            pending, self.fix.bound, self.last = [], [], s
            for gone in names_stored(s) & self.group:  # loss = loss.sum() / n: a reduced value now
                self.group.discard(gone)
                self.scope.selected.pop(gone, None)
                self.left.add(gone)
        return out, pending, False

    def _branches(self, s: ast.If) -> list[str] | None:
        """An ``if`` (settings, not the data) whose branches read the group, each followed whole;
        the group the same after either branch (a name selected in one only would be two things)."""
        before = set(self.group)
        lines = [f"if {unparsed(s.test)}:"]
        for label, body in (("", s.body), ("else:", s.orelse)):
            if not body:
                continue
            self.group = set(before)
            followed = self.follow(body)
            if followed is None or followed[2] or self.group != before:
                return None
            if label:
                lines.append(label)
            lines += ["    " + ln if ln else ln for ln in followed[0] + followed[1]]
        return lines


def _rows_viewed(node: ast.AST) -> bool:
    """``x.view(-1, k)`` (``.reshape``): rows of ``k``, ``k`` a constant or a (dotted) name."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("view", "reshape")
            and len(node.args) == 2 and not node.keywords and unparsed(node.args[0]) == "-1"
            and isinstance(node.args[1], (ast.Constant, ast.Name, ast.Attribute)))


def _bound_line(name: str, base: ast.expr) -> list[str]:
    """``name = base``; nothing where the base is the name itself (``x = x.masked_select(m)``,
    ``x = x[m, :]``: every element is ``x[:, :]``, ``x`` itself)."""
    if isinstance(base, ast.Subscript) and all(
            isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None
            for e in (base.slice.elts if isinstance(base.slice, ast.Tuple) else [base.slice])):
        base = base.value
    return [] if isinstance(base, ast.Name) and base.id == name else [f"{name} = {unparsed(base)}"]


def _also_selected(scope: _Scope, s: ast.stmt, mask: ast.expr, group: set[str]) -> tuple[str, ast.expr] | None:
    """``s`` binds a name not read yet to a selection by the same ``mask``: the name (added to
    ``group`` and the scope's selections) and its value over every element."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)):
        return None
    other = s.targets[0].id
    lifted = scope.lift(s.value)
    if lifted is None or not same_mask(lifted.mask, mask) or other in names_loaded(lifted.mask):
        return None
    group.add(other)
    scope.selected[other] = (lifted.mask, lifted.same)
    if lifted.rowwise:
        scope.rowwise = True
    return other, filled(scope, lifted)


def _peeled(node: ast.expr) -> ast.expr:
    """A class loss's argument without the reshapes that leave its rows as they are:
    ``.view(-1, C)``, ``.reshape(-1)``, ``.flatten()``, ``.contiguous()``, ``.to(device)``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords:
        attr, args = node.func.attr, node.args
        flat = attr in ("view", "reshape") and args and unparsed(args[0]) == "-1"
        if not (flat or (attr in ("contiguous", "flatten") and not args)
                or (attr == "to" and len(args) == 1 and _device_like(args[0]))):
            break
        node = node.func.value
    return node


def _class_loss_reads(scope: _Scope, fn: ast.AST, names: tuple[str, str], after: int) -> tuple[str, str, str] | None:
    """The class losses after line ``after`` that read the two names, as (the logits' name, the
    targets' name, the index the loss ignores); None when a name is read anywhere else, the
    losses disagree, or one returns a loss per element."""
    covered: set[int] = set()
    found: set[tuple[str, str, str]] = set()
    for n in ast.walk(fn):
        if not (isinstance(n, ast.Call) and n.lineno > after):
            continue
        call = scope.functional(n)
        if _name_of(call) not in _CLASS_LOSSES or len(call.args) != 2 or (
                isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"):
            continue
        logits, target = (_peeled(a) for a in call.args)
        if not (isinstance(logits, ast.Name) and isinstance(target, ast.Name)
                and {logits.id, target.id} == set(names)):
            continue
        reduction = next((k.value for k in call.keywords if k.arg == "reduction"), None)
        if reduction is not None and not (isinstance(reduction, ast.Constant) and reduction.value in ("mean", "sum")):
            return None  # a loss per target: its size is the data's
        ignore = next((k.value for k in call.keywords if k.arg == "ignore_index"), None)
        found.add((logits.id, target.id, unparsed(ignore) if ignore is not None else "-100"))
        covered |= {id(m) for a in n.args for m in ast.walk(a)}
    reads = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
             and n.id in names and n.lineno > after]
    if len(found) != 1 or any(id(n) not in covered for n in reads):
        return None
    return next(iter(found))


IGNORED = "ignored targets instead of select"


def ignored_targets(stmt: ast.stmt, text: Text) -> Made | None:
    """Logits and targets selected by one mask and bound to names (``shift_logits =
    logits[m]``, ``shift_labels = labels[m]``), read only by a class loss after (``loss_fct =
    nn.CrossEntropyLoss()``, even after the ``if`` that binds them): the logits of every
    position, and the targets the mask leaves out set to the loss's ``ignore_index``, which the
    loss counts in neither its sum nor its mean."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    scope = _Scope(text.source, stmt)
    fn = function_of(text.source, stmt)
    if fn is None or any(isinstance(n, (ast.For, ast.While)) and contains(n, stmt) for n in ast.walk(fn)):
        return None  # in a loop the names are read again on the next turn, before the loss
    block, at = block_of(text.source, stmt)
    bound: dict[str, tuple[ast.stmt, _Lifted]] = {}
    # the site and the selection by the same mask just before or after it, in its block
    for s in block[max(at - 3, 0): at + 4]:
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            lifted = scope.lift(s.value)
            if lifted is not None and not lifted.rowwise and s.targets[0].id not in names_loaded(lifted.mask):
                bound.setdefault(s.targets[0].id, (s, lifted))
    mine = bound.get(stmt.targets[0].id)
    if mine is None or mine[0] is not stmt:
        return None
    partners = [n for n, (s, lifted) in bound.items() if s is not stmt and same_mask(lifted.mask, mine[1].mask)]
    if len(partners) != 1:
        return None
    pair = (stmt.targets[0].id, partners[0])
    first, last = sorted((stmt, bound[partners[0]][0]), key=lambda s: s.lineno)
    between = block[block.index(first) + 1: block.index(last)]
    if any((names_loaded(s) | names_stored(s)) & (set(pair) | names_loaded(mine[1].mask)) for s in between):
        return None  # read or rebound between the two: keep it simple
    if names_loaded(last.value) & set(pair):  # type: ignore[attr-defined]
        return None
    reads = _class_loss_reads(scope, fn, pair, last.end_lineno or last.lineno)
    if reads is None:
        return None
    logits, targets, ignored = reads
    out: list[str] = []
    for s in block[block.index(first): block.index(last) + 1]:
        if s not in (first, last):
            out += text.statement_lines(s)
            continue
        name, lifted = s.targets[0].id, bound[s.targets[0].id][1]  # type: ignore[attr-defined]
        value = filled(scope, lifted)
        if name == logits:
            out += [f"{name} = {unparsed(value)}"]
        else:
            # the mask has the targets' shape (said): a mask of fewer dimensions fails or selects
            # otherwise, and the verifier refuses the patch
            out += [f"{name} = torch.where({unparsed(lifted.mask)}, {unparsed(value)}, {ignored})"]
    note = (f"the index is a boolean mask covering every dimension of the targets; `{logits}` now holds every "
            f"position's logits and `{targets}` the targets with the unselected ones set to the ignored index "
            f"{ignored}, which the loss counts in neither its sum nor its mean; the two are read only by the loss")
    return Made(out, IGNORED, note, first=first, last=last)


# -- a write through a mask under a test that only asks whether it names anything -----------------

FILL = "masked_fill for a write its test only guards"


def _any_of(test: ast.expr) -> ast.expr | None:
    """The mask a test only asks "is any element set?" of: ``m.any()``, ``torch.any(m)``,
    ``m.sum() > 0``; None for any other test."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Gt) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0:
        inner = test.left
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "sum" \
                and not inner.args and not inner.keywords:
            return inner.func.value
        return None
    if not (isinstance(test, ast.Call) and not test.keywords):
        return None
    f = test.func
    if isinstance(f, ast.Attribute) and f.attr == "any" and not test.args:
        return f.value if not (isinstance(f.value, ast.Name) and f.value.id == "torch") else None
    if isinstance(f, ast.Attribute) and f.attr == "any" and isinstance(f.value, ast.Name) and f.value.id == "torch" \
            and len(test.args) == 1:
        return test.args[0]
    return None


def _a_number(value: ast.expr) -> bool:
    """A value that is one number whatever the data: a constant (signed), ``float("-inf")``,
    ``torch.finfo(<dtype>).min``."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        return _a_number(value.operand)
    if isinstance(value, ast.Constant):
        return isinstance(value.value, (int, float)) and not isinstance(value.value, bool) or value.value in (True, False)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "float" \
            and len(value.args) == 1 and isinstance(value.args[0], ast.Constant) and not value.keywords:
        return True
    return (isinstance(value, ast.Attribute) and value.attr in ("min", "max", "eps", "tiny")
            and isinstance(value.value, ast.Call) and unparsed(value.value.func) in ("torch.finfo", "torch.iinfo"))


def _widened(mask: str, over: str) -> str:
    """The mask (its source) reshaped to broadcast over ``over``'s trailing dimensions."""
    m = paren(mask)
    return f"{m}.reshape({m}.shape + (1,) * ({over}.dim() - {m}.dim()))"


def guarded_fill(stmt: ast.stmt, text: Text) -> Made | None:
    """``if m.any(): x[m] = c`` (``torch.any(m)``, ``m.sum() > 0``; ``c`` one number; ``x`` any
    target, ``logits[1:]`` too) as ``x.masked_fill_(m, c)``, the mask widened over ``x``'s
    trailing dimensions: where the test is false the mask names nothing and the fill writes
    nothing, so the test goes with no run needed to show it (HuBERT's negatives equal to the
    positive set to -inf)."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1):
        return None
    mask, write = _any_of(stmt.test), stmt.body[0]
    if mask is None or not (isinstance(write, ast.Assign) and len(write.targets) == 1):
        return None
    target = write.targets[0]
    if not (isinstance(target, ast.Subscript) and ast.dump(target.slice) == ast.dump(mask)
            and isinstance(mask, (ast.Name, ast.Attribute)) and _a_number(write.value)):
        return None
    x, m = text.of(target.value), text.of(mask)
    return Made([f"{x}.masked_fill_({_widened(m, x)}, {text.of(write.value)})"], FILL, (
        f"`{m}` is a boolean mask of `{x}`'s leading dimensions (an integer index would fill other elements) "
        "and the value one number; with no element set the fill writes nothing, as the skipped write did"))


TUPLE = "boolean mask instead of a nonzero index tuple"


def _nonzero_tuple(value: ast.expr) -> ast.expr | None:
    """The mask of ``torch.nonzero(c, as_tuple=True)``, ``c.nonzero(as_tuple=True)`` or
    ``torch.where(c)`` (one argument): an index tuple that selects what ``c`` selects."""
    if not isinstance(value, ast.Call):
        return None
    f = value.func
    as_tuple = any(k.arg == "as_tuple" and isinstance(k.value, ast.Constant) and k.value.value is True
                   for k in value.keywords) and len(value.keywords) == 1
    if not isinstance(f, ast.Attribute):
        return None
    torch_call = isinstance(f.value, ast.Name) and f.value.id == "torch"
    if torch_call and f.attr == "nonzero" and len(value.args) == 1 and as_tuple:
        return value.args[0]
    if torch_call and f.attr == "where" and len(value.args) == 1 and not value.keywords:
        return value.args[0]
    if f.attr == "nonzero" and not value.args and as_tuple:
        return f.value
    return None


COLUMN = "the rows a nonzero column names as a mask"


def nonzero_column(stmt: ast.stmt, text: Text) -> Made | None:
    """``pairs = torch.nonzero(c)`` of a 2-D mask, read only as ``j = pairs[:, k]``, whose only
    reads are writes of a constant through it (``labels[j] = 1``: a matcher's low-quality
    matches): ``j = c.any(dim=1 - k)``, the positions along dimension ``k`` that some row
    (column) of ``c`` holds, written through as a boolean mask. A position named twice is
    written once with the same constant, as before."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    call = stmt.value
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords and (
            isinstance(call.func, ast.Attribute) and call.func.attr == "nonzero" and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "torch")):
        return None
    pairs, mask = stmt.targets[0].id, call.args[0]
    block, at = block_of(text.source, stmt)
    column = next((i for i in range(at + 1, len(block)) if pairs in names_loaded(block[i])), None)
    if column is None:
        return None
    col = block[column]
    k = _column_of(col, pairs)
    if k is None or read_later(text.source, col, pairs):
        return None
    assert isinstance(col, ast.Assign) and isinstance(col.targets[0], ast.Name)
    index = col.targets[0].id
    writes = [i for i in range(column + 1, len(block)) if index in names_loaded(block[i])]
    if not writes or read_later(text.source, block[writes[-1]], index) or not all(
            _constant_write(block[i], index) for i in writes):
        return None
    # The nonzero gone, its mask read where the column was; the lines between (comments too) kept.
    last, indent = block[writes[-1]], stmt.col_offset
    out = [*text.lines_between(stmt.end_lineno or stmt.lineno, col.lineno, indent),
           f"{index} = ({text.of(mask)}).any(dim={1 - k})",
           *text.lines_between(col.end_lineno or col.lineno, (last.end_lineno or last.lineno) + 1, indent)]
    return Made(out, COLUMN, (
        f"`{text.of(mask)}` is 2-D (a mask of more dimensions makes the write raise: not verified); each position "
        f"`{index}` named is written the same constant, so naming it once (a boolean mask) writes the same"),
        last=block[writes[-1]])


def _column_of(stmt: ast.stmt, pairs: str) -> int | None:
    """k of ``j = pairs[:, k]`` (k 0 or 1), None for anything else."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    v = stmt.value
    if not (isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name) and v.value.id == pairs
            and isinstance(v.slice, ast.Tuple) and len(v.slice.elts) == 2):
        return None
    whole, k = v.slice.elts
    if not (isinstance(whole, ast.Slice) and whole.lower is None and whole.upper is None and whole.step is None):
        return None
    return int(k.value) if isinstance(k, ast.Constant) and isinstance(k.value, int) and k.value in (0, 1) else None


def _constant_write(stmt: ast.stmt, index: str) -> bool:
    """``x[index] = <constant>``: the one read of ``index`` a write of one value through it."""
    return (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript)
            and isinstance(stmt.targets[0].slice, ast.Name) and stmt.targets[0].slice.id == index
            and isinstance(stmt.value, (ast.Constant, ast.UnaryOp)) and index not in names_loaded(stmt.value)
            and index not in names_loaded(stmt.targets[0].value))


def nonzero_tuple(stmt: ast.stmt, text: Text) -> Made | None:
    """``idx = torch.nonzero(c, as_tuple=True)`` (``torch.where(c)``) read only as an index
    (``x[idx]``) by statements a mask rewrite here takes once ``idx`` is the mask ``c`` itself
    (a loss of ``x[idx]`` and ``y[idx]``, a masked reduction): ``idx = c``, and those statements
    rewritten as masked ops. The tuple selects the elements the mask does, in the same order."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
            and stmt.lineno == stmt.end_lineno):
        return None
    name = stmt.targets[0].id
    mask = _nonzero_tuple(stmt.value)
    if mask is None or name in names_loaded(mask):
        return None
    block, at = block_of(text.source, stmt)
    readers = [i for i in range(at + 1, len(block)) if name in names_loaded(block[i])]
    if not readers or any(names_stored(block[i]) & {name} for i in range(at + 1, len(block))):
        return None
    fn = function_of(text.source, stmt)
    loads = [n for n in ast.walk(fn or parsed(text.source)) if isinstance(n, ast.Name) and n.id == name
             and isinstance(n.ctx, ast.Load)]
    as_index = [n for s in block[at + 1:] for n in ast.walk(s)
                if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Name) and n.slice.id == name]
    if len(loads) != len(as_index):
        return None  # read as a tuple somewhere (its length, one of its rows): not a mask there
    # The same file with the index bound to its mask: the mask rewrites read it from there.
    lines = text.source.splitlines(keepends=True)
    line = lines[stmt.lineno - 1]
    lines[stmt.lineno - 1] = f"{line[:stmt.col_offset]}{name} = {unparsed(mask)}\n"
    masked = Text("".join(lines), text.unit)
    again = statement_at(masked.source, stmt.lineno)
    if again is None:
        return None
    new_block, _ = block_of(masked.source, again)
    out = [f"{name} = {text.of(mask)}"]
    notes: list[str] = []
    i = at + 1
    while i <= readers[-1]:
        s = new_block[i]
        if i not in readers:
            out += masked.statement_lines(s)
            i += 1
            continue
        made = next((m for make in (masked_assignment, inline_selection, bound_selection)
                     if (m := make(s, masked)) is not None and m.first is None), None)
        if made is None:
            return None
        out += made.lines
        notes.append(made.note)
        i = new_block.index(made.last) + 1 if made.last is not None else i + 1
    return Made(out, TUPLE, "; ".join(
        [f"`{name}` is the boolean mask the index tuple was made from (a tuple of its nonzero positions selects "
         "the same elements, in the same order)", *dict.fromkeys(notes)]), last=block[i - 1])


INDEXED = "every indexed row written, the old value kept where the mask is false"


def _nonempty_of(test: ast.expr) -> ast.expr | None:
    """The mask a test only asks "does the selection hold anything?" of: ``x[m].nelement() !=
    0`` (``.numel()``, ``> 0``), ``len(x[m]) > 0``, or what :func:`_any_of` takes; None else."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.NotEq, ast.Gt)) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 0:
        inner = test.left
        sized = inner.func.value if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute)
                                     and inner.func.attr in ("nelement", "numel") and not inner.args) else \
            inner.args[0] if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name)
                              and inner.func.id == "len" and len(inner.args) == 1) else None
        if isinstance(sized, ast.Subscript):
            return sized.slice
    return _any_of(test)


def _indexed_write(scope: _Scope, s: ast.stmt, text: Text, mask: ast.expr | None) -> str | None:
    """``t[idx[m]] = v[m]`` (``v`` any computation of selections by ``m``, or a value that holds
    none) as ``t[idx] = torch.where(m, v, t[idx])``: every row the index names written, the old
    value put back where the mask is false; None for another statement (or another mask)."""
    if not (isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Subscript)):
        return None
    target = s.targets[0]
    picked = target.slice
    if not (isinstance(picked, ast.Subscript) and isinstance(picked.value, (ast.Name, ast.Attribute))
            and scope.is_mask(picked.slice) is not False and not scope.is_mask(picked.value)):
        return None
    m = picked.slice
    if mask is not None and not same_mask(m, mask):
        return None
    lifted = scope.lift(s.value)
    if lifted is not None:
        if not same_mask(lifted.mask, m):
            return None
        value = unparsed(filled(scope, lifted))
    elif scope._holds_selection(s.value) or any(isinstance(n, ast.Subscript) and same_mask(n.slice, m)
                                                 for n in ast.walk(s.value)):
        return None
    else:
        value = text.of(s.value)
    rows = f"{text.of(target.value)}[{text.of(picked.value)}]"
    return f"{rows} = torch.where({_widened(text.of(m), rows)}, {value}, {rows})"


def indexed_write(stmt: ast.stmt, text: Text) -> Made | None:
    """``t[idx[m]] = v[m]`` (pseudo-labels kept per example, a memory bank's rows), alone or
    under a test that only asks whether the selection holds anything (``if idx[m].nelement() !=
    0:``, ``if m.any():``), as every row ``idx`` names written with ``torch.where(m, v,
    t[idx])``: the test goes (with nothing selected, every row gets its old value back)."""
    guard = stmt
    owner = holder_of(text.source, stmt)
    if not isinstance(stmt, ast.If) and isinstance(owner, ast.If) and stmt in owner.body \
            and _nonempty_of(owner.test) is not None:
        guard = owner  # the write under its test: the rewrite takes both
    scope = _Scope(text.source, guard)
    if isinstance(guard, ast.If):
        mask = _nonempty_of(guard.test)
        if mask is None or guard.orelse:
            return None
        written = [_indexed_write(scope, s, text, mask) for s in guard.body]
    else:
        written = [_indexed_write(scope, guard, text, None)]
    lines = [ln for ln in written if ln is not None]
    if len(lines) != len(written):
        return None
    return Made(lines, INDEXED, (
        "the index's rows are distinct (every row it names is written, the old value put back where the mask "
        "is false: with a repeated row, which write lands would be undefined); the index of the index is a "
        "boolean mask of its leading dimensions" + ("; with nothing selected the skipped write changed nothing, as every row written "
                                "back unchanged does" if isinstance(guard, ast.If) else "")),
        first=guard if guard is not stmt else None, last=guard if guard is not stmt else None)
