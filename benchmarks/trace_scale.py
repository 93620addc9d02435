"""How does ``dynscope trace`` scale to a big job's TORCH_TRACE folder, beside tlparse?

Goal (issue 21): on a 256-rank folder of about 1 GB, ``dynscope trace FOLDER -o OUT`` is
faster than ``tlparse FOLDER --all-ranks-html``, its peak memory is flat in the number of
ranks, and its merged index.html is under 1.5 MB and names the diverging ranks first.

1. A real job, run once and cached under /tmp/dynscope-trace-scale/job-4ranks/: 4 ranks of
   gloo DDP under ``torchrun --standalone --nproc-per-node=4`` (this file with ``--rank-child``),
   a 4-layer MLP compiled with the default Inductor backend (DDP's optimizer splits it at
   buckets; every rank its own fresh Inductor cache, so every compile writes its full
   records), 4 SGD steps, the third on a smaller batch (a recompile on every rank). Two
   ranks differ on purpose: rank 1 prints inside forward (a graph break only it has), rank
   3 runs an evaluation pass under ``torch.no_grad()`` (a recompile only it has).
2. That job's logs replicated to ``--ranks`` ranks of about ``--target-mb`` in all: most
   ranks are copies of the plain ranks 0 and 2; a few are copies of rank 1 (the extra
   break) or rank 3 (the extra recompile), so the merged report has divergences to name.
   Each copy gets its rank in the file name (``dedicated_log_torch_trace_rank_<r>_<random>.log``)
   and in the ``"rank"`` field of each record's metadata; payloads are untouched (their MD5
   still holds). When one rank's share of the target is larger than its source log, the
   source's compiles are appended again under new frame ids (a rank that compiled more
   frames of the same model). One copy of each kind is checked: tlparse and load_trace
   read it to the same counts (tests/tlparse_counts.py).
3. Timed side by side, 3 rounds interleaved, each command in a fresh process: wall time
   (median), peak memory of the whole process tree (RSS of the process and its children
   summed, polled every 20 ms from /proc), seconds per MB, and the size of dynscope's
   index.html; then dynscope alone at 16, 64 and 256 ranks (the same bytes per rank).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trace_scale.py [--ranks 256] [--target-mb 1000]
        [--rounds 3] [--scaling 16,64,256] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CACHE = Path("/tmp/dynscope-trace-scale")
JOB_RANKS = 4
LOG_PREFIX = "dedicated_log_torch_trace_"  # torch/_logging/_internal.py LOG_PREFIX
WIDTH = 512  # 512 x 512 float32 = 1 MiB per layer: with bucket_cap_mb=1, a bucket per layer
LAYERS = 4
BREAK_RANK, EVAL_RANK = 1, 3  # the job's two ranks that differ (see the module docstring)
PLAIN_RANKS = (0, 2)
POLL_S = 0.02
JOB_TIMEOUT_S = 3600
RUN_TIMEOUT_S = 3600


# --- 1. the job: one rank (run under torchrun) ------------------------------------------------


def rank_child() -> None:
    """One rank of the job (``torchrun ... trace_scale.py --rank-child``)."""
    local = os.environ["LOCAL_RANK"]
    # A fresh Inductor cache per rank: every compile is a miss and logs all it does, and
    # ranks never race on one cache folder.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(os.environ["TRACE_SCALE_CACHES"]) / f"rank-{local}")
    import torch
    import torch.distributed as dist
    from torch import nn

    class Mlp(nn.Module):
        def __init__(self, plant_break: bool) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS))
            self.plant_break = plant_break

        def _run(self, x: torch.Tensor, first: int, last: int) -> torch.Tensor:
            for layer in self.layers[first:last]:
                x = torch.relu(layer(x))
            return x

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self._run(x, 0, LAYERS // 2)
            # Outside the loop: a break inside one makes Dynamo give up on the whole frame.
            if self.plant_break:
                print("rank-dependent print")  # a graph break on this rank only
            return self._run(x, LAYERS // 2, LAYERS)

    # Before any compile: the trace file takes its rank_<r>_ name only when the process
    # group is up by the first record.
    dist.init_process_group("gloo")
    try:
        rank = dist.get_rank()
        torch.manual_seed(0)
        ddp = nn.parallel.DistributedDataParallel(torch.compile(Mlp(plant_break=rank == BREAK_RANK)), bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for step, batch in enumerate((8, 8, 6, 8)):  # 8 -> 6: a recompile (batch made dynamic)
            loss = ddp(torch.randn(batch, WIDTH)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if rank == EVAL_RANK and step == 1:
                with torch.no_grad():  # grad mode off: a recompile on this rank only
                    ddp(torch.randn(8, WIDTH))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def job_logs() -> dict[int, Path]:
    """The job's rank logs, run once and cached: {rank: log}."""
    folder = CACHE / "job-4ranks"
    done = folder / "done.json"
    if done.exists():
        return {int(r): folder / name for r, name in json.loads(done.read_text())["logs"].items()}
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="trace-scale-") as tmp:
        trace_dir = Path(tmp) / "trace"
        env = dict(os.environ)
        for k in list(env):
            if k.startswith(("TORCH_TRACE", "TORCH_LOGS")):
                del env[k]
        env.update(
            TORCH_TRACE=str(trace_dir), TRACE_SCALE_CACHES=str(Path(tmp) / "caches"), CUDA_VISIBLE_DEVICES="",
            OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1", PYTHONPATH=str(ROOT),
        )
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={JOB_RANKS}",
               str(Path(__file__).resolve()), "--rank-child"]
        print(f"running the {JOB_RANKS}-rank job once (Inductor, a few minutes): {' '.join(cmd)}", flush=True)
        started = time.perf_counter()
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
            raise SystemExit(f"the job exited with {proc.returncode}")
        logs: dict[int, str] = {}
        for p in sorted(trace_dir.glob(f"{LOG_PREFIX}rank_*.log")):
            rank = int(re.search(r"_rank_(\d+)_", p.name).group(1))  # type: ignore[union-attr]
            shutil.move(p, folder / p.name)
            logs[rank] = p.name
        if sorted(logs) != list(range(JOB_RANKS)):
            raise SystemExit(f"expected {JOB_RANKS} rank logs, got {sorted(logs)} in {trace_dir}")
        done.write_text(json.dumps({"logs": logs, "seconds": time.perf_counter() - started, "command": cmd}))
    return job_logs()


