"""What does a 2-rank dynscope capture add over the same job without dynscope?

Runs examples/ddp_two_ranks.py under torchrun (2 gloo ranks on CPU) with and without
dynscope, alternating, ROUNDS times each, and prints the medians of:
  - loop: rank 0's compile + 3 training steps (the example prints it), and
  - job: the whole torchrun job's wall time, start to exit (with dynscope this includes
    each rank saving its report and rank 0 merging them).

Run:  .venv/bin/python benchmarks/ranks_overhead.py [ROUNDS]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "ddp_two_ranks.py"


def one_job(with_dynscope: bool, folder: str) -> tuple[float, float]:
    """(loop seconds on rank 0, whole job seconds)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(EXAMPLE), "--folder", folder]
    if not with_dynscope:
        cmd.append("--no-dynscope")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, timeout=300)
    job = time.perf_counter() - started
    found = re.search(r"rank 0: \d+ steps in ([0-9.]+) s", done.stdout)
    if found is None:
        raise SystemExit(f"the example printed no timing:\n{done.stdout}\n{done.stderr[-2000:]}")
    return float(found.group(1)), job


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            for with_dynscope in (False, True):  # alternate, so machine noise hits both alike
                runs[with_dynscope].append(one_job(with_dynscope, f"{tmp}/ranks-{i}"))
    for label, key in (("without dynscope", False), ("with dynscope   ", True)):
        loops, jobs = zip(*runs[key], strict=True)
        print(f"{label}: loop {statistics.median(loops):.3f} s, job {statistics.median(jobs):.2f} s "
              f"(median of {rounds})")
    loop_add = statistics.median(r[0] for r in runs[True]) - statistics.median(r[0] for r in runs[False])
    job_add = statistics.median(r[1] for r in runs[True]) - statistics.median(r[1] for r in runs[False])
    print(f"dynscope adds: loop {loop_add:+.3f} s, job {job_add:+.2f} s")


if __name__ == "__main__":
    main()
