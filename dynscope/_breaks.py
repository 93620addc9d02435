"""Turn PyTorch's graph-break reports into user-facing break sites.

Input: the text of ``dynamo_graph_break_reason`` trace artifacts. Output: one
:class:`~dynscope._model.GraphBreak` per distinct site (the user's line), with every event
that hit the site folded into ``count``.
"""

from __future__ import annotations

import linecache
from dataclasses import replace
from typing import TYPE_CHECKING

from dynscope._categories import classify, fix_for
from dynscope._model import BreakEvent, GraphBreak, StackFrame
from dynscope._torch.registry import is_user_file

if TYPE_CHECKING:
    from dynscope._torch.break_text import ParsedBreak


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
            )
        )
        known = sites.get(key)
        if known is not None:
            sites[key] = _with_event(known, compile_id)
            continue
        source = frame.line or source_line(frame.filename, frame.lineno)
        category = classify(parsed.gb_type, parsed.explanation, source)
        reason = parsed.gb_type
        if parsed.explanation:
            reason = f"{parsed.gb_type}: {parsed.explanation}" if parsed.gb_type else parsed.explanation
        sites[key] = GraphBreak(
            filename=frame.filename,
            lineno=frame.lineno,
            function=frame.function,
            source=source,
            reason=" ".join(reason.split()),
            category=category,
            fix=fix_for(category),
            explanation=parsed.explanation,
            hints=parsed.hints,
            gb_type=parsed.gb_type,
            gb_id=parsed.gb_id,
            doc_url=parsed.doc_url,
            user_stack=parsed.user_stack,
            count=1,
            compile_ids=(compile_id,),
            excerpt=excerpt(frame.filename, frame.lineno),
        )
    return tuple(sites.values()), tuple(events)


def _with_event(site: GraphBreak, compile_id: str) -> GraphBreak:
    return replace(site, count=site.count + 1, compile_ids=(*site.compile_ids, compile_id))
