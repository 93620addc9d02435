"""The colours of op categories, kernels and times (imports only the model's op categories).

The DOT pictures fill each node by its op's category (``dynscope._model.ops.op_category``,
re-exported here), the HTML page's legend shows the same colours, and ``Graph.to_networkx``
tags nodes with the same categories. The palette is documented in docs/reading-a-report.md.
"""

from __future__ import annotations

__all__ = ["AOT_COLOURS", "BORDERS", "KERNEL_PALETTE", "PALETTE", "kernel_colour", "time_colour"]

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

#: Kernel fill colours, given to a graph's kernels in call order (cycled past the end):
#: ColorBrewer Set3 without its grey, none equal to a PALETTE colour, so a kernel-coloured
#: node never reads as an op category.
KERNEL_PALETTE: tuple[str, ...] = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
    "#b3de69", "#fccde5", "#bc80bd", "#ccebc5", "#ffed6f",
)

#: Node borders that mark how a node was lowered (see dynscope._render.dot).
BORDERS: dict[str, str] = {
    "fallback": "#b2182b",  # dashed red: an ATen op Inductor did not lower
    "unmapped": "#888888",  # dotted grey: a compute node no kernel was traced to
    "saved": "#e08214",  # bold orange: an activation the forward saved for the backward
}

#: Fills of an AOT graph's inputs.
AOT_COLOURS: dict[str, str] = {
    "primal": "#ffffff",  # primals_*: the graph's inputs and parameters
    "tangent": "#fde0ef",  # tangents_*: incoming gradients
    "saved": "#fff2b2",  # activations saved by the forward
}

# The "time" ramp ends at this red; white is 0.
_HOT = (203, 24, 29)


def kernel_colour(index: int) -> str:
    """Fill colour of the ``index``-th kernel of a graph (0-based, call order)."""
    return KERNEL_PALETTE[index % len(KERNEL_PALETTE)]


def time_colour(share: float) -> str:
    """Fill for a node taking ``share`` (0..1) of its graph's time: white -> red.

    The ramp follows the square root of the share so that a node at a few percent is
    visibly tinted, while the order of shades still follows the order of times.
    """
    t = min(max(share, 0.0), 1.0) ** 0.5
    r, g, b = (round(255 + (c - 255) * t) for c in _HOT)
    return f"#{r:02x}{g:02x}{b:02x}"
