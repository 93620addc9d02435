"""The words of a cause: the one place a ``Cause`` becomes a sentence.

Two sentences per cause: :func:`explained` says the failed guard plainly, with the values
where known ("input x changed size in dim 0: compiled for 4, called with 6"), and
:func:`what_changed` says what recompiles are grouped by ("size of input x changed (dim 0)").
Text, HTML, the card, DOT and the model's shortcuts all say a cause through these two.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from dynscope._model import causes as k

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model.causes import Cause, StateChange

__all__ = ["explained", "state_word", "what_changed"]

_STATE_WORDS = {
    "grad_mode": "grad mode",
    "torch_function": "torch function mode",
    "deterministic_algorithms": "deterministic algorithms",
    "num_threads": "thread count",
    "default_dtype": "default dtype",
    "allow_tf32": "TF32",
    "autocast_cache_enabled": "autocast cache",
}
_AUTOCAST = re.compile(r"autocast\((?P<d>[^)]+)\)_(?P<what>enabled|dtype)")


def state_word(state: str) -> str:
    """A global state as users know it: "grad_mode" -> "grad mode", "autocast(cpu)_enabled"
    -> "autocast on cpu"."""
    m = _AUTOCAST.fullmatch(state)
    if m:
        return f"autocast on {m['d']}" + (" dtype" if m["what"] == "dtype" else "")
    return _STATE_WORDS.get(state, state)


def _said(state: str, raw: str) -> str:
    value = json.loads(raw)
    if state == "grad_mode" and isinstance(value, bool):
        return "enabled" if value else "disabled (no_grad)"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _state_change(s: StateChange) -> str:
    word = state_word(s.state)
    if s.then and s.now and s.then != s.now:
        return f"{word} {_said(s.state, s.then)} -> {_said(s.state, s.now)}"
    return f"{word} changed"


def _strides(c: Cause) -> str:
    n, i, a, b = c.name, c.dim, c.then, c.now
    if c.checked:
        return f"input {n} changed strides (dim {i}): compiled for stride {a}, called with {b}"
    return (f"input {n} changed strides (dim {i}: compiled for stride {a}, called with {b}): a slice such as "
            f"{n}[:, -n:] or a transpose made it non-contiguous")


def _value(c: Cause) -> str:
    if c.now:
        return f"Python value {c.name} changed: compiled for {c.then}, called with {c.now}"
    return f"Python value {c.name} changed: the graph was specialised to {c.name} == {c.then}"


def _global(c: Cause) -> str:
    if not c.states:
        return "global torch state changed (grad mode, autocast, default dtype or thread count)"
    return "global state changed: " + "; ".join(_state_change(s) for s in c.states)


def _guard(c: Cause) -> str:
    return f"a value the code depends on changed: guard `{c.guard}` failed" if c.code or c.at else c.guard


_EXPLAINED: dict[str, Callable[[Cause], str]] = {
    k.SIZE: lambda c: f"input {c.name} changed size in dim {c.dim}: compiled for {c.then}, called with {c.now}",
    k.STRIDE: _strides,
    k.CONTIGUOUS: lambda c: (
        f"input {c.name} changed strides: compiled for a contiguous {c.name} ({c.name}.stride()[{c.dim}] == "
        f"{c.then}), called with one that is not (a slice such as {c.name}[:, -n:] or a transpose)"),
    k.DTYPE: lambda c: f"input {c.name} changed dtype: compiled for {c.then}, called with {c.now}",
    k.DEVICE: lambda c: f"input {c.name} moved device: compiled for {c.then}, called with {c.now}",
    k.REQUIRES_GRAD: lambda c: f"input {c.name} changed requires_grad"
    + (f" (compiled for requires_grad={c.then})" if c.then else ""),
    k.RANK: lambda c: f"input {c.name} changed number of dims: compiled for {c.then}, called with {c.now}",
    k.VALUE: _value,
    k.LENGTH: lambda c: f"length of {c.name} changed: compiled for {c.then} items"
    + (f", called with {c.now}" if c.now else ""),
    k.TYPE: lambda c: f"{c.name} changed type",
    k.OBJECT: lambda c: f"{c.name} is a different object than when compiled",
    k.GLOBAL_STATE: _global,
    k.GRAD_MODE: lambda c: "grad mode changed (torch.no_grad / enable_grad)",
    k.GUARD: _guard,
    k.NO_REASON: lambda c: "PyTorch gave no reason this dynscope could read",
    k.SAID: lambda c: c.said,
}

_CHANGED: dict[str, Callable[[Cause], str]] = {
    k.SIZE: lambda c: f"size of input {c.name} changed (dim {c.dim})",
    k.RANK: lambda c: f"number of dims of input {c.name} changed",
    k.STRIDE: lambda c: f"strides of input {c.name} changed (dim {c.dim})",
    k.CONTIGUOUS: lambda c: f"strides of input {c.name} changed (dim {c.dim})",
    k.DTYPE: lambda c: f"dtype of input {c.name} changed",
    k.DEVICE: lambda c: f"device of input {c.name} changed",
    k.REQUIRES_GRAD: lambda c: f"requires_grad changed on input {c.name}",
    k.VALUE: lambda c: f"Python value {c.name} changed",
    k.KWARGS: lambda c: "the keyword arguments passed changed",
    k.LENGTH: lambda c: f"length of {c.name} changed",
    k.TYPE: lambda c: f"type of {c.name} changed",
    k.OBJECT: lambda c: f"{c.name} is a different object",
    k.STATE: lambda c: f"{state_word(c.name)} changed",
    k.GUARD: lambda c: f"guard `{c.guard}` failed",
}


def _origin(c: Cause) -> str:
    """Where PyTorch says the guard came from: " (from `code` at file:line)"."""
    if c.code and c.at:
        return f" (from `{c.code}` at {c.at})"
    if c.code:
        return f" (from `{c.code}`)"
    return f" (at {c.at})" if c.at else ""


def explained(c: Cause) -> str:
    """The failed guard said plainly, with the values where the guard (or dynscope's own
    check) says them, and the user code PyTorch names for it."""
    say = _EXPLAINED.get(c.kind)
    if say is None:  # a kind only recompile groups use (kwargs, one state): what changed
        return what_changed(c)
    return say(c) + _origin(c)


def what_changed(c: Cause) -> str:
    """What changed, without the values that differ from one recompile to the next."""
    say = _CHANGED.get(c.kind)
    if say is None:  # a kind without a shorter form (global state, no reason, older words)
        return explained(c) if c.kind in _EXPLAINED else c.said or c.kind
    return say(c)
