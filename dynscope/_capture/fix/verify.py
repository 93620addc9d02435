"""A patch verified in isolation: applied to a copy of the user's module (never to the
user's file), the program rerun under torch.compile in a fresh state, its breaks counted and
its outputs (and gradients) compared with the unpatched program's eager run.

The patched copy is a hidden file beside the user's (``.NAME.dynscope-fix-XXXX.py``), so its
imports and the files it opens beside ``__file__`` resolve as the original's do, imported as
a module of its own in the original's package: its code objects are new, Dynamo has compiled
none of them, and the user's compiled code is not touched. The copy is removed when the
block ends and on SIGTERM, SIGINT or SIGHUP (then the handler that was there runs). The user's
model is deep-copied before its classes are swapped for the patched ones, each found by its
code (the definition the user's object came from), not by its name.
"""

from __future__ import annotations

import ast
import contextlib
import enum
import functools
import importlib.util
import inspect
import itertools
import math
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import textwrap
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dynscope._capture.copies import EMPTY, closure_contents, deep_copy
from dynscope._torch.registry import is_user_file, library_of
from dynscope._torch.runtime import compare_outputs, tensors
from dynscope._torch.sandbox import DynamoSandbox, compile_kwargs
from dynscope._torch.trace import own_work

from .programs import copied, global_state, remade, with_closure
from .said import differs, listening, python_state
from .scripts import definitions, script_names

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

__all__ = ["Evidence", "PatchedImportError", "Run", "counterpart", "defined_in", "inputs_swapped", "patched_module", "random_streams_kept", "run_eager",
           "run_compiled"]

SEED = 0
_numbers = itertools.count()


