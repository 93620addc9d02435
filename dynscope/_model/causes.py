"""Why a guard failed, as fields: what changed (kind), on what (name, dim), from what to what.

A recompile's causes and each failed guard's explanation are ``Cause`` records, never
sentences: code that decides something from a cause (advise's remedies, the fixes that
name the user's line, rank comparison, recompile groups) reads ``kind`` and ``name``. The
words are made in one place, ``dynscope._render.causes``, reached through the output
shortcuts (``Cause.explained``, ``Cause.what_changed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._model.base import _brief
from dynscope._model.display import CauseShortcuts

__all__ = ["CAUSE_KINDS", "Cause", "StateChange"]

# -- the closed set of kinds ---------------------------------------------------------------

SIZE = "size"  # an input's size in one dim (dim)
RANK = "rank"  # an input's number of dims
STRIDE = "stride"  # an input's stride in one dim (dim)
CONTIGUOUS = "contiguous"  # an input compiled contiguous came with other strides (dim; then: the guarded stride)
DTYPE = "dtype"
DEVICE = "device"
REQUIRES_GRAD = "requires_grad"
VALUE = "value"  # a Python value the graph was specialised on (``n == 1``)
LENGTH = "length"  # the number of items of a list, tuple or dict
KWARGS = "kwargs"  # the set of keyword arguments passed through ``**kwargs``
TYPE = "type"  # a value's type
OBJECT = "object"  # a different object (module, function, tensor) than when compiled
GLOBAL_STATE = "global_state"  # grad mode, autocast...: ``states`` says which, when known
STATE = "state"  # one global state (name: PyTorch's, "grad_mode", "autocast(cpu)_enabled")
GRAD_MODE = "grad_mode"  # a guard on grad mode that names no state
GUARD = "guard"  # no rule reads the guard: ``guard`` holds it
NO_REASON = "no_reason"  # PyTorch gave no reason dynscope could read
SAID = "said"  # a report saved before causes were fields: ``said`` holds its words

#: Every kind a Cause can have.
CAUSE_KINDS = frozenset({
    SIZE, RANK, STRIDE, CONTIGUOUS, DTYPE, DEVICE, REQUIRES_GRAD, VALUE, LENGTH, KWARGS, TYPE, OBJECT,
    GLOBAL_STATE, STATE, GRAD_MODE, GUARD, NO_REASON, SAID,
})


@dataclass(frozen=True)
class StateChange:
    """One global state a GLOBAL_STATE guard names, with its values as JSON ("true", "4");
    "" where the compile's guards do not hold it."""

    state: str  # PyTorch's name ("grad_mode", "autocast(cpu)_enabled")
    then: str = ""  # in the compile the guard failed against
    now: str = ""  # in the new compile


@dataclass(frozen=True)
class Cause(CauseShortcuts):
    """What changed between the compile a guard belongs to and the call that failed it."""

    kind: str  # one of CAUSE_KINDS
    name: str = ""  # the input, value or state as the user calls it ("x", "n", "self.fc", "grad_mode")
    dim: str = ""  # the dimension, for a size or a stride ("0")
    then: str = ""  # what the compile was made for, where the guard says ("4", "Float")
    now: str = ""  # what the call brought, where known ("6")
    guard: str = ""  # the failed guard's expression, for a guard no rule reads
    code: str = ""  # the user code PyTorch names for the guard
    at: str = ""  # where that code is ("model.py:12 in forward")
    # Found by dynscope's own check of the call's inputs (guard_check), not read from PyTorch's words.
    checked: bool = False
    states: tuple[StateChange, ...] = ()  # GLOBAL_STATE: each state, when the compiles' states are known
    said: str = ""  # SAID: the words a report saved before causes were fields carried

    @classmethod
    def _from_words(cls, words: str) -> Cause:
        """A cause an older report saved as words (the codec's reading of a string)."""
        return cls(SAID, said=words)

    def __repr__(self) -> str:
        where = self.said or self.guard or " ".join(p for p in (self.name, self.dim and f"dim {self.dim}") if p)
        return _brief("Cause", f"{self.kind} {where}".strip())
