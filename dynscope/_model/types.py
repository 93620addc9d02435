"""The report model: frozen, plain-data dataclasses with no torch objects inside.

Everything here can be written to JSON and read back (:func:`Report.to_json`,
:func:`dynscope.load`; the codec is ``dynscope._model.codec``). Live ``torch.fx.GraphModule``
objects are kept beside the model in a holder that JSON never sees and equality ignores
(``Graph.module``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynscope._format import OVERHEAD_MS, clip, location, ms, percent, plural, timer_resolution_ms
from dynscope._torch.break_kinds import ON_PURPOSE
from dynscope._torch.wording import is_lifted_param, is_resume_name, resume_label

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Version of the JSON layout. Bump when a field changes meaning, is removed, or holds a
#: new layer a reader must not silently drop; older files still load (missing fields take
#: their defaults). 2: Graph.lowering. 3: ranks (Report.rank/world_size, Graph.split_by),
#: what a break costs and PyTorch's whole words (GraphBreak), Recompile.causes, Report.trials.
SCHEMA_VERSION = 3


def _below_resolution(device: str, eager_ms: float, compiled_ms: float, failed: bool) -> bool:
    if failed or eager_ms <= 0 or compiled_ms <= 0:
        return False
    return min(eager_ms, compiled_ms) < timer_resolution_ms(device)


class _Live:
    """Holds a live object beside the model: never serialised, never compared."""

    __slots__ = ("value",)

    def __init__(self, value: object = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Live)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<live>" if self.value is not None else "<none>"


def _live_field() -> Any:
    return field(default_factory=_Live, compare=False, repr=False, metadata={"live": True})


#: Longest repr of a model object. A notebook cell, a debugger or a log line shows one
#: short line; the data itself is in the fields, ``summary()``, ``to_html()`` and ``to_json()``.
REPR_MAX = 200


def _brief(kind: str, text: str) -> str:
    """``<Kind text>``: a model object's repr, on one line of at most ``REPR_MAX`` characters
    (``text`` comes partly from user code and PyTorch: newlines folded, length clipped)."""
    return f"<{kind} {clip(' '.join(text.split()), REPR_MAX - len(kind) - 3)}>"


@dataclass(frozen=True)
class TensorMeta:
    """What a graph input or a node output looked like."""

    kind: str  # "tensor", "symint", "int", "float", "bool" or "other"
    shape: tuple[int | str, ...] = ()  # sizes; symbolic sizes as their name ("s77")
    dtype: str = ""  # "float32"; "" for non-tensors
    device: str = ""  # "cpu", "cuda:0"; "" for non-tensors
    stride: tuple[int | str, ...] = ()  # element strides; () when unknown
    requires_grad: bool = False  # whether autograd tracks the tensor
    value: str = ""  # the value of a Python scalar input, as text; a symint's symbol ("s77")
    # The sizes the compiling call ran at, for a tensor with symbolic dims (one per dim of
    # ``shape``) or a symint (its value, one entry); () when all dims are static or the
    # sizes are not known (older saved reports kept none).
    ran_at: tuple[int, ...] = ()

    def describe(self) -> str:
        """Short text such as ``f32[3, 4]`` or ``int=3``; a symbolic dim shows its symbol
        and, when known, the size it ran at: ``i64[4, s27=9]``, a symint ``s27=9``."""
        if self.kind == "tensor":
            ran = self.ran_at if len(self.ran_at) == len(self.shape) else ()
            dims = ", ".join(
                f"{s}={ran[i]}" if ran and isinstance(s, str) else str(s) for i, s in enumerate(self.shape)
            )
            return f"{_short_dtype(self.dtype)}[{dims}]"
        if self.kind == "symint" and self.value and len(self.ran_at) == 1:
            return f"{self.value}={self.ran_at[0]}"
        if self.value:
            return f"{self.kind}={self.value}"
        return self.kind


SHORT_DTYPES = {  # torch dtype name -> the short form PyTorch prints ("f32")
    "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
    "int64": "i64", "int32": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
    "bool": "b8", "complex64": "c64", "complex128": "c128",
}


def _short_dtype(dtype: str) -> str:
    return SHORT_DTYPES.get(dtype, dtype)


@dataclass(frozen=True)
class Node:
    """One FX node of a captured graph."""

    name: str  # the node's name in the graph ("linear", "l_x_")
    op: str  # FX opcode: placeholder, call_function, call_method, call_module, get_attr, output
    target: str  # what the node calls, as text ("torch.sin", "add", "relu")
    args: tuple[str, ...] = ()  # names of the nodes this node reads, in order
    outputs: tuple[TensorMeta, ...] = ()  # what the node produced (several for tuples)
    module_stack: tuple[tuple[str, str], ...] = ()  # (module path, class name), outermost first
    filename: str = ""  # user source file the node came from, "" when unknown
    lineno: int = 0  # line in ``filename``; 0 when unknown
    source: str = ""  # that line's code

    @property
    def is_op(self) -> bool:
        """True for nodes that compute (not inputs, outputs or attribute reads)."""
        return self.op in ("call_function", "call_method", "call_module")

    @property
    def is_param(self) -> bool:
        """True for parameter/buffer inputs Dynamo lifted into the graph, and attribute reads."""
        return self.op == "get_attr" or (
            self.op == "placeholder" and is_lifted_param(self.name)
        )

    def __repr__(self) -> str:
        out = ", ".join(m.describe() for m in self.outputs)
        return _brief("Node", f"{self.name} {self.op} {self.target}" + (f" -> {out}" if out else ""))


@dataclass(frozen=True)
class StackFrame:
    """One frame of a user stack."""

    filename: str  # absolute path as Python reported it
    lineno: int  # 1-based line number
    function: str  # function name
    line: str = ""  # the source line, stripped

    def __repr__(self) -> str:
        return _brief("StackFrame", f"{location(self.filename, self.lineno)} in {self.function}: {self.line}")


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
    # dynscope's own Inductor builds of the captured graphs for timing=True (summed over the
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
    compile_s: float = 0.0  # seconds of the timed Inductor build: compile and first run
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
    # Every Inductor build dynscope made of this graph for this mode (the timed build, the
    # forward+backward build, numerics builds), compile and first run: dynscope's own
    # measurement cost, not the user's compile (Report.compile_time.measure_s adds them up).
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
class AotGraph:
    """One graph AOTAutograd handed to Inductor: the forward, the backward, or (no training)
    the inference graph. Nodes are ATen ops, as PyTorch printed the graph."""

    kind: str  # "forward", "backward" or "inference"
    node_count: int  # all nodes, inputs and output included
    op_count: int  # nodes that call an op
    op_counts: tuple[tuple[str, int], ...] = ()  # ("aten.addmm", count), most frequent first
    inputs: tuple[TensorMeta, ...] = ()  # the graph's inputs, in order
    input_names: tuple[str, ...] = ()  # their names ("primals_1", "tangents_1", saved "addmm")
    nodes: tuple[Node, ...] = ()  # every node in graph order (target: "aten.addmm.default")
    code: str = ""  # the graph as PyTorch printed it

    def __repr__(self) -> str:
        return _brief(
            "AotGraph",
            f"{self.kind}: {plural(self.op_count, 'op')}, {plural(self.node_count, 'node')}, "
            f"{plural(len(self.inputs), 'input')}",
        )

    def to_dot(self, lowering: Lowering | None = None) -> str:
        """DOT source of the graph (see dynscope._render.dot.aot_graph_to_dot); pass the
        ``Lowering`` it belongs to so a backward graph highlights the saved activations."""
        from dynscope._render.dot import aot_graph_to_dot

        return aot_graph_to_dot(self, lowering)

    def to_svg(self, path: str | Path | None = None, lowering: Lowering | None = None) -> str:
        """SVG of the graph; also written to ``path`` when given. Needs Graphviz's ``dot``."""
        from dynscope._render.svg import dot_to_svg

        return dot_to_svg(self.to_dot(lowering), path)