@dataclass(frozen=True)
class Run:
    """What a run of the program gave: its outputs per call, and the gradients of what required grad."""

    outputs: list[Any]
    grads: dict[str, torch.Tensor]
    weights: dict[str, torch.Tensor] | None = None  # parameters and buffers after the calls (a train step updates them)
    said: tuple[str, ...] = ()  # what the calls printed and logged (fix/said.py)
    state: dict[str, Any] | None = None  # plain Python values the modules keep, after the calls
    # (the file's real path, the line) -> how many times it ran, for the lines of the traced
    # files (run_eager's ``traced``): whether a shortcut was taken, or an ``if`` skipped, the
    # evidence a rewrite that drops it needs.
    lines: Mapping[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    outputs_matched: bool  # outputs, and the weights after the calls (a train step's update)
    gradients_matched: bool | None
    max_abs_error: float
    said_differs: str = ""  # how the messages printed and logged differ ("" when they do not)
    state_differs: str = ""  # which plain Python attribute of a module differs ("" when none)
    # Attributes of held plain objects that held Python floats and now hold detached 0-dim
    # tensors of the same values (a meter fed ``loss.detach()`` where it was fed ``loss.item()``):
    # no difference, said.
    state_as_tensors: tuple[str, ...] = ()


def _models(obj: Any) -> list[tuple[str, torch.nn.Module]]:
    """The model (a bound method's module), or the modules a function closes over (a train
    step's ``model``), each named."""
    model = obj.__self__ if isinstance(obj, types.MethodType) else obj
    if isinstance(model, torch.nn.Module):
        return [("model", model)]
    if isinstance(model, types.FunctionType):
        read = [*((f"closure {name}", value) for name, value in closed_over(model)),
                *((f"global {name}", model.__globals__[name]) for name in global_state(model))]
        return [(who, value) for who, value in read if isinstance(value, torch.nn.Module)]
    if _plain(model):  # a trainer whose step is compiled: the modules it holds
        return [(f"{type(model).__name__}.{k}", v) for k, v in vars(model).items() if isinstance(v, torch.nn.Module)]
    return []


def closed_over(fn: types.FunctionType) -> list[tuple[str, Any]]:
    """The names a function closes over, with their values (an empty cell left out)."""
    return [(name, value) for name, value in zip(fn.__code__.co_freevars, closure_contents(fn), strict=False)
            if value is not EMPTY]


def _owners(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[tuple[str, torch.nn.Module]]:
    """The model (or the modules a function closes over) and every module passed as an argument."""
    owners = _models(obj)
    for i, (args, kwargs) in enumerate(calls):
        owners += [(f"call {i} arg {j}", a) for j, a in enumerate([*args, *kwargs.values()])
                   if isinstance(a, torch.nn.Module)]
    return owners


def _weights(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> dict[str, torch.Tensor]:
    """The state of the model and of every module passed as an argument, after the calls."""
    return {f"{who} {name}": t.detach().clone() for who, m in _owners(obj, calls) for name, t in m.state_dict().items()}


def _state(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> dict[str, Any]:
    """The plain Python values the model's modules (and the modules passed) keep, after the calls."""
    modules: list[tuple[str, Any]] = [(f"{who}.{sub}" if sub else who, m) for who, owner in _owners(obj, calls)
                                      for sub, m in owner.named_modules()]
    if isinstance(obj, types.FunctionType):  # what a train step keeps in its file's globals (a loss history)
        modules.append(("global", types.SimpleNamespace(**{n: obj.__globals__[n] for n in global_state(obj)})))
    elif isinstance(obj, types.MethodType) and _plain(obj.__self__):  # what a trainer keeps
        modules.append((type(obj.__self__).__name__, obj.__self__))
    return python_state(modules, lambda t: t.detach().clone(), torch.is_tensor)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


class PatchedImportError(ImportError):
    """The patched copy did not import: it raised, or exited (``SystemExit``), at import."""


# -- the copies on disk, removed on every way out ------------------------------------------------

_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, n))
_live: set[str] = set()  # copies (files and folders) on disk now
_previous: dict[int, Any] = {}  # the handlers ours replaced, per signal
_lock = threading.Lock()


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _on_signal(signum: int, frame: Any) -> None:
    """Remove every copy, then do what the handler that was there would have done."""
    for path in list(_live):
        _remove(path)
    _live.clear()
    previous = _previous.get(signum, signal.SIG_DFL)
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # the default action: die of the same signal
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _keep(path: str) -> None:
    """Track a copy; the first one installs the handlers (main thread only: Python allows no
    other; elsewhere the ``finally`` removes it)."""
    with _lock:
        _live.add(path)
        if _previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in _SIGNALS:
            try:
                previous = signal.signal(sig, _on_signal)
            except (ValueError, OSError):  # pragma: no cover - not allowed here
                continue
            _previous[sig] = signal.SIG_DFL if previous is None else previous


def _drop(path: str) -> None:
    """Remove a copy; the last one puts the handlers back (unless someone replaced ours)."""
    _remove(path)
    with _lock:
        _live.discard(path)
        if _live or not _previous or threading.current_thread() is not threading.main_thread():
            return
        for sig, previous in _previous.items():
            if signal.getsignal(sig) is _on_signal:
                signal.signal(sig, previous)
        _previous.clear()


def _module_of(filename: str) -> types.ModuleType | None:
    """The imported module whose file ``filename`` is (its package decides relative imports)."""
    want = os.path.abspath(filename)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.abspath(path) == want:
            return module
    return None


class patched_module:  # a context manager used like a function
    """The patched text imported as a fresh module from a hidden copy beside the original."""

    def __init__(self, original: str, text: str | bytes) -> None:
        self.original = original
        # The file's bytes as fix writes them (its encoding, BOM, line endings); a str is UTF-8.
        self.data = text if isinstance(text, bytes) else text.encode("utf-8")
        self.module: types.ModuleType | None = None
        self.path = ""
        self._kept: str = ""
        self._registered = ""  # the name it is imported under in sys.modules

    def _copy(self) -> Path:
        """The copy's path: beside the original (its siblings and data files found as the
        original finds them), else in a temporary folder when that folder is not writable."""
        original = Path(os.path.abspath(self.original))
        name = f".{original.stem}.dynscope-fix-{secrets.token_hex(4)}.py"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        path = original.with_name(name)
        self._kept = str(path)
        _keep(self._kept)
        try:
            fd = os.open(path, flags, 0o600)  # no wider than the user's own file needs
        except OSError:
            _drop(self._kept)
            folder = tempfile.mkdtemp(prefix="dynscope-fix-")
            self._kept = folder
            _keep(folder)
            path = Path(folder) / original.name
            fd = os.open(path, flags, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.data)
        return path

    def __enter__(self) -> types.ModuleType:
        try:
            path = self._copy()
            self.path = str(path)
            original = self._original_module()
            package = original.__spec__.parent if original is not None and original.__spec__ is not None else ""
            leaf = f"_dynscope_fix_{next(_numbers)}_{Path(self.original).stem}"
            name = f"{package}.{leaf}" if package else leaf
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None:  # pragma: no cover - a .py path always has one
                raise PatchedImportError(f"cannot import the patched copy of {self.original}")
            module = importlib.util.module_from_spec(spec)
            # Compiled here, not by the import system: no __pycache__ is left in the user's folder.
            code = compile(self.data, str(path), "exec", dont_inherit=True)
            self._run(module, code)
        except BaseException:
            self.__exit__()
            raise
        return module

    def _original_module(self) -> types.ModuleType | None:
        return _module_of(self.original)

    def _run(self, module: types.ModuleType, code: types.CodeType) -> None:
        folder = str(Path(self.original).resolve().parent)
        # Its siblings (helpers it imports) are found where the original lives.
        sys.path.insert(0, folder)
        sys.modules[module.__name__] = module
        self.module, self._registered = module, module.__name__
        original = self._original_module()
        if original is not None and original.__name__ != "__main__":
            # Named as the original while it runs: ``logging.getLogger(__name__)`` is then the
            # user's own logger (its level, its handlers), and what it logs reads as theirs.
            # A script's ``__main__`` is not: its ``if __name__ == "__main__"`` block would run.
            module.__name__ = original.__name__
        elif original is not None:
            # A script's top level is the program (it trains, it calls fix): only its
            # definitions run, over its names as they stand.
            code = definitions(self.data, code.co_filename)
            module.__dict__.update(script_names(original, code))
        try:
            exec(code, module.__dict__)  # the user's own module, run as an import runs it
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # SystemExit too: the copy failed to import, fix goes on
            what = (f"it called sys.exit({err.code!r})" if isinstance(err, SystemExit)
                    else f"{type(err).__name__}: {str(err)[:200]}")
            raise PatchedImportError(what) from err
        finally:
            if folder in sys.path:
                sys.path.remove(folder)

    def __exit__(self, *exc: object) -> None:
        if self.module is not None:
            sys.modules.pop(self._registered, None)
        if self._kept:
            _drop(self._kept)
            self._kept = ""


def defined_in(obj: Any, filename: str) -> bool:
    """Whether a function, or a class's own functions, come from ``filename``."""
    code = getattr(obj, "__code__", None)
    if code is not None:
        return _same_file(code.co_filename, filename)
    if isinstance(obj, type):
        return any(defined_in(v, filename) for v in vars(obj).values() if isinstance(v, types.FunctionType))
    return False


def _lookup(module: types.ModuleType, qualname: str) -> Any:
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def _own(value: Any) -> Any:
    """A class attribute's function (a staticmethod's or classmethod's too)."""
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def _members(module: types.ModuleType) -> Iterator[Any]:
    """Every function and class the module holds: its names, and its classes' attributes."""
    seen: set[int] = set()
    stack: list[Any] = list(vars(module).values())
    while stack:
        value = _own(stack.pop())
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, types.FunctionType):
            yield value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            yield value
            stack += list(vars(value).values())


def _lines_of(cls: type, filename: str, where: Callable[[int], int | None]) -> dict[str, int | None]:
    """The class's own methods from ``filename``: name -> the line of their ``def`` (mapped). A
    method wrapped since (torch.optim.Optimizer wraps its subclass's ``step`` in a profiling
    hook when the first instance is made) is read as the ``def`` it wraps."""
    out = {}
    for name, value in vars(cls).items():
        fn = _unwrapped(_own(value))
        if isinstance(fn, types.FunctionType) and _same_file(fn.__code__.co_filename, filename):
            out[name] = where(fn.__code__.co_firstlineno)
    return out


def _same_code(module: types.ModuleType) -> Callable[[Any, str, int | None], bool]:
    path = module.__file__ or ""

    def same(fn: Any, name: str, line: int | None) -> bool:
        return (isinstance(fn, types.FunctionType) and fn.__code__.co_filename == path
                and fn.__code__.co_name == name and fn.__code__.co_firstlineno == line)

    return same


def _unwrapped(fn: Any) -> Any:
    """The function a decorator wrapped (``__wrapped__``, followed to the end), or ``fn``."""
    try:
        return inspect.unwrap(fn) if isinstance(fn, types.FunctionType) else fn
    except ValueError:  # a cycle of __wrapped__
        return fn


def _function_in(module: types.ModuleType, fn: types.FunctionType,
                 where: Callable[[int], int | None]) -> tuple[Any, str]:
    """The patched copy of ``fn``: the function whose code comes from the same ``def`` (a name
    bound twice in one file names two definitions; the user's object names one)."""
    # A decorated function (``@torch.no_grad()``, ``functools.wraps``): its def is the wrapped
    # one's, and the patched copy is the name the patched file binds, decorated the same way.
    code = _unwrapped(fn).__code__
    line = where(code.co_firstlineno)
    same = _same_code(module)
    named = _lookup(module, fn.__qualname__)
    if same(_unwrapped(named), code.co_name, line):
        return named, ""
    found = [f for f in _members(module) if same(_unwrapped(f), code.co_name, line)]
    if found:
        return found[0], ""
    return None, (f"{fn.__qualname__} (the def at line {code.co_firstlineno}) is not the one the name "
                  f"{fn.__qualname__!r} holds after the file runs, and no other name holds it: its patched copy "
                  "cannot be run (bind it to a name of its own to verify it)")


def _class_in(module: types.ModuleType, cls: type, filename: str,
              where: Callable[[int], int | None]) -> tuple[Any, str]:
    """The patched copy of ``cls``: the class whose methods come from the same lines."""
    want = _lines_of(cls, filename, where)
    path = module.__file__ or ""

    def same(c: Any) -> bool:
        # every method of the class from the same lines; one the patch added (a static method
        # that runs an unrolled recurrence) is no difference
        if not (isinstance(c, type) and c.__qualname__ == cls.__qualname__):
            return False
        now = _lines_of(c, path, lambda n: n)
        return all(now.get(name, -1) == line for name, line in want.items())

    named = _lookup(module, cls.__qualname__)
    if same(named):
        return named, ""
    found = [c for c in _members(module) if same(c)]
    if found:
        return found[0], ""
    return None, (f"class {cls.__qualname__} of the model is not the one the name {cls.__qualname__!r} holds after "
                  f"{Path(filename).name} runs, and no other name holds it: its patched copy cannot be run")


def _identity(line: int) -> int | None:
    return line


def counterpart(obj: Any, filename: str, module: types.ModuleType,
                where: Callable[[int], int | None] = _identity) -> tuple[Any, str]:
    """``obj`` as the patched module defines it (a function, or a deep copy of a module whose
    classes from ``filename`` are the patched ones); (None, why) when it cannot be.

    Each is found by its code: ``where`` maps a line of the original file to the patched one
    (the line of a ``def`` after a rewrite above it)."""
    if isinstance(obj, torch.nn.Module):
        swapped = deep_copy(obj)
        # Each module, and the user's plain objects it holds (a scheduler, a config object).
        swaps, why = _swap_classes(_swappable(swapped), filename, module, where)
        if why:
            return None, why
        if not swaps:
            # The break is in a helper of another file of the user's: the model's classes
            # call the patched helper instead (their own code unchanged).
            return _calling_patched(obj, filename, module, where)
        _held_functions(swapped, filename, module, where)
        _held_enums(swapped, filename, module)
        # The model holds objects of the file's classes (a meter) and its own classes, of another
        # file, call the file's functions (a metric helper): both are the patched file's.
        rebinder = _rebinder_for(filename, module, where)
        if rebinder is not None:
            _rebound(swapped, rebinder)
        return swapped, ""
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.nn.Module):
        owner, why = counterpart(obj.__self__, filename, module, where)
        return (getattr(owner, obj.__name__), "") if owner is not None else (None, why)
    if isinstance(obj, types.MethodType) and _plain(obj.__self__):
        # A method of a plain object of the user's (an mmdet-style assigner, a sampler): a
        # deep copy of the object, its class and its plain parts' swapped for the patched ones.
        owner = deep_copy(obj.__self__)
        swaps, why = _swap_classes(_swappable(owner), filename, module, where)
        if why:
            return None, why
        if not swaps:
            return None, (f"the {type(owner).__name__} whose method is compiled is not of a class in "
                          f"{Path(filename).name}: its patched copy cannot be called")
        _held_enums(owner, filename, module)
        return getattr(owner, obj.__name__), ""
    if isinstance(obj, types.FunctionType):
        if not defined_in(_unwrapped(obj), filename):
            return _calling_patched(obj, filename, module, where)
        found, why = (_nested_in(module, obj, filename, where) if "<locals>" in obj.__qualname__
                      else _function_in(module, obj, where))
        if found is not None:
            why = _state_of(obj, module, filename, where)
        return (found, "") if not why else (None, why)
    if isinstance(obj, functools.partial):  # the partial's function patched, over copies of its arguments
        func, why = counterpart(obj.func, filename, module, where)
        if func is None:
            return None, why
        args, keywords = deep_copy((obj.args, obj.keywords))
        return functools.partial(func, *args, **keywords), ""
    if _plain(obj) and callable(obj):
        # A plain object of the user's that is called (a generator or sampler with __call__):
        # a deep copy of it, its class and its plain parts' swapped for the patched ones.
        called = deep_copy(obj)
        swaps, why = _swap_classes(_swappable(called), filename, module, where)
        if why:
            return None, why
        if not swaps:
            return None, (f"the {type(called).__name__} called is not of a class in {Path(filename).name}: "
                          "its patched copy cannot be called")
        _held_enums(called, filename, module)
        return called, ""
    return None, f"a {type(obj).__name__} is neither a function nor a torch.nn.Module"


