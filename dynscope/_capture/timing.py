"""Time what report() captured: each graph and the whole program, eager against Inductor.

One compile for everything: per mode, the whole program is compiled once with Inductor
exactly as ``torch.compile(model, mode=m)`` compiles it, its first call timed (compile
included). That compile builds every graph; each captured graph is then timed on the very
build torch.compile made (:mod:`dynscope._capture.builds`), on the example inputs recorded at
capture, in the grad mode it was captured in (:mod:`dynscope._capture.graph_timing`). Only
what torch.compile did not build is built apart: numerics builds for graphs with random ops,
the backward of graphs the program never ran backward through, graphs its run did not make.

End to end: the whole callable, eager against that compiled program, interleaved the way
PyTorch's own benchmark runner does (speedup = eager median / compiled median), plus peak
memory on CUDA. Where the time went is kept in ``Report.timing_cost``.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.builds import ProgramBuilds
from dynscope._capture.graph_timing import Builds, Cost, time_graph_lowered
from dynscope._capture.lowering_recorder import LoweringRecorder
from dynscope._capture.machine import read_machine
from dynscope._capture.memory import measure_graph, program_memory
from dynscope._capture.raised import what_raised
from dynscope._capture.sampling import Clock, Deadline, cuda_devices, interleaved, sample_fields, spending
from dynscope._capture.timing_options import TimingOptions, device_of, validate_modes
from dynscope._format import plural
from dynscope._model import GraphMemory, Lowering, ModeTiming, ProgramMemory, Report, Timing, TimingCost
from dynscope._model.measured import GraphMeasured, Measured
from dynscope._progress import Progress
from dynscope._read.measured import with_measured
from dynscope._torch.fx import written_inputs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from dynscope._capture.backend import RecordedGraph
    from dynscope._model import Graph
    from dynscope._read.lowering import CompileEvents

__all__ = ["time_report"]

Calls = list[tuple[tuple[Any, ...], dict[str, Any]]]


def _run(fn: Callable[..., Any], calls: Calls) -> Callable[[], None]:
    def go() -> None:
        for args, kwargs in calls:
            fn(*args, **kwargs)

    return go


class _Program:
    """The whole program compiled once with Inductor in one mode, its builds kept."""

    def __init__(
        self, model: Callable[..., Any], calls: Calls, mode: str, clock: Clock, *, dynamic: bool | None = None
    ) -> None:
        self.builds = ProgramBuilds(mode, dynamic=dynamic)
        self.dynamic = dynamic
        self.calls = calls
        self.clock = clock
        self.compiled: Callable[..., Any] | None = None
        self.first_call_s = 0.0
        self.error = ""
        self._model = model

    def compile(self, sandbox: Any) -> None:
        """torch.compile the program as the user would, and make its first call (every call
        report() made, so every graph and recompile): the compile the user waits for."""
        try:
            # No torch.no_grad() here: the callable runs as the user wrote it, so a training
            # step's loss.backward() works and grad mode is the model code's own choice.
            # dynamic as report() compiled: else torch.compile builds other graphs than it captured.
            compiled = torch.compile(
                self._model, backend=self.builds.backend(), dynamic=self.dynamic, **_torch.compile_kwargs()
            )
            sandbox.own(compiled)
            start = time.perf_counter()
            _run(compiled, self.calls)()
            self.clock.sync()
            self.first_call_s = time.perf_counter() - start
            self.compiled = compiled
        except Exception as err:  # noqa: BLE001 - each graph is then built apart; the report says why
            self.error = what_raised(err)

    def time(self, opts: TimingOptions, in_graphs_ms: float) -> ModeTiming:
        """The whole program's samples, eager against the compiled program."""
        mode, device = self.builds.mode, self.clock.device
        if self.compiled is None:
            return ModeTiming(mode, device, 0.0, 0.0, 0.0, error=self.error)
        eager_fn, compiled_fn = _run(self._model, self.calls), _run(self.compiled, self.calls)
        try:
            peak_eager = peak_compiled = 0.0
            if self.clock.cuda:
                peak_eager = _peak_mb(eager_fn)
                peak_compiled = _peak_mb(compiled_fn)
            eager, comp = interleaved(eager_fn, compiled_fn, self.clock, opts)
        except Exception as err:  # noqa: BLE001
            return ModeTiming(mode, device, 0.0, 0.0, self.first_call_s, error=what_raised(err))
        return ModeTiming(
            mode=mode,
            device=device,
            first_call_s=self.first_call_s,
            in_graphs_ms=in_graphs_ms,
            peak_mem_eager_mb=peak_eager,
            peak_mem_compiled_mb=peak_compiled,
            **sample_fields(eager, comp),
        )


    def memory(self, *, warm: bool) -> ProgramMemory:
        """The whole program's peak, eager against the compiled program (one call each)."""
        mode, device = self.builds.mode, self.clock.device
        if self.compiled is None:
            return ProgramMemory(mode, device, "", error=f"torch.compile of the program failed: {self.error}")
        return program_memory(
            _run(self._model, self.calls), _run(self.compiled, self.calls), mode=mode, device=device, warm=warm
        )