@dataclass(frozen=True)
class SavedTensors:
    """What the forward keeps for the backward: the activation memory of a training step."""

    count: int  # tensors saved (SymInt sizes not counted)
    bytes: int  # their size at the traced shapes
    symbolic: int = 0  # of ``count``, tensors with a symbolic size: counted in ``bytes`` at size hint 1
    names: tuple[str, ...] = field(default=(), repr=False)  # the saved values' names in the backward graph


@dataclass(frozen=True)
class Kernel:
    """One kernel Inductor generated (or a library call it emitted) for a graph."""

    name: str  # "cpp_fused_add_relu_0", "triton_poi_fused_add_0", "extern_kernels.addmm", "aten.sort.stable"
    kind: str  # "triton", "cpp", "extern" (library call: mm, conv...) or "fallback" (aten op not lowered)
    graph: str = "forward"  # the AOT graph it runs in: "forward", "backward" or "inference"
    aten_ops: tuple[str, ...] = ()  # ATen ops fused into it ("aten.relu", ...)
    nodes: tuple[str, ...] = ()  # names of the Dynamo graph's nodes it computes
    source_lines: tuple[str, ...] = ()  # "file:line" of the user code those nodes came from
    time_ms: float | None = None  # time per run from the profiler; None when not timed
    share: float | None = None  # time_ms / the compiled graph's profiled time per run
    calls: int = 1  # times the kernel is called per run of the graph
    code_line: int = 0  # 1-based line in its graph's output code where it is called; 0 unknown

    def __repr__(self) -> str:
        text = f"{self.name} {self.kind} {self.graph}: {plural(len(self.aten_ops), 'aten op')}"
        if self.time_ms is not None:
            text += f", {ms(self.time_ms)}" + (f" x{self.calls}" if self.calls != 1 else "")
        return _brief("Kernel", text)


