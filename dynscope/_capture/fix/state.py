"""Rewrites by what the code does with state and control flow: Python source in, source out.

Each maker looks at the statement at a break site (the innermost statement at the break
line, as :func:`~dynscope._capture.fix.statements.statement_at` finds it) and, when the code
around it has the shape it knows, proposes new lines for that statement or for a run of
statements (:class:`~dynscope._capture.fix.statements.Made` with ``first``/``last``). Nothing
here decides whether a rewrite is right: the verifier reruns the patched program under
torch.compile and compares outputs and gradients with the unpatched eager run. Text only: no
torch import. What each rewrite relies on is its ``note``.

Where the shapes break on torch 2.13 (found with ``dynscope.report``):

- ``teacher = copy.deepcopy(self.encoder)``: "deepcopy" at that line.
- ``x.requires_grad_(True)`` ... ``torch.autograd.grad(out, x)``: "tensor attribute mutation
  (requires_grad)" at the first, "other" at the second (``trace_autograd_ops`` is off).
- ``next(i for i, v in enumerate(s) if v > t)``, ``if any(v > t for v in s):``, and a
  ``for`` whose ``if`` on a tensor ``break``\\ s: "data-dependent branch" at that line.
- ``history.append(loss.item())``, ``running += loss.item()``, ``wandb.log({...: loss.item()})``:
  ".item()/scalar output" at that line.
- State set up in forward: a tensor cache (``if self.cache is None: self.cache = torch.zeros(..)``),
  ``register_buffer`` on the first call and an int counter on ``self`` do not break; a module
  or ``nn.Parameter`` made in forward breaks ("other": Dynamo cannot trace the Parameter
  constructor), and only on the first call. Moving it to ``__init__`` is the remedy, which a
  patch of forward cannot show: the verifier runs a copy of the user's model, whose
  ``__init__`` has run already. Those are left alone.
"""

from __future__ import annotations

import ast
import copy

from dynscope._capture.fix import branches
from dynscope._capture.fix.statements import (
    Made,
    Text,
    block_of,
    contains,
    function_of,
    names_loaded,
    read_later,
)

__all__ = ["FIRST_MATCH", "FUNC_GRAD", "LOGGED", "REPORTED", "STOP_MASK", "TEACHER", "TENSOR_OPS",
           "first_match", "func_grad", "logged_value", "made_in_forward", "reported_value", "stop_mask", "teacher_call",
           "tensor_ops"]

TEACHER = "call with detached state instead of deepcopy"
FUNC_GRAD = "torch.func instead of autograd.grad"
TENSOR_OPS = "generator to tensor ops"
FIRST_MATCH = "loop exit to argmax"
STOP_MASK = "early stop to a stop mask"
LOGGED = "keep the logged value a tensor"
REPORTED = "guard the reported value"

#: The function copy.deepcopy, by its name (the string "deepcopy" is also a break category's).
_DEEPCOPY = copy.deepcopy.__name__

# Methods that change a tensor elementwise: a test built of them holds for the whole sequence
# at once (``v.abs() > t`` -> ``s.abs() > t``). A reduction (``v.sum()``) would not.
_ELEMENTWISE = {"abs", "neg", "exp", "log", "sigmoid", "tanh", "relu", "sqrt", "float", "double", "int", "long",
                "bool", "isnan", "isinf", "isfinite", "sign", "square"}


def _called(node: ast.AST, *names: str) -> bool:
    """Whether ``node`` is a call of one of ``names`` (``name(...)`` or ``x.name(...)``)."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "") in names


def _has_item(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "item"
               and not n.args for n in ast.walk(node))


def _function_names(stmt: ast.stmt, text: Text) -> set[str]:
    """Every name the function around ``stmt`` uses: a name a rewrite adds must be new."""
    fn = function_of(text.source, stmt)
    scope = fn if fn is not None else stmt
    names = {n.id for n in ast.walk(scope) if isinstance(n, ast.Name)}
    if fn is not None:
        names |= {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    return names


def _indented(lines: list[str], unit: str) -> list[str]:
    return [unit + ln if ln else ln for ln in lines]


# -- 1. a module deep-copied in forward and called at once -----------------------------------------


def teacher_call(stmt: ast.stmt, text: Text) -> Made | None:
    """``teacher = copy.deepcopy(self.encoder)``, then only ``teacher(...)`` calls: a function
    of the same name that calls the module with a detached snapshot of its state
    (``torch.func.functional_call``), which Dynamo traces. A copy stored on ``self`` (an EMA
    kept across calls) is not this shape: it is left to the other rewrites."""
    inline = _called_copy(stmt, text)
    if inline is not None:
        return inline
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    value = _without_grad_off(stmt.value)
    if not (_called(value, _DEEPCOPY) and isinstance(value, ast.Call) and len(value.args) == 1
            and not value.keywords):
        return None
    name, module = stmt.targets[0].id, value.args[0]
    if not isinstance(module, (ast.Name, ast.Attribute)):
        return None
    fn = function_of(text.source, stmt)
    if fn is None:
        return None
    calls = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name and n is not stmt.targets[0]]
    # Only called, never stored again, passed on, changed (``teacher.eval()``) or read before.
    if not uses or any(id(n) not in calls or n.lineno <= stmt.lineno for n in uses):
        return None
    state = f"_{name}_state"
    if state in _function_names(stmt, text):
        return None
    src = text.of(module)
    return Made([
        f"{state} = {{k: v.detach().clone() for k, v in [*{src}.named_parameters(), *{src}.named_buffers()]}}",
        f"def {name}(*args, **kwargs):",
        f"{text.unit}return torch.func.functional_call({src}, {state}, args, kwargs)",
    ], TEACHER, (
        f"the copy is only called (never stored, changed or trained), with {src} as it is at the copy: the "
        "snapshot is detached, so no gradient reaches the original, as with a copy, and a call that updates "
        "buffers (BatchNorm in training) updates the snapshot, not the module; the copy's mode (train/eval) "
        f"is {src}'s when called"))


def _without_grad_off(value: ast.expr) -> ast.expr:
    """``copy.deepcopy(m).requires_grad_(False)`` as ``copy.deepcopy(m)``: the snapshot is
    detached, so turning its gradients off changes nothing."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr == "requires_grad_" and len(value.args) == 1 and not value.keywords
           and isinstance(value.args[0], ast.Constant) and value.args[0].value is False):
        value = value.func.value
    return value


