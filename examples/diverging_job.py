"""A small data-parallel job that diverges across ranks in the ways real jobs do, and hangs.

Run it:  torchrun --nproc-per-node=2 examples/diverging_job.py --case batch [--watch]

Each rank runs a compiled forward and a compiled sync (the ranks' total loss, an all_reduce
inside compiled code) per step. ``--case`` seeds one divergence:

- ``clean``: every rank runs the same steps on the same shapes (no divergence).
- ``batch``: the data is sharded unevenly; the last rank has one more, shorter batch. It
  recompiles the forward for that batch and all_reduces alone: the others already wait in the
  end-of-epoch barrier. The job hangs until the collective timeout.
- ``branch``: rank 0 logs from inside the compiled step and syncs a metric the others never
  sync (``if rank == 0:``): a graph break on rank 0 only, then a collective only rank 0 issues.
- ``dtype``: the last rank computes in float16 (a per-rank precision flag gone wrong); its
  forward is another graph, its loss overflows, it skips the sync, and the others wait.
- ``step_k``: at step ``--k`` the last rank is told to log (a Python flag passed to the
  compiled step): it recompiles the step with a print and a metric all_reduce only it issues.

``--watch`` runs the job inside ``dynscope.watch_ranks()`` (``--wait`` seconds); without it,
set ``DYNSCOPE_WATCH_RANKS=1`` or run ``torchrun ... -m dynscope.watch examples/diverging_job.py``
for the same check with no code change. ``--timeout`` is the collective timeout (gloo).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

WIDTH = 32
CASES = ("clean", "batch", "branch", "dtype", "step_k")


def batches(case: str, rank: int, world: int, steps: int) -> list[torch.Tensor]:
    """This rank's shard, in batches of 8 rows; ``batch``: the last rank gets 4 more rows."""
    g = torch.Generator().manual_seed(rank)
    rows = 8 * steps + (4 if case == "batch" and rank == world - 1 else 0)
    data = torch.randn(rows, WIDTH, generator=g)
    return list(data.split(8))


def compiled_steps(model: nn.Module, rank: int) -> tuple[Any, Any]:
    """The compiled forward (a loss; ``log``: print and sync a metric from inside it) and the
    compiled sync (the ranks' total loss by all_reduce)."""

    @torch.compile(backend="eager")
    def forward(x: torch.Tensor, log: bool = False) -> torch.Tensor:
        loss = model(x.to(next(model.parameters()).dtype)).square().mean()
        if log:  # a rank-dependent branch: logging and a metric sync from inside compiled code
            print(f"rank {rank} loss {loss}")
            metric = loss.detach().float()
            dist.all_reduce(metric)  # only the ranks that log issue this collective
        return loss

    @torch.compile(backend="eager")
    def sync(loss: torch.Tensor) -> torch.Tensor:
        total = loss.detach().float()
        dist.all_reduce(total)
        return total

    return forward, sync


def run(case: str, *, steps: int, k: int) -> None:
    """Train for ``steps`` steps (``batch``: the last rank one more) with ``case`` seeded."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
    if case == "dtype" and rank == world - 1:
        model = model.half()  # this rank's precision flag says float16
    forward, sync = compiled_steps(model, rank)
    scale = 3000.0 if case == "dtype" else 1.0  # float16 overflows where float32 does not
    for i, x in enumerate(batches(case, rank, world, steps)):
        log = (case == "branch" and rank == 0) or (case == "step_k" and rank == world - 1 and i == k)
        loss = forward(x * scale, log)
        if not torch.isfinite(loss):
            print(f"rank {rank} step {i}: loss overflowed, update skipped", flush=True)
            continue  # skip the update and its sync on overflow (this rank alone)
        total = sync(loss)
        print(f"rank {rank} step {i}: mean loss {float(total) / world:.4f}", flush=True)
    dist.barrier()  # the end of the epoch
    print(f"rank {rank} done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default="clean")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--k", type=int, default=2, help="the step at which step_k diverges")
    parser.add_argument("--watch", action="store_true", help="run inside dynscope.watch_ranks()")
    parser.add_argument("--wait", type=float, default=5.0, help="watch_ranks(wait_s=...)")
    parser.add_argument("--folder", default="dynscope-ranks", help="where reports are saved on a divergence")
    parser.add_argument("--timeout", type=float, default=30.0, help="the collective timeout, seconds")
    parser.add_argument("--import-dynscope", action="store_true",
                        help="import dynscope (with DYNSCOPE_WATCH_RANKS=1 set, that alone watches the job)")
    args = parser.parse_args()
    if args.import_dynscope:
        import dynscope
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    started = time.monotonic()
    try:
        if args.watch:
            import dynscope

            watch: contextlib.AbstractContextManager[object] = dynscope.watch_ranks(wait_s=args.wait, folder=args.folder)
        else:
            watch = contextlib.nullcontext()
        with watch:
            run(args.case, steps=args.steps, k=args.k)
    finally:
        print(f"rank {dist.get_rank()} ended after {time.monotonic() - started:.2f} s", flush=True)
        if os.environ.get("DIVERGING_JOB_NO_DESTROY") != "1":
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
