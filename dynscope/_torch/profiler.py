"""The profiler side of compile coverage: what ran inside graphs and what ran eagerly.

PyTorch's profiler records CPU ops while report() runs the calls. The recording backend
marks each graph run with ``record_function("dynscope::graph")``. Top-level aten ops (those
not called from another aten op, so ``linear`` counts once, not again for its ``addmm``)
are then sorted three ways: under a graph marker -> in graphs; under Dynamo's compile-time
events ("... (dynamo_timed)", torch 2.5 .. 2.14: fake-tensor tracing; AOTAutograd's lazy
"entire_backward_compile") -> ignored; under Dynamo's "Pregraph bytecode" range (the
arguments it builds to call a graph, e.g. Python numbers passed as tensors under dynamic
shapes) -> Dynamo's runtime, counted apart as ``glue``; anything else -> ran eagerly, tied
to the compiled region ("Torch-Compiled Region: F/C") it ran in.

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
import ctypes
import functools
import os
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dynscope._torch.line_marks import GLUE, LINE_MARK, LineMarks, line_of

if TYPE_CHECKING:
    from collections.abc import Iterator

GRAPH_MARK = "dynscope::graph"
#: dynscope's mark around its own work between the calls it profiles (advise() copying each
#: call's outputs to compare them later): its ops are nobody's, counted neither way.
OWN_MARK = "dynscope::own"
_COMPILE_SUFFIX = "(dynamo_timed)"
# AOTAutograd compiles the backward graph lazily, on the first backward call.
_BACKWARD_COMPILE = "entire_backward_compile"
# The engine's range around each autograd node it runs (torch 2.0 .. 2.14).
_ENGINE = "autograd::engine::evaluate_function: "
_ACCUMULATE = "torch::autograd::AccumulateGrad"


_REGION = "Torch-Compiled Region: "
#: The event Inductor's compiled graph records around each call (torch 2.11 .. 2.15).
_CALL_MARK = "## Call CompiledFxGraph"
# Dynamo's range around the bytecode it runs before calling a graph (building the graph's
# arguments: Python numbers it passes as tensors under dynamic shapes, torch 2.6 .. 2.14):
# its ops are Dynamo's runtime, neither the user's eager work nor the graph's.
_PREGRAPH = "Pregraph bytecode"


#: One redirection at a time: two threads (or a nested use) saving and restoring the
#: descriptors in interleaved order could leave one pointing at /dev/null for good.
_QUIET_LOCK = threading.RLock()


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    """The process's C library (opened once: the flush runs around every profiler toggle)."""
    return ctypes.CDLL(None)


