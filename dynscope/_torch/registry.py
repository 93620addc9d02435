"""PyTorch's graph-break registry and which files count as the user's code."""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

# -- graph-break registry ---------------------------------------------------------------


@lru_cache(maxsize=1)
def graph_break_registry() -> dict[str, dict[str, Any]]:
    """gb id -> {"Gb_type", "Explanation", "Hints"} from torch's registry (torch >= 2.8)."""
    path = Path(torch.__file__).parent / "_dynamo" / "graph_break_registry.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, dict[str, Any]] = {}
    for gb_id, entries in raw.items():
        entry = entries[0] if isinstance(entries, list) and entries else entries
        if isinstance(entry, dict):
            out[gb_id] = entry
    return out


def gb_id_for_type(gb_type: str) -> str:
    """The registry id for a graph-break type, or ""."""
    for gb_id, entry in graph_break_registry().items():
        if entry.get("Gb_type") == gb_type:
            return gb_id
    return ""


def doc_url_for(gb_type: str, gb_id: str) -> str:
    """PyTorch's documentation page for a graph break, or ""."""
    try:
        from torch._dynamo.exc import get_gbid_documentation_link  # torch >= 2.9

        url = get_gbid_documentation_link(gb_type)
        if url:
            return str(url)
    except Exception:  # noqa: BLE001 - fall back to the URL pattern
        pass
    if gb_id:
        return f"https://meta-pytorch.github.io/compile-graph-break-site/gb/{gb_id}.html"
    return ""


# -- what counts as user code -------------------------------------------------------------


@lru_cache(maxsize=1)
def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    torch_root = os.path.dirname(os.path.abspath(torch.__file__))
    dynscope_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sysconfig.get_paths()
    std = {os.path.abspath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths}
    std.add(os.path.dirname(os.path.abspath(os.__file__)))
    site = {os.path.abspath(paths[k]) for k in ("purelib", "platlib") if k in paths}
    site.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return (torch_root, dynscope_root, *sorted(std)), tuple(sorted(site))


def is_dynscope_file(filename: str) -> bool:
    """True for a file of dynscope itself (its own frames never belong in a report)."""
    if not filename or filename.startswith("<"):
        return False
    (_, dynscope_root, *_), _ = _library_roots()
    return os.path.abspath(filename).startswith(dynscope_root + os.sep)


def is_user_file(filename: str) -> bool:
    """True unless the file belongs to torch, dynscope or the Python standard library.

    Third-party packages (transformers, ...) count as user code: that is where their
    users need to look. Site-packages inside the stdlib folder are not the stdlib.
    """
    if not filename or filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    (torch_root, dynscope_root, *std), site = _library_roots()
    if path.startswith((torch_root + os.sep, dynscope_root + os.sep)):
        return False
    # torch installed elsewhere (a trace recorded in another environment): still torch.
    if f"{os.sep}site-packages{os.sep}torch{os.sep}" in path or f"{os.sep}dist-packages{os.sep}torch{os.sep}" in path:
        return False
    if any(path.startswith(s + os.sep) for s in site):
        return True
    return not any(path.startswith(s + os.sep) for s in std)
