"""Capture changes nothing it measures: with a shared, fresh Inductor cache dir, a program run
under ``dynscope.capture()`` hits and misses Inductor's FX graph cache exactly as the same
program run plain (each run a fresh Python, as a warm restart is).

Before: capture() turned on Inductor's provenance tracking, which is part of the FX graph
cache key, so a warm cache missed on the first captured run (11.2 s plain miss, then a 3.7 s
captured *miss*).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

_PROGRAM = textwrap.dedent('''
    import json, sys, torch
    from torch._dynamo.utils import counters

    def f(x):
        return (x.sin() * 2 + 1).relu() @ x.t()

    captured = sys.argv[1] == "captured"
    x = torch.randn(8, 8)
    if captured:
        import dynscope
        with dynscope.capture() as cap:
            torch.compile(f)(x)
        rep = cap.report
        notes = list(rep.notes)
        lowered = [g.lowering.cache for g in rep.graphs if g.lowering is not None]
    else:
        torch.compile(f)(x)
        notes, lowered = [], []
    print(json.dumps({"hit": counters["inductor"]["fxgraph_cache_hit"],
                      "miss": counters["inductor"]["fxgraph_cache_miss"],
                      "notes": notes, "lowered": [str(c) for c in lowered]}))
''')


def _run(tmp_path: Path, how: str) -> dict:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), TORCHINDUCTOR_FX_GRAPH_CACHE="1")
    env.pop("INDUCTOR_PROVENANCE", None)
    env.pop("TORCH_COMPILE_DEBUG", None)
    script = tmp_path / "prog.py"
    script.write_text(_PROGRAM)
    done = subprocess.run([sys.executable, str(script), how], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_captured_runs_hit_and_miss_as_plain_runs(tmp_path: Path) -> None:
    first = _run(tmp_path, "plain")
    assert first["miss"] >= 1 and first["hit"] == 0  # a fresh cache dir
    captured = _run(tmp_path, "captured")
    plain = _run(tmp_path, "plain")
    assert plain["miss"] == 0 and plain["hit"] == first["miss"]
    assert (captured["hit"], captured["miss"]) == (plain["hit"], plain["miss"])
    # The report says why kernels are not listed, and how to have them.
    assert any("provenance tracking off" in n for n in captured["notes"])


def test_a_cold_captured_run_leaves_the_cache_a_plain_run_hits(tmp_path: Path) -> None:
    """The first run captured: what it stored is what a plain run looks up."""
    captured = _run(tmp_path, "captured")
    assert captured["miss"] >= 1
    plain = _run(tmp_path, "plain")
    assert plain["miss"] == 0 and plain["hit"] == captured["miss"]
