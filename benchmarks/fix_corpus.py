"""How many of the corpus's break sites does dynscope.fix remove, with verified patches?

Runs dynscope.fix on every program of tests/corpus/fix_programs.py (break sites in the shapes
real models have them: attention masks, routing, decoding, KV caches, logging, pre-processing,
train steps) and prints, per break category, the sites found, patched, verified and removed;
(and per category the sites removed, proposed and left alone); then each verified patch is run again on inputs fix never saw, compiled, against the
unpatched program in eager: the patches that change an output (goal: 0).

Run:  .venv/bin/python benchmarks/fix_corpus.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.corpus.fix_measure import measure, table  # the repository root is on the path (above)


def main() -> None:
    started = time.perf_counter()
    m = measure()
    per = m["per"]
    found = sum(r["found"] for r in per.values())
    removed = sum(r["removed"] for r in per.values())
    print(table(per))
    print(f"removed by verified patches: {removed} of {found} sites in user code ({removed / found:.0%}); "
          f"{len(m['on_purpose'])} more where torch.optim breaks on purpose")
    print(f"verified patches that change an output on unseen inputs: {len(m['changed'])}")
    print(f"sites fixed otherwise than the corpus marks them: {len(m['mismatched'])} {m['mismatched']}")
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
