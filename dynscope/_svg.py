"""Lay DOT out as SVG with Graphviz's ``dot`` program: the one place that runs Graphviz.

The renderers are pure (model in, text out); whoever wants pictures (``Graph.to_svg``,
``Report.to_html``, the bundle) lays them out here and hands the SVG text on.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import DynscopeError, GraphvizNotFoundError
from dynscope._write import write_text

if TYPE_CHECKING:
    from dynscope._model import Report

INSTALL_HINT = (
    "Graphviz's `dot` program is needed for SVG pictures and was not found on PATH. "
    "Install it: Debian/Ubuntu `sudo apt-get install graphviz`; macOS `brew install graphviz`; "
    "conda `conda install -c conda-forge graphviz`. Text, JSON, DOT and the HTML page "
    "without pictures work without it."
)

_NODE_TITLE = re.compile(
    r'(<g id="(?:node|edge)\d+" class="(?:node|edge)">\s*<title>)([^<]*)(</title>\s*<g id="a_[^"]+"><a xlink:title="([^"]*)")'
)

# A link in the SVG that is not https (dynscope's DOT sets no URL or href, so any other
# link got in through data): dropped, whatever escaping did upstream.
_UNSAFE_LINK = re.compile(r'\s(?:xlink:)?href="(?!https://)[^"]*"', re.IGNORECASE)


def _retitle(m: re.Match[str]) -> str:
    """A node's <title> replaced by its tooltip; its DOT id (an FX node's name after
    "n_") kept in ``data-name`` so the page's search finds nodes by name."""
    head = m.group(1)
    if 'class="node"' in head:
        name = m.group(2).removeprefix("n_").replace('"', "&quot;")
        head = head.replace('class="node">', f'class="node" data-name="{name}">', 1)
    return head + m.group(4) + m.group(3)


def have_graphviz() -> bool:
    """True when the ``dot`` program is on PATH."""
    return shutil.which("dot") is not None


def dot_to_svg(dot: str, path: str | Path | None = None) -> str:
    """SVG text for DOT source; also written (atomically) to ``path`` when given.

    Each node's ``<title>`` (what browsers show on hover) is replaced by its tooltip, the
    source line the node came from.

    Raises:
        InputError: ``path`` cannot be written (see dynscope._write.write_text).
        GraphvizNotFoundError: ``dot`` is not installed (the message says how to get it).
        DynscopeError: ``dot`` rejected the source (a dynscope bug: the message has dot's words).
    """
    import graphviz

    try:
        svg = graphviz.pipe("dot", "svg", dot.encode("utf-8", "replace")).decode("utf-8", "replace")
    except graphviz.ExecutableNotFound as err:
        raise GraphvizNotFoundError(INSTALL_HINT) from err
    except graphviz.CalledProcessError as err:
        said = (err.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        raise DynscopeError(
            f"Graphviz's dot could not lay out a picture ({said[0] if said else f'exit status {err.returncode}'}); "
            "this is a dynscope bug, please report it with the report's JSON"
        ) from err
    svg = _UNSAFE_LINK.sub("", svg)
    svg = _NODE_TITLE.sub(_retitle, svg)
    # Drop the XML prolog and doctype so the SVG can be inlined in HTML.
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    if path is not None:
        write_text(Path(path), svg)
    return svg


def report_pictures(rep: Report) -> tuple[str, dict[int, str], dict[tuple[int, str], str]]:
    """Every picture of a report laid out: (program SVG, graph id -> graph SVG,
    (graph id, AOT graph kind) -> AOT graph SVG).

    The AOT pictures are those of graphs with a lowering: kind "forward" and "backward"
    for a training graph, "inference" otherwise.

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed.
    """
    aot: dict[tuple[int, str], str] = {}
    for g in rep.graphs:
        low = g.lowering
        if low is None:
            continue
        for graph in (low.forward, low.backward):
            if graph is not None:
                aot[(g.id, graph.kind)] = dot_to_svg(graph.to_dot(low))
    return dot_to_svg(rep.program_dot()), {g.id: dot_to_svg(g.to_dot()) for g in rep.graphs}, aot
