"""Make docs/images/lowering.png: one lowered graph of a report, numbered for docs/lowering.md.

    .venv/bin/python examples/lowering_training.py /tmp/lowering-report
    .venv/bin/python scripts/lowering_screenshot.py /tmp/lowering-report/report.json

Takes the report's page (``Report.to_html``), keeps its style and the section of the graph
with the most kernels (without its AOT pictures), opens the forward output code, puts numbered badges before the four
parts the caption in docs/lowering.md explains, and has headless Chromium photograph it.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from page_screenshots import screenshot  # noqa: E402  (this script's own folder)

import dynscope  # noqa: E402

BADGE_CSS = (
    ".badge{display:inline-block;width:28px;height:28px;border-radius:14px;background:#d62728;"
    "color:#fff;font:bold 18px/28px sans-serif;text-align:center;margin:6px 8px 2px 0}"
)


def page_for(rep: dynscope.Report) -> str:
    graph = max((g for g in rep.graphs if g.lowering), key=lambda g: len(g.lowering.kernels))  # type: ignore[union-attr]
    html = rep.to_html()
    style = re.search(r"<style[^>]*>(.*?)</style>", html, re.S)
    section = re.search(rf'<section id="graph-{graph.id}"[^>]*>.*?</section>', html, re.S)
    if style is None or section is None:
        raise SystemExit("the page has no style or no section for the graph; has the page layout changed?")
    # The AOT pictures (drawn further down the real page) would push the code out of frame.
    body = re.sub(r'<h4>AOTAutograd[^<]*</h4><div class="svgbox" id="aot-svg-[^"]*">.*?</svg>\s*</div>', "",
                  section.group(0), flags=re.S)  # fmt: skip

    def badge(n: int) -> str:
        return f'<span class="badge">{n}</span>'

    marks = [
        (f'<div class="svgbox" id="graph-svg-{graph.id}">', 1),
        (f'<table class="kernels" id="kernels-{graph.id}">', 2),
        ("<p>Compile per phase", 3),
    ]
    for anchor, n in marks:
        body = body.replace(anchor, badge(n) + anchor, 1)
    # The forward output code, opened: the first <details> after the kernels table.
    at = body.index(f'id="kernels-{graph.id}"')
    code = body.index("<details", at)
    body = body[:code] + badge(4) + body[code:].replace("<details", "<details open", 1)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><style>{style.group(1)}{BADGE_CSS}</style>"
        f"</head><body>{body}</body></html>"
    )


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rep = dynscope.load(sys.argv[1])
    out = ROOT / "docs" / "images" / "lowering.png"
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "page.html"
        page.write_text(page_for(rep), encoding="utf-8")
        screenshot(page, out, "1300,2400")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