def _state_of(fn: types.FunctionType, module: types.ModuleType, filename: str,
              where: Callable[[int], int | None]) -> str:
    """The patched module's globals that ``fn`` reads as state (its model, optimizer, history)
    set to copies of the user's, as they stand: the patched module ran its file again (a model
    made anew, a script's the user's own objects), and each run of the patched copy must start
    where the unpatched one does. Objects of the file's classes among them get the patched
    classes. Returns why it could not be done ("" when it was)."""
    names = [n for n in global_state(fn) if n in vars(module)]
    values = deep_copy([fn.__globals__[n] for n in names])
    _, why = _swap_classes([p for v in values for p in _swappable(v)], filename, module, where)
    vars(module).update(zip(names, values, strict=True))
    return why


def _nested_in(module: types.ModuleType, fn: types.FunctionType, filename: str,
               where: Callable[[int], int | None], depth: int = 0, *, copy_cells: bool = True) -> tuple[Any, str]:
    """The patched copy of a function defined inside another (a train step a builder returns,
    closing over its model): the patched file's code from the same ``def``, over copies of
    the values it closes over whose classes from ``filename`` are the patched ones, reading
    the patched file's globals. ``copy_cells`` False: over the values themselves (a function
    a copied model holds, whose closure already reads the copy's own modules)."""
    code = fn.__code__
    line = where(code.co_firstlineno)
    path = module.__file__ or ""
    found = [c for c in _codes(module) if c.co_filename == path and c.co_name == code.co_name
             and c.co_firstlineno == line]
    if len(found) != 1:
        return None, (f"{fn.__qualname__} is defined inside another function, and the patched copy of "
                      f"{Path(filename).name} has {'no' if not found else 'more than one'} def of it at its line")
    if found[0].co_freevars != code.co_freevars:
        return None, f"the patch changes the names {fn.__qualname__} closes over: its patched copy cannot be made"
    contents = deep_copy(closure_contents(fn), {id(EMPTY): EMPTY}) if copy_cells else closure_contents(fn)
    _, why = _swap_classes([p for v in contents if v is not EMPTY for p in _swappable(v)], filename, module, where)
    if why:
        return None, why
    for i, value in enumerate(contents):  # a function of the same file it closes over: its patched copy
        if isinstance(value, types.FunctionType) and defined_in(_unwrapped(value), filename):
            if "<locals>" not in value.__qualname__:
                contents[i] = _function_in(module, value, where)[0] or value
            elif depth < _DEPTH:  # made inside another too (a wrapper's closure over a guidance function)
                contents[i] = _nested_in(module, value, filename, where, depth + 1, copy_cells=copy_cells)[0] or value
    return with_closure(fn, found[0], vars(module), contents), ""