# --- 2. replicated and varied -----------------------------------------------------------------

_RANK_FIELD = re.compile(rb'"rank": \d+')
_FRAME_ID = re.compile(rb'"frame_id": (\d+)')


def _records(data: bytes) -> list[bytes]:
    """A log cut into records: each a first line and the tab-led payload lines after it."""
    starts = [0] + [m.end() for m in re.finditer(rb"\n(?!\t)", data) if m.end() < len(data)]
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]


def _with_rank(record: bytes, rank: int) -> bytes:
    """The record with its metadata's "rank" field set to ``rank`` (payload untouched)."""
    nl = record.find(b"\n")
    head, rest = (record, b"") if nl < 0 else (record[:nl], record[nl:])
    return _RANK_FIELD.sub(b'"rank": %d' % rank, head) + rest


def _shift_frames(record: bytes, by: int) -> bytes:
    """The record's frame id moved up by ``by`` (its compile counted as another frame's)."""
    nl = record.find(b"\n")
    head, rest = (record, b"") if nl < 0 else (record[:nl], record[nl:])
    return _FRAME_ID.sub(lambda m: b'"frame_id": %d' % (int(m.group(1)) + by), head) + rest


def grown(data: bytes, size: int) -> bytes:
    """The log, its compiles appended again under new frame ids until it is ``size`` bytes
    or more (records outside any compile, such as interned strings, are not repeated)."""
    if len(data) >= size:
        return data
    records = _records(data)
    compiles = [r for r in records if _FRAME_ID.search(r[: r.find(b"\n") if b"\n" in r else len(r)])]
    frames = [int(m.group(1)) for r in compiles if (m := _FRAME_ID.search(r))]
    span = max(frames) + 1 if frames else 1
    pieces, total, copy = [data], len(data), 1
    while total < size and compiles:
        for r in compiles:
            piece = _shift_frames(r, span * copy)
            pieces.append(piece)
            total += len(piece)
        copy += 1
    return b"".join(pieces)


def diverging(ranks: int) -> tuple[list[int], list[int]]:
    """The ranks given the extra break and the extra recompile: a few, spread out."""
    pick = sorted({max(1, min(ranks - 1, round(ranks * f))) for f in (0.15, 0.41, 0.78)})
    extra = sorted({max(1, min(ranks - 1, round(ranks * f))) for f in (0.6, 1.0)} - set(pick))
    return pick, extra


