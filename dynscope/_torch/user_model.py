"""The user's model: what a ``torch.compile`` result wraps, and the state its calls change
(buffers, the random-number state), put back after report()'s calls.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Iterator

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


def _is_compiled(value: Any) -> bool:
    """A ``torch.compile`` result: an ``OptimizedModule``, or a function compiled by it (not
    one ``torch.compiler.disable`` wrapped: that carries the same marks)."""
    if not callable(value) or isinstance(value, type) or getattr(value, "_torchdynamo_disable", False):
        return False
    return unwrap_compiled(value)[1]


def _module_parts(module: torch.nn.Module, prefix: str) -> list[str]:
    """Names of the compiled pieces of ``module``: submodules that are ``torch.compile``
    results, modules compiled in place (``module.compile()``), modules whose ``forward``
    was replaced by a compiled one (Hugging Face's recipe)."""
    out: list[str] = []
    for name, sub in module.named_modules():
        label = ".".join(x for x in (prefix, name) if x) or type(sub).__name__
        if _is_compiled(sub):
            out.append(label)
        elif getattr(sub, "_compiled_call_impl", None) is not None:
            out.append(f"{label} (compiled in place)")
        elif _is_compiled(vars(sub).get("forward")):
            out.append(f"{label}.forward")
    return out


def compiled_parts(model: Any) -> tuple[str, ...]:
    """What ``model`` already compiles inside itself, by name: compiled submodules of a
    module (a per-block compile), its compiled ``forward`` when ``model`` is another of its
    methods (``model.generate`` with ``model.forward = torch.compile(model.forward)``), and
    for a function the compiled callables and modules it reads from its globals and closure.
    () when nothing is compiled."""
    if isinstance(model, torch.nn.Module):
        return tuple(_module_parts(model, ""))
    owner = getattr(model, "__self__", None)
    if isinstance(owner, torch.nn.Module):
        return tuple(_module_parts(owner, type(owner).__name__))
    code = getattr(model, "__code__", None)
    if code is None:
        return ()
    found: list[str] = []
    scope = getattr(model, "__globals__", {})
    named = [(n, scope[n]) for n in code.co_names if n in scope]
    named += [(n, c.cell_contents) for n, c in zip(code.co_freevars, getattr(model, "__closure__", None) or (), strict=False)
              if _has_contents(c)]
    for name, value in named:
        if _is_compiled(value):
            found.append(name)
        elif isinstance(value, torch.nn.Module):
            found.extend(_module_parts(value, name))
    return tuple(dict.fromkeys(found))


def _has_contents(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


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
