"""Read what AOTAutograd and Inductor log about one compile: PyTorch's text formats.

Sources, all from the structured trace (``torch.__trace``), torch 2.11 .. 2.14:

- ``aot_forward_graph`` / ``aot_backward_graph`` / ``aot_inference_graph`` events and the
  ``inductor_post_grad_graph`` artifact: FX graphs printed by ``print_readable``. One node
  per line, ``name: "f32[4, 32][32, 1]cpu" = torch.ops.aten.mm.default(a, b);  a = None``,
  after a ``# File: path:line in fn, code: ...`` comment naming the user's line.
- ``inductor_output_code``: the Python wrapper Inductor generated. With provenance tracking
  on, each kernel call follows a ``# [Provenance debug handles] <kernel>:<n>`` comment
  (n: the call's position in the wrapper).
- ``inductor_provenance_tracking_node_mappings`` (JSON): ``postToPre`` (post-grad node ->
  Dynamo graph nodes) and ``cppCodeToPost`` (kernel "name:n" -> post-grad nodes; the same
  key for Triton). Logged for forward and inference compiles; a backward compile logs only
  ``{"version": ...}``.
- ``inductor_provenance_tracking_kernel_stack_traces`` (JSON): kernel "name:n" -> the
  Python tracebacks of the user code it came from.
- ``chromium_event`` (JSON): begin/end of each timed compile step (``GraphLowering.run``,
  ``compile_file``...), read here into seconds per phase.

Every reader takes text and returns plain values; a payload it cannot read gives an empty
result, never an exception (the caller notes what is missing).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ATen ops that only reinterpret memory (or read metadata): Inductor computes nothing for
#: them, so a Dynamo node made only of these needs no kernel.
VIEW_OPS = frozenset(
    {
        "view", "_unsafe_view", "reshape", "permute", "t", "transpose", "expand", "unsqueeze",
        "squeeze", "slice", "select", "as_strided", "alias", "split", "split_with_sizes",
        "unbind", "chunk", "narrow", "detach", "diagonal", "unfold", "view_as_real",
        "view_as_complex", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
        "getitem", "_reshape_alias", "lift_fresh", "lift_fresh_copy", "expand_as", "view_as",
        "squeeze_", "unsqueeze_", "movedim", "flatten", "unflatten", "real", "imag",
    }
)  # fmt: skip

_DTYPE_BYTES = {
    "f64": 8, "f32": 4, "f16": 2, "bf16": 2, "c128": 16, "c64": 8, "c32": 4, "i64": 8,
    "i32": 4, "i16": 2, "i8": 1, "u64": 8, "u32": 4, "u16": 2, "u8": 1, "b8": 1,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1,
}  # fmt: skip
_DTYPE_NAMES = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16",
    "c128": "complex128", "c64": "complex64", "c32": "complex32", "i64": "int64",
    "i32": "int32", "i16": "int16", "i8": "int8", "u64": "uint64", "u32": "uint32",
    "u16": "uint16", "u8": "uint8", "b8": "bool",
}  # fmt: skip

# "f32[4, 32][32, 1]cpu", "f32[][]cuda:0", "Sym(s0)", "i64[s0, 16][16, 1]cpu"
_TENSOR_META = re.compile(r"^(\w+)\[([^\]]*)\]\[([^\]]*)\]([\w:]+)$")
_SIG_ARG = re.compile(r'(\w+):\s*"([^"]*)"')
_NODE = re.compile(r'^(\w+)(?::\s*"([^"]*)")?\s*=\s*([\w.]+)\((.*)\)\s*$')
_SUBSCRIPT = re.compile(r'^(\w+)(?::\s*"([^"]*)")?\s*=\s*(\w+)\[(.*)\]\s*$')  # getitem: x = var_mean[0]
_ASSIGN = re.compile(r'^(\w+)(?::\s*"([^"]*)")?\s*=\s*(.+)$')  # anything else: s1 = s0 + 1
# torch 2.14 prefixes a backward graph's comments: "# Backward of forward node: File: ...".
_FILE_COMMENT = re.compile(r"^# (?:Backward of forward node: )?File: (.*?):(\d+) in ([^,]*), code: (.*)$")
_IDENT = re.compile(r"\b([A-Za-z_]\w*)\b")
_HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*(\S+)")
_TRACE_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_KERNEL_PREFIX = re.compile(r"^(?:cpp|triton)(?:_[a-z]+)?_fused_|^(?:cpp|triton)_")


@dataclass(frozen=True)
class TensorText:
    """One value's meta as PyTorch prints it: dtype code, sizes, strides, device."""

    kind: str  # "tensor", "symint" or "other"
    dtype: str = ""  # "float32"
    shape: tuple[int | str, ...] = ()
    stride: tuple[int | str, ...] = ()
    device: str = ""
    nbytes: int = 0  # at the printed sizes; symbolic sizes count as 1
    symbolic: bool = False  # a size or stride is a symbol


