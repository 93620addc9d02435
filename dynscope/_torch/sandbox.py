"""Dynamo's process state, read and put back: ``DynamoSandbox``, its state readers (code
caches, "skip" marks, cached backends, counters, stance, config, the automatic-dynamic code
state), and the backends dynscope compiles with.

Each use is feature-detected, not keyed on version strings, and says which torch it was
written against. Checked on torch 2.11, 2.13 and 2.14 (scripts/compat.sh).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import torch

from dynscope._lexicon.wording import DROPPED_REASON, is_resume_name
from dynscope._torch.logger import trace_logger
from dynscope._torch.registry import is_user_file

if TYPE_CHECKING:
    from collections.abc import Callable

# -- backends --------------------------------------------------------------------------


def lookup_backend(name: str) -> Callable[..., Any]:
    """A registered torch.compile backend by name ("eager", "inductor", "aot_eager"...)."""
    from torch._dynamo import list_backends
    from torch._dynamo import lookup_backend as _lookup

    try:
        return _lookup(name)
    except Exception as err:
        known = sorted(set(list_backends(exclude_tags=())) | {"eager", "inductor"})
        raise KeyError(f"unknown backend {name!r}; known backends: {', '.join(known)}") from err


def compile_kwargs() -> dict[str, Any]:
    """Extra torch.compile keywords that keep dynscope's compiles apart from the user's.

    torch 2.13 added ``isolate_recompiles``: our cache entries then live in their own
    region, so they neither count against the user's recompile limit nor show up as
    BACKEND_MATCH recompiles when the user compiles the same code later. Older torch
    shares one region; see docs/capture.md.
    """
    if "isolate_recompiles" in inspect.signature(torch.compile).parameters:
        return {"isolate_recompiles": True}
    return {}


# -- state a report must leave as it found it --------------------------------------------


def _seen_codes() -> list[Any]:
    """Every code object Dynamo has started to compile in this process (live ones)."""
    try:
        from torch._dynamo.convert_frame import input_codes  # torch 2.1 .. 2.14
    except ImportError:  # pragma: no cover
        return []
    out = []
    for ref in list(getattr(input_codes, "seen", ())):
        code = ref() if callable(ref) else ref
        if code is not None:
            out.append(code)
    return out


def _subject_codes(subject: Any) -> list[Any]:
    """The code objects of the modules ``subject`` (a function or an ``nn.Module``) is
    defined in: their functions and methods, nested ones included (in their parents'
    constants); the module's submodules' classes' modules too.

    Dynamo's own list of the codes it has seen (``input_codes``) can miss a code that still
    holds a "skip" mark: the list is keyed by ``id()`` with weakref callbacks, and after a
    suite's ``torch._dynamo.reset()`` calls and code objects come and go, a marked code was
    seen missing from it (tests/read/test_trace_logs.py after tests/capture/test_corpus.py and
    tests/capture/test_export.py). The program's own modules are walked too.
    """
    import sys
    import types

    if subject is None:
        return []
    owners = {getattr(subject, "__module__", None)}
    modules_of = getattr(subject, "modules", None)
    if callable(modules_of) and hasattr(subject, "parameters"):  # an nn.Module and its submodules
        owners |= {type(m).__module__ for m in modules_of()}
    else:
        owners.add(getattr(type(subject), "__module__", None))
    out: list[Any] = []
    seen: set[int] = set()

    def add(code: Any) -> None:
        if id(code) in seen:
            return
        seen.add(id(code))
        out.append(code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                add(const)

    for name in owners:
        module = sys.modules.get(name) if isinstance(name, str) else None
        filename = getattr(module, "__file__", None)
        if module is None or not filename or not is_user_file(filename):
            continue
        for value in list(vars(module).values()):
            members = list(vars(value).values()) if isinstance(value, type) else [value]
            for member in members:
                func = getattr(member, "__func__", member)  # staticmethod, classmethod
                code = getattr(func, "__code__", None)
                if isinstance(code, types.CodeType) and code.co_filename == filename:
                    add(code)
    return out


def _reset_code(code: Any) -> None:
    try:
        from torch._dynamo.eval_frame import reset_code
    except ImportError:  # pragma: no cover
        return
    reset_code(code)


def _cache_entries(code: Any) -> list[Any]:
    try:
        from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list
    except ImportError:  # pragma: no cover
        return []
    try:
        return list(_debug_get_cache_entry_list(code))
    except Exception:  # noqa: BLE001 - a code object Dynamo never saw
        return []


@lru_cache(maxsize=1)
def _dynamo_state_reader() -> Callable[[Any], bool] | None:
    """A test "does Dynamo hold per-code state for this code object?", or None if unknown.

    Dynamo stores a code object's cache entries *and* its execution strategy (the "skip"
    mark a graph break in a loop leaves) in one co_extra slot. Python can only read it
    through the C API ``_PyCode_GetExtra``; the slot number is found by giving a fresh code
    object Dynamo state and seeing which slot fills. Read-only: nothing is ever written.
    """
    import ctypes

    getter = getattr(ctypes.pythonapi, "PyUnstable_Code_GetExtra", None) or getattr(
        ctypes.pythonapi, "_PyCode_GetExtra", None
    )
    try:
        from torch._C._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy
    except ImportError:  # pragma: no cover - torch without per-code strategies
        return None
    if getter is None:  # pragma: no cover
        return None
    getter.argtypes = [ctypes.py_object, ctypes.c_ssize_t, ctypes.POINTER(ctypes.c_void_p)]
    getter.restype = ctypes.c_int

    def filled(code: Any, index: int) -> bool:
        ptr = ctypes.c_void_p()
        return getter(code, index, ctypes.byref(ptr)) == 0 and bool(ptr.value)

    def probe() -> None:  # pragma: no cover - never called, only its code is used
        pass

    code = probe.__code__
    set_code_exec_strategy(code, FrameExecStrategy(FrameAction.DEFAULT, FrameAction.DEFAULT))
    try:
        slots = [index for index in range(64) if filled(code, index)]
    finally:
        _reset_code(code)
    if len(slots) != 1:  # pragma: no cover - another PEP 523 user muddies the probe
        return None
    return lambda c: filled(c, slots[0])


def _has_dynamo_state(code: Any) -> bool:
    """True when Dynamo holds per-code state (entries or an execution strategy) for code."""
    reader = _dynamo_state_reader()
    return reader is not None and reader(code)


def _skip_code(code: Any) -> None:
    """Mark code "skip" again, as Dynamo marks a frame it gave up on (torch >= 2.5)."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:  # pragma: no cover
        return
    skip_code(code)


