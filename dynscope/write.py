"""The one place dynscope writes files."""

from __future__ import annotations

from pathlib import Path


def write_text(path: Path, text: str) -> Path:
    """Write UTF-8 text, creating parent folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def write_bytes(path: Path, data: bytes) -> Path:
    """Write bytes, creating parent folders; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
