"""A call tried with a keyword and tried again without it on ``TypeError``, as a call chosen by
the callee's signature.

Model code that calls a list of layers of mixed kinds often tries the richer call first and
falls back when a layer's ``forward`` does not take the keyword (speechbrain's ECAPA-TDNN:
``try: x = layer(x, lengths=lengths) except TypeError: x = layer(x)``). Dynamo cannot trace the
exception it would have to catch, so the call breaks the graph. Asking the callee's signature
first makes the same choice without raising:

- ``call chosen by the callee's signature``: the ``try``/``except TypeError`` whose two bodies
  are one call each, the second the first without some keywords -> ``_accepts =
  inspect.signature(getattr(f, "forward", f)).parameters`` and ``if`` it takes the keywords (or
  ``**kwargs``) the first call, ``else`` the second (``import inspect`` in the function where the
  file has none). Dynamo reads a signature without a break.

Text only (no torch import); verified only where the run took the fallback at least once.
"""

from __future__ import annotations

import ast

from dynscope._capture.fix.statements import Made, Text, function_of, holder_of, imports, parsed

__all__ = ["SIGNATURE", "signature_choice"]

SIGNATURE = "call chosen by the callee's signature"


def _call_of(stmt: ast.stmt) -> ast.Call | None:
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr, ast.Return)) else None
    return value if isinstance(value, ast.Call) else None


def _plain_callee(node: ast.expr) -> bool:
    """A name or a dotted name (``layer``, ``self.block``): read twice, the same object."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _fallback(stmt: ast.stmt, text: Text) -> tuple[ast.Try, ast.stmt, ast.stmt, list[str]] | None:
    """(the ``try``, its call, the fallback call, the keywords the fallback leaves out)."""
    holder = holder_of(text.source, stmt)
    if not (isinstance(holder, ast.Try) and holder.body == [stmt] and len(holder.handlers) == 1
            and not holder.orelse and not holder.finalbody):
        return None
    handler = holder.handlers[0]
    if not (isinstance(handler.type, ast.Name) and handler.type.id == "TypeError") or handler.name \
            or len(handler.body) != 1:
        return None
    first, second = stmt, handler.body[0]
    a, b = _call_of(first), _call_of(second)
    if a is None or b is None or type(first) is not type(second) or not _plain_callee(a.func):
        return None
    if isinstance(first, ast.Assign) and isinstance(second, ast.Assign) and [
            text.of(t) for t in first.targets] != [text.of(t) for t in second.targets]:
        return None
    if text.of(a.func) != text.of(b.func) or [text.of(x) for x in a.args] != [text.of(x) for x in b.args]:
        return None
    if any(k.arg is None for k in [*a.keywords, *b.keywords]):
        return None  # **kwargs: which keywords they hold is the data's
    kept = {str(k.arg): text.of(k.value) for k in a.keywords}
    if any(kept.get(str(k.arg)) != text.of(k.value) for k in b.keywords):
        return None  # a keyword the fallback passes otherwise
    dropped = [k for k in kept if k not in {x.arg for x in b.keywords}]
    return (holder, first, second, dropped) if dropped else None


def signature_choice(stmt: ast.stmt, text: Text) -> Made | None:
    """The ``try``/``except TypeError`` around ``stmt`` as a call chosen by the callee's
    signature (see the module)."""
    found = _fallback(stmt, text)
    if found is None:
        return None
    holder, first, second, dropped = found
    call = _call_of(first)
    assert call is not None
    fn = function_of(text.source, holder)
    taken = {n.id for n in ast.walk(fn if fn is not None else parsed(text.source)) if isinstance(n, ast.Name)}
    accepts = next(n for n in ("_accepts", "_accepts_", "__accepts") if n not in taken)
    callee = text.of(call.func)
    unit = text.unit
    lines = [] if imports(text.source, "inspect") else ["import inspect"]
    lines += [
        f"{accepts} = inspect.signature(getattr({callee}, 'forward', {callee})).parameters",
        f"if all(k in {accepts} for k in {tuple(dropped)!r}) or any(p.kind == p.VAR_KEYWORD for p in "
        f"{accepts}.values()):",
        *(unit + ln for ln in text.statement_lines(first)),
        "else:",
        *(unit + ln for ln in text.statement_lines(second)),
    ]
    names = ", ".join(f"`{k}`" for k in dropped)
    return Made(lines, SIGNATURE, (
        f"the TypeError the fallback caught was {callee}'s signature refusing {names} (one the call raises for another "
        "reason now propagates); the callee is a function or a module whose forward is what it runs"),
        first=holder, last=holder, taken=(second.lineno,))
