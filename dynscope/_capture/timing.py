"""Time each captured graph and the whole program: eager against Inductor.

Per graph: the captured GraphModule runs eagerly and compiled by Inductor (once per
mode), on the real example inputs recorded at capture, on their device, forward only
under ``torch.no_grad()``. Eager and compiled runs are interleaved; warm-up runs are
dropped; medians and the interquartile spread are kept with the raw samples; on CUDA
each sample is timed with CUDA events after an L2 flush.

End to end: the whole callable, eager against ``torch.compile(model, mode=m)``,
interleaved the way PyTorch's own benchmark runner does (speedup = eager median /
compiled median), plus the first compiled call (compile included) and peak memory on CUDA.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.lowering import LoweringRecorder
from dynscope._capture.raised import what_raised
from dynscope._errors import InputError
from dynscope._format import plural
from dynscope._model import Graph, Lowering, ModeTiming, Report, Timing

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from dynscope._capture.backend import RecordedGraph

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_ONLY_MODES = ("reduce-overhead",)
#: A relative spread (IQR / median) above this makes a median untrustworthy.
NOISY_SPREAD = 0.25


@dataclass(frozen=True)
class Samples:
    """The timing samples of one side (eager or compiled) and what is derived from them.

    Attributes:
        ms: the raw samples, milliseconds per run, in the order taken.
        noisy_spread: ``noisy`` when ``spread`` exceeds this. Defaults to 0.25.
    """

    ms: tuple[float, ...]
    noisy_spread: float = NOISY_SPREAD

    @property
    def median(self) -> float:
        """The median sample; 0.0 when there is none (not measured)."""
        return statistics.median(self.ms) if self.ms else 0.0

    @property
    def spread(self) -> float:
        """Interquartile range / median; 0.0 under 4 samples (no quartiles to speak of)."""
        if len(self.ms) < 4:
            return 0.0
        q = statistics.quantiles(self.ms, n=4)
        med = self.median
        return (q[2] - q[0]) / med if med > 0 else 0.0

    @property
    def noisy(self) -> bool:
        """True when the spread is too wide to trust the median."""
        return self.spread > self.noisy_spread


def _sample_fields(eager: Samples, comp: Samples) -> dict[str, Any]:
    """The fields Timing and ModeTiming both fill from an eager and a compiled sample set."""
    return {
        "eager_ms": eager.median,
        "compiled_ms": comp.median,
        "eager_samples_ms": eager.ms,
        "compiled_samples_ms": comp.ms,
        # The measurement is as trustworthy as its noisier side.
        "noisy": eager.noisy or comp.noisy,
        "spread": max(eager.spread, comp.spread),
    }


@dataclass(frozen=True)
class TimingOptions:
    """How to time.

    Attributes:
        warmup: runs dropped before sampling. Defaults to 3.
        repeats: samples per side (eager, compiled) at most. Defaults to 30.
        min_time_s: stop sampling early once both sides have this much sampled time and
            at least 5 samples. Defaults to 0.2.
        min_sample_ms: on CPU, a sample loops the callable until it lasts this long and
            reports the time per run (timer resolution and jitter stay small against it).
            CUDA samples are one run each, after an L2 flush. Defaults to 10.0.
        noisy_spread: flag a measurement whose IQR / median exceeds this. Defaults to 0.25.
        rtol, atol: tolerance for compiled-vs-eager outputs. Defaults to 1e-3, 1e-4.
        interleave: alternate eager and compiled samples (PyTorch's runner does; drift
            then hits both sides alike). False samples all eager runs, then all compiled
            ones (each side then runs with warm caches and thread pools). Defaults to True.
        end_to_end: also time the whole callable. Defaults to True.
        backward: also time forward+backward of training graphs (outputs that needed
            gradients at capture) and compare gradients with eager. Defaults to True.
        cache_dir: Inductor's on-disk cache folder (a second report reuses compiled code);
            None keeps PyTorch's default (also cached). Defaults to None.
        progress: report progress on stderr; None: only when stderr is a terminal.
    """

    warmup: int = 3
    repeats: int = 30
    min_time_s: float = 0.2
    min_sample_ms: float = 10.0
    noisy_spread: float = NOISY_SPREAD
    interleave: bool = True
    rtol: float = 1e-3
    atol: float = 1e-4
    end_to_end: bool = True
    backward: bool = True
    cache_dir: str | None = None
    progress: bool | None = None


def validate_modes(modes: Sequence[str], device: str | None = None) -> tuple[str, ...]:
    """Check requested modes; CUDA-graph modes need a CUDA device."""
    if isinstance(modes, str):
        modes = (modes,)
    out = tuple(modes)
    if not out:
        raise InputError(f"modes is empty; choose from {', '.join(MODES)}")
    for m in out:
        if m not in MODES:
            raise InputError(f"unknown mode {m!r}; valid modes: {', '.join(MODES)}")
        if m in CUDA_ONLY_MODES and device is not None and not device.startswith("cuda"):
            raise InputError(
                f"mode {m!r} uses CUDA graphs and needs CUDA inputs; the inputs are on {device}. "
                f"On CPU use 'default' or 'max-autotune-no-cudagraphs'."
            )
    return out


def device_of(values: Any) -> str:
    """Device of the first tensor found in (nested) call arguments; "cpu" if none."""
    stack = [values]
    while stack:
        v = stack.pop(0)
        if isinstance(v, torch.Tensor):
            return str(v.device)
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return "cpu"


# -- measuring --------------------------------------------------------------------------------


class _Clock:
    """Times one run of a callable: perf_counter on CPU, CUDA events after an L2 flush on GPU."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self._flush = None
        if self.cuda:
            # 256 MB: larger than any current GPU's L2, so each sample starts cold.
            self._flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=device)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], Any], loops: int = 1) -> float:
        """Time per run, over ``loops`` back-to-back runs (CPU) or one run (CUDA)."""
        if self.cuda:
            assert self._flush is not None
            self._flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))
        begin = time.perf_counter()
        for _ in range(loops):
            fn()
        return (time.perf_counter() - begin) * 1000.0 / loops


