"""Check the eighteenth held-out set's BREAK marks and reference rewrites against PyTorch alone (no dynscope):
tests/corpus/heldout_check.py on this package.

    .venv/bin/python -m tests.corpus.fix_heldout18.check [--marks-only]
"""

from __future__ import annotations

import sys

from tests.corpus.heldout_check import HeldOutSet, main

from . import PROGRAMS
from .reference_rewrites import REWRITES

SET = HeldOutSet.of(__file__, PROGRAMS, REWRITES)

if __name__ == "__main__":
    sys.exit(main(SET))
