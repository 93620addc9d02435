"""Why a guard failed, as fields: what changed (kind), on what (name, dim), from what to what;
and what to do about it (``RecompileFix``: kind and arguments).

A recompile's causes and each failed guard's explanation are ``Cause`` records, never
sentences: code that decides something from a cause (advise's remedies, the fixes that
name the user's line, rank comparison, recompile groups) reads ``kind`` and ``name``. A
recompile's fixes are ``RecompileFix`` records, each naming the change it answers. The
words are made in one place, ``dynscope._render.causes``, reached through the output
shortcuts (``Cause.explained``, ``Cause.what_changed``, ``RecompileFix.words``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._model.base import _brief
from dynscope._model.display import CauseShortcuts, RecompileFixShortcuts

__all__ = ["CAUSE_KINDS", "FIX_KINDS", "Cause", "RecompileFix", "StateChange"]

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


# -- what to do about a change: the closed set of fix kinds ---------------------------------

MARK_DYNAMIC = "mark_dynamic"  # sizes change: mark the dim dynamic (name, dim; "" for the general form)
RESUME_VALUE = "resume_value"  # the size of a value Dynamo passes to a resume function changed (name)
CONTIGUOUS_COPY = "contiguous_copy"  # strides changed: pass a contiguous copy of the input (name)
ONE_DTYPE = "one_dtype"  # cast the input to one dtype
ONE_DEVICE = "one_device"  # keep the input on one device
SAME_REQUIRES_GRAD = "same_requires_grad"  # call with a consistent requires_grad
SCALAR_AS_TENSOR = "scalar_as_tensor"  # a Python scalar changes: pass it as a tensor
SAME_KWARGS = "same_kwargs"  # pass the same keyword arguments every call
SAME_LENGTH = "same_length"  # keep the number of items the same
SAME_TYPE = "same_type"  # pass a value of the same type
SAME_OBJECT = "same_object"  # reuse the same object
SAME_STATE = "same_state"  # call under the same grad mode and autocast
SEE_GUARD = "see_guard"  # no rule reads the guard: read it
# The user's line fixed a size (name, dim, size) or a Python int (name, size) that PyTorch had
# made dynamic, to ``value``, at ``at``: no mark helps, that line has to change.
SIZE_FIXED_BY_CODE = "size_fixed_by_code"
VALUE_FIXED_BY_CODE = "value_fixed_by_code"
BRANCHED_ON = "branched_on"  # the user's line branches on a size (size, at, code; value: the entry's guard)
FIX_SAID = "said"  # a report saved before fixes were records: ``said`` holds its words

#: Every kind a RecompileFix can have.
FIX_KINDS = frozenset({
    MARK_DYNAMIC, RESUME_VALUE, CONTIGUOUS_COPY, ONE_DTYPE, ONE_DEVICE, SAME_REQUIRES_GRAD, SCALAR_AS_TENSOR,
    SAME_KWARGS, SAME_LENGTH, SAME_TYPE, SAME_OBJECT, SAME_STATE, SEE_GUARD, SIZE_FIXED_BY_CODE,
    VALUE_FIXED_BY_CODE, BRANCHED_ON, FIX_SAID,
})


@dataclass(frozen=True)
class RecompileFix(RecompileFixShortcuts):
    """What to do about one change that made a function recompile, as a kind and its
    arguments (named apart from ``dynscope.fix``, which patches graph breaks)."""

    kind: str  # one of FIX_KINDS
    # What changed, without the values that differ from one recompile to the next (requires_grad
    # of input x): what recompiles are grouped by (``Report.recompile_groups``).
    change: Cause = Cause(NO_REASON)
    name: str = ""  # the input or Python value to act on ("x", "n")
    dim: str = ""  # its dimension, where the fix names one ("0")
    size: str = ""  # the size or value as the user writes it ("x.size(0)", "n"), for a fix that names a line
    value: str = ""  # what that line fixed it to ("5"), or the guard the entry holds (BRANCHED_ON)
    at: str = ""  # that line ("model.py:12"); "" where the records do not say
    code: str = ""  # its source
    via: str = ""  # the torch function it happened inside ("linear (linear.py:134)"), or ""
    compile_id: str = ""  # the compile that fixed the size
    # The installed package whose own code recompiles ("transformers") and its function called
    # differently: the user's code does not cause it, which the words say first; "" else.
    library: str = ""
    function: str = ""
    said: str = ""  # FIX_SAID: the words a report saved before fixes were records carried

    @classmethod
    def _from_words(cls, words: str) -> RecompileFix:
        """A fix an older report saved as words (the codec's reading of a string)."""
        return cls(FIX_SAID, said=words)

    def __repr__(self) -> str:
        where = self.said or " ".join(p for p in (self.name, self.dim and f"dim {self.dim}", self.at) if p)
        return _brief("RecompileFix", f"{self.kind} {where}".strip())
