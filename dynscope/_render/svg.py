"""Lay DOT out as SVG with Graphviz's ``dot`` program: the one place that runs Graphviz.

The renderers are pure (model in, text out) and this module knows no model type: it gets
DOT text (from dynscope._render.dot) and gives SVG text back; whoever wants pictures
(``Graph.to_svg``, ``Report.to_html``, the bundle) builds the DOT, lays it out here and hands
the SVG on.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from dynscope._errors import DynscopeError, GraphvizNotFoundError
from dynscope._write import write_text

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


#: Seconds one ``dot`` call may run before it is stopped (``DYNSCOPE_DOT_TIMEOUT`` overrides).
DOT_TIMEOUT_S = 20.0


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name`` when it holds a positive number, else
    ``default`` (a typo in a limit must not remove the limit)."""
    text = os.environ.get(name, "").strip()
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


def dot_timeout_s() -> float:
    """The time limit of one ``dot`` call: ``DYNSCOPE_DOT_TIMEOUT`` (seconds), else DOT_TIMEOUT_S."""
    return env_seconds("DYNSCOPE_DOT_TIMEOUT", DOT_TIMEOUT_S)


class LayoutTimeout(DynscopeError, TimeoutError):
    """``dot`` did not finish within its time limit and was stopped (the picture is too
    big or too tangled for Graphviz in that time; the page draws less instead)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Graphviz's dot did not finish within {seconds:g} s and was stopped")
        self.seconds = seconds


class _DotFailed(Exception):
    """``dot`` exited non-zero or died on a signal: (exit status, what it said)."""

    def __init__(self, returncode: int, said: str) -> None:
        super().__init__(said or f"exit status {returncode}")
        self.returncode = returncode
        self.said = said


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Linux: the child gets SIGKILL when dynscope's thread that started it dies (killed,
    crashed), so no ``dot`` is left running as an orphan. Elsewhere: nothing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_dot(dot: bytes, timeout_s: float) -> bytes:
    """SVG bytes from ``dot -Tsvg``, run in a process group of its own that is killed when
    the time limit passes, when this call is interrupted, or when dynscope dies.

    Raises:
        FileNotFoundError: ``dot`` is not on PATH.
        LayoutTimeout: ``dot`` ran past ``timeout_s``.
        _DotFailed: ``dot`` failed.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise FileNotFoundError("dot")
    linux = sys.platform.startswith("linux")
    proc = subprocess.Popen(
        [exe, "-Tsvg"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent if linux else None,
    )
    try:
        out, err = proc.communicate(dot, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise LayoutTimeout(timeout_s) from None
    finally:
        if proc.poll() is None:  # timed out or interrupted: stop it and whatever it started
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
            proc.communicate()
    if proc.returncode != 0:
        said = err.decode("utf-8", "replace").strip().splitlines()
        raise _DotFailed(proc.returncode, said[0] if said else "")
    return out


def _dot_said(err: _DotFailed | OSError) -> str:
    """The first line ``dot`` wrote on stderr when it failed, or its exit status."""
    if isinstance(err, _DotFailed):
        return err.said or f"exit status {err.returncode}"
    return f"{type(err).__name__}: {err}"


def _broken_dot(err: _DotFailed | OSError) -> GraphvizNotFoundError:
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
    """True when ``dot`` lays out the smallest graph within a few seconds: tells a broken
    install from DOT source that ``dot`` rejects."""
    try:
        _run_dot(b"digraph{a}", 5.0)
    except (LayoutTimeout, _DotFailed, OSError):
        return False
    return True


def dot_to_svg(dot: str, path: str | Path | None = None, *, timeout_s: float | None = None) -> str:
    """SVG text for DOT source; also written (atomically) to ``path`` when given.

    ``dot`` runs under a time limit (``timeout_s``, default :func:`dot_timeout_s`) in a
    process of its own that is stopped at the limit and dies with dynscope. Each node's
    ``<title>`` (what browsers show on hover) is replaced by its tooltip, the source line
    the node came from.

    Raises:
        InputError: ``path`` cannot be written (see dynscope._write.write_text).
        GraphvizNotFoundError: ``dot`` is not installed, or is installed but does not work
            (it fails on a one-node graph as well); the message says how to get a working one.
        LayoutTimeout: ``dot`` ran past the limit (it was stopped; callers that draw pages
            draw less instead, see dynscope._render.pictures).
        DynscopeError: a working ``dot`` rejected the source (a dynscope bug: the message
            has dot's words).
    """
    limit = dot_timeout_s() if timeout_s is None else timeout_s
    try:
        svg = _run_dot(dot.encode("utf-8", "replace"), limit).decode("utf-8", "replace")
    except FileNotFoundError as err:
        raise GraphvizNotFoundError(INSTALL_HINT) from err
    except LayoutTimeout:  # a TimeoutError, so an OSError: not a broken install
        raise
    except (_DotFailed, OSError) as err:
        # A dot that exits non-zero, dies on a signal or cannot be executed: when it fails on
        # the smallest graph too, the install is broken (the user's to fix); else it is ours.
        if not _dot_works():
            raise _broken_dot(err) from err
        if not isinstance(err, _DotFailed):
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
