"""docs/architecture.md's figures are this checkout's (issue 46): the last column of its "shape
in figures" table against what scripts/architecture_metrics.py computes.

Exact: modules, functions over 80 lines (their names and lengths), modules that spell a record
kind, places that test one. Lines: within LINES_TOLERANCE of the count, so the figure holds
through small edits and fails once a module's worth of code came or went.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
LINES_TOLERANCE = 0.03


@functools.cache
def _figures() -> dict[str, object]:
    spec = importlib.util.spec_from_file_location("architecture_metrics", ROOT / "scripts" / "architecture_metrics.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.figures(ROOT)


def _now(row: str) -> str:
    """The last cell (this checkout's) of the figures table's row that starts with ``row``."""
    table = DOC.read_text(encoding="utf-8").split("### The shape in figures", 1)[1]
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0].startswith(row):
            return cells[-1]
    raise AssertionError(f"docs/architecture.md's figures have no row {row!r}")


def _number(text: str) -> int:
    m = re.match(r"\s*([\d,]+)", text)
    assert m, text
    return int(m.group(1).replace(",", ""))


def test_modules_and_lines() -> None:
    figures = _figures()
    modules, lines = (_number(part) for part in _now("modules, lines").split(", ", 1))
    assert modules == figures["modules"], f"docs say {modules} modules, the script counts {figures['modules']}"
    counted = figures["lines"]
    assert isinstance(counted, int)
    assert abs(lines - counted) <= LINES_TOLERANCE * counted, f"docs say {lines:,} lines, the script counts {counted:,}"


def test_functions_over_80_lines() -> None:
    over = _figures()["over"]
    assert isinstance(over, list)
    cell = _now("functions over 80 lines")
    assert _number(cell) == len(over), f"docs say {cell!r}, the script finds {over}"
    # each named with its length: `advise` 81 (the function's name, its module's left out)
    said = sorted((name, int(n)) for name, n in re.findall(r"`(?:[\w.]+\.)?(\w+)` (\d+)", cell))
    found = sorted((name.rsplit(":", 1)[1], n) for name, n in over)
    assert said == found if over else True, f"docs say {said}, the script finds {found}"


def test_record_kinds_are_spelled_and_tested_in_the_registry_only() -> None:
    figures = _figures()
    knowing, tests = figures["knowing"], figures["kind_tests"]
    assert isinstance(knowing, list) and isinstance(tests, list)
    assert _number(_now("modules that spell a record kind")) == len(knowing), knowing
    assert _number(_now("places that test a record kind")) == len(tests), tests


def test_a_missing_row_is_named() -> None:
    try:
        _now("no such row")
    except AssertionError as err:
        assert "no such row" in str(err)
    else:
        raise AssertionError("a missing row went unnoticed")
