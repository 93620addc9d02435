"""What compiling and running cost: compile seconds, per-graph and end-to-end timing against
eager, and compile coverage."""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._format import OVERHEAD_MS, ms, percent, plural, timer_resolution_ms
from dynscope._model.base import _brief

__all__ = ["CompileTime", "Coverage", "ModeTiming", "Timing", "TimingCost"]


def _below_resolution(device: str, eager_ms: float, compiled_ms: float, failed: bool) -> bool:
    if failed or eager_ms <= 0 or compiled_ms <= 0:
        return False
    return min(eager_ms, compiled_ms) < timer_resolution_ms(device)



@dataclass(frozen=True)
class CompileTime:
    """Seconds spent compiling; per frame or summed over a report."""

    # What the user waited for, as PyTorch totals it: the frame compile (Dynamo + backend,
    # compilation_metrics) plus AOTAutograd's lazy backward compile (``backward_s``).
    total_s: float = 0.0
    dynamo_s: float = 0.0  # tracing and guard building (frame compile - backend)
    backend_s: float = 0.0  # the backend (eager: almost nothing; inductor: most)
    inductor_s: float = 0.0  # Inductor's share of backend time, when PyTorch reports it
    # The backward graph's compile at the first backward() (PyTorch's "entire_backward_compile"
    # step; not in the frame compile), in total_s. 0.0 when none ran or none was logged.
    backward_s: float = 0.0
    # total_s by phase, in pipeline order ((phase, seconds): PyTorch's compile steps, from
    # chromium_event; or, when it logged none, "dynamo"/"backend"/"inductor" from
    # compilation_metrics). They add up to total_s. () in reports saved before dynscope had them.
    phases: tuple[tuple[str, float], ...] = ()
    # dynscope's own Inductor builds beyond torch.compile's for timing=True (summed over the
    # report's graphs and modes: Timing.build_s): not the user's compile, not in total_s.
    measure_s: float = 0.0
    measure_builds: int = 0  # how many builds measure_s is of


