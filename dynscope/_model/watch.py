"""The live cross-rank check in plain data: one compile's reports from every rank, compared.

``watch_ranks`` (``dynscope._capture.watch``) compares, at the end of each Dynamo compile,
what the ranks compiled. What a rank compiled is the :class:`~dynscope.Report` of the
compiled frame's compiles so far, so the live check says what ``merge`` would say after the
job, in the same words: this module keeps the kinds a compile decides, adds the compile that
only some ranks made and the collectives the ranks wait in that never meet, says which
compiles can desynchronise collectives (:func:`new_collectives`: only those stop a job), and
names the remedy to say and why a note lets the job go on, as kinds
(``dynscope._render.divergences`` words them). No torch import.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from dynscope._lexicon.wording import resume_label
from dynscope._model.compile_ids import compile_number
from dynscope._model.display import VerdictShortcuts
from dynscope._model.merge import collectives_of, comparable, divergences
from dynscope._model.plain import to_plain
from dynscope._model.ranks import Divergence, Fact, Value

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from dynscope._model.report import Report

__all__ = [
    "BLOCKED",
    "COMPILED_ALONE",
    "LIVE_KINDS",
    "NO_COLLECTIVE",
    "RECOMPILED_ALONE",
    "Verdict",
    "blocked_divergence",
    "compare",
    "digest",
    "frame_key",
    "goes_on_why",
    "new_collectives",
    "remedy_for",
    "unmatched",
]

#: The kinds of divergence one compile decides. Cache hits, the order graphs ran in and
#: compile-time skew are the job's story, not a compile's: merge says them afterwards.
LIVE_KINDS = (
    "graph_count", "graph_structure", "tensor_metadata", "break_sites", "recompiles", "guards", "collectives",
    "collective_schedule",
)

#: The remedy when the ranks wait in collectives that never meet and no compile explains it.
BLOCKED = "blocked"

#: Why a note (a verdict that does not stop the job) lets the job go on: a recompile only some
#: ranks made, a frame only some ranks compiled, neither with a collective of its own; or a
#: compile every rank made differently whose graphs issue no collective.
RECOMPILED_ALONE, COMPILED_ALONE, NO_COLLECTIVE = "recompiled_alone", "compiled_alone", "no_collective"


def frame_key(name: str, filename: str, line: int, nth: int) -> str:
    """The same compile on every rank: the frame's function, file (base name: nodes may hold
    the code at other paths) and line, and which compile of it this is (0 first). Dynamo's
    own frame ids are not used: a function only rank 0 compiles shifts every later id."""
    return f"{name}@{PurePath(filename).name}:{line}#{nth}"


def digest(rep: Report) -> str:
    """A short, process-independent digest of what :func:`compare` compares in ``rep``."""
    text = json.dumps(comparable(rep), default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:24]


def compare(reports: Sequence[Report]) -> tuple[Divergence, ...]:
    """How the ranks' reports of one frame's compiles differ, in the kinds a compile decides."""
    return tuple(d for d in divergences(reports) if d.kind in LIVE_KINDS)


def unmatched(rep: Report, *, rank: int, nth: int, compile_id: str, missing: Sequence[int], waited_s: float,
              doing: str = "") -> Divergence:
    """The compile ``rank`` made that ``missing`` did not make within the wait: a recompile
    (``nth`` > 0) is a ``recompiles`` divergence, a frame only this rank compiled a
    ``graph_count`` one. ``doing``: what the missing ranks did meanwhile ("it waits in barrier
    at train.py:90"), said in parentheses."""
    frame = resume_label(rep.graphs[0].frame) if rep.graphs else ""
    frame = frame or (resume_label(rep.recompiles[-1].frame) if rep.recompiles else "a frame")
    absent = Fact("absent", tuple(missing), (waited_s, doing))
    if nth > 0 and rep.recompiles:
        r = rep.recompiles[-1]
        said: Value = r.causes or "; ".join(r.raw_reasons)  # worded by dynscope._render.divergences
        return Divergence("recompiles", (rank,), facts=(Fact("recompiled_alone", (rank,), (frame, compile_id, said)), absent))
    return Divergence("graph_count", (rank,), facts=(Fact("compiled_alone", (rank,), (nth > 0, frame, compile_id)), absent))


def new_collectives(rep: Report, nth: int) -> tuple[str, ...]:
    """The collectives compile ``nth`` of the frame brings (``rep``: the frame's compiles so
    far): those its graphs issue, unless an earlier compile of the same frame issued the same
    sequence (a recompile for another batch size that runs the same collectives, as FSDP's and
    DDP's sized by their parameters do, desynchronises nothing). Empty: the compile cannot
    desynchronise the ranks' collectives, and the watch never stops the job at it."""
    by_compile: dict[int, tuple[str, ...]] = {}
    for g in rep.graphs:
        n = compile_number(g.compile_id)
        if n is not None and n <= nth:
            by_compile[n] = by_compile.get(n, ()) + collectives_of(g)
    newest = by_compile.pop(nth, ())
    if not newest or newest in by_compile.values():
        return ()
    return newest


def goes_on_why(nth: int, *, complete: bool) -> str:
    """Why a compile the ranks made differently, with no new collective in it, does not stop
    the job (one of RECOMPILED_ALONE, COMPILED_ALONE, NO_COLLECTIVE): ``complete`` when every
    rank gave its account of it, ``nth`` which compile of the frame it is (0 first)."""
    if complete:
        return NO_COLLECTIVE
    return RECOMPILED_ALONE if nth > 0 else COMPILED_ALONE


def blocked_divergence(blocked: Mapping[int, Mapping[str, Any]]) -> Divergence:
    """Every rank waits in a collective and they are not the same one: ``blocked`` maps each
    rank to what it waits in (``op``, ``seq``: how many collectives it has issued, ``where``:
    its line). The ranks that differ from the most common (op, seq) are named; on a tie, those
    not holding the lowest rank."""
    groups: dict[tuple[str, object], list[int]] = {}
    for r in sorted(blocked):
        b = blocked[r]
        groups.setdefault((str(b.get("op", "?")), b.get("seq")), []).append(r)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    odd = tuple(sorted(r for g in ordered[1:] for r in g))

    def said(g: list[int]) -> Fact:
        b = blocked[g[0]]
        seq = b.get("seq")
        return Fact("waits_in", tuple(g), (str(b.get("op", "?")), seq if isinstance(seq, int) else None,
                                           str(b.get("where") or "")))

    return Divergence("collectives", odd, facts=(*(said(g) for g in ordered), Fact("never_meet")))


def remedy_for(found: Sequence[Divergence]) -> str:
    """Which remedy to say: the kind of the first divergence a compile decides (each of
    LIVE_KINDS has a remedy; ``dynscope._render.divergences`` says it)."""
    return next((d.kind for d in found if d.kind in LIVE_KINDS), "graph_structure")


@dataclass(frozen=True)
class Verdict(VerdictShortcuts):
    """What one rank found at one compile: enough to stop every rank with the same words
    (``message()``, made in ``dynscope._render.divergences``)."""

    found_by: int  # the rank that compared and found it
    world_size: int
    frame: str  # the compiled function ("step", "Mlp.forward")
    where: str  # its place in the user's code ("train.py:12")
    compile_id: str  # Dynamo's compile id on the rank that found it ("0/1")
    line: str  # the user's line that called into it ("train.py:41: out = step(x)"), "" unknown
    divergences: tuple[Divergence, ...]
    remedy: str  # which remedy to say: one of LIVE_KINDS, or BLOCKED
    waited_s: float  # how long the finding rank waited for the others
    stops: bool = True  # False: said only (the compile brings no collective: the job goes on)
    answered: bool = True  # every rank gave its account (False: the odd ranks compiled alone)
    blocked: bool = False  # found while every rank waited in collectives that never meet
    why: str = ""  # a note's reason for not stopping the job: RECOMPILED_ALONE, ... ("" else)
    hooks: str = ""  # a note's: the hooks the compiled code runs inside ("DDP's hooks"), "" none

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks that differ from the rest, over every divergence found."""
        return tuple(sorted({r for d in self.divergences for r in d.ranks}))

    def to_dict(self) -> dict[str, Any]:
        """Plain data, for the job's store."""
        return {
            "found_by": self.found_by, "world_size": self.world_size, "frame": self.frame, "where": self.where,
            "compile_id": self.compile_id, "line": self.line, "remedy": self.remedy, "waited_s": self.waited_s,
            "stops": self.stops, "answered": self.answered, "blocked": self.blocked, "why": self.why,
            "hooks": self.hooks, "divergences": [to_plain(d) for d in self.divergences],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """The verdict another rank wrote (:meth:`to_dict`)."""
        from dynscope._model.codec import from_plain

        return cls(
            found_by=int(data["found_by"]), world_size=int(data["world_size"]), frame=str(data["frame"]),
            where=str(data["where"]), compile_id=str(data["compile_id"]), line=str(data["line"]),
            remedy=str(data["remedy"]), waited_s=float(data["waited_s"]), stops=bool(data.get("stops", True)),
            answered=bool(data.get("answered", True)), blocked=bool(data.get("blocked", False)),
            why=str(data.get("why", "")), hooks=str(data.get("hooks", "")),
            divergences=tuple(from_plain(Divergence, d) for d in data["divergences"]),
        )
