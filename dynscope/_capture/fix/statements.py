"""The statements of a file and their replacement: what every rewrite shares.

A break site's statement found by its line (the innermost one; an ``if`` for a line of its
test), the file's own spelling of a node, its indentation unit, and a statement (or a run of
statements) replaced by new lines with the file's indentation and line endings kept. Text
only: no torch import.
"""

from __future__ import annotations

import ast
import copy
import difflib
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

from dynscope._capture.fix.source import python_lines

__all__ = ["Made", "Rewrite", "Text", "block_of", "combined", "contains", "function_of", "holder_of", "names_loaded", "names_stored", "numpy_names", "paren", "parsed", "read_later",
           "refused", "replaced", "rows_set", "statement_at", "added_lines", "transformed", "transformed_statement", "unified_diff"]


@dataclass(frozen=True)
class Made:
    """What a rewrite maker proposes for a site: the new lines (indented relative to the
    statement), the rewrite's name, the assumption it makes, and the statements it replaces:
    from ``first`` (the site's own when None: a pattern that starts earlier, build then use)
    through ``last`` (the site's own when None: a pattern that goes on, select then reduce)."""

    lines: list[str]
    name: str
    note: str
    first: ast.stmt | None = None
    last: ast.stmt | None = None
    # Lines of the file that must have run in the unpatched eager run for a check of outputs to
    # show anything (the shortcut a rewrite drops was taken at least once); () when none.
    taken: tuple[int, ...] = ()
    # (an ``if``'s line, its body's first line): the test must have run more often than the
    # body (skipped at least once) for a check of outputs to show anything; None when no such need.
    skipped: tuple[int, int] | None = None
    # The reports a guard runs in eager code only, as (line, whether a ``warnings.warn``): each must
    # have run eagerly and said nothing there (a record a level drops) for the guard to verify.
    silenced: tuple[tuple[int, bool], ...] = ()
    # Behaviour no run can check (the exception a failed check raises): a patch of this rewrite is
    # proposed with these words as its reason, whatever the run shows; "" when none.
    unchecked: str = ""


def transformed(stmt: ast.stmt, fix: ast.NodeTransformer, name: str, note: str) -> Made | None:
    """The statement with ``fix`` applied to a copy: the rewrite ``name`` where ``fix.changed``
    says it changed something, else None."""
    new = fix.visit(copy.deepcopy(stmt))
    return Made(unparsed(new).split("\n"), name, note) if getattr(fix, "changed", False) else None


def transformed_statement(stmt: ast.stmt, fix: ast.NodeTransformer, name: str, note: str) -> Made | None:
    """:func:`transformed` of an expression statement (an assignment, a return, a call); None
    for any other statement."""
    if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr)) or stmt.value is None:
        return None
    return transformed(stmt, fix, name, note)


@dataclass(frozen=True)
class Rewrite:
    """One proposed change to a file."""

    name: str  # which rewrite (GUARD, WHERE, ...)
    source: str  # the file's whole new text
    first: int  # first line of the replaced statement (1-based, in the old text)
    last: int  # its last line
    new_last: int  # the last line of its replacement in the new text
    note: str = ""  # what it assumes ("both branches give tensors of one shape")
    replacement: tuple[str, ...] = ()  # the lines put in place of first..last (with newlines)
    taken: tuple[int, ...] = ()  # lines (old text) that must have run eagerly for it to verify (Made.taken)
    skipped: tuple[int, int] | None = None  # (test line, body line): the body skipped at least once (Made.skipped)
    silenced: tuple[tuple[int, bool], ...] = ()  # reports run in eager code only (Made.silenced)
    unchecked: str = ""  # behaviour no run can check: never verified, this the reason (Made.unchecked)


def added_lines(old: str, new: str) -> tuple[str, ...]:
    """The lines ``new`` puts in place of ``old``'s (inserted or replacing), each stripped;
    blank ones left out."""
    a = [ln.strip() for ln in python_lines(old)]
    b = [ln.strip() for ln in python_lines(new)]
    out = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            out += [ln for ln in b[j1:j2] if ln]
    return tuple(out)


def unified_diff(old: str, new: str, name: str) -> str:
    """The unified diff of one file, as ``git diff`` shows it (a/ and b/ prefixes); lines as
    Python splits them, each shown ending in ``\\n`` (a CRLF file's diff reads as any other)."""

    def shown(text: str) -> list[str]:
        return [ln.rstrip("\r\n") + "\n" for ln in python_lines(text)]

    return "".join(difflib.unified_diff(shown(old), shown(new),
                                        f"a/{name}", f"b/{name}"))


# -- finding and replacing the statement -------------------------------------------------------


