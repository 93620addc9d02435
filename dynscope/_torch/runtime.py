"""Dynamo's runtime: the trace logger, compile ids, backends, caches and process state.

Each use is feature-detected, not keyed on version strings, and says which torch it was
written against. Checked on torch 2.11, 2.13 and 2.14 (scripts/compat.sh).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import os
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import torch

from dynscope._torch.registry import is_user_file
from dynscope._torch.wording import DROPPED_REASON, TRACE_LOGGER_NAME, is_resume_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

# -- the structured compile trace --------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The logger behind TORCH_TRACE / tlparse (``torch.__trace``)."""
    try:
        from torch._logging._internal import trace_log  # torch >= 2.2

        return trace_log
    except ImportError:  # pragma: no cover - older layouts
        return logging.getLogger(TRACE_LOGGER_NAME)


@contextlib.contextmanager
def attached(handler: logging.Handler) -> Iterator[None]:
    """Attach ``handler`` to the trace logger and restore the logger exactly afterwards.

    PyTorch only builds trace events while the logger has a handler, and the logger must
    stay at DEBUG and not propagate, or events leak into the user's root logger.
    """
    log = trace_logger()
    level, propagate = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


# -- compile ids -------------------------------------------------------------------------


def current_compile_id() -> str:
    """Dynamo's "frame/compile" id of the compile in progress, or "" outside one."""
    try:
        from torch._guards import CompileContext

        cid = CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001 - no context means no id
        return ""
    if cid is None or getattr(cid, "frame_id", None) is None:
        return ""
    return f"{cid.frame_id}/{cid.frame_compile_id}"


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

    def __init__(self) -> None:
        self._backends: list[Any] = []
        self._regions: set[int] = set()

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
        self._unskipped = [
            code
            for code in _seen_codes()
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


# -- compile callbacks --------------------------------------------------------------------


@contextlib.contextmanager
def around_compiles(on_start: Callable[[], None], on_end: Callable[[], None]) -> Iterator[None]:
    """Call ``on_start``/``on_end`` around every Dynamo compile in the block.

    Uses ``torch._dynamo.callback`` (torch >= 2.5); a no-op where it is missing.
    """
    try:
        from torch._dynamo.callback import callback_handler

        register_start = callback_handler.register_start_callback
        register_end = callback_handler.register_end_callback
    except (ImportError, AttributeError):  # pragma: no cover - older torch: no pausing
        yield
        return

    def start(*_: Any) -> None:
        on_start()

    def end(*_: Any) -> None:
        on_end()

    register_start(start)
    register_end(end)
    try:
        yield
    finally:
        callback_handler.remove_start_callback(start)
        callback_handler.remove_end_callback(end)


# -- Inductor -------------------------------------------------------------------------------


def mode_options(mode: str) -> dict[str, Any]:
    """Inductor config for a torch.compile mode ("default", "max-autotune", ...)."""
    import torch._inductor

    return dict(torch._inductor.list_mode_options(mode) or {})


def inductor_compile(
    gm: Any, example_inputs: list[Any], mode: str, *, symbolic_from: Any = None, eager_random: bool = False
) -> Callable[..., Any]:
    """Compile one captured GraphModule with Inductor, as torch.compile(mode=...) would.

    ``example_inputs`` are concrete (real tensors, plain ints). With ``symbolic_from`` (the
    GraphModule as Dynamo gave it), sizes Dynamo made symbolic stay symbolic, so the graph
    is compiled dynamic as Dynamo's own Inductor compile would be. With ``eager_random``,
    Inductor's ``fallback_random`` is on: random ops call eager's kernels, so under the same
    seed compiled and eager draw the same numbers (for checking numerics, not for timing).
    """
    from torch._inductor.compile_fx import compile_fx

    inputs = example_inputs if symbolic_from is None else symbolic_inputs(symbolic_from, example_inputs)
    patches = mode_options(mode)
    if eager_random:
        patches["fallback_random"] = True
    compiled: Callable[..., Any] = compile_fx(gm, inputs, config_patches=patches)  # type: ignore[assignment]
    return compiled


def symbolic_inputs(gm: Any, concrete_inputs: list[Any]) -> list[Any]:
    """Fake inputs with Dynamo's symbolic sizes, in a fresh shape environment.

    Each placeholder's ``example_value`` (Dynamo's fake tensor or SymInt) gives the
    symbolic sizes and strides; each Dynamo symbol gets one fresh symbol (hint: its value
    in the call that compiled the graph), so sizes Dynamo tied together stay tied.
    """
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv(duck_shape=False)  # Dynamo already decided which sizes are one symbol
    fake_mode = FakeTensorMode(shape_env=env)
    fresh: dict[Any, Any] = {}  # Dynamo's sympy symbol -> ours
    hints: dict[Any, int] = {}  # our symbol -> its value

    def convert(size: Any) -> Any:
        if not isinstance(size, torch.SymInt):
            return int(size)
        theirs: Any = size.node.shape_env  # ShapeEnv | None on 2.14+; a SymInt here always has one
        values = getattr(theirs, "backed_var_to_val", None) or theirs.var_to_val
        expr = size.node.expr
        for sym in expr.free_symbols:
            if sym not in fresh:
                val = int(values[sym])
                ours = env.create_symbol(val, source=ConstantSource(str(sym)), dynamic_dim=DimDynamic.DYNAMIC)
                fresh[sym], hints[ours] = ours, val
        mine = expr.xreplace(fresh)
        return env.create_symintnode(mine, hint=int(mine.xreplace(hints)))

    out: list[Any] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, real in zip(placeholders, concrete_inputs, strict=True):
        ev = node.meta.get("example_value")
        if isinstance(ev, torch.SymInt):
            out.append(convert(ev))
        elif isinstance(real, torch.Tensor) and isinstance(ev, torch.Tensor):
            with fake_mode:
                fake = torch.empty_strided(
                    [convert(s) for s in ev.shape],
                    [convert(s) for s in ev.stride()],
                    dtype=real.dtype,
                    device=real.device,
                    requires_grad=real.requires_grad,
                )
            out.append(fake)
        elif isinstance(real, torch.Tensor):
            out.append(fake_mode.from_tensor(real, static_shapes=True))
        else:
            out.append(real)
    return out


def kernel_count() -> int:
    """Inductor's running count of generated kernels (-1 when not exposed)."""
    try:
        from torch._inductor import metrics

        return int(metrics.generated_kernel_count)
    except (ImportError, AttributeError):  # pragma: no cover
        return -1


@contextlib.contextmanager
def inductor_cache_dir(path: str | None) -> Iterator[None]:
    """Point Inductor's on-disk caches (FX graph cache included) at ``path`` for a while."""
    if path is None:
        yield
        return
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


@contextlib.contextmanager
def lowering_config(*, kernel_profile: bool) -> Iterator[list[str]]:
    """Inductor settings that make a compile explain itself, for a while.

    Provenance tracking (``trace.provenance_tracking_level``, torch 2.9+) logs which Dynamo
    node each kernel computes; it changes no generated code. ``kernel_profile`` also turns
    on ``cpp.enable_kernel_profile``, so C++ kernels show in the profiler by name (a
    ``RECORD_FUNCTION`` per kernel call, a no-op while no profiler runs). Yields the names
    of settings this torch lacks (empty when all were set).
    """
    import torch._inductor.config as inductor_config

    patches: dict[str, Any] = {}
    missing: list[str] = []
    if hasattr(inductor_config.trace, "provenance_tracking_level"):
        patches["trace.provenance_tracking_level"] = 1
    elif hasattr(inductor_config.trace, "provenance_tracking"):  # its name before 2.9
        patches["trace.provenance_tracking"] = True
    else:
        missing.append("trace.provenance_tracking_level")
    if kernel_profile:
        if hasattr(inductor_config.cpp, "enable_kernel_profile"):
            patches["cpp.enable_kernel_profile"] = True
        else:
            missing.append("cpp.enable_kernel_profile")
    with inductor_config.patch(patches):
        yield missing


# -- what the user passed -------------------------------------------------------------------


def unwrap_compiled(model: Any) -> tuple[Any, bool]:
    """The callable behind a ``torch.compile`` result, and whether ``model`` was one.

    torch 2.x: a compiled module is an ``OptimizedModule`` holding ``_orig_mod``; a
    compiled function carries ``_torchdynamo_orig_callable``.
    """
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # pragma: no cover
        OptimizedModule = ()  # type: ignore[assignment,misc]
    if isinstance(model, OptimizedModule):
        return model._orig_mod, True
    orig = getattr(model, "_torchdynamo_orig_callable", None)
    if orig is not None and callable(orig) and not isinstance(model, type):
        return orig, True
    return model, False


def profiler_running() -> bool:
    """True while a torch profiler session (the user's) is recording in this process."""
    try:
        return bool(torch.autograd._profiler_enabled())
    except AttributeError:  # pragma: no cover
        return False


# -- state a model's calls change ---------------------------------------------------------


@contextlib.contextmanager
def restored_model_state(model: Any) -> Iterator[None]:
    """Put a module's buffers and the global RNG state back after the block.

    report() calls the model several times: BatchNorm's running statistics would advance
    and Dropout would consume the random stream. Parameters are left alone (a training
    step the user passes updates them on purpose).
    """
    buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
    if isinstance(model, torch.nn.Module):
        with torch.no_grad():
            buffers = [(b, b.detach().clone()) for b in model.buffers()]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        with torch.no_grad():
            for live, saved in buffers:
                if live.shape == saved.shape and live.dtype == saved.dtype:
                    live.copy_(saved)
        torch.set_rng_state(cpu_rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
