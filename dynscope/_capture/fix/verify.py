"""A patch verified in isolation: applied to a copy of the user's module in a temporary
folder (never to the user's file), the program rerun under torch.compile in a fresh state,
its breaks counted and its outputs (and gradients) compared with the unpatched program's
eager run.

The patched copy is a module of its own (a fresh import of the patched text), so its code
objects are new: Dynamo has compiled none of them, and the user's compiled code is not
touched. The user's model is deep-copied before its classes are swapped for the patched
ones.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import math
import os
import sys
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dynscope._torch.runtime import compare_outputs, tensors
from dynscope._torch.sandbox import DynamoSandbox, compile_kwargs
from dynscope._torch.trace import own_work

__all__ = ["Evidence", "Run", "counterpart", "patched_module", "run_eager", "run_compiled"]

SEED = 0
_numbers = itertools.count()


@dataclass(frozen=True)
class Run:
    """What a run of the program gave: its outputs per call, and the gradients of what required grad."""

    outputs: list[Any]
    grads: dict[str, torch.Tensor]
    weights: dict[str, torch.Tensor] | None = None  # parameters and buffers after the calls (a train step updates them)


@dataclass(frozen=True)
class Evidence:
    outputs_matched: bool  # outputs, and the weights after the calls (a train step's update)
    gradients_matched: bool | None
    max_abs_error: float


def _weights(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> dict[str, torch.Tensor]:
    """The state of the model and of every module passed as an argument, after the calls."""
    owners: list[tuple[str, torch.nn.Module]] = []
    model = obj.__self__ if isinstance(obj, types.MethodType) else obj
    if isinstance(model, torch.nn.Module):
        owners.append(("model", model))
    for i, (args, kwargs) in enumerate(calls):
        owners += [(f"call {i} arg {j}", a) for j, a in enumerate([*args, *kwargs.values()])
                   if isinstance(a, torch.nn.Module)]
    return {f"{who} {name}": t.detach().clone() for who, m in owners for name, t in m.state_dict().items()}


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


class patched_module:  # a context manager used like a function
    """The patched text imported as a fresh module from a temporary folder, for the block."""

    def __init__(self, original: str, text: str) -> None:
        self.original, self.text = original, text
        self.module: types.ModuleType | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> types.ModuleType:
        self._dir = tempfile.TemporaryDirectory(prefix="dynscope-fix-")
        path = Path(self._dir.name) / Path(self.original).name
        path.write_text(self.text, encoding="utf-8")
        self.path = str(path)
        name = f"_dynscope_fix_{next(_numbers)}_{path.stem}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has one
            raise ImportError(f"cannot import the patched copy of {self.original}")
        module = importlib.util.module_from_spec(spec)
        # Its siblings (helpers it imports) are found where the original lives.
        sys.path.insert(0, str(Path(self.original).resolve().parent))
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            self.__exit__()
            raise
        finally:
            sys.path.remove(str(Path(self.original).resolve().parent))
        self.module = module
        return module

    def __exit__(self, *exc: object) -> None:
        if self.module is not None:
            sys.modules.pop(self.module.__name__, None)
        if self._dir is not None:
            self._dir.cleanup()


def _defined_in(obj: Any, filename: str) -> bool:
    code = getattr(obj, "__code__", None)
    if code is not None:
        return _same_file(code.co_filename, filename)
    if isinstance(obj, type):
        return any(_defined_in(v, filename) for v in vars(obj).values() if isinstance(v, types.FunctionType))
    return False


def _lookup(module: types.ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def counterpart(obj: Any, filename: str, module: types.ModuleType) -> tuple[Any, str]:
    """``obj`` as the patched module defines it (a function, or a deep copy of a module whose
    classes from ``filename`` are the patched ones); (None, why) when it cannot be."""
    if isinstance(obj, torch.nn.Module):
        swapped = copy.deepcopy(obj)
        found = False
        for sub in swapped.modules():
            cls = type(sub)
            if _defined_in(cls, filename) and "<locals>" not in cls.__qualname__:
                sub.__class__ = _lookup(module, cls.__qualname__)
                found = True
        if not found:
            return None, f"no class of the model is defined in {Path(filename).name}"
        return swapped, ""
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.nn.Module):
        owner, why = counterpart(obj.__self__, filename, module)
        return (getattr(owner, obj.__name__), "") if owner is not None else (None, why)
    if isinstance(obj, types.FunctionType):
        if not _defined_in(obj, filename):
            return None, (f"the function is defined in {Path(obj.__code__.co_filename).name}, the break in "
                          f"{Path(filename).name}: run fix on a function of that file to verify")
        if "<locals>" in obj.__qualname__:
            return None, "the function is defined inside another function: its patched copy cannot be found"
        return _lookup(module, obj.__qualname__), ""
    return None, f"a {type(obj).__name__} is neither a function nor a torch.nn.Module"


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    torch.manual_seed(SEED)
    return fn(*args, **kwargs)


def _grads(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], outputs: list[Any]) -> dict[str, torch.Tensor]:
    """Gradients of the sum of every floating output: of the model's parameters, and of the
    inputs that require grad."""
    floats = [t for out in outputs for t in tensors(out) if t.requires_grad and t.is_floating_point()]
    if not floats:
        return {}
    torch.stack([t.float().sum() for t in floats]).sum().backward()
    out: dict[str, torch.Tensor] = {}
    model = obj.__self__ if isinstance(obj, types.MethodType) else obj
    if isinstance(model, torch.nn.Module):
        out.update({f"param {n}": p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    for i, (args, kwargs) in enumerate(calls):
        for j, t in enumerate(tensors([args, kwargs])):
            if t.grad is not None:
                out[f"call {i} input {j}"] = t.grad.detach().clone()
    return out


def _fresh(calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    # Inputs that require grad stay leaves that require grad in the copy.
    return copy.deepcopy(calls)


def copied(obj: Any) -> Any:
    """A deep copy of a model, its gradients cleared (a bound method's model likewise)."""
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.nn.Module):
        return getattr(copied(obj.__self__), obj.__name__)
    if not isinstance(obj, torch.nn.Module):
        return obj
    model = copy.deepcopy(obj)
    for p in model.parameters():
        p.grad = None
    return model