def _codes(module: types.ModuleType) -> Iterator[types.CodeType]:
    """Every code object of the module's functions and methods, and of the functions
    defined inside them, at any depth."""
    stack = [f.__code__ for f in _members(module) if isinstance(f, types.FunctionType)]
    while stack:
        code = stack.pop()
        yield code
        stack += [c for c in code.co_consts if isinstance(c, types.CodeType)]


def inputs_swapped(calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
                   modules: Sequence[tuple[str, types.ModuleType, Callable[[int], int | None]]],
                   ) -> tuple[list[tuple[tuple[Any, ...], dict[str, Any]]], set[str], str]:
    """Copies of the inputs whose objects of the patched files' classes (a KV cache or a
    statistics collector handed to the program, a module passed in) are of the patched copies'
    classes, so a patch of their code runs, and the files whose classes they are; the inputs
    themselves when none is; why not when a class cannot be found in its patched copy. The
    user's inputs are not touched."""
    if not any(defined_in(type(p), f) for args, kwargs in calls for a in (*args, *kwargs.values())
               for p in _swappable(a) for f, _, _ in modules):
        return calls, set(), ""  # none is: the inputs are not copied for nothing
    fresh = _fresh(calls)
    parts = [p for args, kwargs in fresh for a in (*args, *kwargs.values()) for p in _swappable(a)]
    files: set[str] = set()
    for filename, module, where in modules:
        classes, why = _swap_classes(parts, filename, module, where)
        if why:
            return calls, set(), why
        if classes:
            files.add(filename)
    return (fresh if files else calls), files, ""


