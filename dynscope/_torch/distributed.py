"""What dynscope knows of torch.distributed and of Dynamo's DDP optimizer (torch 2.13).

- :func:`rank_info`: the process's rank and world size (0 and 1 without a process group).
- :func:`ddp_split_active`: whether a graph handed to a backend right now comes from
  ``DDPOptimizer``, which splits one Dynamo graph at DDP's gradient-bucket boundaries and
  hands each piece to the backend under the same compile id.
"""

from __future__ import annotations

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
