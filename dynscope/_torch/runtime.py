"""The timing runtime: one copy of the code that samples eager against compiled.

dynscope's own timing (``dynscope._capture.sampling``) runs it, and every standalone script
``Graph.to_script`` writes carries its source text verbatim (read as a package resource by
``dynscope/_render/script.py``), so a script times a graph with exactly the code dynscope
timed it with. Hence the rule for this file: it imports the standard library and torch,
nothing of dynscope (tests/torch/test_runtime.py checks it), and it uses no ``from __future__``
import (the text runs in the middle of a script, where one is a syntax error).

What it holds: the sampling defaults; the clock (``perf_counter`` over loops on CPU, CUDA
events after an L2 flush on GPU); interleaved (or back-to-back) samples after a warm-up,
their median and spread; seeding and the CUDA devices it touches; output comparison; and,
for the scripts, inputs made from recorded specs, the Inductor compile of a rebuilt graph
(``compile_fx`` with ``list_mode_options``, a ``ShapeEnv`` for symbolic sizes; torch 2.11+),
and the command line that runs it all and prints the figures in a fixed form.
"""

import argparse
import copy
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

# -- how to sample: the defaults of TimingOptions and of a script's command line ----------------

WARMUP = 3  # runs dropped before sampling
REPEATS = 30  # samples per side at most
MIN_TIME_S = 0.2  # stop once both sides have this much sampled time (and 5 samples)
MIN_SAMPLE_MS = 10.0  # CPU: a sample loops the callable at least this long
NOISY_SPREAD = 0.25  # a relative spread (IQR / median) above this makes a median untrustworthy
RTOL, ATOL = 1e-3, 1e-4  # compiled-vs-eager output tolerance
#: The seed both sides of a numerics check run under.
SEED = 0


class SamplingOptions(Protocol):
    """What sampling reads of its options (dynscope's TimingOptions, a script's arguments)."""

    @property
    def warmup(self) -> int: ...
    @property
    def repeats(self) -> int: ...
    @property
    def min_time_s(self) -> float: ...
    @property
    def min_sample_ms(self) -> float: ...
    @property
    def interleave(self) -> bool: ...


# -- the clock and the samples ----------------------------------------------------------------


class Clock:
    """Times one run of a callable: perf_counter on CPU, CUDA events after an L2 flush on GPU."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.cuda = device.startswith("cuda")
        self._flush: torch.Tensor | None = None
        if self.cuda:
            # 256 MB: larger than any current GPU's L2, so each sample starts cold.
            self._flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device=device)

    def sync(self) -> None:
        """Wait for the device's queued work (nothing to wait for on CPU)."""
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


#: Asked after each sample with the count taken so far: True stops sampling there.
Stop = Callable[[int], bool]


def interleaved(
    eager: Callable[[], Any], compiled: Callable[[], Any], clock: Clock, opts: SamplingOptions,
    stop: Stop | None = None,
) -> tuple[list[float], list[float]]:
    """Samples (ms per run) of both sides after a warm-up: eager and compiled alternating, or
    (``opts.interleave`` False) all eager runs, then all compiled ones."""
    for _ in range(opts.warmup):
        eager()
        compiled()
    clock.sync()
    loops = 1
    if not clock.cuda:  # loops decided once, from the faster side's single run
        one = min(clock.time_ms(eager), clock.time_ms(compiled))
        loops = max(1, math.ceil(opts.min_sample_ms / max(one, 1e-6)))
    if not opts.interleave:
        return _block(eager, clock, loops, opts, stop), _block(compiled, clock, loops, opts, stop)
    a: list[float] = []
    b: list[float] = []
    while len(a) < opts.repeats:
        a.append(clock.time_ms(eager, loops))
        b.append(clock.time_ms(compiled, loops))
        if len(a) >= 5 and min(sum(a), sum(b)) * loops >= opts.min_time_s * 1000:
            break
        if stop is not None and stop(len(a)):
            break
    return a, b


def _block(
    fn: Callable[[], Any], clock: Clock, loops: int, opts: SamplingOptions, stop: Stop | None
) -> list[float]:
    """Samples of one side back to back, after a warm-up of its own."""
    for _ in range(opts.warmup):
        fn()
    out: list[float] = []
    while len(out) < opts.repeats:
        out.append(clock.time_ms(fn, loops))
        if len(out) >= 5 and sum(out) * loops >= opts.min_time_s * 1000:
            break
        if stop is not None and stop(len(out)):
            break
    return out


