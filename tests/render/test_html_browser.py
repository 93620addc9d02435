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

pytestmark = pytest.mark.browser

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
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



def _page_state(uri: str, profile: Path) -> tuple[str, dict[str, str]]:
    """The page's DOM once loaded, and the data-* state its script writes on <body>."""
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", uri], profile)
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    return dom, dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(0)))

def test_page_loads_offline_with_pictures(bundle: Path, tmp_path: Path) -> None:
    page = bundle / "index.html"
    text = page.read_text()
    # Nothing on the page may fetch: no src= to anywhere, no stylesheet links.
    assert not re.search(r'\ssrc=["\']', text) and "<link" not in text
    dom, attrs = _page_state(page.as_uri(), tmp_path / "p1")
    assert attrs == {
        "program": "visible", "first-graph": "visible", "kernels": "missing", "errors": "0", "blocked": "0",
        "ready": "yes",
    }
    # The quickstart's program picture is wider than the page: it opens shrunk to fit.
    box = re.search(r'<div class="svgbox" id="program-view"[^>]*data-zoom="([0-9.]+)"', dom)
    assert box is not None and 0.2 < float(box.group(1)) < 1.0, dom[dom.find("program-view") - 100:][:300]
    # Every picture inlined on the page keeps its own element ids (issue 18): none repeats,
    # in the page as written and in the DOM the browser built and the script worked on.
    for html in (text, dom):
        ids = re.findall(r'\sid="([^"]*)"', html)
        assert len(ids) == len(set(ids)), sorted(i for i in set(ids) if ids.count(i) > 1)[:10]


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


def test_lowered_page_shows_kernels_and_opens_code_at_a_kernel(tmp_path: Path) -> None:
    """A report with Inductor lowerings (kernels tables, output code, AOT pictures) loads with
    no script errors and no blocked fetches; following a kernel's link opens its folded code."""
    rep = dynscope.load(Path(__file__).parents[1] / "golden" / "reports" / "lowered_train.json")
    out = rep.render(tmp_path / "lowered")
    page = out / "index.html"
    text = page.read_text()
    assert not re.search(r'\ssrc=["\']', text) and "<link" not in text
    assert text.count("<script>") == 1
    # The slowest kernel of graph 1 (the backward mm) links to its call line in the backward code.
    target = "g1-bwd-L130"
    assert f'<a href="#{target}">' in text and f'<span id="{target}">' in text
    dom, attrs = _page_state(page.as_uri() + "#" + target, tmp_path / "p4")
    assert attrs == {
        "program": "visible", "first-graph": "visible", "kernels": "visible", "errors": "0", "blocked": "0",
        "ready": "yes",
    }
    folded = re.findall(r"<details( open=\"\")?><summary>Inductor output code, (\w+)", dom)
    assert len(folded) == 6  # forward and backward code of 3 graphs
    assert [side for opened, side in folded if opened] == ["backward"], "only the code holding the target opens"
    assert dom.index(f'<span id="{target}">') > dom.index('<section id="graph-1"')


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


def test_search_finds_nodes_and_pictures_have_zoom(bundle: Path, tmp_path: Path) -> None:
    """``#find=softmax`` runs the page's search: the softmax nodes of every inline picture are
    marked, the rest dimmed; each picture gets zoom buttons; no script errors."""
    page = bundle / "index.html"
    dom = _run(["--virtual-time-budget=5000", "--dump-dom", page.as_uri() + "#find=softmax"], tmp_path / "p5")
    html = re.search(r"<html[^>]*>", dom)
    assert html, dom[:500]
    root = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', html.group(0)))
    body = re.search(r"<body[^>]*>", dom)
    assert body and 'data-errors="0"' in body.group(0) and 'data-blocked="0"' in body.group(0)
    hits = int(root["find-hits"])
    assert hits >= 1 and dom.count('class="node hit"') == hits
    assert dom.count('class="node dim"') > hits
    assert f"{hits} nodes in " in dom
    pictures = len(re.findall(r'<div class="svgbox" id="[^"]+"><svg', page.read_text()))
    assert int(root["zoom-controls"]) == pictures >= 2
    assert dom.count('title="zoom in"') == pictures
