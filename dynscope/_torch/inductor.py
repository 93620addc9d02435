"""The Inductor calls: compiling one graph (``compile_fx``), mode options, the settings that
make a compile explain itself, its cache folder and kernel count.

Each use is feature-detected and says which torch it was written against. Checked on torch
2.11, 2.13 and 2.14 (scripts/compat.sh).
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

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


def recording_inductor(
    mode: str,
    key_of: Callable[[Any, list[Any]], Any],
    on_build: Callable[[Any, Callable[..., Any], float], None],
    *,
    dynamic: bool | None = None,
) -> Any:
    """A torch.compile backend that is ``torch.compile(mode=mode, dynamic=dynamic)``'s own Inductor backend,
    calling ``on_build(key_of(gm, example_inputs), compiled, seconds)`` after each graph it
    builds (``key_of`` runs first: Inductor's passes rewrite the GraphModule they are given).

    ``torch.compile(model, backend=recording_inductor(m, ...))`` compiles exactly as
    ``torch.compile(model, mode=m)``: the backend is torch's own Inductor wrapper
    (``torch._TorchCompileInductorWrapper``, torch 2.1 .. 2.14: its mode options, compiler
    config and cudagraph reset), subclassed only to hand each compiled callable over.
    ``seconds``: the backend call (AOTAutograd and Inductor's forward or inference compile;
    a training graph's backward compiles later, at its first backward).
    """
    import time

    base = getattr(torch, "_TorchCompileInductorWrapper", None)
    if base is None:  # pragma: no cover - every torch dynscope supports has it
        options = mode_options(mode)

        def plain(gm: Any, example_inputs: list[Any]) -> Any:
            from torch._inductor.compile_fx import compile_fx

            key = key_of(gm, list(example_inputs))
            start = time.perf_counter()
            compiled: Any = compile_fx(gm, example_inputs, config_patches=options)
            on_build(key, compiled, time.perf_counter() - start)
            return compiled

        return plain

    class _Recording(base):  # type: ignore[misc, valid-type]
        def __repr__(self) -> str:  # errors name the backend: say it is torch's Inductor
            return "inductor"

        def __call__(self, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
            key = key_of(model_, list(inputs_))
            start = time.perf_counter()
            compiled = super().__call__(model_, inputs_, **kwargs)
            on_build(key, compiled, time.perf_counter() - start)
            return compiled

    # dynamic as torch.compile hands it to its wrapper (None: automatic dynamic); the
    # mode's options depend on it (list_mode_options(mode, dynamic)).
    return _Recording(None if mode == "default" else mode, None, dynamic)
