"""Record a two-rank job whose ranks' compile caches differ, as test data.

    .venv/bin/python scripts/record_cache_ranks.py [OUT]

Runs one tiny program under ``torchrun --nproc-per-node=2`` (gloo, CPU) twice, each run with
its own TORCH_TRACE folder, and writes under OUT (default
``tests/traces/cache/torch-<major.minor>-ranks``) one folder per run, each holding the two
ranks' logs (gzip-compressed):

- ``cold``: both ranks against one empty cache folder (every lookup misses; the entries are
  saved there);
- ``warm``: the job restarted. Rank 0 reads the shared cache folder and hits; rank 1 uses a
  cache folder of its own, empty (a node-local ``/tmp``, as a job whose ranks land on another
  machine): it makes the same keys and misses. That is the rank-local difference
  ``dynscope.load_trace`` must name.

Each rank compiles one function with Inductor and all-reduces its result. Every child runs
under a time limit with ``CUDA_VISIBLE_DEVICES=""`` and ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from record_cache_runs import store  # scripts/ is on the path when a script of it runs

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = '''\
import os
import sys

if sys.argv[1] == "warm" and os.environ["RANK"] == "1":
    # This rank's node has a cache folder of its own: empty after the restart.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = sys.argv[2]
if sys.argv[1] == "threads" and os.environ["RANK"] == "1":
    os.environ["OMP_NUM_THREADS"] = "2"  # read when torch is imported

import torch
import torch.distributed as dist

dist.init_process_group("gloo")


def f(x, y):
    return (x * 2 + y).relu().sum(dim=0)


out = torch.compile(f)(torch.ones(8, 4), torch.ones(8, 4))
dist.all_reduce(out)
print(dist.get_rank(), out.tolist())
dist.destroy_process_group()
'''

TIMEOUT_S = 600


def record(out: Path) -> None:
    """Run the job cold, then warm with rank 1's cache folder its own, then warm with rank 1
    on another core count, and store the logs."""
    work = Path(tempfile.mkdtemp(prefix="dynscope-cache-ranks-"))
    try:
        program = work / "program.py"
        program.write_text(PROGRAM, encoding="utf-8")
        shared, own = work / "inductor-cache", work / "rank1-cache"
        for run in ("cold", "warm", "threads"):
            trace = work / f"trace-{run}"
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(shared), "TORCH_TRACE": str(trace),
                   "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
            done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                                   str(program), run, str(own)], env=env, cwd=work, timeout=TIMEOUT_S,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"run {run!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            logs = sorted(trace.glob("dedicated_log_torch_trace_rank_*.log"))
            if len(logs) != 2:
                raise SystemExit(f"run {run!r} wrote {len(logs)} rank logs, not 2: {logs}")
            store(logs, out / run)
            print(f"{run}: {', '.join(f'{p.name} {p.stat().st_size:,} bytes' for p in logs)} -> {out / run}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="where to store the runs' folders")
    opts = parser.parse_args()
    import torch  # only for the release's folder name

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    record(opts.out or ROOT / "tests" / "traces" / "cache" / f"torch-{release}-ranks")


if __name__ == "__main__":
    main()