def make_folder(ranks: int, target_mb: float) -> Path:
    """The replicated folder (cached): ``ranks`` rank logs of about ``target_mb`` MB in all."""
    per_rank = int(target_mb * 1e6 / ranks)
    folder = CACHE / f"ranks-{ranks}-{per_rank // 1000}kb"
    done = folder / "done.json"
    if done.exists():
        return folder
    base = job_logs()
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    breaks, recompiles = diverging(ranks)
    sources = {r: BREAK_RANK if r in breaks else EVAL_RANK if r in recompiles else PLAIN_RANKS[r % 2] for r in range(ranks)}
    grown_base = {r: _records(grown(p.read_bytes(), per_rank)) for r, p in base.items()}
    rng = random.Random(0)
    for r in range(ranks):
        suffix = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
        out = folder / f"{LOG_PREFIX}rank_{r}_{suffix}.log"
        with out.open("wb") as f:
            for record in grown_base[sources[r]]:
                f.write(_with_rank(record, r))
    total = sum(p.stat().st_size for p in folder.glob("*.log"))
    done.write_text(json.dumps({"ranks": ranks, "bytes": total, "break_ranks": breaks, "recompile_ranks": recompiles}))
    return folder


def check_varied(folder: Path) -> None:
    """One copy of each kind reads to the same counts in both tools."""
    import dynscope
    from tests.tlparse_counts import dynscope_counts, tlparse_counts

    meta = json.loads((folder / "done.json").read_text())
    for rank in (0, meta["break_ranks"][0], (meta["recompile_ranks"] or [0])[0]):
        (log,) = folder.glob(f"{LOG_PREFIX}rank_{rank}_*.log")
        with tempfile.TemporaryDirectory() as tmp:
            theirs = tlparse_counts(log, Path(tmp) / "tl")
        rep = dynscope.load_trace(log)
        ours = dynscope_counts(rep)
        assert isinstance(rep, dynscope.Report) and rep.rank == rank, (rep.rank, rank)
        assert ours == theirs, f"rank {rank}: dynscope {ours} != tlparse {theirs}"
        print(f"  rank {rank}: both read {len(ours.compile_ids)} compiles, {ours.graph_breaks} breaks, "
              f"{ours.recompiles} recompiles, {ours.failures} failures")


# --- 3. measured --------------------------------------------------------------------------------


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children", encoding="ascii") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            pass
    return out


def _tree_rss_kb(root: int) -> int:
    """RSS of a process and all its descendants, summed."""
    total, todo, seen = 0, [root], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _rss_kb(pid)
        todo.extend(_children(pid))
    return total


@dataclass
class Run:
    wall_s: float
    peak_mb: float


def measure(cmd: list[str], env: dict[str, str]) -> Run:
    """Run a command in a fresh process; its wall time and the peak RSS of its process tree."""
    peak = 0
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()

    def poll() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            stop.wait(POLL_S)

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        _, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    finally:
        wall = time.perf_counter() - started
        stop.set()
        watcher.join()
    # Exit 1 from dynscope is its --fail-on-* gates; nothing here asks for them.
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{err.decode(errors='replace')[-4000:]}")
    return Run(wall, peak / 1024)


def commands(folder: Path, out: Path, jobs: int | None) -> dict[str, list[str]]:
    from tests.tlparse_counts import tlparse_binary

    ds = [sys.executable, "-m", "dynscope", "trace", str(folder), "-o", str(out / "dynscope")]
    if jobs is not None:
        ds += ["--jobs", str(jobs)]
    tl = [str(tlparse_binary()), str(folder), "--all-ranks-html", "-o", str(out / "tlparse"), "--overwrite", "--no-browser"]
    return {"dynscope": ds, "tlparse": tl}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TRACE", "TORCH_LOGS"))}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT), NO_COLOR="1")
    return env


