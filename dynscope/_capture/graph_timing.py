"""Time one captured graph: eager against an Inductor build, on its recorded inputs.

The build is torch.compile's own when the program's Inductor compile made one of the same
graph (:mod:`dynscope._capture.builds`), else one of dynscope's (``compile_fx`` on the
graph, as torch.compile would call it). Either way the graph runs in the grad mode Dynamo
captured it in: under ``torch.no_grad()`` torch.compile builds an inference graph, with
grad on a training graph that also saves activations for backward, and the forward is timed
as the program runs it. A training graph (outputs needing grad) is also timed
forward+backward, with gradients compared. Eager and compiled samples are interleaved;
numerics are judged under one seed, on a build whose random ops call eager's kernels when
the graph draws random numbers.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.lowering_recorder import LoweringRecorder
from dynscope._capture.machine import Machine, read_machine
from dynscope._capture.raised import what_raised
from dynscope._capture.sampling import (
    SEED,
    Clock,
    compare_outputs,
    interleaved,
    is_random,
    sample_fields,
    seeded,
    tensors,
)
from dynscope._capture.timing_options import TimingOptions, device_of
from dynscope._model import Graph, Lowering, Timing
from dynscope._torch.fx import written_inputs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from dynscope._capture.backend import RecordedGraph
    from dynscope._capture.builds import Build
    from dynscope._read.lowering import CompileEvents


class Cost:
    """Seconds per phase of dynscope's timing run, each second counted once: a phase
    entered inside another pauses the outer one (an extra build inside a graph's runs is
    counted as a build, not as runs)."""

    def __init__(self) -> None:
        self._seconds: dict[str, float] = {}
        self._stack: list[tuple[str, float]] = []

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        now = time.perf_counter()
        if self._stack:
            outer, since = self._stack[-1]
            self._add(outer, now - since)
        self._stack.append((name, now))
        try:
            yield
        finally:
            now = time.perf_counter()
            _, since = self._stack.pop()
            self._add(name, now - since)
            if self._stack:  # the outer phase runs again from here
                self._stack[-1] = (self._stack[-1][0], now)

    def _add(self, name: str, seconds: float) -> None:
        self._seconds[name] = self._seconds.get(name, 0.0) + seconds

    def add(self, name: str, seconds: float) -> None:
        """Count seconds measured elsewhere (the capture, before timing began)."""
        self._add(name, seconds)

    def phases(self) -> tuple[tuple[str, float], ...]:
        """(phase, seconds) in the order each phase first ran."""
        return tuple(self._seconds.items())


@dataclass
class Builds:
    """Adds up the Inductor builds dynscope makes of one graph beyond torch.compile's own
    (its own measurement cost: ``Timing.build_s``)."""

    cost: Cost = field(default_factory=Cost)
    seconds: float = 0.0
    count: int = 0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            with self.cost.phase("extra builds"):
                yield
        finally:
            self.seconds += time.perf_counter() - start
            self.count += 1

    def fields(self) -> dict[str, Any]:
        return {"build_s": self.seconds, "builds": self.count}


def fresh_inputs(values: Sequence[Any]) -> list[Any]:
    """The recorded inputs cut from the autograd history they were made with.

    A resume graph's inputs are the previous graph's outputs: non-leaf tensors whose history
    runs back into that graph, and, when two of them share it (``x`` and ``scores`` made from
    it), gradients taken for one flow through the other's history, into the previous graph's
    backward, freed after the first: "Trying to backward through the graph a second time".
    Each non-leaf tensor is detached (same storage) and requires grad as it did; leaves
    (parameters, user inputs) are kept as they are.
    """
    out: list[Any] = []
    for v in values:
        if isinstance(v, torch.Tensor) and not v.is_leaf:
            v = v.detach().requires_grad_(v.requires_grad)
        out.append(v)
    return out


class Written:
    """The inputs a graph writes to, kept as they were before any run of dynscope's.

    Each numerics run starts from these values (otherwise eager runs on ``x`` and compiled
    on ``x + 1``, and two seeds "differ" on any graph that writes its input); the tensors
    are put back when the graph is done, as the program's own run left them.
    """

    def __init__(self, gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> None:
        with torch.no_grad():
            self.saved = [
                (inputs[i], inputs[i].detach().clone())
                for i in written_inputs(gm)
                if i < len(inputs) and isinstance(inputs[i], torch.Tensor)
            ]

    def restore(self) -> None:
        with torch.no_grad():
            for live, value in self.saved:
                live.copy_(value)

    def fresh(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` run on the kept input values, its tensor outputs copied (an output may be
        the input itself, which the next run overwrites); ``fn`` itself when nothing is written."""
        if not self.saved:
            return fn

        def run(*args: Any) -> Any:
            self.restore()
            return _copied(fn(*args))

        return run


