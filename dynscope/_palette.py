"""Op categories and their colours (a leaf: imports nothing from dynscope).

The DOT pictures fill each node by its op's category, the HTML page's legend shows the
same colours, and ``Graph.to_networkx`` tags nodes with the same categories; all three
read them from here. The palette is documented in docs/reading-a-report.md.
"""

from __future__ import annotations

__all__ = ["PALETTE", "op_category"]

#: op category -> fill colour. Fixed: the docs and the HTML legend show the same.
PALETTE: dict[str, str] = {
    "matmul/conv": "#f4a582",
    "pointwise": "#92c5de",
    "reduction": "#b2abd2",
    "view/reshape": "#d9f0d3",
    "data movement": "#fee090",
    "other": "#e0e0e0",
    "input": "#ffffff",
    "parameter": "#f7f7f7",
    "output": "#ffffff",
}

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
    """Category of an op by its target name (see PALETTE)."""
    name = target.rsplit(".", 1)[-1].lower().strip("_")
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
