"""The package as users get it: the wheel's metadata, and a quick start that needs no clone."""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import dynscope

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """dynscope's wheel, built from a copy of the working tree as ``pip wheel`` builds it."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src)
    shutil.copytree(ROOT / "dynscope", src / "dynscope", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(src)],
        cwd=src, capture_output=True, text=True, timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    (path,) = out.glob("dynscope-*.whl")
    return zipfile.ZipFile(path)


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    return email.message_from_bytes(wheel.read(f"dynscope-{dynscope.__version__}.dist-info/METADATA"))


def _compat_versions() -> list[Version]:
    """The torch releases scripts/compat.sh runs the suite against (its short-name map)."""
    text = (ROOT / "scripts" / "compat.sh").read_text(encoding="utf-8")
    found = [Version(v) for v in re.findall(r"^\s*[0-9.]+\) FULL=([0-9.]+) ;;", text, re.MULTILINE)]
    assert len(found) >= 2, "scripts/compat.sh's version map moved; update this test"
    return found


@pytest.mark.venv
def test_license_is_bsd3_and_ships_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    shipped = wheel.read(f"dynscope-{dynscope.__version__}.dist-info/licenses/LICENSE").decode()
    assert shipped == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert shipped.startswith("BSD 3-Clause License") and "the dynscope authors" in shipped


@pytest.mark.venv
def test_classifiers_and_urls(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    classifiers = set(meta.get_all("Classifier"))
    assert {
        "Development Status :: 3 - Alpha",
        "Framework :: Pytest",
        "Operating System :: OS Independent",
        "Topic :: Software Development :: Debuggers",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        *(f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)),
    } <= classifiers
    # PEP 639: the license is the License-Expression; a License :: classifier beside it is refused.
    assert not any(c.startswith("License ::") for c in classifiers)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert urls == {
        "Homepage": "https://github.com/dynscope/dynscope",
        "Documentation": "https://github.com/dynscope/dynscope/tree/main/docs",
        "Issues": "https://github.com/dynscope/dynscope/issues",
    }
    assert meta["Version"] == dynscope.__version__


@pytest.mark.venv
def test_requirements_and_extras(wheel: zipfile.ZipFile) -> None:
    meta = _metadata(wheel)
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist")]
    (torch_req,) = [r for r in reqs if r.name == "torch"]
    assert torch_req.marker is None
    # Every release the compat script checks (and .venv's 2.13) is allowed, and so are newer
    # ones: no upper bound, so installing dynscope never downgrades a user's newer torch
    # (docs/compat.md, "Which torch"). Older than the oldest checked is refused.
    for version in [*_compat_versions(), Version("2.13.0")]:
        assert torch_req.specifier.contains(version), (version, torch_req)
    newest = max(_compat_versions())
    assert newest >= Version("2.15.0")
    assert torch_req.specifier.contains(Version(f"{newest.major}.{newest.minor + 1}.0"))
    assert not torch_req.specifier.contains(Version("2.10.0"))

    assert set(meta.get_all("Provides-Extra")) == {"test", "dev"}
    by_extra: dict[str, set[str]] = {}
    for r in reqs:
        if r.marker is not None:
            extra = re.search(r'extra == "(\w+)"', str(r.marker))
            assert extra, r
            by_extra.setdefault(extra.group(1), set()).add(r.name)
    assert by_extra["dev"] == {"ruff", "mypy"}
    assert not by_extra["test"] & {"ruff", "mypy"}, "linters are in dev, not test"
    assert "pytest" in by_extra["test"]


@pytest.mark.venv
def test_entry_points_and_typing(wheel: zipfile.ZipFile) -> None:
    entry_points = wheel.read(f"dynscope-{dynscope.__version__}.dist-info/entry_points.txt").decode()
    assert "dynscope = dynscope._cli:main" in entry_points
    assert "[pytest11]" in entry_points and "dynscope = dynscope.pytest_plugin" in entry_points
    assert "dynscope/py.typed" in wheel.namelist()


def test_setup_installs_the_linters() -> None:
    """The suite's lint tests need ruff and mypy: every installer of the suite asks for `dev`."""
    for script in ("scripts/setup.sh", "scripts/compat.sh"):
        text = (ROOT / script).read_text(encoding="utf-8")
        assert '-e ".[test,dev]"' in text, script
        assert '-e ".[test]"' not in text, script


def _quickstart_code() -> str:
    """The first python block of docs/quickstart.md ("Your first report")."""
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert blocks, "docs/quickstart.md has no python block"
    return blocks[0]


@pytest.mark.heavy
def test_quickstart_runs_without_a_clone(tmp_path: Path) -> None:
    """The quick start's code works pasted into a file anywhere: nothing from the repo's examples/."""
    code = _quickstart_code()
    assert "examples" not in code
    (tmp_path / "first_report.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    res = subprocess.run([sys.executable, "first_report.py"], cwd=tmp_path, capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "dynscope report: TinyTransformer" in res.stdout
    rep = dynscope.load(tmp_path / "dynscope-report" / "report.json")
    # What the quick start's text says it shows: three kinds of break and a recompile.
    assert {b.category for b in rep.breaks} == {
        "data-dependent branch", "logging/print side effect", ".item()/scalar output"}
    assert rep.recompile_count >= 1


def test_the_modules_scheduled_first_exist() -> None:
    # tests/conftest.py hands these to the workers first; a renamed module would drop silently
    # to the end of the run again.
    from tests.conftest import LONGEST_FIRST, ROOT

    assert [p for p in LONGEST_FIRST if not (ROOT / p).is_file()] == []