@dataclass(frozen=True)
class GraphNode:
    """One node of a printed FX graph."""

    name: str
    op: str  # "placeholder", "call_function" or "output"
    target: str = ""  # "aten.addmm.default", "operator.getitem"
    args: tuple[str, ...] = ()  # names of earlier nodes it reads
    meta: TensorText | None = None
    filename: str = ""
    lineno: int = 0
    source: str = ""


@dataclass(frozen=True)
class GraphText:
    """A graph read from ``print_readable`` text."""

    nodes: tuple[GraphNode, ...] = ()
    outputs: tuple[str, ...] = ()  # names the graph returns, in order

    @property
    def placeholders(self) -> tuple[GraphNode, ...]:
        return tuple(n for n in self.nodes if n.op == "placeholder")

    def by_name(self) -> dict[str, GraphNode]:
        return {n.name: n for n in self.nodes}


def op_name(target: str) -> str:
    """The short op name of a printed target: "torch.ops.aten.addmm.default" -> "addmm"."""
    parts = target.split(".")
    if target.startswith("torch.ops.") and len(parts) >= 4:
        return parts[3]
    return parts[-1]


def short_target(target: str) -> str:
    """"torch.ops.aten.addmm.default" -> "aten.addmm.default"; others unchanged."""
    return target[len("torch.ops.") :] if target.startswith("torch.ops.") else target


def is_view(target: str) -> bool:
    """True when the printed target only reinterprets memory or reads metadata."""
    return op_name(target) in VIEW_OPS


def tensor_text(meta: str) -> TensorText:
    """Parse one printed meta string."""
    meta = meta.strip()
    if meta.startswith("Sym("):
        return TensorText(kind="symint")
    m = _TENSOR_META.match(meta)
    if not m:
        return TensorText(kind="other")
    code, sizes, strides, device = m.groups()

    def dims(text: str) -> tuple[int | str, ...]:
        return tuple(int(d) if d.strip().lstrip("-").isdigit() else d.strip() for d in text.split(",") if d.strip())

    shape, stride = dims(sizes), dims(strides)
    symbolic = any(isinstance(d, str) for d in shape + stride)
    numel = 1
    for d in shape:
        numel *= d if isinstance(d, int) else 1
    return TensorText(
        kind="tensor",
        dtype=_DTYPE_NAMES.get(code, code),
        shape=shape,
        stride=stride,
        device=device,
        nbytes=numel * _DTYPE_BYTES.get(code, 0),
        symbolic=symbolic,
    )


