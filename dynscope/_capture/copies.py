"""Deep copies of the user's model and inputs that torch's own deepcopy refuses.

``copy.deepcopy`` raises on a tensor that is not a graph leaf ("Only Tensors created explicitly
by the user (graph leaves) support the deepcopy protocol"). A model holds one after any forward
when it uses ``torch.nn.utils.weight_norm`` (the weight its hook computed from ``weight_g`` and
``weight_v``: WaveGlow, HiFi-GAN and most vocoders), and inputs hold one when they were computed
from a tensor that requires grad. dynscope copies both so as never to change the user's own
(fix runs each variant on copies; blame reruns the calls on copies): such a tensor is copied as
a detached clone that requires grad as the original did. The hook computes a weight again
before the next forward, so nothing reads the copied one's history.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch

__all__ = ["deep_copy"]


def deep_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy(value, memo)``, the tensors that are not graph leaves in it copied as
    detached clones (each once: objects that share one share its copy)."""
    try:
        return copy.deepcopy(value, dict(memo or {}))
    except RuntimeError as err:
        if "graph leaves" not in str(err):
            raise
    seeded = dict(memo or {})
    for t in _non_leaves(value):
        seeded[id(t)] = t.detach().clone().requires_grad_(t.requires_grad)
    return copy.deepcopy(value, seeded)


def _non_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors with a history that ``value`` reaches through containers, modules and the
    attributes of plain objects."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    todo = [value]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, torch.Tensor):
            if item.grad_fn is not None:
                found.append(item)
        elif isinstance(item, dict):
            todo += list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += list(item)
        elif (hasattr(item, "__dict__") and type(item).__module__ != "builtins"
              and not isinstance(item, (type, types.ModuleType, types.FunctionType, types.MethodType))):
            todo += list(vars(item).values())
    return found