@dataclass(frozen=True)
class Lowering:
    """What happened below Dynamo for one graph: AOTAutograd's graphs and Inductor's kernels."""

    mode: str = "default"  # the Inductor mode of the build described
    source: str = "timing"  # "timing": dynscope's timed build; "trace": the compile PyTorch logged
    forward: AotGraph | None = None  # the forward (training) or inference graph
    backward: AotGraph | None = None  # None when the graph did not train
    saved_for_backward: SavedTensors | None = None  # None when there is no backward
    kernels: tuple[Kernel, ...] = ()  # in call order; forward kernels first
    mapped_share: float = 0.0  # share of the Dynamo graph's compute nodes inside some kernel
    unmapped: tuple[str, ...] = ()  # compute nodes no kernel could be traced to
    code: str = ""  # Inductor's output code for the forward (or inference) graph
    backward_code: str = ""  # ... and for the backward
    cache: tuple[tuple[str, str], ...] = ()  # ("fx_graph forward", "hit"/"miss"/"bypass"), ...
    # (phase, seconds) in pipeline order, of the build described: source "timing", dynscope's
    # timed build (not the user's compile); source "trace", the user's compile of the graph's
    # frame as Report.compile_time counts it (frame compile and lazy backward compile).
    phases: tuple[tuple[str, float], ...] = ()
    profiled_ms: float | None = None  # one call's time under the profiler, wrappers included (fwd+bwd when training)
    # The same build's median time measured by the timer, without the profiler (whose own
    # cost per event inflates small graphs): shares and outside_kernels_ms are taken of it.
    measured_ms: float | None = None
    notes: tuple[str, ...] = ()  # what could not be read, and why

    def __repr__(self) -> str:
        parts = [f"{g.kind} {plural(g.op_count, 'op')}" for g in (self.forward, self.backward) if g is not None]
        parts.append(plural(len(self.kernels), "kernel"))
        if self.profiled_ms is not None:
            parts.append(f"{ms(self.profiled_ms)} profiled")
        return _brief("Lowering", f"{self.mode} ({self.source}): " + ", ".join(parts))

    @property
    def kernel_ms(self) -> float | None:
        """Sum of the kernels' times per run; None when kernels were not timed."""
        timed = [k.time_ms for k in self.kernels if k.time_ms is not None]
        return sum(timed) if timed else None

    @property
    def outside_kernels_ms(self) -> float | None:
        """Profiled graph time not spent in any kernel: Inductor's wrapper (allocation, size
        checks, launches) and the runtime wrappers around it."""
        whole = self.graph_ms
        if whole is None or self.kernel_ms is None:
            return None
        return max(whole - self.kernel_ms, 0.0)

    @property
    def graph_ms(self) -> float | None:
        """The graph's time per call that kernel shares are of: the timer's median
        (``measured_ms``), else the profiled time; None when kernels were not timed."""
        return self.measured_ms if self.measured_ms is not None else self.profiled_ms

    @property
    def compile_s(self) -> float:
        """Seconds over all phases."""
        return sum(s for _, s in self.phases)

    def kernels_by_time(self) -> tuple[Kernel, ...]:
        """Kernels, slowest first (untimed ones last, in call order)."""
        return tuple(sorted(self.kernels, key=lambda k: -(k.time_ms if k.time_ms is not None else -1.0)))

    def kernel_of(self, node: str) -> tuple[Kernel, ...]:
        """Kernels that compute the Dynamo graph node named ``node``."""
        return tuple(k for k in self.kernels if node in k.nodes)