def median(xs: tuple[float, ...] | list[float]) -> float:
    """The median sample; 0.0 when there is none (not measured)."""
    return statistics.median(xs) if xs else 0.0


def spread(xs: tuple[float, ...] | list[float]) -> float:
    """Interquartile range / median; 0.0 under 4 samples (no quartiles to speak of)."""
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    m = median(xs)
    return (q[2] - q[0]) / m if m > 0 else 0.0


# -- seeds and numerics -----------------------------------------------------------------------


def cuda_devices(device: str) -> list[int]:
    """The CUDA devices a seeded run must restore: manual_seed seeds every CUDA device, so
    every initialised one."""
    if device.startswith("cuda") or torch.cuda.is_initialized():
        return list(range(torch.cuda.device_count()))
    return []


def seeded(fn: Callable[..., Any], inputs: list[Any], device: str, seed: int = SEED) -> Any:
    """``fn(*inputs)`` under ``torch.manual_seed(seed)``; the RNG state is restored after."""
    with torch.random.fork_rng(devices=cuda_devices(device)):
        torch.manual_seed(seed)
        return fn(*inputs)


def tensors(value: Any) -> list[torch.Tensor]:
    """The tensors in a (nested) output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def compare_outputs(expected: Any, got: Any, rtol: float = RTOL, atol: float = ATOL) -> tuple[float, float, bool]:
    """(max abs error, max relative error, outputs match within rtol/atol) over all tensor outputs."""
    exp, out = tensors(expected), tensors(got)
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


def is_random(gm: Callable[..., Any], inputs: list[Any], device: str) -> bool:
    """True when the graph draws random numbers: two seeds give different outputs."""
    first = seeded(gm, inputs, device, SEED)
    second = seeded(gm, inputs, device, SEED + 1)
    return not compare_outputs(first, second, 0.0, 0.0)[2]


# -- a script's graph: what the report recorded, inputs from it, Inductor's build ----------------


@dataclass(frozen=True)
class Recorded:
    """What a dynscope report recorded of one graph, as a script writes it down.

    Attributes:
        graph, frame, nodes: the graph's id, its frame, its node count.
        torch: the report's torch version ("" when not known).
        mode, timing: the Inductor mode and whether to time by default.
        grad_enabled: the grad mode Dynamo compiled the graph in.
        device, threads: where it ran; torch's threads when timed (0: not known).
        sizes: symbolic sizes -> the sizes the compiling call ran at.
        int_high: integer tensors get values in [0, int_high).
        inputs: one spec per input (kind, shape, stride, dtype, device, requires_grad, role).
        report: the report's figures for this mode (None: not timed).
    """

    graph: int
    frame: str
    torch: str
    mode: str
    timing: bool
    grad_enabled: bool
    device: str
    threads: int
    nodes: int
    sizes: dict[str, int]
    int_high: int
    inputs: list[dict[str, Any]]
    report: dict[str, Any] | None


#: Functions sympy's printing of a symbolic size may use (``Max(1, s0)``).
SIZE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "Max": torch.sym_max, "Min": torch.sym_min, "Mod": lambda a, b: a % b, "FloorDiv": lambda a, b: a // b,
}


def size(entry: Any, sizes: dict[str, Any]) -> Any:
    """One recorded size or stride: an int, or an expression of symbols ("s77", "16*s77")."""
    if isinstance(entry, int):
        return entry
    # Only names of sizes and SIZE_FUNCTIONS are in scope; the script checked the code it runs.
    return eval(entry, {"__builtins__": {}, **SIZE_FUNCTIONS}, dict(sizes))


def make_tensor(spec: dict[str, Any], gen: torch.Generator, device: str, rec: Recorded) -> torch.Tensor:
    """One input tensor from its spec: random data from ``gen``, the recorded strides."""
    shape = [size(d, rec.sizes) for d in spec["shape"]]
    stride = [size(s, rec.sizes) for s in spec["stride"]] if spec["stride"] else None
    if stride is None:  # not recorded: contiguous
        stride, step = [], 1
        for d in reversed(shape):
            stride.insert(0, step)
            step *= max(d, 1)
    # Enough storage for the recorded strides (overlapping or expanded ones included).
    n = 0 if any(d == 0 for d in shape) else 1 + sum((d - 1) * s for d, s in zip(shape, stride, strict=False))
    dtype = getattr(torch, spec["dtype"])
    if dtype == torch.bool:
        base = torch.rand(n, generator=gen) < 0.5
    elif not (dtype.is_floating_point or dtype.is_complex):
        base = torch.randint(0, rec.int_high, (n,), generator=gen).to(dtype)
    elif spec["role"] == "param":
        bound = 1.0 / math.sqrt(shape[-1]) if len(shape) > 1 and shape[-1] > 0 else 0.1
        base = ((torch.rand(n, generator=gen) * 2 - 1) * bound).to(dtype)
    elif spec["role"] == "buffer":
        base = (torch.rand(n, generator=gen) + 0.5).to(dtype)  # running variances stay positive
    else:
        base = torch.randn(n, generator=gen).to(dtype)
    t = base.to(device).as_strided(shape, stride).detach()
    return t.requires_grad_(True) if spec["requires_grad"] else t


def make_inputs(rec: Recorded, device: str) -> list[Any]:
    """The graph's inputs: random tensors (seed 0), Python scalars, symbolic sizes as they ran."""
    gen = torch.Generator().manual_seed(SEED)
    out: list[Any] = []
    for spec in rec.inputs:
        if spec["kind"] == "tensor":
            out.append(make_tensor(spec, gen, device, rec))
        elif spec["kind"] == "symint":
            out.append(rec.sizes[spec["value"]])
        else:
            out.append(spec["value"])
    return out


