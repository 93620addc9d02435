"""The program in the order it ran: which compiles come after which break, and which
compiles each break ended. The text summary and the program picture share this one order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._lexicon.wording import base_function, resume_site
from dynscope._model.compile_ids import frame_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model.report import Report

__all__ = ["break_hosts", "program_order"]


def program_order(rep: Report) -> list[tuple[list[list[str]], list[int]]]:
    """The program in execution order: steps of (frames, each as its compile ids with the
    first compile first; the indexes in ``rep.breaks`` of the breaks that end the step).

    A frame's graphs run when they are compiled, so frames are in the order of their first
    graph (graph ids are in compile order); a frame with no graph (an empty compile) where
    it was first compiled. A frame first compiled empty and given graphs only later (Hugging
    Face's ``prepare_inputs_for_generation``) stands where its graphs ran, not at the top. After a break, the resume functions Dynamo made at its line (one per
    branch of a data-dependent ``if``, compiled in whichever call took it) form one step.
    A break follows the step holding the last of the compiles that hit it
    (:func:`break_hosts`).
    """
    compiles: dict[str, list[str]] = {}
    for f in rep.frames:
        compiles.setdefault(frame_of(f.compile_id), []).append(f.compile_id)
    order = sorted(compiles, key=_ran_at(rep))
    function = {f.compile_id: f.function for f in rep.frames}
    frame_no = {cid: no for no, cids in compiles.items() for cid in cids}
    hosts = break_hosts(rep)
    after: dict[int, list[str]] = {
        i: [no for no in order if resume_site(function[compiles[no][0]]) == (base_function(b.function), b.lineno)]
        for i, b in enumerate(rep.breaks)
    }
    steps: list[tuple[list[list[str]], list[int]]] = []
    placed: set[str] = set()
    ended: set[int] = set()
    for no in order:
        if no in placed:
            continue
        group = next(([n for n in after[i] if n not in placed] for i in ended if no in after[i]), [no])
        placed.update(group)
        ends = [
            i for i in range(len(rep.breaks))
            if i not in ended and hosts[i] and all(frame_no[c] in placed for c in hosts[i])
        ]
        ended.update(ends)
        steps.append(([compiles[n] for n in group], ends))
    return steps


def break_hosts(rep: Report) -> list[tuple[str, ...]]:
    """Per break, the compiles (of this report's frames) it ended.

    A break belongs to the compile of the function it sits in: Dynamo also logs it in each
    caller that inlined that function, but there the break only ends the caller's graph at
    the call, and the callee runs (and breaks) as a frame of its own. A break that no
    compile's function names stays with every compile that logged it.
    """
    function = {f.compile_id: f.function for f in rep.frames}
    out = []
    for b in rep.breaks:
        cids = tuple(c for c in dict.fromkeys(b.compile_ids) if c in function)
        own = tuple(c for c in cids if base_function(function[c]) == base_function(b.function))
        out.append(own or cids)
    return out


def _ran_at(rep: Report) -> Callable[[str], tuple[float, tuple[int, int, str]]]:
    """Sort key of a frame number: its first graph's id, or for a frame with no graph the
    graphs compiled before its first compile (less a half: before the next graph); then the
    frame number."""
    first_graph: dict[str, int] = {}
    empty_at: dict[str, float] = {}
    seen = 0
    for f in rep.frames:
        no = frame_of(f.compile_id)
        if f.graph_ids:
            first_graph[no] = min(first_graph.get(no, min(f.graph_ids)), min(f.graph_ids))
            seen = max(seen, max(f.graph_ids) + 1)
        else:
            empty_at.setdefault(no, seen - 0.5)
    return lambda no: (float(first_graph[no]) if no in first_graph else empty_at.get(no, float("inf")), _frame_key(no))


def _frame_key(frame_no: str) -> tuple[int, int, str]:
    """Frames in numeric order; odd ids (hand-edited or foreign reports) after them."""
    try:
        return (0, int(frame_no), "")
    except ValueError:
        return (1, 0, frame_no)