@dataclass(frozen=True)
class Graph:
    """One FX graph Dynamo captured."""

    id: int  # sequential in compile order, from 0
    compile_id: str  # "frame/compile" within this report, e.g. "1/0" (Frame.torch_compile_id: PyTorch's)
    frame: str  # name of the compiled function ("forward", "torch_dynamo_resume_in_forward_at_16")
    filename: str  # file of that function
    lineno: int  # first line of that function
    node_count: int  # all nodes, inputs and output included
    op_count: int  # nodes that compute
    op_counts: tuple[tuple[str, int], ...] = ()  # (target, count), most frequent first
    inputs: tuple[TensorMeta, ...] = ()  # example inputs Dynamo passed (parameters are inputs)
    nodes: tuple[Node, ...] = ()  # every node in graph order
    code: str = ""  # readable Python code of the graph
    origin: str = "backend"  # "backend": seen by dynscope's backend; "trace": only from the trace
    timings: tuple[Timing, ...] = ()  # one per Inductor mode when timing ran
    runs: int = 0  # times the graph ran during report()'s calls (0: unknown, capture())
    backward_runs: int = 0  # of those runs, how many also ran the graph's backward (training)
    lowering: Lowering | None = None  # AOT graphs and kernels, when the graph went through Inductor
    # Why one compile made several graphs without a graph break: "" (it did not) or
    # "ddp_bucket" (DDP's optimizer split it at gradient-bucket boundaries; not the user's
    # break, not counted against budgets; see docs/distributed.md).
    split_by: str = ""
    _module: _Live = _live_field()  # live GraphModule (not saved)

    @property
    def module(self) -> Any:
        """The live ``torch.fx.GraphModule``, or None (loaded reports, trace-only graphs)."""
        return self._module.value

    @property
    def timing(self) -> Timing | None:
        """Timing of the first requested mode, or None when timing did not run."""
        return self.timings[0] if self.timings else None

    def timing_for(self, mode: str) -> Timing | None:
        """Timing of one mode, or None."""
        return next((t for t in self.timings if t.mode == mode), None)

    def __repr__(self) -> str:
        user, params = self.user_inputs()
        where = f" ({location(self.filename, self.lineno)})" if self.filename else ""
        text = (
            f"{self.id} {resume_label(self.frame)}{where}: {plural(self.op_count, 'op')}, "
            f"{plural(len(user), 'input')}" + (f" (+{params} params)" if params else "")
        )
        t = self.timing
        if t is not None:
            text += f", {t.mode} failed" if t.failed else f", {t.speedup:.2f}x {t.mode}"
        if self.lowering is not None:
            text += f", {plural(len(self.lowering.kernels), 'kernel')}"
        return _brief("Graph", text)

    def _repr_html_(self) -> str:
        """Its picture in a notebook (its summary when Graphviz is not installed or does not work)."""
        from dynscope._errors import GraphvizNotFoundError
        from dynscope._render.card import graph_card
        from dynscope._render.svg import dot_to_svg, have_graphviz

        try:
            svg = dot_to_svg(self.to_dot()) if have_graphviz() else None
        except GraphvizNotFoundError:  # a dot on PATH that does not work: as if missing
            svg = None
        return graph_card(self, svg)

    @property
    def is_resume(self) -> bool:
        """True when the graph belongs to a resume function Dynamo made after a break."""
        return is_resume_name(self.frame)

    def user_inputs(self) -> tuple[tuple[TensorMeta, ...], int]:
        """(inputs that are not parameters or buffers, number of parameter/buffer inputs).

        Known only for graphs with node data; otherwise all inputs count as user inputs.
        """
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.inputs):
            return self.inputs, 0
        user = tuple(m for n, m in zip(placeholders, self.inputs, strict=True) if not n.is_param)
        return user, len(self.inputs) - len(user)

    def op_count_of(self, target: str) -> int:
        """How many nodes call ``target``."""
        return dict(self.op_counts).get(target, 0)

    def to_dot(self, *, depth: int | None = None, fold_params: bool = True, color_by: str = "auto") -> str:
        """DOT source of the graph (see dynscope._render.dot).

        ``color_by``: "op" (op category), "kernel" (the Inductor kernel each node was fused
        into), "time" (share of the graph's time, when kernels were timed) or "auto"
        ("kernel" when the graph has a lowering with kernels, else "op").
        """
        from dynscope._render.dot import DotOptions, graph_to_dot

        return graph_to_dot(self, DotOptions(depth=depth, fold_params=fold_params, color_by=color_by))

    def to_svg(
        self,
        path: str | Path | None = None,
        *,
        depth: int | None = None,
        fold_params: bool = True,
        color_by: str = "auto",
    ) -> str:
        """SVG of the graph; also written to ``path`` when given. Needs Graphviz's ``dot``."""
        from dynscope._render.svg import dot_to_svg

        return dot_to_svg(self.to_dot(depth=depth, fold_params=fold_params, color_by=color_by), path)

    def to_networkx(self) -> Any:
        """The graph as a ``networkx.DiGraph`` with node and edge attributes."""
        from dynscope._model.analysis import to_networkx

        return to_networkx(self)


@dataclass(frozen=True)
class BreakEvent:
    """One graph break as PyTorch reported it (before folding by site)."""

    compile_id: str  # the compile that hit the break
    filename: str  # the site (the user's line, see GraphBreak)
    lineno: int
    reported_filename: str  # where Dynamo said the break was (may be inside copy.py, torch...)
    reported_lineno: int
    # Dynamo gave up on the frame at this record ("Failed to handle graph break gracefully"):
    # the frame ran eagerly. Still one event (one record PyTorch logged).
    gave_up: bool = False

    def __repr__(self) -> str:
        site, reported = location(self.filename, self.lineno), location(self.reported_filename, self.reported_lineno)
        where = f" (reported at {reported})" if reported != site else ""
        return _brief("BreakEvent", f"{self.compile_id} {site}{where}" + (", gave up on the frame" if self.gave_up else ""))


