"""timing=True at the cost of one compile (issue 20), counted by PyTorch.

Each program runs in a child process under ``TORCH_TRACE``, PyTorch's own structured trace;
every Inductor graph compile logs one ``inductor_output_code`` record there (a training
graph two: forward and backward). The capture runs on the eager backend (no Inductor), so
the records in the trace are exactly the Inductor builds ``report(timing=True)`` made: one
per graph (and its backward), plus only the extra builds the report itself counts
(``compile_time.measure_builds``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PROGRAMS = {
    # A training step with a graph break: the program runs backward through both graphs, so
    # torch.compile's first call compiles every forward and backward; nothing else is built.
    "train_step": """
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        def program(x):
            h = model[0](x).relu()
            print("", end="")  # a graph break
            loss = model[2](h).square().mean()
            loss.backward()
            return loss.detach()
        grad = True
    """,
    # Inference under no_grad with a break: inference builds only.
    "inference": """
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
        def program(x):
            h = model[1](model[0](x))
            print("", end="")
            return model[2](h)
        grad = False
    """,
    # Dropout draws random numbers: its graph gets one numerics build under eager's RNG.
    "dropout": """
        drop = torch.nn.Dropout(0.5)
        def program(x):
            return drop(x.sin()) + 1
        grad = False
    """,
}

_CHILD = """
import json, torch, dynscope
torch.manual_seed(0)
{program}
opts = dynscope.TimingOptions(warmup=1, repeats=5, min_time_s=0.02, min_sample_ms=0.2, progress=False)
with torch.set_grad_enabled(grad):
    rep = dynscope.report(program, torch.randn(4, 8), timing=True, timing_options=opts)
cost = rep.timing_cost
print(json.dumps({{
    "graphs": rep.graph_count,
    "trains": sum(1 for g in rep.graphs if g.timing is not None and g.timing.trains),
    "timed": sum(1 for g in rep.graphs if g.timing is not None and not g.timing.failed),
    "reused": cost.reused, "rebuilt": cost.rebuilt,
    "extra": rep.compile_time.measure_builds,
    "backward_runs": [g.backward_runs for g in rep.graphs],
    "numerics": [g.timing.numerics_mode for g in rep.graphs],
    "phases": [p for p, _ in cost.phases],
    "e2e": [m.error for m in rep.timing],
}}))
"""


def _run(name: str, tmp_path: Path) -> tuple[dict[str, object], int]:
    """The child's figures and the Inductor output codes PyTorch's trace holds."""
    trace = tmp_path / "trace"
    env = {**os.environ, "TORCH_TRACE": str(trace), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    code = _CHILD.format(program=textwrap.dedent(_PROGRAMS[name]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    records = sum(f.read_text().count('"inductor_output_code"') for f in trace.glob("*.log"))
    return figures, records


@pytest.mark.slow
def test_a_training_step_is_built_once(tmp_path: Path) -> None:
    got, codes = _run("train_step", tmp_path)
    # Two training graphs and, after the backward() break, one returning loss.detach():
    # Inductor generates no code for that one (nothing in it computes).
    assert got["graphs"] == got["timed"] == 3 and got["trains"] == 2
    assert got["backward_runs"] == [1, 1, 0], "the program itself ran backward through both training graphs"
    assert (got["reused"], got["rebuilt"], got["extra"]) == (3, 0, 0)
    # Forward and backward of each training graph, once: torch.compile's first call built them all.
    assert codes == 2 * 2, f"{codes} Inductor builds for 2 training graphs"
    assert got["phases"][:2] == ["capture", "compile"] and "extra builds" not in got["phases"]
    assert got["e2e"] == [""]


@pytest.mark.slow
def test_inference_under_no_grad_is_built_once(tmp_path: Path) -> None:
    got, codes = _run("inference", tmp_path)
    assert got["graphs"] == got["timed"] == 2 and got["trains"] == 0
    assert (got["reused"], got["rebuilt"], got["extra"]) == (2, 0, 0)
    assert codes == 2, f"{codes} Inductor builds for 2 inference graphs"


@pytest.mark.slow
def test_only_a_random_graph_gets_a_numerics_build(tmp_path: Path) -> None:
    got, codes = _run("dropout", tmp_path)
    assert got["graphs"] == got["timed"] == 1 and got["numerics"] == ["fallback_random"]
    assert (got["reused"], got["rebuilt"], got["extra"]) == (1, 0, 1)
    assert codes == 1 + 1, "torch.compile's build and one fallback_random build"
