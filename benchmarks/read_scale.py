"""Reading TORCH_TRACE logs in linear time and bounded memory (issue 44).

Generates the inputs in a temporary folder, reads each in a fresh child process (so peak
memory is that read's own: the process's VmHWM, beside it after imports; Linux) and
prints MB/s and peak memory side by side:

- ``log``: ordinary records, a real Inductor train step's log (tests/traces/torch-2.13/logs/
  inductor-train.log) repeated to the size, read by ``read_log`` (every record's kind
  decided, the kept ones parsed into events);
- ``line``: one ``inductor_output_code`` record whose payload is one line of the size (its
  MD5 right, so the whole payload is checked; the first ``PAYLOAD_CAP`` bytes kept);
- ``bomb``: a ``.gz`` log whose first record is real and the rest zeros (gzip's best ratio,
  about 1000:1), read by ``load_trace``: it must stop with DecompressionLimitError at
  ``GZIP_MAX_RATIO`` times its size;
- ``ranks``: a folder of N rank logs (a real 2-graph log each), read and merged by
  ``load_trace``; and two ranks 0 and 99,999,999,999 (missing ranks said as ranges).

``log`` and ``line`` are also read at a quarter of the size: the time ratio (quarter to whole)
should be about 4 when the reading is linear.

    .venv/bin/python benchmarks/read_scale.py              # 256 MB, 1,000 ranks
    .venv/bin/python benchmarks/read_scale.py --big        # 1 GB, 10,000 ranks (about 4 GB of /tmp)
    .venv/bin/python benchmarks/read_scale.py --mb 64 --ranks 100 --only line,ranks

Needs free space in the temporary folder of about 2.3 times the size (removed at the end).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "tests/traces/torch-2.13/logs/inductor-train.log"
SMALL = ROOT / "tests/traces/torch-2.13/logs/corpus-print_break.log"
sys.path.insert(0, str(ROOT))
from tests.corpus.job_logs import record_bytes  # noqa: E402 - after the path

CHILD_TIMEOUT_S = 1800
MB = 1 << 20
PREFIX = b"V1201 14:51:53.005000 22876 torch/_inductor/graph.py:2745] "

# What a child runs: read one input, print seconds, peak RSS and what came out.
CHILD = r"""
import json, sys, time
import dynscope
from dynscope._torch.trace_log import read_log
def hwm():  # peak RSS of this process image, MiB (getrusage's maxrss keeps the parent's across exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
case, path = sys.argv[1], sys.argv[2]
rss0 = hwm()
start = time.perf_counter()
out = {}
try:
    if case in ("log", "line"):
        log = read_log(path)
        out["events"] = len(log.events)
        out["said"] = [k for k in log.unreadable if "payload of" in k][:1]
    else:
        rep = dynscope.load_trace(path)
        out["ranks"] = len(getattr(rep, "reports", [rep]))
        out["said"] = [n for n in getattr(rep, "notes", ()) if "wrote no" in n][:1]
except dynscope.DynscopeError as err:
    out["raised"] = f"{type(err).__name__}: {err}"
out["seconds"] = time.perf_counter() - start
out["rss0_mb"] = rss0
out["peak_mb"] = hwm()
print(json.dumps(out))
"""


def make_log(path: Path, size: int) -> None:
    """Ordinary records: a real log's, repeated to ``size`` bytes."""
    base = LOG.read_bytes()
    with path.open("wb") as f:
        written = 0
        while written < size:
            f.write(base)
            written += len(base)