def _swap_classes(parts: list[Any], filename: str, module: types.ModuleType,
                  where: Callable[[int], int | None]) -> tuple[dict[type, Any], str]:
    """Each of ``parts`` (in a deep copy) whose class ``filename`` defines given the patched
    class instead: the classes swapped, or why one could not be."""
    classes: dict[type, Any] = {}
    for part in parts:
        cls = type(part)
        if cls not in classes and defined_in(cls, filename) and "<locals>" not in cls.__qualname__:
            new, why = _class_in(module, cls, filename, where)
            if new is None:
                return classes, why
            classes[cls] = new
        if cls in classes:
            part.__class__ = classes[cls]
            why = _init_ran_again(part, cls, classes[cls], module)
            if why:
                return classes, why
    return classes, ""


def _init_ran_again(part: Any, old: type, new: type, module: types.ModuleType) -> str:
    """Run on ``part`` (a copy, made by the original class's ``__init__``) the statements a
    patch added at the end of its class's ``__init__`` (``self.lstm_held = (...)``): the copy then
    holds what one made by the patched class would. Only ``self.<name> = ...`` statements
    appended to the same body count; why they could not run, or ""."""
    added = _appended_to_init(old, new)
    for stmt in added:
        target = stmt.targets[0]
        if not isinstance(target, ast.Attribute) or target.attr in vars(part):
            continue
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), module.__file__ or "<patched>", "exec"),
                 vars(module), {"self": part})
        except Exception as err:  # noqa: BLE001 - the patched program's own error: not verified, said why
            return (f"the statement the patch adds to {old.__qualname__}.__init__ raised on a copy of your model "
                    f"({type(err).__name__}: {err})")
    return ""


@functools.lru_cache(maxsize=64)
def _appended_to_init(old: type, new: type) -> tuple[ast.Assign, ...]:
    """The ``self.<name> = ...`` statements the patched class's own ``__init__`` ends with that the
    original's does not (its body otherwise the same); () when there are none or it differs otherwise."""
    bodies = []
    for cls in (old, new):
        init = vars(cls).get("__init__")
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))  # type: ignore[arg-type]
        except (OSError, TypeError, SyntaxError):
            return ()
        fn = tree.body[0]
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return ()
        bodies.append(fn.body)
    before, after = bodies
    kept = len(before)
    if len(after) <= kept or [ast.dump(s) for s in after[:kept]] != [ast.dump(s) for s in before]:
        return ()
    added = tuple(s for s in after[kept:] if isinstance(s, ast.Assign) and len(s.targets) == 1
                  and isinstance(s.targets[0], ast.Attribute) and isinstance(s.targets[0].value, ast.Name)
                  and s.targets[0].value.id == "self")
    return added if len(added) == len(after) - kept else ()


def _held_functions(model: torch.nn.Module, filename: str, module: types.ModuleType,
                    where: Callable[[int], int | None]) -> None:
    """The functions of ``filename`` the (copied) model's modules, and the plain objects they
    hold, keep as attributes made their patched copies: a schedule a factory of the file returns
    (consistency models' ``self.ema_scale_fn = create_ema_and_scales_fn(...)``, a closure), a
    solver's ``self.model = lambda x, t: model_fn(...)``, a helper picked in ``__init__``; the
    functions of the file they close over too. A deep copy of the model holds the same function
    objects as the user's."""
    for sub in _swappable(model):  # its modules and the plain objects they hold (a solver's model function)
        for key, value in list(vars(sub).items()):
            if not (isinstance(value, types.FunctionType) and defined_in(_unwrapped(value), filename)):
                continue
            nested = "<locals>" in value.__qualname__
            new, _ = (_nested_in(module, value, filename, where, copy_cells=False) if nested
                      else _function_in(module, value, where))
            if new is not None:
                vars(sub)[key] = new


def _held_enums(model: Any, filename: str, module: types.ModuleType) -> None:
    """The members of ``filename``'s enums the (copied) model's modules and plain objects hold
    as attributes (a diffusion's ``self.model_mean_type = ModelMeanType.EPSILON``) made the
    patched file's members of the same name: its code compares them with its own enum's members
    (``self.model_mean_type == ModelMeanType.EPSILON``), which an original member never equals."""
    for part in _swappable(model):
        for key, value in list(vars(part).items()):
            # an enum has no functions of its own to tell its file by: its module's file tells it
            home = sys.modules.get(type(value).__module__) if isinstance(value, enum.Enum) else None
            if home is None or not _same_file(getattr(home, "__file__", None) or "", filename):
                continue
            new_cls = _lookup(module, type(value).__qualname__)
            member = getattr(new_cls, "__members__", {}).get(value.name) if isinstance(new_cls, type) else None
            if member is not None:
                vars(part)[key] = member


