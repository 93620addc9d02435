"""The words of a cause and of its fix: the one place a ``Cause`` or a ``RecompileFix``
becomes a sentence.

Two sentences per cause: :func:`explained` says the failed guard plainly, with the values
where known ("input x changed size in dim 0: compiled for 4, called with 6"), and
:func:`what_changed` says what recompiles are grouped by ("size of input x changed (dim 0)").
One per fix: :func:`fix_words` says what to do about a change. Text, HTML, the card, DOT
and the model's shortcuts all say a cause or a fix through these.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from dynscope._model import causes as k

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model.advice import Target
    from dynscope._model.causes import Cause, RecompileFix, StateChange

__all__ = ["explained", "fix_words", "state_word", "what_changed"]

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


# -- what to do about a change -------------------------------------------------------------

def _contiguous_copy(f: RecompileFix) -> str:
    # Measured on torch 2.13 (tests/capture/test_advice_real.py): a contiguous copy removes the
    # recompile; x.contiguous() returns a batch-of-1 slice as it is (PyTorch calls a tensor
    # contiguous whatever the stride of a size-1 dim), and neither mark_dynamic nor
    # dynamic=True removes a stride recompile.
    n = f.name
    return (f"pass a contiguous copy: {n}.contiguous() before the call, or, where a dim has size 1 (a "
            f"batch of one: PyTorch calls {n}[:, -n:] contiguous then and keeps its strides), "
            f"{n}.clone(memory_format=torch.contiguous_format)")


def _line(f: RecompileFix) -> str:
    """The user's line a fix names: "model.py:12 `code` (inside linear (linear.py:134))"."""
    return (f.at or "your code") + (f" `{f.code}`" if f.code else "") + (f" (inside {f.via})" if f.via else "")


def _fixed_by_code(f: RecompileFix) -> str:
    head = f"{f.size} was made dynamic, then fixed to {f.value} by {_line(f)} (compile {f.compile_id}): "
    if f.kind == k.VALUE_FIXED_BY_CODE:
        return head + (
            f"dynamic=True cannot keep it dynamic, so every value compiles anew. Make that line not read {f.name} "
            f"as a Python int (pass it as a tensor and use tensor indexing such as index_copy_ / narrow), or "
            f"keep {f.name} to a few values")
    return head + (
        f"mark_dynamic({f.name}, {f.dim or 0}) fails there (ConstraintViolationError) and dynamic=True cannot "
        f"keep it dynamic. Make that line not depend on {f.size} (a tensor op instead of a Python loop or "
        f"branch on it), or pad {f.name} to a few fixed sizes")


_FIXES: dict[str, Callable[[RecompileFix], str]] = {
    k.MARK_DYNAMIC: lambda f: (
        "sizes that change between calls: mark the dimension dynamic before the first call "
        f"(torch._dynamo.mark_dynamic({f.name or 'x'}, {f.dim or 'dim'})) or compile with "
        "torch.compile(..., dynamic=True)"),
    k.RESUME_VALUE: lambda f: (
        f"the size of a value Dynamo passes to a resume function changed ({f.name}, not an input you can "
        "mark): mark the input of the compiled function it is computed from, or see where sizes were fixed"),
    k.CONTIGUOUS_COPY: _contiguous_copy,
    k.ONE_DTYPE: lambda f: "cast the input to one dtype before the call",
    k.ONE_DEVICE: lambda f: "keep the input on one device",
    k.SAME_REQUIRES_GRAD: lambda f: (
        "call with a consistent requires_grad: the same for every call (detach() inputs for "
        "inference), or compile the training and the inference function separately"),
    k.SCALAR_AS_TENSOR: lambda f: (
        "avoid Python scalars that change between calls: pass the value as a tensor "
        "(torch.tensor(value)) or mark it dynamic (torch.compile(..., dynamic=True))"),
    k.SAME_KWARGS: lambda f: "pass the same keyword arguments every call (the optional ones too, as None when unused)",
    k.SAME_LENGTH: lambda f: "keep the number of items the same between calls, or pass one stacked tensor",
    k.SAME_TYPE: lambda f: "pass a value of the same type each call",
    k.SAME_OBJECT: lambda f: "reuse the same object (module, function, tensor) between calls",
    k.SAME_STATE: lambda f: (
        "call under the same grad mode and autocast every time (enter torch.no_grad() / "
        "torch.autocast outside the compiled function consistently), or compile one function per state"),
    k.SEE_GUARD: lambda f: "see the guard: the code depends on this value",
    k.SIZE_FIXED_BY_CODE: _fixed_by_code,
    k.VALUE_FIXED_BY_CODE: _fixed_by_code,
    k.BRANCHED_ON: lambda f: (
        f"{f.size} is branched on at {f.at} `{f.code}` (the entry guards {f.value}): each side of the "
        "branch compiles once, which no mark removes. For one graph, make the branch a tensor op "
        "(torch.where, torch.cond)"),
    k.FIX_SAID: lambda f: f.said,
}


def _library(f: RecompileFix, fix: str) -> str:
    """The fix of a recompile inside a library's own code: the library calls its function
    differently between calls (Hugging Face's ``generate``: the prompt first, then one token
    a step), which the user's code does not cause; what the user can do, if anything."""
    lib = f.library
    said = (
        f"{lib}'s own recompile: {lib}'s code called {f.function or 'this function'} differently "
        "this time (generate's first step takes the whole prompt, later steps one token; a decorator "
        "makes a new wrapper), which your code does not cause; expected, nothing to change unless it "
        "recompiles on every call"
    )
    return f"{said} (then: {fix})" if fix else said


def fix_words(f: RecompileFix) -> str:
    """What to do about a change, in words; a library's own recompile says so first."""
    say = _FIXES.get(f.kind)
    fix = say(f) if say is not None else f.said or f.kind
    return _library(f, fix) if f.library else fix


def target_words(t: Target) -> str:
    """What a remedy addresses, in words: a break site (with its category where the target
    names it), a recompiled function and what changed on it, a size a line fixes, a block, or
    "the program"."""
    if t.said:
        return t.said
    if t.size:
        return f"{t.size} {'guarded' if t.branched else 'fixed'} at {t.site}"
    if t.site:
        return f"{t.site}: {t.category}" if t.category else t.site
    if t.frame:
        said = [what_changed(c) for c in t.changes] or [explained(c) for c in t.failed] or list(t.raw)
        return f"{t.frame}: " + "; ".join(said)
    return t.block or "the program"