def make_line(path: Path, size: int) -> None:
    """One record whose payload is one line of ``size`` bytes, with its MD5."""
    piece = b"buf0 = empty_strided_cpu((8, 64), (64, 1), torch.float32); " * (MB // 60)
    n = max(1, size // len(piece))
    md5 = hashlib.md5(usedforsecurity=False)
    for _ in range(n):
        md5.update(piece)
    meta = {"inductor_output_code": {"filename": "/tmp/x.py"}, "frame_id": 0, "frame_compile_id": 0,
            "attempt": 0, "has_payload": md5.hexdigest()}
    with path.open("wb") as f:
        f.write(PREFIX + json.dumps(meta).encode() + b"\n\t")
        for _ in range(n):
            f.write(piece)
        f.write(b"\n")


def make_bomb(path: Path, compressed: int) -> None:
    """A ``.gz`` log: a real first record, then gzip members of zeros to ``compressed`` bytes."""
    first = record_bytes(SMALL.read_bytes())[0]
    member = gzip.compress(b"\t" + bytes(64 * MB), compresslevel=9)  # ~64 KB each
    with path.open("wb") as f:
        f.write(gzip.compress(first))
        for _ in range(max(1, compressed // len(member))):
            f.write(member)


def make_ranks(folder: Path, ranks: list[int]) -> None:
    folder.mkdir()
    for r in ranks:
        shutil.copyfile(SMALL, folder / f"dedicated_log_torch_trace_rank_{r}_x{r}.log")


def child(case: str, path: Path, code: Path) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    proc = subprocess.run([sys.executable, "-c", CHILD, case, str(path)], env=env, cwd=code, capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        return {"failed": (proc.stderr.strip().splitlines() or ["?"])[-1], "seconds": float("nan"),
                "peak_mb": float("nan"), "rss0_mb": float("nan")}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=256, help="size of the log and the line (MB; default 256)")
    ap.add_argument("--big", action="store_true", help="1 GB log and line, 10,000 ranks")
    ap.add_argument("--ranks", type=int, default=1000, help="rank files (default 1,000)")
    ap.add_argument("--only", default="log,line,bomb,ranks", help="cases to run, comma-separated")
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose dynscope reads (to compare)")
    args = ap.parse_args()
    size = int((1024 if args.big else args.mb) * MB)
    ranks = 10_000 if args.big else args.ranks
    only = set(args.only.split(","))
    rows: list[tuple[str, float, dict[str, object]]] = []
    with tempfile.TemporaryDirectory(prefix="dynscope-read-scale-") as tmp:
        t = Path(tmp)
        for case, make in (("log", make_log), ("line", make_line)):
            if case not in only:
                continue
            times = []
            for part in (size // 4, size):
                p = t / f"{case}-{part}.log"
                make(p, part)
                mb = p.stat().st_size / MB
                got = child(case, p, args.code)
                p.unlink()
                rows.append((f"{case} {mb:,.0f} MB", mb, got))
                times.append(float(got["seconds"]))  # type: ignore[arg-type]
            print(f"{case}: time ratio whole/quarter {times[1] / times[0]:.2f} (linear: about 4)", flush=True)
        if "bomb" in only:
            p = t / "bomb.log.gz"
            make_bomb(p, size // 22)  # the issue's: 46 MB of gzip for a 1 GB run
            rows.append((f"gzip bomb {p.stat().st_size / MB:,.1f} MB", p.stat().st_size / MB, child("bomb", p, args.code)))
        if "ranks" in only:
            folder = t / "ranks"
            make_ranks(folder, list(range(ranks)))
            mb = sum(f.stat().st_size for f in folder.iterdir()) / MB
            rows.append((f"{ranks:,} rank files", mb, child("ranks", folder, args.code)))
            shutil.rmtree(folder)
            make_ranks(folder, [0, 99_999_999_999])
            rows.append(("ranks 0 and 99,999,999,999", 2 * SMALL.stat().st_size / MB, child("ranks", folder, args.code)))
    print(f"\n{'input':<28} {'MB':>8} {'seconds':>8} {'MB/s':>8} {'peak MB':>8} {'after import':>12}  result")
    for name, mb, got in rows:
        s = float(got["seconds"])  # type: ignore[arg-type]
        said = got.get("failed") or got.get("raised") or (got.get("said") or [""])[0]  # type: ignore[index]
        what = f"{got['events']} events" if "events" in got else f"{got.get('ranks', '')} ranks" if "ranks" in got else ""
        print(f"{name:<28} {mb:>8,.1f} {s:>8.2f} {mb / s if s else 0:>8.1f} {got['peak_mb']:>8.0f} "
              f"{got['rss0_mb']:>12.0f}  {what} {str(said)[:160]}")


if __name__ == "__main__":
    main()