def interleaved(
    eager: Callable[[], Any], compiled: Callable[[], Any], clock: _Clock, opts: TimingOptions
) -> tuple[Samples, Samples]:
    """Samples of both sides, alternating eager and compiled runs after a warm-up."""
    for _ in range(opts.warmup):
        eager()
        compiled()
    clock.sync()
    loops = 1
    if not clock.cuda:
        one = min(clock.time_ms(eager), clock.time_ms(compiled))
        loops = max(1, math.ceil(opts.min_sample_ms / max(one, 1e-6)))
    a: list[float] = []
    b: list[float] = []
    if not opts.interleave:
        a, b = _block(eager, clock, loops, opts), _block(compiled, clock, loops, opts)
    else:
        while len(a) < opts.repeats:
            a.append(clock.time_ms(eager, loops))
            b.append(clock.time_ms(compiled, loops))
            if len(a) >= 5 and min(sum(a), sum(b)) * loops >= opts.min_time_s * 1000:
                break
    return Samples(tuple(a), opts.noisy_spread), Samples(tuple(b), opts.noisy_spread)


def _block(fn: Callable[[], Any], clock: _Clock, loops: int, opts: TimingOptions) -> list[float]:
    """Samples of one side back to back, after a warm-up of its own."""
    for _ in range(opts.warmup):
        fn()
    out: list[float] = []
    while len(out) < opts.repeats:
        out.append(clock.time_ms(fn, loops))
        if len(out) >= 5 and sum(out) * loops >= opts.min_time_s * 1000:
            break
    return out


