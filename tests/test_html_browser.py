"""The HTML page in a real headless Chromium, and escaping of hostile names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

import dynscope
from examples.quickstart import build

if TYPE_CHECKING:
    import types

DOCS_IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Chromium is needed for the HTML report test: run scripts/setup.sh (apt-get install chromium)")


def _run(args: list[str], profile: Path) -> str:
    res = subprocess.run(
        [_chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True, text=True, timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, calls = build()
    rep = dynscope.report(model, **calls)
    return rep.render(tmp_path_factory.mktemp("bundle"))


def test_page_loads_offline_with_pictures(bundle: Path, tmp_path: Path) -> None:
    page = bundle / "index.html"
    text = page.read_text()
    # Nothing on the page may fetch: no src= to anywhere, no stylesheet links.
    assert not re.search(r'\ssrc=["\']', text) and "<link" not in text
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", page.as_uri()], tmp_path / "p1")
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(0)))
    assert attrs == {"program": "visible", "first-graph": "visible", "errors": "0", "blocked": "0", "ready": "yes"}


def test_screenshot_is_not_blank(bundle: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    shot = tmp_path / "report.png"
    _run(["--window-size=1300,2200", f"--screenshot={shot}", (bundle / "index.html").as_uri()], tmp_path / "p2")
    image = Image.open(shot).convert("RGB")
    assert image.size == (1300, 2200)
    colours = image.getcolors(maxcolors=1_000_000) or []
    assert len(colours) > 50, "a real page has text, boxes and colours"
    assert max(ImageStat.Stat(image).stddev) > 20
    if os.environ.get("DYNSCOPE_UPDATE_DOCS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        image.save(DOCS_IMAGES / "report.png")
        image.crop((0, 0, 1300, 1150)).save(DOCS_IMAGES / "program-view.png")


def _hostile_function(folder: Path) -> types.FunctionType:
    """A break in a file whose path has & and quotes, in a function named <script>."""
    path = folder / "we&ird \"name's\" dir" / "mod&<b>.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        "import torch\n\n"
        "def fn(x):\n"
        "    y = x + 1\n"
        "    print('<img src=x onerror=alert(1)>')\n"
        "    return y * 2\n"
    )
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    fn = namespace["fn"]
    fn.__code__ = fn.__code__.replace(co_name="<script>alert(1)</script>")
    return fn


def test_hostile_names_are_escaped(tmp_path: Path) -> None:
    fn = _hostile_function(tmp_path)
    rep = dynscope.report(fn, torch.ones(3))
    assert rep.break_count == 1
    assert rep.breaks[0].function == "<script>alert(1)</script>"
    html = rep.to_html()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "mod&amp;&lt;b&gt;.py" in html
    assert html.count("<script>") == 1, "only dynscope's own script"
    # The pictures stay valid XML with these names inside.
    import xml.etree.ElementTree as ET

    ET.fromstring(rep.program_svg())
    for g in rep.graphs:
        ET.fromstring(g.to_svg())
    out = rep.render(tmp_path / "hostile")
    dom = _run(["--virtual-time-budget=3000", "--dump-dom", (out / "index.html").as_uri()], tmp_path / "p3")
    assert 'data-errors="0"' in dom and 'data-blocked="0"' in dom
