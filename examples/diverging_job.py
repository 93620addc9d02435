"""A small data-parallel job that diverges across ranks in the ways real jobs do, and hangs;
and healthy jobs whose ranks differ in ways that never hang.

Run it:  torchrun --nproc-per-node=2 examples/diverging_job.py --case batch [--watch]

Each rank runs a compiled forward and a compiled sync (the ranks' total loss, an all_reduce
inside compiled code) per step. ``--case`` seeds one divergence that hangs the job:

- ``batch``: the data is sharded unevenly; the last rank has one more, shorter batch. It
  recompiles the forward for that batch and all_reduces alone: the others already wait in the
  end-of-epoch barrier. The job hangs until the collective timeout.
- ``branch``: rank 0 logs from inside the compiled step and syncs a metric the others never
  sync (``if rank == 0:``): a graph break on rank 0 only, then a collective only rank 0 issues.
- ``dtype``: the last rank computes in float16 (a per-rank precision flag gone wrong); its
  forward is another graph, its loss overflows, it skips the sync, and the others wait.
- ``step_k``: at step ``--k`` the last rank is told to log (a Python flag passed to the
  compiled step): it recompiles the step with a print and a metric all_reduce only it issues.
- ``data_if``: a data-dependent ``if loss > LIMIT:`` inside the compiled forward syncs a
  metric; from step ``--k`` only the last rank's loss is over the limit: it compiles that
  branch (a collective) alone.
- ``extra_step``: the last rank runs one step more than the others (no compile differs): its
  all_reduce meets the others' end-of-epoch barrier.

And healthy jobs, which must run to the end under the watch:

- ``clean``: every rank runs the same steps on the same shapes.
- ``fsdp_short``: FSDP2 (``fully_shard`` per block, each block compiled) with backward and an
  optimizer; at step ``--k`` the last rank gets a smaller batch and recompiles its blocks alone.
  FSDP2's collectives run in its hooks, sized by the parameters: nothing waits for long.
- ``ddp_short``: the same with DDP around a compiled model.
- ``helper``: rank 0 alone runs a compiled helper (its statistics), which recompiles at step
  ``--k`` on rank 0 only; it issues no collective.
- ``slow_compile``: the last rank's first compile takes ``--slow`` seconds (longer than the
  watch's wait); the others wait for it in the first collective.

``--watch`` runs the job inside ``dynscope.watch_ranks()`` (``--wait`` seconds, ``--on``
raise or warn); without it, set ``DYNSCOPE_WATCH_RANKS=1`` (with ``--import-dynscope``) or run
``torchrun ... -m dynscope.watch examples/diverging_job.py`` for the same check with no code
change. ``--timeout`` is the collective timeout (gloo). Under a watch each rank prints, at
the end, what the watch did (``rank R watch: {...}``: compiles checked, waits, verdicts).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

WIDTH = 32
LIMIT = 50.0  # data_if: the loss over which a rank syncs a metric
HANGS = ("batch", "branch", "dtype", "step_k", "data_if", "extra_step")
HEALTHY = ("clean", "fsdp_short", "ddp_short", "helper", "slow_compile")
CASES = HEALTHY[:1] + HANGS + HEALTHY[1:]


def batches(case: str, rank: int, world: int, steps: int, k: int) -> list[torch.Tensor]:
    """This rank's shard, in batches of 8 rows; ``batch``: the last rank gets 4 more rows;
    ``extra_step``: 8 more; ``data_if``: the last rank's rows grow large from step k."""
    g = torch.Generator().manual_seed(rank)
    last = rank == world - 1
    rows = 8 * steps + ({"batch": 4, "extra_step": 8}.get(case, 0) if last else 0)
    data = torch.randn(rows, WIDTH, generator=g)
    out = list(data.split(8))
    if case == "data_if" and last:
        out = [x * 100 if i >= k else x for i, x in enumerate(out)]
    return out


def slow_backend(seconds: float) -> Any:
    """The eager backend, whose first compile takes ``seconds`` more (a slow first compile:
    a cold cache, a big graph, a busy node)."""
    left = [seconds]

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if left[0] > 0:
            time.sleep(left.pop())
            left.append(0.0)
        return gm.forward

    return backend


def compiled_steps(model: nn.Module, rank: int, case: str, backend: Any = "eager") -> tuple[Any, Any]:
    """The compiled forward (a loss; ``log``: print and sync a metric from inside it) and the
    compiled sync (the ranks' total loss by all_reduce)."""
    data_if = case == "data_if"

    @torch.compile(backend=backend)
    def forward(x: torch.Tensor, log: bool = False) -> torch.Tensor:
        loss = model(x.to(next(model.parameters()).dtype)).square().mean()
        if log:  # a rank-dependent branch: logging and a metric sync from inside compiled code
            print(f"rank {rank} loss {loss}")
            metric = loss.detach().float()
            dist.all_reduce(metric)  # only the ranks that log issue this collective
        if data_if and loss > LIMIT:  # a data-dependent branch: only the ranks over the limit sync
            metric = loss.detach().float()
            dist.all_reduce(metric)
        return loss

    @torch.compile(backend="eager")
    def sync(loss: torch.Tensor) -> torch.Tensor:
        total = loss.detach().float()
        dist.all_reduce(total)
        return total

    return forward, sync


