"""PyTorch's graph-break registry and which files count as the user's code."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path
from typing import Any

# torch is found, never imported, here: reading a trace log runs where torch is not installed
# (and importing it would cost a second where it is).


@lru_cache(maxsize=1)
def _torch_root() -> str:
    """The folder of the installed torch package, "" where torch is not installed."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return ""
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return os.path.abspath(locations[0]) if locations else ""


# -- graph-break registry ---------------------------------------------------------------


@lru_cache(maxsize=1)
def graph_break_registry() -> dict[str, dict[str, Any]]:
    """gb id -> {"Gb_type", "Explanation", "Hints"} from torch's registry (torch >= 2.8);
    empty where torch is not installed."""
    if not _torch_root():
        return {}
    path = Path(_torch_root()) / "_dynamo" / "graph_break_registry.json"
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


#: Where PyTorch documents each graph break (torch._dynamo.exc.get_gbid_documentation_link,
#: torch 2.9 .. 2.14: "GB0170" -> ".../gb/gb0170.html").
GRAPH_BREAK_SITE = "https://meta-pytorch.github.io/compile-graph-break-site/gb/"


def doc_url_for(gb_type: str, gb_id: str) -> str:
    """PyTorch's documentation page for a graph break, or "" without a gb id."""
    gb_id = gb_id or gb_id_for_type(gb_type)
    if not gb_id:
        return ""
    return f"{GRAPH_BREAK_SITE}gb{gb_id.upper().lstrip('GB')}.html"


# -- what counts as user code -------------------------------------------------------------


@lru_cache(maxsize=1)
def _library_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    torch_root = _torch_root() or os.sep + "torch-not-installed"
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


def library_of(filename: str) -> str:
    """The installed package a file belongs to ("transformers" for
    ``.../site-packages/transformers/generation/utils.py``); "" for the user's own files, for
    torch and dynscope (named by their own rules) and the standard library."""
    if not filename or filename.startswith("<") or not is_user_file(filename):
        return ""
    path = os.path.abspath(filename)
    _, site = _library_roots()
    rest = next((path[len(root) + 1:] for root in site if path.startswith(root + os.sep)), "")
    for marker in (f"{os.sep}site-packages{os.sep}", f"{os.sep}dist-packages{os.sep}"):
        if not rest and marker in path:  # a file of another environment (a trace recorded elsewhere)
            rest = path.split(marker, 1)[1]
    return rest.split(os.sep, 1)[0].removesuffix(".py") if rest else ""


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