def _backend_chain(backend: Any) -> list[Any]:
    """The backend a cache entry holds, and the backends it wraps."""
    chain = []
    for _ in range(6):
        if backend is None:
            break
        chain.append(backend)
        # torch 2.13: _TorchCompileWrapper.compiler_fn; older: _torchdynamo_orig_backend.
        backend = getattr(backend, "compiler_fn", None) or getattr(
            backend, "_torchdynamo_orig_backend", None
        )
    return chain


class _Dropped:
    """Stands for "no object": an inert entry's watched object, which no frame ever holds."""


_DROPPED = _Dropped()


def _invalidate(entry: Any) -> bool:
    """Make one cache entry inert (never matches, holds no code or backend).

    ExtraState.invalidate is what PyTorch itself does when an object a guard watches
    dies. Its signature changed between releases, so each known form is tried. The entry
    stays in the code object's list; so that it does not count against the recompile
    limit (torch 2.11/2.12 have no separate region for it), its ID_MATCH'd objects are
    set to one no frame holds: Dynamo counts only entries whose ID_MATCH'd objects are
    the frame's (``cache_size._has_same_id_matched_objs``, torch 2.1 .. 2.14).
    """
    try:
        from torch._dynamo.guards import DeletedGuardManagerWrapper
    except ImportError:  # pragma: no cover
        return False
    manager = getattr(entry, "guard_manager", None)
    extra = getattr(manager, "extra_state", None)
    if extra is None or not hasattr(extra, "invalidate"):
        return False
    for form in range(3):
        deleted = DeletedGuardManagerWrapper(DROPPED_REASON)
        if hasattr(deleted, "id_matched_objs"):
            deleted.id_matched_objs = {"<dynscope dropped>": weakref.ref(_DROPPED)}
        args = (
            (entry, deleted),  # torch 2.5 .. 2.14
            (entry, deleted, manager),  # later: the live manager is checked too
            (deleted, manager),
        )[form]
        try:
            extra.invalidate(*args)
            return True
        except TypeError:
            continue
    return False  # pragma: no cover


def _frame_compile_counter() -> Any:
    try:
        from torch._dynamo import convert_frame

        return getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
    except ImportError:  # pragma: no cover
        return None