@dataclass(frozen=True)
class GraphBreak:
    """One distinct graph-break site, with every event that hit it folded into ``count``."""

    filename: str  # the user's file: innermost user frame outside torch and the stdlib
    lineno: int  # the user's line
    function: str  # the user's function
    source: str  # the user's line of code, stripped
    reason: str  # one line: why Dynamo broke
    category: str  # one of dynscope._capture.break_fixes.CATEGORIES
    fix: str  # dynscope's own advice for this category
    explanation: str = ""  # PyTorch's explanation
    hints: tuple[str, ...] = ()  # PyTorch's hints
    gb_type: str = ""  # PyTorch's graph-break type ("Failed to trace builtin operator")
    gb_id: str = ""  # PyTorch's graph-break id ("gb0059"), "" when unknown
    doc_url: str = ""  # PyTorch's page about this break
    # Outermost first, as PyTorch reported it, from the frame the program was called in
    # (under report(), the frames above the compiled call, dynscope's own among them, are dropped).
    user_stack: tuple[StackFrame, ...] = ()
    count: int = 1  # break events at this site (one per graph-break record PyTorch logged)
    gave_up: int = 0  # of ``count``, events on which Dynamo gave up on the frame (it ran eagerly)
    compile_ids: tuple[str, ...] = ()  # compiles that hit the site, in order
    excerpt: tuple[tuple[int, str], ...] = ()  # (line number, text) around the site, read at capture
    detail: str = ""  # PyTorch's further explanation (how a branch condition was computed), as it wrote it
    debug_context: str = ""  # PyTorch's "Developer debug context"
    torch_text: str = ""  # PyTorch's whole report of the site's first break (without Dynamo's own traceback)
    call_chain: tuple[StackFrame, ...] = ()  # the user's frames leading to the site (the end of user_stack), outermost first
    # What the site costs (Report.breaks_by_cost ranks by these); -1: not known (coverage
    # not measured; a report saved before dynscope counted them):
    eager_ms: float = -1.0  # per call, time of the eager ops run at the site
    graphs_split: int = -1  # graphs of resume functions Dynamo made after this site
    recompiles_caused: int = -1  # recompiles of those resume functions

    @property
    def location(self) -> str:
        """``file.py:LINE``: the base name and line."""
        return location(self.filename, self.lineno)

    @property
    def actionable(self) -> bool:
        """False when PyTorch or a library breaks here on purpose (torch.optim's step, a
        library's own ``graph_break()``): no change at this line removes the break, so "fix
        first" never names the site (``fix`` says what helps instead)."""
        return self.category not in ON_PURPOSE

    def __repr__(self) -> str:
        return _brief("GraphBreak", f"{self.location} {self.category} x{self.count}: {self.source}")

    def _repr_html_(self) -> str:
        """The code around the site with the line marked, the reason and the fix, in a notebook."""
        from dynscope._render.card import break_card

        return break_card(self)


@dataclass(frozen=True)
class Recompile:
    """A compile of a frame that had been compiled before, and why."""

    compile_id: str  # the new compile ("0/1")
    frame: str  # the function recompiled
    reasons: tuple[str, ...]  # the failed guards as PyTorch words them
    explained: tuple[str, ...] = ()  # the same, said plainly by dynscope
    causes: tuple[str, ...] = ()  # what changed, without values ("requires_grad changed on input x")
    fixes: tuple[str, ...] = ()  # what to do about each cause, in the same order

    def __repr__(self) -> str:
        return _brief("Recompile", f"{self.compile_id} {resume_label(self.frame)}: " + "; ".join(self.explained or self.reasons))


@dataclass(frozen=True)
class RecompileGroup:
    """Recompiles of one function for one cause (``Report.recompile_groups``)."""

    frame: str  # the function recompiled
    cause: str  # what changed ("requires_grad changed on input x")
    fix: str  # what to do about it
    compile_ids: tuple[str, ...] = ()  # the recompiles, in order

    @property
    def count(self) -> int:
        """How many recompiles."""
        return len(self.compile_ids)

    def __repr__(self) -> str:
        return _brief("RecompileGroup", f"{self.count} of {resume_label(self.frame)}: {self.cause}")


@dataclass(frozen=True)
class Guard:
    """One guard Dynamo installed on a compiled frame."""

    compile_id: str  # the compile that installed it
    kind: str  # TENSOR_MATCH, ID_MATCH, TYPE_MATCH, EQUALS_MATCH, ...
    source: str  # what it checks, e.g. L['x'] or G['torch']
    detail: str  # the check itself, without PyTorch's trailing comment
    user_line: str = ""  # the user code that made the guard, when PyTorch says

    def __repr__(self) -> str:
        source = f" {self.source}" if self.source else ""
        return _brief("Guard", f"{self.compile_id} {self.kind}{source}: {self.detail}")