def symbolic(spec: dict[str, Any]) -> bool:
    """True for an input with a symbolic size (a SymInt, or a tensor with a symbolic dim or stride)."""
    return spec["kind"] == "symint" or (
        spec["kind"] == "tensor" and any(isinstance(d, str) for d in (*spec["shape"], *spec["stride"])))


def symbolic_inputs(rec: Recorded, real: list[Any]) -> list[Any]:
    """Fake inputs with the recorded symbolic sizes in a fresh shape environment (one symbol
    per recorded symbol, hinted at the size it ran at), so Inductor compiles the graph
    dynamic as Dynamo's own compile did."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv(duck_shape=False)
    fake_mode = FakeTensorMode(shape_env=env)
    syms = {}
    for name, value in rec.sizes.items():
        sym = env.create_symbol(value, source=ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
        syms[name] = env.create_symintnode(sym, hint=value)
    out: list[Any] = []
    for spec, value in zip(rec.inputs, real, strict=False):
        if spec["kind"] == "symint":
            out.append(syms[spec["value"]])
        elif spec["kind"] == "tensor" and symbolic(spec):
            with fake_mode:
                out.append(torch.empty_strided(
                    [size(d, syms) for d in spec["shape"]], [size(s, syms) for s in spec["stride"]],
                    dtype=value.dtype, device=value.device, requires_grad=value.requires_grad))
        elif isinstance(value, torch.Tensor):
            out.append(fake_mode.from_tensor(value, static_shapes=True))
        else:
            out.append(value)
    return out


def compile_graph(
    rec: Recorded, gm: torch.fx.GraphModule, inputs: list[Any], mode: str, eager_random: bool = False
) -> Callable[..., Any]:
    """Inductor's build of the graph, as torch.compile(mode=...) makes it in the recorded grad mode."""
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    patches = dict(list_mode_options(mode) or {})
    if eager_random:  # random ops call eager's kernels: one seed, one mask (numerics only)
        patches["fallback_random"] = True
    example = inputs
    if any(symbolic(s) for s in rec.inputs):
        try:
            example = symbolic_inputs(rec, inputs)
        except Exception as err:  # noqa: BLE001 -- a torch whose shape environment changed: compile static
            print(f"note: compiled static at the recorded sizes; symbolic inputs failed: {err!r}", file=sys.stderr)
    with torch.set_grad_enabled(rec.grad_enabled):
        compiled: Any = compile_fx(copy.deepcopy(gm), example, config_patches=patches)
    return compiled


# -- a script's command line: compile, check, time, print ---------------------------------------