def parse_graph_text(text: str) -> GraphText:
    """Read a ``print_readable`` graph: the top-level ``forward`` only (nested submodules,
    such as a higher-order op's body, are skipped)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("def forward(")), None)
    if start is None:
        return GraphText()
    def_indent = len(lines[start]) - len(lines[start].lstrip())
    # The signature runs to the line ending in "):" (one line on older torch, several on newer).
    end = start
    while end < len(lines) and not lines[end].rstrip().endswith(":"):
        end += 1
    signature = "\n".join(lines[start : end + 1])
    nodes: list[GraphNode] = []
    known: set[str] = set()
    for name, meta in _SIG_ARG.findall(signature):
        if name == "self":
            continue
        nodes.append(GraphNode(name=name, op="placeholder", meta=tensor_text(meta)))
        known.add(name)
    body_indent: int | None = None
    where: tuple[str, int, str] = ("", 0, "")
    outputs: tuple[str, ...] = ()
    body = lines[end + 1 :]
    for k, ln in enumerate(body):
        stripped = ln.strip()
        if not stripped:
            continue
        indent = len(ln) - len(ln.lstrip())
        if indent <= def_indent:
            break  # the end of forward
        if body_indent is None:
            body_indent = indent
        if indent != body_indent:
            continue  # inside a nested class (a submodule's own forward)
        fm = _FILE_COMMENT.match(stripped)
        if fm:
            where = (fm.group(1), int(fm.group(2)), fm.group(4).strip())
            continue
        if stripped.startswith("#") or stripped.startswith("class "):
            continue
        if stripped.startswith("return"):
            # One line, or "return (" then one output per line (each with a comment) and ")".
            ret = [stripped[len("return") :]]
            if stripped.endswith("("):
                for more in body[k + 1 :]:
                    ret.append(more.split("#", 1)[0])
                    if more.strip() == ")":
                        break
            outputs = tuple(n for n in _IDENT.findall(" ".join(x.split("#", 1)[0] for x in ret)) if n in known)
            break
        statement = stripped.split(";")[0].strip()
        nm, sm, am = _NODE.match(statement), _SUBSCRIPT.match(statement), _ASSIGN.match(statement)
        if nm:
            name, meta, target, args = nm.groups()
        elif sm:
            name, meta, args = sm.group(1), sm.group(2), sm.group(3) + "," + sm.group(4)
            target = "operator.getitem"
        elif am:
            name, meta, args = am.groups()
            target = "python"
        else:
            continue
        reads = tuple(dict.fromkeys(a for a in _IDENT.findall(args) if a in known))
        nodes.append(
            GraphNode(
                name=name,
                op="call_function",
                target=target,
                args=reads,
                meta=tensor_text(meta) if meta else None,
                filename=where[0],
                lineno=where[1],
                source=where[2],
            )
        )
        known.add(name)
    return GraphText(nodes=tuple(nodes), outputs=outputs)


def _json(payload: str) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except (ValueError, TypeError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Provenance:
    """Inductor's node mappings for one compile (empty for a backward compile)."""

    post_to_pre: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kernel_to_post: dict[str, tuple[str, ...]] = field(default_factory=dict)  # "name:n" -> post nodes

    @property
    def empty(self) -> bool:
        return not self.kernel_to_post


def read_provenance(payload: str) -> Provenance:
    """Parse ``inductor_provenance_tracking_node_mappings``."""
    data = _json(payload)

    def table(value: Any) -> dict[str, tuple[str, ...]]:
        if not isinstance(value, dict):
            return {}
        return {str(k): tuple(str(x) for x in v) for k, v in value.items() if isinstance(v, list)}

    kernels: dict[str, tuple[str, ...]] = {}
    for key, value in data.items():
        # "cppCodeToPost" on every device so far; any "<x>CodeToPost" table is kernel -> post.
        if key.endswith("CodeToPost"):
            kernels.update(table(value))
    return Provenance(post_to_pre=table(data.get("postToPre")), kernel_to_post=kernels)


def read_kernel_lines(payload: str) -> dict[str, tuple[tuple[str, int], ...]]:
    """Parse ``inductor_provenance_tracking_kernel_stack_traces``: kernel "name:n" ->
    (file, line) of the innermost frame of each traceback, in order, without repeats."""
    out: dict[str, tuple[tuple[str, int], ...]] = {}
    for key, traces in _json(payload).items():
        if not isinstance(traces, list):
            continue
        seen: dict[tuple[str, int], None] = {}
        for tb in traces:
            frames = _TRACE_FRAME.findall(str(tb))
            if frames:
                fname, line = frames[-1]
                seen[(fname, int(line))] = None
        out[str(key)] = tuple(seen)
    return out


def kernel_calls(code: str) -> list[tuple[str, int]]:
    """("name:n", 1-based line of the call) for each provenance-marked call in output code,
    in call order."""
    out: list[tuple[str, int]] = []
    lines = code.splitlines()
    for i, ln in enumerate(lines):
        m = _HANDLE.search(ln)
        if m:
            # The call is the next line that is not a comment.
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("#"):
                j += 1
            out.append((m.group(1), j + 1))
    return out


_KERNEL_DEF = re.compile(r"^\w+ = async_compile\.", re.MULTILINE)
_LIBRARY_CALL = re.compile(r"\b(?:extern_kernels\.\w+|torch\.ops\.\w+\.\w+\.\w+|aten\.\w+\.\w+)\(")


def calls_kernels(code: str) -> bool:
    """True when output code defines a kernel or calls a library kernel (a graph made only of
    views, such as the backward of a sum, calls none)."""
    return bool(_KERNEL_DEF.search(code) or _LIBRARY_CALL.search(code))


