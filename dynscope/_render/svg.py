"""Lay DOT out as SVG with Graphviz's ``dot`` program: the one place that runs Graphviz.

The renderers are pure (model in, text out) and this module knows no model type: it gets
DOT text (from dynscope._render.dot) and gives SVG text back; whoever wants pictures
(``Graph.to_svg``, ``Report.to_html``, the bundle) builds the DOT, lays it out here and hands
the SVG on.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import DynscopeError, GraphvizNotFoundError
from dynscope._write import write_text

if TYPE_CHECKING:
    from collections.abc import Mapping

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


def _dot_said(err: Exception) -> str:
    """The first line ``dot`` wrote on stderr when it failed, or its exit status."""
    import graphviz

    if isinstance(err, graphviz.CalledProcessError):
        said = (err.stderr or b"").decode("utf-8", "replace").strip().splitlines()
        return said[0] if said else f"exit status {err.returncode}"
    return f"{type(err).__name__}: {err}"


def _broken_dot(err: Exception) -> GraphvizNotFoundError:
    """The error for a ``dot`` that is on PATH but does not work (it failed on a one-node
    graph too): the environment's fault, not the report's, so pictures are left out as
    when ``dot`` is missing."""
    what = _dot_said(err)
    return GraphvizNotFoundError(
        f"Graphviz's `dot` program on PATH ({shutil.which('dot') or 'dot'}) does not work: it failed "
        f"on a one-node graph ({what}). Reinstall Graphviz (Debian/Ubuntu `sudo apt-get install "
        "--reinstall graphviz`) or put a working `dot` first on PATH. Text, JSON, DOT and the HTML "
        "page without pictures work without it."
    )


def _dot_works() -> bool:
    """True when ``dot`` lays out the smallest graph: tells a broken install from DOT
    source that ``dot`` rejects."""
    import graphviz

    try:
        graphviz.pipe("dot", "svg", b"digraph{a}", quiet=True)
    except (graphviz.ExecutableNotFound, graphviz.CalledProcessError, OSError):
        return False
    return True


def dot_to_svg(dot: str, path: str | Path | None = None) -> str:
    """SVG text for DOT source; also written (atomically) to ``path`` when given.

    Each node's ``<title>`` (what browsers show on hover) is replaced by its tooltip, the
    source line the node came from.

    Raises:
        InputError: ``path`` cannot be written (see dynscope._write.write_text).
        GraphvizNotFoundError: ``dot`` is not installed, or is installed but does not work
            (it fails on a one-node graph as well); the message says how to get a working one.
        DynscopeError: a working ``dot`` rejected the source (a dynscope bug: the message
            has dot's words).
    """
    import graphviz

    try:
        # quiet: what dot says on stderr is kept in the error, not printed to the user's stderr.
        svg = graphviz.pipe("dot", "svg", dot.encode("utf-8", "replace"), quiet=True).decode("utf-8", "replace")
    except graphviz.ExecutableNotFound as err:
        raise GraphvizNotFoundError(INSTALL_HINT) from err
    except (graphviz.CalledProcessError, OSError) as err:
        # A dot that exits non-zero, dies on a signal or cannot be executed: when it fails on
        # the smallest graph too, the install is broken (the user's to fix); else it is ours.
        if not _dot_works():
            raise _broken_dot(err) from err
        if not isinstance(err, graphviz.CalledProcessError):
            raise
        raise DynscopeError(
            f"Graphviz's dot could not lay out a picture ({_dot_said(err)}); "
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


_ID = re.compile(r'(\sid=")([^"]*")')
_ID_REF = re.compile(r'((?:\s(?:xlink:)?href="#)|(?:url\(#))')


def scope_ids(svg: str, prefix: str) -> str:
    """``svg`` with every element id (and every in-picture reference to one) prefixed.

    Graphviz numbers each picture's elements from 1 (``graph0``, ``node1``, ``edge1``,
    ``clust1``, ``a_node1``): pictures inlined in one HTML page would repeat ids, which
    breaks anchors and any ``#id`` lookup there. The page's script finds nodes by class
    (``g.node``) and ``data-name``, never by these ids.
    """
    return _ID_REF.sub(lambda m: m.group(1) + prefix, _ID.sub(lambda m: m.group(1) + prefix + m.group(2), svg))


def report_pictures(
    program_dot: str,
    graph_dots: Mapping[int, str],
    aot_dots: Mapping[tuple[int, str], str],
) -> tuple[str, dict[int, str], dict[tuple[int, str], str]]:
    """Every picture of a report laid out from its DOT (``dynscope._render.dot.report_dots``
    builds it): (program SVG, graph id -> graph SVG, (graph id, AOT graph kind) -> AOT graph SVG).

    Element ids are unique across all of them (``scope_ids``: "program-", "g<id>-",
    "g<id>-<kind>-"), since the page inlines them all.

    Raises:
        GraphvizNotFoundError: ``dot`` is not installed.
    """
    aot = {(gid, kind): scope_ids(dot_to_svg(dot), f"g{gid}-{kind}-") for (gid, kind), dot in aot_dots.items()}
    program = scope_ids(dot_to_svg(program_dot), "program-")
    return program, {gid: scope_ids(dot_to_svg(dot), f"g{gid}-") for gid, dot in graph_dots.items()}, aot
