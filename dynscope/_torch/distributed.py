"""What dynscope knows of torch.distributed and of Dynamo's DDP optimizer (torch 2.13).

- :func:`rank_info`: the process's rank and world size (0 and 1 without a process group).
- :func:`ddp_split_active`: whether a graph handed to a backend right now comes from
  ``DDPOptimizer``, which splits one Dynamo graph at DDP's gradient-bucket boundaries and
  hands each piece to the backend under the same compile id.
- :func:`job_store`: the job's c10d store, through which ``watch_ranks`` compares compiles.
- :func:`raisable_in_compile`: an error type that leaves a Dynamo compile unwrapped.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

_E = TypeVar("_E", bound=BaseException)

# torch is imported inside the functions that need it. Which node targets are collectives
# (read from saved reports, no torch) is dynscope._model.ops.collective_name.


def rank_info() -> tuple[int, int]:
    """(rank, world size) of this process: torch.distributed's when a process group is
    initialised, else (0, 1)."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return int(dist.get_rank()), int(dist.get_world_size())
    return 0, 1


def ddp_split_active() -> bool:
    """True while Dynamo compiles a frame inside a DDP forward with its DDP optimizer on:
    the graphs a backend receives then are pieces of one graph, split at bucket boundaries."""
    import torch

    if not torch.distributed.is_available():
        return False
    try:
        from torch._dynamo.utils import get_optimize_ddp_mode
        from torch.nn.parallel import DistributedDataParallel
    except ImportError:  # pragma: no cover - a build without these names
        return False
    # get_optimize_ddp_mode and _get_active_ddp_module exist since torch 2.2.
    active = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    if active is None:  # pragma: no cover
        return False
    return bool(active()) and get_optimize_ddp_mode() == "ddp_optimizer"


def job_store() -> Any | None:
    """The job's own key-value store (the default process group's c10d store: torchrun's
    or Slurm's rendezvous store), or None without an initialised process group.

    ``torch.distributed.distributed_c10d._get_default_store`` (torch >= 1.8; 2.11 .. 2.15
    checked): the store every rank already reaches, so dynscope runs no server of its own.
    """
    import torch

    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        from torch.distributed.distributed_c10d import _get_default_store
    except ImportError:  # pragma: no cover - a build without it
        return None
    try:
        return _get_default_store()
    except (RuntimeError, ValueError):  # pragma: no cover - a group made without a store
        return None


@functools.cache
def raisable_in_compile(error: type[_E]) -> type[_E]:
    """A subclass of ``error`` that leaves a Dynamo compile as itself.

    Dynamo wraps what a compile raises in ``InternalTorchDynamoError`` unless it is one of
    its own kinds; ``torch._dynamo.exc.ShortenTraceback`` (torch >= 2.6) is re-raised as it
    is and reaches the caller of the compiled function. Where it is missing, ``error``
    itself (the caller then sees it wrapped, its words intact).
    """
    try:
        from torch._dynamo.exc import ShortenTraceback
    except ImportError:  # pragma: no cover - older torch
        return error

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        # ShortenTraceback's own fields first: the error's __init__ reaches it through
        # super() with the message alone.
        self.first_useful_frame = None  # keep the whole traceback
        self.frame_exec_strategy = None
        self._torch_dynamo_tracer_output = None
        error.__init__(self, *args, **kwargs)

    def shortened_init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("first_useful_frame", None)
        ShortenTraceback.__init__(self, *args, **kwargs)

    # The error's super().__init__(message) lands on the TorchDynamoException side of the
    # MRO: a bridge class gives it the keyword ShortenTraceback requires.
    bridge = type("_Shortened", (ShortenTraceback,), {"__init__": shortened_init})
    made: type[_E] = type(error.__name__, (error, bridge), {"__init__": init, "__module__": error.__module__})
    return made
