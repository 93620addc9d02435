"""Graph-break categories and dynscope's own fix advice for each.

The categories come from breaks seen in real models (docs/report-model.md), most common first.
``classify`` (in ``dynscope._lexicon.break_categories``) is a pure function of PyTorch's graph-break type, explanation and the
user's source line, so it can be tested without compiling anything; ``category_of`` here
adds where Dynamo reported the break (inside torch.optim, a library, or the user's code).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._lexicon import break_categories
from dynscope._lexicon.break_categories import LIBRARY_BREAK, OPTIMIZER

__all__ = ["CATEGORIES", "CATEGORY_NAMES", "Category", "category_of", "fix_for", "raised_in"]


@dataclass(frozen=True)
class Category:
    """One break category."""

    name: str  # what reports show
    fix: str  # what the user can do about it

    @property
    def actionable(self) -> bool:
        """False: PyTorch or a library breaks here on purpose; no change at the user's line
        removes the break ("fix first" never names such a site; the fix says what helps)."""
        return self.name not in break_categories.ON_PURPOSE


CATEGORIES: tuple[Category, ...] = (
    Category(
        "data-dependent branch",
        "Python `if`/`while` on a tensor's value cannot be traced. Use torch.where / "
        "torch.cond for the branch, or compute the condition outside the compiled region.",
    ),
    Category(
        "data-dependent guard/shape",
        "An op's output shape or a guard depends on tensor values (nonzero, unique, masked "
        "select...). Set torch._dynamo.config.capture_dynamic_output_shape_ops = True, or "
        "keep shapes static (masking instead of selecting).",
    ),
    Category(
        ".item()/scalar output",
        "A tensor value is turned into a Python number (`.item()`, `int(t)`/`float(t)`, "
        "`.tolist()`, a numpy conversion). Keep it a tensor, or set "
        "torch._dynamo.config.capture_scalar_outputs = True so Dynamo traces it; that removes "
        "the break for .item(), int()/float(), numpy conversions and .tolist() of integer "
        "tensors, but not for .tolist() of a float tensor (keep that one a tensor, or call "
        "it outside the compiled region).",
    ),
    Category(
        "deepcopy",
        "copy.deepcopy inside the compiled region breaks. Copy modules or tensors before "
        "calling the compiled function, or use tensor.clone().",
    ),
    Category(
        "logging/print side effect",
        "print/logging inside the compiled region breaks the graph. Remove it, guard it "
        "with `if not torch.compiler.is_compiling():`, or add the function to "
        "torch._dynamo.config.reorderable_logging_functions (Dynamo then calls it after the "
        "graph). That removes the break for print and plain functions (logging.info, your own "
        "logging helper); for a logging.Logger's methods (`log.info(...)`) only on newer PyTorch "
        "(2.15 reorders them, 2.14 and older still break there: guard or remove those). "
        "`dynscope advise` tries it on your program and says which.",
    ),
    Category(
        "skipped or disallowed function",
        "The called function is marked skip/disable or lives in a file Dynamo skips. "
        "Remove the torch.compiler.disable, or move the call outside the compiled region.",
    ),
    Category(
        "unsupported builtin or C/numpy call",
        "Dynamo cannot trace this builtin or C extension. Replace it with a torch op, wrap "
        "it as a custom op (torch.library.custom_op), or mark it torch.compiler.allow_in_graph "
        "if it is traceable.",
    ),
    Category(
        "proxy/return conversion",
        "A value could not be turned into a graph value or returned from the graph. Return "
        "tensors, tuples, lists or dicts of tensors; keep other objects outside.",
    ),
    Category(
        "tensor attribute mutation (requires_grad)",
        "Changing requires_grad inside the compiled region breaks. Set it before calling "
        "the compiled function, or use torch.no_grad / detach().",
    ),
    Category(
        "dynamic-shape constraint violation",
        "A dimension marked dynamic was specialised by the code. Drop mark_dynamic for it, "
        "or remove the code that depends on its exact size.",
    ),
    Category(
        "observed exception",
        "An exception raised inside the region had no handler Dynamo could trace. Catch it "
        "inside the compiled function or avoid raising on the hot path.",
    ),
    Category(
        "backward() in compiled code",
        "`loss.backward()` inside the compiled function breaks the graph. Compile the "
        "forward and loss only and call backward() outside it. Where the installed torch "
        "has it, torch._dynamo.config.trace_autograd_ops = True traces backward() (on torch 2.13 "
        "it removes the break when the function returns loss.detach(), not loss, and nothing after "
        "backward() in the compiled function breaks: an optimizer step inside does); compiled autograd (torch._dynamo.config.compiled_autograd "
        "= True) compiles the backward pass but keeps this break.",
    ),
    Category(
        "generator/iterator",
        "Dynamo cannot step this generator or iterator (often one made outside the compiled "
        "function and passed in, or driven by next()/send()). Turn it into a list before "
        "calling the compiled function and pass the list (`list(gen)` inside the compiled "
        "code breaks too), or build a list instead of a generator in forward.",
    ),
    Category(
        OPTIMIZER,
        "torch.optim breaks the graph here on purpose: Optimizer.step() calls "
        "torch._dynamo.graph_break() before and after the update (so the update compiles as a "
        "no-grad graph of its own, pytorch/pytorch#104053), and Dynamo does not trace "
        "Optimizer.zero_grad(). No change at this line removes the break. Compile the optimizer "
        "step on its own (`torch.compile(opt.step)`, or a separate compiled function that calls "
        "opt.step()), or call opt.step() and opt.zero_grad() outside the compiled function.",
    ),
    Category(
        LIBRARY_BREAK,
        "A library (torch or a third-party package) calls torch._dynamo.graph_break() here on "
        "purpose, in its own code (see the stack): no change at this line removes it. Call the "
        "library function outside the compiled function, or compile the code before and after "
        "it separately; the code around it still compiles.",
    ),
    Category(
        "explicit graph_break()",
        "The code calls torch._dynamo.graph_break() on purpose. Remove it if the split is "
        "no longer needed.",
    ),
    Category(
        "other",
        "Read PyTorch's explanation and hints below, and its documentation link.",
    ),
)

CATEGORY_NAMES: tuple[str, ...] = tuple(c.name for c in CATEGORIES)
_BY_NAME = {c.name: c for c in CATEGORIES}


def category_of(gb_type: str, explanation: str = "", source: str = "", *, raised_at: str = "") -> str:
    """The category name for one break (:func:`dynscope._lexicon.break_categories.classify`), told
    where Dynamo reported it.

    Args:
        gb_type: PyTorch's graph-break type.
        explanation: PyTorch's explanation text.
        source: the user's line of code.
        raised_at: the file Dynamo reported the break in ("Graph break in user code at
            FILE:LINE"): a ``graph_break()`` there inside torch.optim or a library is one
            the user cannot remove. Defaults to "" (not known: the user's code).
    """
    return break_categories.classify(gb_type, explanation, source, raised_in=raised_in(raised_at))


def raised_in(filename: str) -> str:
    """Where a break was raised, for :func:`category_of`: "torch.optim", "library" (torch or a
    third-party package) or "" (the user's code, or not known)."""
    if not filename or filename.startswith("<"):
        return ""
    path = filename.replace("\\", "/")
    if "/torch/optim/" in path:
        return break_categories.RAISED_IN_OPTIM
    # Deferred: the registry needs torch, and reading a saved report must not import it.
    from dynscope._torch.registry import is_user_file

    # Third-party packages count as the user's code for the site (docs/report-model.md), but a
    # graph_break() they call is theirs to remove, not the user's.
    if not is_user_file(filename) or "/site-packages/" in path or "/dist-packages/" in path:
        return break_categories.RAISED_IN_LIBRARY
    return ""


def fix_for(category: str) -> str:
    """dynscope's advice for a category."""
    return _BY_NAME.get(category, _BY_NAME["other"]).fix