@dataclass(frozen=True)
class Frame:
    """One compile of one Python frame."""

    compile_id: str  # "frame/compile"
    function: str  # code name
    filename: str
    lineno: int  # first line of the function
    graph_ids: tuple[int, ...] = ()  # graphs this compile produced
    guard_count: int = 0
    op_count: int = 0  # ops Dynamo put in the graph (0: nothing compiled)
    compile_time: CompileTime = CompileTime()
    restarts: int = 0  # times Dynamo restarted its analysis (usually once per break)
    status: str = "compiled"  # "compiled", "empty" (no ops, so no graph) or "failed"
    fail_reason: str = ""  # why compiling failed or was skipped
    torch_compile_id: str = ""  # PyTorch's own id (process-wide; matches TORCH_LOGS / tlparse)

    def __repr__(self) -> str:
        status = f"failed: {self.fail_summary}" if self.status == "failed" else self.status
        return _brief(
            "Frame",
            f"{self.compile_id} {resume_label(self.function)} ({location(self.filename, self.lineno)}): {status}, "
            f"{plural(len(self.graph_ids), 'graph')}, {plural(self.op_count, 'op')}",
        )

    @property
    def fail_summary(self) -> str:
        """The first line of ``fail_reason`` ("" when the frame did not fail)."""
        return self.fail_reason.splitlines()[0] if self.fail_reason else ""

    @property
    def is_resume(self) -> bool:
        """True for resume functions Dynamo generates after a graph break."""
        return is_resume_name(self.function)


@dataclass(frozen=True)
class Coverage:
    """Share of torch ops a call ran inside captured graphs (see DESIGN.md)."""

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
class Outcome:
    """What a capture counted: the "before" or "after" side of a :class:`Trial`."""

    graphs: int = 0
    breaks: int = 0  # break events
    break_sites: int = 0
    recompiles: int = 0
    coverage: float | None = None  # share of torch ops run inside graphs; None when not measured
    speedup: float | None = None  # end to end, eager / compiled (default mode), when timed
    compile_s: float = 0.0


@dataclass(frozen=True)
class Trial:
    """One remedy dynscope tried on the program, in isolation, and what it changed."""

    remedy: str  # short name: "capture_scalar_outputs", "mark_dynamic", "dynamic=True", ...
    code: str  # the exact line(s) you would add
    target: tuple[str, ...] = ()  # what it addresses: break sites "file.py:LINE", recompiles "frame: cause"
    before: Outcome = Outcome()
    after: Outcome | None = None  # None when the remedy was not run (tried False) or failed to run
    helped: bool = False  # fewer breaks or recompiles (or more coverage / speed) with outputs unchanged
    tried: bool = True  # False: a code change dynscope cannot make for you (shown, not run)
    outputs_match: bool = True  # the program's outputs with the remedy equal eager's
    error: str = ""  # why the remedy failed or was rejected ("changed outputs: ...")
    note: str = ""  # what else to know

    @property
    def delta(self) -> dict[str, float]:
        """after - before for the counts (empty when not run)."""
        if self.after is None:
            return {}
        out = {
            "graphs": float(self.after.graphs - self.before.graphs),
            "breaks": float(self.after.breaks - self.before.breaks),
            "recompiles": float(self.after.recompiles - self.before.recompiles),
        }
        if self.after.coverage is not None and self.before.coverage is not None:
            out["coverage"] = self.after.coverage - self.before.coverage
        if self.after.speedup is not None and self.before.speedup is not None:
            out["speedup"] = self.after.speedup - self.before.speedup
        return out