def _plain(item: Any) -> bool:
    """``item`` is an object of a plain class of the user's: not a module, tensor, builtin,
    class, function or Python module."""
    return (not isinstance(item, (torch.nn.Module, torch.Tensor, type)) and type(item).__module__ != "builtins"
            and hasattr(item, "__dict__")
            and not isinstance(item, types.FunctionType | types.MethodType | types.ModuleType))


def _swappable(value: Any) -> list[Any]:
    """The objects of a (copied) value whose class a patched file may replace: a module's
    every submodule and the plain objects of the user's each holds; a plain object of the
    user's and its own; nothing for any other value."""
    if isinstance(value, torch.nn.Module):
        return [p for sub in _every_module(value) for p in (sub, *_plain_parts(sub))]
    return [value, *_plain_parts(value)] if _plain(value) else []


def _held(value: Any) -> Iterator[Any]:
    """The items of an attribute's value: a list's, tuple's or dict's own, or the value."""
    if isinstance(value, dict):
        yield from value.values()
    elif isinstance(value, (list, tuple)):
        yield from value
    else:
        yield value


def _every_module(model: torch.nn.Module) -> list[torch.nn.Module]:
    """``model.modules()`` and the modules its modules hold in a plain list, tuple or dict
    attribute (BiSeNet's ``self.criteria_aux = [OhemCELoss(0.7) for _ in range(2)]``: no
    ``nn.ModuleList``, so not registered, yet called in ``forward``), and theirs."""
    seen: dict[int, torch.nn.Module] = {}
    todo = [model]
    while todo:
        module = todo.pop()
        if id(module) in seen:
            continue
        seen[id(module)] = module
        todo += [*module.children()][::-1]
        for value in vars(module).values():
            if isinstance(value, (list, tuple, dict)):
                todo += [m for m in _held(value) if isinstance(m, torch.nn.Module)][::-1]
    return list(seen.values())


def _plain_parts(owner: Any) -> list[Any]:
    """The objects of the user's own plain classes a module (or plain object) holds in its
    attributes (directly or in a list, tuple or dict of them), whose methods it calls (a
    diffusers-style scheduler). In a deep copy, so their class can be swapped."""
    found = []
    for value in vars(owner).values():
        for item in _held(value):
            if _plain(item):
                found.append(item)
    return found


# -- a helper of another file patched: the model calls the patched copy -----------------------

_DEPTH = 4  # helpers calling helpers: as deep as a project's own layers go


def _calling_patched(obj: Any, filename: str, module: types.ModuleType,
                     where: Callable[[int], int | None]) -> tuple[Any, str]:
    """``obj`` (a model or function of another file) calling the patched copies of
    ``filename``'s functions and classes: every function of the user's on the way (the model's
    methods, helpers calling helpers) that reads one of them as a global is rebuilt with the
    patched one in its globals (a copy of them: the user's modules are not touched)."""
    rebinder = _rebinder_for(filename, module, where)
    if rebinder is None:
        return None, f"{Path(filename).name} is not imported by the program: its patched copy cannot be called"
    if isinstance(obj, torch.nn.Module):
        swapped = deep_copy(obj)
        if not _rebound(swapped, rebinder):
            return None, (f"no code of the model reaches the functions of {Path(filename).name} by name: "
                          "the patched copy cannot be called in their place")
        return swapped, ""
    if isinstance(obj, types.FunctionType):
        new_fn = rebinder.function(obj)
        if new_fn is obj:
            return None, (f"{obj.__qualname__} does not reach the functions of {Path(filename).name} by name: "
                          "the patched copy cannot be called in their place")
        return new_fn, ""
    return None, f"a {type(obj).__name__} is neither a function nor a torch.nn.Module"


def _rebinder_for(filename: str, module: types.ModuleType, where: Callable[[int], int | None]) -> _Rebinder | None:
    """A rebinder from ``filename``'s functions and classes to their patched copies in
    ``module``; None when the program never imported the file."""
    original = _module_of(filename)
    if original is None:
        return None
    swaps: dict[int, Any] = {id(original): module}
    for value in _members(original):
        if isinstance(value, types.FunctionType) and _same_file(value.__code__.co_filename, filename):
            new, _ = _function_in(module, value, where)
        elif isinstance(value, type) and defined_in(value, filename):
            new, _ = _class_in(module, value, filename, where)
        else:
            continue
        if new is not None:
            swaps[id(value)] = new
    return _Rebinder(swaps)


def _rebound(swapped: torch.nn.Module, rebinder: _Rebinder) -> bool:
    """Each module of ``swapped`` (a copy) made to call the patched functions: its class a
    subclass whose methods read them, the helpers it holds as attributes the patched ones.
    Whether anything changed."""
    for sub in _every_module(swapped):
        new_cls = rebinder.cls(type(sub))
        if new_cls is not type(sub):
            sub.__class__ = new_cls
        # A helper held as an attribute (``self.pool = global_mean_pool`` in __init__, the
        # way PyG's and OGB's models pick one): the copy holds the patched one.
        for key, value in list(vars(sub).items()):
            new = rebinder.function(value) if isinstance(value, types.FunctionType) else value
            if new is not value:
                vars(sub)[key] = new
                rebinder.changed = True
    return rebinder.changed


