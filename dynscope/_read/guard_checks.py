"""Every guard that failed, not only the first: each earlier cache entry of the entry frame
checked against the inputs of the call that recompiled.

PyTorch checks each earlier cache entry of a frame against the new call and logs, per entry,
the first guard that failed (``recompile_reasons``; pytorch#147428 asks for all of them).
A capture that knows its calls (report()) describes each call's inputs as plain data
(``dynscope._capture.guard_check.describe_call``); here, for the function every call enters,
each earlier entry's guards are checked on those descriptions: dtype, device, requires_grad,
sizes and strides of each tensor, the length of each sequence, and the value of each Python
scalar the entry was specialised on. Each mismatch is a ``GuardFailure`` marked
``source="dynscope"``; PyTorch's own are kept beside them. No torch: descriptions and the
report's guards are data, and ``build_report`` takes them as one of its inputs.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from dynscope._model import Cause, GuardFailure
from dynscope._model import causes as k
from dynscope._model.compile_ids import compile_id, compile_number, frame_of
from dynscope._torch.shape_text import size_terms, source_words, tensor_guard, value_guard

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from dynscope._model import Guard, Report
    from dynscope._torch.trace import TraceEvent

__all__ = ["CallsMade", "Described", "entry_checks", "with_all_failures"]

#: One input as a call brought it: ("tensor", dtype, device, requires_grad, sizes, strides),
#: ("value", repr), ("len", n) or ("other", type name).
Described = tuple[Any, ...]


@dataclass(frozen=True)
class CallsMade:
    """The calls a capture made, for its guard checks: for each call, how many trace events had
    arrived before it, and its inputs described (guard source -> ``Described``)."""

    starts: tuple[int, ...]
    values: tuple[Mapping[str, Described], ...]


def _tensor_failures(entry: str, name: str, guard: dict[str, Any], now: Described) -> list[GuardFailure]:
    """Every property of a TENSOR_MATCH guard the tensor the call brings fails."""
    _, dtype, _device, requires_grad, sizes, strides = now
    out: list[GuardFailure] = []

    def fail(what: str, kind: str, then: object, came: object, dim: str = "", said: bool = True) -> None:
        # ``said``: the values go into the cause's words too (requires_grad's do not).
        cause = Cause(kind, name, dim, str(then) if said else "", str(came) if said else "", checked=True)
        out.append(GuardFailure(entry, f"tensor '{name}' {what}", cause, str(then), str(came), "dynscope"))

    if guard.get("dtype") and guard["dtype"] != dtype:
        fail("dtype mismatch", k.DTYPE, guard["dtype"].removeprefix("torch."), dtype.removeprefix("torch."))
    if "requires_grad" in guard and guard["requires_grad"] != requires_grad:
        fail("requires_grad mismatch", k.REQUIRES_GRAD, guard["requires_grad"], requires_grad, said=False)
    want = guard.get("size")
    if want is not None and len(want) != len(sizes):
        fail("rank mismatch", k.RANK, len(want), len(sizes))
        return out
    for i, (a, b) in enumerate(zip(want or (), sizes, strict=False)):
        if a is not None and a != b:
            fail(f"size mismatch at index {i}", k.SIZE, a, b, str(i))
    stride = guard.get("stride")
    if stride is not None and len(stride) == len(strides):
        for i, (a, b) in enumerate(zip(stride, strides, strict=True)):
            if a is not None and a != b:
                fail(f"stride mismatch at index {i}", k.STRIDE, a, b, str(i))
    return out


def entry_checks(guards: Iterable[Guard], entry: str, values: Mapping[str, Described]) -> list[GuardFailure] | None:
    """The guards of cache entry ``entry`` (``guards``: that entry's) that the call's inputs
    fail; None when none of its input guards could be checked (they name nothing the call brings)."""
    out: list[GuardFailure] = []
    checked = False
    for g in guards:
        if g.source not in values:
            continue
        now = values[g.source]
        if g.kind == "TENSOR_MATCH" and now[0] == "tensor":
            parsed = tensor_guard(g.detail)
            if parsed:
                checked = True
                out.extend(_tensor_failures(entry, source_words(g.source), parsed, now))
        elif g.kind == "LENGTH_CHECK" and now[0] == "len":
            then = g.detail.rsplit("==", 1)[-1].strip()
            checked = True
            if then != str(now[1]):
                cause = Cause(k.LENGTH, source_words(g.source), then=then, now=str(now[1]), checked=True)
                out.append(GuardFailure(entry, g.detail, cause, then, str(now[1]), "dynscope"))
        elif g.kind == "EQUALS_MATCH" and now[0] == "value":
            then = g.detail.rsplit("==", 1)[-1].strip()
            checked = True
            if then != now[1]:
                cause = Cause(k.VALUE, source_words(g.source), then=then, now=now[1], checked=True)
                out.append(GuardFailure(entry, g.detail, cause, then, now[1], "dynscope"))
    return out if checked else None


def _with_now(failure: GuardFailure, values: Mapping[str, Described]) -> GuardFailure:
    """PyTorch's failure of a guard on a Python value ("pos == 1"), a length ("len(xs) == 2")
    or one input size ("2 <= x.size()[0] <= 5"), words that say what the entry was compiled
    for, not what came: with what the call brought."""
    if failure.now:
        return failure
    value = value_guard(failure.guard)
    if value is not None:
        name, length = value
        now = values.get(f"L['{name}']")
        if now is not None and now[0] == ("len" if length else "value"):
            return replace(failure, now=str(now[1]))
        return failure
    sizes = size_terms(failure.guard)
    if len(sizes) == 1:
        ((name, i),) = sizes
        now = values.get(f"L['{name}']")
        if now is not None and now[0] == "tensor" and i < len(now[4]):
            return replace(failure, now=f"{name}.size({i}) = {now[4][i]}")
    return failure


def with_all_failures(rep: Report, events: list[TraceEvent], calls: CallsMade) -> Report:
    """``rep`` with each recompile of the entry frame carrying every guard its earlier
    entries failed on the call that recompiled (besides PyTorch's first per entry).

    Args:
        rep: the report built from ``events``.
        events: the trace events of the capture, in order (PyTorch's compile ids).
        calls: the calls made: where each started among the events, and its inputs described.
    """
    call_starts, call_values = list(calls.starts), calls.values
    if not rep.frames or not call_values:
        return rep
    entry_frame = frame_of(rep.frames[0].compile_id)
    raw_to_new = {f.torch_compile_id: f.compile_id for f in rep.frames}
    by_entry: dict[str, list[Guard]] = {}
    for g in rep.guards:
        by_entry.setdefault(g.compile_id, []).append(g)
    call_of: dict[str, int] = {}
    for index, ev in enumerate(events):
        # the call a compile ran in: that of its first record (every record of a compile is
        # logged inside the call that compiled it, but its backward's, which come later)
        if ev.compile_id in raw_to_new:
            call_of.setdefault(raw_to_new[ev.compile_id], bisect.bisect_right(call_starts, index) - 1)
    recompiles = []
    for r in rep.recompiles:
        frame, number = frame_of(r.compile_id), compile_number(r.compile_id)
        call = call_of.get(r.compile_id, -1)
        if frame != entry_frame or number is None or not 0 <= call < len(call_values):
            recompiles.append(r)
            continue
        found: list[GuardFailure] = []
        logged = {f.entry: f for f in r.failures}
        for n in range(number - 1, -1, -1):  # newest entry first, as PyTorch lists them
            entry = compile_id(frame, n)
            mine = entry_checks(by_entry.get(entry, ()), entry, call_values[call])
            if mine is None:
                found.extend(_with_now(f, call_values[call]) for f in r.failures if f.entry == entry)
                continue
            # PyTorch's failure of this entry stays first when dynscope's check did not find it
            # (a guard kind dynscope does not check).
            pytorch = logged.get(entry)
            if pytorch is not None and not any(m.then == pytorch.then and pytorch.now in ("", m.now) for m in mine):
                found.append(_with_now(pytorch, call_values[call]))
            found.extend(mine)
        recompiles.append(replace(r, failures=tuple(found) or r.failures))
    return replace(rep, recompiles=tuple(recompiles))