@lru_cache(maxsize=8)
def parsed(source: str) -> ast.Module:
    """The file's tree, parsed once for every site of it (nothing here changes a tree: the
    rewrites transform deep copies)."""
    return ast.parse(source)


@lru_cache(maxsize=8)
def all_statements(source: str) -> tuple[ast.stmt, ...]:
    """Every statement of the file's tree, walked once."""
    return tuple(n for n in ast.walk(parsed(source)) if isinstance(n, ast.stmt))


def statement_at(source: str, lineno: int) -> ast.stmt | None:
    """The innermost statement that holds ``lineno`` (an ``if`` for a line in its test)."""
    best: ast.stmt | None = None
    for node in all_statements(source):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        end = node.end_lineno or node.lineno
        if isinstance(node, (ast.If, ast.While, ast.For, ast.With)):
            end = node.body[0].lineno - 1 if node.body else end  # its header only
        if node.lineno <= lineno <= end and (best is None or node.lineno >= best.lineno):
            best = node
    return best


def line_of(source: str, lineno: int) -> str:
    """Line ``lineno`` (1-based) as Python counts lines, without its ending."""
    return python_lines(source)[lineno - 1].rstrip("\r\n")


def text_before(line: str, col: int) -> str:
    """The part of ``line`` before ``col``: ast's columns count UTF-8 bytes, not characters."""
    return line.encode("utf-8")[:col].decode("utf-8", "replace")


def text_from(line: str, col: int) -> str:
    """The part of ``line`` from ``col`` (a UTF-8 byte offset) on."""
    return line.encode("utf-8")[col:].decode("utf-8", "replace")


def indent_unit(line: str, col: int) -> str:
    """One level of indentation as the file writes it: a tab, or 4 (2) spaces."""
    indent = text_before(line, col)
    if "\t" in indent:
        return "\t"
    return "  " if len(indent) % 4 == 2 else "    "


def trailing_comment(source: str, stmt: ast.stmt) -> str:
    """The comment after a one-line statement ("  # debug"), "" when none."""
    if stmt.end_lineno != stmt.lineno or stmt.end_col_offset is None:
        return ""
    rest = text_from(line_of(source, stmt.lineno), stmt.end_col_offset)
    return rest.rstrip() if rest.lstrip().startswith("#") else ""


def refused(stmt: ast.stmt, source: str) -> str:
    """Why the statement cannot be rewritten line by line ("" when it can): it shares a line
    with another statement, it is an ``elif``, or the file does not import torch."""
    first = line_of(source, stmt.lineno)
    if text_before(first, stmt.col_offset).strip() or text_from(first, stmt.col_offset).startswith("elif"):
        return f"the statement at line {stmt.lineno} does not start its line (an elif, or after another statement)"
    for node in all_statements(source):
        if (node is not stmt and node.lineno <= (stmt.end_lineno or stmt.lineno)
                and (node.end_lineno or node.lineno) >= stmt.lineno and not contains(stmt, node)
                and not contains(node, stmt)):
            return f"the statement at line {stmt.lineno} shares its line with another statement"
    if not imports_torch(source):
        return "the file does not `import torch` (the rewrites call torch.where, torch.compiler...)"
    return ""