def _guard_failures() -> Any:
    try:
        from torch._dynamo.utils import guard_failures

        return guard_failures
    except ImportError:  # pragma: no cover
        return None


def _metrics_edits() -> list[Any] | None:
    """This thread's log of compile-metric edits (each with a CapturedTraceback).

    torch 2.6 .. 2.14 append to it on every compile and never clear it. Freed when a
    thread ends, those tracebacks deadlock against another thread that is compiling
    (freeing takes a lock, then the GIL; compiling holds the GIL, then takes the lock).
    """
    try:
        from torch._dynamo.utils import get_metrics_context

        edits = getattr(get_metrics_context(), "_edits", None)
    except (ImportError, AttributeError):  # pragma: no cover
        return None
    return edits if isinstance(edits, list) else None


def _cached_backends() -> dict[int, Any]:
    try:
        from torch._dynamo.eval_frame import cached_backends
    except ImportError:  # pragma: no cover
        return {}
    return cached_backends


def _compile_lock() -> Any:
    """``torch._dynamo.convert_frame.compile_lock`` (an RLock, torch 2.0 .. 2.14), or a no-op."""
    try:
        from torch._dynamo.convert_frame import compile_lock
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return compile_lock


class DynamoSandbox:
    """Run dynscope's own compiles and put Dynamo back as the user had it.

    Restores the dynamo config, the compile stance, the global ``counters`` and
    ``guard_failures``, and the automatic-dynamic memory (emptied for the run, so what
    the user compiled before cannot change the report). Code objects:

    - frames Dynamo had marked "skip" before (a break in a loop makes it give up on a
      frame for good) are unmarked for the run, so the report sees what a fresh process
      sees, and marked again afterwards;
    - every cache entry our compiles added is removed: code objects that hold only ours
      are reset; where the user's entries sit beside ours, ours are made inert (no code,
      no backend, never matching); the per-frame compile counter is put back;
    - our backends leave ``cached_backends`` (which would keep every recorded tensor and
      GraphModule alive until ``torch._dynamo.reset()``).

    Dynamo is never reset as a whole. Register each compiled object or backend of ours
    with :meth:`own`. Not thread-safe by itself: callers hold a lock (see capture.py).
    """

    def __init__(self, subject: Any = None) -> None:
        """``subject``: the program a report runs (a function or module): the skip marks
        Dynamo left on its own module's code are lifted too, as for the codes Dynamo lists."""
        self._backends: list[Any] = []
        self._regions: set[int] = set()
        self._subject = subject

    def own(self, compiled: Any = None, *, backend: Any = None) -> None:
        """Mark a torch.compile result (its recompile region) or a backend as ours."""
        region = getattr(compiled, "_isolate_recompiles_id", None)
        if isinstance(region, int) and region >= 0:
            self._regions.add(region)
        if backend is not None:
            self._backends.append(backend)

    def _is_ours(self, entry: Any) -> bool:
        region = getattr(entry, "isolate_recompiles_id", -1)
        if isinstance(region, int) and region in self._regions:
            return True
        chain = _backend_chain(getattr(entry, "backend", None))
        return any(b is ours for b in chain for ours in self._backends)

    def __enter__(self) -> DynamoSandbox:
        # Dynamo's own compile lock: another thread's compile never runs while the state
        # is copied here or put back in __exit__ (it mutates the same dicts).
        with _compile_lock():
            return self._enter()

    def __exit__(self, *exc: object) -> None:
        with _compile_lock():
            self._exit()

    def _enter(self) -> DynamoSandbox:
        import torch._dynamo
        from torch._dynamo import utils as dyn_utils

        self._config = torch._dynamo.config.get_config_copy()
        self._counters = copy.deepcopy(dict(dyn_utils.counters))
        failures = _guard_failures()
        self._failures = {k: list(v) for k, v in failures.items()} if failures is not None else None
        counter = _frame_compile_counter()
        self._frame_counts = dict(counter) if counter is not None else None
        self._stance = _get_stance()
        self._code_state = _get_code_state()
        self._backend_keys = set(_cached_backends())
        edits = _metrics_edits()
        self._edits_len = len(edits) if edits is not None else 0
        # Frames given up on earlier hold Dynamo state but no cache entry: unmark them.
        # Only user files and Dynamo's resume functions (a resume function in torch/optim
        # is a frame PyTorch compiles, and the user's earlier run marks it as much as
        # ours): generated code (GraphModule forwards) is skipped on purpose.
        candidates = {id(c): c for c in (*_seen_codes(), *_subject_codes(self._subject))}
        self._unskipped = [
            code
            for code in candidates.values()
            if (is_user_file(code.co_filename) or is_resume_name(code.co_name))
            and not _cache_entries(code)
            and _has_dynamo_state(code)
        ]
        for code in self._unskipped:
            _reset_code(code)
        if self._stance is not None and self._stance[0] != "default":
            torch.compiler.set_stance("default")
        _fresh_code_state()
        return self

    def _exit(self) -> None:
        from torch._dynamo import utils as dyn_utils

        for code in _seen_codes():
            entries = _cache_entries(code)
            ours = [e for e in entries if self._is_ours(e)]
            if not ours:
                continue
            if len(ours) == len(entries):
                _reset_code(code)
            else:
                for entry in ours:
                    _invalidate(entry)
        for code in self._unskipped:
            _reset_code(code)
            _skip_code(code)
        counter = _frame_compile_counter()
        if counter is not None and self._frame_counts is not None:
            counter.clear()
            counter.update(self._frame_counts)
        # Backends torch.compile registered during the run are ours (reports are
        # serialised); left there they keep every recorded tensor and GraphModule alive.
        backends = _cached_backends()
        for backend_key in [k for k in backends if k not in self._backend_keys]:
            backends.pop(backend_key, None)
        edits = _metrics_edits()
        if edits is not None:
            del edits[self._edits_len:]
        _set_code_state(self._code_state)
        dyn_utils.counters.clear()
        for key, value in self._counters.items():
            dyn_utils.counters[key].update(value)
        failures = _guard_failures()
        if failures is not None and self._failures is not None:
            failures.clear()
            failures.update(self._failures)
        _restore_config(self._config)
        if self._stance is not None:
            _set_stance(self._stance)