def run_eager(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Run:
    """The unpatched program run eagerly on copies of the model and inputs."""
    model = copied(obj)
    fresh = _fresh(calls)
    outputs = [_call(model, a, k) for a, k in fresh]
    return Run(outputs, _grads(model, fresh, outputs), _weights(model, fresh))


def run_compiled(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> Run:
    """The patched program under ``torch.compile`` (backend eager: the graphs as Dynamo
    captured them) on copies of the inputs; ``obj`` is already the patched copy."""
    fresh = _fresh(calls)
    model = copied(obj)
    # In dynscope's sandbox, as its own work: Dynamo's counters, config and caches are put
    # back, and a capture() the user opened around fix() does not count these compiles.
    with DynamoSandbox(model) as sandbox, own_work():
        compiled = torch.compile(model, backend="eager", **compile_kwargs())
        sandbox.own(compiled)
        outputs = [_call(compiled, a, k) for a, k in fresh]
    return Run(outputs, _grads(model, fresh, outputs), _weights(model, fresh))


def _leaves(value: Any) -> list[Any]:
    """Every leaf of an output: tensors, Python numbers, anything else."""
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    if isinstance(value, dict):
        return [x for k in sorted(value, key=str) for x in [k, *_leaves(value[k])]]
    return [value]


def _same_leaves(expected: Any, got: Any) -> bool:
    """The outputs' structure, tensor dtypes, Python numbers (within tolerance) and other
    values agree: compare_outputs reads the tensors' values alone."""
    a, b = _leaves(expected), _leaves(got)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype):
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
            if type(x) is not type(y) or not math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6):
                return False
        elif x != y:
            return False
    return True


def compare(expected: Run, got: Run) -> Evidence:
    """Outputs (their structure, dtypes, Python numbers too), gradients and weights within the
    numerics check's tolerances (dynscope's timing check's)."""
    max_abs, _, ok = compare_outputs(expected.outputs, got.outputs)
    ok = ok and _same_leaves(expected.outputs, got.outputs)
    if expected.weights is not None and got.weights is not None:
        ok = ok and expected.weights.keys() == got.weights.keys() and all(
            compare_outputs(expected.weights[k], got.weights[k])[2] for k in expected.weights)
    grads: bool | None = None
    if expected.grads or got.grads:
        grads = expected.grads.keys() == got.grads.keys() and all(
            compare_outputs(expected.grads[k], got.grads[k])[2] for k in expected.grads)
    return Evidence(ok, grads, max_abs)
