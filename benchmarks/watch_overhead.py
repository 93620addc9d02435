"""What does dynscope.watch_ranks cost a job, per compile and in steady state?

Runs a gloo job on CPU under torchrun (``--ranks``, 2 by default), with and without the
watch, alternating, ROUNDS times each. Each rank compiles FUNCTIONS distinct functions (one
compile each; every other one issues an all_reduce inside the compiled code, so the watch
compares it across the ranks before it runs; the others it compares in the background). The
ranks meet at a barrier before each first call, so the watch's wait is its own cost and not
the skew between ranks; then they run all of them STEPS times with an all_reduce per step.
Prints the medians side by side:
  - compile: the first call of each function (compile + one run), per function;
  - the watch's own work per compile (its mini report, digest and store round trips) and
    the share of the compile it is;
  - steady state: one step (every function called once, one all_reduce).

Each job compiles cold (a fresh Inductor cache folder), as a job's first compile does.

Run:  .venv/bin/python benchmarks/watch_overhead.py [ROUNDS] [--backend inductor|eager] [--ranks N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = 6
STEPS = 300


def worker(backend: str, watch: bool) -> None:
    """One rank: compile FUNCTIONS functions, then STEPS steady steps; rank 0 prints JSON."""
    import contextlib

    import torch
    import torch.distributed as dist

    import dynscope

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    fns = []
    for i in range(FUNCTIONS):  # distinct code objects: one compile each; odd ones all_reduce
        ns: dict[str, object] = {"torch": torch, "dist": dist}
        sync = "    dist.all_reduce(y)\n" if i % 2 else ""
        exec(f"def f{i}(x, w):\n    y = torch.relu(x @ w).sin().sum() + {i}\n{sync}    return y\n", ns)
        fns.append(torch.compile(ns[f"f{i}"], backend=backend))
    x, w = torch.randn(64, 64), torch.randn(64, 64)
    ctx = dynscope.watch_ranks(wait_s=60, folder=None) if watch else contextlib.nullcontext()
    with ctx as w_:
        firsts = []
        for fn in fns:
            dist.barrier()
            started = time.perf_counter()
            fn(x, w)
            firsts.append(time.perf_counter() - started)
        total = torch.zeros(1)
        for fn in fns:  # warm
            fn(x, w)
        dist.barrier()
        started = time.perf_counter()
        for _ in range(STEPS):
            for fn in fns:
                fn(x, w)
            dist.all_reduce(total)
        steady = (time.perf_counter() - started) / STEPS
    if rank == 0:
        own = (w_.check_s - w_.wait_s_spent) / max(w_.checks, 1) if watch else 0.0
        waited = w_.wait_s_spent / max(w_.waits, 1) if watch else 0.0
        print(json.dumps({"first_s": statistics.median(firsts), "steady_s": steady, "own_s": own,
                          "waited_s": waited, "checks": w_.checks if watch else 0, "waits": w_.waits if watch else 0}))
    dist.destroy_process_group()


def one_job(backend: str, watch: bool, ranks: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TORCHINDUCTOR_CACHE_DIR": cache}
        env.pop("DYNSCOPE_WATCH_RANKS", None)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               __file__, "--worker", "--backend", backend] + (["--watch"] if watch else [])
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the job failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("{"))
    return json.loads(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--watch", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.backend, args.watch)
        return
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for r in range(args.rounds):
        for watch in (False, True):
            runs[watch].append(one_job(args.backend, watch, args.ranks))
            print(f"round {r + 1}/{args.rounds} {'with' if watch else 'without'} the watch: done", file=sys.stderr)

    def med(watch: bool, key: str) -> float:
        return statistics.median(run[key] for run in runs[watch])

    first_off, first_on = med(False, "first_s"), med(True, "first_s")
    steady_off, steady_on = med(False, "steady_s"), med(True, "steady_s")
    own, waited = med(True, "own_s"), med(True, "waited_s")
    checks, waits = med(True, "checks"), med(True, "waits")
    print(f"watch_ranks overhead, {args.ranks} gloo ranks, backend={args.backend}, {FUNCTIONS} compiles a job "
          f"({FUNCTIONS // 2} with an all_reduce), {args.rounds} rounds (medians)")
    print(f"  compile (first call) per function: {first_off * 1e3:8.1f} ms without, {first_on * 1e3:8.1f} ms with "
          f"(ratio {first_on / first_off:.3f})")
    print(f"  the watch's own work per compile:  {own * 1e3:8.2f} ms = {own / first_off:.2%} of the compile")
    print(f"  compiles checked / waited at:      {checks:.0f} / {waits:.0f} (rank 0); "
          f"a wait for the other ranks: {waited * 1e3:.2f} ms")
    print(f"  steady step:                        {steady_off * 1e3:8.3f} ms without, {steady_on * 1e3:8.3f} ms with "
          f"(ratio {steady_on / steady_off:.3f})")


if __name__ == "__main__":
    main()
