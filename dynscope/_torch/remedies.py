"""What dynscope's remedies touch in PyTorch: Dynamo's config, mark_dynamic, the recompile
reasons that name an input's dimension, and the constraint errors a mark_dynamic meets
(follows torch 2.13).

Every change here is scoped to a ``with`` block and put back when it ends: advise() tries
remedies one at a time and must leave the user's process as it found it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import types
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "IGNORE_LOGGING",
    "config_line",
    "constraint_dims",
    "dynamo_config",
    "has_dynamo_option",
    "is_constraint_violation",
    "is_reorderable",
    "mark_dynamic",
    "mark_dynamic_line",
    "matmul_precision",
    "reorderable_line",
    "size_changes",
    "specialised_dims",
]


# -- the lines a user adds (what a Trial's ``code`` shows) ------------------------------------

#: The config option that drops logger calls under compile (loggers honour only this one).
IGNORE_LOGGING = "torch._dynamo.config.ignore_logging_functions"


def config_line(option: str) -> str:
    """``torch._dynamo.config.<option> = True``."""
    return f"torch._dynamo.config.{option} = True"


def reorderable_line(expr: str) -> str:
    """The line adding the function named ``expr`` to reorderable_logging_functions."""
    return f"torch._dynamo.config.reorderable_logging_functions.add({expr})"


def mark_dynamic_line(name: str, dim: int, how: str = "mark_dynamic") -> str:
    """The line marking input ``name``'s dimension ``dim`` dynamic (``how``: mark_dynamic,
    maybe_mark_dynamic or mark_unbacked)."""
    where = "torch._dynamo.decorators" if how == "mark_unbacked" else "torch._dynamo"
    return f"{where}.{how}({name}, {dim})  # before the first call"


def has_dynamo_option(name: str) -> bool:
    """True when the installed torch has ``torch._dynamo.config.<name>``."""
    import torch._dynamo

    return hasattr(torch._dynamo.config, name)


@contextlib.contextmanager
def dynamo_config(**values: Any) -> Iterator[None]:
    """Set Dynamo config options for the block; the old values come back after it.

    Set-valued options (``reorderable_logging_functions``) get the user's set plus the
    given members, as a new set: the user's own set object is never mutated.
    """
    import torch._dynamo

    cfg = torch._dynamo.config
    patched: dict[str, Any] = {}
    for name, value in values.items():
        current = getattr(cfg, name)
        patched[name] = set(current) | set(value) if isinstance(current, set) else value
    with cfg.patch(**patched):
        yield


def is_reorderable(fn: Any) -> bool:
    """Whether every torch dynscope supports reorders a call to ``fn`` when it is in
    reorderable_logging_functions: plain Python functions and builtins. A bound method such
    as ``logger.info`` goes through Dynamo's logger handling, which honours the set only on
    newer releases (2.15 does; 2.14 and older honour ``ignore_logging_functions`` only), so
    for those a trial says whether it helped."""
    return isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))


def mark_dynamic(tensor: torch.Tensor, dim: int, how: str = "mark_dynamic") -> None:
    """Mark ``tensor``'s dimension ``dim`` (call it on dynscope's clones only), ``how``:
    ``torch._dynamo.mark_dynamic`` (the code must keep it dynamic, or compiling fails),
    ``maybe_mark_dynamic`` (dynamic unless the code fixes it) or ``mark_unbacked`` (a size
    Dynamo may assume nothing about, not even that it is not 0 or 1), torch >= 2.4."""
    import torch._dynamo

    mark = {"mark_dynamic": torch._dynamo.mark_dynamic,
            "maybe_mark_dynamic": getattr(torch._dynamo, "maybe_mark_dynamic", None),
            "mark_unbacked": getattr(torch._dynamo.decorators, "mark_unbacked", None)}.get(how)
    if mark is None:
        raise ValueError(f"this torch has no torch._dynamo {how}")
    mark(tensor, dim)


def has_mark(how: str) -> bool:
    """True when the installed torch has the marking function ``how``."""
    import torch._dynamo

    if how == "mark_unbacked":
        return hasattr(torch._dynamo.decorators, "mark_unbacked")
    return hasattr(torch._dynamo, how)


# "tensor 'x' size mismatch at index 0. expected 4, actual 6" (torch 2.1 .. 2.14), where
# the name is L['x'] on older releases and x on newer ones.
_SIZE = re.compile(r"tensor '(?P<n>.+?)' size mismatch at index (?P<i>\d+)\.")
_LOCAL = re.compile(r"^L\['(?P<name>[^']+)'\]$")


def size_changes(reasons: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """(input name, dim) for each failed guard that says an input changed size, in order
    and without repeats. Names that are not a plain local (``L['x'][0]``) are kept as written."""
    out: list[tuple[str, int]] = []
    for reason in reasons:
        for m in _SIZE.finditer(reason):
            name = m["n"].strip()
            local = _LOCAL.match(name)
            pair = (local["name"] if local else name, int(m["i"]))
            if pair not in out:
                out.append(pair)
    return tuple(out)


# -- what PyTorch says when a dimension marked dynamic cannot be -----------------------------

# A size source as PyTorch prints it in constraint errors: L['x'].size()[1] (2.1 .. 2.13),
# x.size()[1] (newer), L['kwargs']['x'].size()[1] through **kwargs.
_SIZE_SOURCE = r"(?:L\['kwargs'\]\['(?P<kw>[^']+)'\]|L\['(?P<local>[^']+)'\]|(?P<bare>[A-Za-z_]\w*))\.size\(\)\[(?P<dim>\d+)\]"
_SIZE_SOURCE_RE = re.compile(_SIZE_SOURCE)
# "You marked L['x'].size()[1] as dynamic but your code specialized it to be a constant (4)"
# (torch.fx.experimental.symbolic_shapes.produce_guards_verbose, torch 2.4 .. 2.14).
_SPECIALISED = re.compile(rf"You marked {_SIZE_SOURCE} as dynamic but your code specialized it to be a constant \((?P<value>-?\d+)\)")


def _source_name(m: re.Match[str]) -> str:
    return m["kw"] or m["local"] or m["bare"]


def is_constraint_violation(err: BaseException) -> bool:
    """True when ``err`` (or what caused it) is PyTorch's ConstraintViolationError: a
    dimension marked dynamic that the code specialised or tied to another."""
    # By class name along the MRO and the cause chain: the class lives in
    # torch.fx.experimental.symbolic_shapes (2.1 .. 2.14) and dynscope wraps it in a CaptureError.
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if any(c.__name__ == "ConstraintViolationError" for c in type(cur).__mro__):
            return True
        cur = cur.__cause__ or cur.__context__
    return False


def specialised_dims(text: str) -> tuple[tuple[str, int, int], ...]:
    """(input name, dim, constant) for each dimension a ConstraintViolationError says was
    marked dynamic but specialised to a constant, in order."""
    out: list[tuple[str, int, int]] = []
    for m in _SPECIALISED.finditer(text):
        item = (_source_name(m), int(m["dim"]), int(m["value"]))
        if item not in out:
            out.append(item)
    return tuple(out)


def constraint_dims(text: str) -> tuple[tuple[str, int], ...]:
    """(input name, dim) for every input size a constraint error names (the marked one, and
    any PyTorch says it is tied to: "... must be equal to L['y'].size()[0]"), in order."""
    out: list[tuple[str, int]] = []
    for m in _SIZE_SOURCE_RE.finditer(text):
        item = (_source_name(m), int(m["dim"]))
        if item not in out:
            out.append(item)
    return tuple(out)


@contextlib.contextmanager
def matmul_precision(value: str) -> Iterator[None]:
    """torch.set_float32_matmul_precision(value) for the block; the old value after it."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


