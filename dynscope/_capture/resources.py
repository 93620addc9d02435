"""What a copy of the user's program gets in place of what Python cannot copy.

Real programs hold things ``copy.deepcopy`` refuses: a metrics collector's
``threading.Lock``, a trainer's log file, an event writer's queue drained by a thread, a
data iterator or a generator of schedules. dynscope runs copies (fix's variants, blame's
reruns) so that the user's objects are never changed, and refusing such programs outright
left them without a fix; running them on the user's own objects would change them. So a copy
holds, in place of each:

- a lock: a new lock of its kind, free (a lock holds no data); a ``Condition`` over the
  copied lock, an ``Event`` set as the original is;
- a thread: the thread itself (a handle: the copy never starts or joins it); a Python module
  (``self.np = numpy``, a package a closure imported) likewise;
- a file open for writing: an in-memory file of its kind (what a run writes goes nowhere:
  the user's file is not written by fix); a file open for reading by name: the same file
  opened again at the same position (reading it does not move the user's);
- a generator not yet started (a sampler's ``iter(...)`` a model keeps to draw batches from):
  the same generator function called again over copies of its arguments, so the copy yields
  what the user's would and the user's does not advance;
- anything else that cannot be copied (a generator already started, a data loader's
  iterator, a socket): a stand-in that raises :class:`~dynscope.InputError` naming where it was held when the program
  uses it. A program that does not use it runs as it is; one that does is told, and nothing of
  the user's was advanced.
"""

from __future__ import annotations

import copy
import inspect
import io
import os
import threading
import types
import weakref
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from dynscope._errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["StandIn", "seed_resources"]

_LOCKS = (type(threading.Lock()), type(threading.RLock()))
# What deepcopy copies as itself or by a rule of its own, whatever pickle says (a function
# defined inside another cannot be pickled, but deepcopy keeps it as it is).
_COPIED_AS_THEY_ARE = (torch.Tensor, type, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                       types.CodeType, weakref.ref, property, range)


def seed_resources(value: Any, memo: dict[int, Any]) -> int:
    """Put in ``memo`` (a deepcopy memo) the copy of each object ``value`` reaches that
    Python cannot copy (see the module's docstring). Returns how many were found."""
    found = 0
    for path, item in _paths(value):
        if id(item) in memo or not _refused(item):
            continue
        memo[id(item)] = _replacement(item, path, memo)
        found += 1
    return found


def _refused(item: Any) -> bool:
    """Whether ``copy.deepcopy`` would refuse ``item`` itself (not what it holds): asked of
    its ``__reduce_ex__``, which names its state without copying it."""
    if isinstance(item, (*_LOCKS, threading.Condition, threading.Event, threading.Thread, io.IOBase)):
        return not isinstance(item, (io.StringIO, io.BytesIO))
    if isinstance(item, (types.GeneratorType, types.AsyncGeneratorType, types.CoroutineType, types.ModuleType)):
        return True
    if hasattr(type(item), "__deepcopy__") or isinstance(item, _COPIED_AS_THEY_ARE):
        return False
    if type(item).__module__.split(".")[0] == "numpy":  # an array's reduce copies its bytes
        return False
    try:
        item.__reduce_ex__(4)
    except Exception:  # noqa: BLE001 - how an object says it cannot be pickled or copied
        return True
    return False


def _replacement(item: Any, path: str, memo: dict[int, Any]) -> Any:
    if isinstance(item, _LOCKS):
        return threading.Lock() if isinstance(item, _LOCKS[0]) else threading.RLock()
    if isinstance(item, threading.Condition):
        lock = getattr(item, "_lock", None)
        if lock is None:
            return threading.Condition()
        if id(lock) not in memo:  # shared with the other conditions over it (a queue's three)
            memo[id(lock)] = _replacement(lock, f"{path}._lock", memo)
        return threading.Condition(memo[id(lock)])
    if isinstance(item, threading.Event):
        event = threading.Event()
        if item.is_set():
            event.set()
        return event
    if isinstance(item, (threading.Thread, types.ModuleType)):
        return item
    if isinstance(item, io.IOBase):
        return _file_copy(item, path)
    if isinstance(item, types.GeneratorType):
        again = _generator_again(item, memo)
        if again is not None:
            return again
    return StandIn(type(item).__name__, path)