@dataclass(frozen=True)
class Report:
    """Everything dynscope learned about one run of compiled code."""

    graphs: tuple[Graph, ...] = ()  # captured graphs in compile order
    breaks: tuple[GraphBreak, ...] = ()  # distinct break sites, in order of first hit
    break_events: tuple[BreakEvent, ...] = ()  # every break as reported, in order
    recompiles: tuple[Recompile, ...] = ()
    guards: tuple[Guard, ...] = ()
    frames: tuple[Frame, ...] = ()  # every compile, in order
    compile_time: CompileTime = CompileTime()  # summed over frames
    coverage: Coverage | None = None  # None when not measured (capture() of foreign code)
    timing: tuple[ModeTiming, ...] = ()  # end to end, one per mode, when timing ran
    calls: int = 0  # calls dynscope made (report()); 0 for capture()
    torch_version: str = ""
    title: str = ""  # what was captured, e.g. the model's class name
    notes: tuple[str, ...] = ()  # what the reader must know: an input unwrapped, coverage skipped...
    unparsed: int = 0  # trace payloads no parser understood: non-zero means counts may be short
    trials: tuple[Trial, ...] = ()  # remedies tried by advise(), best first (empty until then)
    # Where the report was made: torch.distributed's rank and world size when a process
    # group was initialised, else 0 and 1 (a single process is rank 0 of 1).
    rank: int = 0
    world_size: int = 1
    schema_version: int = SCHEMA_VERSION
    # The model and calls report() ran (never saved): rep.advise() reruns them.
    _subject: _Live = _live_field()

    # -- counts -------------------------------------------------------------------------
    @property
    def graph_count(self) -> int:
        """Number of captured graphs (recompiled variants included)."""
        return len(self.graphs)

    @property
    def break_count(self) -> int:
        """Number of graph-break events (sum of ``count`` over sites)."""
        return sum(b.count for b in self.breaks)

    @property
    def recompile_count(self) -> int:
        """Number of recompiles."""
        return len(self.recompiles)

    @property
    def resume_count(self) -> int:
        """Compiles of resume functions Dynamo created after breaks."""
        return sum(1 for f in self.frames if f.is_resume)

    def graphs_ms(self, mode: str) -> tuple[float, float, int]:
        """Per-graph medians added up for ``mode``: (eager ms, compiled ms, graphs left out).

        Each graph counts its median times the runs it made during ``report()``'s calls,
        plus its backward (forward+backward minus forward) for each run whose backward ran;
        a graph that was not timed, failed, or whose runs are unknown is left out (and
        counted), so a non-zero third value means the sums are short.
        """
        eager = compiled = 0.0
        left_out = 0
        for g in self.graphs:
            t = g.timing_for(mode)
            if t is None or t.failed or g.runs <= 0:
                left_out += 1
                continue
            eager += t.eager_ms * g.runs + t.backward_share("eager") * g.backward_runs
            compiled += t.compiled_ms * g.runs + t.backward_share("compiled") * g.backward_runs
        return eager, compiled, left_out

    def kernels(self) -> Iterator[tuple[Graph, Kernel]]:
        """Every kernel of every lowered graph, as (graph, kernel), in graph order."""
        for g in self.graphs:
            if g.lowering is not None:
                for k in g.lowering.kernels:
                    yield g, k

    def top_kernels(self, n: int = 10) -> list[tuple[Graph, Kernel, float]]:
        """The ``n`` timed kernels that cost the program most: (graph, kernel, ms over the
        graph's runs during report(); per run when runs are unknown), largest first."""
        costed = [
            (g, k, k.time_ms * max(g.runs, 1)) for g, k in self.kernels() if k.time_ms is not None
        ]
        return sorted(costed, key=lambda t: -t[2])[:n]

    def recompile_groups(self) -> tuple[RecompileGroup, ...]:
        """Recompiles grouped by function and cause, the largest group first.

        PyTorch lists a failed guard against each earlier compile of the function, so a
        recompile can name causes an earlier one already had: each counts under the first
        cause not seen before in that function (its first cause when all were seen).
        ``recompiles`` keeps the flat list.
        """
        groups: dict[tuple[str, str], RecompileGroup] = {}
        seen: dict[str, set[str]] = {}
        for r in self.recompiles:
            pairs = list(zip(r.causes, r.fixes, strict=False)) or [(r.explained[0] if r.explained else "recompiled", "")]
            known = seen.setdefault(r.frame, set())
            cause, fix = next(((c, f) for c, f in pairs if c not in known), pairs[0])
            known.update(c for c, _ in pairs)
            g = groups.get((r.frame, cause)) or RecompileGroup(r.frame, cause, fix)
            groups[(r.frame, cause)] = RecompileGroup(g.frame, g.cause, g.fix, (*g.compile_ids, r.compile_id))
        return tuple(sorted(groups.values(), key=lambda g: -g.count))

    def breaks_by_cost(self) -> tuple[GraphBreak, ...]:
        """Break sites, the one whose fix buys most first: sites the user's own change can fix
        before those PyTorch or a library breaks on purpose (``GraphBreak.actionable``), then
        most eager time per call (to 0.1 ms: finer is noise), then most graphs and recompiles
        it causes, then most events (figures not known count as 0)."""
        return tuple(
            sorted(
                self.breaks,
                key=lambda b: (
                    not b.actionable,
                    -round(max(b.eager_ms, 0.0), 1),
                    -(max(b.graphs_split, 0) + max(b.recompiles_caused, 0)),
                    -b.count,
                ),
            )
        )

    def graph(self, graph_id: int) -> Graph:
        """The graph with this id."""
        for g in self.graphs:
            if g.id == graph_id:
                return g
        raise KeyError(f"no graph {graph_id}; ids are {[g.id for g in self.graphs]}")

    # -- output -------------------------------------------------------------------------
    def summary(self, *, color: bool | None = None) -> str:
        """The terminal summary (also ``str(report)``).

        Args:
            color: ANSI colour: True or False; None (default) colours when stdout is a
                terminal, unless ``NO_COLOR`` is set (``FORCE_COLOR`` colours a pipe too).
                Pass False for text that goes to a file.
        """
        from dynscope._render.color import use_color
        from dynscope._render.text import render_summary

        return render_summary(self, color=use_color(color))

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        parts = [
            plural(self.graph_count, "graph"),
            f"{plural(self.break_count, 'break')} at {plural(len(self.breaks), 'site')}",
            plural(self.recompile_count, "recompile"),
        ]
        if self.coverage is not None:
            parts.append(f"coverage {percent(self.coverage.ratio)}")
        for m in self.timing[:1]:  # the first mode, as Graph.timing
            parts.append(f"{m.mode} timing failed" if m.error else f"speedup {m.speedup:.2f}x ({m.mode})")
        kernels = sum(1 for _ in self.kernels())
        if kernels:
            parts.append(plural(kernels, "kernel"))
        if self.unparsed:
            parts.append(plural(self.unparsed, "unread trace message"))
        title = f"{clip(self.title, 60)}: " if self.title else ""
        return _brief("Report", title + ", ".join(parts))

    def program_dot(self) -> str:
        """DOT of the whole program: graphs chained through the breaks."""
        from dynscope._render.dot import program_to_dot

        return program_to_dot(self)

    def program_svg(self, path: str | Path | None = None) -> str:
        """SVG of the whole program; also written to ``path`` when given."""
        from dynscope._render.svg import dot_to_svg

        return dot_to_svg(self.program_dot(), path)

    def to_html(self, *, pictures: bool | None = None) -> str:
        """One self-contained HTML page (inline CSS and SVG; no network).

        Args:
            pictures: include SVG pictures; None (default) includes them when Graphviz is
                installed and says how to get it otherwise.
        """
        from dynscope._render.bundle import html_page

        return html_page(self, pictures=pictures)

    def _repr_html_(self) -> str:
        """A compact card in a notebook; ``to_html()`` / ``render(folder)`` give the whole page."""
        from dynscope._render.card import render_card

        return render_card(self)

    def render(self, folder: str | Path) -> Path:
        """Write index.html, graph_<id>.svg, program.svg, report.json to ``folder``."""
        from dynscope._render.bundle import render_bundle

        return render_bundle(self, Path(folder))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (live modules left out)."""
        from dynscope._model.codec import to_plain

        return to_plain(self)

    def to_json(self, *, indent: int | None = 1) -> str:
        """The report as JSON text."""
        from dynscope._model.codec import to_json

        return to_json(self, indent=indent)

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON to ``path``; returns the path.

        The write is atomic: if it fails midway, a report already at ``path`` stays as it was.

        Raises:
            InputError: ``path`` is a folder, or its folder cannot be written.
            DynscopeError: writing failed midway (disk full, ...).
        """
        from dynscope._model.codec import save

        return save(self, path)

    def advise(self, *, timing: bool = False, **report_kwargs: Any) -> Advice:
        """Try PyTorch's remedies on the model and calls this report ran (see
        :func:`dynscope.advise`); InputError when the report no longer holds them (a loaded
        report, or one made by ``capture()``)."""
        from dynscope._capture.advise import advise_report

        return advise_report(self, timing=timing, **report_kwargs)

    def check(
        self,
        *,
        max_graph_breaks: int | None = 0,
        max_recompiles: int | None = 0,
        min_coverage: float | None = None,
        max_graphs: int | None = None,
        allow_unparsed: bool = False,
    ) -> Report:
        """Raise CompileBudgetError when this report exceeds the budget; return self.

        A report with unread PyTorch trace messages (``unparsed`` > 0) fails too, unless
        ``allow_unparsed``: its counts may be short.
        """
        __tracebackhide__ = True
        from dynscope._model.budget import Budget

        return Budget(
            max_graph_breaks=max_graph_breaks,
            max_recompiles=max_recompiles,
            min_coverage=min_coverage,
            max_graphs=max_graphs,
            allow_unparsed=allow_unparsed,
        ).check(self)


