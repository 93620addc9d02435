"""Below Dynamo, checked on the corpus and the examples: node mapping and kernel times.

    .venv/bin/python benchmarks/lowering.py [--only NAME ...]

Every program runs through ``dynscope.report(timing=True)`` (forward under no_grad, and
forward+backward for graphs that train). For each graph timed through Inductor it prints:

- ``mapped``: Graph.lowering.mapped_share, the share of the Dynamo graph's compute nodes
  that some kernel computes (target >= 0.95), and the nodes no kernel was traced to;
- ``kernels/profiled``: the kernels' summed time over the graph's time in the same profile
  (the rest is the wrapper: allocation, argument checks, launches);
- ``kernels/timer``: the kernels' summed time over the compiled graph's median measured
  without the profiler by dynscope's timer (target within 20%: 0.8 .. 1.2). For a training
  graph both sides are forward+backward;
- ``prof/timer``: the graph's whole time in the profile (kernels and the wrapper) over that
  median: how far the profile itself is from the timer (the profiler adds a little per event).

Side by side, in one run; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dynscope  # noqa: E402
from tests.corpus.programs import PROGRAMS  # noqa: E402

FAST = dynscope.TimingOptions(end_to_end=False, repeats=10, min_time_s=0.05)


def _examples() -> list[tuple[str, Any, dict[str, Any]]]:
    sys.path.insert(0, str(ROOT / "examples"))
    import quickstart  # type: ignore[import-not-found]
    import timing_transformer  # type: ignore[import-not-found]

    model, kw = quickstart.build()
    torch.manual_seed(0)
    block = timing_transformer.Block().eval()
    mlp = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256))

    def train_step(x: torch.Tensor) -> None:
        mlp(x).square().mean().backward()

    return [
        ("example:quickstart", model, kw),
        ("example:timing_transformer", block, {"inputs": [torch.randn(4, 32, 64)]}),
        ("example:mlp_train_step_512", train_step, {"inputs": [torch.randn(512, 256)]}),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", help="program names to run (default: all)")
    args = parser.parse_args()
    jobs: list[tuple[str, Any, dict[str, Any]]] = [(p.name, *_corpus(p)) for p in PROGRAMS]
    jobs += _examples()
    if args.only:
        jobs = [j for j in jobs if j[0] in args.only]
    rows = []
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'program':32} {'graph':>5} {'nodes':>5} {'kern':>4} {'mapped':>6} {'kern/prof':>9} {'kern/timer':>10} {'prof/timer':>10}  unmapped")
    for name, model, kw in jobs:
        torch.manual_seed(0)
        rep = dynscope.report(model, timing=True, timing_options=FAST, **kw)
        for g in rep.graphs:
            t, low = g.timing, g.lowering
            if t is None or t.failed:
                continue
            if low is None:
                print(f"{name:32} {g.id:>5}  no lowering")
                rows.append((name, g.id, None, None, None, None))
                continue
            measured = t.train_compiled_ms if low.backward is not None and t.train_compiled_ms else t.compiled_ms
            kern = low.kernel_ms
            by_prof = kern / low.profiled_ms if kern is not None and low.profiled_ms else None
            by_timer = kern / measured if kern is not None and measured else None
            whole = low.profiled_ms / measured if low.profiled_ms is not None and measured else None
            rows.append((name, g.id, low.mapped_share, by_prof, by_timer, whole))
            print(
                f"{name:32} {g.id:>5} {g.op_count:>5} {len(low.kernels):>4} {low.mapped_share:>6.2f} "
                f"{_f(by_prof):>9} {_f(by_timer):>10} {_f(whole):>10}  {', '.join(low.unmapped) or '-'}"
            )
    lowered = [r for r in rows if r[2] is not None]
    mapped = [r[2] for r in lowered]
    timer = [r[4] for r in lowered if r[4] is not None]
    prof = [r[3] for r in lowered if r[3] is not None]
    print()
    print(f"graphs timed: {len(rows)}, with a lowering: {len(lowered)}")
    if mapped:
        ok = sum(1 for m in mapped if m >= 0.95)
        print(f"mapped_share: min {min(mapped):.2f}, >= 0.95 in {ok}/{len(mapped)}")
    if prof:
        print(f"kernels/profiled: median {statistics.median(prof):.2f} (min {min(prof):.2f}, max {max(prof):.2f})")
    whole = [r[5] for r in lowered if r[5] is not None]
    for label, values in (("kernels/timer", timer), ("prof/timer", whole)):
        if values:
            within = sum(1 for r in values if 0.8 <= r <= 1.2)
            print(f"{label}: median {statistics.median(values):.2f}, within 20% in {within}/{len(values)} graphs")
    big = [r for r in lowered if r[3] is not None and r[3] >= 0.5]
    if big:
        within = sum(1 for r in big if r[4] is not None and 0.8 <= r[4] <= 1.2)
        print(f"graphs whose kernels are >= half their profiled time: {len(big)}; kernels/timer within 20%: {within}")
    return 0


def _corpus(p: Any) -> tuple[Any, dict[str, Any]]:
    model, calls = p.make()
    return model, {"calls": calls}


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


if __name__ == "__main__":
    sys.exit(main())