def page_check(out: Path, folder: Path) -> tuple[int, bool]:
    """Size of dynscope's merged index.html, and whether the diverging ranks are named
    before anything else about ranks (the first "rank N" on the page is one of them)."""
    page = (out / "dynscope" / "index.html").read_text(encoding="utf-8")
    meta = json.loads((folder / "done.json").read_text())
    diverging_ranks = {*meta["break_ranks"], *meta["recompile_ranks"]}
    body = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", body)
    first = re.search(r"\branks? (\d+)", text)
    return len(page.encode("utf-8")), first is not None and int(first.group(1)) in diverging_ranks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--target-mb", type=float, default=1000.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--scaling", default="16,64,256", help="rank counts dynscope runs alone at (the same MB per rank)")
    ap.add_argument("--jobs", type=int, default=None, help="dynscope trace --jobs (default: its own)")
    args = ap.parse_args()
    if args.rank_child:
        rank_child()
        return

    base = job_logs()
    print("job logs: " + ", ".join(f"rank {r} {p.stat().st_size / 1e6:.2f} MB" for r, p in sorted(base.items())))
    folder = make_folder(args.ranks, args.target_mb)
    meta = json.loads((folder / "done.json").read_text())
    size_mb = meta["bytes"] / 1e6
    print(f"folder: {folder} ({args.ranks} ranks, {size_mb:.0f} MB; extra break on ranks {meta['break_ranks']}, "
          f"extra recompile on ranks {meta['recompile_ranks']})")
    print("varied logs read alike:")
    check_varied(folder)

    env = _env()
    runs: dict[str, list[Run]] = {"dynscope": [], "tlparse": []}
    with tempfile.TemporaryDirectory(prefix="trace-scale-out-") as tmp:
        out = Path(tmp)
        cmds = commands(folder, out, args.jobs)
        for i in range(args.rounds):
            order = ["dynscope", "tlparse"] if i % 2 == 0 else ["tlparse", "dynscope"]
            for name in order:
                shutil.rmtree(out / name, ignore_errors=True)
                r = measure(cmds[name], env)
                runs[name].append(r)
                print(f"  round {i + 1} {name:8}: {r.wall_s:7.2f} s, peak {r.peak_mb:7.0f} MB", flush=True)
        page_bytes, named_first = page_check(out, folder)

    def row(name: str) -> tuple[float, float]:
        return statistics.median(r.wall_s for r in runs[name]), max(r.peak_mb for r in runs[name])

    (dw, dm), (tw, tm) = row("dynscope"), row("tlparse")
    print(f"\n{args.ranks} ranks, {size_mb:.0f} MB, {args.rounds} rounds interleaved (median wall, highest peak):")
    print(f"{'':10} {'wall s':>8} {'s/MB':>8} {'peak MB':>9}")
    print(f"{'dynscope':10} {dw:8.2f} {dw / size_mb:8.4f} {dm:9.0f}")
    print(f"{'tlparse':10} {tw:8.2f} {tw / size_mb:8.4f} {tm:9.0f}")
    print(f"ratio dynscope/tlparse: wall {dw / tw:.2f}x, peak memory {dm / tm:.2f}x")
    print(f"dynscope's merged index.html: {page_bytes / 1e6:.2f} MB (goal < 1.5 MB); "
          f"diverging ranks named first: {'yes' if named_first else 'NO'}")

    print(f"\ndynscope alone by ranks ({meta['bytes'] / args.ranks / 1e6:.2f} MB per rank):")
    print(f"{'ranks':>6} {'MB':>7} {'wall s':>8} {'s/MB':>8} {'peak MB':>9}")
    peaks: dict[int, float] = {}
    for n in (int(x) for x in args.scaling.split(",") if x.strip()):
        f = make_folder(n, args.target_mb * n / args.ranks)
        mb = json.loads((f / "done.json").read_text())["bytes"] / 1e6
        with tempfile.TemporaryDirectory(prefix="trace-scale-out-") as tmp:
            r = measure(commands(f, Path(tmp), args.jobs)["dynscope"], env)
        peaks[n] = r.peak_mb
        print(f"{n:6} {mb:7.0f} {r.wall_s:8.2f} {r.wall_s / mb:8.4f} {r.peak_mb:9.0f}", flush=True)
    if len(peaks) > 1:
        (lo, lo_mb), (hi, hi_mb) = min(peaks.items()), max(peaks.items())
        print(f"peak memory {hi} ranks / {lo} ranks: {hi_mb / lo_mb:.2f}x "
              f"({(hi_mb - lo_mb) / (hi - lo):.2f} MB more per rank; flat would be about 1x)")


if __name__ == "__main__":
    main()