def split_handle(key: str) -> tuple[str, int]:
    """"cpp_fused_add_0:3" -> ("cpp_fused_add_0", 3); no handle -> (key, 0)."""
    name, sep, num = key.rpartition(":")
    if sep and num.isdigit():
        return name, int(num)
    return key, 0


def kernel_kind(name: str) -> str:
    """"triton", "cpp", "extern" (a library call) or "fallback" (an op Inductor left to ATen)."""
    if name.startswith("triton"):
        return "triton"
    if name.startswith("cpp"):
        return "cpp"
    if name.startswith("extern_kernels."):
        return "extern"
    if name.startswith(("torch.ops.mkldnn.", "torch.ops.onednn.", "torch.ops.mkl.", "torch.ops.quantized.")):
        return "extern"
    return "fallback"


def kernel_op(name: str) -> str:
    """The op an extern or fallback kernel calls: "extern_kernels.addmm" -> "aten.addmm";
    "torch.ops.aten.sort.stable" -> "aten.sort"."""
    if name.startswith("extern_kernels."):
        return "aten." + name[len("extern_kernels.") :]
    parts = short_target(name).split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else name


def profiler_names(name: str) -> tuple[str, ...]:
    """Names the profiler gives this kernel's events (without the "graph_<n>_" prefix
    Inductor adds to C++ kernels it records)."""
    kind = kernel_kind(name)
    if kind in ("cpp", "triton"):
        return (name,)
    op = kernel_op(name)
    ns, _, opname = op.partition(".")
    return (f"{ns}::{opname}",)


def name_ops(name: str, vocabulary: frozenset[str]) -> tuple[str, ...]:
    """The ATen ops named in a fused kernel's name ("cpp_fused_mul_native_layer_norm_relu_0"
    -> mul, native_layer_norm, relu), longest match first against ``vocabulary``."""
    body = _KERNEL_PREFIX.sub("", name)
    body = re.sub(r"_\d+$", "", body)
    words = body.split("_")
    out: list[str] = []
    i = 0
    while i < len(words):
        for j in range(len(words), i, -1):
            cand = "_".join(words[i:j])
            if cand in vocabulary:
                out.append("aten." + cand)
                i = j
                break
        else:
            i += 1
    return tuple(dict.fromkeys(out))


_ATEN_CALL = re.compile(r"torch\.ops\.aten\.(\w+)\.")


def aten_ops_in(text: str) -> set[str]:
    """The short names of the ATen ops a printed AOT or post-grad graph calls
    ("torch.ops.aten.addmm.default" -> "addmm")."""
    return set(_ATEN_CALL.findall(text))


@functools.lru_cache(maxsize=1)
def shipped_aten_ops() -> frozenset[str]:
    """The ATen op short names dynscope ships (aten_ops.txt, made by scripts/aten_ops.py)."""
    text = (Path(__file__).parent / "aten_ops.txt").read_text(encoding="utf-8")
    return frozenset(line for line in text.splitlines() if line and not line.startswith("#"))


def aten_vocabulary() -> frozenset[str]:
    """Every registered ATen op's short name (for :func:`name_ops`) where this process has
    already imported torch; empty otherwise. Never imports torch: reading a log needs none
    (its kernel names are read against :func:`shipped_aten_ops`)."""
    torch = sys.modules.get("torch")
    names = getattr(getattr(torch, "_C", None), "_dispatch_get_all_op_names", None)
    if names is None:
        return frozenset()
    try:
        return frozenset(n.split("::", 1)[1].split(".")[0] for n in names() if n.startswith("aten::"))
    except Exception:  # noqa: BLE001 - a half-imported or stub torch: the shipped list stands
        return frozenset()


# -- compile phases -----------------------------------------------------------------------

