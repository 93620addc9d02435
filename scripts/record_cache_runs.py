"""Record the compile caches at work, as test data: one tiny program run in fresh processes
that share one Inductor cache folder, each with its own TORCH_TRACE folder.

    .venv/bin/python scripts/record_cache_runs.py [OUT]

writes, under OUT (default ``tests/traces/cache/torch-<major.minor>``), one folder per run,
each holding the one TORCH_TRACE log that run wrote (gzip-compressed):

- ``cold``: the program against an empty cache (every lookup misses and fills the cache);
- ``unchanged``: the same program again (every lookup hits);
- ``config``: one Inductor option changed (``max_autotune = True``);
- ``dtype``: one input's dtype changed (``y`` float64 instead of float32);
- ``source``: one source line changed (``x * 2`` became ``x * 3``);
- ``freezing``: ``torch._inductor.config.freezing = True`` (the caches are bypassed);
- ``stride``: input ``y`` transposed (the same shape, strides (1, 8) instead of (4, 1));
- ``threads``: ``OMP_NUM_THREADS=2`` (another machine's core count: CPU code specialises on it).

The runs go one after the other (each compile is seconds on a CPU), every one against the
cache ``cold`` filled; each is ``cold``'s pair for ``dynscope.cache_diff``. Each child runs
with ``CUDA_VISIBLE_DEVICES=""`` and ``OMP_NUM_THREADS=1`` (``threads``: 2), under a time limit. The program
file keeps its path across runs, so only the planted change differs. ``--aot-debug`` also
turns on the DEBUG logger of AOTAutograd's cache, the only way it logs its key's parts.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The program; ``{scale}`` is the line the ``source`` run edits.
PROGRAM = '''\
import sys

import torch

if "--autotune" in sys.argv:
    torch._inductor.config.max_autotune = True
if "--freeze" in sys.argv:
    torch._inductor.config.freezing = True
y_dtype = torch.float64 if "--float64" in sys.argv else torch.float32
y = torch.ones(4, 8, dtype=y_dtype).t() if "--strided" in sys.argv else torch.ones(8, 4, dtype=y_dtype)


def f(x, y):
    z = x * {scale} + y
    return z.relu().sum(dim=0)


g = torch.compile(f)
print(g(torch.ones(8, 4), y).tolist())
'''

#: run name -> (the program's scale, its arguments, OMP_NUM_THREADS): each differs from
#: ``cold`` in one way.
RUNS: dict[str, tuple[int, tuple[str, ...], str]] = {
    "cold": (2, (), "1"),
    "unchanged": (2, (), "1"),
    "config": (2, ("--autotune",), "1"),
    "dtype": (2, ("--float64",), "1"),
    "source": (3, (), "1"),
    "freezing": (2, ("--freeze",), "1"),
    "stride": (2, ("--strided",), "1"),
    "threads": (2, (), "2"),
}
TIMEOUT_S = 600


def store(logs: list[Path], dest: Path) -> None:
    """The logs, gzip-compressed, as the only files of ``dest`` (made afresh). mtime=0: the
    same log compresses to the same bytes. The other recording scripts store theirs with it."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for log in logs:
        with log.open("rb") as src, gzip.GzipFile(dest / f"{log.name}.gz", "wb", mtime=0) as gz:
            shutil.copyfileobj(src, gz)


def record(out: Path, *, aot_debug: bool = False, only: tuple[str, ...] = ()) -> None:
    """Run every run of RUNS (``only``: those, ``cold`` always first) in a fresh process, in
    order, and store each one's log under ``out``."""
    work = Path(tempfile.mkdtemp(prefix="dynscope-cache-runs-"))
    try:
        program = work / "program.py"
        cache = work / "inductor-cache"
        for name, (scale, args, threads) in RUNS.items():
            if only and name != "cold" and name not in only:
                continue
            program.write_text(PROGRAM.format(scale=scale), encoding="utf-8")
            trace = work / f"trace-{name}"
            env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TORCH_TRACE": str(trace),
                   "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": threads}
            if aot_debug:
                env["TORCH_LOGS"] = "+torch._functorch._aot_autograd.autograd_cache"
            done = subprocess.run([sys.executable, str(program), *args], env=env, cwd=work, timeout=TIMEOUT_S,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"run {name!r} failed ({done.returncode}):\n{done.stderr[-3000:]}")
            logs = sorted(trace.glob("dedicated_log_torch_trace*.log"))
            if len(logs) != 1:
                raise SystemExit(f"run {name!r} wrote {len(logs)} logs, not 1: {logs}")
            store(logs, out / name)
            print(f"{name}: {logs[0].stat().st_size:,} bytes -> {out / name}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="where to store the runs' folders")
    parser.add_argument("--aot-debug", action="store_true", help="also log AOTAutograd's key parts")
    parser.add_argument("--only", nargs="+", default=(), choices=sorted(RUNS), metavar="RUN",
                        help="record only these runs (cold, always run first, is stored too)")
    opts = parser.parse_args()
    import torch  # only for the release's folder name

    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    record(opts.out or ROOT / "tests" / "traces" / "cache" / f"torch-{release}", aot_debug=opts.aot_debug,
           only=tuple(opts.only))


if __name__ == "__main__":
    main()
