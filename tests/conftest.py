"""Shared fixtures: golden files and quiet helpers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from this run")


def normalise(text: str) -> str:
    """Drop what varies between machines and runs: paths, times, memory addresses."""
    text = text.replace(str(ROOT), "<root>")
    text = re.sub(r"\d+\.\d+ s\b", "<t> s", text)
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    return text


class Golden:
    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, name: str, text: str) -> None:
        path = GOLDEN / name
        if self.update or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if not self.update:
                pytest.fail(f"golden file {path} did not exist; written now, check it and rerun")
        expected = path.read_text(encoding="utf-8")
        assert text == expected, f"output differs from {path}; rerun with --update-golden if intended"


@pytest.fixture(autouse=True)
def _plain_summaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summaries are plain text in tests, also under ``pytest -s`` in a terminal or with
    FORCE_COLOR set by CI (tests/test_notebook.py tests the colour)."""
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(bool(request.config.getoption("--update-golden")))


pytest_plugins = ["pytester"]