def _copied(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()  # differentiable: a training step's gradients flow through it
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_copied(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    return value


def time_graph(rec: RecordedGraph, mode: str, opts: TimingOptions) -> Timing:
    """Time one captured graph eagerly and through an Inductor build of dynscope's."""
    return time_graph_lowered(rec, mode, opts)[0]


@dataclass
class _Subject:
    """One graph being timed: what both sides run on."""

    rec: RecordedGraph
    gm: Callable[..., Any]  # the eager side: a copy of the captured GraphModule
    inputs: list[Any]
    device: str
    clock: Clock
    grad: bool  # the grad mode the graph was captured (and is run) in

    def call(self, fn: Callable[..., Any]) -> Callable[[], Any]:
        """One run of ``fn`` on the inputs, in the graph's grad mode (both sides alike)."""
        grad, inputs = self.grad, self.inputs

        def go() -> Any:
            # The switch only when needed: entering it costs about a microsecond a call,
            # as much as a small graph's kernels.
            if torch.is_grad_enabled() == grad:
                return fn(*inputs)
            with torch.set_grad_enabled(grad):
                return fn(*inputs)

        return go


def time_graph_lowered(
    rec: RecordedGraph,
    mode: str,
    opts: TimingOptions,
    graph: Graph | None = None,
    *,
    machine: Machine | None = None,
    build: Build | None = None,
    events: Callable[[], CompileEvents | None] | None = None,
    cost: Cost | None = None,
) -> tuple[Timing, Lowering | None]:
    """Time one captured graph, and with ``graph`` (its report entry) also read its lowering:
    the build's AOT graphs and kernels, each kernel timed by the profiler on that build.

    Args:
        build: torch.compile's own build of this graph; None: dynscope builds it.
        events: what torch.compile's compile of ``build`` logged (read after the graph's
            first backward, which compiles its backward); only with ``build``.
        machine: the figures to record (threads, cores, load); read now when None.
        cost: where the seconds of builds and profiling are counted.
    """
    inputs = fresh_inputs(rec.example_inputs)
    written = Written(rec.module, inputs)
    try:
        return _time_graph(rec, mode, opts, graph, inputs, written, machine=machine, build=build, events=events, cost=cost)
    finally:
        written.restore()


def _time_graph(
    rec: RecordedGraph,
    mode: str,
    opts: TimingOptions,
    graph: Graph | None,
    inputs: list[Any],
    written: Written,
    *,
    machine: Machine | None,
    build: Build | None,
    events: Callable[[], CompileEvents | None] | None,
    cost: Cost | None,
) -> tuple[Timing, Lowering | None]:
    machine = machine or read_machine()
    builds = Builds(cost or Cost())
    device = device_of(inputs)
    clock = Clock(device)
    # A graph Dynamo made dynamic is compiled dynamic too, and timed at the recorded sizes.
    symbolic = rec.module if rec.dynamic else None
    recorder = LoweringRecorder() if graph is not None and build is None else None
    subject = _Subject(rec, copy.deepcopy(rec.module), inputs, device, clock, rec.grad_enabled)
    try:
        compiled, compile_s = _built(subject, mode, symbolic, builds, recorder, build)
        numerics_mode, checker, expected, got = _numerics_runs(subject, compiled, mode, symbolic, written, builds)
    except Exception as err:  # noqa: BLE001 - reported in the timing, the report goes on
        # Nothing was compared: a failed graph never claims matching numerics.
        return (
            Timing(mode=mode, device=device, error=what_raised(err), numerics_ok=False, **builds.fields(), **machine.fields()),
            None,
        )
    max_abs, max_rel, ok = compare_outputs(expected, got, opts.rtol, opts.atol)
    del expected, got
    # What is known whether or not the timing runs work.
    checked: dict[str, Any] = {
        "mode": mode,
        "device": device,
        "compile_s": compile_s,
        "max_abs_err": max_abs,
        "max_rel_err": max_rel,
        "numerics_ok": ok,
        "numerics_mode": numerics_mode,
        **machine.fields(),
    }
    try:
        with torch.set_grad_enabled(subject.grad):  # once around the samples, not per call
            eager, comp = interleaved(subject.call(subject.gm), subject.call(compiled), clock, opts)
    except Exception as err:  # noqa: BLE001
        return Timing(**checked, error=what_raised(err), **builds.fields()), None
    timing = Timing(**checked, **sample_fields(eager, comp))
    trains = subject.grad and rec.trains and any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs)
    lowering = None
    if trains and opts.backward:
        # The backward is compiled at the first backward(): by the program's own run when it
        # ran backward through this graph, else by the first step here (an extra build).
        backward_built = build is not None and rec.backward_runs > 0
        # dynscope's own build logs its backward compile to the same recorder as its forward.
        record = recorder.recording if recorder is not None else contextlib.nullcontext
        timing, step = _time_training(
            timing, subject, compiled, checker, opts, builds,
            backward_built=backward_built, recording=record, fresh=written.fresh,
        )
        if step is not None and graph is not None:
            lowering = _lowering(graph, recorder, events, step, timing, timing.train_compiled_ms, builds.cost)
    elif graph is not None:
        lowering = _lowering(graph, recorder, events, subject.call(compiled), timing, timing.compiled_ms, builds.cost)
    if lowering is not None:
        generated = [k for k in lowering.kernels if k.kind in ("cpp", "triton")]
        timing = replace(timing, kernels=len(generated))
    return replace(timing, **builds.fields()), lowering


def _built(
    subject: _Subject,
    mode: str,
    symbolic: Any,
    builds: Builds,
    recorder: LoweringRecorder | None,
    build: Build | None,
) -> tuple[Callable[..., Any], float]:
    """The build the graph is timed on and its compile seconds: torch.compile's ``build``,
    else one of dynscope's, made now (logged to ``recorder``) and run once."""
    if build is not None:
        return build.compiled, build.seconds
    rec, inputs = subject.rec, subject.inputs
    with builds.timed(), recorder.recording() if recorder is not None else contextlib.nullcontext():
        compiled = own_build(rec, inputs, mode, symbolic, grad=subject.grad)
        subject.call(compiled)()  # the first run (autotuning, loading) is part of the compile cost
        subject.clock.sync()
    return compiled, builds.seconds


def _numerics_runs(
    subject: _Subject,
    compiled: Callable[..., Any],
    mode: str,
    symbolic: Any,
    written: Written,
    builds: Builds,
) -> tuple[str, Callable[..., Any], Any, Any]:
    """One seeded run of each side for numerics: (numerics mode, the build judged, eager's
    outputs, the build's), in the graph's grad mode."""
    rec, inputs, device = subject.rec, subject.inputs, subject.device
    numerics_mode, checker = "default", compiled
    with torch.set_grad_enabled(subject.grad):
        if is_random(written.fresh(subject.gm), inputs, device):
            # Inductor draws random numbers its own way (philox): even under one seed its
            # dropout masks are not eager's. Judge numerics on a build whose random ops
            # call eager's kernels; the times stay those of the normal build.
            numerics_mode = "fallback_random"
            with builds.timed():
                checker = own_build(rec, inputs, mode, symbolic, grad=subject.grad, eager_random=True)
                seeded(checker, inputs, device)  # its first run, as for the timed build
        expected = seeded(written.fresh(subject.gm), inputs, device)
        got = seeded(written.fresh(checker), inputs, device)
    return numerics_mode, checker, expected, got


def own_build(
    rec: RecordedGraph, inputs: list[Any], mode: str, symbolic: Any, *, grad: bool, eager_random: bool = False
) -> Callable[..., Any]:
    """dynscope's Inductor build of the graph, in its grad mode (an inference build under
    no_grad, as torch.compile's would be)."""
    with torch.set_grad_enabled(grad):
        return _torch.inductor_compile(
            copy.deepcopy(rec.module), inputs, mode, symbolic_from=symbolic, eager_random=eager_random
        )


#: Profiling a build: at least this many runs, and about this much time in all.
_PROFILE_RUNS = 3
_PROFILE_MS = 50.0


def _lowering(
    graph: Graph,
    recorder: LoweringRecorder | None,
    events: Callable[[], CompileEvents | None] | None,
    run: Callable[[], Any],
    timing: Timing,
    per_run_ms: float,
    cost: Cost,
) -> Lowering | None:
    """The build's lowering, its kernels timed by profiling ``run`` (one run of the build)."""
    logged = recorder.compiled() if recorder is not None else (events() if events is not None else None)
    if logged is None:
        return None
    notes: list[str] = []
    times = None
    units = logged.kernel_units()
    if units and any(units):
        if _torch.profiler_running():
            notes.append("kernel times not measured: a profiler of yours was running")
        else:
            runs = min(50, max(_PROFILE_RUNS, math.ceil(_PROFILE_MS / max(per_run_ms, 1e-3))))
            try:
                with cost.phase("kernel profiling"):
                    times = _torch.kernel_times(run, units, runs, cuda=timing.device.startswith("cuda"))
            except Exception as err:  # noqa: BLE001 - the lowering stands without times
                notes.append(f"kernel times not measured: {what_raised(err)}")
            else:
                if times.calls != runs * len(units):
                    notes.append(
                        f"the profiler saw {times.calls} graph calls for {runs} runs of {len(units)} compiled "
                        "graph(s): kernel times may be incomplete"
                    )
    return logged.lowering(
        graph,
        mode=timing.mode,
        source="timing",
        times=times,
        measured_ms=per_run_ms if per_run_ms > 0 else None,
        notes=notes,
    )


def _time_training(
    timing: Timing,
    subject: _Subject,
    build: Callable[..., Any],
    checker: Callable[..., Any],
    opts: TimingOptions,
    builds: Builds,
    *,
    backward_built: bool,
    recording: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
    fresh: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn,
) -> tuple[Timing, Callable[[], Any] | None]:
    """Forward+backward of a training graph: eager autograd against the build (AOTAutograd's
    forward and backward, what torch.compile runs in a training step), with gradients
    compared. Returns the timing and one compiled step (for profiling), None on failure.

    ``checker``: the build numerics are judged on (``build`` itself, or its fallback_random
    twin). Gradients are taken with ``torch.autograd.grad``, so no parameter's ``.grad`` changes.
    ``fresh``: wraps a side for the numerics runs (:meth:`Written.fresh`: the same input values).
    """
    inputs, device = subject.inputs, subject.device
    wrt = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
    try:
        with torch.enable_grad():
            # Fixed random cotangents: ones could hide a wrong reduction.
            outs = [t for t in tensors(subject.gm(*inputs)) if t.requires_grad]
            gen = torch.Generator(device=outs[0].device if outs else "cpu").manual_seed(SEED)
            cots = [torch.randn(t.shape, generator=gen, dtype=t.dtype, device=t.device) for t in outs]
            del outs

            def step(fn: Callable[..., Any]) -> Callable[[], tuple[torch.Tensor, ...]]:
                def go() -> tuple[torch.Tensor, ...]:
                    with torch.enable_grad():
                        got = [t for t in tensors(fn(*inputs)) if t.requires_grad]
                        grads = torch.autograd.grad(got, wrt, cots, allow_unused=True)
                    return tuple(torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads, strict=True))

                return go

            with builds.timed() if not backward_built else contextlib.nullcontext(), recording():
                step(build)()  # AOTAutograd compiles the backward on the first backward()
                subject.clock.sync()
            if checker is not build:  # its backward compiles on its first backward too
                with builds.timed():
                    seeded(step(checker), [], device)
            expected = seeded(step(fresh(subject.gm)), [], device)
            got = seeded(step(fresh(checker)), [], device)
            max_abs, _rel, grads_ok = compare_outputs(expected, got, opts.rtol, opts.atol)
            del expected, got
            eager, comp = interleaved(step(subject.gm), step(build), subject.clock, opts)
    except Exception as err:  # noqa: BLE001 - the forward numbers stand; say why backward is missing
        return replace(timing, train_error=what_raised(err)), None
    trained = replace(
        timing,
        train_eager_ms=eager.median,
        train_compiled_ms=comp.median,
        grads_checked=True,
        max_grad_err=max_abs,
        # Gradients are results too: wrong ones make the compiled graph wrong.
        numerics_ok=timing.numerics_ok and grads_ok,
    )
    return trained, step(build)
