"""The profiler side of compile coverage: what ran inside graphs and what ran eagerly.

PyTorch's profiler records CPU ops while report() runs the calls. The recording backend
marks each graph run with ``record_function("dynscope::graph")``. Top-level aten ops (those
not called from another aten op, so ``linear`` counts once, not again for its ``addmm``)
are then sorted three ways: under a graph marker -> in graphs; under Dynamo's compile-time
events ("... (dynamo_timed)", torch 2.5 .. 2.14: fake-tensor tracing) -> ignored; anything
else -> ran eagerly, tied to the compiled region ("Torch-Compiled Region: F/C") it ran in.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

GRAPH_MARK = "dynscope::graph"
_COMPILE_SUFFIX = "(dynamo_timed)"


_REGION = "Torch-Compiled Region: "


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence C++ writes to stderr for a moment.

    The profiler's native code prints a line on every start, stop and toggle
    ("USDT: ... profiler_start", "Toggling CPU activity ..."), which Python cannot filter.
    File descriptor 2 points at /dev/null only for the duration of those calls.
    """
    stream = sys.stderr
    try:
        fd = stream.fileno() if stream is not None else 2
    except (AttributeError, OSError, ValueError):  # stderr replaced (pytest capture, IDEs)
        fd = 2
    if stream is not None:
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        saved = os.dup(fd)
    except OSError:  # descriptor closed (services, pythonw): nothing to silence
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), fd)
            try:
                yield
            finally:
                os.dup2(saved, fd)
    finally:
        os.close(saved)


@dataclass(frozen=True)
class OpCounts:
    """What the profiler saw, before eager ops are tied to break sites."""

    in_graphs: int
    eager: Counter[tuple[str, str]]  # (PyTorch's compile id of the frame running, op) -> count


class CoverageRecorder:
    """Profiles the calls; ``counts()`` gives what ran where afterwards."""

    def __init__(self) -> None:
        self._prof: Any = None

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Profile the block (nothing is recorded outside it)."""
        from torch.profiler import ProfilerActivity, profile

        from dynscope._torch.runtime import around_compiles

        cpu = [ProfilerActivity.CPU]
        prof = profile(activities=cpu, record_shapes=False)

        def toggle(on: bool) -> None:
            with quiet_native_stderr():
                prof.toggle_collection_dynamic(on, cpu)

        with quiet_native_stderr():
            prof.start()
        try:
            # Compiling runs thousands of fake-tensor ops; not recording them keeps the
            # profiler's cost to the calls themselves.
            with around_compiles(lambda: toggle(False), lambda: toggle(True)):
                yield
        finally:
            with quiet_native_stderr():
                prof.stop()
        self._prof = prof

    def counts(self) -> OpCounts | None:
        """Ops in graphs and eager ops by frame, or None when nothing was recorded."""
        if self._prof is None:
            return None
        return counts_from_events(self._prof.events())


def _where(event: Any) -> tuple[str, str]:
    """("graph" | "compile" | "eager", compile id of the innermost compiled frame running)."""
    region = ""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name == GRAPH_MARK:
            return "graph", region
        if name.endswith(_COMPILE_SUFFIX):
            return "compile", region
        if not region and name.startswith(_REGION):
            region = name[len(_REGION):].strip()
        parent = parent.cpu_parent
    return "eager", region


def counts_from_events(events: Any) -> OpCounts:
    """Sort top-level aten ops (see the module docstring) into graph and eager ones."""
    in_graphs = 0
    eager: Counter[tuple[str, str]] = Counter()
    for ev in events:
        if not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue  # called by another aten op: counted through its caller
        kind, region = _where(ev)
        if kind == "graph":
            in_graphs += 1
        elif kind == "eager":
            eager[(region, ev.name)] += 1
    return OpCounts(in_graphs=in_graphs, eager=eager)