class _CalledCopy(ast.NodeTransformer):
    """``copy.deepcopy(m)(x, ...)``: the copy called at once, as one functional_call."""

    def __init__(self, text: Text) -> None:
        self.text = text
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        made = _without_grad_off(node.func)
        if not (_called(made, _DEEPCOPY) and isinstance(made, ast.Call) and len(made.args) == 1
                and not made.keywords and isinstance(made.args[0], (ast.Name, ast.Attribute))
                and not any(isinstance(a, ast.Starred) for a in node.args)
                and all(k.arg is not None for k in node.keywords)):
            return node
        self.changed = True
        src = self.text.of(made.args[0])
        state = ast.parse(f"{{k: v.detach().clone() for k, v in [*{src}.named_parameters(), "
                          f"*{src}.named_buffers()]}}", mode="eval").body
        args = ast.Tuple(elts=list(node.args), ctx=ast.Load())
        kwargs = ast.Dict(keys=[ast.Constant(k.arg) for k in node.keywords], values=[k.value for k in node.keywords])
        func = ast.parse("torch.func.functional_call", mode="eval").body
        return ast.Call(func=func, args=[made.args[0], state, args, *([kwargs] if node.keywords else [])], keywords=[])


def _called_copy(stmt: ast.stmt, text: Text) -> Made | None:
    if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
        return None
    t = _CalledCopy(text)
    new = t.visit(copy.deepcopy(stmt))
    if not t.changed:
        return None
    return Made(ast.unparse(new).split("\n"), TEACHER, (
        "the copy is only called, at once: the call uses a detached snapshot of the module's state, so no "
        "gradient reaches the original, as with a copy"))


# -- 2. a gradient taken inside forward (saliency, gradient penalty) -------------------------------


def _requires_grad_on(stmt: ast.stmt) -> tuple[str, ast.expr | None] | None:
    """``x.requires_grad_(True)`` or ``x.requires_grad = True`` -> (x, None);
    ``x = EXPR.requires_grad_()`` -> (x, EXPR)."""
    def turned_on(call: ast.expr) -> ast.expr | None:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "requires_grad_" and not call.keywords and len(call.args) <= 1):
            return None
        if call.args and not (isinstance(call.args[0], ast.Constant) and call.args[0].value is True):
            return None
        return call.func.value

    if isinstance(stmt, ast.Expr):
        inner = turned_on(stmt.value)
        return (inner.id, None) if isinstance(inner, ast.Name) else None
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
            and stmt.targets[0].attr == "requires_grad" and isinstance(stmt.targets[0].value, ast.Name)
            and isinstance(stmt.value, ast.Constant) and stmt.value.value is True):
        return stmt.targets[0].value.id, None  # x.requires_grad = True
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        inner = turned_on(stmt.value)
        return (stmt.targets[0].id, inner) if inner is not None else None
    return None


def _one(node: ast.expr) -> ast.expr:
    """``[d]`` or ``(d,)`` as ``d``: autograd.grad takes sequences of one as the tensor."""
    return node.elts[0] if isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == 1 else node


_RETURNED = "_grad"  # the gradient's name where the function returns it directly


