"""Reading a report needs no torch: a real virtual environment without it.

A CI job that only reads reports (``dynscope show|diff|render``, ``dynscope.load``) should
not have to install torch. This test builds such an environment: ``python -m venv``, the
non-torch runtime dependencies from pyproject.toml, and dynscope itself installed
``--no-deps``; then it runs the command line there on reports this process made.

The environment (without dynscope) is cached in the temp folder between runs; dynscope is
reinstalled from the working tree every run. It needs pip and access to the package index.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import dynscope
from tests.corpus.programs import MLP, PrintModel, _x

pytestmark = pytest.mark.venv

ROOT = Path(__file__).resolve().parents[2]
#: In pyproject's dependencies for torch's sake only: left out here on purpose.
TORCH_ONLY = {"torch", "numpy"}


def _runtime_deps() -> list[str]:
    """pyproject.toml's [project] dependencies, torch and its helpers left out."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    assert block, "pyproject.toml has no [project] dependencies list"
    deps = re.findall(r'^\s*"([^"]+)"', block.group(1), re.MULTILINE)
    kept = {_name(d): d for d in deps if _name(d) not in TORCH_ONLY}
    assert {"tabulate", "networkx", "graphviz"} <= set(kept), kept
    return list(kept.values())


def _name(requirement: str) -> str:
    """The distribution name of a requirement such as "networkx>=3.0"."""
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def _run(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def _python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


@pytest.fixture(scope="module")
def no_torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv with dynscope (this working tree) and without torch."""
    return build_no_torch_venv(tmp_path_factory)


def build_no_torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Make (or reuse) the venv without torch, install this working tree's dynscope in it,
    and return its python (tests/capture/test_ranks.py reads a job's trace there too).

    The venv is shared by every module that reads without torch, and pytest-xdist runs those
    modules on different workers at once: it is built and dynscope installed under a file lock,
    and dynscope only when its source changed (a reinstall under another worker's running CLI
    had removed modules it was about to import)."""
    deps = _runtime_deps() + ["setuptools>=77"]  # setuptools: to build dynscope without fetching it each run
    key = hashlib.sha256("\n".join([sys.version, *deps]).encode()).hexdigest()[:12]
    venv = Path(tempfile.gettempdir()) / f"dynscope-test-no-torch-{key}"
    with open(venv.with_name(venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = venv / ".deps-installed"
        if not ready.exists():
            shutil.rmtree(venv, ignore_errors=True)  # a half-built one from an interrupted run
            res = _run([sys.executable, "-m", "venv", str(venv)], cwd=ROOT)
            assert res.returncode == 0, f"python -m venv failed: {res.stderr}"
            res = _run([str(_python(venv)), "-m", "pip", "install", "-q", *deps], cwd=ROOT)
            assert res.returncode == 0, f"pip install {' '.join(deps)} failed: {res.stderr[-2000:]}"
            ready.write_text("\n".join(deps) + "\n")
        installed, source = venv / ".dynscope-installed", _source_digest()
        if not installed.exists() or installed.read_text() != source:
            _install_dynscope(venv, tmp_path_factory)
            installed.write_text(source)
    return _python(venv)


def _source_digest() -> str:
    """The working tree's dynscope as installed: its files' paths and bytes, and pyproject.toml."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    for path in sorted((ROOT / "dynscope").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _install_dynscope(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    # A copy of the source: building in the working tree would leave build/ behind.
    src = tmp_path_factory.mktemp("dynscope-src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copy(ROOT / "LICENSE", src)  # pyproject's license-files
    shutil.copytree(ROOT / "dynscope", src / "dynscope", ignore=shutil.ignore_patterns("__pycache__"))
    res = _run(
        [str(_python(venv)), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--force-reinstall", str(src)],
        cwd=src,
    )
    assert res.returncode == 0, f"installing dynscope failed: {res.stderr[-2000:]}"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two real reports saved as JSON: a clean MLP and a program with a break and a recompile."""
    folder = tmp_path_factory.mktemp("reports")
    clean = dynscope.report(MLP(), _x(4, 8)).save(folder / "clean.json")
    broken = dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)]).save(folder / "broken.json")
    return clean, broken


def test_the_environment_has_no_torch(no_torch_python: Path, tmp_path: Path) -> None:
    res = _run([str(no_torch_python), "-c", "import torch"], cwd=tmp_path)
    assert res.returncode != 0 and "No module named 'torch'" in res.stderr
    # dynscope comes from the venv, not from this working tree.
    res = _run([str(no_torch_python), "-c", "import dynscope; print(dynscope.__file__)"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()).resolve().is_relative_to(no_torch_python.parent.parent.resolve())


def test_load_without_torch(no_torch_python: Path, saved: tuple[Path, Path], tmp_path: Path) -> None:
    _, broken = saved
    code = (
        "import sys, dynscope\n"
        f"rep = dynscope.load({str(broken)!r})\n"
        "print(rep.graph_count, rep.break_count, rep.recompile_count, 'torch' in sys.modules)\n"
        "print(rep.program_dot().startswith('digraph'), 'Graph breaks' in rep.summary())\n"
    )
    res = _run([str(no_torch_python), "-c", code], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rep = dynscope.load(broken)
    assert res.stdout.split() == [str(rep.graph_count), str(rep.break_count), str(rep.recompile_count),
                                  "False", "True", "True"]


def test_report_needs_torch_and_says_so(no_torch_python: Path, tmp_path: Path) -> None:
    res = _run([str(no_torch_python), "-c", "import dynscope; dynscope.report"], cwd=tmp_path)
    assert res.returncode != 0 and "No module named 'torch'" in res.stderr


def test_cli_show_diff_render_without_torch(no_torch_python: Path, saved: tuple[Path, Path],
                                            tmp_path: Path) -> None:
    clean, broken = saved
    cli = [str(no_torch_python), "-m", "dynscope"]

    res = _run([*cli, "show", str(broken)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "dynscope report: PrintModel" in res.stdout and "logging/print side effect" in res.stdout

    res = _run([*cli, "diff", str(clean), str(broken)], cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # worse: more breaks
    assert "WORSE: graph breaks rose from 0 to" in res.stdout

    out = tmp_path / "out"
    res = _run([*cli, "render", str(broken), "-o", str(out)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "logging/print side effect" in page
    assert dynscope.load(out / "report.json") == dynscope.load(broken)


def test_cli_version_without_torch(no_torch_python: Path, tmp_path: Path) -> None:
    res = _run([str(no_torch_python), "-m", "dynscope", "--version"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"dynscope {dynscope.__version__}",
        "torch not installed (needed by `dynscope report`, not by show/diff/render)",
    ]
