"""The one module that touches PyTorch's private APIs.

Each use is feature-detected, not keyed on version strings, and says which torch it was
written against, so a new torch release breaks this file and no other.
Checked on torch 2.13 (CPU) and written to work on 2.11 (the GPU machine).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import logging
import os
import sys
import sysconfig
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

# -- the structured compile trace --------------------------------------------------------


def trace_logger() -> logging.Logger:
    """The logger behind TORCH_TRACE / tlparse (``torch.__trace``)."""
    try:
        from torch._logging._internal import trace_log  # torch >= 2.2

        return trace_log
    except ImportError:  # pragma: no cover - older layouts
        return logging.getLogger("torch.__trace")


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
    except Exception as err:  # noqa: BLE001 - reworded by the caller
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


def _seen_codes() -> set[Any]:
    try:
        from torch._dynamo.convert_frame import input_codes  # torch 2.1 .. 2.13
    except ImportError:  # pragma: no cover
        return set()
    out = set()
    for ref in list(getattr(input_codes, "seen", ())):
        code = ref() if callable(ref) else ref
        if code is not None:
            out.add(code)
    return out


def _reset_code(code: Any) -> None:
    try:
        from torch._dynamo.eval_frame import reset_code
    except ImportError:  # pragma: no cover
        return
    reset_code(code)


@contextlib.contextmanager
def preserved_dynamo_state() -> Iterator[None]:
    """Run a dynscope compile and put Dynamo back as the user had it.

    Restores: the dynamo config, the compile stance, the global ``counters``, the
    automatic-dynamic code state (which shapes Dynamo has learnt are dynamic; it is also
    emptied for the run, so what the user compiled before does not change the report), and the
    compiled-code caches of functions that had never been compiled before (our entries
    are dropped, so the user's first compile of them starts fresh). Functions the user
    had compiled before keep their entries; ours sit beside them (isolated on torch
    2.13+). Dynamo is never reset as a whole.
    """
    import torch._dynamo
    from torch._dynamo import utils as dyn_utils

    config = torch._dynamo.config.get_config_copy()
    counters = copy.deepcopy(dict(dyn_utils.counters))
    stance = _get_stance()
    code_state = _get_code_state()
    seen_before = _seen_codes()
    try:
        if stance is not None and stance[0] != "default":
            torch.compiler.set_stance("default")
        _fresh_code_state()
        yield
    finally:
        for code in _seen_codes() - seen_before:
            _reset_code(code)
        _set_code_state(code_state)
        dyn_utils.counters.clear()
        for key, value in counters.items():
            dyn_utils.counters[key].update(value)
        _restore_config(config)
        if stance is not None:
            _set_stance(stance)


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
    torch.compiler.set_stance(name, **kwargs)


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
        "code_state": repr(_get_code_state()),
    }


# -- graph-break registry ---------------------------------------------------------------


@lru_cache(maxsize=1)
def graph_break_registry() -> dict[str, dict[str, Any]]:
    """gb id -> {"Gb_type", "Explanation", "Hints"} from torch's registry (torch >= 2.8)."""
    path = Path(torch.__file__).parent / "_dynamo" / "graph_break_registry.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for gb_id, entries in raw.items():
        entry = entries[0] if isinstance(entries, list) and entries else entries
        if isinstance(entry, dict):
            out[gb_id] = entry
    return out


def gb_id_for_type(gb_type: str) -> str:
    """The registry id for a graph-break type, or ""."""
    for gb_id, entry in graph_break_registry().items():
        if entry.get("Gb_type") == gb_type:
            return gb_id
    return ""


def doc_url_for(gb_type: str, gb_id: str) -> str:
    """PyTorch's documentation page for a graph break, or ""."""
    try:
        from torch._dynamo.exc import get_gbid_documentation_link  # torch >= 2.9

        url = get_gbid_documentation_link(gb_type)
        if url:
            return str(url)
    except Exception:  # noqa: BLE001 - fall back to the URL pattern
        pass
    if gb_id:
        return f"https://meta-pytorch.github.io/compile-graph-break-site/gb/{gb_id}.html"
    return ""


# -- what counts as user code -------------------------------------------------------------


@lru_cache(maxsize=1)
def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    torch_root = os.path.dirname(os.path.abspath(torch.__file__))
    dynscope_root = os.path.dirname(os.path.abspath(__file__))
    paths = sysconfig.get_paths()
    std = {os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}
    std.add(os.path.dirname(os.path.abspath(os.__file__)))
    site = {os.path.abspath(paths[k]) for k in ("purelib", "platlib") if k in paths}
    site.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return (torch_root, dynscope_root, *sorted(std)), tuple(sorted(site))


def is_user_file(filename: str) -> bool:
    """True unless the file belongs to torch, dynscope or the Python standard library.

    Third-party packages (transformers, ...) count as user code: that is where their
    users need to look. Site-packages inside the stdlib folder are not the stdlib.
    """
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    (torch_root, dynscope_root, *std), site = _library_roots()
    if path.startswith((torch_root + os.sep, dynscope_root + os.sep)):
        return False
    if any(path.startswith(s + os.sep) for s in site):
        return True
    return not any(path.startswith(s + os.sep) for s in std)


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


def inductor_compile(gm: Any, example_inputs: list[Any], mode: str) -> Callable[..., Any]:
    """Compile one captured GraphModule with Inductor, as torch.compile(mode=...) would."""
    from torch._inductor.compile_fx import compile_fx

    compiled: Callable[..., Any] = compile_fx(gm, example_inputs, config_patches=mode_options(mode))  # type: ignore[assignment]
    return compiled


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
