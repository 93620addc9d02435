"""A captured graph as one standalone Python file that rebuilds it and times it again.

:func:`graph_script` turns a :class:`~dynscope.Graph` (live or loaded from JSON) into the
text of a script that needs only torch: it rebuilds the ``torch.fx.GraphModule`` from the
graph's code as Dynamo printed it, makes inputs from the recorded shapes, dtypes and
strides (random data, seed 0; Python scalars from their values; symbolic sizes at the
sizes the compiling call ran at), checks Inductor's outputs against eager and times the
two the way dynscope does (docs/timing.md), printing its figures in a fixed form beside
the report's. Attach it to a bug report, or rerun it after a torch upgrade.

Pure, like every renderer: report data in, text out; no torch import (``ast`` reads the
code). Everything that could not be rebuilt is found here, not in the script: a graph
whose code names what the report does not keep (a constant tensor, a function of the
program) raises :class:`~dynscope.InputError` saying why, and the rebuilt node list must
be the report's node for node.

What the script runs (inputs from the specs, Inductor's compile, numerics, timing, its
command line) is the timing runtime, ``dynscope/_torch/runtime.py``, whose source is read
as package data and written in verbatim: the script times with the code dynscope timed
with, and the private torch calls it makes (``compile_fx``, ``list_mode_options``, a
``ShapeEnv`` for symbolic sizes) live on the torch floor, where the layer test sees them.
This module writes only what differs per graph: the header, the recorded constants, the
builders, and the lines that hand them to the runtime.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import textwrap
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from dynscope._errors import InputError
from dynscope._format import location, ms, plural
from dynscope._lexicon.wording import is_lifted_param

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model import Graph, Report, TensorMeta, Timing

__all__ = ["SCRIPT_MODES", "graph_script"]

#: The modes a script can compile with: torch.compile's (dynscope._capture.timing_options.MODES,
#: which tests/render/test_script.py checks this against; the render floor cannot import capture).
SCRIPT_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_CUDA_ONLY_MODES = ("reduce-overhead",)

#: Names FX's printed code may use without defining them: the globals its code generator
#: adds (``inf``, ``nan``, ``device``, ``NoneType``), the modules the script imports, and the
#: builtins a graph calls or passes (``slice``, ``getattr``...). Not eval, exec, open or
#: __import__: the script runs the report's code, and a report may be someone else's.
_KNOWN_GLOBALS = frozenset({
    "torch", "operator", "math", "inf", "nan", "device", "NoneType",
    "slice", "getattr", "hasattr", "isinstance", "int", "float", "bool", "complex", "str", "tuple", "list",
    "dict", "range", "len", "min", "max", "abs", "round", "pow", "divmod", "sum", "any", "all", "Ellipsis",
})
#: Attributes no graph reads, that would reach past torch into the machine (``torch.os.system``,
#: ``x.__class__.__subclasses__``): a report whose code names them is refused.
_UNSAFE_ATTRS = frozenset({"os", "sys", "subprocess", "builtins", "importlib", "ctypes", "pickle", "shutil",
                           "socket", "hub", "load", "cpp_extension", "system", "popen"})

#: The operator namespaces of torch itself (``torch.ops.aten``...; torch 2.13's registry after
#: importing Inductor): an op of another namespace (``torch.ops.mylib.foo``, torchvision's)
#: is registered by the program or a library the script does not import.
_TORCH_OP_NAMESPACES = frozenset({
    "aten", "prims", "higher_order", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional", "c10d",
    "_dtensor", "_native", "_quantized", "quantized", "quantization", "quantized_decomposed", "debugprims",
    "rngprims", "inductor", "inductor_prims", "mkl", "mkldnn", "mkldnn_prepacked", "onednn", "profiler",
    "sparse", "symm_mem", "fsdp", "streams", "flex_lib", "export", "onnx", "onnx_symbolic", "debug_mode_ops",
})

#: FX prints these operator calls as Python operators (torch/fx/graph.py ``magic_methods``).
_BINARY = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv", ast.Div: "truediv",
    ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift", ast.BitAnd: "and_",
    ast.BitOr: "or_", ast.BitXor: "xor", ast.MatMult: "matmul",
}
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.Gt: "gt", ast.LtE: "le", ast.GtE: "ge"}
_UNARY = {ast.UAdd: "pos", ast.USub: "neg", ast.Invert: "invert", ast.Not: "not_"}
#: ... and these in place (``inplace_methods``): ``y += x;  y_1 = y``.
_INPLACE = {ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.FloorDiv: "ifloordiv", ast.Div: "itruediv",
            ast.Mod: "imod", ast.Pow: "ipow", ast.LShift: "ilshift", ast.RShift: "irshift", ast.BitAnd: "iand",
            ast.BitOr: "ior", ast.BitXor: "ixor", ast.MatMult: "imatmul"}


def graph_script(graph: Graph, *, timing: bool = True, mode: str | None = None, report: Report | None = None) -> str:
    """The text of a standalone script that rebuilds ``graph`` and runs it eager against Inductor.

    Args:
        graph: a captured graph, live or from a loaded report (its ``code`` and ``inputs``
            are what the script is made of).
        timing: the script also times eager against Inductor (warm-up, interleaved samples,
            medians, as dynscope does); False: it only compiles and checks numerics (it
            takes ``--timing`` to time anyway). Defaults to True.
        mode: the Inductor mode to compile with; None takes the mode of the graph's first
            timing, else "default". Defaults to None.
        report: the report the graph comes from: its title and torch version go into the
            header. Defaults to None.

    Returns:
        The script's text.

    Raises:
        InputError: the graph cannot be rebuilt standalone (the message says why), or
            ``mode`` is not a torch.compile mode or needs CUDA the graph did not run on.

    Example:
        >>> text = graph_script(rep.graph(0), report=rep)
    """
    mode = _mode(graph, mode)
    where = f"graph {graph.id} ({graph.frame})"
    if not graph.code.strip():
        raise InputError(f"{where} has no code to rebuild (a report saved without graph code); capture it again")
    modules = _translate(graph, where)
    spec = _input_specs(graph, modules[-1].params, where)
    op = modules[-1].names.operator
    parts = [
        _header(graph, mode, timing, report, spec),
        "import math\n"
        + ("import operator\n" if op == "operator" else f"import operator as {op}\n")
        + "import sys\n\nimport torch\n",
        _constants(graph, mode, timing, report, spec),
        _builders(modules),
        _durations(),
        _runtime(),
        _START,
    ]
    return "\n\n".join(p.strip("\n") for p in parts) + "\n"


def _durations() -> str:
    """dynscope's own ``ms()`` (dynscope._format, verbatim): the script prints its figures
    as the report does, carrying its copy of the one rule (it imports no dynscope)."""
    return (
        "# -- durations: dynscope's own (dynscope._format.ms, verbatim) ---------------------------------\n\n"
        + inspect.getsource(ms)
    )


def _mode(graph: Graph, mode: str | None) -> str:
    chosen = mode if mode is not None else (graph.timings[0].mode if graph.timings else "default")
    if chosen not in SCRIPT_MODES:
        raise InputError(f"unknown mode {chosen!r}; valid modes: {', '.join(SCRIPT_MODES)}")
    device = _device(graph)
    if chosen in _CUDA_ONLY_MODES and not device.startswith("cuda"):
        raise InputError(
            f"mode {chosen!r} uses CUDA graphs and needs CUDA inputs; graph {graph.id} ran on {device}. "
            "Use 'default' or 'max-autotune-no-cudagraphs'."
        )
    return chosen


def _device(graph: Graph) -> str:
    return next((m.device for m in graph.inputs if m.kind == "tensor" and m.device), "cpu")


# -- the code: Dynamo's printed graph -> statements that build the same FX graph -------------


@dataclass(frozen=True)
class _Names:
    """The script's own names in the builders, chosen apart from every name in the code (a
    program's variable called ``graph`` names its node ``graph``)."""

    graph: str = "graph"  # each builder's torch.fx.Graph
    root: str = "root"  # ... and the module holding nested bodies
    operator: str = "operator"  # the operator module, for the nodes FX prints as operators

    @staticmethod
    def apart_from(tree: ast.AST) -> _Names:
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
            a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)
        }

        def free(name: str) -> str:
            while name in used:
                name += "_"
            return name

        return _Names(free("graph"), free("root"), free("operator"))


