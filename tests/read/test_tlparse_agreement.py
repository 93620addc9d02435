"""dynscope.load_trace counts what tlparse counts, on the same TORCH_TRACE logs (issue 21).

tlparse is the tool PyTorch's own users read these logs with; where both read a log, its
compile ids, graph breaks, recompiles, failed compiles and restarts must agree with the
report dynscope builds (definitions lined up in tests/tlparse_counts.py). The logs are real:
those scripts/record_trace_logs.py recorded for each torch release under
tests/traces/torch-*/logs/ (corpus programs, an Inductor training step, a 2-rank gloo DDP
job), and one this test records live in a child process under TORCH_TRACE.

Needs the tlparse binary (``pip install 'tlparse>=0.4'``, in the test extras).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dynscope
from tests.tlparse_counts import dynscope_counts, tlparse_counts, tlparse_rank_counts

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "traces"
LOGS = sorted(TRACES.glob("torch-*/logs/*.log"))
RANK_FOLDERS = sorted(p for p in TRACES.glob("torch-*/logs/*") if p.is_dir())
CHILD_TIMEOUT_S = 120


def _name(p: Path) -> str:
    return str(p.relative_to(TRACES))


def test_the_recorded_logs_are_there() -> None:
    # The parametrized tests below run on whatever is recorded: an empty corpus must fail
    # here rather than let them pass by running nothing.
    assert len(LOGS) >= 20, f"expected the recorded logs under {TRACES}/torch-*/logs/, found {len(LOGS)}"
    assert RANK_FOLDERS, f"expected a recorded rank folder (ddp-2ranks/) under {TRACES}/torch-*/logs/"


@pytest.mark.parametrize("log", LOGS, ids=[_name(p) for p in LOGS])
def test_recorded_log_counts_agree(log: Path, tmp_path: Path) -> None:
    theirs = tlparse_counts(log, tmp_path / "tl")
    rep = dynscope.load_trace(log)
    assert isinstance(rep, dynscope.Report)
    assert dynscope_counts(rep) == theirs
    # Every compile reaches tlparse's directory: a log whose ids tlparse did not see would
    # make the comparison above vacuous. An AOTInductor log has no Dynamo compile at all:
    # both tools see none, and dynscope shows its one ahead-of-time compile.
    if log.name.startswith("aoti-"):
        assert not theirs.compile_ids and [f.compile_id for f in rep.frames] == [""] and rep.graph_count == 1
    else:
        assert theirs.compile_ids, f"tlparse saw no compile in {log}"


@pytest.mark.parametrize("folder", RANK_FOLDERS, ids=[_name(p) for p in RANK_FOLDERS])
def test_rank_folder_counts_agree(folder: Path, tmp_path: Path) -> None:
    theirs = tlparse_rank_counts(folder, tmp_path / "tl")
    merged = dynscope.load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert merged.ranks == tuple(theirs)
    ours = {r: dynscope_counts(merged.report(r)) for r in merged.ranks}
    assert ours == theirs
    # The recorded job diverges on purpose (rank 1 breaks and recompiles alone): both tools
    # must see the ranks differ, or the per-rank comparison says little.
    assert len(set(theirs.values())) > 1 and merged.diverged


# -- a log recorded here -----------------------------------------------------------------------

_PROGRAM = textwrap.dedent(
    """
    import torch
    import torch._dynamo

    # Two compiles per frame: the third is refused (a recompile-limit failure).
    torch._dynamo.config.recompile_limit = 2
    # A backend that raises falls back to eager instead of raising: a failed compile.
    torch._dynamo.config.suppress_errors = True

    def breaks(x):
        y = x.sin()
        print("logged")                    # a graph break
        return y.cos()

    def by_shape(x):
        return x.relu() + 1

    def boom(gm, example_inputs):
        raise RuntimeError("this backend fails")

    def scaled(x):
        return x * 2

    torch.compile(breaks, backend="eager")(torch.randn(3))
    shaped = torch.compile(by_shape, backend="eager", dynamic=False)
    for n in (2, 3, 4):                    # 2 -> 3: a recompile; 4: over the limit
        shaped(torch.randn(n))
    torch.compile(scaled, backend=boom)(torch.randn(3))
    """
)


@pytest.mark.heavy
def test_live_log_counts_agree(tmp_path: Path) -> None:
    """A program with a break, a recompile, a recompile-limit failure and a backend
    failure, run under TORCH_TRACE in a child process: both tools read its one log alike."""
    trace_dir = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TRACE", "TORCH_LOGS"))}
    env.update(TORCH_TRACE=str(trace_dir), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    # A file, not ``-c``: the break sites are then in a user's file, as in a real job.
    program = tmp_path / "program.py"
    program.write_text(_PROGRAM, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (log,) = trace_dir.glob("dedicated_log_torch_trace_*.log")

    theirs = tlparse_counts(log, tmp_path / "tl")
    rep = dynscope.load_trace(log)
    assert isinstance(rep, dynscope.Report)
    assert dynscope_counts(rep) == theirs
    # The program did what it is there for, in tlparse's own reading of the log.
    assert theirs.graph_breaks >= 1 and theirs.restarts >= 1
    assert theirs.recompiles >= 2  # by_shape's second compile and its refused third
    assert theirs.failures >= 2  # the recompile limit and the failing backend
    failed = [f.fail_summary for f in rep.frames if f.status == "failed"]
    assert any("recompile limit" in s for s in failed) and any("this backend fails" in f.fail_reason for f in rep.frames), failed


def test_counts_differ_when_a_record_is_lost(tmp_path: Path) -> None:
    """The comparison can fail: a recorded log with one graph-break record cut out reads as
    one break fewer in both tools, and no longer matches the whole log's counts."""
    log = TRACES / "torch-2.13" / "logs" / "corpus-helper_file_break.log"
    whole = tlparse_counts(log, tmp_path / "whole")
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if '"name": "dynamo_graph_break_reason"' in line)
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("\t"))
    cut = tmp_path / "cut.log"
    cut.write_text("".join(lines[:start] + lines[end:]), encoding="utf-8")

    theirs = tlparse_counts(cut, tmp_path / "cut")
    ours = dynscope_counts(dynscope.load_trace(cut))
    assert ours == theirs
    assert theirs.graph_breaks == whole.graph_breaks - 1
    assert ours != whole
