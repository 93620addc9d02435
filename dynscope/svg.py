"""Lay DOT out as SVG with Graphviz's ``dot`` program."""

from __future__ import annotations

import re
import shutil

from dynscope.errors import GraphvizNotFoundError

INSTALL_HINT = (
    "Graphviz's `dot` program is needed for SVG pictures and was not found on PATH. "
    "Install it: Debian/Ubuntu `sudo apt-get install graphviz`; macOS `brew install graphviz`; "
    "conda `conda install -c conda-forge graphviz`. Text, JSON, DOT and the HTML page "
    "without pictures work without it."
)

_NODE_TITLE = re.compile(
    r'(<g id="(?:node|edge)\d+" class="(?:node|edge)">\s*<title>)([^<]*)(</title>\s*<g id="a_[^"]+"><a xlink:title="([^"]*)")'
)


def have_graphviz() -> bool:
    """True when the ``dot`` program is on PATH."""
    return shutil.which("dot") is not None


def dot_to_svg(dot: str) -> str:
    """SVG text for DOT source.

    Each node's ``<title>`` (what browsers show on hover) is replaced by its tooltip, the
    source line the node came from.

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed (the message says how to get it).
    """
    import graphviz

    try:
        svg = graphviz.pipe("dot", "svg", dot.encode("utf-8")).decode("utf-8")
    except graphviz.ExecutableNotFound as err:
        raise GraphvizNotFoundError(INSTALL_HINT) from err
    svg = _NODE_TITLE.sub(lambda m: m.group(1) + m.group(4) + m.group(3), svg)
    # Drop the XML prolog and doctype so the SVG can be inlined in HTML.
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