#: Loggers PyTorch prints a failed remedy's traceback to (a guard that cannot be built when a
#: size marked dynamic was specialised): the trial reports the error itself.
_TRIAL_NOISE = ("torch._guards", "torch._dynamo.guards")


class _DropErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


@contextlib.contextmanager
def quiet_trial() -> Iterator[None]:
    """While a remedy is tried, PyTorch's error logs of a failing guard are not printed (the
    Trial carries the error); the loggers are as they were afterwards."""
    flt = _DropErrors()
    loggers = [logging.getLogger(name) for name in _TRIAL_NOISE]
    for log in loggers:
        log.addFilter(flt)
    try:
        yield
    finally:
        for log in loggers:
            log.removeFilter(flt)


# -- memory remedies: the partitioner's budget, activation checkpointing ------------------

#: ATen ops whose outputs a selective checkpoint saves (the costly ones to recompute).
MATMUL_OPS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention")


def memory_budget_line(level: float) -> str:
    """The line a user writes to set AOTAutograd's activation memory budget."""
    return f"torch._functorch.config.activation_memory_budget = {level}"


def has_memory_budget() -> bool:
    """Whether the installed torch has AOTAutograd's ``activation_memory_budget``."""
    import torch._functorch.config as fc

    return hasattr(fc, "activation_memory_budget")


