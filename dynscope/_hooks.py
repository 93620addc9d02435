"""The guard every hook dynscope installs into a user's program runs in.

dynscope puts code of its own on the user's path: a line tracer, a recording backend and the
wrapper around each graph it returns, a backward-run hook, the compile-start/end callbacks, a
logging handler on PyTorch's trace. None of it may ever raise into the program: a bug of ours
(or a PyTorch object we did not expect, such as a code object holding a dict constant) must
cost what that hook measures, never the user's run.

So each hook is a :class:`Hook`. Its guarded work calls :meth:`Hook.check` first and catches
any ``Exception`` into :meth:`Hook.failed`, which turns the hook off for the rest of the
process's use of it and records what was lost. A capture reads the failures that happened
while it ran (:func:`mark`, :func:`since`) and adds them to its report as notes: what was
captured before the failure is kept, and the report says what is missing and why.

:func:`injected` makes named hooks fail on purpose (tests/capture/test_do_no_harm.py): every hook is
tried with a fault over real programs, whose outputs and exceptions must stay a plain
``torch.compile``'s. Torch-free: a leaf like ``_errors`` and ``_write``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

_T = TypeVar("_T")

__all__ = ["HOOKS", "Failure", "Hook", "InjectedFault", "injected", "mark", "since"]


class InjectedFault(RuntimeError):
    """Raised inside a hook that a test made fail (:func:`injected`)."""


@dataclass(frozen=True)
class Failure:
    """One hook that failed and turned itself off."""

    hook: str  # the hook's name, e.g. "line tracer"
    lost: str  # what the report lacks from here on
    error: str  # "Type: message" of what it raised

    @property
    def note(self) -> str:
        """The report's note: what failed, that the program was not affected, what is lost."""
        return (f"dynscope's {self.hook} failed ({self.error}) and turned itself off; your program ran on "
                f"unaffected, but {self.lost}. Please report this as a dynscope bug")


_lock = threading.Lock()
_failures: list[Failure] = []
_injected: set[str] = set()

#: Every hook's name and what is lost when it fails (tests/capture/test_do_no_harm.py tries each).
HOOKS: dict[str, str] = {}


class Hook:
    """One hook's guard (see the module docstring). ``off`` once it failed in this use."""

    def __init__(self, name: str) -> None:
        if name not in HOOKS:
            raise KeyError(f"unknown hook {name!r}; register it in dynscope._hooks.HOOKS")
        self.name = name
        self.off = False

    def check(self) -> None:
        """Raise :class:`InjectedFault` when a test asked this hook to fail."""
        if _injected and self.name in _injected:
            raise InjectedFault(f"fault injected into dynscope's {self.name}")

    def call(self, fn: Callable[..., _T], *args: Any, default: _T) -> _T:
        """``fn(*args)`` guarded: ``default`` once the hook is off or when ``fn`` raises (which
        turns the hook off)."""
        if self.off:
            return default
        try:
            self.check()
            return fn(*args)
        except Exception as err:  # noqa: BLE001 - never into the user's program
            self.failed(err)
            return default

    def failed(self, err: BaseException) -> None:
        """Turn the hook off and record the failure (once per hook)."""
        if self.off:
            return
        self.off = True
        text = " ".join(str(err).split())
        error = f"{type(err).__name__}: {text}" if text else type(err).__name__
        with _lock:
            _failures.append(Failure(self.name, HOOKS[self.name], error[:300]))


def _register(name: str, lost: str) -> None:
    HOOKS[name] = lost


_register("line tracer", "eager ops run after the failure are listed at their region's graph break, not their own line")
_register("trace collector", "PyTorch's trace records logged after the failure (breaks, recompiles, guards) are missing")
_register("recording backend", "graphs compiled after the failure are known from PyTorch's trace only (no live module, "
          "example inputs or run counts)")
_register("graph run counter", "graph runs after the failure are not counted, and their ops not told from eager ones")
_register("backward counter", "backward runs after the failure are not counted")
_register("compile callbacks", "ops run after the failure may include compile work, and lines are no longer marked")
_register("call description", "guards failed by later calls are not all listed")


def mark() -> int:
    """A position in the failures so far (taken when a capture starts)."""
    with _lock:
        return len(_failures)


def since(position: int) -> list[Failure]:
    """The failures recorded after ``position`` (:func:`mark`)."""
    with _lock:
        return list(_failures[position:])


@contextlib.contextmanager
def injected(*names: str) -> Iterator[None]:
    """Make the named hooks fail whenever they run, in the block (tests only)."""
    unknown = [n for n in names if n not in HOOKS]
    if unknown:
        raise KeyError(f"unknown hooks {unknown}; known: {sorted(HOOKS)}")
    with _lock:
        before = set(_injected)
        _injected.update(names)
    try:
        yield
    finally:
        with _lock:
            _injected.clear()
            _injected.update(before)