@dataclass(frozen=True)
class Timing:
    """Per-graph timing of one Inductor mode against eager (filled by ``timing=True``)."""

    mode: str  # "default", "max-autotune", ...
    device: str  # "cpu", "cuda:0"
    eager_ms: float = 0.0  # median eager time of one run
    compiled_ms: float = 0.0  # median compiled time of one run
    # Seconds to build what was timed: torch.compile's backend call for this graph
    # (AOTAutograd + Inductor, forward), or dynscope's own build with its first run.
    compile_s: float = 0.0
    max_abs_err: float = 0.0  # largest absolute difference between compiled and eager outputs
    max_rel_err: float = 0.0  # largest relative difference
    kernels: int = -1  # generated kernels, -1 when unknown
    eager_samples_ms: tuple[float, ...] = ()  # raw eager samples
    compiled_samples_ms: tuple[float, ...] = ()  # raw compiled samples
    error: str = ""  # why compiling or running failed; "" when it worked
    noisy: bool = False  # spread too wide to trust the medians
    spread: float = 0.0  # larger relative IQR (IQR / median) of the two sample sets
    numerics_ok: bool = True  # compiled outputs match eager (allclose; no new NaNs)
    # How numerics were checked: "default" (Inductor's normal config, same seed both sides)
    # or "fallback_random" (random ops compiled to eager's kernels, same seed; the times are
    # still those of the normal config); "" when not checked.
    numerics_mode: str = ""
    # A graph whose outputs needed gradients at capture (a training graph) is also timed
    # forward+backward: eager autograd against Inductor's AOTAutograd build. 0.0 when not.
    train_eager_ms: float = 0.0  # median eager forward+backward
    train_compiled_ms: float = 0.0  # median compiled forward+backward
    grads_checked: bool = False  # input/parameter gradients were compared with eager
    max_grad_err: float = 0.0  # largest absolute gradient difference
    train_error: str = ""  # why forward+backward could not be timed; "" when it was or was not tried
    # Every Inductor build dynscope made of this graph for this mode beyond torch.compile's
    # own (numerics builds for random ops, a backward the program never compiled, the graph
    # itself when torch.compile's run did not build it), compile and first run: dynscope's
    # own measurement cost, not the user's compile (Report.compile_time.measure_s adds them up).
    build_s: float = 0.0
    builds: int = 0  # how many builds build_s is of
    # The machine while timing: torch's intra-op threads, the cores this process may use, the
    # 1-minute load average (-1.0: unknown) and, when threads had to fight for cores, what
    # that means and the fix ("" when they did not, or in reports saved without these).
    threads: int = 0
    cores: int = 0
    load: float = -1.0
    contention: str = ""

    @property
    def speedup(self) -> float:
        """eager / compiled; 0.0 when not measured."""
        if self.error or self.compiled_ms <= 0:
            return 0.0
        return self.eager_ms / self.compiled_ms

    @property
    def failed(self) -> bool:
        """True when Inductor could not compile or run the graph."""
        return bool(self.error)

    def __repr__(self) -> str:
        if self.failed:
            return _brief("Timing", f"{self.mode} {self.device}: failed: {self.error}")
        text = f"eager {ms(self.eager_ms)}, compiled {ms(self.compiled_ms)}, {self.speedup:.2f}x"
        if self.train_speedup > 0:
            text += f", fwd+bwd {self.train_speedup:.2f}x"
        return _brief("Timing", f"{self.mode} {self.device}: {text}" + ("" if self.numerics_ok else ", numerics_ok=False"))

    @property
    def samples(self) -> int:
        """Samples behind the medians (the smaller side; 0 when not measured)."""
        return min(len(self.eager_samples_ms), len(self.compiled_samples_ms))

    @property
    def below_resolution(self) -> bool:
        """A median under what the clock can tell apart on this device (:func:`timer_resolution_ms`)."""
        return _below_resolution(self.device, self.eager_ms, self.compiled_ms, self.failed)

    @property
    def overhead_bound(self) -> bool:
        """Both medians so small that calling overhead, not the kernels, sets the ratio."""
        low, high = sorted((self.eager_ms, self.compiled_ms))
        return not self.failed and 0 < low and high < OVERHEAD_MS

    @property
    def doubtful(self) -> bool:
        """The speedup is not to be read as a fact: noisy, below resolution or overhead-bound."""
        return not self.failed and (self.noisy or self.below_resolution or self.overhead_bound)

    @property
    def trains(self) -> bool:
        """Forward+backward was timed, or tried and failed (``train_error``): a training graph."""
        return not self.failed and (self.train_compiled_ms > 0 or bool(self.train_error))

    @property
    def train_speedup(self) -> float:
        """Forward+backward eager / compiled; 0.0 when not measured."""
        if self.failed or self.train_error or self.train_compiled_ms <= 0:
            return 0.0
        return self.train_eager_ms / self.train_compiled_ms

    @property
    def train_doubtful(self) -> bool:
        """The forward+backward medians cannot be trusted: below timer resolution,
        overhead-bound, or faster than the forward alone (no samples are kept for them, so
        spread cannot be judged)."""
        if self.train_speedup <= 0:
            return False
        if self.train_eager_ms < self.eager_ms or self.train_compiled_ms < self.compiled_ms:
            return True  # forward+backward faster than the forward alone: not a measurement
        low, high = sorted((self.train_eager_ms, self.train_compiled_ms))
        return _below_resolution(self.device, low, high, False) or high < OVERHEAD_MS

    def backward_share(self, side: str) -> float:
        """The backward part of one training run: forward+backward minus forward, in ms.

        Args:
            side: "eager" or "compiled". 0.0 when forward+backward was not measured.
        """
        if self.train_speedup <= 0:
            return 0.0
        both, forward = (
            (self.train_eager_ms, self.eager_ms) if side == "eager" else (self.train_compiled_ms, self.compiled_ms)
        )
        return max(both - forward, 0.0)



@dataclass(frozen=True)
class Coverage:
    """Share of torch ops a call ran inside captured graphs (docs/report-model.md, "Coverage")."""

    ops_in_graphs: int  # ops executed inside captured graphs, summed over calls
    ops_eager: int  # torch ops executed eagerly between graphs
    eager_sites: tuple[tuple[str, int], ...] = ()  # ("file.py:LINE op", times), most first
    # Ops Dynamo's own runtime ran to call graphs (building their arguments, PyTorch's
    # "Pregraph bytecode"): not the user's eager work, not in the share either way.
    ops_dynamo: int = 0

    @property
    def ratio(self) -> float:
        """ops_in_graphs / all ops; 1.0 when nothing ran."""
        total = self.ops_in_graphs + self.ops_eager
        return 1.0 if total == 0 else self.ops_in_graphs / total

    def __repr__(self) -> str:
        return _brief(
            "Coverage",
            f"{percent(self.ratio)}: torch ops run {self.ops_in_graphs} in graphs, {self.ops_eager} eagerly "
            f"at {plural(len(self.eager_sites), 'site')}",
        )