@dataclass
class _Module:
    """One GraphModule class of the printed code (the graph, or a nested higher-order-op body)."""

    name: str  # the class name ("GraphModule", "cond_true_0")
    builder: str  # the script's function that builds it ("build_graph", "build_cond_true_0")
    names: _Names  # the builder's own names
    lines: list[str] = field(default_factory=list)  # the builder's body
    nodes: list[tuple[str, str]] = field(default_factory=list)  # (op, name), in graph order
    subs: dict[str, str] = field(default_factory=dict)  # nested class read with get_attr -> its builder
    params: list[str] = field(default_factory=list)  # forward's parameters (the placeholders' targets)


def _translate(graph: Graph, where: str) -> list[_Module]:
    """The printed code as builder functions (nested classes first), checked against the
    report's own node list."""
    try:
        tree = ast.parse(graph.code)
    except SyntaxError as err:
        raise InputError(f"{where}: its code is not valid Python ({err.msg}, line {err.lineno}); cannot rebuild it") from err
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    if len(classes) != 1:
        raise InputError(f"{where}: its code is not one GraphModule class as Dynamo prints it; cannot rebuild it")
    out: list[_Module] = []
    root = _translate_class(classes[0], "build_graph", where, out, _Names.apart_from(tree))
    expected = [(n.op, n.name) for n in graph.nodes]
    if expected and root.nodes != expected:
        k = next((i for i, (a, b) in enumerate(zip(root.nodes, expected, strict=False)) if a != b),
                 min(len(root.nodes), len(expected)))
        got = " ".join(root.nodes[k]) if k < len(root.nodes) else "nothing"
        want = " ".join(expected[k]) if k < len(expected) else "nothing"
        raise InputError(
            f"{where}: rebuilding its code gives {plural(len(root.nodes), 'node')} where the report has "
            f"{len(expected)}; node {k} would be {got} instead of {want}. Cannot rebuild it faithfully"
        )
    if len(root.params) != len(graph.inputs):
        raise InputError(
            f"{where}: its code takes {plural(len(root.params), 'input')} but the report recorded "
            f"{len(graph.inputs)}; cannot rebuild it"
        )
    return out


