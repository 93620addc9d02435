"""Two ranks under DDP on CPU: one report per rank, merged, and the divergences named.

Run it:  torchrun --nproc-per-node=2 examples/ddp_two_ranks.py [--plant] [--folder DIR]

Each rank trains a small model wrapped in DistributedDataParallel for a few steps inside
``dynscope.capture()``, saves its report with ``dynscope.save_rank`` into DIR (default
dynscope-ranks/), and rank 0, after a barrier, merges them and prints the merged summary.

DDP's optimizer splits the compiled forward at gradient-bucket boundaries: the report
shows those graphs as "DDP bucket split", not as graph breaks.

``--plant`` (or DYNSCOPE_PLANT=1) plants two divergences that would hurt a real job: rank 1
gets a smaller batch on the second step (it recompiles, rank 0 does not), and rank 1
prints from inside forward (a graph break only rank 1 has). ``--no-dynscope`` runs the
same job without dynscope (benchmarks/ranks_overhead.py times both). ``--own-backend`` compiles
with ``backend="eager"`` as a user's own code would, dynscope only listening (``capture()``
then reads DDP's pieces from PyTorch's trace).

With ``TORCH_TRACE=<dir>`` set, PyTorch also writes each rank's trace log there;
``dynscope trace <dir>`` reads the same merged report from those logs (docs/traces.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import dynscope

WIDTH = 512  # 512 x 512 float32 = 1 MiB per layer: with bucket_cap_mb=1, one bucket per layer


class Mlp(nn.Module):
    def __init__(self, plant_break: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.plant_break = plant_break

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.layers[0](x))
        if self.plant_break:
            print("rank-dependent print")  # a graph break on this rank only
        x = torch.relu(self.layers[1](x))
        return torch.relu(self.layers[2](x))


def run(
    *, plant: bool, folder: str, steps: int = 3, use_dynscope: bool = True, own_backend: bool = False
) -> dynscope.MultiRankReport | None:
    """Train for ``steps`` steps in this rank; rank 0 returns the merged report."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Mlp(plant_break=plant and rank == 1)
    started = time.perf_counter()  # both ways include importing Dynamo (first compile or capture())
    cap = dynscope.capture(title=f"Mlp rank {rank}") if use_dynscope else None
    with cap if cap is not None else contextlib.nullcontext():
        backend: Any = cap.backend if cap is not None and not own_backend else "eager"
        # Compile the module DDP wraps: DDP's optimizer then splits its graph at buckets.
        ddp = nn.parallel.DistributedDataParallel(torch.compile(model, backend=backend), bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step in range(steps):
            batch = 7 if (plant and rank == 1 and step == 1) else 8
            loss = ddp(torch.randn(batch, WIDTH)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    elapsed = time.perf_counter() - started
    if rank == 0:
        print(f"rank 0: {steps} steps in {elapsed:.3f} s ({'with' if cap is not None else 'without'} dynscope)")
    if cap is None:
        return None
    dynscope.save_rank(cap.report, folder)
    dist.barrier()  # every rank's file is written before rank 0 reads them
    if rank != 0:
        return None
    merged = dynscope.merge(folder)
    print(merged.summary())
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plant", action="store_true", default=os.environ.get("DYNSCOPE_PLANT") == "1",
                        help="plant a recompile and a graph break on rank 1")
    parser.add_argument("--folder", default="dynscope-ranks", help="where each rank saves rank-<r>.json")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--no-dynscope", action="store_true", help="the same job without dynscope")
    parser.add_argument("--own-backend", action="store_true", help="compile with backend='eager'; dynscope only listens")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    try:
        run(plant=args.plant, folder=args.folder, steps=args.steps, use_dynscope=not args.no_dynscope,
            own_backend=args.own_backend)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