def compare_outputs(expected: Any, got: Any, rtol: float, atol: float) -> tuple[float, float, bool]:
    """(max abs error, max relative error, outputs match) over all tensor outputs."""
    exp = [t for t in _tensors(expected)]
    out = [t for t in _tensors(got)]
    if len(exp) != len(out):
        return math.inf, math.inf, False
    max_abs = max_rel = 0.0
    ok = True
    for e, g in zip(exp, out, strict=True):
        if e.shape != g.shape:
            return math.inf, math.inf, False
        if not (e.is_floating_point() or e.is_complex()):
            same = bool(torch.equal(e, g))
            ok &= same
            max_abs = max(max_abs, 0.0 if same else math.inf)
            continue
        e64, g64 = e.detach().double(), g.detach().double()
        if bool((torch.isnan(g64) & ~torch.isnan(e64)).any()):
            return math.nan, math.nan, False  # compiled made NaNs eager did not
        both = ~(torch.isnan(e64) | torch.isnan(g64))
        diff = (e64 - g64).abs()[both]
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
            max_rel = max(max_rel, float((diff / (e64.abs()[both] + 1e-12)).max()))
        ok &= bool(torch.allclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True))
    return max_abs, max_rel, ok


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _progress(opts: TimingOptions) -> Callable[[str], None]:
    show = opts.progress if opts.progress is not None else sys.stderr.isatty()
    if not show:
        return lambda _msg: None
    return lambda msg: print(f"dynscope timing: {msg}", file=sys.stderr, flush=True)


# -- the machine ---------------------------------------------------------------------------


def contention(threads: int, cores: int, load: float) -> str:
    """What it means for timing that torch runs ``threads`` intra-op threads on ``cores``
    cores under a 1-minute ``load`` average (-1.0: unknown); "" when the threads have the
    cores to themselves.

    The load average counts this process's own running thread, so one unit of it is
    dynscope's; the rest is other work. Threads fight for cores when there are more of them
    than cores, or when they and the other work ask for over 1.25 times the cores: OpenMP's
    threads then wait for each other at every op, and a graph timed alone can read many
    times slower than it runs (not cold caches: with one thread the figures agree).
    """
    if threads <= 0 or cores <= 0:
        return ""
    others = max(load - 1.0, 0.0) if load >= 0 else 0.0
    if threads <= cores and threads + others <= cores * 1.25:
        return ""
    on = f"torch uses {plural(threads, 'thread')} on {plural(cores, 'core')}"
    if load >= 0:
        on += f" with load {load:.1f}"
    # One thread has nothing to give back: only a quieter machine helps.
    fix = "set OMP_NUM_THREADS=1 or torch.set_num_threads(1), or run on a quiet machine" if threads > 1 else (
        "run on a quiet machine"
    )
    return f"{on}: timings fight for cores (medians read slow and spread wide); {fix}"


@dataclass(frozen=True)
class Machine:
    """The machine's figures for timing (see :func:`contention`)."""

    threads: int
    cores: int
    load: float

    @property
    def contention(self) -> str:
        """What these figures mean for timing (:func:`contention`); "" when nothing."""
        return contention(self.threads, self.cores, self.load)

    def fields(self) -> dict[str, Any]:
        """The Timing fields these figures fill."""
        return {"threads": self.threads, "cores": self.cores, "load": self.load, "contention": self.contention}


def read_machine() -> Machine:
    """torch's intra-op thread count, the cores this process may run on (its CPU affinity,
    else the machine's count) and the 1-minute load average (-1.0 where the OS has none)."""
    affinity = getattr(os, "sched_getaffinity", None)
    cores = len(affinity(0)) if affinity is not None else (os.cpu_count() or 0)
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows; a system that does not say
        load = -1.0
    return Machine(threads=torch.get_num_threads(), cores=cores, load=load)