def _restore_config(saved: dict[str, Any]) -> None:
    """Put back only the settings that changed (setting all would trip deprecation warnings)."""
    import torch._dynamo

    cfg = torch._dynamo.config
    now = cfg.get_config_copy()
    for key, value in saved.items():
        if now.get(key, value) != value:
            setattr(cfg, key, value)


def _get_stance() -> tuple[str, bool, Any] | None:
    try:
        from torch._dynamo.eval_frame import _stance  # torch >= 2.6
    except ImportError:  # pragma: no cover
        return None
    return (_stance.stance, _stance.skip_guard_eval_unsafe, _stance.backend)


def _set_stance(stance: tuple[str, bool, Any]) -> None:
    current = _get_stance()
    if current == stance:
        return
    name, skip, backend = stance
    kwargs: dict[str, Any] = {"skip_guard_eval_unsafe": skip}
    if backend is not None:
        kwargs["force_backend"] = backend
    # cast: torch 2.14 types the stance name as a Literal; ours came from torch itself.
    torch.compiler.set_stance(cast("Any", name), **kwargs)


def _get_code_state() -> Any:
    try:
        from torch._dynamo import pgo  # torch >= 2.6: automatic-dynamic memory
    except ImportError:  # pragma: no cover
        return None
    state = getattr(pgo, "_CODE_STATE", None)
    return copy.deepcopy(state)


def _fresh_code_state() -> None:
    """Start with no learnt dynamic dims, so earlier compiles cannot change what we see."""
    try:
        from collections import defaultdict

        from torch._dynamo import pgo

        pgo._CODE_STATE = defaultdict(pgo.CodeState)
    except (ImportError, AttributeError):  # pragma: no cover - torch without PGO state
        pass


def _set_code_state(state: Any) -> None:
    try:
        from torch._dynamo import pgo
    except ImportError:  # pragma: no cover
        return
    if hasattr(pgo, "_CODE_STATE"):
        pgo._CODE_STATE = state


def snapshot_state() -> dict[str, Any]:
    """Everything the isolation tests compare before and after dynscope runs."""
    import torch._dynamo
    from torch._dynamo import utils as dyn_utils

    log = trace_logger()
    return {
        "trace_handlers": list(log.handlers),
        "trace_level": log.level,
        "trace_propagate": log.propagate,
        "dynamo_config": torch._dynamo.config.get_config_copy(),
        "stance": _get_stance(),
        "counters": {k: dict(v) for k, v in dyn_utils.counters.items()},
        "guard_failures": {k: list(v) for k, v in (_guard_failures() or {}).items()},
        "frame_compile_counter": dict(_frame_compile_counter() or {}),
        "code_state": repr(_get_code_state()),
    }
