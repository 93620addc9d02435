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
import weakref
from typing import TYPE_CHECKING, Any

import torch

from dynscope._capture.resources import seed_resources
from dynscope._errors import InputError
from dynscope._torch.registry import is_user_file

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["EMPTY", "closure_contents", "deep_copy"]

EMPTY = object()  # an unfilled cell's content, in what closure_contents gives


def deep_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy(value, memo)``, the tensors that are not graph leaves in it copied as
    detached clones (each once: objects that share one share its copy), the objects Python's
    own deepcopy gets wrong or refuses copied field by field (see :func:`_shells`), what holds
    an OS resource (a lock, a file, a generator) replaced as :mod:`.resources` says, and the
    user's own functions it holds rebound to the copies (see :class:`_Rebinder`). Raises
    :class:`InputError` naming what it was given when it still cannot copy it."""
    seeded = dict(memo or {})
    try:
        _shells(value, seeded)
        out = copy.deepcopy(value, seeded)
    except Exception as err:  # what it refused is seeded, then one retry; else said plainly
        seeded = dict(memo or {})
        for t in _non_leaves(value):
            seeded[id(t)] = t.detach().clone().requires_grad_(t.requires_grad)
        if not seed_resources(value, seeded) and "graph leaves" not in str(err):
            raise _uncopyable(value, err) from err
        try:
            _shells(value, seeded)
            out = copy.deepcopy(value, seeded)
        except Exception as again:  # said as what it is: the object cannot be copied
            raise _uncopyable(value, again) from again
    _Rebinder(seeded).walk(out)
    return out


def _needs_shell(item: Any) -> bool:
    """Whether Python's deepcopy gets ``item`` wrong or refuses it: an object that is its own
    ``__dict__`` (``class AttrDict(dict)`` whose ``__init__`` sets ``self.__dict__ = self``:
    deepcopy gives a copy whose attributes are missing), or one whose ``__getattr__`` raises
    another error than AttributeError for a name it lacks (``__getattr__ = dict.__getitem__``:
    KeyError when deepcopy asks it for ``__deepcopy__``), both config classes common in
    research code; and an optimizer, whose ``__getstate__`` drops what its subclass set."""
    if isinstance(item, torch.Tensor) or item is None:
        return False
    if isinstance(item, torch.optim.Optimizer):
        # Optimizer.__getstate__ keeps defaults, state and param_groups only: a subclass's own
        # settings (LAMB's ``self.adam``, set in its __init__) would be missing from the copy.
        return True
    if isinstance(item, dict) and getattr(item, "__dict__", None) is item:
        return True
    if getattr(type(item), "__getattr__", None) is None:
        return False
    try:
        getattr(item, "__deepcopy__", None)
    except Exception:  # noqa: BLE001 - the object's own lookup raised: exactly the objects to copy here
        return True
    return False


def _shells(value: Any, memo: dict[int, Any]) -> int:
    """Copy field by field each object ``value`` reaches that :func:`_needs_shell`: each gets
    an empty instance of its class in ``memo`` first (the objects that reach one another keep
    doing so), then its items, list entries and attributes copied with the same memo (an
    object that was its own ``__dict__`` is its copy's). Returns how many were so copied."""
    found = []
    for item in _reachable(value, set()):
        if id(item) not in memo and _needs_shell(item):
            cls: Any = type(item)
            shell = cls.__new__(cls)
            memo[id(item)] = shell
            found.append((item, shell))
    for item, shell in found:
        if isinstance(item, dict):
            dict.update(shell, {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in dict.items(item)})
        elif isinstance(item, list):
            list.extend(shell, copy.deepcopy(list(item), memo))
        own = getattr(item, "__dict__", None)
        if isinstance(item, dict) and own is item:
            object.__setattr__(shell, "__dict__", shell)
        elif isinstance(own, dict):
            vars(shell).update(copy.deepcopy(own, memo))
    return len(found)


def _uncopyable(value: Any, err: BaseException) -> InputError:
    """What dynscope says when Python cannot copy what it was given."""
    return InputError(
        f"dynscope runs copies of the {type(value).__name__} it was given (so that yours is never changed), and "
        f"copy.deepcopy failed on it: {type(err).__name__}: {str(err)[:200]}. Make it copyable (a __deepcopy__, or a "
        "__getattr__ that raises AttributeError for a missing name), or pass what it holds instead")


class _Rebinder:
    """``copy.deepcopy`` copies a function as itself: a closure the copy holds (a solver's
    ``self.model = lambda x: fn(x)``, a wrapper's ``guided_fn`` over the model's own submodules)
    still reads the originals, so running the copy would run, and give gradients to, the user's
    own modules. Each function of the user's files the copy holds (in an attribute, a container,
    another such function's closure) is made again over its closure's contents copied with the
    same memo: what the copy already holds (the model's submodules) is read from the copy. A
    content that cannot be copied (a lock, a file) is kept as it was."""

    def __init__(self, memo: dict[int, Any]) -> None:
        self.memo = memo
        self.made: dict[int, types.FunctionType] = {}
        self.seen: set[int] = set()

    def walk(self, root: Any) -> None:
        for item in _reachable(root, self.seen):
            if isinstance(item, (dict, list)):  # a tuple is immutable: a function in one stays as it is
                for key, v in list(item.items() if isinstance(item, dict) else enumerate(item)):
                    if self._user_closure(v):
                        item[key] = self.function(v)

    def _user_closure(self, v: Any) -> bool:
        """A function to make again over copies: the user's own that closes over values, or any
        that closes over what was copied (an LR scheduler's wrapper of ``optimizer.step``, kept
        as the optimizer's attribute, holds a weak reference to the optimizer it wraps: the copy's
        must step the copied optimizer, not the user's)."""
        if not isinstance(v, types.FunctionType) or not v.__closure__:
            return False
        return is_user_file(v.__code__.co_filename) or any(self._copied(c) for c in closure_contents(v) if c is not EMPTY)

    def _copied(self, value: Any) -> bool:
        if isinstance(value, weakref.ref):
            value = value()
        return value is not None and self.memo.get(id(value), value) is not value

    def function(self, fn: types.FunctionType) -> types.FunctionType:
        if id(fn) in self.made:
            return self.made[id(fn)]
        cells = tuple(types.CellType() for _ in fn.__closure__ or ())
        new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
        new.__kwdefaults__, new.__qualname__ = fn.__kwdefaults__, fn.__qualname__
        new.__dict__.update(fn.__dict__)
        self.made[id(fn)] = new
        for cell, content in zip(cells, closure_contents(fn), strict=True):
            if content is not EMPTY:
                cell.cell_contents = self._content(content)
        return new

    def _content(self, value: Any) -> Any:
        if self._user_closure(value):
            return self.function(value)
        if isinstance(value, weakref.ref) and type(value) is weakref.ref and self._copied(value):
            return weakref.ref(self.memo[id(value())])
        try:
            copied = copy.deepcopy(value, self.memo)
        except Exception:  # noqa: BLE001 - a value deepcopy cannot copy (a lock, a file): read as it was
            return value
        self.walk(copied)
        return copied


def closure_contents(fn: types.FunctionType) -> list[Any]:
    """What ``fn`` closes over, cell by cell, an unfilled cell as :data:`EMPTY`."""
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            out.append(EMPTY)
    return out


def _non_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors with a history that ``value`` reaches."""
    return [t for t in _reachable(value, set()) if isinstance(t, torch.Tensor) and t.grad_fn is not None]


def _reachable(root: Any, seen: set[int]) -> Iterator[Any]:
    """``root`` and what it reaches through containers (lists, tuples, sets, dicts) and the
    attributes of objects (a module's ``__dict__``: its parameters, buffers and submodules),
    each once; functions, classes and Python modules are not entered. ``seen`` (ids) is shared
    by walks that must not visit an object twice."""
    todo = [root]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float)):
            continue
        seen.add(id(item))
        yield item
        if isinstance(item, dict):
            todo += list(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += list(item)
        elif (hasattr(item, "__dict__") and type(item).__module__ != "builtins" and not isinstance(item, torch.Tensor)
              and not isinstance(item, (type, types.ModuleType, types.FunctionType, types.MethodType))):
            todo.append(vars(item))
