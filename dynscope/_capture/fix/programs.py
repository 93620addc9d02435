"""The program fix runs: the user's callable over copies of everything it changes.

fix reruns the program many times (before any patch, eagerly, each patch compiled), and
promises that nothing of the user's is changed. What a program changes is not only a
module it is given: a trainer's ``step`` updates the trainer's model, optimizer and scheduler;
a train step written as a function closes over its model, or reads it, its optimizer and a
history list from its file's globals (nanoGPT's ``train.py`` style); a
``functools.partial`` holds its tensors. Each run gets copies of all of them, copied together
(an optimizer keeps the copied model's parameters), so every run starts from the state the
user's program is in and the user's objects are left as they were. What cannot be copied
is an :class:`~dynscope.InputError` naming it, never a run on the user's own objects.
"""

from __future__ import annotations

import dis
import enum
import functools
import types
from typing import Any

import torch

from dynscope._capture.copies import EMPTY, closure_contents, deep_copy
from dynscope._torch.registry import is_user_file

__all__ = ["NOT_STATE", "clear_grads", "copied", "global_names", "global_state", "remade", "with_closure"]

# Values of a file's globals that are code or constants, not state a run can change.
NOT_STATE = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.MethodWrapperType,
             functools.partial, enum.Enum, int, float, complex, str, bytes, bool, type(None), range)


def copied(obj: Any) -> Any:
    """``obj`` over copies of what it can change, its modules' gradients cleared: a module
    deep-copied; a bound method's object (a module, a trainer) copied and the method read
    from the copy; a partial's function copied and its arguments; a function of the user's
    over copies of what it closes over and of the state it reads from its file's globals
    (its own helpers in that file made again to read the same copies). Anything else (a
    library's function with no closure) is itself."""
    if isinstance(obj, types.MethodType) and not isinstance(obj.__self__, (type, types.ModuleType)):
        owner = obj.__self__
        copy = clear_grads(deep_copy(owner))
        for value in vars(copy).values() if hasattr(copy, "__dict__") else ():
            clear_grads(value)
        return getattr(copy, obj.__name__)
    if isinstance(obj, functools.partial):
        args, keywords = deep_copy((obj.args, obj.keywords))
        return functools.partial(copied(obj.func), *args, **keywords)
    if isinstance(obj, types.FunctionType):
        return _over_copies(obj)
    return clear_grads(deep_copy(obj)) if isinstance(obj, torch.nn.Module) else obj


def clear_grads(value: Any) -> Any:
    """``value``, its parameters' gradients cleared when it is a module."""
    if isinstance(value, torch.nn.Module):
        for p in value.parameters():
            p.grad = None
    return value


def _over_copies(fn: types.FunctionType) -> types.FunctionType:
    names = global_state(fn)
    if not fn.__closure__ and not names:
        return fn
    contents, values = deep_copy((closure_contents(fn), [fn.__globals__[n] for n in names]), {id(EMPTY): EMPTY})
    for value in (*contents, *values):
        clear_grads(value)
    scope = fn.__globals__
    if names:
        scope = {**scope, **dict(zip(names, values, strict=True))}
        for name in _helpers(fn):  # the file's functions it calls read the copies too
            helper = scope[name]
            scope[name] = remade(helper, helper.__code__, scope, helper.__closure__)
    out = with_closure(fn, fn.__code__, scope, contents) if fn.__closure__ else remade(fn, fn.__code__, scope, None)
    if names:  # a function that calls itself by its name calls the copy, over the same copies
        scope.update({n: out for n, v in fn.__globals__.items() if v is fn})
    return out


def global_state(fn: types.FunctionType) -> list[str]:
    """The names of ``fn``'s file's globals that ``fn``, or the functions of that file it
    calls by name, read and that hold state (a model, an optimizer, a list, a tensor), not
    code or constants; [] for a function of a library."""
    if not is_user_file(fn.__code__.co_filename):
        return []
    scope = fn.__globals__
    return sorted(n for n in _read(fn) if n in scope and not _dunder(n) and not isinstance(scope[n], NOT_STATE))


def _helpers(fn: types.FunctionType) -> list[str]:
    scope = fn.__globals__
    return sorted(n for n in _read(fn) if isinstance(scope.get(n), types.FunctionType)
                  and scope[n].__globals__ is scope and scope[n] is not fn)


def _read(fn: types.FunctionType) -> set[str]:
    """The global names ``fn``'s code (its comprehensions and nested functions too) reads, and
    those the functions of its own file it names read, transitively."""
    scope = fn.__globals__
    names: set[str] = set()
    todo = [fn.__code__]
    done: set[int] = set()
    while todo:
        code = todo.pop()
        if id(code) in done:
            continue
        done.add(id(code))
        for name in global_names(code):
            names.add(name)
            value = scope.get(name)
            if isinstance(value, types.FunctionType) and value.__globals__ is scope:
                todo.append(value.__code__)
    return names


@functools.lru_cache(maxsize=4096)
def global_names(code: types.CodeType) -> frozenset[str]:
    """The global names ``code`` and the code nested in it (comprehensions, functions,
    classes) load or store, by its instructions: not its attributes' (``self.model`` reads no
    global ``model``). Cached: fix asks it of the same code on every run."""
    out: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        out.update(str(ins.argval) for ins in dis.get_instructions(c) if ins.opname in _GLOBAL_OPS)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return frozenset(out)


_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME"})


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def with_closure(fn: types.FunctionType, code: types.CodeType, globals_: dict[str, Any],
                 contents: list[Any]) -> types.FunctionType:
    """``fn`` made again from ``code`` and ``globals_`` over new cells holding ``contents``
    (an unfilled cell stays unfilled), its defaults, name and attributes kept."""
    return remade(fn, code, globals_, tuple(types.CellType() if v is EMPTY else types.CellType(v) for v in contents))


def remade(fn: types.FunctionType, code: types.CodeType, globals_: dict[str, Any],
           closure: tuple[Any, ...] | None) -> types.FunctionType:
    """``fn`` made again from ``code``, ``globals_`` and ``closure``, its name, defaults and
    attributes kept."""
    out = types.FunctionType(code, globals_, fn.__name__, fn.__defaults__, closure)
    out.__kwdefaults__ = fn.__kwdefaults__
    out.__qualname__ = fn.__qualname__
    out.__dict__.update(fn.__dict__)
    return out