class _Rebinder:
    """Functions and classes of the user's files rebuilt to read patched globals."""

    def __init__(self, swaps: dict[int, Any]) -> None:
        self.swaps = swaps
        self.done: dict[int, Any] = {}
        self.changed = False

    def _user(self, fn: types.FunctionType) -> bool:
        name = fn.__code__.co_filename
        return is_user_file(name) and not library_of(name)  # never an installed package's code

    def function(self, fn: types.FunctionType, depth: int = 0) -> types.FunctionType:
        if id(fn) in self.swaps:
            return self.swaps[id(fn)]
        if id(fn) in self.done:
            return self.done[id(fn)]
        self.done[id(fn)] = fn  # a recursive helper reads itself: not rebuilt for that
        if depth > _DEPTH or not self._user(fn):
            return fn
        names = set(fn.__code__.co_names)
        for const in fn.__code__.co_consts:  # names read by the function's own comprehensions/lambdas
            if isinstance(const, types.CodeType):
                names |= set(const.co_names)
        new_globals: dict[str, Any] | None = None
        for name in names:
            value = fn.__globals__.get(name)
            if value is None:
                continue
            new = self.swaps.get(id(value))
            if new is None and isinstance(value, types.FunctionType):
                rebuilt = self.function(value, depth + 1)
                new = rebuilt if rebuilt is not value else None
            if new is not None:
                new_globals = new_globals if new_globals is not None else dict(fn.__globals__)
                new_globals[name] = new
        if new_globals is None:
            return fn
        out = remade(fn, fn.__code__, new_globals, fn.__closure__)
        self.done[id(fn)] = out
        self.changed = True
        return out

    def cls(self, cls: type) -> type:
        """A subclass of ``cls`` whose own methods read the patched globals (``cls`` itself when
        none reads them): a subclass, so ``isinstance`` and ``super()`` hold as before."""
        if id(cls) in self.done:
            return self.done[id(cls)]
        self.done[id(cls)] = cls
        methods: dict[str, Any] = {}
        for name, value in vars(cls).items():
            fn = _own(value)
            if isinstance(fn, types.FunctionType):
                new = self.function(fn)
                if new is not fn:
                    methods[name] = (staticmethod(new) if isinstance(value, staticmethod)
                                     else classmethod(new) if isinstance(value, classmethod) else new)
        if not methods:
            return cls
        out = type(cls.__name__, (cls,), {**methods, "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        self.done[id(cls)] = out
        return out


def _call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Every run starts from one seed of every random stream a program may draw from: torch's,
    # Python's (random.random() for a coin) and numpy's global one when numpy is loaded.
    torch.manual_seed(SEED)
    random.seed(SEED)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(SEED)
    return fn(*args, **kwargs)


@contextlib.contextmanager
def random_streams_kept() -> Iterator[None]:
    """Put torch's, Python's and numpy's global random states back after the block: verifying
    reruns the user's program from a fixed seed, and the user's own stream must go on as if
    fix had not run."""
    state = torch.random.get_rng_state()
    py = random.getstate()
    numpy = sys.modules.get("numpy")
    np_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.random.set_rng_state(state)
        random.setstate(py)
        if numpy is not None and np_state is not None:
            numpy.random.set_state(np_state)


def _grads(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], outputs: list[Any]) -> dict[str, torch.Tensor]:
    """Gradients of the sum of every floating output: of the model's parameters, and of the
    inputs that require grad."""
    floats = [t for out in outputs for t in tensors(out) if t.requires_grad and t.is_floating_point()]
    if not floats:
        return {}
    torch.stack([t.float().sum() for t in floats]).sum().backward()
    out: dict[str, torch.Tensor] = {}
    for who, model in _models(obj):
        prefix = "param " if who == "model" else f"{who} param "
        out.update({f"{prefix}{n}": p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    for i, (args, kwargs) in enumerate(calls):
        for j, t in enumerate(tensors([args, kwargs])):
            if t.grad is not None:
                out[f"call {i} input {j}"] = t.grad.detach().clone()
    return out


def _fresh(calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[tuple[tuple[Any, ...], dict[str, Any]]]:
    # Inputs that require grad stay leaves that require grad in the copy.
    return deep_copy(calls)


def run_eager(obj: Any, calls: list[tuple[tuple[Any, ...], dict[str, Any]]], traced: Sequence[str] = ()) -> Run:
    """The unpatched program run eagerly on copies of the model and inputs; the lines of the
    ``traced`` files that ran are recorded."""
    model = copied(obj)
    fresh = _fresh(calls)
    with listening() as said, _LinesRun(traced) as ran:
        outputs = [_call(model, a, k) for a, k in fresh]
    return Run(outputs, _grads(model, fresh, outputs), _weights(model, fresh), tuple(said.done()), _state(model, fresh),
               dict(ran.seen))


class _LinesRun:
    """The lines of some files that run in a block, by a ``sys.settrace`` tracer that looks
    only into frames of those files (every other frame costs one dictionary lookup); the
    tracer that was installed before (a debugger, coverage) is put back after."""

    def __init__(self, files: Sequence[str]) -> None:
        self.wanted = {os.path.realpath(f) for f in files}
        self.seen: dict[tuple[str, int], int] = {}
        self._known: dict[str, str] = {}  # a code object's filename -> its real path ("" when not wanted)
        self._before: Any = None

    def __enter__(self) -> _LinesRun:
        if self.wanted:
            self._before = sys.gettrace()
            sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.wanted:
            sys.settrace(self._before)

    def _call(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        name = frame.f_code.co_filename
        path = self._known.get(name)
        if path is None:
            real = os.path.realpath(name)
            path = self._known[name] = real if real in self.wanted else ""
        if not path:
            return None
        seen = self.seen

        def line(frame: types.FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                key = (path, frame.f_lineno)
                seen[key] = seen.get(key, 0) + 1
            return line

        return line


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
        with listening() as said:
            outputs = [_call(compiled, a, k) for a, k in fresh]
    return Run(outputs, _grads(model, fresh, outputs), _weights(model, fresh), tuple(said.done()), _state(model, fresh))


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
        elif _numpy(x) or _numpy(y):
            if not _same_arrays(x, y):
                return False
        elif isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
            if type(x) is not type(y) or not math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-6):
                return False
        elif x != y:
            return False
    return True


def _numpy(value: Any) -> bool:
    """A numpy array or scalar (``np.float32``): compared by value within tolerance, as tensors
    are (under torch.compile Dynamo computes numpy's ops with torch's, whose last bits differ)."""
    return type(value).__module__ == "numpy"


def _same_arrays(x: Any, y: Any) -> bool:
    """Two numpy values of one shape and dtype (a scalar and an array of no dimensions alike)
    whose values agree within the numerics check's tolerance (NaN where both are NaN)."""
    import numpy as np

    if not (_numpy(x) and _numpy(y)):
        return False
    a, b = np.asarray(x), np.asarray(y)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind not in "fc":
        return bool(np.array_equal(a, b))
    return bool(np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True))


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
    return Evidence(ok, grads, max_abs, differs(list(expected.said), list(got.said)),
                    *_state_compared(expected.state, got.state))


def _state_compared(expected: dict[str, Any] | None, got: dict[str, Any] | None) -> tuple[str, tuple[str, ...]]:
    """Which plain attribute differs after the calls, in words ("" when none does), and the
    attributes that hold detached 0-dim tensors where the unpatched run kept Python floats of
    the same values (see :func:`_float_kept_as_tensor`)."""
    if expected is None or got is None:
        return "", ()
    as_tensors = []
    held: set[str] = getattr(expected, "held", set())  # the attributes of the plain objects the modules hold
    for key in sorted(expected.keys() | got.keys()):
        if key not in expected or key not in got:
            return f"{key} is set only in the {'patched' if key in got else 'unpatched'} run", ()
        a, b = expected[key], got[key]
        if key in held and _floats_kept_as_tensors(a, b):
            as_tensors.append(key)
        elif not _same_leaves(a, b) or not compare_outputs(a, b)[2]:
            return (f"{key} holds {_kind(a)} after the unpatched eager run, {_kind(b)} after the patched compiled run",
                    ())
    return "", tuple(as_tensors)


def _floats_kept_as_tensors(a: Any, b: Any, depth: int = 0) -> bool:
    """``b`` is ``a`` with some of its floats, and only floats, held as detached 0-dim floating
    tensors of the same values (:func:`_float_kept_as_tensor`), the rest equal: what a plain
    object the model holds keeps (a meter's values, an event writer's rows ``(tag, value,
    step)``; tensorboard's and wandb's writers take a tensor where they take a float). An int
    turned tensor (a count) is still a difference, and so is anything the module keeps itself."""
    if _float_kept_as_tensor(a, b):
        return True
    if depth > 3 or type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        pairs = list(zip(a, b, strict=False)) if len(a) == len(b) else None
    elif isinstance(a, dict):
        pairs = [(a[k], b[k]) for k in a] if a.keys() == b.keys() else None
    else:
        return False
    return pairs is not None and any(_floats_in(x, y) for x, y in pairs) and all(
        _floats_kept_as_tensors(x, y, depth + 1) or (_same_leaves(x, y) and compare_outputs(x, y)[2]) for x, y in pairs)


def _floats_in(a: Any, b: Any) -> bool:
    """Some float of ``a`` is a tensor in ``b`` (else the two are compared as they are)."""
    return _floats_kept_as_tensors(a, b) if isinstance(a, (float, list, tuple, dict)) else False


def _float_kept_as_tensor(a: Any, b: Any) -> bool:
    """``b`` is a detached 0-dim floating tensor where ``a`` is a Python float of the same value
    within the numerics check's tolerance: a running value of a plain object the model holds (a
    meter's sum and average). Not an int (a count, which code reads as a size or an index), nor a
    module's own attribute (a running loss the module formats for a progress bar: under compile
    that reads the value back)."""
    if not (type(a) is float and isinstance(b, torch.Tensor)):
        return False
    if b.dim() != 0 or b.requires_grad or not b.is_floating_point():
        return False
    value = float(b)
    return value == a or (value != value and a != a) or abs(value - a) <= 1e-6 + 1e-5 * abs(a)


def _kind(value: Any) -> str:
    leaves = _leaves(value)
    kinds = sorted({"tensors" if isinstance(v, torch.Tensor) else type(v).__name__ for v in leaves})
    shape = f"a {type(value).__name__} of {len(value)}" if isinstance(value, (list, tuple, dict)) else type(value).__name__
    return f"{shape} ({', '.join(kinds)})" if isinstance(value, (list, tuple, dict)) and kinds else shape
