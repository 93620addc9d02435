"""The code base passes ruff and mypy (configured in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_clean() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "dynscope", "tests", "examples", "benchmarks", "scripts"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_clean() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "dynscope", "--no-error-summary"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
