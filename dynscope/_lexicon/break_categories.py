"""Which category a graph break falls in, read from Dynamo's wording (no torch import).

Rules match the graph-break type and explanation PyTorch writes (torch 2.11 .. 2.14, see
tests/traces and tests/test_attack_wording.py); the categories and dynscope's advice for
each live in ``dynscope._capture.break_fixes``.
"""

from __future__ import annotations

#: Breaks PyTorch or a library makes on purpose: no change at the user's line removes them.
#: torch.optim's step() wrapper calls torch._dynamo.graph_break() before and after the update
#: (torch/optim/optimizer.py ``_use_grad``, torch 2.1 .. 2.14) and Dynamo marks
#: ``Optimizer.zero_grad`` skipped on purpose ("Dynamo developers have intentionally marked").
OPTIMIZER = "torch.optim (on purpose)"
#: torch._dynamo.graph_break() called inside torch or a third-party package, not the user's code.
LIBRARY_BREAK = "library graph_break() (on purpose)"
#: Categories of breaks made on purpose (``GraphBreak.actionable`` is False for them).
ON_PURPOSE = frozenset({OPTIMIZER, LIBRARY_BREAK})
#: Where a break was raised, as :func:`classify` is told it (``raised_in``).
RAISED_IN_OPTIM = "torch.optim"
RAISED_IN_LIBRARY = "library"

# (category, words any of which in the graph-break type or explanation selects it).
# Order matters: the first rule that matches wins, most specific first.
_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("explicit graph_break()", ("torch._dynamo.graph_break()", "user-inserted graph break")),
    ("deepcopy", ("deepcopy",)),
    ("logging/print side effect", ("`print`", "logging.logger", "logging function")),
    ("data-dependent branch", ("data-dependent branching", "data dependent branching")),
    # A tensor read into a Python scalar: `.item()` says so; int()/float(), numpy
    # conversions and .tolist() of integer tensors surface as the op
    # aten._local_scalar_dense ("Data dependent operator"), which capture_scalar_outputs
    # traces, so it must win over the data-dependent rule below.
    (".item()/scalar output", (
        "tensor.item()", ".item()", "tolist()", "scalar output", "_local_scalar_dense",
        "aten.item.default",
    )),
    ("data-dependent guard/shape", (
        "dynamic shape operator", "data dependent operator", "data-dependent",
        "data dependent", "depends on input tensor data", "unbacked",
    )),
    ("backward() in compiled code", ("tensor.backward()", "backward() call", "backward() with")),
    # Python generators and iterators: "call_method on generator" (2.11), "Missing
    # tp_iternext" (2.13: next() on a generator made outside the frame). Not "generator"
    # alone: "torch.Generator method" is about random number generators.
    ("generator/iterator", (
        "call_method on generator", "missing tp_iter", "generator object",
        "attempt to trace generator", "generator reconstruction", "infinite generator",
        "sub-generator", "iter() with",
        # 2.14: next() on a generator made outside the frame fails to wrap the generator's
        # "<class 'range_iterator'>" (gb0116, "Unexpected type in sourceless builder").
        "iterator'>",
    )),
    ("tensor attribute mutation (requires_grad)", ("requires_grad",)),
    ("dynamic-shape constraint violation", ("constraint violation", "constraintviolation")),
    ("observed exception", ("observed exception",)),
    ("unsupported builtin or C/numpy call", (
        "builtin", "c/c++", "c extension", "numpy", "pybind", "c function", "c-implemented",
    )),
    ("skipped or disallowed function", (
        "marked as skipped", "disable()", "disallowed", "skip calling", "skipfiles",
        "skipped", "torch.compiler.disable",
    )),
    ("proxy/return conversion", ("proxy", "unsupported output", "return value", "reconstruct")),
)


# torch 2.14 words a generator break "C-implemented special method without VariableTracker
# model", a type it also uses for other C slots: it is a generator/iterator break when the
# message or the user's line is about iteration.
_C_SPECIAL_METHOD = "c-implemented special method"
_ITERATION = ("generator", "__next__", "__iter__", "next(", "iter(", ".send(", "yield", "for ")


# A skipped function of torch.optim's Optimizer ("... marked that the function
# `Optimizer.zero_grad` should not be traced", torch 2.11 .. 2.14).
_OPTIMIZER_SKIP = ("function `optimizer.",)


def classify(gb_type: str, explanation: str = "", source: str = "", *, raised_in: str = "") -> str:
    """The category name for one break.

    Args:
        gb_type: PyTorch's graph-break type ("Failed to trace builtin operator").
        explanation: PyTorch's explanation text.
        source: the user's line of code (used for deepcopy sites Dynamo reports in copy.py
            and for torch 2.14's wording of generator breaks).
        raised_in: where Dynamo reported the break when that is not the user's code:
            :data:`RAISED_IN_OPTIM` (torch/optim) or :data:`RAISED_IN_LIBRARY` (elsewhere in
            torch, or a third-party package). Defaults to "" (the user's own code).

    Returns:
        One of :data:`CATEGORY_NAMES`; "other" when no rule matches.
    """
    text = f"{gb_type}\n{explanation}".lower()
    # Breaks torch.optim or a library makes on purpose: no change at the line removes them,
    # so they get a category whose fix is where the step is compiled, not the line.
    if any(w in text for w in _OPTIMIZER_SKIP):
        return OPTIMIZER
    name = _by_rules(text, source)
    if name == "explicit graph_break()" and raised_in == RAISED_IN_OPTIM:
        return OPTIMIZER
    if name == "explicit graph_break()" and raised_in == RAISED_IN_LIBRARY:
        return LIBRARY_BREAK
    return name


def _by_rules(text: str, source: str) -> str:
    if _C_SPECIAL_METHOD in text and any(w in f"{text}\n{source}".lower() for w in _ITERATION):
        return "generator/iterator"
    for name, words in _RULES:
        if any(w in text for w in words):
            return name
    if "deepcopy(" in source:
        return "deepcopy"
    return "other"