def _autograd_grad(stmt: ast.stmt, wrt: str) -> tuple[str, ast.expr, dict[str, ast.expr]] | None:
    """``g, = torch.autograd.grad(out, x, ...)``, ``(g,) = ...``, ``g = ...(...)[0]`` or ``return
    ...(...)[0]`` (the tensors positional or as ``outputs=``/``inputs=``), the gradient taken with
    respect to ``wrt`` alone: (g, out, the other keywords); g is ``_grad`` for a return."""
    if (isinstance(stmt, ast.Return) and isinstance(stmt.value, ast.Subscript)
            and isinstance(stmt.value.slice, ast.Constant) and stmt.value.slice.value == 0):
        stmt = ast.Assign(targets=[ast.Name(id=_RETURNED, ctx=ast.Store())], value=stmt.value)
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
        return None
    target, value = stmt.targets[0], stmt.value
    if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 1 and isinstance(target.elts[0], ast.Name):
        name = target.elts[0].id
    elif (isinstance(target, ast.Name) and isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Constant)
          and value.slice.value == 0):
        name, value = target.id, value.value
    else:
        return None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "grad"
            and ast.unparse(value.func.value) in ("torch.autograd", "autograd")):
        return None
    given = dict(zip(("outputs", "inputs", "grad_outputs", "retain_graph", "create_graph"), value.args, strict=False))
    for k in value.keywords:
        if k.arg is None or k.arg in given:
            return None  # **kwargs, or an argument given twice
        given[k.arg] = k.value
    if set(given) - {"outputs", "inputs", "grad_outputs", "retain_graph", "create_graph", "only_inputs"}:
        return None  # allow_unused, is_grads_batched...: another contract than torch.func's
    out, inputs = given.pop("outputs", None), given.pop("inputs", None)
    of = _one(inputs) if inputs is not None else None
    if out is None or not (isinstance(of, ast.Name) and of.id == wrt):
        return None
    if "grad_outputs" in given:
        given["grad_outputs"] = _one(given["grad_outputs"])
    return name, _one(out), given


def func_grad(stmt: ast.stmt, text: Text) -> Made | None:
    """``x.requires_grad_(True)``, a forward (assignments), ``g, = torch.autograd.grad(out, x)``:
    the forward as a local function and its gradient by ``torch.func.grad`` (``torch.func.vjp``
    when ``grad_outputs`` is given or ``out`` is read after), which Dynamo traces. The site is
    either end: the ``requires_grad_`` line or the ``autograd.grad`` line."""
    block, at = block_of(text.source, stmt)
    start = end = None
    if _requires_grad_on(stmt) is not None:
        wrt = _requires_grad_on(stmt)[0]  # type: ignore[index]
        start = at
        end = next((i for i in range(at + 1, len(block)) if _autograd_grad(block[i], wrt) is not None), None)
    else:
        for i in range(at - 1, -1, -1):
            on = _requires_grad_on(block[i])
            if on is not None and _autograd_grad(stmt, on[0]) is not None:
                start, end = i, at
                break
    if start is None or end is None:
        return None
    on = _requires_grad_on(block[start])
    assert on is not None
    wrt, value = on
    found = _autograd_grad(block[end], wrt)
    assert found is not None
    grad_name, out, keywords = found
    forward = block[start + 1: end]
    # The forward assigns names only (its calls' results): a statement with another effect
    # would run inside torch.func's transform, which is not what the user wrote.
    if not all(isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets) for s in forward):
        return None
    create = keywords.get("create_graph")
    if create is not None and not isinstance(create, ast.Constant):
        return None  # a create_graph known only at run time
    assigned = [t.id for s in forward for t in s.targets if isinstance(t, ast.Name)]  # type: ignore[attr-defined]
    after = block[end]
    grad_outputs = keywords.get("grad_outputs")
    # Names of the forward read after it (or by grad_outputs) come back as torch.func's aux.
    later = names_loaded(grad_outputs) if grad_outputs is not None else set()
    aux = [n for n in dict.fromkeys(assigned) if (n in later or read_later(text.source, after, n))
           and not (isinstance(out, ast.Name) and n == out.id)]
    out_read = isinstance(out, ast.Name) and (out.id in later or read_later(text.source, after, out.id))
    if wrt in assigned or grad_name == wrt or {"_forward", _RETURNED} & _function_names(stmt, text):
        return None
    unit = text.unit
    lines: list[str] = []
    if value is not None:  # x = EXPR.requires_grad_(): x is EXPR; torch.func takes the gradient
        lines.append(f"{wrt} = {text.of(value)}")
    aux_tuple = "(" + ", ".join(aux) + ("," if len(aux) == 1 else "") + ")"
    ret = text.of(out) + (f", {aux_tuple}" if aux else "")
    lines += [f"def _forward({wrt}):", *_indented(text.body_lines(forward), unit), f"{unit}return {ret}"]
    has_aux = ", has_aux=True" if aux else ""
    if grad_outputs is not None or out_read:
        primal = out.id if isinstance(out, ast.Name) else "_out"
        got = f"{primal}, _vjp" + (f", {aux_tuple}" if aux else "")
        cotangent = text.of(grad_outputs) if grad_outputs is not None else f"torch.ones_like({primal})"
        lines += [f"{got} = torch.func.vjp(_forward, {wrt}{has_aux})", f"{grad_name}, = _vjp({cotangent})"]
    else:
        got = grad_name + (f", {aux_tuple}" if aux else "")
        lines.append(f"{got} = torch.func.grad(_forward{has_aux})({wrt})")
    if not (isinstance(create, ast.Constant) and create.value is True):
        # autograd.grad without create_graph gives a gradient with no history: so does this.
        lines.append(f"{grad_name} = {grad_name}.detach()")
    if isinstance(block[end], ast.Return):  # ``return torch.autograd.grad(...)[0]``
        lines.append(f"return {grad_name}")
    note = (f"{wrt} needs its gradient only for {grad_name} (requires_grad_ no longer changes {wrt} itself, "
            f"and nothing after reads {wrt}'s .grad); the statements between only compute {text.of(out)} "
            "(they run inside torch.func's transform)")
    return Made(lines, FUNC_GRAD, note, first=block[start], last=block[end])


