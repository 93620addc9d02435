"""The inputs of each call report() makes, described as plain data for the guard checks
(``dynscope._read.guard_checks``): nothing live is kept."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from dynscope._read.guard_checks import Described

__all__ = ["describe_call"]


def describe_call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Described]:
    """Guard source -> what the call brings there (``L['x']``, ``L['kwargs']['keep']``), for
    the arguments of ``fn`` (a module's forward, or a function); {} when they cannot be bound."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        signature = inspect.signature(target)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    out: dict[str, Described] = {}
    params = signature.parameters
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD and isinstance(value, dict):
            for key, v in value.items():
                out[f"L['{name}']['{key}']"] = _describe(v)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            out[f"L['{name}']"] = _describe(value)
    # A decorator's wrapper (Hugging Face's forward) is the frame Dynamo compiles: its locals
    # are ``args`` and ``kwargs``, so the guards name the inputs through them.
    for i, value in enumerate(args):
        out.setdefault(f"L['args'][{i}]", _describe(value))
    for key, value in kwargs.items():
        out.setdefault(f"L['kwargs']['{key}']", _describe(value))
    return out


def _describe(value: Any) -> Described:
    if isinstance(value, torch.Tensor):
        try:
            stride: tuple[int, ...] = tuple(value.stride())
        except (RuntimeError, NotImplementedError):
            stride = ()
        return ("tensor", str(value.dtype), str(value.device), bool(value.requires_grad), tuple(value.shape), stride)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return ("value", repr(value))
    if isinstance(value, (list, tuple, dict)):
        return ("len", len(value))
    return ("other", type(value).__name__)
