"""What compile did to memory, per graph and end to end: dynscope beside an independent measurement.

Issue 23's tables for two training steps (tests/memory_timeline.py): a nanoGPT-like step
(vocab 128, 64 dims, 4 heads, seq 32, batch 8, AdamW) and a conv net (conv/bn/relu/pool x2,
linear; batch 16 of 3x32x32, SGD with momentum). For each:

- per graph, ``report(memory=True)``'s peaks (forward, and forward+backward for training
  graphs), eager and compiled, each beside the profiler's memory timeline measured on the
  same graph recorded by a backend of the benchmark's own (the compiled side its own
  ``compile_fx`` build) and their relative difference; the compiled/eager ratio; the bytes
  saved for the backward, eager and compiled (dynscope's live count), AOTAutograd's
  partitioner's saved bytes (static) and how many forward nodes the backward recomputes;
- the whole call's peak, eager and compiled, beside the timeline of one whole call each
  (``torch.compile`` of the step from a fresh Dynamo state, after a warm call);
- the wall time of ``report(memory=True)`` against ``report()``, with a cold Inductor cache
  (a fresh cache folder, as a first run is) and again with the cache it left.

Peaks are bytes above what was allocated before the run (inputs, parameters), CPU, from the
profiler (dynscope: its allocation events summed; the timeline: the memory profiler's
per-tensor timeline). Plain print, no assertions; tests/capture/test_memory.py asserts.

Run:  OMP_NUM_THREADS=1 .venv/bin/python benchmarks/memory_table.py [gpt] [conv] [--warm-cache]
(about 3 minutes for both with a cold cache)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import dynscope  # noqa: E402
from tests import memory_timeline as mt  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

PROGRAMS: dict[str, Callable[[], mt.Program]] = {"gpt": mt.gpt_program, "conv": mt.conv_program}


def kib(n: int) -> str:
    """Bytes as KiB with one decimal; "-" when not measured (negative)."""
    return "-" if n < 0 else f"{n / 1024:,.1f}"


def diff(got: int, expected: int) -> str:
    """dynscope's figure against the timeline's, signed percent."""
    if expected == 0:
        return "0.0%" if got == 0 else "inf"
    return f"{(got - expected) / expected:+.1%}"


def table(rows: list[list[str]], header: list[str]) -> str:
    """Right-aligned columns (the first left-aligned), a rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def graph_rows(rep: Any, ind: mt.Independent) -> list[list[str]]:
    """Per graph a forward row, and a fwd+bwd row for a training graph."""
    rows: list[list[str]] = []
    for g, peaks in zip(rep.graphs, ind.peaks, strict=True):
        m = g.memory
        name = f"{g.id} {g.frame[:28]}"
        if m is None or m.error:
            rows.append([name, "not measured: " + (m.error if m is not None else "no memory")] + [""] * 11)
            continue
        low = g.lowering
        sft = low.saved_for_backward if low is not None else None
        runs = [("forward", (m.eager_peak, m.compiled_peak), peaks.forward)]
        if m.trains and peaks.train is not None:
            runs.append(("fwd+bwd", (m.eager_train_peak, m.compiled_train_peak), peaks.train))
        for i, (what, (eager, compiled), (t_eager, t_compiled)) in enumerate(runs):
            last = i == len(runs) - 1  # saved bytes belong to the graph: on its last row
            rows.append([
                name if i == 0 else "", what,
                kib(eager), kib(t_eager), diff(eager, t_eager),
                kib(compiled), kib(t_compiled), diff(compiled, t_compiled),
                f"{compiled / eager:.2f}x" if eager else "-",
                kib(m.eager_saved) if last else "", kib(m.compiled_saved) if last else "",
                (kib(sft.bytes) if sft is not None else "-") if last else "",
                (str(len(low.recomputed)) if low is not None and low.backward is not None else "-") if last else "",
            ])
    return rows


GRAPH_HEADER = [
    "graph", "run", "eager KiB", "timeline", "diff", "compiled KiB", "timeline", "diff", "ratio",
    "saved eager", "saved compiled", "AOT saved", "recomputed",
]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def one(name: str) -> None:
    """The tables and times of one program."""
    make = PROGRAMS[name]
    prog = make()
    plain_s, _ = timed(lambda: dynscope.report(prog.step, prog.args))
    prog = make()
    memory_s, rep = timed(lambda: dynscope.report(prog.step, prog.args, memory=True))
    ind_s, ind = timed(lambda: mt.measure_independently(make))
    prog = make()
    warm_s, _ = timed(lambda: dynscope.report(prog.step, prog.args, memory=True))

    print(f"\n== {prog.name} ==\n")
    print(table(graph_rows(rep, ind), GRAPH_HEADER))
    print("\nsaved: bytes kept for the backward, per storage, inputs' own storages apart (KiB); "
          "AOT saved: the partitioner's list (static, primals apart); recomputed: forward nodes the backward recomputes")
    mem = rep.memory
    print("\nwhole call (one step after a warm step):")
    if mem is None or mem.error:
        print(f"  not measured: {mem.error if mem is not None else 'no memory'}")
    else:
        rows = [
            ["eager", kib(mem.eager_peak), kib(ind.eager_call.peak), diff(mem.eager_peak, ind.eager_call.peak)],
            ["compiled", kib(mem.compiled_peak), kib(ind.compiled_call.peak),
             diff(mem.compiled_peak, ind.compiled_call.peak)],
            ["ratio", f"{mem.ratio:.2f}x",
             f"{ind.compiled_call.peak / ind.eager_call.peak:.2f}x" if ind.eager_call.peak else "-", ""],
        ]
        print(table(rows, ["", "dynscope KiB", "timeline KiB", "diff"]))
    cost = rep.timing_cost
    phases = ", ".join(f"{p} {s:.1f} s" for p, s in cost.phases) if cost is not None else "-"
    print(f"\nwall time: report() {plain_s:.1f} s; report(memory=True) {memory_s:.1f} s "
          f"({memory_s / plain_s:.1f}x), with the Inductor cache it left {warm_s:.1f} s ({warm_s / plain_s:.1f}x)")
    print(f"  report(memory=True) by phase: {phases}; dynscope's own builds: {rep.compile_time.measure_builds}")
    print(f"  (the independent measurement took {ind_s:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", help=f"some of {', '.join(PROGRAMS)} (default: all)")
    parser.add_argument("--warm-cache", action="store_true", help="keep Inductor's usual cache folder (default: a fresh one)")
    args = parser.parse_args()
    unknown = [p for p in args.programs if p not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program {', '.join(unknown)}; choose from {', '.join(PROGRAMS)}")
    if not args.warm_cache:
        # Read by Inductor at each cache lookup: set before the first compile, every build starts cold.
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynscope-memory-table-")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, Inductor cache "
          f"{'as found' if args.warm_cache else 'fresh (cold compiles)'}")
    dynscope.report(lambda x: x + 1, torch.ones(1))  # PyTorch's first-compile setup, in neither figure
    start = time.perf_counter()
    for name in args.programs or list(PROGRAMS):
        one(name)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
