"""What ``report(timing=True)`` or ``memory=True`` measured after the capture, as plain data:
one of the builder's inputs (``dynscope._read.assemble.build_report``'s ``measured``), like
coverage and the guard checks. The measuring (``dynscope._capture.timing``) needs the built
report to know which graphs to time, so a timed report is built twice from the same events:
once to measure, once with what was measured."""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._model.graph import Lowering  # noqa: TC001
from dynscope._model.memory import GraphMemory, ProgramMemory  # noqa: TC001
from dynscope._model.timing import ModeTiming, Timing, TimingCost  # noqa: TC001

__all__ = ["GraphMeasured", "Measured"]


@dataclass(frozen=True)
class GraphMeasured:
    """One graph's measurements, by its id in the report: its timing per mode, the Inductor
    lowering measured (None: keep what the capture logged) and its memory (None: not measured)."""

    graph_id: int
    timings: tuple[Timing, ...] = ()
    lowering: Lowering | None = None
    memory: GraphMemory | None = None


@dataclass(frozen=True)
class Measured:
    """Everything one timing or memory run measured.

    ``graphs``: per graph measured; ``end_to_end``: the whole program per mode;
    ``memory``: the whole call's memory (None: not measured); ``measure_s`` and
    ``measure_builds``: dynscope's own Inductor builds (``CompileTime.measure_s``); ``notes``:
    what the reader must know of this run (said after the capture's notes); ``cost``: where
    the run's wall time went.
    """

    graphs: tuple[GraphMeasured, ...] = ()
    end_to_end: tuple[ModeTiming, ...] = ()
    memory: ProgramMemory | None = None
    measure_s: float = 0.0
    measure_builds: int = 0
    notes: tuple[str, ...] = ()
    cost: TimingCost | None = None