@torch.compile(backend="eager")
def summarize(x: torch.Tensor) -> torch.Tensor:
    """Rank 0's statistics of a batch (a rank-local helper: no collective)."""
    return torch.stack([x.mean(), x.std(), x.abs().max()])


def run(case: str, *, steps: int, k: int, slow: float) -> None:
    """Train for ``steps`` steps (``batch``, ``extra_step``: the last rank one more) with
    ``case`` seeded."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 1))
    if case == "dtype" and rank == world - 1:
        model = model.half()  # this rank's precision flag says float16
    backend = slow_backend(slow) if case == "slow_compile" and rank == world - 1 else "eager"
    forward, sync = compiled_steps(model, rank, case, backend)
    scale = 3000.0 if case == "dtype" else 1.0  # float16 overflows where float32 does not
    for i, x in enumerate(batches(case, rank, world, steps, k)):
        log = (case == "branch" and rank == 0) or (case == "step_k" and rank == world - 1 and i == k)
        loss = forward(x * scale, log)
        if case == "helper" and rank == 0:  # rank 0's own statistics; a shorter slice at step k
            stats = summarize(x if i != k else x[:4])
            print(f"rank {rank} step {i}: batch mean {float(stats[0]):.3f}", flush=True)
        if not torch.isfinite(loss):
            print(f"rank {rank} step {i}: loss overflowed, update skipped", flush=True)
            continue  # skip the update and its sync on overflow (this rank alone)
        total = sync(loss)
        print(f"rank {rank} step {i}: mean loss {float(total) / world:.4f}", flush=True)
    dist.barrier()  # the end of the epoch
    print(f"rank {rank} done", flush=True)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) + x


def run_sharded(case: str, *, steps: int, k: int) -> None:
    """Train a two-block model under FSDP2 (each block sharded and compiled) or DDP (the model
    compiled) for ``steps`` steps; the last rank's batch at step ``k`` is smaller."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model: nn.Module = nn.Sequential(Block(), Block(), nn.Linear(WIDTH, 1))
    if case == "fsdp_short":
        from torch.distributed.fsdp import fully_shard

        for block in list(model)[:2]:
            fully_shard(block)
            block.compile(backend="eager")  # per-block compile, as FSDP2's docs do
        fully_shard(model)
    else:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(torch.compile(model, backend="eager"))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    for i in range(steps):
        rows = 4 if (rank == world - 1 and i == k) else 8
        x = torch.randn(rows, WIDTH, generator=g)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {i}: {rows} rows, loss {float(loss.detach()):.4f}", flush=True)
    dist.barrier()
    print(f"rank {rank} done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=CASES, default="clean")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--k", type=int, default=2, help="the step at which step_k, data_if and the short cases diverge")
    parser.add_argument("--watch", action="store_true", help="run inside dynscope.watch_ranks()")
    parser.add_argument("--wait", type=float, default=5.0, help="watch_ranks(wait_s=...)")
    parser.add_argument("--on", choices=("raise", "warn"), default="raise", help="watch_ranks(on_divergence=...)")
    parser.add_argument("--folder", default="dynscope-ranks", help="where reports are saved on a divergence")
    parser.add_argument("--timeout", type=float, default=30.0, help="the collective timeout, seconds")
    parser.add_argument("--slow", type=float, default=15.0, help="slow_compile: seconds the last rank's first compile takes")
    parser.add_argument("--import-dynscope", action="store_true",
                        help="import dynscope (with DYNSCOPE_WATCH_RANKS=1 set, that alone watches the job)")
    args = parser.parse_args()
    if args.import_dynscope:
        import dynscope
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    started = time.monotonic()
    watch: Any = None
    try:
        ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if args.watch:
            import dynscope

            ctx = dynscope.watch_ranks(wait_s=args.wait, folder=args.folder, on_divergence=args.on)
        with ctx as watch:
            if args.case in ("fsdp_short", "ddp_short"):
                run_sharded(args.case, steps=args.steps, k=args.k)
            else:
                run(args.case, steps=args.steps, k=args.k, slow=args.slow)
    finally:
        rank = dist.get_rank()
        print(f"rank {rank} ended after {time.monotonic() - started:.2f} s", flush=True)
        if watch is None:  # DYNSCOPE_WATCH_RANKS=1 or python -m dynscope.watch: the process's watch
            import sys

            module = sys.modules.get("dynscope._capture.watch")
            watch = getattr(module, "process_watch", lambda: None)()
        if watch is not None and hasattr(watch, "stats"):
            print(f"rank {rank} watch: {json.dumps(watch.stats())}", flush=True)
        if os.environ.get("DIVERGING_JOB_NO_DESTROY") != "1":
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