#: Phases in pipeline order, with the compile steps (chromium event names) that belong to
#: each. Time is given to the innermost open step; a step not listed takes its parent's phase.
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("dynamo", ("entire_frame_compile", "compile_attempt", "bytecode_tracing", "build_guards",
                "insert_deferred_runtime_asserts", "OutputGraph.")),
    # The backend call itself, outside any step of AOTAutograd or Inductor (all of it for a
    # backend such as "eager").
    ("backend", ("backend_compile",)),
    # "entire_backward_compile": AOTAutograd compiling the backward at the first backward().
    ("aot_autograd", ("create_aot_dispatcher_function", "aot_", "AOTAutogradCache", "_recursive_pre_grad",
                      "pass.pre_grad", "_recursive_joint_graph", "pass.joint_graph",
                      "min_cut_rematerialization_partition", "autograd_cache", "compile_fx.<locals>",
                      "inductor_codecache_torch_key", "CacheBase", "entire_backward_compile")),
    ("lowering", ("inductor_compile", "compile_fx_inner", "fx_codegen_and_compile", "additional_fake_tensor_prop",
                  "_recursive_post_grad", "pass.post_grad", "GraphLowering.run", "Scheduler.__init__",
                  "Scheduler.fused_nodes", "Scheduler.", "GraphLowering.compile_to_fn")),
    ("codegen", ("code_gen", "GraphLowering.codegen", "Scheduler.codegen", "PythonWrapperCodegen",
                 "GraphLowering.compile_to_module")),
    ("compile", ("compile_file", "async_compile", "PyCodeCache", "TritonBundler", "triton", "CachingAutotuner",
                 "cpp_", "CppCodeCache")),
)  # fmt: skip
PHASE_ORDER = tuple(p for p, _ in PHASES)


def _phase_of(step: str) -> str | None:
    best: tuple[int, str] | None = None
    for phase, prefixes in PHASES:
        for p in prefixes:
            if step.startswith(p) and (best is None or len(p) > best[0]):
                best = (len(p), phase)
    return best[1] if best else None


def read_chromium(payload: str) -> tuple[str, str, float] | None:
    """(name, "B"/"E", microseconds) of one ``chromium_event`` payload; None otherwise."""
    data = _json(payload)
    name, ph, ts = data.get("name"), data.get("ph"), data.get("ts")
    if not isinstance(name, str) or ph not in ("B", "E") or not isinstance(ts, (int, float)):
        return None
    return name, str(ph), float(ts)


#: The steps PyTorch adds up as the compile its user waits for: the frame compile and
#: AOTAutograd's lazy backward compile (``torch._dynamo.utils.calculate_time_spent``'s
#: "total_wall_time"). The same spans give compilation_metrics' ``entire_frame_compile_time_s``
#: and bwd_compilation_metrics' ``backward_cumulative_compile_time_us``.
WAIT_STEPS = ("entire_frame_compile", "entire_backward_compile")
#: The lazy backward compile, one of WAIT_STEPS.
BACKWARD_STEP = "entire_backward_compile"
#: The whole of an ahead-of-time compile (AOTInductor), logged without a compile id.
AOT_STEP = "compile_fx_aot"


def phases_of_steps(steps: list[tuple[str, str, float]], *, within: tuple[str, ...] = ()) -> dict[str, float]:
    """Seconds per phase from begin/end steps of one compile (time in nested steps goes to the
    innermost one that has a phase, so nothing is counted twice).

    With ``within`` (e.g. :data:`WAIT_STEPS`), only time while one of those steps is open
    counts: the phases then add up to those steps' own spans, PyTorch's compile total.
    """
    out = dict.fromkeys(PHASE_ORDER, 0.0)
    stack: list[tuple[str, str | None]] = []  # (step, phase)
    last: float | None = None
    for name, ph, ts in sorted(steps, key=lambda s: s[2]):
        if last is not None and stack and (not within or any(s in within for s, _ in stack)):
            phase = next((p for _, p in reversed(stack) if p is not None), None)
            if phase is not None:
                out[phase] += (ts - last) / 1e6
        last = ts
        if ph == "B":
            stack.append((name, _phase_of(name)))
        else:
            # Close the innermost matching step (steps close in order; tolerate a missing begin).
            for i in range(len(stack) - 1, -1, -1):
                if stack[i][0] == name:
                    del stack[i]
                    break
    return {p: s for p, s in out.items() if s > 0}


def step_seconds(steps: list[tuple[str, str, float]], name: str) -> float:
    """Seconds spent in the step ``name`` (its begin/end pairs added up; an inner repeat of
    an open step is not counted twice)."""
    total = 0.0
    depth = 0
    begin = 0.0
    for step, ph, ts in sorted(steps, key=lambda s: s[2]):
        if step != name:
            continue
        if ph == "B":
            if depth == 0:
                begin = ts
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                total += (ts - begin) / 1e6
    return total


#: A kernel's comment in generated wrapper code (C++ ``//`` or Python ``#``): the graph nodes it
#: computes and the ATen ops it fuses.
_SOURCE_COMMENT = re.compile(
    r"^\s*(?://|#)\s*Topologically Sorted Source Nodes: \[(?P<nodes>[^\]]*)\], Original ATen: \[(?P<ops>[^\]]*)\]")
