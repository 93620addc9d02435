"""Many ranks side by side: the merged report of a job and the ways its ranks diverge.

Reading rank folders, merging and finding divergences is ``dynscope._model.merge``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dynscope._model.plain as _plain
from dynscope._format import plural
from dynscope._model.base import _brief
from dynscope._model.causes import Cause
from dynscope._model.display import DivergenceShortcuts, MergedShortcuts
from dynscope._model.report import SCHEMA_VERSION, Report

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = ["KINDS", "MERGED_KIND", "Divergence", "Fact", "MultiRankReport", "Value"]

#: The kinds of divergence, in the order a reader should look at them.
KINDS = (
    "graph_count", "graph_structure", "tensor_metadata", "break_sites", "recompiles", "guards", "collectives",
    "collective_schedule", "inductor_tensor_meta", "execution_order", "collective_order", "cache", "compile_time_skew",
)

#: Marks a merged report's JSON (a single report has no ``kind`` field).
MERGED_KIND = "dynscope-merged"


#: What a :class:`Fact` may hold: names, counts, figures, "" or None for nothing, or a
#: recompile's causes (records, worded by ``dynscope._render.divergences``).
Value = str | int | float | bool | None | tuple[Cause, ...]


@dataclass(frozen=True)
class Fact:
    """One thing a group of ranks did, in a divergence: what (a closed set of names,
    ``dynscope._render.divergences`` says each in words), whose, and its values.

    Example: ``Fact("captured", (1,), (3,))`` is "rank 1 captured 3 graphs".
    """

    what: str  # "captured", "made_graph", "broke_at", "recompiled", "guard", "issue", ...
    ranks: tuple[int, ...] = ()  # the ranks it is about
    args: tuple[Value, ...] = ()  # its values, in the order its words take them
    others: tuple[int, ...] = ()  # the ranks it is compared with ("...; rank 0 did not")


@dataclass(frozen=True, repr=False)  # the repr says the facts: DivergenceShortcuts
class Divergence(DivergenceShortcuts):
    """One way the ranks of a job compiled differently: its kind, the ranks that differ and
    what each group of ranks did, as :class:`Fact` records; ``detail`` says them in words."""

    kind: str  # one of KINDS: "recompiles", "break_sites", ...
    ranks: tuple[int, ...]  # the ranks that differ from the rest (the majority, lowest rank on a tie)
    # the words of a divergence made before divergences were fields (a report saved then, or one
    # built from words); "" when ``facts`` say it
    said: str = field(default="", metadata={"was": "detail"})
    facts: tuple[Fact, ...] = ()  # what each group did, in the order said


def missing_ranks(world: int, seen: Iterable[int]) -> tuple[list[tuple[int, int]], int]:
    """The ranks below ``world`` not in ``seen``, as runs (first, last) and how many: the gaps
    between the ranks read, so a world size of 1e11 costs what the ranks read cost, never one
    entry per missing rank."""
    gaps: list[tuple[int, int]] = []
    count, start = 0, 0
    for r in sorted(set(seen)):
        if r >= world:
            break
        if r > start:
            gaps.append((start, r - 1))
            count += r - start
        start = max(start, r + 1)
    if start < world:
        gaps.append((start, world - 1))
        count += world - start
    return gaps, count


@dataclass(frozen=True)
class MultiRankReport(MergedShortcuts):
    """The reports of every rank of one job side by side, and how they diverge."""

    # First, so a reader can tell a merged file from a single report by its first bytes.
    kind: str = MERGED_KIND
    reports: tuple[Report, ...] = ()  # one per rank, by rank
    divergences: tuple[Divergence, ...] = ()  # in KINDS order
    world_size: int = 1  # the job's world size (all reports agree)
    sources: tuple[str, ...] = ()  # the files read, in the order of ``reports``
    notes: tuple[str, ...] = ()  # what the reader must know of how it was read (a trace's limits...)
    written: str = "report"  # what each rank wrote: "report", "trace log" (said of the ranks missing)
    # which run of a folder holding several this is, and why ("run 2 of the folder's 3 (the
    # most ranks; ...)"); "" when the folder held one run (or the reports were merged)
    shown: str = ""
    schema_version: int = SCHEMA_VERSION

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks merged, in order."""
        return tuple(r.rank for r in self.reports)

    @property
    def missing(self) -> tuple[tuple[tuple[int, int], ...], int]:
        """The ranks below the world size that wrote nothing read here (crashed, hung, or
        saved elsewhere), as runs (first, last), and how many."""
        gaps, count = missing_ranks(self.world_size, self.ranks)
        return tuple(gaps), count

    @property
    def diverged(self) -> bool:
        """True when the ranks compiled differently."""
        return bool(self.divergences)

    def report(self, rank: int) -> Report:
        """The report of one rank."""
        for r in self.reports:
            if r.rank == rank:
                return r
        raise KeyError(f"no rank {rank}; merged ranks are {list(self.ranks)}")

    def of_kind(self, kind: str) -> tuple[Divergence, ...]:
        """The divergences of one kind."""
        return tuple(d for d in self.divergences if d.kind == kind)

    def __repr__(self) -> str:
        kinds = ", ".join(dict.fromkeys(d.kind for d in self.divergences)) or "none"
        return _brief("MultiRankReport", f"{plural(len(self.reports), 'rank')} of {self.world_size}, divergences: {kinds}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        result: dict[str, Any] = _plain.to_plain(self)
        return result

    def to_json(self, *, indent: int | None = 1) -> str:
        """The merged report as JSON text (read back with :func:`dynscope._model.merge.load_merged`)."""
        return json.dumps(self.to_dict(), indent=indent)

    def iter_json(self) -> Iterator[str]:
        """The merged report's JSON (as ``save`` writes it) in pieces, in order, rank by
        rank: a big job's is never held whole."""
        return _plain.iter_json(self)

    def save(self, path: str | Path) -> Path:
        """Write the merged report as JSON to ``path`` (atomically); returns the path.

        Written rank by rank: a 256-rank job is never held as one string or as plain data.
        """
        from dynscope._write import write_text

        return write_text(Path(path), _plain.iter_json(self))
