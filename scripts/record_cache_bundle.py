"""Record a cache-artifact bundle (the "mega-cache") and the runs that test what it predicts.

    .venv/bin/python scripts/record_cache_bundle.py [OUT]

Writes under OUT (default ``tests/traces/cache/torch-<major.minor>-bundle``), each run a fresh
process with a cache folder of its own (another machine) and its own TORCH_TRACE folder:

- ``made/``: the program compiled on an empty cache, then ``torch.compiler.save_cache_artifacts()``
  written to ``bundle.bin`` (the "build machine");
- ``here/``: the same program on another empty cache, the bundle not loaded (the machine it
  is meant for, as it is): its keys are what that machine makes;
- ``threads/``: the same with ``OMP_NUM_THREADS=2`` (a machine with another core count);
- ``loaded/`` and ``loaded-threads/``: the two again, each after ``load_cache_artifacts(bundle)``:
  what PyTorch itself does with the bundle there (hits, or misses), the truth a prediction from
  ``here/`` and ``threads/`` must match.

Every child runs under a time limit with ``CUDA_VISIBLE_DEVICES=""`` and ``OMP_NUM_THREADS=1``
unless said.
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
import sys
from pathlib import Path

import torch

bundle = Path(sys.argv[2])
if sys.argv[1] == "load":
    torch.compiler.load_cache_artifacts(bundle.read_bytes())


def f(x, y):
    return (x * 2 + y).relu().sum(dim=0)


print(torch.compile(f)(torch.ones(8, 4), torch.ones(8, 4)).tolist())
if sys.argv[1] == "save":
    saved = torch.compiler.save_cache_artifacts()
    assert saved is not None, "nothing to save"
    bundle.write_bytes(saved[0])
'''

#: run name -> (what the program does with the bundle, OMP_NUM_THREADS)
RUNS = {"made": ("save", "1"), "here": ("none", "1"), "threads": ("none", "2"), "loaded": ("load", "1"),
        "loaded-threads": ("load", "2")}
TIMEOUT_S = 600


def record(out: Path) -> None:
    """Run every run of RUNS in order, each on an empty cache folder, and store the logs."""
    work = Path(tempfile.mkdtemp(prefix="dynscope-cache-bundle-"))
    try:
        program = work / "program.py"
        program.write_text(PROGRAM, encoding="utf-8")
        bundle = work / "bundle.bin"
        for name, (does, threads) in RUNS.items():
            trace = work / f"trace-{name}"
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(work / f"cache-{name}"), "TORCH_TRACE": str(trace),
                   "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": threads}
            done = subprocess.run([sys.executable, str(program), does, str(bundle)], env=env, cwd=work,
                                  timeout=TIMEOUT_S, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"run {name!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            (log,) = sorted(trace.glob("dedicated_log_torch_trace*.log"))
            store([log], out / name)
            print(f"{name}: {log.stat().st_size:,} bytes -> {out / name}", flush=True)
        shutil.copyfile(bundle, out / "bundle.bin")
        print(f"bundle.bin: {bundle.stat().st_size:,} bytes", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="where to store the runs and the bundle")
    opts = parser.parse_args()
    import torch  # only for the release's folder name

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    record(opts.out or ROOT / "tests" / "traces" / "cache" / f"torch-{release}-bundle")


if __name__ == "__main__":
    main()