def _flush_all() -> None:
    """Flush Python's stdout/stderr buffers and C's stdio buffers (what printf holds)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
    with contextlib.suppress(Exception):  # no C library to ask (an unusual platform)
        _libc().fflush(None)


@contextlib.contextmanager
def quiet_native_output() -> Iterator[None]:
    """Keep the profiler's native chatter off the user's stdout and stderr for a moment.

    The profiler's C++ code prints a line on every start, stop and toggle ("USDT: ...
    profiler_start", "Toggling CPU activity ..."), on file descriptor 1 or 2 depending on the
    build and its logging, which Python cannot filter. Both descriptors point at /dev/null
    only for the duration of those calls, and are put back after: whatever they were (a
    terminal, a pipe, pytest's capture file) is what they are again. Buffers are flushed on
    the way in (what was written before reaches the real output) and on the way out (what
    the profiler wrote goes to /dev/null). Output another thread writes to those
    descriptors in that moment is lost, so only profiler start/stop/toggle calls go inside.
    """
    with _QUIET_LOCK:
        _flush_all()
        saved: list[tuple[int, int]] = []
        try:
            with open(os.devnull, "w") as devnull:
                for fd in (1, 2):
                    try:
                        saved.append((fd, os.dup(fd)))
                    except OSError:  # descriptor closed (services, pythonw): nothing to silence
                        continue
                    os.dup2(devnull.fileno(), fd)
                try:
                    yield
                finally:
                    _flush_all()
                    for fd, copy in saved:
                        os.dup2(copy, fd)
        finally:
            for _, copy in saved:
                os.close(copy)


#: The earlier name (it silenced stderr only; the chatter can come on stdout too).


@dataclass(frozen=True)
class OpCounts:
    """What the profiler saw, before eager ops are tied to break sites."""

    in_graphs: int
    # (PyTorch's compile id of the frame running, the (file, line) marks above the op,
    # innermost first (the line that ran it, then the lines that called into it; () when
    # not marked), op) -> count
    eager: Counter[tuple[str, tuple[tuple[str, int], ...], str]]
    # Same keys -> microseconds those ops took (each top-level op's whole time: its own and
    # that of the aten ops it called, i.e. the sum of their self CPU times).
    eager_us: dict[tuple[str, tuple[tuple[str, int], ...], str], float] = field(default_factory=dict)
    glue: int = 0  # ops Dynamo's own bytecode ran to call a graph (not counted either way)
    # PyTorch's compile id -> times its compiled code ran ("Torch-Compiled Region" ranges)
    regions: Counter[str] = field(default_factory=Counter)


class CoverageRecorder:
    """Profiles the calls; ``counts()`` gives what ran where afterwards."""

    def __init__(self) -> None:
        self._prof: Any = None
        self.lines = LineMarks()

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Profile the block (nothing is recorded outside it)."""
        import torch
        from torch.profiler import ProfilerActivity, profile

        from dynscope._torch.logger import around_compiles

        cpu = [ProfilerActivity.CPU]
        prof = profile(activities=cpu, record_shapes=False)

        def toggle(on: bool) -> None:
            if torch._C._current_graph_task_id() != -1:
                # AOTAutograd compiles a backward lazily, inside the autograd engine; toggling
                # there leaves a profiler callback behind that records every op twice in
                # later sessions (torch 2.13). Its ops stay recorded, under
                # "entire_backward_compile", which counts_from_events ignores.
                return
            with quiet_native_output():
                prof.toggle_collection_dynamic(on, cpu)

        def compiling() -> None:
            self.lines.pause()
            toggle(False)

        from torch._dynamo.utils import counters

        def broken() -> int:
            # A break Dynamo resumed after, or one that made it give up on the whole frame
            # (a break in a loop or under a context manager: counted as "unimplemented").
            return counters["graph_break"].total() + counters["unimplemented"].total()

        breaks = broken()

        def compiled() -> None:
            toggle(True)
            # Lines are marked from the program's first graph break on (LineMarks.arm).
            if broken() != breaks:
                self.lines.arm()
            self.lines.resume()

        with quiet_native_output():
            prof.start()
        try:
            # Compiling runs thousands of fake-tensor ops; not recording them keeps the
            # profiler's cost to the calls themselves.
            with around_compiles(compiling, compiled), self.lines.marking():
                yield
        finally:
            with quiet_native_output():
                prof.stop()
        self._prof = prof

    def counts(self) -> OpCounts | None:
        """Ops in graphs and eager ops by frame, or None when nothing was recorded."""
        if self._prof is None:
            return None
        return counts_from_events(recorded_ops(self._prof))


class _Op:
    """One CPU event of a profile, with what coverage reads of it (times in ns)."""

    __slots__ = ("cpu_parent", "end_ns", "fwd_thread", "name", "sequence_nr", "start_ns", "thread")

    def __init__(self, name: str, thread: int, fwd_thread: int, sequence_nr: int, start_ns: int, end_ns: int) -> None:
        self.name = name
        self.thread = thread
        self.fwd_thread = fwd_thread
        self.sequence_nr = sequence_nr
        self.start_ns = start_ns
        self.end_ns = end_ns
        self.cpu_parent: _Op | None = None

    @property
    def elapsed_us(self) -> float:
        return (self.end_ns - self.start_ns) / 1000.0


#: What the profiler's own reader leaves out (torch.autograd.profiler_util._filter_name,
#: torch 2.0 .. 2.14): utility ops and memory records, never in its event tree.
_FILTERED = frozenset(
    {
        "[memory]",
        "[OutOfMemory]",
        "profiler::_record_function_enter",
        "profiler::_record_function_enter_new",
        "profiler::_record_function_exit",
        "aten::is_leaf",
        "aten::output_nr",
        "aten::_version",
    }
)


def recorded_ops(prof: Any) -> list[_Op]:
    """The CPU events of a finished CPU-only profile, each with its ``cpu_parent``: the tree
    ``prof.events()`` builds, read straight from the raw kineto events.

    ``prof.events()`` makes a Python ``FunctionEvent`` of some thirty fields per event and
    costs most of a report's own time on a model with a few thousand ops; coverage needs
    names, threads, sequence numbers and times. The tree is the one PyTorch builds
    (``EventList._populate_cpu_children`` and ``_remove_dup_nodes``, torch 2.0 .. 2.14):
    same filtered names, async events left out of it, parents by interval nesting per
    thread. Falls back to ``prof.events()`` where the raw results are not there.
    """
    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return _ops_from_function_events(prof.events())
    from torch.autograd import DeviceType

    cpu = DeviceType.CPU
    ops: list[_Op] = []
    by_thread: dict[int, list[_Op]] = {}
    for ev in results.events():
        name = ev.name()
        # is_hidden_event: newer releases only (PyTorch's reader asks with getattr too).
        if name in _FILTERED or getattr(ev, "is_hidden_event", _never)():
            continue
        thread = ev.start_thread_id()
        op = _Op(name, thread, ev.fwd_thread_id(), ev.sequence_nr(), ev.start_ns(), ev.end_ns())
        ops.append(op)
        if ev.device_type() == cpu and not ev.is_async() and thread == ev.end_thread_id():
            by_thread.setdefault(thread, []).append(op)
    dropped: set[int] = set()
    for thread_ops in by_thread.values():
        dropped |= _nest(thread_ops)
    return [op for op in ops if id(op) not in dropped] if dropped else ops


def _never() -> bool:
    return False


def _nest(ops: list[_Op]) -> set[int]:
    """Set each op's ``cpu_parent``: the innermost op whose interval holds it (one thread).

    Returns the ids of the ops PyTorch's tree leaves out: a node that is the only child of
    a parent of the same name is dropped, its children handed to that parent
    (``EventList._remove_dup_nodes``; done in one pass here, as each drop hands over
    exactly the children the dropped node had).
    """
    children: dict[int, int] = {}
    open_ops: list[_Op] = []
    for op in sorted(ops, key=lambda o: (o.start_ns, -o.end_ns)):
        while open_ops:
            top = open_ops[-1]
            if op.start_ns >= top.end_ns or op.end_ns > top.end_ns:
                open_ops.pop()
                continue
            op.cpu_parent = top
            children[id(top)] = children.get(id(top), 0) + 1
            break
        open_ops.append(op)
    dropped = {
        id(op) for op in ops
        if op.cpu_parent is not None and op.cpu_parent.name == op.name and children[id(op.cpu_parent)] == 1
    }
    if dropped:
        for op in ops:
            parent = op.cpu_parent
            while parent is not None and id(parent) in dropped:
                parent = parent.cpu_parent
            op.cpu_parent = parent
    return dropped


def _ops_from_function_events(events: Any) -> list[_Op]:
    """The same view of ``prof.events()`` (older layouts without raw results)."""
    ops = {id(ev): _Op(ev.name, ev.thread, ev.fwd_thread, ev.sequence_nr, 0, 0) for ev in events}
    for ev in events:
        op = ops[id(ev)]
        # Microseconds (floats) to ns: only differences and order are read.
        op.start_ns, op.end_ns = int(ev.time_range.start * 1000), int(ev.time_range.end * 1000)
        parent = ev.cpu_parent
        op.cpu_parent = ops.get(id(parent)) if parent is not None else None
    return list(ops.values())


def _where(event: Any) -> tuple[str, str, Any, tuple[tuple[str, int], ...]]:
    """("graph" | "compile" | "glue" | "eager", compile id of the innermost compiled frame
    running, the innermost autograd engine event above the op or None, the (file, line) of
    each line mark above it, innermost first)."""
    region = ""
    lines: list[tuple[str, int]] | None = []  # None: the innermost mark is Dynamo's glue (the op is the region's)
    engine = None
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if lines is not None and name.startswith(LINE_MARK):
            if name == GLUE and not lines:
                lines = None
            else:
                lines.append(line_of(name))
        # Inductor's own mark around a compiled graph's call counts as a graph run too: the
        # program's own compiled parts (report() of a per-block compile) run without dynscope's.
        if name == GRAPH_MARK or name.startswith(_CALL_MARK):
            return "graph", region, engine, ()
        if name == _PREGRAPH:
            return "glue", region, engine, ()
        if name == OWN_MARK:
            return "compile", region, engine, ()  # ignored, like compile-time tracing
        if name.endswith(_COMPILE_SUFFIX) or name.startswith(_BACKWARD_COMPILE):
            return "compile", region, engine, ()
        if engine is None and name.startswith(_ENGINE):
            engine = parent
        if not region and name.startswith(_REGION):
            region = name[len(_REGION):].strip()
        parent = parent.cpu_parent
    return "eager", region, engine, tuple(lines or ())


def _forwards(events: list[_Op]) -> dict[tuple[int, int], tuple[bool, str, tuple[tuple[str, int], ...]]]:
    """(thread, sequence number) -> (ran in a graph, region, lines) of the forward op that
    made the autograd node with that number.

    Every op records the number the next node will get, so several ops may share one; the
    node is made by the last of them (making it advances the counter), so the latest
    start wins.
    """
    best: dict[tuple[int, int], tuple[int, bool, str, tuple[tuple[str, int], ...]]] = {}
    for ev in events:
        seq = ev.sequence_nr
        if seq < 0 or ev.name.startswith(_ENGINE):
            continue
        kind, region, engine, line = _where(ev)
        if kind in ("compile", "glue") or engine is not None:
            continue  # compile-time tracing, Dynamo's glue, or the backward side of a node
        key = (ev.thread, seq)
        start = ev.start_ns
        if key not in best or start >= best[key][0]:
            best[key] = (start, kind == "graph", region, line)
    return {key: (in_graph, region, line) for key, (_, in_graph, region, line) in best.items()}


def counts_from_events(events: list[_Op]) -> OpCounts:
    """Sort top-level aten ops (see the module docstring) into graph and eager ones."""
    forwards = _forwards(events)
    in_graphs = glue = 0
    regions: Counter[str] = Counter()
    eager: Counter[tuple[str, tuple[tuple[str, int], ...], str]] = Counter()
    eager_us: dict[tuple[str, tuple[tuple[str, int], ...], str], float] = {}
    for ev in events:
        if not ev.name.startswith("aten::"):
            if ev.name.startswith(_REGION):
                regions[ev.name[len(_REGION):].strip()] += 1
            continue
        parent = ev.cpu_parent
        if parent is not None and parent.name.startswith("aten::"):
            continue  # called by another aten op: counted through its caller
        kind, region, engine, line = _where(ev)
        if kind == "eager" and engine is not None:
            if engine.name[len(_ENGINE):].strip() == _ACCUMULATE:
                continue  # writing .grad: the engine's bookkeeping, not the program's ops
            # A backward op belongs where its forward ran (its line, not backward()'s).
            in_graph, region, line = forwards.get((engine.fwd_thread, engine.sequence_nr), (False, "", ()))
            kind = "graph" if in_graph else "eager"
        if kind == "graph":
            in_graphs += 1
        elif kind == "glue":
            glue += 1
        elif kind == "eager":
            key = (region, line, ev.name)
            eager[key] += 1
            eager_us[key] = eager_us.get(key, 0.0) + ev.elapsed_us
    return OpCounts(in_graphs=in_graphs, eager=eager, eager_us=eager_us, glue=glue, regions=regions)


# -- kernel times of one compiled graph ------------------------------------------------------

#: dynscope's mark around each profiled run of a compiled graph.
_RUN_MARK = "dynscope::lowering_run"


@dataclass(frozen=True)
class KernelTimes:
    """What the profiler saw of one compiled graph over ``runs`` runs.

    ``profiled_ms`` is the time of the run with the median time: on CPU the whole run as a
    timer sees it (Inductor's calls and the runtime wrappers around them; forward + backward
    in a training step), on CUDA the device time of the graph's calls; ``ms[(unit, key)]`` the time of the kernel call ``key`` ("name:n") in
    output code ``unit`` (0: forward or inference, 1: backward) in that same run, so kernel
    times are parts of ``profiled_ms``; ``calls`` the graph calls seen.
    """

    ms: dict[tuple[int, str], float]
    profiled_ms: float
    runs: int
    calls: int


def kernel_times(run: Any, units: list[list[tuple[str, tuple[str, ...]]]], runs: int, cuda: bool) -> KernelTimes:
    """Profile ``run()`` ``runs`` times and time each kernel call of the compiled graph.

    ``units`` lists, per output code in call order (forward then backward), its kernel calls
    as ("name:n", profiler names) in call order. Each run must make one call per unit.
    A kernel's events are the call mark's direct children with its profiler name (C++
    kernels recorded by Inductor's kernel profile; library and fallback ops as their aten
    op), matched in call order; on CUDA, the device kernels below them (Triton kernels by
    name) give device time.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof = profile(activities=activities)
    # Starting and stopping is where the profiler's native code prints: not the runs.
    with quiet_native_output():
        prof.start()
    try:
        for _ in range(runs):
            with record_function(_RUN_MARK):
                run()
    finally:
        with quiet_native_output():
            prof.stop()
    events = list(prof.events())
    marks = sorted((e for e in events if e.name == _RUN_MARK), key=lambda e: e.time_range.start)
    calls = sorted((e for e in events if e.name.startswith(_CALL_MARK)), key=lambda e: e.time_range.start)
    # Per run: each kernel call's time, and the run's time. The median run, not means: one
    # run slowed by another process must not move the figures. One run for all: medians
    # taken kernel by kernel can sum to more than the median run's time.
    per_key: dict[int, dict[tuple[int, str], float]] = {}
    per_run: dict[int, float] = {}
    if not cuda:
        # The whole run, as the timer sees it: Inductor's call and the runtime wrappers
        # around it (AOTAutograd's, the autograd engine's in a training step).
        per_run = {i: float(m.time_range.elapsed_us()) for i, m in enumerate(marks)}
    width = max(len(units), 1)
    for i, call in enumerate(calls):
        unit = i % width
        run_no = next(
            (r for r, m in enumerate(marks) if m.time_range.start <= call.time_range.start <= m.time_range.end),
            i // width,
        )
        if unit >= len(units):
            continue
        if cuda:
            # GPU work runs after the CPU returns: the graph's time is its device time.
            per_run[run_no] = per_run.get(run_no, 0.0) + _duration_us(call, cuda, DeviceType)
        # Queue of kernel keys waiting for an event, per profiler name, in call order.
        waiting: dict[str, list[str]] = {}
        for key, names in units[unit]:
            for n in names:
                waiting.setdefault(n, []).append(key)
        seen: dict[str, float] = {}
        for child in sorted(call.cpu_children, key=lambda e: e.time_range.start):
            queue = waiting.get(_strip_graph_prefix(child.name))
            if not queue:
                continue
            key = queue.pop(0)
            seen[key] = seen.get(key, 0.0) + _duration_us(child, cuda, DeviceType)
        for key, us in seen.items():
            per_key.setdefault(run_no, {})[(unit, key)] = us
    median_run = sorted(per_run, key=per_run.__getitem__)[(len(per_run) - 1) // 2] if per_run else -1
    return KernelTimes(
        ms={k: us / 1000.0 for k, us in per_key.get(median_run, {}).items()},
        profiled_ms=per_run[median_run] / 1000.0 if per_run else 0.0,
        runs=runs,
        calls=len(calls),
    )


def _strip_graph_prefix(name: str) -> str:
    # Inductor's C++ kernel profile names an event "graph_<n>_<kernel>".
    if name.startswith("graph_"):
        head, _, rest = name[len("graph_") :].partition("_")
        if head.isdigit():
            return rest
    return name


def _duration_us(event: Any, cuda: bool, device_type: Any) -> float:
    """CPU time of an event; on CUDA the device time of the kernels it launched, when any."""
    if cuda:
        device = sum(k.duration for k in _device_kernels(event, device_type))
        if device > 0:
            return float(device)
    return float(event.time_range.elapsed_us())


def _device_kernels(event: Any, device_type: Any) -> list[Any]:
    out = [k for k in getattr(event, "kernels", ()) if getattr(k, "device_type", None) == device_type.CUDA]
    for child in event.cpu_children:
        out.extend(_device_kernels(child, device_type))
    return out


def profiler_running() -> bool:
    """True while a torch profiler session (the user's) is recording in this process."""
    import torch

    try:
        return bool(torch.autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover
        return False