def _forward(cls: ast.ClassDef, where: str) -> ast.FunctionDef:
    fwd = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    if fwd is None:
        raise InputError(f"{where}: class {cls.name} in its code has no forward(); cannot rebuild it")
    return fwd


def _translate_class(cls: ast.ClassDef, builder: str, where: str, out: list[_Module], names: _Names) -> _Module:
    """One class and, first, the classes nested in it (each body its own GraphModule)."""
    prefix = "build_" if builder == "build_graph" else builder + "__"
    nested = {
        n.name: _translate_class(n, prefix + n.name, where, out, names).builder
        for n in cls.body
        if isinstance(n, ast.ClassDef)
    }
    mod = _Translator(_Module(cls.name, builder, names), where, nested).run(_forward(cls, where))
    out.append(mod)
    return mod


class _Translator:
    """Reads one forward(): each statement FX printed becomes one node-making call."""

    def __init__(self, mod: _Module, where: str, nested: dict[str, str]) -> None:
        self.mod = mod
        self.names = mod.names
        self.where = where
        self.nested = nested  # nested class -> its builder
        self.values: set[str] = set()  # names bound to a node
        # An in-place node waiting for the statement that names it: (its call, its first argument).
        self.pending: tuple[tuple[str, str], str] | None = None

    def fail(self, stmt: ast.AST, why: str) -> InputError:
        line = ast.unparse(stmt) if isinstance(stmt, ast.stmt) else ""
        line = line if len(line) < 120 else line[:117] + "..."
        return InputError(f"{self.where}: {why}" + (f" (`{line}`)" if line else "") + "; the script cannot rebuild it")

    def emit(self, text: str) -> None:
        self.mod.lines.append(text)

    def run(self, fwd: ast.FunctionDef) -> _Module:
        a = fwd.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults:
            raise self.fail(fwd, "its forward() takes *args, **kwargs or defaults")
        self.mod.params = [p.arg for p in a.args[1:]]
        body = list(fwd.body)
        # FX prints a placeholder whose node name differs from its target as an alias right
        # after the signature (``l_x_ = L_x_``): the node is named l_x_, its target is L_x_.
        names = {p: p for p in self.mod.params}
        while body and self._is_alias(body[0]) and names.get(_value_name(body[0])) == _value_name(body[0]):
            names[_value_name(body[0])] = _target_name(body[0])  # each placeholder aliased once
            body.pop(0)
        for p in self.mod.params:
            self.emit(f"{names[p]} = {self.names.graph}.create_node('placeholder', {p!r}, name={names[p]!r})")
            self.values.add(names[p])
            self.mod.nodes.append(("placeholder", names[p]))
        returned = False
        for stmt in body:
            if returned:
                raise self.fail(stmt, "its forward() goes on after return")
            returned = self.statement(stmt)
        if not returned:
            raise self.fail(fwd, "its forward() has no return")
        return self.mod

    @staticmethod
    def _is_alias(stmt: ast.stmt) -> bool:
        return _target_name(stmt) != "" and isinstance(_value(stmt), ast.Name)

    def statement(self, stmt: ast.stmt) -> bool:
        """Translate one statement; True for the return."""
        if isinstance(stmt, ast.Return):
            self.names_known(stmt.value, stmt)
            self.emit(f"{self.names.graph}.output({ast.unparse(stmt.value) if stmt.value is not None else 'None'})")
            self.mod.nodes.append(("output", "output"))
            return True
        if isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
            return False
        if self.pending is not None:
            # ``y += x;  y_1 = y``: the statement after an in-place op names its node.
            call, first = self.pending
            self.pending = None
            if _target_name(stmt) and _value_name(stmt) == first:
                self.node(_target_name(stmt), call)
                return False
            raise self.fail(stmt, "an in-place operation is not followed by the line naming its result")
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and type(stmt.op) in _INPLACE:
            self.names_known(stmt.value, stmt)
            self.need_value(stmt.target.id, stmt)
            op = f"{self.names.operator}.{_INPLACE[type(stmt.op)]}"
            self.pending = (_call("call_function", op, _args([stmt.target, stmt.value])), stmt.target.id)
            return False
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            sub = stmt.targets[0]
            if not isinstance(sub.value, ast.Name):
                raise self.fail(stmt, "it assigns into something other than a graph value")
            self.need_value(sub.value.id, stmt)
            self.names_known(sub.slice, stmt)
            self.names_known(stmt.value, stmt)
            args = _args([sub.value, sub.slice, stmt.value])
            self.pending = (_call("call_function", f"{self.names.operator}.setitem", args), sub.value.id)
            return False
        value = _value(stmt)
        if isinstance(stmt, ast.Assign) and isinstance(value, ast.Constant) and value.value is None:
            return False  # ``a = b = None``: FX freeing values it no longer needs
        target = _target_name(stmt)
        if not target or value is None:
            raise self.fail(stmt, "its code has a statement FX does not print")
        if isinstance(value, ast.Name):
            self.need_value(value.id, stmt)
            self.emit(f"{target} = {value.id}")
            self.values.add(target)
            return False
        self.node(target, self.expression(value, stmt))
        return False

    def node(self, name: str, call: tuple[str, str]) -> None:
        """``name = graph.create_node(...)``: one node, named as in the printed code."""
        op, text = call
        self.emit(f"{name} = {self.names.graph}{text[len('GRAPH'):-1]}, name={name!r})")
        self.values.add(name)
        self.mod.nodes.append((op, name))

    def expression(self, value: ast.expr, stmt: ast.stmt) -> tuple[str, str]:
        """The node-making call for the right-hand side of ``name = ...``."""
        if isinstance(value, ast.Call):
            func = value.func
            for k in value.keywords:
                if k.arg is None:
                    raise self.fail(stmt, "it calls with **kwargs")
            if any(isinstance(a, ast.Starred) for a in value.args):
                raise self.fail(stmt, "it calls with *args")
            for part in [*value.args, *(k.value for k in value.keywords)]:
                self.names_known(part, stmt)
            args, kwargs = _args(value.args), _kwargs(value.keywords)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.values:
                return _call("call_method", repr(func.attr), _args([func.value, *value.args]), kwargs)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
                if func.attr not in self.nested:
                    raise self.fail(stmt, f"it calls self.{func.attr}, a submodule the report does not keep")
                self.mod.subs[func.attr] = self.nested[func.attr]
                return _call("call_module", repr(func.attr), args, kwargs)
            self.names_known(func, stmt)
            return _call("call_function", ast.unparse(func), args, kwargs)
        if isinstance(value, ast.BinOp) and type(value.op) in _BINARY:
            self.names_known(value, stmt)
            return _call("call_function", f"{self.names.operator}.{_BINARY[type(value.op)]}", _args([value.left, value.right]))
        if isinstance(value, ast.Compare) and len(value.ops) == 1 and type(value.ops[0]) in _COMPARE:
            self.names_known(value, stmt)
            return _call("call_function", f"{self.names.operator}.{_COMPARE[type(value.ops[0])]}", _args([value.left, value.comparators[0]]))
        if isinstance(value, ast.UnaryOp) and type(value.op) in _UNARY:
            self.names_known(value, stmt)
            return _call("call_function", f"{self.names.operator}.{_UNARY[type(value.op)]}", _args([value.operand]))
        if isinstance(value, ast.Subscript):
            self.names_known(value, stmt)
            return _call("call_function", f"{self.names.operator}.getitem", _args([value.value, value.slice]))
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
            if value.value.id == "self":
                if value.attr not in self.nested:
                    raise self.fail(
                        stmt, f"it reads self.{value.attr}, a constant or submodule whose value the report does not keep"
                    )
                self.mod.subs[value.attr] = self.nested[value.attr]
                return _call("get_attr", repr(value.attr), "()")
            if value.value.id in self.values:  # FX prints getattr(x, "shape") as x.shape
                return _call("call_function", "getattr", f"({value.value.id}, {value.attr!r})")
        raise self.fail(stmt, "its code has an expression FX does not print")

    def need_value(self, name: str, stmt: ast.stmt) -> None:
        if name not in self.values:
            raise self.fail(stmt, f"it uses {name} before the code defines it")

    def names_known(self, expr: ast.AST | None, stmt: ast.stmt) -> None:
        """Every name in ``expr`` is a graph value or a global the script defines."""
        if expr is None:
            return
        for n in ast.walk(expr):
            if isinstance(n, ast.Attribute) and (n.attr.startswith("__") or n.attr in _UNSAFE_ATTRS):
                raise self.fail(stmt, f"it reads .{n.attr}, which no graph needs")
            if (
                isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Attribute)
                and n.value.attr == "ops"
                and isinstance(n.value.value, ast.Name)
                and n.value.value.id == "torch"
                and n.attr not in _TORCH_OP_NAMESPACES
            ):
                raise self.fail(stmt, f"it calls torch.ops.{n.attr}, operators the program or a library registered, not torch")
            if isinstance(n, ast.Name) and n.id not in self.values and n.id not in _KNOWN_GLOBALS:
                if n.id == "self":
                    raise self.fail(stmt, "it reads self, a module the report does not keep")
                raise self.fail(
                    stmt, f"it calls or reads {n.id}, a name of the program the code refers to but does not define"
                )


