"""The pages' styles and script are package-data files (dynscope/_render/assets/), inlined
unchanged, and the wheel ships every one of them. No torch, no browser, no wheel build."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

import dynscope
from dynscope._render.card import CARD_CSS, render_card
from dynscope._render.html import CSS, SCRIPT, render_html
from dynscope._render.html_parts import asset

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "dynscope" / "_render" / "assets"
REPORTS = ROOT / "tests" / "golden" / "reports"


def test_every_asset_ships_in_the_wheel() -> None:
    """Each file under assets/ matches a [tool.setuptools.package-data] pattern: a file the
    patterns miss would be absent from an installed dynscope, and its page would not load."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    line = re.search(r"^\[tool\.setuptools\.package-data\]\ndynscope = \[(.*)\]$", text, re.MULTILINE)
    assert line, "pyproject.toml's package-data line moved; update this test"
    patterns = re.findall(r'"([^"]+)"', line.group(1))
    files = sorted(p.relative_to(ROOT / "dynscope").as_posix() for p in ASSETS.iterdir())
    assert {"_render/assets/report.css", "_render/assets/report.js", "_render/assets/card.css"} <= set(files)
    assert [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)] == []


@pytest.mark.parametrize("name", ["report.css", "report.js", "card.css", "ranks.css"])
def test_assets_read_back_as_written(name: str) -> None:
    assert asset(name) == (ASSETS / name).read_text(encoding="utf-8")


def test_page_and_card_inline_the_files_unchanged() -> None:
    rep = dynscope.load(REPORTS / "lowered_train.json")
    page = render_html(rep)
    (style,) = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert style == CSS and style.startswith("\n" + asset("report.css"))
    assert script == SCRIPT == "\n" + asset("report.js")
    assert f"<style>{CARD_CSS}</style>" in render_card(rep) and CARD_CSS == "\n" + asset("card.css")
