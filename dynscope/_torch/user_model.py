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