@dataclass(frozen=True)
class ModeTiming:
    """End-to-end timing of the whole callable for one mode."""

    mode: str
    device: str
    eager_ms: float  # median eager time of one call
    compiled_ms: float  # median compiled time of one call
    first_call_s: float  # seconds of the first compiled call (compiling included)
    in_graphs_ms: float = 0.0  # of compiled_ms, the time inside captured graphs
    peak_mem_eager_mb: float = 0.0  # CUDA only, 0.0 elsewhere
    peak_mem_compiled_mb: float = 0.0
    eager_samples_ms: tuple[float, ...] = ()
    compiled_samples_ms: tuple[float, ...] = ()
    error: str = ""
    noisy: bool = False
    spread: float = 0.0  # larger relative IQR of the two sample sets

    @property
    def speedup(self) -> float:
        """eager / compiled; 0.0 when not measured."""
        return self.eager_ms / self.compiled_ms if self.compiled_ms > 0 and not self.error else 0.0

    def __repr__(self) -> str:
        if self.error:
            return _brief("ModeTiming", f"{self.mode} {self.device}: failed: {self.error}")
        return _brief(
            "ModeTiming",
            f"{self.mode} {self.device}: eager {ms(self.eager_ms)}, compiled {ms(self.compiled_ms)}, {self.speedup:.2f}x",
        )

    @property
    def in_graphs_share(self) -> float:
        """Share of the compiled call's time spent inside captured graphs (0..1)."""
        return min(self.in_graphs_ms / self.compiled_ms, 1.0) if self.compiled_ms > 0 else 0.0

    @property
    def in_graphs_overflows(self) -> bool:
        """The per-graph times add up to more than the whole compiled call.

        Each graph is timed on its own; its time times its runs can exceed the call it
        belongs to (isolated runs lose the real call's warm caches, or noise): the share
        is then capped at 1.0 and is not a measurement.
        """
        return not self.error and self.compiled_ms > 0 and self.in_graphs_ms > self.compiled_ms

    @property
    def samples(self) -> int:
        """Samples behind the medians (the smaller side; 0 when not measured)."""
        return min(len(self.eager_samples_ms), len(self.compiled_samples_ms))

    @property
    def below_resolution(self) -> bool:
        """A median under what the clock can tell apart on this device (:func:`timer_resolution_ms`)."""
        return _below_resolution(self.device, self.eager_ms, self.compiled_ms, bool(self.error))


@dataclass(frozen=True)
class TimingCost:
    """Where the wall time of ``report(timing=True)`` went, phase by phase: dynscope's own
    measurement, said apart from the user's compile (``Report.compile_time``).

    ``phases``: (phase, seconds) in the order they first ran, each counted once (a phase
    inside another pauses it):

    - "capture": the calls under dynscope's recording backend (eager), the report built;
    - "compile": torch.compile of the whole program with Inductor, its first call: every
      graph built once, as the user's compile builds it (``ModeTiming.first_call_s``);
    - "extra builds": Inductor builds beyond torch.compile's own (``CompileTime.measure_s``):
      numerics under eager's random numbers (graphs with random ops only), backward
      compiles of graphs the program never ran backward through, graphs torch.compile's
      run did not build;
    - "graph runs": per graph, numerics, warm-up and samples, forward and forward+backward;
    - "kernel profiling": the profiled runs that time each kernel;
    - "program runs": the whole program's samples, eager against compiled.
    """

    phases: tuple[tuple[str, float], ...] = ()
    reused: int = 0  # graph timings made on torch.compile's own build
    rebuilt: int = 0  # graph timings made on a build of dynscope's (torch.compile built no such graph)

    @property
    def total_s(self) -> float:
        """Seconds over all phases."""
        return sum(s for _, s in self.phases)

    def seconds(self, phase: str) -> float:
        """One phase's seconds; 0.0 when it did not run."""
        return sum(s for p, s in self.phases if p == phase)

    def __repr__(self) -> str:
        parts = ", ".join(f"{p} {s:.2f} s" for p, s in self.phases)
        return _brief("TimingCost", f"{self.total_s:.2f} s: {parts}" if parts else "nothing measured")
