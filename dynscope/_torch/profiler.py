"""The profiler side of compile coverage: what ran inside graphs and what ran eagerly.

PyTorch's profiler records CPU ops while report() runs the calls. The recording backend
marks each graph run with ``record_function("dynscope::graph")``. Top-level aten ops (those
not called from another aten op, so ``linear`` counts once, not again for its ``addmm``)
are then sorted three ways: under a graph marker -> in graphs; under Dynamo's compile-time
events ("... (dynamo_timed)", torch 2.5 .. 2.14: fake-tensor tracing; AOTAutograd's lazy
"entire_backward_compile") -> ignored; anything else -> ran eagerly, tied to the compiled
region ("Torch-Compiled Region: F/C") it ran in.

Backward ops run outside any graph marker: the autograd engine runs them from
``loss.backward()``, under "autograd::engine::evaluate_function: <Node>" events. They are
sorted by the forward op that created the node: the engine event's ``(fwd_thread,
sequence_nr)`` matches the forward event's ``(thread, sequence_nr)`` (the forward records
the sequence number its node gets). A node whose forward ran inside a graph marker is part
of the captured graph's backward, so its ops count as in graphs: with AOTAutograd backends
(inductor, aot_eager) that node is "CompiledFunctionBackward", running the compiled backward
graph; with the "eager" inner backend report() uses there is no compiled backward, and the
nodes are the graph's ops' own autograd nodes (AddmmBackward0 ...), which belong to the
captured forward graph just the same. A node whose forward ran eagerly is eager, tied to
the region its forward ran in (the break that left the forward outside a graph), not to
the frame that called ``backward()``; a node whose forward was not recorded is "outside
compiled frames". AccumulateGrad (writing ``.grad`` of leaves) is ignored: it is the
engine's bookkeeping, run outside graphs by eager and compiled code alike.
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
# AOTAutograd compiles the backward graph lazily, on the first backward call.
_BACKWARD_COMPILE = "entire_backward_compile"
# The engine's range around each autograd node it runs (torch 2.0 .. 2.14).
_ENGINE = "autograd::engine::evaluate_function: "
_ACCUMULATE = "torch::autograd::AccumulateGrad"


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
        import torch
        from torch.profiler import ProfilerActivity, profile

        from dynscope._torch.runtime import around_compiles

        cpu = [ProfilerActivity.CPU]
        prof = profile(activities=cpu, record_shapes=False)

        def toggle(on: bool) -> None:
            if torch._C._current_graph_task_id() != -1:
                # AOTAutograd compiles a backward lazily, inside the autograd engine; toggling
                # there leaves a profiler callback behind that records every op twice in
                # later sessions (torch 2.13). Its ops stay recorded, under
                # "entire_backward_compile", which counts_from_events ignores.
                return
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


def _where(event: Any) -> tuple[str, str, Any]:
    """("graph" | "compile" | "eager", compile id of the innermost compiled frame running,
    the innermost autograd engine event above the op or None)."""
    region = ""
    engine = None
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name == GRAPH_MARK:
            return "graph", region, engine
        if name.endswith(_COMPILE_SUFFIX) or name.startswith(_BACKWARD_COMPILE):
            return "compile", region, engine
        if engine is None and name.startswith(_ENGINE):
            engine = parent
        if not region and name.startswith(_REGION):
            region = name[len(_REGION):].strip()
        parent = parent.cpu_parent
    return "eager", region, engine


def _forwards(events: Any) -> dict[tuple[int, int], tuple[bool, str]]:
    """(thread, sequence number) -> (ran in a graph, region) of the forward op that made
    the autograd node with that number.

    Every op records the number the next node will get, so several ops may share one; the
    node is made by the last of them (making it advances the counter), so the latest
    start wins.
    """
    best: dict[tuple[int, int], tuple[int, bool, str]] = {}
    for ev in events:
        seq = ev.sequence_nr
        if seq < 0 or ev.name.startswith(_ENGINE):
            continue
        kind, region, engine = _where(ev)
        if kind == "compile" or engine is not None:
            continue  # compile-time tracing, or the backward side of a node
        key = (ev.thread, seq)
        start = ev.time_range.start
        if key not in best or start >= best[key][0]:
            best[key] = (start, kind == "graph", region)
    return {key: (in_graph, region) for key, (_, in_graph, region) in best.items()}


def counts_from_events(events: Any) -> OpCounts:
    """Sort top-level aten ops (see the module docstring) into graph and eager ones."""
    forwards = _forwards(events)
    in_graphs = 0
    eager: Counter[tuple[str, str]] = Counter()
    for ev in events:
        if not ev.name.startswith("aten::"):
            continue
        parent = ev.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue  # called by another aten op: counted through its caller
        kind, region, engine = _where(ev)
        if kind == "eager" and engine is not None:
            if engine.name[len(_ENGINE):].strip() == _ACCUMULATE:
                continue  # writing .grad: the engine's bookkeeping, not the program's ops
            in_graph, region = forwards.get((engine.fwd_thread, engine.sequence_nr), (False, ""))
            kind = "graph" if in_graph else "eager"
        if kind == "graph":
            in_graphs += 1
        elif kind == "eager":
            eager[(region, ev.name)] += 1
    return OpCounts(in_graphs=in_graphs, eager=eager)
