"""A captured graph and what happened below it: FX nodes and their tensors, AOTAutograd's
graphs, the activations saved for the backward, Inductor's kernels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dynscope._format import location, ms, plural
from dynscope._lexicon.wording import is_lifted_param, is_resume_name, resume_label
from dynscope._model.base import _brief, _Live, _live_field
from dynscope._model.display import AotGraphShortcuts, GraphShortcuts

# TC001: at run time though only annotations name it (the codec resolves Graph's hints here).
from dynscope._model.memory import GraphMemory  # noqa: TC001
from dynscope._model.timing import Timing  # noqa: TC001

__all__ = ["SHORT_DTYPES", "AotGraph", "Graph", "Kernel", "Lowering", "Node", "SavedTensors", "TensorMeta"]


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

    @property
    def nbytes(self) -> int | None:
        """Bytes of a contiguous tensor of this shape and dtype (at the sizes it ran at when
        symbolic); None for non-tensors and unknown sizes or dtypes."""
        if self.kind != "tensor" or self.dtype not in DTYPE_BYTES:
            return None
        dims = self.ran_at if len(self.ran_at) == len(self.shape) else self.shape
        count = 1
        for d in dims:
            if not isinstance(d, int):
                return None
            count *= d
        return count * DTYPE_BYTES[self.dtype]

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


#: Bytes per element of each torch dtype name (what a tensor of known sizes takes).
DTYPE_BYTES = {
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2,
    "int8": 1, "uint8": 1, "bool": 1, "complex64": 8, "complex128": 16,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}

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
class AotGraph(AotGraphShortcuts):
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



@dataclass(frozen=True)
class SavedTensors:
    """What the forward keeps for the backward: the activation memory of a training step."""

    count: int  # tensors saved (SymInt sizes not counted)
    bytes: int  # their size at the traced shapes
    symbolic: int = 0  # of ``count``, tensors with a symbolic size: counted in ``bytes`` at size hint 1
    names: tuple[str, ...] = field(default=(), repr=False)  # the saved values' names in the backward graph


def _path_and_line(words: str) -> list[Any]:
    """"path/file.py:LINE" as [path, line] (line 0 when the words end in no number)."""
    path, sep, line = words.rpartition(":")
    return [path, int(line)] if sep and line.isdigit() else [words, 0]


@dataclass(frozen=True)
class Kernel:
    """One kernel Inductor generated (or a library call it emitted) for a graph."""

    name: str  # "cpp_fused_add_relu_0", "triton_poi_fused_add_0", "extern_kernels.addmm", "aten.sort.stable"
    kind: str  # "triton", "cpp", "extern" (library call: mm, conv...) or "fallback" (aten op not lowered)
    graph: str = "forward"  # the AOT graph it runs in: "forward", "backward" or "inference"
    aten_ops: tuple[str, ...] = ()  # ATen ops fused into it ("aten.relu", ...)
    nodes: tuple[str, ...] = ()  # names of the Dynamo graph's nodes it computes
    # (path, line) of the user code those nodes came from; schema 7 and before kept "path:LINE"
    # words (read back by _upgraded)
    source_lines: tuple[tuple[str, int], ...] = ()
    time_ms: float | None = None  # time per run from the profiler; None when not timed
    share: float | None = None  # time_ms / the compiled graph's profiled time per run
    calls: int = 1  # times the kernel is called per run of the graph
    code_line: int = 0  # 1-based line in its graph's output code where it is called; 0 unknown

    @classmethod
    def _upgraded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A kernel as an older file saved it, in this layout (the codec calls it on every
        kernel it reads): before schema 8 each source line was "path:LINE" words."""
        lines = data.get("source_lines")
        if not isinstance(lines, list) or not any(isinstance(x, str) for x in lines):
            return data
        return {**data, "source_lines": [_path_and_line(x) if isinstance(x, str) else x for x in lines]}

    def __repr__(self) -> str:
        text = f"{self.name} {self.kind} {self.graph}: {plural(len(self.aten_ops), 'aten op')}"
        if self.time_ms is not None:
            text += f", {ms(self.time_ms)}" + (f" x{self.calls}" if self.calls != 1 else "")
        return _brief("Kernel", text)


