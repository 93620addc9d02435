"""What a graph-break category is, in one table: its name, the words that select it, the fix.

One :class:`Category` per category: the name reports show (and saved reports store, so a
name never changes), the words of PyTorch's graph-break type or explanation that select it
(torch 2.11 .. 2.14, see tests/traces and tests/torch/test_attack_wording.py), dynscope's fix text,
whether the break is made on purpose (no change at the user's line removes it), and why
``dynscope.fix`` leaves such a site alone, where it does.
:func:`classify` is a pure function of PyTorch's words, the user's line and where the break
was raised, so it is tested without compiling anything; the capture floor tells it where
(``dynscope._read.break_sites.raised_in``). docs/report-model.md lists the categories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "CATEGORIES", "CATEGORY_NAMES", "LIBRARY_BREAK", "OPTIMIZER", "RAISED_IN_LIBRARY",
    "RAISED_IN_OPTIM", "Category", "category_named", "classify", "fix_for",
]

#: Where a break was raised, as :func:`classify` is told it (``raised_in``).
RAISED_IN_OPTIM = "torch.optim"
RAISED_IN_LIBRARY = "library"

# The names reports show and saved reports store: each written here once, used by name.
BRANCH = "data-dependent branch"
DYNAMIC_SHAPE = "data-dependent guard/shape"
SCALAR = ".item()/scalar output"
DEEPCOPY = "deepcopy"
LOGGING = "logging/print side effect"
SKIPPED = "skipped or disallowed function"
UNSUPPORTED_CALL = "unsupported builtin or C/numpy call"
PROXY = "proxy/return conversion"
REQUIRES_GRAD = "tensor attribute mutation (requires_grad)"
CONSTRAINT = "dynamic-shape constraint violation"
OBSERVED_EXCEPTION = "observed exception"
BACKWARD = "backward() in compiled code"
GENERATOR = "generator/iterator"
#: torch.optim's step() wrapper calls torch._dynamo.graph_break() before and after the update
#: (torch/optim/optimizer.py ``_use_grad``, torch 2.1 .. 2.14) and Dynamo marks
#: ``Optimizer.zero_grad`` skipped on purpose ("Dynamo developers have intentionally marked").
OPTIMIZER = "torch.optim (on purpose)"
#: torch._dynamo.graph_break() called inside torch or a third-party package, not the user's code.
LIBRARY_BREAK = "library graph_break() (on purpose)"
EXPLICIT = "explicit graph_break()"
OTHER = "other"


@dataclass(frozen=True)
class Category:
    """One graph-break category."""

    name: str  # what reports show
    fix: str  # dynscope's advice: what the user can do about it
    # Words any of which in the graph-break type or explanation (lower-cased) selects it.
    words: tuple[str, ...] = ()
    # PyTorch or a library breaks here on purpose: no change at the user's line removes it.
    on_purpose: bool = False
    # An explicit graph_break() raised there (a RAISED_IN_* value) falls in this category.
    raised_in: str = ""
    # Why ``dynscope.fix`` proposes no source patch at such a site, said in its result; ""
    # for a category it tries rewrites for. Set for a break made on purpose, and for the
    # user's own graph_break(), which only the user can decide to remove.
    unpatched: str = ""

    @property
    def actionable(self) -> bool:
        """False: PyTorch or a library breaks here on purpose; no change at the user's line
        removes the break ("fix first" never names such a site; the fix says what helps)."""
        return not self.on_purpose


#: Every category. Order matters: the first whose words match wins, most specific first.
CATEGORIES: tuple[Category, ...] = (
    # A skipped function of torch.optim's Optimizer ("... marked that the function
    # `Optimizer.zero_grad` should not be traced", torch 2.11 .. 2.14): before any other words.
    Category(
        OPTIMIZER,
        "torch.optim breaks the graph here on purpose: Optimizer.step() calls "
        "torch._dynamo.graph_break() before and after the update (so the update compiles as a "
        "no-grad graph of its own, pytorch/pytorch#104053), and Dynamo does not trace "
        "Optimizer.zero_grad(). No change at this line removes the break. Compile the optimizer "
        "step on its own (`torch.compile(opt.step)`, or a separate compiled function that calls "
        "opt.step()), or call opt.step() and opt.zero_grad() outside the compiled function.",
        words=("function `optimizer.",), on_purpose=True, raised_in=RAISED_IN_OPTIM,
        unpatched="torch.optim breaks here on purpose: compile the optimizer step on its own",
    ),
    Category(
        EXPLICIT,
        "The code calls torch._dynamo.graph_break() on purpose. Remove it if the split is "
        "no longer needed.",
        words=("torch._dynamo.graph_break()", "user-inserted graph break"),
        unpatched="your code calls torch._dynamo.graph_break(): remove it if the split is no longer needed",
    ),
    Category(
        DEEPCOPY,
        "copy.deepcopy inside the compiled region breaks. Copy modules or tensors before "
        "calling the compiled function, or use tensor.clone().",
        words=("deepcopy",),
    ),
    Category(
        LOGGING,
        "print/logging inside the compiled region breaks the graph. Remove it, guard it "
        "with `if not torch.compiler.is_compiling():`, or add the function to "
        "torch._dynamo.config.reorderable_logging_functions (Dynamo then calls it after the "
        "graph). That removes the break for print and plain functions (logging.info, your own "
        "logging helper); for a logging.Logger's methods (`log.info(...)`) only on newer PyTorch "
        "(2.15 reorders them, 2.14 and older still break there: guard or remove those). "
        "`dynscope advise` tries it on your program and says which.",
        words=("`print`", "logging.logger", "logging function"),
    ),
    Category(
        BRANCH,
        "Python `if`/`while` on a tensor's value cannot be traced. Use torch.where / "
        "torch.cond for the branch, or compute the condition outside the compiled region.",
        words=("data-dependent branching", "data dependent branching"),
    ),
    # A tensor read into a Python scalar: `.item()` says so; int()/float(), numpy
    # conversions and .tolist() of integer tensors surface as the op
    # aten._local_scalar_dense ("Data dependent operator"), which capture_scalar_outputs
    # traces, so it must win over the data-dependent rule below.
    Category(
        SCALAR,
        "A tensor value is turned into a Python number (`.item()`, `int(t)`/`float(t)`, "
        "`.tolist()`, a numpy conversion). Keep it a tensor, or set "
        "torch._dynamo.config.capture_scalar_outputs = True so Dynamo traces it; that removes "
        "the break for .item(), int()/float(), numpy conversions and .tolist() of integer "
        "tensors, but not for .tolist() of a float tensor (keep that one a tensor, or call "
        "it outside the compiled region).",
        words=(
            "tensor.item()", ".item()", "tolist()", "scalar output", "_local_scalar_dense",
            "aten.item.default",
        ),
    ),
    Category(
        DYNAMIC_SHAPE,
        "An op's output shape or a guard depends on tensor values (nonzero, unique, masked "
        "select...). Set torch._dynamo.config.capture_dynamic_output_shape_ops = True, or "
        "keep shapes static (masking instead of selecting).",
        words=(
            "dynamic shape operator", "data dependent operator", "data-dependent",
            "data dependent", "depends on input tensor data", "unbacked",
        ),
    ),
    Category(
        BACKWARD,
        "`loss.backward()` inside the compiled function breaks the graph. Compile the "
        "forward and loss only and call backward() outside it. Where the installed torch "
        "has it, torch._dynamo.config.trace_autograd_ops = True traces backward() (on torch 2.13 "
        "it removes the break when the function returns loss.detach(), not loss, and nothing after "
        "backward() in the compiled function breaks: an optimizer step inside does); compiled autograd (torch._dynamo.config.compiled_autograd "
        "= True) compiles the backward pass but keeps this break.",
        words=("tensor.backward()", "backward() call", "backward() with"),
    ),
    # Python generators and iterators: "call_method on generator" (2.11), "Missing
    # tp_iternext" (2.13: next() on a generator made outside the frame). Not "generator"
    # alone: "torch.Generator method" is about random number generators.
    Category(
        GENERATOR,
        "Dynamo cannot step this generator or iterator (often one made outside the compiled "
        "function and passed in, or driven by next()/send()). Turn it into a list before "
        "calling the compiled function and pass the list (`list(gen)` inside the compiled "
        "code breaks too), or build a list instead of a generator in forward.",
        words=(
            "call_method on generator", "missing tp_iter", "generator object",
            "attempt to trace generator", "generator reconstruction", "infinite generator",
            "sub-generator", "iter() with",
            # 2.14: next() on a generator made outside the frame fails to wrap the generator's
            # "<class 'range_iterator'>" (gb0116, "Unexpected type in sourceless builder").
            "iterator'>",
        ),
    ),
    Category(
        REQUIRES_GRAD,
        "Changing requires_grad inside the compiled region breaks. Set it before calling "
        "the compiled function, or use torch.no_grad / detach().",
        words=("requires_grad",),
    ),
    Category(
        CONSTRAINT,
        "A dimension marked dynamic was specialised by the code. Drop mark_dynamic for it, "
        "or remove the code that depends on its exact size.",
        words=("constraint violation", "constraintviolation"),
    ),
    Category(
        OBSERVED_EXCEPTION,
        "An exception raised inside the region had no handler Dynamo could trace. Catch it "
        "inside the compiled function or avoid raising on the hot path.",
        words=("observed exception",),
    ),
    Category(
        UNSUPPORTED_CALL,
        "Dynamo cannot trace this builtin or C extension. Replace it with a torch op, wrap "
        "it as a custom op (torch.library.custom_op), or mark it torch.compiler.allow_in_graph "
        "if it is traceable.",
        words=("builtin", "c/c++", "c extension", "numpy", "pybind", "c function", "c-implemented"),
    ),
    Category(
        SKIPPED,
        "The called function is marked skip/disable or lives in a file Dynamo skips. "
        "Remove the torch.compiler.disable, or move the call outside the compiled region.",
        words=(
            "marked as skipped", "disable()", "disallowed", "skip calling", "skipfiles",
            "skipped", "torch.compiler.disable",
        ),
    ),
    Category(
        PROXY,
        "A value could not be turned into a graph value or returned from the graph. Return "
        "tensors, tuples, lists or dicts of tensors; keep other objects outside.",
        words=("proxy", "unsupported output", "return value", "reconstruct"),
    ),
    # Selected by where the break was raised, not by words.
    Category(
        LIBRARY_BREAK,
        "A library (torch or a third-party package) calls torch._dynamo.graph_break() here on "
        "purpose, in its own code (see the stack): no change at this line removes it. Call the "
        "library function outside the compiled function, or compile the code before and after "
        "it separately; the code around it still compiles.",
        on_purpose=True, raised_in=RAISED_IN_LIBRARY,
        unpatched="a library calls torch._dynamo.graph_break() on purpose",
    ),
    # No words match.
    Category(OTHER, "Read PyTorch's explanation and hints below, and its documentation link."),
)

CATEGORY_NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)
_BY_NAME = {c.name: c for c in CATEGORIES}
_BY_RAISED_IN = {c.raised_in: c.name for c in CATEGORIES if c.raised_in}

# torch 2.14 words a generator break "C-implemented special method without VariableTracker
# model", a type it also uses for other C slots: it is a generator/iterator break when the
# message or the user's line is about iteration.
_C_SPECIAL_METHOD = "c-implemented special method"
#: A statement that is a call of a logger's method or of the logging module's functions.
_LOGGING_CALL = re.compile(
    r"^(?:[A-Za-z_][\w.]*\.)?(?:\w*_)?(?:log|logger|logging)\."
    r"(?:debug|info|warning|warn|error|critical|exception|log|fatal|warning_once|info_once)\s*\(", re.I)
_ITERATION = ("generator", "__next__", "__iter__", "next(", "iter(", ".send(", "yield", "for ")


def category_named(name: str) -> Category:
    """The category of that name; "other" for a name dynscope does not know."""
    return _BY_NAME.get(name, _BY_NAME[OTHER])


def fix_for(name: str) -> str:
    """dynscope's advice for a category."""
    return category_named(name).fix


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
    # torch.optim's words win over every other rule, the generator one below included.
    if _selects(_BY_NAME[OPTIMIZER], text):
        return OPTIMIZER
    name = _by_words(text, source)
    # A graph_break() torch.optim or a library calls on purpose: no change at the line
    # removes it, so its category's fix is where the step is compiled, not the line.
    if name == EXPLICIT:
        return _BY_RAISED_IN.get(raised_in, name)
    return name


def _selects(category: Category, text: str) -> bool:
    return any(w in text for w in category.words)


def _by_words(text: str, source: str) -> str:
    if _C_SPECIAL_METHOD in text and any(w in f"{text}\n{source}".lower() for w in _ITERATION):
        return GENERATOR
    for category in CATEGORIES:
        if _selects(category, text):
            return category.name
    if "deepcopy(" in source:
        return DEEPCOPY
    if _LOGGING_CALL.match(source.strip()):
        # A logging.Logger method (``logger.warning(...)``, ``self.logger.info``, transformers'
        # ``warning_once``) or a logging module function (``logging.info``) whose break Dynamo
        # words otherwise ("Unsupported python_type() call" on torch 2.13).
        return LOGGING
    return OTHER