def _value(stmt: ast.stmt) -> ast.expr | None:
    if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
        return stmt.value
    return None


def _target_name(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return stmt.target.id
    return ""


def _value_name(stmt: ast.stmt) -> str:
    v = _value(stmt)
    return v.id if isinstance(v, ast.Name) else ""


def _expr(node: ast.expr) -> str:
    """Source of an argument; a bare slice (``x[1:3]``, which FX prints as ``slice(1, 3, None)``
    anyway) spelled as the ``slice`` it is."""
    if isinstance(node, ast.Slice):
        parts = [ast.unparse(p) if p is not None else "None" for p in (node.lower, node.upper, node.step)]
        return f"slice({', '.join(parts)})"
    if isinstance(node, ast.Tuple):
        inner = ", ".join(_expr(e) for e in node.elts)
        return f"({inner},)" if len(node.elts) == 1 else f"({inner})"
    return ast.unparse(node)


def _args(args: list[ast.expr]) -> str:
    if not args:
        return "()"
    inner = ", ".join(_expr(a) for a in args)
    return f"({inner},)" if len(args) == 1 else f"({inner})"


def _kwargs(keywords: list[ast.keyword]) -> str:
    if not keywords:
        return ""
    return "{" + ", ".join(f"{k.arg!r}: {_expr(k.value)}" for k in keywords) + "}"


def _call(op: str, target: str, args: str, kwargs: str = "") -> tuple[str, str]:
    """(op, the ``GRAPH.create_node`` call that makes the node, without its name; GRAPH stands
    for the builder's graph variable until :meth:`_Translator.node` names it)."""
    return op, f"GRAPH.create_node({op!r}, {target}, {args}" + (f", {kwargs}" if kwargs else "") + ")"


def _builders(modules: list[_Module]) -> str:
    """One function per class: nested bodies first, the graph (``build_graph``) last."""
    out = [
        "# -- the graph, rebuilt node by node from the code Dynamo printed -----------------------------\n"
        "# Names FX's printed code uses without defining them (its code generator's globals).\n"
        "inf, nan, device, NoneType = math.inf, math.nan, torch.device, type(None)"
    ]
    for mod in modules:
        what = "the captured graph" if mod.builder == "build_graph" else f"the nested body {mod.name}"
        g, root = mod.names.graph, mod.names.root
        lines = [f"def {mod.builder}():", f'    """The FX graph of {what}."""',
                 f"    {g} = torch.fx.Graph()", f"    {root} = torch.nn.Module()"]
        lines += [f"    {root}.{name} = {fn}()" for name, fn in mod.subs.items()]
        lines += ["    " + ln for ln in mod.lines]
        lines += [f"    {g}.lint()", f"    return torch.fx.GraphModule({root}, {g}, class_name={mod.name!r})"]
        out.append("\n".join(lines))
    return "\n\n\n".join(out)


# -- inputs ------------------------------------------------------------------------------------


def _input_specs(graph: Graph, names: list[str], where: str) -> dict[str, Any]:
    """What the script needs to make the inputs: one literal per input, the symbol sizes."""
    sizes: dict[str, int] = {}
    for m in graph.inputs:  # symbols by the sizes they ran at
        if m.kind == "symint" and m.value and len(m.ran_at) == 1:
            sizes.setdefault(m.value, m.ran_at[0])
        if m.kind == "tensor" and len(m.ran_at) == len(m.shape):
            for d, r in zip(m.shape, m.ran_at, strict=True):
                if isinstance(d, str) and d.isidentifier():
                    sizes.setdefault(d, r)
    concrete_dims: list[int] = []
    specs = [_input_literal(m, name, i, sizes, where, concrete_dims) for i, (m, name) in enumerate(zip(graph.inputs, names, strict=True))]
    # Integer tensors (indices, labels) get values below the smallest size of any input
    # dimension above 1: an index into any of them, a class of a small head, stays in range.
    high = min((d for d in concrete_dims if d > 1), default=2)
    tensors = [m for m in graph.inputs if m.kind == "tensor"]
    return {
        "sizes": sizes,
        "specs": specs,
        "int_high": high,
        "ints": any(not m.dtype.startswith(("float", "bfloat", "complex", "bool")) for m in tensors),
        "roles": {"buffer" if "_buffers_" in n else "param" for n in names if is_lifted_param(n)},
        "scalars": any(m.kind in ("int", "float", "bool") for m in graph.inputs),
    }


def _input_literal(m: TensorMeta, name: str, i: int, sizes: dict[str, int], where: str, dims: list[int]) -> str:
    what = f"{where}: input {i} ({name})"
    if m.kind == "tensor":
        for d in (*m.shape, *m.stride):
            if isinstance(d, str):
                missing = sorted(_symbols(d) - set(sizes))
                if missing:
                    raise InputError(
                        f"{what} has the symbolic size {d} and the report does not say what {', '.join(missing)} "
                        "ran at (saved by an older dynscope); capture it again"
                    )
        dims.extend(d if isinstance(d, int) else _size_at(d, sizes) for d in m.shape)
        # Parameters and buffers by Dynamo's names for them (L_self_modules_fc_parameters_weight_).
        role = ("buffer" if "_buffers_" in name else "param") if is_lifted_param(name) else "input"
        stride = m.stride if len(m.stride) == len(m.shape) else ()
        return (
            f"    dict(name={name!r}, kind='tensor', shape={tuple(m.shape)!r}, stride={tuple(stride)!r}, "
            f"dtype={m.dtype!r}, device={m.device!r}, requires_grad={m.requires_grad}, role={role!r}),"
        )
    if m.kind == "symint":
        if not (m.value and m.value.isidentifier() and m.value in sizes):
            raise InputError(f"{what} is the symbolic size {m.value or '?'} whose value the report does not keep")
        if m.value.startswith("zf"):
            raise InputError(f"{what} is a symbolic float ({m.value}); the script can only rebuild symbolic ints")
        return f"    dict(name={name!r}, kind='symint', value={m.value!r}),"
    if m.kind in ("int", "float", "bool"):
        try:
            value: Any = (m.value == "True") if m.kind == "bool" else int(m.value) if m.kind == "int" else float(m.value)
        except ValueError as err:
            raise InputError(f"{what} is a Python {m.kind} recorded as {m.value!r}, not a value") from err
        if m.kind == "bool" and m.value not in ("True", "False"):
            raise InputError(f"{what} is a Python bool recorded as {m.value!r}, not a value")
        return f"    dict(name={name!r}, kind={m.kind!r}, value={_literal(value)}),"
    raise InputError(
        f"{what} is a {m.value or 'value'} ({m.kind}), which the report describes but does not keep"
    )


def _symbols(expr: str) -> set[str]:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return {expr}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(_SIZE_FUNCTIONS)


#: Functions sympy's printing of a size may call (``Max(1, s0)``); the script defines them too.
_SIZE_FUNCTIONS = ("Max", "Min", "Mod", "FloorDiv")
_SIZE_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
             ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def _size_at(expr: str, sizes: dict[str, int]) -> int:
    """The value of a recorded size expression ("16*s77") at the sizes it ran at; 0 when it
    cannot be read. Walked, never ``eval``-ed: a report is data, maybe someone else's."""

    def value(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return value(n.body)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.Name) and n.id in sizes:
            return sizes[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _SIZE_OPS:
            return int(_SIZE_OPS[type(n.op)](value(n.left), value(n.right)))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _SIZE_FUNCTIONS and not n.keywords:
            args = [value(a) for a in n.args]
            if n.func.id in ("Max", "Min"):
                return max(args) if n.func.id == "Max" else min(args)
            a, b = args  # Mod(a, b), FloorDiv(a, b)
            return a % b if n.func.id == "Mod" else a // b
        raise ValueError(expr)

    try:
        return value(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ArithmeticError, IndexError, RecursionError):
        return 0


def _literal(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    return repr(value)


# -- header and constants ------------------------------------------------------------------------


def _figures(t: Timing) -> str:
    if t.failed:
        return f"failed: {t.error}"
    text = (
        f"eager {ms(t.eager_ms)}, compiled {ms(t.compiled_ms)}, speedup {t.speedup:.2f}x "
        f"({plural(t.samples, 'sample')}, spread {t.spread:.0%})"
    )
    if t.train_speedup > 0:
        text += (
            f"; forward+backward eager {ms(t.train_eager_ms)}, compiled {ms(t.train_compiled_ms)}, "
            f"{t.train_speedup:.2f}x"
        )
    return text + ("; numerics ok" if t.numerics_ok else "; numerics differ")


def _header(graph: Graph, mode: str, timing: bool, report: Report | None, spec: dict[str, Any]) -> str:
    where = f" ({location(graph.filename, graph.lineno)})" if graph.filename else ""
    source = "a dynscope report"
    if report is not None:
        source = (f"the dynscope report of {report.title}" if report.title else "a dynscope report") + (
            f" (torch {report.torch_version})" if report.torch_version else ""
        )
    made = ["random data, seed 0"]
    if spec["ints"]:
        made.append(f"integer tensors in [0, {spec['int_high']})")
    if "param" in spec["roles"]:
        made.append("parameters uniform in +-1/sqrt(fan_in), as nn.Linear starts")
    if "buffer" in spec["roles"]:
        made.append("float buffers in [0.5, 1.5) (running variances stay positive)")
    if spec["scalars"]:
        made.append("Python scalars at their recorded values")
    if spec["sizes"]:
        made.append("symbolic sizes at the sizes they ran at: " + ", ".join(f"{k}={v}" for k, v in spec["sizes"].items()))
    grad = "on" if graph.grad_enabled else "off (no_grad)"
    paragraphs = [
        f"Graph {graph.id} of {source}: {graph.frame}{where}, compile {graph.compile_id}; "
        f"{plural(graph.node_count, 'node')}, {plural(graph.op_count, 'op')}, {plural(len(graph.inputs), 'input')}.",
        "Rebuilt from the graph's code as Dynamo printed it, node for node. Inputs made from the recorded "
        f"shapes, dtypes, strides and requires_grad ({'; '.join(made)}).",
        f"Timed as dynscope times it: the graph compiled by Inductor in mode {mode!r} (compile_fx with "
        f"list_mode_options, {'dynamic, as Dynamo compiled it' if spec['sizes'] else 'static'}; grad {grad}, "
        "the grad mode Dynamo compiled it in) against the graph run eagerly. 3 warm-up runs, then eager and "
        "compiled samples alternate (on CPU each sample loops the graph for at least 10 ms; on CUDA one run "
        "between events after an L2 flush), at most 30 a side, stopping once each side has 5 and 0.2 s; "
        "medians; speedup = eager / compiled. A training graph (grad on, an input that needs grad) is also "
        "timed forward+backward (torch.autograd.grad with random cotangents, seed 0). Numerics: outputs and "
        "gradients against eager's under the same seed, rtol 1e-3, atol 1e-4.",
    ]
    if graph.origin == "trace":
        paragraphs.append("The graph was seen only in PyTorch's trace: which inputs need grad was not known (none do).")
    t = graph.timing_for(mode)
    if t is not None:
        machine = f"{t.device}, {plural(t.threads, 'thread')}" if t.threads else t.device
        paragraphs.append(f"The report's figures ({machine}): {_figures(t)}.")
    else:
        paragraphs.append(f"The report has no timing of this graph in mode {mode!r}.")
    paragraphs.append(
        "Run: python THIS.py [--json] [--mode M] [--repeats N] [--threads N] [--device D] [--no-timing] "
        "[--no-interleave]. "
        "It prints eager_ms=... compiled_ms=... speedup=... (train_... too for a training graph), a numerics "
        "line and a sentence beside the report's figures; it exits 1 when numerics differ. It needs only torch."
        + ("" if timing else " Written without timing: --timing times it.")
    )
    lines: list[str] = []
    for para in paragraphs:
        lines += [*textwrap.wrap(para, 94, break_on_hyphens=False, break_long_words=False), ""]
    return "\n".join(f"# {ln}".rstrip() for ln in lines[:-1])


def _constants(graph: Graph, mode: str, timing: bool, report: Report | None, spec: dict[str, Any]) -> str:
    t = graph.timing_for(mode)
    figures: dict[str, Any] | None = None
    if t is not None and not t.failed:
        figures = {
            "eager_ms": t.eager_ms, "compiled_ms": t.compiled_ms, "speedup": round(t.speedup, 6),
            "train_eager_ms": t.train_eager_ms, "train_compiled_ms": t.train_compiled_ms,
            "train_speedup": round(t.train_speedup, 6), "numerics_ok": t.numerics_ok, "samples": t.samples,
            "threads": t.threads, "device": t.device,
        }
    sizes = "{" + ", ".join(f"{k!r}: {v}" for k, v in spec["sizes"].items()) + "}"
    threads = t.threads if t is not None else 0
    lines = [
        "# -- what the report recorded -----------------------------------------------------------------",
        f"GRAPH = {graph.id}",
        f"FRAME = {graph.frame!r}",
        f"TORCH = {(report.torch_version if report is not None else '')!r}  # the report's torch",
        f"MODE = {mode!r}",
        f"TIMING = {timing}",
        f"GRAD_ENABLED = {graph.grad_enabled}  # grad mode Dynamo compiled the graph in",
        f"DEVICE = {_device(graph)!r}",
        f"THREADS = {threads}  # torch's threads when the report was timed (0: not known)",
        f"NODES = {graph.node_count}",
        f"SIZES = {sizes}  # symbolic sizes -> the sizes the compiling call ran at",
        f"INT_HIGH = {spec['int_high']}  # integer tensors get values in [0, INT_HIGH)",
        "INPUTS = [",
        *spec["specs"],
        "]",
        f"REPORT = {figures!r}  # the report's figures for this mode (None: not timed)",
    ]
    return "\n".join(lines)


# -- what every script shares: the timing runtime, and the lines that start it ----------------------


@functools.cache
def _runtime_source() -> str:
    """The timing runtime's source (dynscope/_torch/runtime.py), read as package data: the
    script runs the very code dynscope times with, and render never imports the torch floor
    (the file is found from ``dynscope`` itself, so not even the floor's package is imported)."""
    return (resources.files("dynscope") / "_torch" / "runtime.py").read_text(encoding="utf-8")


def _runtime() -> str:
    return (
        "# -- the timing runtime: dynscope's own (dynscope/_torch/runtime.py, verbatim) -----------------\n\n"
        + _runtime_source()
    )


#: The script's last lines: what the report recorded, handed to the runtime's command line.
_START = """
# -- run ---------------------------------------------------------------------------------------

RECORDED = Recorded(
    graph=GRAPH, frame=FRAME, torch=TORCH, mode=MODE, timing=TIMING, grad_enabled=GRAD_ENABLED, device=DEVICE,
    threads=THREADS, nodes=NODES, sizes=SIZES, int_high=INT_HIGH, inputs=INPUTS, report=REPORT,
)

if __name__ == "__main__":
    sys.exit(main(RECORDED, build_graph, ms))
"""