def contains(outer: ast.AST, inner: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


def replaced(source: str, stmt: ast.stmt, new_lines: list[str], name: str, note: str,
             through: ast.stmt | None = None, taken: tuple[int, ...] = (),
             skipped: tuple[int, int] | None = None, silenced: tuple[tuple[int, bool], ...] = (),
             unchecked: str = "") -> Rewrite:
    """The file with ``stmt`` (through ``through``, a later statement of its block, when given)
    replaced by ``new_lines``, written at the statement's indentation."""
    lines = python_lines(source)
    first, last = stmt.lineno, stmt.end_lineno or stmt.lineno
    if through is not None:
        last = max(last, through.end_lineno or through.lineno)
    comment = trailing_comment(source, stmt) if through is None else ""
    if comment and len(new_lines) == 1 and not new_lines[0].rstrip().endswith(comment.strip()):
        new_lines = [new_lines[0] + comment]
    # The statement's own indentation (tabs stay tabs) and line endings (CRLF stays CRLF; the
    # file's last line keeps having none when it had none).
    indent = text_before(lines[first - 1], stmt.col_offset)
    ending = lines[first - 1][len(lines[first - 1].rstrip("\r\n")):] or "\n"
    last_ending = lines[last - 1][len(lines[last - 1].rstrip("\r\n")):]
    body = [(indent + ln if ln else "") + ending for ln in new_lines]
    body[-1] = body[-1][: len(body[-1]) - len(ending)] + last_ending
    out = lines[: first - 1] + body + lines[last:]
    text = "".join(out)
    return Rewrite(name, text, first, last, first + len(body) - 1, note, tuple(body), taken, skipped, silenced,
                   unchecked)


def combined(source: str, rewrites: list[Rewrite]) -> str:
    """``source`` with several rewrites of distinct statements applied together."""
    lines = python_lines(source)
    for rw in sorted(rewrites, key=lambda r: r.first, reverse=True):
        lines[rw.first - 1: rw.last] = list(rw.replacement)
    return "".join(lines)


def imports_torch(source: str) -> bool:
    return imports(source, "torch")


def imports(source: str, module: str) -> bool:
    """Whether the file's own top level has ``import <module>`` (under its own name)."""
    return any(isinstance(n, ast.Import) and any(a.name == module and a.asname in (None, module) for a in n.names)
               for n in parsed(source).body)


def dtype_name(node: ast.expr, numpy_aliases: set[str]) -> str | None:
    """The dtype a cast names: ``"int64"``, ``int`` or ``np.int64`` (numpy under one of its
    names in the file); None for another expression."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in numpy_aliases:
        return node.attr
    return None


class Text:
    """The file's text, to copy a node's own spelling (quotes, comments) where it is kept."""

    def __init__(self, source: str, unit: str = "    ") -> None:
        self.source = source
        self.lines = [ln.rstrip("\r\n") for ln in python_lines(source)]
        self.unit = unit  # one level of indentation as the file writes it

    def of(self, node: ast.AST) -> str:
        """The node as written, when it is one of the file's own; else as ``ast`` spells it."""
        line, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
        col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if line is not None and line == end and col is not None and end_col is not None:
            # One line of the file: its own spelling (ast's columns count UTF-8 bytes).
            return self.lines[line - 1].encode("utf-8")[col:end_col].decode("utf-8", "replace")
        return ast.unparse(node)

    def statement_lines(self, stmt: ast.stmt) -> list[str]:
        """The statement's lines as written, its own indentation removed (comments kept)."""
        return self.lines_between(stmt.lineno - 1, (stmt.end_lineno or stmt.lineno) + 1, stmt.col_offset)

    def lines_between(self, after: int, before: int, col: int) -> list[str]:
        """The file's lines after line ``after`` and before line ``before`` as written, the
        indentation ``col`` removed (comments and blank lines kept: what a pattern spanning
        several statements keeps between those it rewrites)."""
        return [text_from(ln, col) if text_before(ln, col).strip() == "" else ln.lstrip()
                for ln in self.lines[after: before - 1]]

    def body_lines(self, body: list[ast.stmt]) -> list[str]:
        return [ln for s in body for ln in self.statement_lines(s)]


def unparsed(node: ast.AST) -> str:
    return ast.unparse(node)




# -- the statements around a site: multi-statement patterns -----------------------------------


def rows_set(x: str, mask: str, value: ast.expr) -> str:
    """``x``'s rows where ``mask`` holds set to ``value``, in place: the mask shaped to its rows."""
    rows = f"({mask}).reshape((-1,) + (1,) * ({x}.dim() - 1))"
    return f"{x}.copy_(torch.where({rows}, {unparsed(value)}, {x}))"


@dataclass
class _Index:
    """Where each node of a file's tree sits: its innermost function, a statement's block. Keyed
    by the nodes' ids, so the index holds the tree: no id of it is given to another object."""

    tree: ast.Module
    function: dict[int, ast.FunctionDef | ast.AsyncFunctionDef | None]
    block: dict[int, tuple[list[ast.stmt], int]]
    holder: dict[int, ast.AST]  # a statement's id -> the node whose body (or else, handler) holds it


@lru_cache(maxsize=8)
def _index(source: str) -> _Index:
    """One walk of the file's tree (``parsed(source)``) for every site's lookups: a rewrite
    asks for the function and block around a statement many times."""
    index = _Index(parsed(source), {}, {}, {})

    def visit(node: ast.AST, fn: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        index.function[id(node)] = fn
        inner = node if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                for i, s in enumerate(body):
                    if isinstance(s, ast.stmt):
                        index.block.setdefault(id(s), (body, i))
                        index.holder.setdefault(id(s), node)
        for handler in getattr(node, "handlers", ()) or ():
            for i, s in enumerate(handler.body):
                index.block.setdefault(id(s), (handler.body, i))
                index.holder.setdefault(id(s), handler)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(index.tree, None)
    return index


def holder_of(source: str, stmt: ast.stmt) -> ast.AST | None:
    """The statement (``if``, ``for``, ``def``...) or handler whose block holds ``stmt``; None
    for a statement of the module's own body or of another tree."""
    holder = _index(source).holder.get(id(stmt))
    return None if isinstance(holder, ast.Module) else holder


def paren(src: str) -> str:
    """The expression, in parentheses unless it is a name or a dotted name."""
    return src if src.isidentifier() or src.replace(".", "").isidentifier() else f"({src})"


def block_of(source: str, stmt: ast.stmt) -> tuple[list[ast.stmt], int]:
    """The block (a body, an ``else``, a loop's body) that holds ``stmt``, and its index there."""
    found = _index(source).block.get(id(stmt))
    if found is not None and found[0][found[1]] is stmt:
        return found
    for node in ast.walk(parsed(source)):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list):
                for i, s in enumerate(body):
                    if s is stmt:
                        return body, i
        for handler in getattr(node, "handlers", ()) or ():
            for i, s in enumerate(handler.body):
                if s is stmt:
                    return handler.body, i
    return [stmt], 0


def function_of(source: str, stmt: ast.stmt) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The innermost function whose body holds ``stmt``."""
    index = _index(source)
    if id(stmt) in index.function:
        return index.function[id(stmt)]
    best = None  # a statement of another tree (a rewrite's copy): walked
    for node in ast.walk(parsed(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node is not stmt and contains(node, stmt):
            if best is None or contains(best, node):
                best = node
    return best


def names_loaded(node: ast.AST) -> set[str]:
    """The plain names an expression or statement reads."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def names_stored(node: ast.AST) -> set[str]:
    """The plain names an expression or statement binds (an assignment's targets, a loop's)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def name_uses(scope: ast.AST, name: str) -> tuple[list[ast.Name], list[ast.Name]]:
    """Every read and every binding of the plain name ``name`` in ``scope`` (a function, a
    module): a pattern that replaces what a name holds must know each."""
    found = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]
    return ([n for n in found if isinstance(n.ctx, ast.Load)], [n for n in found if isinstance(n.ctx, ast.Store)])


def read_later(source: str, stmt: ast.stmt, name: str, after: ast.stmt | None = None) -> bool:
    """Whether ``name`` is read anywhere in the function after ``after`` (``stmt`` when None):
    a name a pattern replaces must not be needed by what follows it. A loop around the site
    reads it again on its next turn: any read in the function counts then."""
    fn = function_of(source, stmt)
    scope: ast.AST = fn if fn is not None else parsed(source)
    end = (after or stmt).end_lineno or (after or stmt).lineno
    # (a loop that is the site itself reads nothing again: its own turns are the pattern's)
    in_loop = any(isinstance(n, (ast.For, ast.While)) and n is not stmt and contains(n, stmt) for n in ast.walk(scope))
    for n in ast.walk(scope):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load):
            if n.lineno > end or (in_loop and not contains(after or stmt, n) and not contains(stmt, n)):
                return True
    return False


class _Substituted(ast.NodeTransformer):
    def __init__(self, name: str, value: ast.expr) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return copy.deepcopy(self.value) if node.id == self.name else node


_Node = TypeVar("_Node", bound=ast.AST)


def substituted(node: _Node, name: str, value: ast.expr) -> _Node:
    """A copy of ``node`` (an expression or a statement) with each read of ``name`` a copy of
    ``value`` (a number read back as the tensor it came from)."""
    out = _Substituted(name, value).visit(copy.deepcopy(node))
    assert isinstance(out, type(node))
    return out


def enumerated_list(stmt: ast.stmt) -> tuple[str, str, ast.expr] | None:
    """(the index's name, the element's name, ``t``) of ``for i, v in enumerate(t.tolist()):``
    with one statement in its body and no ``else``; None for any other statement."""
    if not (isinstance(stmt, ast.For) and not stmt.orelse and len(stmt.body) == 1 and isinstance(stmt.target, ast.Tuple)
            and len(stmt.target.elts) == 2):
        return None
    i, v = stmt.target.elts
    it = stmt.iter
    if not (isinstance(i, ast.Name) and isinstance(v, ast.Name) and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and len(it.args) == 1 and not it.keywords):
        return None
    listed = it.args[0]
    if not (isinstance(listed, ast.Call) and isinstance(listed.func, ast.Attribute) and listed.func.attr == "tolist"
            and not listed.args and not listed.keywords):
        return None
    return i.id, v.id, listed.func.value


def numpy_names(source: str, stmt: ast.stmt) -> tuple[str, set[str]] | None:
    """numpy's name in the file (``import numpy as np``) and the names the site's function binds
    to a result of one of its functions (``var_y = np.var(y)``); None when the file has no numpy."""
    tree = parsed(source)
    alias = next((a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                  if a.name == "numpy"), None)
    if alias is None:
        return None
    fn = function_of(source, stmt)
    names = {t.id for n in ast.walk(fn if fn is not None else tree) if isinstance(n, ast.Assign)
             and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Attribute)
             and isinstance(n.value.func.value, ast.Name) and n.value.func.value.id == alias
             for t in n.targets if isinstance(t, ast.Name)}
    return alias, names
