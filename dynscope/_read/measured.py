"""A report joined with what timing and memory measured (``dynscope._model.measured``): each
graph with its timings, measured lowering and memory, the whole program's timing and memory,
dynscope's own builds beside the user's compile, and the run's notes. No torch: the
measurements are data, and ``build_report`` takes them as one of its inputs."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynscope._model import Report
    from dynscope._model.measured import Measured

__all__ = ["with_measured"]


def with_measured(rep: Report, measured: Measured) -> Report:
    """``rep`` with ``measured`` in it; a measured graph id the report lacks is dropped (the
    report was built from other events than the ones measured)."""
    by_id = {m.graph_id: m for m in measured.graphs}
    graphs = tuple(
        replace(
            g,
            timings=by_id[g.id].timings,
            lowering=by_id[g.id].lowering or g.lowering,
            memory=by_id[g.id].memory or g.memory,
        )
        if g.id in by_id
        else g
        for g in rep.graphs
    )
    # dynscope's own builds, apart from the user's compile (compile_time.total_s).
    compile_time = replace(rep.compile_time, measure_s=measured.measure_s, measure_builds=measured.measure_builds)
    return replace(
        rep,
        graphs=graphs,
        timing=measured.end_to_end,
        memory=measured.memory if measured.memory is not None else rep.memory,
        compile_time=compile_time,
        notes=(*rep.notes, *measured.notes),
        timing_cost=measured.cost,
    )
