"""A script's patched copy, run as definitions only.

fix verifies a patch by importing a copy of the patched file. A module's top level is its
definitions, but a script's (the file run as ``__main__``: ``python train.py``) is the program
itself: it loads data, trains, and often calls ``dynscope.fix`` - without an
``if __name__ == "__main__":`` guard, importing its copy would train again and call fix again
from inside fix. So a script's copy runs only what defines names (imports, functions, classes,
and the ``if``/``try`` blocks made of them), and every other name those definitions read is the
script's own value as it stands when fix is called (the configuration parsed, the model
trained so far, the registry filled): what the user's program is, not what running it from the
start again would make. The state among them is copied (a decorator that registers the
patched class fills the copy's registry; a patched method that trains a global model trains
the copy's), and names nothing defined reads (a dataset the top level loops over) are left out.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from dynscope._capture.copies import deep_copy

from .programs import NOT_STATE, global_names

if TYPE_CHECKING:
    import types

__all__ = ["definitions", "script_names"]

_DEFINES = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Pass)


def definitions(data: bytes, filename: str) -> types.CodeType:
    """The code of the script ``data`` (its bytes, coding cookie honoured) with only the
    statements that define names, each on its own line as in the file (Dynamo and fix read
    the copy's lines)."""
    tree = ast.parse(data, filename)
    tree.body = _kept(tree.body) or [ast.Pass(lineno=1, col_offset=0, end_lineno=1, end_col_offset=0)]
    return compile(tree, filename, "exec", dont_inherit=True)


def _kept(body: list[ast.stmt]) -> list[ast.stmt]:
    out: list[ast.stmt] = []
    for stmt in body:
        if isinstance(stmt, _DEFINES):
            out.append(stmt)
        elif isinstance(stmt, ast.If):  # ``if TYPE_CHECKING:``, ``if sys.version_info >= ...:``
            stmt.body = _kept(stmt.body) or [_pass(stmt)]
            stmt.orelse = _kept(stmt.orelse)
            out.append(stmt)
        elif isinstance(stmt, ast.Try):  # ``try: import apex`` / ``except ImportError: apex = None``
            stmt.body = _kept(stmt.body) or [_pass(stmt)]
            for handler in stmt.handlers:
                handler.body = _kept(handler.body) or [_pass(handler)]
            stmt.orelse, stmt.finalbody = _kept(stmt.orelse), _kept(stmt.finalbody)
            out.append(stmt)
    return out


def _pass(at: ast.stmt | ast.excepthandler) -> ast.Pass:
    return ast.Pass(lineno=at.lineno, col_offset=at.col_offset, end_lineno=at.lineno, end_col_offset=at.col_offset)


def script_names(script: types.ModuleType, code: types.CodeType) -> dict[str, Any]:
    """The script's names that the definitions in ``code`` read (their decorators, defaults and
    class bodies as they run, their functions when called), as they stand: the state among
    them (a model, an optimizer, a registry dict, a config) copied together, so nothing the
    copy runs changes the user's; code and constants as they are."""
    own = vars(script)
    names = sorted(n for n in global_names(code) if n in own and not (n.startswith("__") and n.endswith("__")))
    state = [n for n in names if not isinstance(own[n], NOT_STATE)]
    copies = dict(zip(state, deep_copy([own[n] for n in state]), strict=True))
    return {n: copies.get(n, own[n]) for n in names}