def _generator_again(gen: types.GeneratorType, memo: dict[int, Any]) -> types.GeneratorType | None:
    """A generator not yet started (a sampler's ``iter(...)`` kept for the calls to draw from)
    made again: its function called over copies of its arguments (the sampler and its random
    state copied with the rest), so the copy yields what the user's would, from where the
    user's stands, and the user's does not advance. None for one already started (its place
    cannot be copied) or one that closes over names."""
    code = gen.gi_code
    frame = gen.gi_frame
    if frame is None or inspect.getgeneratorstate(gen) != inspect.GEN_CREATED or code.co_freevars:
        return None
    given = dict(frame.f_locals)
    fixed = code.co_argcount + code.co_kwonlyargcount
    names = code.co_varnames[:fixed]
    star = code.co_varnames[fixed] if code.co_flags & inspect.CO_VARARGS else None
    stars = code.co_varnames[fixed + (star is not None)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    try:
        copied = copy.deepcopy(given, memo)
    except Exception:  # noqa: BLE001 - arguments that cannot be copied: a stand-in instead
        return None
    positional = [copied[n] for n in code.co_varnames[:code.co_argcount]]
    keywords = {n: copied[n] for n in names[code.co_argcount:]}
    fn = types.FunctionType(code, frame.f_globals, code.co_name)
    made = fn(*positional, *(copied.get(star, ()) if star else ()), **keywords,
              **(copied.get(stars, {}) if stars else {}))
    return made if isinstance(made, types.GeneratorType) else None


def _file_copy(f: io.IOBase, path: str) -> Any:
    mode = str(getattr(f, "mode", ""))
    binary = not isinstance(f, io.TextIOBase)
    if f.closed or ("r" not in mode or "+" in mode):
        return io.BytesIO() if binary else io.StringIO()
    name = getattr(f, "name", None)
    if isinstance(name, str) and os.path.isfile(name):  # a regular file: a pipe's open could wait
        try:
            again = open(name, mode)  # a handle of the copy's, closed when the copy is dropped
            again.seek(f.tell())
            return again
        except OSError:
            pass
    return StandIn(type(f).__name__, path)


class StandIn:
    """What a copy holds in place of an object that cannot be copied: using it in any way
    raises :class:`~dynscope.InputError` naming the object and where the program held it."""

    def __init__(self, kind: str, path: str) -> None:
        object.__setattr__(self, "_said", (kind, path))

    # Run eagerly, never traced: a compiled program that uses it breaks at its own line, and
    # no frame of dynscope's is in what the report shows.
    @torch.compiler.disable
    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        kind, path = object.__getattribute__(self, "_said")
        raise InputError(
            f"dynscope runs a copy of your program so that yours is never changed, and Python cannot copy the "
            f"{kind} held at {path}; the program used it. Give it one that can be copied (a list instead of a "
            "generator, a fresh iterator made in the call), or make it outside what you pass")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)  # copy and pickle probe for their hooks: not a use
        self._refuse()

    __call__ = __iter__ = __next__ = __len__ = __getitem__ = __enter__ = _refuse

    def __deepcopy__(self, memo: dict[int, Any]) -> StandIn:
        return self

    def __repr__(self) -> str:
        kind, path = object.__getattribute__(self, "_said")
        return f"<not copied: the {kind} at {path}>"


def _paths(root: Any) -> Iterator[tuple[str, Any]]:
    """``root`` and what it reaches through containers and objects' attributes, each once,
    with the path that reached it (``model.writer.q``) for what is said."""
    seen: set[int] = set()
    todo: list[tuple[str, Any]] = [(_name(root), root)]
    while todo:
        path, item = todo.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, bool)) or item is None:
            continue
        seen.add(id(item))
        yield path, item
        if isinstance(item, dict):
            todo += [(f"{path}[{k!r}]", v) for k, v in list(item.items())]
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += [(f"{path}[{i}]", v) for i, v in enumerate(list(item))]
        elif _entered(item):
            for key, v in list(vars(item).items()):
                if isinstance(item, torch.nn.Module) and key in ("_modules", "_parameters", "_buffers"):
                    todo += [(f"{path}.{k}", sub) for k, sub in v.items()]  # named as the user names them
                else:
                    todo.append((f"{path}.{key}", v))


def _entered(item: Any) -> bool:
    return (hasattr(item, "__dict__") and type(item).__module__ != "builtins" and not isinstance(item, torch.Tensor)
            and not isinstance(item, (type, types.ModuleType, types.FunctionType, types.MethodType, io.IOBase,
                                      threading.Thread, StandIn)))


def _name(root: Any) -> str:
    if isinstance(root, torch.nn.Module):
        return "model"
    return type(root).__name__