@contextlib.contextmanager
def memory_budget(value: float) -> Iterator[None]:
    """``torch._functorch.config.activation_memory_budget`` for the block (1.0 saves what the
    default partitioner saves; lower values recompute more to save less)."""
    import torch._functorch.config as fc

    with fc.patch(activation_memory_budget=value):
        yield


def repeated_blocks(model: Any) -> list[tuple[str, torch.nn.Module]]:
    """The blocks a model repeats: children of a ``ModuleList``/``Sequential`` of which at
    least two share a class and hold parameters (a transformer's layers, a ResNet stage's
    blocks), by their dotted names. [] when ``model`` is not a module or repeats nothing."""
    if not isinstance(model, torch.nn.Module):
        return []
    out: list[tuple[str, torch.nn.Module]] = []
    for name, parent in model.named_modules():
        if not isinstance(parent, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        by_class: dict[type, list[tuple[str, torch.nn.Module]]] = {}
        for child_name, child in parent.named_children():
            # Composite blocks only: checkpointing one Linear saves nothing.
            if any(True for _ in child.children()) and any(True for _ in child.parameters()):
                by_class.setdefault(type(child), []).append((f"{name}.{child_name}" if name else child_name, child))
        for blocks in by_class.values():
            if len(blocks) >= 2 and not any(n.startswith(f"{b}.") for b, _ in out for n, _ in blocks):
                out.extend(blocks)
    return out


def trains_batchnorm(blocks: list[torch.nn.Module]) -> bool:
    """Whether any block holds a BatchNorm layer in training mode (it updates its running
    statistics in place, which a checkpointed block's second forward trips over)."""
    from torch.nn.modules.batchnorm import _BatchNorm

    return any(isinstance(sub, _BatchNorm) and sub.training for block in blocks for sub in block.modules())


def _closure_values(fn: Any) -> list[Any]:
    """The values a plain callable closes over and the globals it names; [] for a module
    or what ``inspect`` cannot read."""
    import inspect

    if isinstance(fn, torch.nn.Module) or not callable(fn):
        return []
    try:
        found = inspect.getclosurevars(inspect.unwrap(fn))
    except TypeError:
        return []
    return [*found.nonlocals.values(), *found.globals.values()]


def modules_of(fn: Any) -> list[torch.nn.Module]:
    """The modules a callable works on: itself when a module, else the modules its closure
    and the globals it names hold (a train step closing over its model)."""
    if isinstance(fn, torch.nn.Module):
        return [fn]
    return [v for v in _closure_values(fn) if isinstance(v, torch.nn.Module)]


def optimizers_of(fn: Any) -> list[torch.optim.Optimizer]:
    """The optimizers a train step closes over or names as globals."""
    return [v for v in _closure_values(fn) if isinstance(v, torch.optim.Optimizer)]


def _save_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
    from torch.utils.checkpoint import CheckpointPolicy

    name = getattr(getattr(op, "overloadpacket", op), "__name__", str(op))
    return CheckpointPolicy.MUST_SAVE if name in MATMUL_OPS else CheckpointPolicy.PREFER_RECOMPUTE


@contextlib.contextmanager
def checkpointed(blocks: list[torch.nn.Module], *, selective: bool) -> Iterator[None]:
    """Each block's forward run under ``torch.utils.checkpoint.checkpoint(...,
    use_reentrant=False)`` for the block (an instance attribute shadows the class's
    forward; removed after); ``selective``: a policy that saves matmul outputs and
    recomputes the rest."""
    import functools

    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    options: dict[str, Any] = {"use_reentrant": False}
    if selective:
        options["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _save_matmuls)
    patched = []
    for block in blocks:
        # A partial, not a function of dynscope's: no frame of dynscope's code runs between
        # the model and checkpoint (nothing of it in the graphs' stacks).
        block.forward = functools.partial(checkpoint, block.forward, **options)
        patched.append(block)
    try:
        yield
    finally:
        for block in patched:
            del block.forward
