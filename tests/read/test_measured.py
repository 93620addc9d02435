"""What timing measured is one of the builder's inputs (``build_report(measured=...)``): the
join is pure, on a report recorded from a live ``report(timing=True)`` run
(tests/golden/reports/lowered_train.json, made by ``make goldens``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import dynscope
from dynscope._model.measured import GraphMeasured, Measured
from dynscope._model.timing import ModeTiming, TimingCost
from dynscope._read.measured import with_measured

STORED = Path(__file__).resolve().parents[1] / "golden" / "reports" / "lowered_train.json"


def _bare(rep: dynscope.Report) -> dynscope.Report:
    """The report as the capture built it, before anything was measured."""
    graphs = tuple(replace(g, timings=(), memory=None) for g in rep.graphs)
    return replace(rep, graphs=graphs, timing=(), memory=None, timing_cost=None,
                   compile_time=replace(rep.compile_time, measure_s=0.0, measure_builds=0))


def test_the_measured_report_is_the_bare_one_joined_with_its_measurements() -> None:
    rep = dynscope.load(STORED)
    assert all(g.timings for g in rep.graphs), "the stored report was timed"
    measured = Measured(
        graphs=tuple(GraphMeasured(g.id, g.timings, g.lowering, g.memory) for g in rep.graphs),
        end_to_end=rep.timing, memory=rep.memory, measure_s=rep.compile_time.measure_s,
        measure_builds=rep.compile_time.measure_builds, cost=rep.timing_cost,
    )
    assert with_measured(_bare(rep), measured).to_dict() == rep.to_dict()


def test_notes_come_after_the_captures_and_unknown_graphs_are_dropped() -> None:
    rep = replace(_bare(dynscope.load(STORED)), notes=("the capture's own note",))
    first = rep.graphs[0]
    e2e = ModeTiming(mode="default", device="cpu", eager_ms=2.0, compiled_ms=1.0, first_call_s=3.0)
    cost = TimingCost(phases=(("compile", 1.5), ("graph runs", 0.5)), reused=1)
    out = with_measured(rep, Measured(
        graphs=(GraphMeasured(first.id, first.timings[:0]), GraphMeasured(999)),
        end_to_end=(e2e,), measure_s=0.25, measure_builds=2, notes=("timing: a run note",), cost=cost,
    ))
    assert out.notes == ("the capture's own note", "timing: a run note")
    assert [g.id for g in out.graphs] == [g.id for g in rep.graphs], "graph 999 is not made up"
    # A graph measured without a lowering or memory keeps what the capture logged.
    assert out.graphs[0].lowering == first.lowering and out.graphs[0].memory is None
    assert out.timing == (e2e,) and out.timing_cost == cost
    assert (out.compile_time.measure_s, out.compile_time.measure_builds) == (0.25, 2)
    assert out.compile_time.total_s == rep.compile_time.total_s, "the user's compile is not dynscope's builds"
