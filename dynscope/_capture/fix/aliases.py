"""Files that import torch under another name (``import torch as th``: OpenAI's diffusion code).

Every rewrite reads and writes torch by its own name (``torch.where``, ``torch.compiler``), and
finds what it rewrites by that name (``torch.nonzero(...)``). For a file that binds torch only
as an alias, the rewrites are made on a copy of the file in which the alias is read as
``torch`` (a name token renamed, nothing else: strings and comments stay), and each rewrite's
new lines are written back with the file's own name for torch. Line numbers are the same in
both texts, so a rewrite's span, and the lines its evidence names, are the file's.

Text only (no torch import).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import replace
from typing import TYPE_CHECKING

from dynscope._capture.fix.source import python_lines
from dynscope._capture.fix.statements import parsed

if TYPE_CHECKING:
    from dynscope._capture.fix.statements import Rewrite

__all__ = ["as_named", "from_named", "torch_alias"]


def torch_alias(source: str) -> str | None:
    """The name a file binds torch to at its top level (``import torch as th`` -> "th"), when
    it binds torch under no other name and no name token in it reads ``torch``; else None."""
    aliases, plain = set(), False
    # Import statements name modules (``import torch.nn.functional as F``), they read nothing
    imports = {line for node in ast.walk(parsed(source)) if isinstance(node, (ast.Import, ast.ImportFrom))
               for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    for node in parsed(source).body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch":
                    if a.asname in (None, "torch"):
                        plain = True
                    else:
                        aliases.add(a.asname)
    if plain or len(aliases) != 1:
        return None
    alias = aliases.pop()
    names = _names(source)
    if names is None or any(text == "torch" and line not in imports for line, _, text in names):
        return None  # torch read by its own name somewhere (a function's local import): left as it is
    return alias


def as_named(source: str, alias: str) -> str:
    """``source`` with each name token ``alias`` read as ``torch`` (``import torch as torch``
    for the import itself)."""
    return _renamed(source, alias, "torch") or source


def from_named(rw: Rewrite, original: str, alias: str) -> Rewrite | None:
    """A rewrite made on :func:`as_named`'s text, on the file as it is: its new lines with
    torch under the file's own name, every other line the file's. None when its lines cannot
    be read as Python tokens (the rewrite is then not offered)."""
    new = _renamed("".join(rw.replacement), "torch", alias)
    if new is None:
        return None
    lines = python_lines(original)
    replacement = tuple(python_lines(new))
    if len(replacement) != len(rw.replacement):
        return None
    source = "".join(lines[: rw.first - 1]) + new + "".join(lines[rw.last:])
    return replace(rw, source=source, replacement=replacement)


def _names(text: str) -> list[tuple[int, int, str]] | None:
    """Every name token of ``text`` that is not an attribute (after a ``.``): (line, column,
    the name); None when it does not tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return [(t.start[0], t.start[1], t.string) for i, t in enumerate(tokens)
            if t.type == tokenize.NAME and not (i and tokens[i - 1].type == tokenize.OP and tokens[i - 1].string == ".")]


def _renamed(text: str, old: str, new: str) -> str | None:
    """``text`` with each name token ``old`` written ``new`` (the import's module name kept
    where ``old`` is torch's alias: ``import torch as th`` becomes ``import torch as torch``)."""
    names = _names(text)
    if names is None:
        return None
    lines = python_lines(text)
    for line, col, name in reversed(names):  # from the end: earlier columns keep their place
        if name == old:
            row = lines[line - 1]
            lines[line - 1] = row[:col] + new + row[col + len(old):]
    return "".join(lines)
