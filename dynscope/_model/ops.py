"""What an op does, read from its target's name: its category (matmul/conv, pointwise,
reduction, view/reshape, data movement, other) and whether it is a collective. The pictures colour nodes by them
(``dynscope._render.palette``) and ``Graph.to_networkx`` tags nodes with them."""

from __future__ import annotations

import re

__all__ = ["CALL_LINE", "CATEGORIES", "COLLECTIVES", "called_in_code", "collective_name", "op_category"]

#: Every category op_category returns, in the order the legend shows them.
CATEGORIES = ("matmul/conv", "pointwise", "reduction", "view/reshape", "data movement", "other")

_MATMUL = ("linear", "matmul", "mm", "bmm", "addmm", "conv", "einsum", "baddbmm", "scaled_dot_product", "attention", "__matmul__")
_REDUCTION = ("sum", "mean", "max", "min", "amax", "amin", "prod", "norm", "softmax", "log_softmax", "var", "std",
              "argmax", "argmin", "layer_norm", "batch_norm", "group_norm", "cumsum", "logsumexp", "any", "all")
_VIEW = ("view", "reshape", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "unflatten", "expand",
         "t", "chunk", "split", "narrow", "select", "getitem", "unbind", "contiguous", "as_strided", "movedim", "size")
_MOVE = ("cat", "stack", "to", "copy", "clone", "index", "gather", "scatter", "pad", "repeat", "roll", "flip",
         "embedding", "masked_fill", "where", "cuda", "cpu", "float", "half", "type_as", "new_", "zeros", "ones",
         "full", "empty", "arange", "tensor", "detach")
_POINTWISE = ("add", "sub", "mul", "div", "truediv", "floordiv", "pow", "neg", "relu", "gelu", "silu", "sigmoid",
              "tanh", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "abs", "clamp", "dropout", "erf", "softplus",
              "mish", "leaky_relu", "elu", "hardtanh", "maximum", "minimum", "eq", "ne", "lt", "gt", "le", "ge",
              "and", "or", "xor", "not", "floor", "ceil", "round", "sign", "reciprocal", "lerp", "addcmul", "mod",
              "iadd", "imul", "isub", "itruediv", "hardswish", "logical")


def op_category(target: str) -> str:
    """Category of an op by its target name (one of CATEGORIES; ``dynscope._render.palette.PALETTE`` colours them)."""
    parts = target.split(".")
    # ATen targets name an overload last ("aten.mm.default", "aten.sum.dim_IntList"): the
    # op is the part before it.
    base = parts[-2] if len(parts) >= 3 and parts[0] in ("aten", "prims", "quantized") else parts[-1]
    name = base.lower().strip("_")
    for category, names in (
        ("matmul/conv", _MATMUL),
        ("reduction", _REDUCTION),
        ("view/reshape", _VIEW),
        ("data movement", _MOVE),
        ("pointwise", _POINTWISE),
    ):
        if any(name == n or name.startswith(n + "_") or (len(n) > 3 and n in name) for n in names):
            return category
    return "other"


#: Collective ops, by the op's own name (the last dotted part of a node target, overload
#: dropped). ``wait_tensor`` is not one: it waits for a collective already issued.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
    "all_gather", "all_gather_into_tensor", "all_gather_into_tensor_coalesced",
    "all_gather_into_tensor_out", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all", "all_to_all_single", "broadcast",
    "broadcast_", "reduce", "scatter", "gather", "barrier", "send", "recv", "isend", "irecv",
})

#: Namespaces whose ops are collectives; a target outside them is not one even when its
#: last name matches (a user function called ``reduce``).
_NAMESPACES = ("_c10d_functional", "c10d_functional", "c10d", "torch.distributed", "_functional_collectives")


def collective_name(target: str) -> str:
    """The collective a node target calls ("all_reduce"), or "" when it calls none.

    Targets are as dynscope records them: ``torch._ops._c10d_functional.all_reduce``,
    ``_c10d_functional.all_reduce.default``, ``torch.distributed.all_reduce``. No torch import.
    """
    if not any(ns in target for ns in _NAMESPACES):
        return ""
    parts = [p for p in target.split(".") if p]
    for part in reversed(parts[-2:]):  # "all_reduce" or "all_reduce.default"
        if part in COLLECTIVES:
            return part.rstrip("_") or part
    return ""


#: One call in graph code as PyTorch prints it: ``name: "f32[8]" = torch.relu(x)``.
CALL_LINE = re.compile(r'^\s+\w+(?:: "[^"]*")? = (?P<fn>[\w.]+)\(')


def called_in_code(code: str) -> tuple[str, ...]:
    """What each call line of printed graph code calls, in graph order (a graph known only
    from the trace has its code and no nodes)."""
    found = (CALL_LINE.match(line) for line in code.splitlines())
    return tuple(m["fn"] for m in found if m)
