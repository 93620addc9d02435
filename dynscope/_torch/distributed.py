"""What dynscope knows of torch.distributed and of Dynamo's DDP optimizer (torch 2.13).

- :func:`rank_info`: the process's rank and world size (0 and 1 without a process group).
- :func:`ddp_split_active`: whether a graph handed to a backend right now comes from
  ``DDPOptimizer``, which splits one Dynamo graph at DDP's gradient-bucket boundaries and
  hands each piece to the backend under the same compile id.
- :func:`job_store`: the job's c10d store, through which ``watch_ranks`` compares compiles.
- :func:`raisable_in_compile`: an error type that leaves a Dynamo compile unwrapped.
- :func:`collective_timeout_s`, :func:`collectives_issued`: the default process group's
  collective timeout and how many collectives this rank has issued on it.
- :func:`waiting_in`: whether a thread's stack waits in a collective, and which.
- :func:`hooks_around`: the FSDP or DDP module, if any, whose hooks issue collectives around
  the code on a stack.
"""

from __future__ import annotations

import functools
import linecache
import re
import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import types

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
    return _c10d_default("_get_default_store")


def _c10d_default(getter: str) -> Any | None:
    """``torch.distributed.distributed_c10d.<getter>()`` (the default group or its store), or
    None without an initialised process group, in a build without it, or when it fails."""
    import torch

    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    try:
        from torch.distributed import distributed_c10d
    except ImportError:  # pragma: no cover - a build without it
        return None
    get = getattr(distributed_c10d, getter, None)
    if get is None:  # pragma: no cover
        return None
    try:
        return get()
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


def _default_group() -> Any | None:
    return _c10d_default("_get_default_group")


def collective_timeout_s() -> float | None:
    """The default process group's collective timeout in seconds (the shortest over its
    backends), None when there is no group or it cannot be read.

    ``ProcessGroup._device_types`` / ``_get_backend(device)`` and the backend's
    ``options._timeout`` (gloo and NCCL, torch 2.13): what ``init_process_group(timeout=)`` set.
    """
    pg = _default_group()
    if pg is None:
        return None
    found = []
    try:
        for device in pg._device_types:
            timeout = getattr(getattr(pg._get_backend(device), "options", None), "_timeout", None)
            if timeout is not None and timeout.total_seconds() > 0:
                found.append(float(timeout.total_seconds()))
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - another torch
        return None
    return min(found) if found else None


def collectives_issued() -> int | None:
    """How many collectives this rank has issued on the default process group (its sequence
    number: the same on every rank at the same collective of a healthy job), None unknown.
    Safe to call from another thread while the rank waits in a collective (gloo, 2.13)."""
    pg = _default_group()
    if pg is None:
        return None
    try:
        return int(pg._get_sequence_number_for_group())
    except (AttributeError, RuntimeError, TypeError):  # pragma: no cover - a backend without it
        return None


_C10D_FILE = "torch/distributed/distributed_c10d.py"
_PASS_THROUGH = ("torch/_ops.py", "torch/distributed/c10d_logger.py", "torch/_library/autograd.py")
_FUNCTIONAL = re.compile(r"_c10d_functional\.(\w+?)_?\.|\b(wait_tensor)\b")
_WAITING_LINE = re.compile(
    r"\.wait\(|wait_tensor|all_reduce|all_gather|reduce_scatter|broadcast|barrier|all_to_all|\bsend\(|\brecv\("
)


def _path(frame: types.FrameType) -> str:
    return frame.f_code.co_filename.replace("\\", "/")


def waiting_in(frame: types.FrameType | None) -> str | None:
    """The collective a thread waits in, from its innermost Python ``frame`` (the frame that
    called into C++): a ``torch.distributed`` collective ("all_reduce", "barrier"...), a
    functional collective of compiled code ("all_reduce", "wait_tensor": the line the compiled
    graph runs), or FSDP's / DDP's own wait ("FSDP", "DDP"). None when the frame is anything
    else (computing, a backward pass, the user's code)."""
    # An op called from Python (compiled code calling torch.ops...) waits inside OpOverload's
    # __call__ (torch/_ops.py): the line that matters is its caller's.
    while frame is not None and _path(frame).endswith(_PASS_THROUGH):
        frame = frame.f_back
    if frame is None:
        return None
    path = _path(frame)
    if path.endswith(_C10D_FILE):
        return frame.f_code.co_name
    line = linecache.getline(frame.f_code.co_filename, frame.f_lineno, frame.f_globals)
    if "/torch/distributed/fsdp/" in path or "/torch/distributed/_composable/" in path:
        return "FSDP" if _WAITING_LINE.search(line) else None
    if path.endswith("torch/nn/parallel/distributed.py"):
        return "DDP" if _WAITING_LINE.search(line) else None
    if "/torch/distributed/" in path and _WAITING_LINE.search(line):
        return frame.f_code.co_name
    found = _FUNCTIONAL.search(line)
    if found:  # compiled code (an FX graph's forward, Inductor's output code) at a collective
        return found.group(1) or found.group(2)
    return None


def hooks_around(frame: types.FrameType | None, depth: int = 80) -> str:
    """The FSDP or DDP module, if any, on the stack from ``frame`` outwards, in words
    ("FSDP2 (fully_shard) hooks of Block"): code run inside it has collectives issued around it
    by the module's hooks, sized by its parameters. "" when none (or torch.distributed unused)."""
    fsdp2 = fsdp1 = ddp = None
    if "torch.distributed.fsdp" in sys.modules:
        fsdp_mod = sys.modules["torch.distributed.fsdp"]
        fsdp2 = getattr(fsdp_mod, "FSDPModule", None)
        fsdp1 = getattr(fsdp_mod, "FullyShardedDataParallel", None)
    if "torch.nn.parallel.distributed" in sys.modules:
        ddp = getattr(sys.modules["torch.nn.parallel.distributed"], "DistributedDataParallel", None)
    kinds = [(k, words) for k, words in ((fsdp2, "FSDP2 (fully_shard)"), (fsdp1, "FSDP"), (ddp, "DDP")) if k is not None]
    if not kinds:
        return ""
    while frame is not None and depth > 0:
        depth -= 1
        if "self" in frame.f_code.co_varnames[:1]:
            obj = frame.f_locals.get("self")
            for kind, words in kinds:
                if isinstance(obj, kind):
                    name = type(obj).__name__
                    if kind is fsdp2 and name.startswith("FSDP") and len(name) > 4:
                        name = name[4:]  # fully_shard makes FSDP<Class>
                    if kind is ddp:
                        inner = getattr(obj, "module", None)
                        name = type(inner).__name__ if inner is not None else name
                    return f"the {words} hooks of {name}"
        frame = frame.f_back
    return ""
