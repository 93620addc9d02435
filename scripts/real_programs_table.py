"""Print dynscope's counts beside PyTorch's for the real-shaped programs (tests/corpus/real.py).

Run from the repository root: ``.venv/bin/python scripts/real_programs_table.py``. Each
program runs under plain torch.compile (PyTorch's CompileCounter and the trace records it
logs) and under dynscope, as tests/capture/test_real_programs.py does; the table is what the
closing note of issue 18 quotes.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch.distributed as dist
from tabulate import tabulate

from tests.capture.test_real_programs import counts_of, dynscope_report, pytorch_counts
from tests.corpus.real import REAL_PROGRAMS


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for prog in REAL_PROGRAMS:
            if prog.needs == "distributed":
                dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
            try:
                torch_side = pytorch_counts(prog)
                rep = dynscope_report(prog)
            finally:
                if prog.needs == "distributed":
                    dist.destroy_process_group()
            ours = counts_of(rep)
            cell = {k: f"{ours[k]} / {torch_side[k]}" for k in ours}
            if prog.kind == "loop":
                cell["backend_calls"] = f"- / {torch_side['backend_calls']}"
            coverage = f"{100 * rep.coverage.ratio:.1f}%" if rep.coverage is not None else "not measured (capture)"
            rows.append([
                prog.name, prog.kind, cell["graphs"], cell["backend_calls"], cell["breaks"], cell["frames"],
                cell["recompiles"], coverage,
            ])
    print(tabulate(rows, headers=[
        "program", "run as", "graphs", "backend calls", "break events", "frames", "recompiles", "coverage",
    ]))
    print("(each cell: dynscope / PyTorch)")


if __name__ == "__main__":
    main()