def parse_args(rec: Recorded, argv: list[str] | None) -> argparse.Namespace:
    """A script's options; their defaults are the report's and dynscope's."""
    p = argparse.ArgumentParser(description=f"Graph {rec.graph} ({rec.frame}) of a dynscope report: eager against Inductor.")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of the text lines")
    p.add_argument("--mode", default=rec.mode, help=f"Inductor mode (default: {rec.mode}, the report's)")
    p.add_argument("--timing", action=argparse.BooleanOptionalAction, default=rec.timing,
                   help="time eager against Inductor (--no-timing: compile and check numerics only)")
    p.add_argument("--repeats", type=int, default=REPEATS, help=f"samples per side at most (default {REPEATS})")
    p.add_argument("--warmup", type=int, default=WARMUP, help=f"warm-up runs per side (default {WARMUP})")
    p.add_argument("--min-time-s", type=float, default=MIN_TIME_S,
                   help=f"stop once both sides have this much (default {MIN_TIME_S:g})")
    p.add_argument("--min-sample-ms", type=float, default=MIN_SAMPLE_MS,
                   help=f"CPU: loop each sample this long (default {MIN_SAMPLE_MS:g})")
    p.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=True,
                   help="alternate eager and compiled samples (--no-interleave: all eager runs, then all compiled)")
    p.add_argument("--threads", type=int, default=rec.threads,
                   help=f"torch threads (default {rec.threads}, the report's; 0: torch's own choice)")
    p.add_argument("--device", default=rec.device, help=f"device to run on (default {rec.device}, where it ran)")
    p.add_argument("--no-backward", action="store_true", help="do not time forward+backward of a training graph")
    return p.parse_args(argv)


def main(
    rec: Recorded, build: Callable[[], torch.fx.GraphModule], human_ms: Callable[[float], str],
    argv: list[str] | None = None,
) -> int:
    """Run a script: rebuild the graph, compile it, check numerics, time it, print the figures;
    0 when numerics match, else 1."""
    opts = parse_args(rec, argv)
    if opts.threads > 0:
        torch.set_num_threads(opts.threads)
    device = opts.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"graph {rec.graph} ran on {rec.device} and this machine has no CUDA device; try --device cpu")
    gm = build()
    nodes = len(gm.graph.nodes)
    if rec.nodes and nodes != rec.nodes:
        print(f"warning: the rebuilt graph has {nodes} nodes, the report's {rec.nodes}", file=sys.stderr)
    inputs = make_inputs(rec, device)
    clock = Clock(device)

    def eager() -> Any:
        return gm(*inputs)

    start = time.perf_counter()
    compiled_fn = compile_graph(rec, gm, inputs, opts.mode)
    with torch.set_grad_enabled(rec.grad_enabled):
        compiled_fn(*inputs)  # the first run (autotuning, loading) is part of the compile
    clock.sync()
    compile_s = time.perf_counter() - start

    def compiled() -> Any:
        return compiled_fn(*inputs)

    with torch.set_grad_enabled(rec.grad_enabled):
        # A graph that draws random numbers (two seeds differ) is judged on a build whose random
        # ops call eager's kernels; the times stay those of the normal build.
        draws_random = is_random(gm, inputs, device)
        checker = compiled
        if draws_random:
            checker_fn = compile_graph(rec, gm, inputs, opts.mode, eager_random=True)
            seeded(checker_fn, inputs, device)

            def fallback_build() -> Any:
                return checker_fn(*inputs)

            checker = fallback_build
        max_abs, max_rel, ok = compare_outputs(seeded(eager, [], device), seeded(checker, [], device))
        out: dict[str, Any] = {
            "graph": rec.graph, "mode": opts.mode, "device": device, "threads": torch.get_num_threads(),
            "torch": torch.__version__, "compile_s": compile_s, "numerics_ok": ok, "max_abs_err": max_abs,
            "max_rel_err": max_rel, "numerics_mode": "fallback_random" if draws_random else "default"}
        if opts.timing:
            a, b = interleaved(eager, compiled, clock, opts)
            out.update(eager_ms=median(a), compiled_ms=median(b), samples=len(a),
                       spread=max(spread(a), spread(b)), eager_samples_ms=a, compiled_samples_ms=b)
            out["speedup"] = out["eager_ms"] / out["compiled_ms"] if out["compiled_ms"] > 0 else 0.0
        wrt = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
        needs = [t for t in tensors(eager()) if t.requires_grad] if rec.grad_enabled and wrt else []
    if needs and not opts.no_backward:
        out.update(train(eager, compiled, checker, wrt, needs, clock, opts, device))
        out["numerics_ok"] = ok = ok and out["grads_ok"]
    print_figures(rec, out, opts, human_ms)
    return 0 if ok else 1


