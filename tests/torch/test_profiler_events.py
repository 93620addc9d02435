"""Coverage reads the profiler's raw events itself (PyTorch's ``prof.events()`` built a Python
object per event and cost most of a report's own time): its tree must be PyTorch's.

A live report's profile, read both ways, gives the same counts: ops in graphs, eager ops per
frame and op, their times, and Dynamo's glue. If PyTorch changes how it builds its event tree,
this fails before a report's coverage drifts.
"""

from __future__ import annotations

import torch
from torch import nn

from dynscope._capture.backend import RecordingBackend
from dynscope._torch.profiler import (
    CoverageRecorder,
    _ops_from_function_events,
    counts_from_events,
    recorded_ops,
)


class _Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x).relu()
        print("", end="")  # a graph break: eager ops between graphs
        h = h * h.sum().item()
        return self.b(h).softmax(-1)


def test_raw_events_give_the_counts_pytorchs_event_tree_gives() -> None:
    torch.manual_seed(0)
    model = _Broken()
    backend = RecordingBackend(mark_runs=True)
    recorder = CoverageRecorder()
    compiled = torch.compile(model, backend=backend)
    try:
        with recorder.recording():
            for _ in range(2):
                compiled(torch.randn(2, 8)).sum().backward()
    finally:
        torch._dynamo.reset()
    prof = recorder._prof
    assert prof is not None
    ours = counts_from_events(recorded_ops(prof))
    theirs = counts_from_events(_ops_from_function_events(prof.events()))
    assert ours.in_graphs > 0 and sum(ours.eager.values()) > 0, "graphs and eager ops both ran"
    assert (ours.in_graphs, ours.eager, ours.glue) == (theirs.in_graphs, theirs.eager, theirs.glue)
    assert ours.eager_us.keys() == theirs.eager_us.keys()
    for key, us in ours.eager_us.items():
        # PyTorch's events turn nanosecond clocks into microseconds its own way (seen: 1 ns
        # apart on one op); 50 ns over a site's few ops is rounding, not a different tree.
        assert abs(us - theirs.eager_us[key]) <= max(1e-6 * us, 0.05), key
