"""Refresh docs/images/report.png and program-view.png from the demo's page.

    make demo            # writes dynscope-report/
    .venv/bin/python scripts/page_screenshots.py dynscope-report/index.html

Headless Chromium photographs the page twice: the top of the page at 1300x2200 (the
summary, the program view and the first break) and the first screen at 1300x1150 (the
program view).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHOTS = {"report.png": "1300,2200", "program-view.png": "1300,1150"}


def screenshot(page: Path, out: Path, size: str) -> Path:
    """Photograph ``page`` with headless Chromium at ``size`` ("W,H") into ``out``."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("Chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--hide-scrollbars", f"--user-data-dir={tmp}", f"--window-size={size}",
             "--virtual-time-budget=3000", f"--screenshot={out}", page.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    page = Path(sys.argv[1]).resolve()
    for name, size in SHOTS.items():
        print(f"wrote {screenshot(page, ROOT / 'docs' / 'images' / name, size)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
