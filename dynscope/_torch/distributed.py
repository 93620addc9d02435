"""What dynscope knows of torch.distributed and of Dynamo's DDP optimizer (torch 2.13).

- :func:`rank_info`: the process's rank and world size (0 and 1 without a process group).
- :func:`ddp_split_active`: whether a graph handed to a backend right now comes from
  ``DDPOptimizer``, which splits one Dynamo graph at DDP's gradient-bucket boundaries and
  hands each piece to the backend under the same compile id.
- :func:`collective_name`: which FX node targets are collectives, by the names Dynamo gives
  traced ``torch.distributed`` calls (``torch._ops._c10d_functional.all_reduce``).
"""

from __future__ import annotations

# torch is imported inside the functions that need it: merging saved reports
# (collective_name) must not import torch.

#: Collective ops, by the op's own name (the last dotted part of a node target, overload
#: dropped). ``wait_tensor`` is not one: it waits for a collective already issued.
COLLECTIVES = frozenset({
    "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
    "all_gather", "all_gather_into_tensor", "all_gather_into_tensor_coalesced",
    "all_gather_into_tensor_out", "reduce_scatter", "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced", "all_to_all", "all_to_all_single", "broadcast",
    "broadcast_", "reduce", "scatter", "gather", "barrier", "send", "recv", "isend", "irecv",
})

#: Namespaces whose ops are collectives; a target outside them is not one even when its
#: last name matches (a user function called ``reduce``).
_NAMESPACES = ("_c10d_functional", "c10d_functional", "c10d", "torch.distributed", "_functional_collectives")


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


def collective_name(target: str) -> str:
    """The collective a node target calls ("all_reduce"), or "" when it calls none.

    Targets are as dynscope records them: ``torch._ops._c10d_functional.all_reduce``,
    ``_c10d_functional.all_reduce.default``, ``torch.distributed.all_reduce``. No torch import.
    """
    if not any(ns in target for ns in _NAMESPACES):
        return ""
    parts = [p for p in target.split(".") if p]
    for part in reversed(parts[-2:]):  # "all_reduce" or "all_reduce.default"
        if part in COLLECTIVES:
            return part.rstrip("_") or part
    return ""
