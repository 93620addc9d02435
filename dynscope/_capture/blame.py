"""Who failed, when a call raises under report(): the model, PyTorch's compiler, or dynscope.

The same exception can be any of three parties' fault, and a user acts on the answer: a bug
in their model, a compiler crash to work around (``torch.compiler.disable`` on the function,
``suppress_errors``), or a dynscope bug to report. So the calls up to the one that raised
are rerun as the user would run them, on copies (the user's model, optimizer state and
inputs untouched): eagerly, and, when eager runs, under a plain ``torch.compile`` with the
same backend (in a Dynamo sandbox: the user's compiled code and PyTorch's state untouched).

- raises eagerly too: the model's ("model");
- runs eagerly, raises under a plain compile: the compiler's ("compiler");
- runs both ways: dynscope's ("dynscope");
- the copies cannot be made, or a rerun raised something else: not told ("").
"""

from __future__ import annotations

import functools
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.copies import deep_copy
from dynscope._capture.raised import raised_at, raised_function, what_raised

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model import Report

Call = tuple[tuple[Any, ...], dict[str, Any]]

MODEL, COMPILER, DYNSCOPE = "model", "compiler", "dynscope"


@dataclass(frozen=True)
class Blame:
    """Who failed (``party``: "model", "compiler", "dynscope" or "" when not told), where
    (``at``: "at file:line in function :: code" for the user's frame the error was raised in,
    or "compiling function at file:line" for the function PyTorch's compiler failed on) and
    that frame's function (``function``, "" when no frame of the user's is known)."""

    party: str
    at: str
    function: str = ""


def blame(model: Any, calls: list[Call], index: int, err: BaseException, backend: str | Callable[..., Any]) -> Blame:
    """Rerun ``calls[:index + 1]`` eagerly and under a plain torch.compile to tell whose ``err`` is."""
    at, function = raised_at(err), raised_function(err)
    try:
        subject, done = deep_copy(model), deep_copy(calls[: index + 1])
    except Exception:  # noqa: BLE001 - a model that cannot be copied: not told
        return Blame("", at, function)
    eager = _raised(functools.partial(_run, subject, done))
    if eager is not None:
        return Blame(MODEL if type(eager) is type(err) else "", at, function)
    try:
        subject, done = deep_copy(model), deep_copy(calls[: index + 1])
    except Exception:  # noqa: BLE001
        return Blame("", at, function)
    with _torch.DynamoSandbox(subject) as sandbox:
        compiled = torch.compile(subject, backend=backend)
        sandbox.own(compiled)
        plain = _raised(functools.partial(_run, compiled, done))
        del compiled
    if plain is None:
        return Blame(DYNSCOPE, at, function)
    return Blame(COMPILER if type(plain) is type(err) else "", at, function)


def _run(fn: Any, calls: list[Call]) -> None:
    for args, kwargs in calls:
        fn(*args, **kwargs)


def _raised(run: Callable[[], None]) -> BaseException | None:
    try:
        run()
    except Exception as err:  # noqa: BLE001 - what raised is the answer
        return err
    return None


def message(b: Blame, err: BaseException, index: int, count: int, rep: Report, backend_name: str) -> str:
    """The CaptureError's message: who failed, PyTorch's words, where, and what to do."""
    what = "".join(traceback.format_exception_only(type(err), err)).strip()
    at = f" ({b.at})" if b.at else ""
    kept = (f"What was captured before the failure is in err.report "
            f"({rep.graph_count} graphs, {rep.break_count} breaks).")
    if b.party == COMPILER:
        function = b.function or "the function"
        return (
            f"torch.compile failed during call {index} of {count}{at}: {what_raised(err)}\n"
            f"The program runs eagerly, and a plain torch.compile(backend={backend_name!r}) fails the same way: "
            f"PyTorch's compiler failed, not your model. Workarounds: wrap `{function}` in "
            "torch.compiler.disable (it then runs eagerly), or set torch._dynamo.config.suppress_errors = True "
            f"(Dynamo falls back to eager where a compile fails).\n{kept}"
        )
    if b.party == DYNSCOPE:
        return (
            f"dynscope failed during call {index} of {count}{at}: {what_raised(err)}\n"
            "The program runs eagerly and under a plain torch.compile: this is a dynscope bug; please report "
            f"it with this message.\n{kept}"
        )
    also = " (eagerly too, without torch.compile)" if b.party == MODEL else ""
    return f"the model raised during call {index} of {count}{also}{at}: {what}\n{kept}"
