"""The pieces HTML is built from, shared by the page (dynscope._render.html), the notebook
cards (dynscope._render.card) and the merged ranks' page (dynscope._render.ranks): escaping,
tables, links from data, and the style and script files (assets/) they put inline.

Every string from user code or PyTorch goes through :func:`esc` before it reaches markup;
:func:`html_table` takes cells that are markup already, so escaping stays the caller's one
visible step, never done twice or forgotten inside.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["asset", "esc", "html_table", "safe_url"]


def asset(name: str) -> str:
    """The text of ``assets/<name>`` (a stylesheet or script shipped as package data, so it
    is edited and linted as CSS or JS, not as a Python string)."""
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def esc(text: object) -> str:
    """``str(text)`` escaped for HTML text and attribute values (quotes included)."""
    return escape(str(text), quote=True)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], attrs: str = "") -> str:
    """An HTML table; cells are HTML already (callers escape what they put in); ``attrs``
    (dynscope's own, never data) go on the <table> tag."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{' ' + attrs if attrs else ''}><tr>{head}</tr>{body}</table>"


def safe_url(url: str) -> str:
    """``url`` when it is an https link, else "" (links from data are https or nothing).

    Anything else (``javascript:``, ``data:``, ``file:``, relative paths, text with
    spaces or control characters) is dropped, so a hostile report cannot put a script
    or a local file behind a link.
    """
    url = url.strip()
    if not url or any(c.isspace() or not c.isprintable() for c in url):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:
        return ""
    return url if parts.scheme.lower() == "https" and parts.netloc else ""
