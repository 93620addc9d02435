"""Turn PyTorch's graph-break reports into user-facing break sites.

Input: the text of ``dynamo_graph_break_reason`` trace artifacts. Output: one
:class:`~dynscope._model.GraphBreak` per distinct site (the user's line), with every event
that hit the site folded into ``count``, and its category, told where Dynamo raised the break
(inside torch.optim, a library, or the user's code).
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from dynscope._lexicon.break_categories import RAISED_IN_LIBRARY, RAISED_IN_OPTIM, classify
from dynscope._lexicon.wording import RESUME_PREFIX, base_function, is_resume_name
from dynscope._model import BreakEvent, GraphBreak, StackFrame
from dynscope._torch.break_report import without_outer_frames
from dynscope._torch.registry import is_dynscope_file, is_user_file, library_of

if TYPE_CHECKING:
    from dynscope._torch.break_report import ParsedBreak


def category_of(gb_type: str, explanation: str = "", source: str = "", *, raised_at: str = "") -> str:
    """The category name for one break (:func:`dynscope._lexicon.break_categories.classify`), told
    where Dynamo reported it.

    Args:
        gb_type: PyTorch's graph-break type.
        explanation: PyTorch's explanation text.
        source: the user's line of code.
        raised_at: the file Dynamo reported the break in ("Graph break in user code at
            FILE:LINE"): a ``graph_break()`` there inside torch.optim or a library is one
            the user cannot remove. Defaults to "" (not known: the user's code).
    """
    return classify(gb_type, explanation, source, raised_in=raised_in(raised_at))


def raised_in(filename: str) -> str:
    """Where a break was raised, for :func:`category_of`: "torch.optim", "library" (torch or a
    third-party package) or "" (the user's code, or not known)."""
    if not filename or filename.startswith("<"):
        return ""
    path = filename.replace("\\", "/")
    if "/torch/optim/" in path:
        return RAISED_IN_OPTIM
    # Third-party packages count as the user's code for the site (docs/report-model.md), but a
    # graph_break() they call is theirs to remove, not the user's.
    if not is_user_file(filename) or "/site-packages/" in path or "/dist-packages/" in path:
        return RAISED_IN_LIBRARY
    return ""


def without_dynscope(parsed: ParsedBreak) -> ParsedBreak:
    """The break as the user's program saw it: the stack from the frame ``report()`` called on.

    PyTorch's user stack runs from the outermost Python frame, so a break under ``report()``
    carries dynscope's own frames (``_capture/capture.py``) and the script that called report(). Those
    are not the program's story: everything up to the innermost dynscope frame is dropped,
    from the stack and from PyTorch's text alike. A stack with no dynscope frame (``capture()``
    of the user's own compile) is left whole.
    """
    own = [i for i, f in enumerate(parsed.user_stack) if is_dynscope_file(f.filename)]
    if not own:
        return parsed
    cut = own[-1] + 1
    return replace(parsed, user_stack=parsed.user_stack[cut:], text=without_outer_frames(parsed.text, cut))


def user_site(parsed: ParsedBreak) -> StackFrame:
    """The break's site for the user: innermost frame outside torch and the stdlib.

    Dynamo's own location can lie in copy.py or logging; the user wants the line that
    called into them. Falls back to Dynamo's location when the stack has no user frame.
    """
    for frame in reversed(parsed.user_stack):
        if is_user_file(frame.filename):
            return frame
    return StackFrame(parsed.reported_filename, parsed.reported_lineno, "", "")


def source_line(filename: str, lineno: int) -> str:
    """The stripped text of a source line, "" when the file cannot be read."""
    return linecache.getline(filename, lineno).strip()


def excerpt(filename: str, lineno: int, context: int = 3) -> tuple[tuple[int, str], ...]:
    """Lines ``lineno - context .. lineno + context`` of a file, as (number, text)."""
    out = []
    for n in range(max(1, lineno - context), lineno + context + 1):
        text = linecache.getline(filename, n)
        if not text and n > lineno:
            break
        out.append((n, text.rstrip("\n")))
    return tuple(out)


# -- qualified names ------------------------------------------------------------------------


class FunctionDef(NamedTuple):
    """One function of a source file, as :func:`_defs` reads it."""

    first: int  # first line, decorators included
    line: int  # the ``def`` line
    last: int  # last line
    name: str  # qualified name (``co_qualname`` from the innermost function scope on)
    wraps: bool  # a decorator's wrapper: decorated with ``functools.wraps``
    params: tuple[str, ...] = ()  # positional parameters, in order
    varargs: str = ""  # the ``*args`` parameter's name, "" when none


@lru_cache(maxsize=512)
def _defs(filename: str) -> tuple[FunctionDef, ...]:
    """Every function of a source file, () when unreadable.

    The name is Python's ``co_qualname`` from the innermost function scope on: classes
    qualify (``Attention.forward``), enclosing functions do not (``f``, not
    ``test_it.<locals>.f``; ``Inner.forward``, not ``build.<locals>.Inner.forward``).
    """
    text = "".join(linecache.getlines(filename))
    try:
        tree = ast.parse(text) if text else None
    except (SyntaxError, ValueError):
        tree = None
    if tree is None:
        return ()
    out: list[FunctionDef] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                wraps = any(_is_wraps(d) for d in child.decorator_list)
                a = child.args
                out.append(FunctionDef(
                    first, child.lineno, child.end_lineno or child.lineno, prefix + child.name, wraps,
                    tuple(p.arg for p in [*a.posonlyargs, *a.args]), a.vararg.arg if a.vararg else "",
                ))
                visit(child, "")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(out)


def _is_wraps(decorator: ast.expr) -> bool:
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
    return name == "wraps"


def _innermost(filename: str, lineno: int, name: str = "") -> FunctionDef | None:
    """The innermost function of the file that contains ``lineno`` (named ``name`` when
    given; a function starting at ``lineno`` wins: code objects give their first line)."""
    found = [
        d for d in _defs(filename)
        if d.first <= lineno <= d.last and (not name or d.name.rsplit(".", 1)[-1] == name)
    ]
    if not found:
        return None
    exact = [d for d in found if lineno in (d.first, d.line)]
    return max(exact or found, key=lambda d: d.first)


def qualified_name(filename: str, lineno: int, name: str) -> str:
    """``Attention.forward`` for the function ``forward`` that the file defines at (or
    around) ``lineno``; a resume function Dynamo made gets its function qualified
    ("torch_dynamo_resume_in_Attention.forward_at_28"). ``name`` unchanged when the
    source cannot be read or does not define it there.

    PyTorch's trace gives code objects by name, file and first line only (no
    ``co_qualname``); the source file says which class or function holds them.
    """
    if not name or not filename:
        return name
    base = base_function(name) if is_resume_name(name) else name
    found = _innermost(filename, lineno, base)
    if found is None:
        return name
    if is_resume_name(name):
        return RESUME_PREFIX + found.name + name[len(RESUME_PREFIX) + len(base):]
    return found.name


def is_decorator_wrapper(filename: str, lineno: int) -> bool:
    """True when the function the file defines at ``lineno`` is a decorator's wrapper
    (decorated with ``functools.wraps``, like Hugging Face's ``can_return_tuple``)."""
    found = _innermost(filename, lineno)
    return found is not None and found.wraps


def wrapped_function(stacks: list[list[tuple[str, int]]]) -> tuple[str, FunctionDef] | None:
    """The function a decorator's wrapper frame runs, from the stacks (outermost first, as
    (file, line)) of the graph's nodes: the first frame that is not itself a wrapper, with
    its file. None when no stack reaches one."""
    for stack in stacks:
        for filename, lineno in stack:
            found = _innermost(filename, lineno)
            if found is not None and not found.wraps:
                return filename, found
    return None


def wrapper_arguments(filename: str, lineno: int, wrapped: FunctionDef) -> tuple[str, ...]:
    """How a pass-through wrapper's ``*args`` reach the function it wraps: the wrapped
    function's parameter names for ``args[0]``, ``args[1]``... (a ``wrapper(self, *args,
    **kwargs)`` passes ``self`` first, so ``args[0]`` is the wrapped function's second
    parameter). () when the wrapper at ``filename:lineno`` takes no ``*args``."""
    wrapper = _innermost(filename, lineno)
    if wrapper is None or not wrapper.varargs:
        return ()
    return wrapped.params[len(wrapper.params):]


def _chain(parsed: ParsedBreak) -> list[StackFrame]:
    """The user's frames that lead to the site: from the site outwards, up to the first
    frame that is not the user's (dynscope's ``report()``, torch, the standard library);
    the frames that called into that (a test runner, a script) are not the model's story."""
    stack = list(parsed.user_stack)
    users = [i for i, f in enumerate(stack) if is_user_file(f.filename)]
    if not users:
        return []
    start = end = users[-1]
    while start > 0 and is_user_file(stack[start - 1].filename):
        start -= 1
    return stack[start : end + 1]


def fold_breaks(items: list[tuple[str, ParsedBreak]]) -> tuple[tuple[GraphBreak, ...], tuple[BreakEvent, ...]]:
    """Fold parsed breaks (with their compile ids) into distinct sites and raw events.

    Sites keep the order of their first event; the reason and stack shown are those of
    the first event at the site.
    """
    sites: dict[tuple[str, int], GraphBreak] = {}
    events: list[BreakEvent] = []
    for compile_id, parsed in items:
        frame = user_site(parsed)
        key = (frame.filename, frame.lineno)
        events.append(
            BreakEvent(
                compile_id=compile_id,
                filename=frame.filename,
                lineno=frame.lineno,
                reported_filename=parsed.reported_filename,
                reported_lineno=parsed.reported_lineno,
                gave_up=parsed.gave_up,
            )
        )
        known = sites.get(key)
        if known is not None:
            sites[key] = _with_event(known, compile_id, parsed.gave_up)
            continue
        source = frame.line or source_line(frame.filename, frame.lineno)
        category = category_of(parsed.gb_type, parsed.explanation, source, raised_at=parsed.reported_filename)
        reason = parsed.gb_type
        if parsed.explanation:
            reason = f"{parsed.gb_type}: {parsed.explanation}" if parsed.gb_type else parsed.explanation
        sites[key] = GraphBreak(
            filename=frame.filename,
            lineno=frame.lineno,
            function=qualified_name(frame.filename, frame.lineno, frame.function),
            source=source,
            reason=" ".join(reason.split()),
            category=category,
            explanation=parsed.explanation,
            hints=parsed.hints,
            gb_type=parsed.gb_type,
            gb_id=parsed.gb_id,
            doc_url=parsed.doc_url,
            user_stack=parsed.user_stack,
            detail=parsed.detail,
            debug_context=parsed.debug_context,
            torch_text=parsed.text,
            call_chain=tuple(
                replace(f, function=qualified_name(f.filename, f.lineno, f.function)) for f in _chain(parsed)
            ),
            count=1,
            gave_up=int(parsed.gave_up),
            compile_ids=(compile_id,),
            library=library_of(frame.filename),
            excerpt=excerpt(frame.filename, frame.lineno),
        )
    return tuple(sites.values()), tuple(events)


def _with_event(site: GraphBreak, compile_id: str, gave_up: bool) -> GraphBreak:
    return replace(
        site, count=site.count + 1, gave_up=site.gave_up + int(gave_up), compile_ids=(*site.compile_ids, compile_id)
    )