@dataclass(frozen=True)
class Advice:
    """What :func:`dynscope.advise` found: each remedy tried on the program and what it bought."""

    report: Report  # the "before" report, its ``trials`` filled, best first
    trials: tuple[Trial, ...] = ()  # the same trials, best first
    # Why no remedy was tried ("" when some were); the report's notes carry it too, so a
    # saved report and its page say it.
    note: str = ""

    @property
    def best(self) -> Trial | None:
        """The trial that helped most, or None when none helped."""
        return next((t for t in self.trials if t.helped), None)

    def summary(self) -> str:
        """A plain-text table of the trials, best first."""
        from dynscope._render import text as _render_text

        # The renderer's own section when it has one (the HTML/CLI front shares it).
        advice_section = getattr(_render_text, "advice_section", None)
        if advice_section is not None:
            return str(advice_section(self.trials, empty=self.note))
        return _plain_trials(self.trials)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        helped = sum(1 for t in self.trials if t.helped)
        best = f", best {self.best.remedy}" if self.best is not None else ""
        return _brief("Advice", f"{plural(len(self.trials), 'trial')}, {helped} helped{best}")


def _plain_trials(trials: tuple[Trial, ...]) -> str:
    """Minimal text for trials (used until the renderer has its own section)."""
    if not trials:
        return "No remedy applies: no break or recompile with a known remedy."
    lines = ["What each fix buys (measured, best first):"]
    for t in trials:
        if not t.tried:
            verdict = "not tried"
        elif t.error:
            verdict = f"failed: {t.error}"
        else:
            verdict = "helped" if t.helped else "did not help"
        counts = ""
        if t.after is not None:
            counts = (
                f" breaks {t.before.breaks}->{t.after.breaks}, recompiles "
                f"{t.before.recompiles}->{t.after.recompiles}, graphs {t.before.graphs}->{t.after.graphs}"
            )
        lines.append(f"- {t.remedy}: {verdict}.{counts}")
        lines.extend(f"    {line}" for line in t.code.splitlines())
        if t.note:
            lines.append(f"    note: {t.note}")
    return "\n".join(lines)