def train(
    eager: Callable[[], Any], compiled: Callable[[], Any], checker: Callable[[], Any], wrt: list[torch.Tensor],
    needs: list[torch.Tensor], clock: Clock, opts: Any, device: str,
) -> dict[str, Any]:
    """Forward+backward: eager autograd against the compiled build, gradients compared."""
    with torch.enable_grad():
        # Fixed random cotangents: ones could hide a wrong reduction.
        gen = torch.Generator(device=needs[0].device).manual_seed(SEED)
        cots = [torch.randn(t.shape, generator=gen, dtype=t.dtype, device=t.device) for t in needs]

        def step(fn: Callable[[], Any]) -> Callable[[], tuple[torch.Tensor, ...]]:
            def go() -> tuple[torch.Tensor, ...]:
                got = [t for t in tensors(fn()) if t.requires_grad]
                grads = torch.autograd.grad(got, wrt, cots, allow_unused=True)
                return tuple(torch.zeros_like(w) if g is None else g for w, g in zip(wrt, grads, strict=False))
            return go

        step(compiled)()  # AOTAutograd compiles the backward on the first backward
        if checker is not compiled:
            seeded(step(checker), [], device)
        max_abs, _rel, ok = compare_outputs(seeded(step(eager), [], device), seeded(step(checker), [], device))
        out: dict[str, Any] = {"grads_ok": ok, "max_grad_err": max_abs}
        if opts.timing:
            a, b = interleaved(step(eager), step(compiled), clock, opts)
            out.update(train_eager_ms=median(a), train_compiled_ms=median(b), train_eager_samples_ms=a,
                       train_compiled_samples_ms=b)
            out["train_speedup"] = median(a) / median(b) if median(b) > 0 else 0.0
    return out


def print_figures(rec: Recorded, out: dict[str, Any], opts: Any, human_ms: Callable[[float], str]) -> None:
    """The figures: one JSON line (``--json``), or key=value lines and a sentence beside the report's."""
    if opts.json:
        print(json.dumps({**out, "report": rec.report}))
        return
    print(f"graph={rec.graph} mode={out['mode']} device={out['device']} threads={out['threads']} "
          f"torch={out['torch']} compile_s={out['compile_s']:.3f}")
    if "eager_ms" in out:
        print(f"eager_ms={out['eager_ms']:.6g} compiled_ms={out['compiled_ms']:.6g} speedup={out['speedup']:.4g} "
              f"samples={out['samples']} spread={out['spread']:.3f}")
    if "train_eager_ms" in out:
        print(f"train_eager_ms={out['train_eager_ms']:.6g} train_compiled_ms={out['train_compiled_ms']:.6g} "
              f"train_speedup={out['train_speedup']:.4g}")
    grads = f" grads_ok={out['grads_ok']} max_grad_err={out['max_grad_err']:.3g}" if "grads_ok" in out else ""
    print(f"numerics_ok={out['numerics_ok']} max_abs_err={out['max_abs_err']:.3g} "
          f"max_rel_err={out['max_rel_err']:.3g} numerics_mode={out['numerics_mode']}{grads}")
    where = f"graph {rec.graph} ({rec.frame}), mode {out['mode']} on {out['device']}, {out['threads']} thread(s)"
    numerics = f"numerics {'match' if out['numerics_ok'] else 'DIFFER'}"
    if "eager_ms" not in out:
        print(f"{where}: compiled, {numerics} (not timed: --timing times it)")
        return
    text = (f"{where}: speedup {out['speedup']:.2f}x (eager {human_ms(out['eager_ms'])}, compiled "
            f"{human_ms(out['compiled_ms'])})")
    if "train_speedup" in out:
        text += f", forward+backward {out['train_speedup']:.2f}x"
    report = rec.report
    if report is not None:
        text += (f"; the report (torch {rec.torch or '?'}, {report['threads'] or '?'} thread(s)) had "
                 f"{report['speedup']:.2f}x (eager {human_ms(report['eager_ms'])}, compiled "
                 f"{human_ms(report['compiled_ms'])})")
        if report["train_speedup"] > 0:
            text += f", forward+backward {report['train_speedup']:.2f}x"
    print(f"{text}; {numerics}")