def _peak_mb(fn: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def _events_of(recorder: LoweringRecorder, compile_id: str, shared: set[str]) -> Callable[[], CompileEvents | None]:
    """What torch.compile's compile ``compile_id`` logged, read when asked (after the
    graph's first backward); None when the id built several graphs (DDP's split pieces)."""

    def read() -> CompileEvents | None:
        if not compile_id or compile_id in shared:
            return None
        return recorder.by_compile().get(compile_id)

    return read


@contextlib.contextmanager
def _as_captured(model: Callable[..., Any], recorded: list[RecordedGraph]) -> Iterator[None]:
    """Put back, after timing, what its many runs of the program change: the tensors its
    graphs write to (an input's ``x.add_(1)``, a KV cache) and the gradients each
    ``loss.backward()`` adds to ``.grad``, as the capture's own run left them (report()
    without timing leaves them so)."""
    written: dict[int, torch.Tensor] = {}
    leaves: dict[int, torch.Tensor] = {}
    for rec in recorded:
        values = rec.example_inputs
        for i in written_inputs(rec.module):
            if i < len(values) and isinstance(values[i], torch.Tensor):
                written.setdefault(id(values[i]), values[i])
        for v in values:
            if isinstance(v, torch.Tensor) and v.is_leaf and v.requires_grad:
                leaves.setdefault(id(v), v)
    if isinstance(model, torch.nn.Module):  # parameters a graph reads as attributes, not inputs
        for param in model.parameters():
            leaves.setdefault(id(param), param)
    with torch.no_grad():
        kept = [(t, t.detach().clone()) for t in written.values()]
        grads = [(p, None if p.grad is None else p.grad.detach().clone()) for p in leaves.values()]
    try:
        yield
    finally:
        with torch.no_grad():
            for t, value in kept:
                t.copy_(value)
        for p, grad in grads:
            p.grad = grad


def time_report(
    rep: Report,
    model: Callable[..., Any],
    calls: Calls,
    recorded: list[RecordedGraph],
    *,
    modes: Sequence[str],
    options: TimingOptions | None = None,
    capture_s: float = 0.0,
    dynamic: bool | None = None,
    timing: bool = True,
    memory: bool = False,
) -> Measured:
    """Per-graph and end-to-end timing of the report's graphs, and where the time went: the
    input ``build_report`` joins into the report (``measured``).

    ``capture_s``: the seconds report() spent capturing, counted as the "capture" phase.
    ``dynamic``: report()'s own, so the program is compiled as it was captured.
    ``timing``: time the graphs and the program; ``memory``: measure their memory (the
    first mode's builds, :mod:`dynscope._capture.memory`). Either alone, on the same one
    compile of the program.
    """
    opts = options or TimingOptions()
    device = device_of([c[0] for c in calls] + [c[1] for c in calls])
    mode_list = validate_modes(modes, device)
    if not timing:  # memory alone: the first mode's builds
        mode_list = mode_list[:1]
    run = _Run(rep, model, recorded, opts, timing=timing, memory=memory, capture_s=capture_s)
    # Timing runs random ops (dropout) many times: leave the user's RNG streams as found.
    with (
        _torch.inductor_cache_dir(opts.cache_dir),
        torch.random.fork_rng(devices=cuda_devices(device)),
        _as_captured(model, recorded),
        spending(run.budget),
    ):
        for first, mode in enumerate(mode_list):
            if first and run.budget.spent():
                run.skipped.append(f"mode {mode} not compiled nor measured")
                continue
            run.mode(first, _Program(model, calls, mode, Clock(device), dynamic=dynamic))
    return run.result()


class _Run:
    """One time_report(): its options and budget, the cost by phase, and what each mode
    measured so far (per graph, then the whole program)."""

    def __init__(self, rep: Report, model: Callable[..., Any], recorded: list[RecordedGraph], opts: TimingOptions,
                 *, timing: bool, memory: bool, capture_s: float) -> None:
        self.rep, self.model, self.opts, self.timing, self.memory = rep, model, opts, timing, memory
        self.show = Progress("timing" if timing else "memory", show=opts.progress)
        self.budget = Deadline(opts.budget_s)
        self.skipped: list[str] = []  # what the budget cut, for the notes
        self.cost = Cost()
        if capture_s:
            self.cost.add("capture", capture_s)
        # Matched by the live GraphModule: compile ids in the report are renumbered.
        by_module = {id(r.module): r for r in recorded}
        subjects = [(g, by_module.get(id(g.module)) if g.module is not None else None) for g in rep.graphs]
        self.timed = [(g, r) for g, r in subjects if r is not None]
        # Read before any build: Inductor's compile workers would count as load.
        self.machine = read_machine()
        self.timings: dict[int, list[Timing]] = {g.id: [] for g, _ in self.timed}
        self.lowerings: dict[int, Lowering] = {}
        self.memories: dict[int, GraphMemory] = {}
        self.memory_builds = Builds(self.cost)  # memory's own builds of graphs torch.compile did not make
        self.program_mem: ProgramMemory | None = None
        self.e2e: list[ModeTiming] = []
        self.reused = self.rebuilt = 0
        self.failed: list[str] = []

    def mode(self, first: int, program: _Program) -> None:
        """One mode: the program compiled (its first call), each graph on its build, then the
        whole program. ``first`` is 0 for the first mode (the one memory and lowerings use)."""
        mode = program.builds.mode
        # Attached for the whole mode: a backward compiles at its graph's first backward.
        recorder = LoweringRecorder()
        with _torch.DynamoSandbox(self.model) as sandbox, recorder.recording():
            self.show.phase(f"compiling the program with Inductor (mode {mode}), first call")
            with self.cost.phase("compile"):
                program.compile(sandbox)
            if program.error:
                self.failed.append(f"timing: torch.compile of the program with Inductor failed (mode {mode}): "
                                   f"{program.error}; each graph was built apart")
            shared = program.builds.shared_ids()
            for k, (g, rec) in enumerate(self.timed, 1):
                if self.budget.spent():
                    self.skipped.append(f"mode {mode}: {plural(len(self.timed) - k + 1, 'graph')} not measured "
                                        f"(graph {g.id} on)")
                    break
                self._graph(first, program, recorder, shared, k, g, rec)
            self._whole(first, program)

    def _graph(self, first: int, program: _Program, recorder: LoweringRecorder, shared: set[str], k: int,
               g: Graph, rec: RecordedGraph) -> None:
        """Graph ``g`` (the ``k``-th timed) on torch.compile's build of it, else one of dynscope's."""
        mode, timing, say = program.builds.mode, self.timing, self.show.phase
        build = program.builds.take(rec)
        how = "torch.compile's build" if build is not None else "a build of dynscope's"
        say(f"graph {k}/{len(self.timed)} ({g.frame}), mode {mode}: timing on {how}")
        if build is not None:
            self.reused += 1
        else:
            self.rebuilt += 1
        events = _events_of(recorder, build.compile_id, shared) if build is not None else None
        if timing:
            with self.cost.phase("graph runs"):
                timed_graph, lowered = time_graph_lowered(
                    rec, mode, self.opts, g if first == 0 else None,
                    machine=self.machine, build=build, events=events, cost=self.cost,
                )
            self.timings[g.id].append(timed_graph)
            if lowered is not None and g.id not in self.lowerings:  # the first mode's build is shown
                self.lowerings[g.id] = lowered
        if self.memory and first == 0:
            say(f"graph {k}/{len(self.timed)} ({g.frame}), mode {mode}: memory")
            with self.cost.phase("memory runs"):
                self.memories[g.id], lowered = measure_graph(
                    rec, mode, g if g.id not in self.lowerings else None,
                    build=build, events=events, builds=self.memory_builds,
                    backward_compiled=timing and self.opts.backward,
                )
            if lowered is not None:
                self.lowerings[g.id] = lowered

    def _whole(self, first: int, program: _Program) -> None:
        """The whole program in this mode: its memory (the first mode), then end to end."""
        mode, memory, timing = program.builds.mode, self.memory and first == 0, self.timing and self.opts.end_to_end
        if (memory or timing) and self.budget.spent():
            self.skipped.append(f"mode {mode}: the whole program not measured end to end")
            return
        if memory:
            self.show.phase(f"whole program, mode {mode}: memory")
            with self.cost.phase("memory runs"):
                self.program_mem = program.memory(warm=not self.timing)
        if timing:
            self.show.phase(f"whole program, mode {mode}: timing")
            # Forward runs, plus the backward of each run whose backward ran (a step).
            _, in_graphs, _ = with_measured(self.rep, Measured(graphs=self._graphs())).graphs_ms(mode)
            with self.cost.phase("program runs"):
                self.e2e.append(program.time(self.opts, in_graphs))

    def result(self) -> Measured:
        """What was measured, its notes, and where the time went (the builder's input)."""
        flat = [t for ts in self.timings.values() for t in ts]
        return Measured(
            graphs=self._graphs(),
            end_to_end=tuple(self.e2e),
            memory=self.program_mem if self.memory else None,
            measure_s=sum(t.build_s for t in flat) + self.memory_builds.seconds,
            measure_builds=sum(t.builds for t in flat) + self.memory_builds.count,
            notes=self._notes(bool(flat)),
            cost=TimingCost(phases=self.cost.phases(), reused=self.reused, rebuilt=self.rebuilt),
        )

    def _graphs(self) -> tuple[GraphMeasured, ...]:
        """Each timed graph's measurements so far."""
        return tuple(GraphMeasured(g.id, tuple(self.timings[g.id]), self.lowerings.get(g.id), self.memories.get(g.id))
                     for g, _ in self.timed)

    def _notes(self, measured: bool) -> tuple[str, ...]:
        """What the reader must know of this run, said after the capture's notes; the
        progress is closed here, before the last note, as it always was."""
        machine, budget, opts = self.machine, self.budget, self.opts
        notes: tuple[str, ...] = (machine.contention,) if machine.contention and measured else ()
        notes += tuple(self.failed)
        if budget.cut or self.skipped:
            cut = [f"sampling stopped early in {plural(budget.cut, 'measurement')} (fewer samples, less certain "
                   "medians)"] if budget.cut else []
            notes += (f"{'timing' if self.timing else 'memory'}: the budget of {opts.budget_s:g} s "
                      f"(TimingOptions.budget_s) was spent: " + "; ".join(cut + self.skipped),)
        self.show.done(f"done in {self.show.elapsed():.1f} s")
        if self.rebuilt and not self.failed:
            notes += (
                f"timing: torch.compile's run built no graph like {self.rebuilt} of the {self.reused + self.rebuilt} "
                "graph timings (its compile traced the program differently): those graphs were built apart by dynscope",
            )
        return notes
