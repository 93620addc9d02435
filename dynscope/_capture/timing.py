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
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.builds import ProgramBuilds
from dynscope._capture.graph_timing import Builds, Cost, time_graph_lowered
from dynscope._capture.lowering import CompileEvents, LoweringRecorder
from dynscope._capture.machine import read_machine
from dynscope._capture.memory import measure_graph, program_memory
from dynscope._capture.raised import what_raised
from dynscope._capture.sampling import Budget, Clock, cuda_devices, interleaved, sample_fields, spending
from dynscope._capture.timing_options import TimingOptions, device_of, validate_modes
from dynscope._format import plural
from dynscope._model import GraphMemory, Lowering, ModeTiming, ProgramMemory, Report, Timing, TimingCost
from dynscope._progress import Progress
from dynscope._torch.fx import written_inputs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from dynscope._capture.backend import RecordedGraph

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
) -> Report:
    """The report with per-graph and end-to-end timing filled in, and where the time went.

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
    show = Progress("timing" if timing else "memory", show=opts.progress)
    say = show.phase
    budget = Budget(opts.budget_s)
    skipped: list[str] = []  # what the budget cut, for the notes
    cost = Cost()
    if capture_s:
        cost.add("capture", capture_s)
    # Matched by the live GraphModule: compile ids in the report are renumbered.
    by_module = {id(r.module): r for r in recorded}
    subjects = [(g, by_module.get(id(g.module)) if g.module is not None else None) for g in rep.graphs]
    timed = [(g, r) for g, r in subjects if r is not None]
    # Read before any build: Inductor's compile workers would count as load.
    machine = read_machine()
    timings: dict[int, list[Timing]] = {g.id: [] for g, _ in timed}
    lowerings: dict[int, Lowering] = {}
    memories: dict[int, GraphMemory] = {}
    memory_builds = Builds(cost)  # memory's own builds of graphs torch.compile did not make
    program_mem: ProgramMemory | None = None
    e2e: list[ModeTiming] = []
    reused = rebuilt = 0
    failed: list[str] = []
    # Timing runs random ops (dropout) many times: leave the user's RNG streams as found.
    with (
        _torch.inductor_cache_dir(opts.cache_dir),
        torch.random.fork_rng(devices=cuda_devices(device)),
        _as_captured(model, recorded),
        spending(budget),
    ):
        for first, mode in enumerate(mode_list):
            if first and budget.spent():
                skipped.append(f"mode {mode} not compiled nor measured")
                continue
            program = _Program(model, calls, mode, Clock(device), dynamic=dynamic)
            # Attached for the whole mode: a backward compiles at its graph's first backward.
            recorder = LoweringRecorder()
            with _torch.DynamoSandbox(model) as sandbox, recorder.recording():
                say(f"compiling the program with Inductor (mode {mode}), first call")
                with cost.phase("compile"):
                    program.compile(sandbox)
                if program.error:
                    failed.append(f"timing: torch.compile of the program with Inductor failed (mode {mode}): "
                                  f"{program.error}; each graph was built apart")
                shared = program.builds.shared_ids()
                for k, (g, rec) in enumerate(timed, 1):
                    assert rec is not None
                    if budget.spent():
                        skipped.append(f"mode {mode}: {plural(len(timed) - k + 1, 'graph')} not measured "
                                       f"(graph {g.id} on)")
                        break
                    build = program.builds.take(rec)
                    how = "torch.compile's build" if build is not None else "a build of dynscope's"
                    say(f"graph {k}/{len(timed)} ({g.frame}), mode {mode}: timing on {how}")
                    if build is not None:
                        reused += 1
                    else:
                        rebuilt += 1
                    events = _events_of(recorder, build.compile_id, shared) if build is not None else None
                    if timing:
                        with cost.phase("graph runs"):
                            timed_graph, lowered = time_graph_lowered(
                                rec, mode, opts, g if first == 0 else None,
                                machine=machine, build=build, events=events, cost=cost,
                            )
                        timings[g.id].append(timed_graph)
                        if lowered is not None and g.id not in lowerings:  # the first mode's build is shown
                            lowerings[g.id] = lowered
                    if memory and first == 0:
                        say(f"graph {k}/{len(timed)} ({g.frame}), mode {mode}: memory")
                        with cost.phase("memory runs"):
                            memories[g.id], lowered = measure_graph(
                                rec, mode, g if g.id not in lowerings else None,
                                build=build, events=events, builds=memory_builds,
                                backward_compiled=timing and opts.backward,
                            )
                        if lowered is not None:
                            lowerings[g.id] = lowered
                if (memory and first == 0) or (timing and opts.end_to_end):
                    if budget.spent():
                        skipped.append(f"mode {mode}: the whole program not measured end to end")
                        continue
                if memory and first == 0:
                    say(f"whole program, mode {mode}: memory")
                    with cost.phase("memory runs"):
                        program_mem = program.memory(warm=not timing)
                if timing and opts.end_to_end:
                    say(f"whole program, mode {mode}: timing")
                    graphs_now = tuple(replace(g, timings=tuple(timings.get(g.id, ()))) for g in rep.graphs)
                    # Forward runs, plus the backward of each run whose backward ran (a step).
                    _, in_graphs, _ = replace(rep, graphs=graphs_now).graphs_ms(mode)
                    with cost.phase("program runs"):
                        e2e.append(program.time(opts, in_graphs))
    graphs = tuple(
        replace(
            g,
            timings=tuple(timings[g.id]),
            lowering=lowerings.get(g.id, g.lowering),
            memory=memories.get(g.id, g.memory),
        )
        if g.id in timings
        else g
        for g in rep.graphs
    )
    flat = [t for g in graphs for t in g.timings]
    # dynscope's own builds, apart from the user's compile (compile_time.total_s).
    compile_time = replace(
        rep.compile_time,
        measure_s=sum(t.build_s for t in flat) + memory_builds.seconds,
        measure_builds=sum(t.builds for t in flat) + memory_builds.count,
    )
    notes = rep.notes + ((machine.contention,) if machine.contention and flat else ())
    notes += tuple(failed)
    if budget.cut or skipped:
        cut = [f"sampling stopped early in {plural(budget.cut, 'measurement')} (fewer samples, less certain medians)"] \
            if budget.cut else []
        notes += (f"{'timing' if timing else 'memory'}: the budget of {opts.budget_s:g} s (TimingOptions.budget_s) "
                  f"was spent: " + "; ".join(cut + skipped),)
    show.done(f"done in {show.elapsed():.1f} s")
    if rebuilt and not failed:
        notes += (
            f"timing: torch.compile's run built no graph like {rebuilt} of the {reused + rebuilt} graph timings "
            "(its compile traced the program differently): those graphs were built apart by dynscope",
        )
    return replace(
        rep,
        graphs=graphs,
        timing=tuple(e2e),
        memory=program_mem if memory else rep.memory,
        compile_time=compile_time,
        notes=notes,
        timing_cost=TimingCost(phases=cost.phases(), reused=reused, rebuilt=rebuilt),
    )
