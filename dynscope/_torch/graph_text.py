"""Graph code as PyTorch prints it, read without torch: op counts and input annotations.

Graphs known only from the trace (the user's own backend compiled them, or a TORCH_TRACE
log) are read from ``dynamo_output_graph``'s printed code (``GraphModule.print_readable``
with annotations such as ``"f32[4, 8][8, 1]cpu"``), the same on 2.11, 2.13 and 2.14
(tests/traces); DDP's split pieces print without strides and devices (``"f32[8, 512]"``).
Nothing here imports torch: reading a trace log runs where torch is not installed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from dynscope._model import SHORT_DTYPES, TensorMeta
from dynscope._model.ops import CALL_LINE

if TYPE_CHECKING:
    from collections.abc import Mapping

_C_MODULES = {
    "torch._C._nn": "torch.nn.functional",
    "torch._C._VariableFunctions": "torch",
    "torch._C": "torch",
    "torch.functional": "torch",
}


def public_name(module: str, name: str) -> str:
    """Name a callable by the public function users call (C bindings renamed)."""
    module = _C_MODULES.get(module, module)
    if module in ("_operator", "operator", "builtins", ""):
        return name
    return f"{module}.{name}"


def readable_code(gm: Any) -> str:
    """The graph's readable code (used when the trace did not already give it)."""
    try:
        return gm.print_readable(print_output=False)
    except Exception:  # noqa: BLE001 - fall back to the plain code
        return gm.code


_SIG = re.compile(r"def forward\(self,?(?P<args>.*?)\):", re.S)
_ANNOT = re.compile(r'(?P<name>\w+): "(?P<ann>[^"]+)"')
_TENSOR_ANN = re.compile(r"^(?P<dt>[a-z]+\d*)\[(?P<shape>[^\]]*)\](?:\[(?P<stride>[^\]]*)\](?P<dev>\S+))?$")
_DTYPES = {short: name for name, short in SHORT_DTYPES.items()}  # "f32" -> "float32"


def inputs_from_code(code: str, sizes: Mapping[str, int] | None = None) -> tuple[TensorMeta, ...]:
    """Input metadata read from the annotations of a graph's printed ``forward``.

    Used for graphs known only from the trace (the user's own backend compiled them).
    ``sizes``: symbol -> the value it ran at (from the compile's ``create_symbol`` events,
    ``records.created_symbol``); a tensor whose symbolic dims all have one gets ``ran_at``, a
    symint its value, as :func:`input_meta` gives a graph dynscope's backend saw.
    """
    sizes = sizes or {}
    m = _SIG.search(code)
    if not m:
        return ()
    out: list[TensorMeta] = []
    for ann in _ANNOT.finditer(m["args"]):
        text = ann["ann"]
        t = _TENSOR_ANN.match(text)
        if t:
            shape = _dims(t["shape"])
            ran = tuple(d if isinstance(d, int) else sizes.get(d) for d in shape)
            out.append(
                TensorMeta(
                    kind="tensor",
                    shape=shape,
                    dtype=_DTYPES.get(t["dt"], t["dt"]),
                    device=t["dev"] or "",
                    stride=_dims(t["stride"] or ""),
                    # Only a tensor with symbolic dims has sizes to tell, and only all or none.
                    ran_at=tuple(r for r in ran if r is not None)
                    if any(isinstance(d, str) for d in shape) and None not in ran else (),
                )
            )
        elif text.startswith("Sym("):
            symbol = text[4:-1]
            out.append(TensorMeta(kind="symint", value=symbol, ran_at=(sizes[symbol],) if symbol in sizes else ()))
        else:
            out.append(TensorMeta(kind="other", value=text))
    return tuple(out)


def input_names_from_code(code: str) -> tuple[str, ...]:
    """The placeholder names of a graph's printed ``forward``, one per input
    :func:`inputs_from_code` reads (same order): ``L_x_``,
    ``L_self_modules_fc_parameters_weight_``, ``s77``. Dynamo names an input after its
    source, so the names tell a module's lifted parameters and buffers from the caller's
    inputs (``is_lifted_param``) for a graph whose nodes are not known."""
    m = _SIG.search(code)
    if not m:
        return ()
    return tuple(ann["name"] for ann in _ANNOT.finditer(m["args"]))


def _dims(text: str) -> tuple[int | str, ...]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    return tuple(int(p) if p.lstrip("-").isdigit() else p for p in parts)


_CALL_LINE = CALL_LINE  # one pattern for the model and the torch floor
_BINOP_LINE = re.compile(r'^\s+\w+(?:: "[^"]*")? = \S+ (?P<op>\*\*|//|<<|>>|>=|<=|==|!=|[-+*/@%<>]|&|\||\^) \S+')
_BINOPS = {"*": "mul", "+": "add", "-": "sub", "/": "truediv", "@": "matmul", "//": "floordiv",
           "**": "pow", "%": "mod", "<<": "lshift", ">>": "rshift", "&": "and_", "|": "or_", "^": "xor",
           ">": "gt", "<": "lt", ">=": "ge", "<=": "le", "==": "eq", "!=": "ne"}
_ROOTS = ("torch", "operator", "math", "builtins", "_operator")


def op_counts_from_code(code: str) -> tuple[tuple[str, int], ...]:
    """Op counts read from printed graph code, named as :func:`target_name` names them.

    ``torch._C._nn.linear(...)`` is a function call; ``x.relu()`` is a method call
    (counted as "relu", like FX's call_method target).
    """
    ops: Counter[str] = Counter()
    for line in code.splitlines():
        m = _CALL_LINE.match(line)
        if not m:
            b = _BINOP_LINE.match(line)
            if b:  # FX prints operator.mul(a, b) as "a * b"
                ops[_BINOPS[b["op"]]] += 1
            continue
        fn = m["fn"]
        if fn.split(".", 1)[0] in _ROOTS:
            module, _, name = fn.rpartition(".")
            ops[public_name(module, name)] += 1
        else:
            ops[fn.rsplit(".", 1)[-1]] += 1
    return tuple(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))


_ASSIGN_LINE = re.compile(r'^\s+\w+(?:: "[^"]*")? = ', re.M)


def node_count_from_code(code: str) -> int:
    """FX nodes of printed graph code: its placeholders, one per assignment, and the output."""
    m = _SIG.search(code)
    if not m:
        return 0
    return len(_ANNOT.findall(m["args"])) + len(_ASSIGN_LINE.findall(code)) + 1