class _Builds:
    """Adds up the Inductor builds dynscope makes of one graph (its own measurement cost)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0

    @contextlib.contextmanager
    def timed(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
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


# -- per graph -----------------------------------------------------------------------------


def time_graph(rec: RecordedGraph, mode: str, opts: TimingOptions) -> Timing:
    """Time one captured graph eagerly and through Inductor in one mode."""
    return time_graph_lowered(rec, mode, opts)[0]


def time_graph_lowered(
    rec: RecordedGraph,
    mode: str,
    opts: TimingOptions,
    graph: Graph | None = None,
    *,
    machine: Machine | None = None,
) -> tuple[Timing, Lowering | None]:
    """Time one captured graph, and with ``graph`` (its report entry) also read its lowering:
    the timed build's AOT graphs and kernels, each kernel timed by the profiler on that build.
    ``machine``: the figures to record (threads, cores, load); read now when None."""
    inputs = fresh_inputs(rec.example_inputs)
    machine = machine or read_machine()
    builds = _Builds()
    device = device_of(inputs)
    clock = _Clock(device)
    recorder = LoweringRecorder() if graph is not None else None
    # A graph Dynamo made dynamic is compiled dynamic too, and timed at the recorded sizes.
    symbolic = rec.module if rec.dynamic else None
    try:
        gm = copy.deepcopy(rec.module)  # Inductor's passes may rewrite the module
        with torch.no_grad():
            kernels_before = _torch.kernel_count()
            with builds.timed(), recorder.recording() if recorder is not None else contextlib.nullcontext():
                compiled = _torch.inductor_compile(copy.deepcopy(rec.module), inputs, mode, symbolic_from=symbolic)
                compiled(*inputs)  # the first run (autotuning, loading) is part of the compile cost
                clock.sync()
            compile_s = builds.seconds
            kernels = _torch.kernel_count() - kernels_before if kernels_before >= 0 else -1
            numerics_mode = "default"
            checker = compiled
            if _is_random(gm, inputs, device):
                # Inductor draws random numbers its own way (philox): even under one seed its
                # dropout masks are not eager's. Judge numerics on a build whose random ops
                # call eager's kernels; the times below stay those of the normal build.
                numerics_mode = "fallback_random"
                with builds.timed():
                    checker = _torch.inductor_compile(
                        copy.deepcopy(rec.module), inputs, mode, symbolic_from=symbolic, eager_random=True
                    )
                    _seeded(checker, inputs, device)  # its first run, as for the timed build
            expected = _seeded(gm, inputs, device)
            got = _seeded(checker, inputs, device)
    except Exception as err:  # noqa: BLE001 - reported in the timing, the report goes on
        # Nothing was compared: a failed graph never claims matching numerics.
        return (
            Timing(mode=mode, device=device, error=what_raised(err), numerics_ok=False, **builds.fields(), **machine.fields()),
            None,
        )
    max_abs, max_rel, ok = compare_outputs(expected, got, opts.rtol, opts.atol)
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

    def call() -> Any:
        with torch.no_grad():
            return compiled(*inputs)

    try:
        with torch.no_grad():
            eager, comp = interleaved(lambda: gm(*inputs), call, clock, opts)
    except Exception as err:  # noqa: BLE001
        return Timing(**checked, error=what_raised(err), **builds.fields()), None
    timing = Timing(**checked, kernels=kernels, **_sample_fields(eager, comp))
    lowering = None
    if recorder is not None and graph is not None:
        lowering = _lowering_with_kernel_times(recorder, graph, call, timing)
    if opts.backward and rec.trains:
        timing, trained = _time_training(timing, rec, gm, inputs, opts, clock, builds, symbolic=symbolic, graph=graph)
        lowering = trained or lowering
    return replace(timing, **builds.fields()), lowering


#: Profiling a build: at least this many runs, and about this much time in all.
_PROFILE_RUNS = 3
_PROFILE_MS = 50.0


def _lowering_with_kernel_times(
    recorder: LoweringRecorder,
    graph: Graph,
    run: Callable[[], Any],
    timing: Timing,
    per_run_ms: float | None = None,
) -> Lowering | None:
    """The recorded lowering, its kernels timed by profiling ``run`` (one run of the build)."""
    notes: list[str] = []
    times = None
    units = recorder.kernel_units()
    if units and any(units):
        if _torch.profiler_running():
            notes.append("kernel times not measured: a profiler of yours was running")
        else:
            ms = per_run_ms if per_run_ms is not None else timing.compiled_ms
            runs = min(50, max(_PROFILE_RUNS, math.ceil(_PROFILE_MS / max(ms, 1e-3))))
            try:
                times = _torch.kernel_times(run, units, runs, cuda=timing.device.startswith("cuda"))
            except Exception as err:  # noqa: BLE001 - the lowering stands without times
                notes.append(f"kernel times not measured: {what_raised(err)}")
            else:
                if times.calls != runs * len(units):
                    notes.append(
                        f"the profiler saw {times.calls} graph calls for {runs} runs of {len(units)} compiled "
                        "graph(s): kernel times may be incomplete"
                    )
    measured = per_run_ms if per_run_ms is not None else timing.compiled_ms
    return recorder.lowering(
        graph,
        mode=timing.mode,
        source="timing",
        times=times,
        measured_ms=measured if measured > 0 else None,
        notes=notes,
    )


def _time_training(
    timing: Timing,
    rec: RecordedGraph,
    gm: Callable[..., Any],
    inputs: list[Any],
    opts: TimingOptions,
    clock: _Clock,
    builds: _Builds,
    *,
    symbolic: Any,
    graph: Graph | None = None,
) -> tuple[Timing, Lowering | None]:
    """Forward+backward of a training graph: eager autograd against Inductor's AOTAutograd
    build (what torch.compile runs in a training step), with gradients compared. With
    ``graph``, also the build's lowering (forward and backward kernels, timed).

    Gradients are taken with ``torch.autograd.grad``, so no parameter's ``.grad`` changes.
    """
    wrt = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
    if not wrt:
        return timing, None
    random = timing.numerics_mode == "fallback_random"
    recorder = LoweringRecorder() if graph is not None else None
    lowering = None
    try:
        with torch.enable_grad():
            # Fixed random cotangents: ones could hide a wrong reduction.
            outs = [t for t in _tensors(gm(*inputs)) if t.requires_grad]
            gen = torch.Generator(device=outs[0].device if outs else "cpu").manual_seed(_SEED)
            cots = [torch.randn(t.shape, generator=gen, dtype=t.dtype, device=t.device) for t in outs]

            def step(fn: Callable[..., Any]) -> Callable[[], tuple[torch.Tensor, ...]]:
                def go() -> tuple[torch.Tensor, ...]:
                    got = [t for t in _tensors(fn(*inputs)) if t.requires_grad]
                    grads = torch.autograd.grad(got, wrt, cots, allow_unused=True)
                    return tuple(torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads, strict=True))

                return go

            # AOTAutograd compiles the backward on the first backward(): record through it.
            with builds.timed(), recorder.recording() if recorder is not None else contextlib.nullcontext():
                build = _torch.inductor_compile(copy.deepcopy(rec.module), inputs, timing.mode, symbolic_from=symbolic)
                step(build)()
            checker = build
            if random:  # the same reasoning as for outputs: judge gradients under eager's RNG
                with builds.timed():
                    checker = _torch.inductor_compile(
                        copy.deepcopy(rec.module), inputs, timing.mode, symbolic_from=symbolic, eager_random=True
                    )
                    _seeded(step(checker), [], timing.device)  # its first run compiles its backward
            expected = _seeded(step(gm), [], timing.device)
            got = _seeded(step(checker), [], timing.device)
            max_abs, _rel, grads_ok = compare_outputs(expected, got, opts.rtol, opts.atol)
            eager, comp = interleaved(step(gm), step(build), clock, opts)
            if recorder is not None and graph is not None:
                lowering = _lowering_with_kernel_times(recorder, graph, step(build), timing, per_run_ms=comp.median)
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
    return trained, lowering


#: The seed both sides of a numerics check run under.
_SEED = 0


def _seeded(fn: Callable[..., Any], inputs: list[Any], device: str, seed: int = _SEED) -> Any:
    """``fn(*inputs)`` under ``torch.manual_seed(seed)``; the RNG state is restored after."""
    with torch.random.fork_rng(devices=_cuda_devices(device)):
        torch.manual_seed(seed)
        return fn(*inputs)


def _cuda_devices(device: str) -> list[int]:
    # manual_seed seeds every CUDA device, so every initialised one is restored.
    if device.startswith("cuda") or torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


def _is_random(gm: Callable[..., Any], inputs: list[Any], device: str) -> bool:
    """True when the graph draws random numbers: two seeds give different outputs."""
    first = _seeded(gm, inputs, device, _SEED)
    second = _seeded(gm, inputs, device, _SEED + 1)
    return not compare_outputs(first, second, 0.0, 0.0)[2]


# -- end to end --------------------------------------------------------------------------------


def time_end_to_end(
    model: Callable[..., Any],
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
    mode: str,
    opts: TimingOptions,
    in_graphs_ms: float,
) -> ModeTiming:
    """The whole callable over all calls, eager against torch.compile(mode=...)."""
    device = device_of([c[0] for c in calls] + [c[1] for c in calls])
    clock = _Clock(device)

    def run(fn: Callable[..., Any]) -> Callable[[], None]:
        def go() -> None:
            for args, kwargs in calls:
                fn(*args, **kwargs)

        return go

    eager_fn = run(model)
    try:
        # No torch.no_grad() here: the callable runs as the user wrote it, so a training
        # step's loss.backward() works and grad mode is the model code's own choice.
        with _torch.DynamoSandbox() as sandbox:
            compiled_model = torch.compile(model, mode=None if mode == "default" else mode, **_torch.compile_kwargs())
            sandbox.own(compiled_model)
            start = time.perf_counter()
            run(compiled_model)()
            clock.sync()
            first_call_s = time.perf_counter() - start
            peak_eager = peak_compiled = 0.0
            if clock.cuda:
                peak_eager = _peak_mb(eager_fn)
                peak_compiled = _peak_mb(run(compiled_model))
            eager, comp = interleaved(eager_fn, run(compiled_model), clock, opts)
    except Exception as err:  # noqa: BLE001
        return ModeTiming(mode, device, 0.0, 0.0, 0.0, error=what_raised(err))
    return ModeTiming(
        mode=mode,
        device=device,
        first_call_s=first_call_s,
        in_graphs_ms=in_graphs_ms,
        peak_mem_eager_mb=peak_eager,
        peak_mem_compiled_mb=peak_compiled,
        **_sample_fields(eager, comp),
    )


def _peak_mb(fn: Callable[[], None]) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


# -- the report --------------------------------------------------------------------------------


def time_report(
    rep: Report,
    model: Callable[..., Any],
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
    recorded: list[RecordedGraph],
    *,
    modes: Sequence[str],
    options: TimingOptions | None = None,
) -> Report:
    """The report with per-graph and end-to-end timing filled in."""
    opts = options or TimingOptions()
    device = device_of([c[0] for c in calls] + [c[1] for c in calls])
    mode_list = validate_modes(modes, device)
    say = _progress(opts)
    # Matched by the live GraphModule: compile ids in the report are renumbered.
    by_module = {id(r.module): r for r in recorded}
    # Read before dynscope's own builds: their compile workers would count as load.
    machine = read_machine()
    graphs: list[Graph] = []
    # Timing runs random ops (dropout) many times: leave the user's RNG streams as found.
    with _torch.inductor_cache_dir(opts.cache_dir), torch.random.fork_rng(devices=_cuda_devices(device)):
        for g in rep.graphs:
            rec = by_module.get(id(g.module)) if g.module is not None else None
            if rec is None:
                graphs.append(g)
                continue
            timings = []
            lowering = None
            for i, mode in enumerate(mode_list):
                say(f"graph {g.id + 1}/{rep.graph_count} ({g.frame}), mode {mode}")
                # The lowering shown is that of the first mode's build.
                timing, lowered = time_graph_lowered(rec, mode, opts, g if i == 0 else None, machine=machine)
                timings.append(timing)
                lowering = lowering or lowered
            graphs.append(replace(g, timings=tuple(timings), lowering=lowering or g.lowering))
        e2e: list[ModeTiming] = []
        if opts.end_to_end:
            for mode in mode_list:
                say(f"whole program, mode {mode}")
                # Forward runs, plus the backward of each run whose backward ran (a step).
                _, in_graphs, _ = replace(rep, graphs=tuple(graphs)).graphs_ms(mode)
                e2e.append(time_end_to_end(model, calls, mode, opts, in_graphs))
    timings = [t for g in graphs for t in g.timings]
    # dynscope's own builds, apart from the user's compile (compile_time.total_s).
    compile_time = replace(
        rep.compile_time, measure_s=sum(t.build_s for t in timings), measure_builds=sum(t.builds for t in timings)
    )
    notes = rep.notes + ((machine.contention,) if machine.contention and timings else ())
    return replace(rep, graphs=tuple(graphs), timing=tuple(e2e), compile_time=compile_time, notes=notes)
