"""Checks on a tensor's value that only report or stop the program, out of the graph's way.

A test on a tensor's value breaks the graph even when all its body does is warn (HF's "right
padding detected", PPO's "approx_kl over target") or raise (a loss that is not finite). The
model's outputs never depend on such a body, so the check can leave the graph without
changing them:

- ``guard a check that reports``: ``if <tensor test>: logger.warning(...)`` - a body of
  prints, logging and warnings calls, no ``else`` - runs in eager code only: the whole ``if``
  under ``if not torch.compiler.is_compiling():`` (the check itself is skipped there too).
- ``check as an assert``: ``if <tensor test>: raise E("...")`` (an f-string message keeps its
  words, the values named in braces) - no ``else`` - becomes torch's async assert of
  ``torch.logical_not(<test>)`` with the message, which Dynamo traces into the graph: the check
  stays, and a failed one raises RuntimeError in eager and compiled code alike (asynchronously
  on a GPU), with the same words; verified only where ``E`` is RuntimeError (or Exception).

Text only: no torch import.
"""

from __future__ import annotations

import ast

from dynscope._capture.fix.branches import narrowed, tensor_test, tensor_tested, where
from dynscope._capture.fix.statements import Made, Text
from dynscope._torch.spelled import ASYNC_ASSERT

__all__ = ["ALWAYS", "ASSERT", "ASSERT_MESSAGE", "GUARD_CHECK", "REPORTING_CALLS", "asserted", "assert_message", "called_name", "guard_dropped", "guarded_check",
           "silenced"]

GUARD_CHECK = "guard a check that reports"
ALWAYS = "test dropped, the body always run"
ASSERT = "check as an assert"

# What a statement calls to report: print, logging's methods, warnings.warn, transformers'
# logger.warning_once / info_once.
REPORTING_CALLS = frozenset({"print", "warn", "debug", "info", "warning", "error", "critical", "exception", "log",
                             "fatal", "warning_once", "info_once"})


def called_name(call: ast.expr) -> str:
    """The name a call calls (``f(...)`` -> f, ``x.f(...)`` -> f); "" when not a call."""
    if not isinstance(call, ast.Call):
        return ""
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _reports(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and called_name(stmt.value) in REPORTING_CALLS


def silenced(reports: list[ast.stmt]) -> tuple[tuple[int, bool], ...]:
    """Each report's line and whether it is a ``warnings.warn`` (a warning the run issued is not
    among what the verifier hears, so it is known by its call)."""
    def warning(stmt: ast.stmt) -> bool:
        f = stmt.value.func if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) else None
        return (isinstance(f, ast.Name) and f.id == "warn") or (
            isinstance(f, ast.Attribute) and f.attr == "warn" and isinstance(f.value, ast.Name) and f.value.id == "warnings")
    return tuple((s.lineno, warning(s)) for s in reports)