@dataclass(frozen=True)
class Lowering:
    """What happened below Dynamo for one graph: AOTAutograd's graphs and Inductor's kernels."""

    mode: str = "default"  # the Inductor mode of the build described
    # "timing": the build timing=True timed (torch.compile's own compile of the program, or
    # dynscope's build of a graph that compile did not make); "trace": the compile PyTorch
    # logged under capture()
    source: str = "timing"
    forward: AotGraph | None = None  # the forward (training) or inference graph
    backward: AotGraph | None = None  # None when the graph did not train
    saved_for_backward: SavedTensors | None = None  # None when there is no backward
    kernels: tuple[Kernel, ...] = ()  # in call order; forward kernels first
    mapped_share: float = 0.0  # share of the Dynamo graph's compute nodes inside some kernel
    unmapped: tuple[str, ...] = ()  # compute nodes no kernel could be traced to
    code: str = ""  # Inductor's output code for the forward (or inference) graph
    backward_code: str = ""  # ... and for the backward
    # Each cache lookup of its compile: (cache, AOT graph, result): ("fx_graph", "forward",
    # "hit"), ("aot_autograd", "", "miss"); the graph is "" for a cache of the whole compile.
    # Schema 7 and before kept pairs, the cache and graph in one key ("fx_graph forward").
    cache: tuple[tuple[str, str, str], ...] = ()
    # (phase, seconds) in pipeline order, of the build described: source "timing", the build
    # timing ran on (not the user's compile); source "trace", the user's compile of the graph's
    # frame as Report.compile_time counts it (frame compile and lazy backward compile).
    phases: tuple[tuple[str, float], ...] = ()
    profiled_ms: float | None = None  # one call's time under the profiler, wrappers included (fwd+bwd when training)
    # The same build's median time measured by the timer, without the profiler (whose own
    # cost per event inflates small graphs): shares and outside_kernels_ms are taken of it.
    measured_ms: float | None = None
    notes: tuple[str, ...] = ()  # what could not be read, and why
    # The collectives Inductor scheduled, in the order it runs them (its
    # inductor_collective_schedule, one kernel name each); () when the graph has none or
    # the torch did not log it. Ranks that run these in another order hang.
    collective_schedule: tuple[str, ...] = ()
    # A digest of what Inductor logged of its kernels' estimated runtimes and output tensor
    # metadata (inductor_runtime_and_tensor_meta; one per compile, comma-joined); "" when the
    # torch did not log it. Ranks whose digests differ compiled different kernels.
    runtime_meta: str = ""

    @classmethod
    def _upgraded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A lowering as an older file saved it, in this layout (the codec calls it on every
        lowering it reads): before schema 8 each cache lookup was a pair whose key named the
        cache and the AOT graph together ("fx_graph forward", "hit")."""
        cache = data.get("cache")
        if not isinstance(cache, list) or not any(isinstance(e, list) and len(e) == 2 for e in cache):
            return data
        out = dict(data)
        out["cache"] = [[*(str(e[0]).split(" ", 1) + [""])[:2], e[1]] if isinstance(e, list) and len(e) == 2 else e
                        for e in cache]
        return out

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

    @property
    def recomputed(self) -> tuple[str, ...]:
        """Nodes of the forward that the backward computes again instead of saving them
        (AOTAutograd's partitioner keeps a node's name when it copies it into the backward):
        backward ops with a forward op's name and target, in backward order."""
        if self.forward is None or self.backward is None:
            return ()
        ops = {n.name: n.target for n in self.forward.nodes if n.is_op}
        return tuple(n.name for n in self.backward.nodes if n.is_op and ops.get(n.name) == n.target)

    def kernel_of(self, node: str) -> tuple[Kernel, ...]:
        """Kernels that compute the Dynamo graph node named ``node``."""
        return tuple(k for k in self.kernels if node in k.nodes)


@dataclass(frozen=True)
class Graph(GraphShortcuts):
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
    # The inputs' placeholder names as the trace printed them ("L_x_",
    # "L_self_modules_fc_parameters_weight_"), for a graph known only from the trace, whose
    # nodes are not known: what tells its parameters from its inputs. () when the graph has
    # nodes (their placeholders name the inputs) and in reports saved before it.
    input_names: tuple[str, ...] = ()
    code: str = ""  # readable Python code of the graph
    origin: str = "backend"  # "backend": seen by dynscope's backend; "trace": only from the trace
    timings: tuple[Timing, ...] = ()  # one per Inductor mode when timing ran
    runs: int = 0  # times the graph ran during the calls (0: not counted, e.g. a graph read from a trace log)
    backward_runs: int = 0  # of those runs, how many also ran the graph's backward (training)
    lowering: Lowering | None = None  # AOT graphs and kernels, when the graph went through Inductor
    # Why one compile made several graphs without a graph break: "" (it did not) or
    # "ddp_bucket" (DDP's optimizer split it at gradient-bucket boundaries; not the user's
    # break, not counted against budgets; see docs/distributed.md).
    split_by: str = ""
    # Grad mode when Dynamo compiled it (torch.is_grad_enabled()): under no_grad torch.compile
    # builds an inference graph, otherwise a training graph that saves activations for
    # backward; timing times the build torch.compile made. True for trace-only graphs and in
    # reports saved without it.
    grad_enabled: bool = True
    # Peak memory and saved tensors, eager against compiled (report(memory=True) or
    # timing=True; the first mode's build); None when not measured.
    memory: GraphMemory | None = None
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


    @property
    def is_resume(self) -> bool:
        """True when the graph belongs to a resume function Dynamo made after a break."""
        return is_resume_name(self.frame)

    def user_inputs(self) -> tuple[tuple[TensorMeta, ...], int]:
        """(inputs that are not parameters or buffers, number of parameter/buffer inputs).

        Told by the inputs' names: the placeholder nodes, or ``input_names`` for a graph
        known only from the trace (the same names, as the trace printed them). Without
        either (reports saved before ``input_names``), all inputs count as user inputs.
        """
        names = [n.name for n in self.nodes if n.op == "placeholder"] if self.nodes else list(self.input_names)
        if len(names) != len(self.inputs):
            return self.inputs, 0
        # A placeholder is a parameter exactly when its name says so (Node.is_param).
        user = tuple(m for name, m in zip(names, self.inputs, strict=True) if not is_lifted_param(name))
        return user, len(self.inputs) - len(user)

    def op_count_of(self, target: str) -> int:
        """How many nodes call ``target``."""
        return dict(self.op_counts).get(target, 0)


    def to_networkx(self) -> Any:
        """The graph as a ``networkx.DiGraph`` with node and edge attributes."""
        from dynscope._model.structure import to_networkx

        return to_networkx(self)
