"""How fast does dynscope.load read a big report? Target: a 100 MB report in under 10 s.

Builds a real report (a small transformer-like model with graph breaks and a recompile,
captured by dynscope.report), replicates its graphs with dataclasses.replace until the
JSON reaches about TARGET_MB, saves it, then times dynscope.load (best of REPEATS) and
checks the loaded report equals the saved one.

    .venv/bin/python benchmarks/load_speed.py [TARGET_MB]
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from examples.quickstart import build

TARGET_MB = 100.0
REPEATS = 2


def big_report(target_mb: float) -> dynscope.Report:
    """A real report whose graphs are copied (with new ids) until the JSON is ~target_mb."""
    torch.manual_seed(0)
    model, calls = build()
    rep = dynscope.report(model, **calls)
    one = sum(len(dynscope.Report(graphs=(g,)).to_json()) for g in rep.graphs) / len(rep.graphs)
    copies = max(1, int(target_mb * 1e6 / one))
    graphs = tuple(
        dataclasses.replace(rep.graphs[i % len(rep.graphs)], id=i) for i in range(copies)
    )
    return dataclasses.replace(rep, graphs=graphs)


def main() -> None:
    target = float(sys.argv[1]) if len(sys.argv) > 1 else TARGET_MB
    rep = big_report(target)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        start = time.perf_counter()
        rep.save(path)
        save_s = time.perf_counter() - start
        size_mb = path.stat().st_size / 1e6
        times = []
        back = None
        for _ in range(REPEATS):
            start = time.perf_counter()
            back = dynscope.load(path)
            times.append(time.perf_counter() - start)
        assert back == rep, "the loaded report differs from the saved one"
    best = min(times)
    nodes = sum(len(g.nodes) for g in rep.graphs)
    print(f"report: {size_mb:.1f} MB, {len(rep.graphs)} graphs, {nodes} nodes")
    print(f"save:   {save_s:.2f} s ({size_mb / save_s:.1f} MB/s)")
    print(f"load:   {best:.2f} s best of {REPEATS} ({size_mb / best:.1f} MB/s); all: "
          + ", ".join(f"{t:.2f} s" for t in times))


if __name__ == "__main__":
    main()