def guarded_check(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <test>: <reports only>`` as the same ``if`` under ``is_compiling()``; a body that
    reports first and then assigns (``warnings.warn(...)`` then ``std = std.clamp(min=eps)``)
    keeps its reports so and makes its assignments a ``torch.where`` on the test. Verified only
    where the run made the report (and it said nothing a handler or the terminal got: a level
    that drops the record): a report never made cannot show it is kept under compile."""
    if not isinstance(stmt, ast.If) or stmt.orelse or not stmt.body or not _reports(stmt.body[0]):
        return None
    k = next((i for i, s in enumerate(stmt.body) if not _reports(s)), len(stmt.body))
    reports, rest = stmt.body[:k], stmt.body[k:]
    if not rest:
        own = text.statement_lines(stmt)
        return Made(["if not torch.compiler.is_compiling():", *(text.unit + ln for ln in own)], GUARD_CHECK, (
            "the check only reports: it and its report run in eager code only, and under torch.compile neither "
            "runs (the program's outputs do not depend on it)"), silenced=silenced(reports))
    made = where(narrowed(stmt, stmt.test, rest), text)
    if made is None:
        return None
    lines, _, note = made
    test = text.of(stmt.test)
    guarded = [f"if {test}:", *(text.unit + ln for s in reports for ln in text.statement_lines(s))]
    return Made(["if not torch.compiler.is_compiling():", *(text.unit + ln for ln in guarded), *lines], GUARD_CHECK, (
        "the report runs in eager code only (under torch.compile it does not), and what the branch assigns is a "
        f"torch.where on its test: {note}"), silenced=silenced(reports))


_VALUED = "the message names the values it showed (in braces) instead of showing them"


def _constant_message(node: ast.expr) -> tuple[str, str] | None:
    """(a constant message, what was given up for it: "" or :data:`_VALUED`) for a string or an
    f-string (the values it formats named in braces: "NaN at timestep {timestep}"); None for a
    message made otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, ""
    if isinstance(node, ast.JoinedStr):
        return "".join(str(p.value) if isinstance(p, ast.Constant) else "{" + ast.unparse(p.value) + "}"
                       for p in node.values if isinstance(p, (ast.Constant, ast.FormattedValue))), _VALUED
    return None


ASSERT_MESSAGE = "assert message made a constant"


def assert_message(stmt: ast.stmt, text: Text) -> Made | None:
    """``assert <tensor test>, f"... {v} ..."`` as the same assert with a constant message, the
    values named in braces: Dynamo keeps an assert on a tensor in the graph only when its message
    is a constant (EDM's ``assert masked_max_abs_value < 1e-5, f"Error {masked_max_abs_value} too high"``)."""
    if not (isinstance(stmt, ast.Assert) and isinstance(stmt.msg, ast.JoinedStr)) or not tensor_tested(stmt):
        return None
    said = _constant_message(stmt.msg)
    if said is None:
        return None
    return Made([f"assert {text.of(stmt.test)}, {said[0]!r}"], ASSERT_MESSAGE, (
        f"the check stays in the graph: on data that fails it the program still stops, but {_VALUED}, and as "
        "RuntimeError (compiled; asynchronously on a GPU) instead of AssertionError"))


def asserted(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <test>: raise E(msg)`` as ``torch._assert_async(torch.logical_not(<test>), msg)``: the same
    exception in eager and compiled code (RuntimeError), so verified only where ``E`` is one a
    caller catching it still catches; else proposed, the exception named."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse and len(stmt.body) == 1
            and isinstance(stmt.body[0], ast.Raise) and stmt.body[0].exc is not None):
        return None
    test = tensor_test(stmt.test)
    if test is None:
        return None
    exc = stmt.body[0].exc
    args = exc.args if isinstance(exc, ast.Call) else []
    if len(args) > 1 or (isinstance(exc, ast.Call) and exc.keywords):
        return None
    message, valued = f"{ast.unparse(stmt.test)} held", ""
    if args:
        said = _constant_message(args[0])
        if said is None:
            return None  # a message made otherwise (a call, a concatenation) is left as it is
        message, valued = said
    kind = called_name(exc) or ast.unparse(exc)
    same = kind in _RUNTIME
    return Made([f"{ASYNC_ASSERT}(torch.logical_not({test}), {message!r})"], ASSERT, (
        "the check stays in the graph: on data that fails it the program still stops, with the same words, as "
        "RuntimeError (eager and compiled; asynchronously on a GPU, at the next synchronisation)"
        + ("" if same else f" instead of {kind}: code that catches {kind} no longer does")
        + (f"; {valued}" if valued else "")),
        unchecked="" if same else (
            f"a failed check would raise RuntimeError instead of {kind}: whether code catches {kind} is behaviour "
            "no run on passing data shows, so the patch is proposed (keep the raise if a caller catches it)"))


# The exceptions a caller catching them still catches as the async assert's RuntimeError.
_RUNTIME = {"RuntimeError", "Exception", "BaseException"}


def guard_dropped(stmt: ast.stmt, text: Text) -> Made | None:
    """``if <tensor test>: <body>`` (no ``else``; no exit, no report alone) as the body alone,
    run every time: a reset of the rows that are done, a masked update, which change nothing
    when the test is false. Verified only where the run skipped the body at least once (the
    test's line ran more often than the body's), the outputs then showing it changed nothing."""
    if not isinstance(stmt, ast.If) or stmt.orelse or not tensor_tested(stmt):
        return None
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return, ast.Yield, ast.YieldFrom, ast.Raise))
           for s in stmt.body for n in ast.walk(s)):
        return None
    if all(isinstance(s, ast.Expr) and called_name(s.value) in REPORTING_CALLS for s in stmt.body):
        return None  # a report under a test: guarded_check's (run always, it would say more)
    return Made(text.body_lines(stmt.body), ALWAYS, (
        "the body changes nothing when the test is false (shown on the calls where it was: verified only when the "
        "run skipped it at least once); it runs every time, at its cost"), skipped=(stmt.lineno, stmt.body[0].lineno))
