"""Reading any recorded TORCH_TRACE log needs no torch (issue 44): a real venv without it.

Every recorded log of every release (tests/traces/torch-*/logs/: the corpus, Inductor,
AOTInductor, gzip, the DDP rank folders) is read in a venv without torch (the one
tests/read/test_no_torch.py builds) through the whole reading path: ``load_trace``, the summary,
the page, JSON out and back; then the command line: ``dynscope trace`` on each, and
``show`` and ``render`` on the reports it saved, with ``DYNSCOPE_WATCH_RANKS=1`` set too
(the watch needs torch; a command that reads must not die of it). The counts there must be
the ones this process (with torch) reads.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest

import dynscope
from tests.read.test_no_torch import ROOT, build_no_torch_venv

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.venv

LOGS = sorted((ROOT / "tests" / "traces").glob("torch-*/logs"))
#: Every recorded log, and every rank folder.
TRACES = sorted(p for d in LOGS for p in d.iterdir() if p.is_dir() or p.name.endswith((".log", ".log.gz")))
#: What the CLI runs on: every log of its own kind (AOTInductor, rank folders, Inductor train
#: steps, gzip) and two of each release's corpus logs, which read alike (the library test
#: above reads every log; three CLI runs a log would cost two minutes).
CLI_TRACES = [p for p in TRACES if not p.name.startswith("corpus-")] + [
    p for d in LOGS for p in sorted(d.glob("corpus-*.log"))[:2]]

#: Run in the venv: read each path, print its counts as JSON, save its report; never torch.
_READ_ALL = r"""
import json, sys
from pathlib import Path
import dynscope
out = Path(sys.argv[1])
counts = {}
for i, path in enumerate(sys.argv[2:]):
    rep = dynscope.load_trace(path)
    reps = rep.reports if isinstance(rep, dynscope.MultiRankReport) else (rep,)
    text, page = rep.summary(), rep.to_html()
    assert text and page.startswith("<!DOCTYPE html>"), path
    saved = rep.save(out / f"{i}.json")
    again = dynscope.read(saved)
    assert again == rep, path
    counts[path] = [[r.graph_count, r.break_count, r.recompile_count, len(r.frames),
                     sum(len(g.lowering.kernels) for g in r.graphs if g.lowering), sorted(map(list, r.unparsed_kinds))]
                    for r in reps]
print(json.dumps({"counts": counts, "torch": "torch" in sys.modules, "dynscope": dynscope.__file__}))
"""


def _counts(rep: dynscope.Report | dynscope.MultiRankReport) -> list[list[object]]:
    reps = rep.reports if isinstance(rep, dynscope.MultiRankReport) else (rep,)
    return [[r.graph_count, r.break_count, r.recompile_count, len(r.frames),
             sum(len(g.lowering.kernels) for g in r.graphs if g.lowering), sorted(map(list, r.unparsed_kinds))]
            for r in reps]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**base, **(env or {})})


@pytest.fixture(scope="module")
def no_torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_no_torch_venv(tmp_path_factory)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PYTHONPATH to a copy of this working tree's dynscope, ahead of the one installed in the
    shared venv (which another test session may be reinstalling meanwhile)."""
    src = tmp_path_factory.mktemp("dynscope-copy")
    shutil.copytree(ROOT / "dynscope", src / "dynscope", ignore=shutil.ignore_patterns("__pycache__"))
    return {"PYTHONPATH": str(src)}


def test_every_recorded_log_reads_without_torch_as_with_it(no_torch_python: Path, source: dict[str, str],
                                                           tmp_path: Path) -> None:
    assert any("aoti" in p.name for p in TRACES) and any(p.name.endswith(".gz") for p in TRACES)
    res = _run([str(no_torch_python), "-c", _READ_ALL, str(tmp_path), *map(str, TRACES)], cwd=tmp_path, env=source)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout)
    assert got["torch"] is False and got["dynscope"].startswith(source["PYTHONPATH"])
    for path in TRACES:
        # tuples come back from JSON as lists
        assert got["counts"][str(path)] == json.loads(json.dumps(_counts(dynscope.load_trace(path)))), path


def test_the_cli_reads_every_recorded_log_without_torch(no_torch_python: Path, source: dict[str, str],
                                                        tmp_path: Path) -> None:
    cli = [str(no_torch_python), "-m", "dynscope"]
    watch = {"DYNSCOPE_WATCH_RANKS": "1"}  # asks for the watch, which needs torch: reading goes on
    for i, path in enumerate(CLI_TRACES):
        env = {**source, **watch} if i % 2 else source
        out = tmp_path / f"t{i}"
        res = _run([*cli, "trace", str(path), "-o", str(out)], cwd=tmp_path, env=env)
        assert res.returncode == 0, f"{path}: {res.stderr[-2000:]}"
        assert "Traceback" not in res.stderr, res.stderr
        saved = out / ("merged.json" if path.is_dir() else "report.json")
        assert saved.is_file(), path
        res = _run([*cli, "show", str(saved)], cwd=tmp_path, env=env)
        assert res.returncode == 0 and res.stdout.strip(), f"{path}: {res.stderr[-2000:]}"
        res = _run([*cli, "render", str(saved), "-o", str(tmp_path / f"r{i}")], cwd=tmp_path, env=env)
        assert res.returncode == 0, f"{path}: {res.stderr[-2000:]}"
        assert (tmp_path / f"r{i}" / "index.html").is_file()