#: The call after it in AOTInductor's C++ wrapper: a generated kernel, or a library shim
#: (``aoti_torch_cpu_addmm_out``) inside ``AOTI_TORCH_ERROR_CODE_CHECK(...)``.
_CPP_CALL = re.compile(r"^\s*(?:AOTI_TORCH_ERROR_CODE_CHECK\()?(?P<name>(?:cpp_|triton_)\w+|aoti_torch_\w+)\(")
_SHIM = re.compile(r"^aoti_torch_(?:cpu|cuda|xpu|mps)_(?P<op>\w+?)(?:_out)?$")


@dataclass(frozen=True)
class AotKernel:
    """One kernel AOTInductor's C++ wrapper calls."""

    name: str  # "cpp_fused_relu_0", or the ATen op of a library shim ("aten.addmm")
    kind: str  # "cpp", "triton" or "extern"
    aten_ops: tuple[str, ...]
    nodes: tuple[str, ...]  # the exported graph's nodes it computes
    line: int  # 1-based line of the call in the wrapper


def aot_wrapper_kernels(code: str) -> list[AotKernel]:
    """Each kernel call of AOTInductor's C++ wrapper code, in call order: generated kernels
    (``cpp_fused_relu_0(...)``) and library shims (``aoti_torch_cpu_addmm_out``), with the
    nodes and ATen ops of the comment before the call when there is one (the wrapper leaves
    some generated kernels without; their ops are then read from the kernel's name)."""
    out: list[AotKernel] = []
    comment: re.Match[str] | None = None
    for i, ln in enumerate(code.splitlines()):
        m = _SOURCE_COMMENT.match(ln)
        if m is not None:
            comment = m
            continue
        call = _CPP_CALL.match(ln)
        if call is None:
            continue
        name = call.group("name")
        shim = _SHIM.match(name)
        if name.startswith("aoti_torch_") and shim is None:
            continue  # allocation and tensor plumbing (aoti_torch_empty_strided...), not compute
        ops = tuple(o.strip() for o in comment.group("ops").split(",") if o.strip()) if comment else ()
        nodes = tuple(n.strip() for n in comment.group("nodes").split(",") if n.strip()) if comment else ()
        if shim is not None:
            out.append(AotKernel(f"aten.{shim.group('op')}", "extern", ops or (f"aten.{shim.group('op')}",), nodes, i + 1))
        else:
            out.append(AotKernel(name, kernel_kind(name), ops, nodes, i + 1))
        comment = None
    return out


def read_collective_schedule(payload: str) -> tuple[str, ...]:
    """``inductor_collective_schedule``: the collective kernels Inductor scheduled, in order
    (``"torch.ops._c10d_functional.all_reduce_.default"``); () when unreadable."""
    try:
        data = json.loads(payload)
    except ValueError:
        return ()
    return tuple(str(x) for x in data if x) if isinstance(data, list) else ()


def read_runtime_meta(payload: str) -> str:
    """``inductor_runtime_and_tensor_meta``: a digest of the ops Inductor scheduled in one
    compile (name, type) and their outputs' tensor metadata (shapes, strides, dtypes), over
    canonical JSON (keys sorted, no spaces); "" when unreadable. Ranks whose digests differ
    compiled different kernels. The ops' ``estimated_runtime_ns`` are left out: they are
    benchmarked on each rank and differ between ranks that compiled the same kernels
    (tlparse compares them too, and so warns on every rank of a healthy job)."""
    try:
        data = json.loads(payload)
    except (ValueError, RecursionError):
        return ""
    ops = data.get("ops") if isinstance(data, dict) else None
    if isinstance(ops, list):
        data = [{k: v for k, v in op.items() if k != "estimated_runtime_ns"} if isinstance(op, dict) else op
                for op in ops]
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.md5(canonical.encode("utf-8"), usedforsecurity=False).hexdigest()[:16]


def read_execution_order(payload: str) -> tuple[str, ...] | None:
    """``graph_execution``: the compile ids of the graphs in the order they ran ("" for one
    without); None when unreadable."""
    try:
        data = json.loads(payload)
    except ValueError:
        return None
    order = data.get("graph_execution_order") if isinstance(data, dict) else None
    if not isinstance(order, list):
        return None
    return tuple(str(e.get("compile_id") or "") if isinstance(e, dict) else "" for e in order)
