"""Compile coverage: the share of torch ops a call ran inside captured graphs.

Measured with PyTorch's profiler (CPU activity, no stacks) while report() runs the calls.
The recording backend marks each graph run with ``record_function("dynscope::graph")``.
Top-level aten ops (those not called from another aten op, so ``linear`` counts once, not
again for its ``addmm``) are then sorted three ways: under a graph marker -> in graphs;
under Dynamo's compile-time events ("... (dynamo_timed)": fake-tensor tracing) -> ignored;
anything else -> ran eagerly between graphs.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

from dynscope.model import Coverage

GRAPH_MARK = "dynscope::graph"
_COMPILE_SUFFIX = "(dynamo_timed)"


class CoverageRecorder:
    """Profiles the calls; ``result()`` gives the Coverage afterwards."""

    def __init__(self) -> None:
        self._prof: Any = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Profile the block (nothing is recorded outside it)."""
        from torch.profiler import ProfilerActivity, profile

        from dynscope import _torch

        cpu = [ProfilerActivity.CPU]
        with profile(activities=cpu, record_shapes=False) as prof:
            # Compiling runs thousands of fake-tensor ops; not recording them keeps the
            # profiler's cost to the calls themselves.
            with _torch.around_compiles(
                lambda: prof.toggle_collection_dynamic(False, cpu),
                lambda: prof.toggle_collection_dynamic(True, cpu),
            ):
                yield
        self._prof = prof

    def result(self) -> Coverage | None:
        """The coverage, or None when nothing was recorded."""
        if self._prof is None:
            return None
        return coverage_from_events(self._prof.events())


def _kind(event: Any) -> str:
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name == GRAPH_MARK:
            return "graph"
        if name.endswith(_COMPILE_SUFFIX):
            return "compile"
        parent = parent.cpu_parent
    return "eager"


def coverage_from_events(events: Any) -> Coverage:
    """Coverage from profiler FunctionEvents (see the module docstring)."""
    in_graphs = 0
    eager: Counter[str] = Counter()
    for ev in events:
        if not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue  # called by another aten op: counted through its caller
        kind = _kind(ev)
        if kind == "graph":
            in_graphs += 1
        elif kind == "eager":
            eager[ev.name] += 1
    sites = tuple(sorted(eager.items(), key=lambda kv: (-kv[1], kv[0])))
    return Coverage(ops_in_graphs=in_graphs, ops_eager=sum(eager.values()), eager_sites=sites)