# -- 3. state set up in forward -------------------------------------------------------------------


def _constructed(value: ast.expr) -> str:
    """``nn.Linear``, ``torch.nn.Parameter``...: the class a call builds when it is one of
    torch.nn's (a module or a Parameter), "" otherwise."""
    if not isinstance(value, ast.Call):
        return ""
    name = ast.unparse(value.func)
    head, _, cls = name.rpartition(".")
    return name if head in ("nn", "torch.nn") and cls[:1].isupper() else ""


def made_in_forward(stmt: ast.stmt, text: Text) -> str | None:
    """``self.head = nn.Linear(...)`` (or ``nn.Parameter(...)``) in forward: why no patch is
    written. Dynamo cannot trace ``nn.Parameter``'s constructor, so the first call breaks
    there; the remedy is in ``__init__``, which a patch of forward cannot show verified."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Attribute)
            and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id == "self"):
        return None
    built = _constructed(stmt.value)
    fn = function_of(text.source, stmt)
    if not built or fn is None or fn.name == "__init__":
        return None
    target = text.of(stmt.targets[0])
    lazy = " (torch.nn.LazyLinear and the other Lazy modules when its size comes from the input)" \
        if built.endswith(("Linear", "Conv1d", "Conv2d", "Conv3d", "BatchNorm1d", "BatchNorm2d")) else ""
    return (f"{target} is made in {fn.name} ({built}(...)): Dynamo cannot trace nn.Parameter's constructor, so "
            f"the call that makes it breaks (a call that finds it made does not). Make it in __init__{lazy}; "
            "fix writes no patch of it: it verifies a copy of your model, whose __init__ has already run")


# -- 4. generators with an early exit --------------------------------------------------------------


def _sequence_of(comp: ast.comprehension) -> tuple[str | None, str, ast.expr] | None:
    """A generator's loop over a tensor's first dim: (index name or None, element name, the
    sequence), for ``v in s``, ``i, v in enumerate(s)`` and ``i in range(len(s))``."""
    it, target = comp.iter, comp.target
    if comp.is_async:
        return None
    if isinstance(target, ast.Name) and not isinstance(it, ast.Call):
        return None, target.id, it
    if (_called(it, "enumerate") and isinstance(it, ast.Call) and len(it.args) == 1 and not it.keywords
            and isinstance(target, ast.Tuple) and len(target.elts) == 2
            and all(isinstance(e, ast.Name) for e in target.elts)):
        return target.elts[0].id, target.elts[1].id, it.args[0]  # type: ignore[attr-defined]
    return None


class _Whole(ast.NodeTransformer):
    """An element test as a test of the whole sequence: the element (``v``, ``s[i]``) becomes
    the sequence; refused when anything but elementwise operations touches it."""

    def __init__(self, element: str, index: str | None, seq: ast.expr) -> None:
        self.element, self.index, self.seq = element, index, seq
        self.refused = False

    def _is_element(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name) and node.id == self.element:
            return True
        return (self.index is not None and isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name)
                and node.slice.id == self.index and ast.dump(node.value) == ast.dump(self.seq))

    def _touches(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in (self.element, self.index) for n in ast.walk(node))

    def visit(self, node: ast.AST) -> ast.AST:
        if self._is_element(node):
            return copy.deepcopy(self.seq)
        if isinstance(node, ast.Name) and node.id in (self.element, self.index):
            self.refused = True  # the index as a number, the element in another role
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
                return self.visit(f.value)
            if isinstance(f, ast.Attribute) and f.attr in _ELEMENTWISE and not node.args and not node.keywords:
                return _method(self.visit(f.value), f.attr)  # type: ignore[arg-type]
            if self._touches(node):
                self.refused = True  # a reduction or a function of the element: not elementwise
        if isinstance(node, (ast.Attribute, ast.Subscript)) and self._touches(node):
            # v.shape, v.T, v[0]: a property or a part of each element, not the element itself
            self.refused = True
        if isinstance(node, ast.BoolOp):
            op: ast.operator = ast.BitAnd() if isinstance(node.op, ast.And) else ast.BitOr()
            values = [self.visit(v) for v in node.values]
            out = values[0]
            for v in values[1:]:
                out = ast.BinOp(left=out, op=op, right=v)  # type: ignore[arg-type]
            return out
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return ast.UnaryOp(op=ast.Invert(), operand=self.visit(node.operand))  # type: ignore[arg-type]
        if isinstance(node, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
                                                 for o in node.ops):
            self.refused = True
        return self.generic_visit(node)


def _mask_of(test: ast.expr, element: str, index: str | None, seq: ast.expr) -> ast.expr | None:
    whole = _Whole(element, index, seq)
    out = whole.visit(copy.deepcopy(test))
    if whole.refused or ast.dump(out) == ast.dump(test):
        return None
    return out  # type: ignore[return-value]


def _method(value: ast.expr, name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(func=ast.Attribute(value=value, attr=name), args=list(args), keywords=[])


def _first_index(mask: ast.expr) -> ast.expr:
    """The index of the first true element: argmax of the mask as ints (the first maximum)."""
    return _method(_method(mask, "int"), "argmax")


class _GeneratorOps(ast.NodeTransformer):
    """``any/all(test for v in s)`` -> ``(test of s).any()/.all()``; ``next(i for i, v in
    enumerate(s) if test)`` -> the first index by argmax, ``next(v for v in s if test)`` -> that
    element; with a default, ``torch.where`` on whether any element passes."""

    def __init__(self) -> None:
        self.changed = False
        self.no_default = False  # a next() without a default: it raises when nothing passes

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        if not (isinstance(node.func, ast.Name) and node.func.id in ("any", "all", "next") and node.args
                and isinstance(node.args[0], ast.GeneratorExp) and len(node.args[0].generators) == 1
                and not node.keywords):
            return node
        gen = node.args[0]
        comp = gen.generators[0]
        found = _sequence_of(comp)
        if found is None or len(comp.ifs) > 1:
            return node
        index, element, seq = found
        if node.func.id in ("any", "all"):
            if comp.ifs or len(node.args) != 1:
                return node
            mask = _mask_of(gen.elt, element, index, seq)
            if mask is None:
                return node
            self.changed = True
            return _method(mask, node.func.id)
        if len(comp.ifs) != 1 or len(node.args) > 2:
            return node
        mask = _mask_of(comp.ifs[0], element, index, seq)
        if mask is None:
            return node
        first = _first_index(mask)
        if isinstance(gen.elt, ast.Name) and gen.elt.id == index:
            picked: ast.expr = first
        elif isinstance(gen.elt, ast.Name) and gen.elt.id == element:
            # The element by a tensor index: index_select needs no Python int (s[i] would).
            picked = _method(_method(seq, "index_select", ast.Constant(0), _method(first, "reshape", ast.Constant(1))),
                             "squeeze", ast.Constant(0))
        else:
            return node
        self.changed = True
        if len(node.args) == 1:
            self.no_default = True
            return picked
        where = ast.Attribute(value=ast.Name("torch"), attr="where")
        return ast.Call(func=where, args=[_method(copy.deepcopy(mask), "any"), picked, node.args[1]], keywords=[])


def tensor_ops(stmt: ast.stmt, text: Text) -> Made | None:
    """A generator with an early exit over a tensor's elements as whole-tensor ops; in an
    ``if`` test, the ``if`` then becomes ``torch.where``/``torch.cond`` as a branch does."""
    ops = _GeneratorOps()
    if isinstance(stmt, (ast.If, ast.While)):
        test = ops.visit(copy.deepcopy(stmt.test))
        if not ops.changed or isinstance(stmt, ast.While):
            return None
        # The same if with its test made a tensor: the branch rewrites take it from here.

        branch = copy.copy(stmt)
        branch.test = test
        for make in (branches.where, branches.cond):  # the branch rewrites, reused
            made = make(branch, text)
            if made is not None:
                lines, name, note = made
                return Made(lines, TENSOR_OPS, f"{_generator_note(ops)}; then {name}: {note}")
        return _early_return(stmt, test, text, ops)
    if isinstance(stmt, (ast.For, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef)):
        return None
    new = ops.visit(copy.deepcopy(stmt))
    if not ops.changed:
        return None
    return Made(ast.unparse(new).split("\n"), TENSOR_OPS, _generator_note(ops))


def _early_return(stmt: ast.If, test: ast.expr, text: Text, ops: _GeneratorOps) -> Made | None:
    """``if test: return a`` followed by ``return b``: one ``return torch.where(test, a, b)``."""
    block, at = block_of(text.source, stmt)
    nxt = block[at + 1] if at + 1 < len(block) else None
    if (stmt.orelse or len(stmt.body) != 1 or not isinstance(stmt.body[0], ast.Return) or stmt.body[0].value is None
            or not isinstance(nxt, ast.Return) or nxt.value is None):
        return None
    line = f"return torch.where({ast.unparse(test)}, {text.of(stmt.body[0].value)}, {text.of(nxt.value)})"
    return Made([line], TENSOR_OPS, f"{_generator_note(ops)}; both returns give tensors of one shape and dtype "
                "(torch.where computes both)", last=nxt)


def _generator_note(ops: _GeneratorOps) -> str:
    note = ("the sequence is a 1-D tensor and the test is elementwise (it is made once for the whole tensor); "
            "an index found stays a 0-dim tensor")
    if ops.no_default:
        note += " (next() without a default raises when no element passes; argmax then gives 0)"
    return note


def first_match(stmt: ast.stmt, text: Text) -> Made | None:
    """``for i, v in enumerate(s): if test(v): found = i; break`` (also ``for i in
    range(len(s))`` with ``s[i]``, and ``found = v``) -> the first index by argmax, kept only
    when some element passes (``torch.where``). The site is the ``if`` in the loop."""
    loop = next((n for n in ast.walk(function_of(text.source, stmt) or stmt) if isinstance(n, ast.For)
                 and len(n.body) == 1 and n.body[0] is stmt), None)
    if loop is None or loop.orelse or not isinstance(stmt, ast.If) or stmt.orelse:
        return None
    if not (len(stmt.body) == 2 and isinstance(stmt.body[1], ast.Break) and isinstance(stmt.body[0], ast.Assign)
            and len(stmt.body[0].targets) == 1 and isinstance(stmt.body[0].targets[0], ast.Name)):
        return None
    index, element, seq = _loop_sequence(loop)
    if seq is None:
        return None
    found, value = stmt.body[0].targets[0].id, stmt.body[0].value
    mask = _mask_of(stmt.test, element or "", index, seq)
    if mask is None or "_hit" in _function_names(stmt, text):
        return None
    first = ast.unparse(_first_index(ast.Name("_hit")))
    if isinstance(value, ast.Name) and value.id == index:
        picked = first
    elif (isinstance(value, ast.Name) and value.id == element) or (
            isinstance(value, ast.Subscript) and isinstance(value.slice, ast.Name) and value.slice.id == index
            and ast.dump(value.value) == ast.dump(seq)):
        picked = f"{text.of(seq)}.index_select(0, {first}.reshape(1)).squeeze(0)"
    else:
        return None
    # The loop's names are not set by the new code: nothing after may read them.
    if any(n and read_later(text.source, loop, n) for n in (index, element)):
        return None
    return Made([f"_hit = {ast.unparse(mask)}", f"{found} = torch.where(_hit.any(), {picked}, {found})"],
                FIRST_MATCH, (
                    f"the loop runs over a 1-D tensor ({text.of(seq)}) and its test is elementwise; {found} is set "
                    f"before the loop (kept when no element passes) and becomes a 0-dim tensor"), first=loop, last=loop)


def _loop_sequence(loop: ast.For) -> tuple[str | None, str | None, ast.expr | None]:
    """(index name, element name, sequence) of ``for v in s``, ``for i, v in enumerate(s)``,
    ``for i in range(len(s))``/``range(s.shape[0])``/``range(s.size(0))``."""
    it, target = loop.iter, loop.target
    if _called(it, "range") and isinstance(it, ast.Call) and len(it.args) == 1 and isinstance(target, ast.Name):
        n = it.args[0]
        if _called(n, "len") and isinstance(n, ast.Call) and len(n.args) == 1:
            return target.id, None, n.args[0]
        if (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape"
                and isinstance(n.slice, ast.Constant) and n.slice.value == 0):
            return target.id, None, n.value.value
        if (_called(n, "size") and isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and len(n.args) == 1 and isinstance(n.args[0], ast.Constant) and n.args[0].value == 0):
            return target.id, None, n.func.value
        return None, None, None
    comp = ast.comprehension(target=target, iter=it, ifs=[], is_async=0)
    found = _sequence_of(comp)
    return found if found is not None else (None, None, None)


# -- 5. a loop with a data-dependent early stop (greedy decoding, rollouts) --------------------------


def stop_mask(stmt: ast.stmt, text: Text) -> Made | str | None:
    """A ``for ... in range(n)`` loop that ends ``if test: break``: all ``n`` turns run, and a
    stop flag freezes what the loop carries once the test held (``name = torch.where(_stopped,
    name, new)``), writes into a buffer keep its old values, and values appended (or
    concatenated: ``ids = torch.cat([ids, tok], 1)``) after the stop are zeros. The site is the
    ``if``. A grown value read after the loop other than as a whole total has the length the
    stop gave it (greedy decoding returns its tokens): no rewrite, and the reason says so - a
    verification whose inputs never stop early could not tell the difference."""
    fn = function_of(text.source, stmt)
    loop = next((n for n in ast.walk(fn or stmt) if isinstance(n, ast.For) and any(b is stmt for b in n.body)), None)
    if (loop is None or loop.orelse or not _called(loop.iter, "range") or not isinstance(stmt, ast.If)
            or stmt.orelse or not stmt.body or not isinstance(stmt.body[-1], ast.Break) or fn is None):
        return None
    at = next(i for i, b in enumerate(loop.body) if b is stmt)
    # `if test: u = u_next; break` then `u = u_next`: the statements the `if` runs before its
    # break are the turn's last ones; the test is read before them, the stop after them.
    tail = loop.body[at + 1:]
    if [ast.dump(b) for b in stmt.body[:-1]] != [ast.dump(b) for b in tail]:
        return None
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for s in [*loop.body[:at], *tail] for n in ast.walk(s)):
        return None
    taken = _function_names(stmt, text)
    if "_stopped" in taken or "_turn" in taken or "_stop_now" in taken:
        return None
    # Names bound before the loop (arguments, earlier statements) are what it carries.
    bound = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    bound |= {t.id for s in ast.walk(fn) if isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign))
              and s.lineno < loop.lineno for t in ast.walk(s) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    # A value that grows each turn (appended, or torch.cat-grown) has the length the stop gave
    # it: all n turns would make it longer. Only a total of it (zeros add nothing) survives.
    for name, listed in _grown_names(loop, bound):
        if not _only_totalled(fn, loop, name, listed):
            return (f"the loop's stop decides how long `{name}` grows (each turn adds to it, and it is read after "
                    f"the loop): run for all its turns under a stop mask it would come out longer than the eager "
                    f"run's, so no rewrite keeps it; compile the loop's step (the model's forward) instead of the loop")
    unit = text.unit
    frozen: list[list[str]] = []
    for s in [*loop.body[:at], *tail]:
        new = _frozen(s, bound, text)
        if new is None:
            return None
        frozen.append(new)
    body = [ln for part in frozen[:at] for ln in part]

    # The test as a tensor: `.item()`, bool(), float() dropped, `and`/`or` as `&`/`|` (a Python
    # number would break the graph where the `if` did).
    tensor_test = branches.tensor_test(stmt.test)
    if tensor_test is None:
        return None
    if tensor_test == ast.unparse(stmt.test):
        tensor_test = text.of(stmt.test)  # the file's own spelling when nothing was dropped
    bare = isinstance(ast.parse(tensor_test, mode="eval").body, (ast.Call, ast.Name, ast.Attribute, ast.Subscript))
    if tail:
        body.append(f"_stop_now = {tensor_test}")
        body += [ln for part in frozen[at:] for ln in part]
        body.append("_stopped = _stopped | _stop_now")
    else:
        body.append(f"_stopped = _stopped | {tensor_test if bare else f'({tensor_test})'}")
    header = f"for {text.of(loop.target)} in {text.of(loop.iter)}:"
    return Made(["_stopped = torch.zeros((), dtype=torch.bool)", header, *_indented(body, unit)], STOP_MASK, (
        "the loop runs all its turns: what it carries stays as it was at the stop, a buffer it writes keeps its "
        "old values, and a value appended after the stop is zeros, read after the loop only as a total (a list "
        "built in the loop and used otherwise is longer than the eager run's when the loop stopped early)"),
        first=loop, last=loop)


def _grown_names(loop: ast.For, bound: set[str]) -> list[tuple[str, bool]]:
    """The names the loop's body grows each turn, each with whether it is a list:
    ``name.append(v)`` (a list) and ``name = torch.cat([name, part], ...)`` of a name bound
    before the loop (a tensor)."""
    out = []
    for s in loop.body:  # the stop `if` is neither an assignment nor an append
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name):
            if s.targets[0].id in bound and _grown(s.targets[0].id, s.value) is not None:
                out.append((s.targets[0].id, False))
        elif (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
              and s.value.func.attr == "append" and isinstance(s.value.func.value, ast.Name)):
            out.append((s.value.func.value.id, True))
    return out


def _only_totalled(fn: ast.AST, loop: ast.For, name: str, listed: bool) -> bool:
    """Whether every read of ``name`` after the loop is inside a whole total of it, which zeros
    added after the stop leave as it was: ``torch.stack(name).sum()`` or ``sum(name)`` of a
    list, ``name.sum()`` of a tensor (``sum(t)`` of a tensor keeps its rows: not a total)."""
    end = loop.end_lineno or loop.lineno

    def total(n: ast.AST) -> bool:
        if not isinstance(n, ast.Call) or n.lineno <= end:
            return False
        if listed and _called(n, "sum") and isinstance(n.func, ast.Name) and len(n.args) == 1 and not n.keywords:
            return isinstance(n.args[0], ast.Name) and n.args[0].id == name
        if not (isinstance(n.func, ast.Attribute) and n.func.attr == "sum" and not n.args and not n.keywords):
            return False
        inner = n.func.value
        if not listed:
            return isinstance(inner, ast.Name) and inner.id == name
        return (_called(inner, "stack", "cat", "concat") and len(inner.args) == 1  # type: ignore[attr-defined]
                and isinstance(inner.args[0], ast.Name) and inner.args[0].id == name)  # type: ignore[attr-defined]

    totals = [n for n in ast.walk(fn) if total(n)]
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) and n.lineno > end
                   and not any(contains(t, n) for t in totals) for n in ast.walk(fn))


def _grown(name: str, value: ast.expr) -> ast.expr | None:
    """What ``torch.cat([name, part], ...)`` (or ``torch.cat((name, part), ...)``) adds to
    ``name``: ``part``, when it is a name or an attribute or subscript of one (read once)."""
    if not (isinstance(value, ast.Call) and ast.unparse(value.func) in ("torch.cat", "torch.concat") and value.args
            and isinstance(value.args[0], (ast.List, ast.Tuple)) and len(value.args[0].elts) == 2):
        return None
    first, part = value.args[0].elts
    if not (isinstance(first, ast.Name) and first.id == name and isinstance(part, (ast.Name, ast.Attribute,
                                                                                     ast.Subscript))):
        return None
    return part if getattr(part, "lineno", None) == value.lineno == value.end_lineno else None


def _frozen(s: ast.stmt, bound: set[str], text: Text) -> list[str] | None:
    """One statement of the loop with its effect held after the stop; None when it has
    another kind of effect (a call statement, a nested block)."""
    where = "torch.where(_stopped, {old}, {new})"
    if isinstance(s, ast.Assign) and len(s.targets) == 1:
        target = s.targets[0]
        if isinstance(target, ast.Name):
            if target.id not in bound:  # a value of this turn: made from what is frozen
                return text.statement_lines(s)
            grown = _grown(target.id, s.value)
            if grown is not None and s.lineno == s.end_lineno:
                # ids = torch.cat([ids, tok], dim=1): a sequence that grows each turn cannot be
                # frozen (its shape changes); what it grows by is zeros after the stop.
                line = text.lines[s.lineno - 1].encode("utf-8")  # ast's columns count UTF-8 bytes
                part = text.of(grown)
                new = (line[s.col_offset: grown.col_offset].decode("utf-8")
                       + where.format(old=f"torch.zeros_like({part})", new=part)
                       + line[grown.end_col_offset: s.end_col_offset].decode("utf-8"))
                return [new]
            return [f"{target.id} = " + where.format(old=target.id, new=text.of(s.value))]
        if isinstance(target, ast.Subscript):
            old = text.of(target)
            return [f"{old} = " + where.format(old=old, new=text.of(s.value))]
        if isinstance(target, ast.Tuple) and all(isinstance(e, ast.Name) for e in target.elts):
            out = [f"_turn = {text.of(s.value)}"]
            for i, e in enumerate(target.elts):
                name = e.id  # type: ignore[attr-defined]
                out.append(f"{name} = " + (where.format(old=name, new=f"_turn[{i}]") if name in bound
                                           else f"_turn[{i}]"))
            return out
        return None
    if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name):
        name = s.target.id
        op = ast.unparse(ast.BinOp(left=ast.Name(name), op=s.op, right=ast.Name("_")))[len(name) + 1:-2]
        return [f"{name} = " + where.format(old=name, new=f"{name} {op} {text.of(s.value)}")]
    if (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and isinstance(s.value.func, ast.Attribute)
            and s.value.func.attr == "append" and len(s.value.args) == 1 and isinstance(s.value.args[0], ast.Name)):
        v = s.value.args[0].id
        return [f"{text.of(s.value.func)}(" + where.format(old=f"torch.zeros_like({v})", new=v) + ")"]
    return None


# -- 6. a train step that logs its loss ------------------------------------------------------------


class _Detached(ast.NodeTransformer):
    def __init__(self) -> None:
        self.changed = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        node = self.generic_visit(node)  # type: ignore[assignment]
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "item" and not node.args:
            self.changed = True
            return _method(f.value, "detach")
        if (isinstance(f, ast.Name) and f.id == "float" and len(node.args) == 1 and isinstance(node.args[0], ast.Call)
                and isinstance(node.args[0].func, ast.Attribute) and node.args[0].func.attr == "detach"):
            return node.args[0]
        return node


def logged_value(stmt: ast.stmt, text: Text) -> Made | None:
    """A loss kept for the record: ``history.append(loss.item())``, ``running += loss.item()``,
    ``stats["loss"] = loss.item()`` -> the detached 0-dim tensor is kept instead of the
    number, so nothing leaves the graph; the user reads the numbers after the step."""
    if isinstance(stmt, ast.Expr) and _called(stmt.value, "append", "extend", "add", "put"):
        holder, what = ast.unparse(stmt.value.func.value), "holds 0-dim tensors"  # type: ignore[attr-defined]
    elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, (ast.Name, ast.Attribute, ast.Subscript)):
        holder, what = ast.unparse(stmt.target), "is a 0-dim tensor"
    elif (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
          and isinstance(stmt.targets[0], ast.Subscript)):
        holder, what = ast.unparse(stmt.targets[0].value), "holds 0-dim tensors"
    else:
        return None
    if not _has_item(stmt):
        return None
    t = _Detached()
    new = t.visit(copy.deepcopy(stmt))
    if not t.changed:
        return None
    return Made(ast.unparse(new).split("\n"), LOGGED, (
        f"{holder} {what} (detached, on the loss's device) instead of Python floats: read them with float(...) "
        "or .item() outside the compiled step; the sums and formats that follow take tensors"))


def reported_value(stmt: ast.stmt, text: Text) -> Made | None:
    """A call statement whose arguments report a number read from a tensor
    (``wandb.log({"loss": loss.item()})``, ``writer.add_scalar("loss", loss.item(), step)``,
    ``pbar.set_postfix(loss=loss.item())``): it runs in eager code only. A call that keeps the
    value (``append``...) is :func:`logged_value`'s."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)):
        return None
    call = stmt.value
    if _called(call, "append", "extend", "add", "put", "update", "insert", "copy_", "add_", "fill_"):
        return None  # it keeps or changes something the program may read
    if not any(_has_item(a) for a in [*call.args, *(k.value for k in call.keywords)]):
        return None
    return Made(["if not torch.compiler.is_compiling():", *_indented(text.statement_lines(stmt), text.unit)],
                REPORTED, (
                    f"{ast.unparse(call.func)}(...) only reports the value (a logger, a progress bar, a metrics "
                    "writer): under torch.compile it is skipped, so compiled steps report nothing"))
