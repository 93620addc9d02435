"""Turn PyTorch's graph-break reports into user-facing break sites.

Input: the text of ``dynamo_graph_break_reason`` trace artifacts. Output: one
:class:`~dynscope.model.GraphBreak` per distinct site (the user's line), with every event
that hit the site folded into ``count``.
"""

from __future__ import annotations

import linecache
import re
from dataclasses import dataclass, replace

from dynscope import _torch
from dynscope.categories import classify, fix_for
from dynscope.model import BreakEvent, GraphBreak, StackFrame

_HEADER = re.compile(r"Graph break in user code at (?P<file>.+):(?P<line>\d+)\s*$")
# Greedy file group: paths may themselves contain quotes.
_FILE_LINE = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_GB_ID = re.compile(r"/gb/(gb\d+)\.html")
_URL = re.compile(r"https?://\S+\.html")


@dataclass(frozen=True)
class ParsedBreak:
    """What one graph-break report says, before the site is chosen."""

    reported_filename: str
    reported_lineno: int
    gb_type: str
    explanation: str
    hints: tuple[str, ...]
    gb_id: str
    doc_url: str
    user_stack: tuple[StackFrame, ...]
    # Dynamo gave up on the whole frame ("Failed to handle graph break gracefully..."):
    # when it follows a report of the same break, it is that break again, not a new one.
    gave_up: bool = False


def parse_break(payload: str) -> ParsedBreak | None:
    """Parse the text of one ``dynamo_graph_break_reason`` artifact; None if unrecognised.

    The usual form starts "Graph break in user code at FILE:LINE" and has a "User code
    traceback:" section. Other forms PyTorch emits (e.g. "Graph break: skip: from user
    code at:" followed by the stack) are read too: the stack starts right after the first
    line and its last frame is the reported location.
    """
    lines = payload.splitlines()
    if not lines or not lines[0].strip():
        return None
    header = _HEADER.match(lines[0].strip())
    explanation, hints, gb_type = "", [], ""
    doc_url, gb_id = "", ""
    stack: list[StackFrame] = []
    # Without the usual header the user stack follows the first line directly.
    in_stack = header is None
    if header is None and not any(_FILE_LINE.match(ln) for ln in lines[1:]):
        return None
    for i, raw in enumerate(lines[1:], start=1):
        line = raw.strip()
        if in_stack:
            if raw.startswith("Traceback (most recent call last)"):
                break  # Dynamo's own traceback follows; not the user's stack
            m = _FILE_LINE.match(raw)
            if m:
                code = lines[i + 1].strip() if i + 1 < len(lines) else ""
                if code.startswith("File ") or _is_caret_line(code):
                    code = ""
                stack.append(
                    StackFrame(m["file"], int(m["line"]), m["func"], code)
                )
            continue
        if line.startswith("Explanation:") and not explanation:
            explanation = line[len("Explanation:"):].strip()
            gb_type = _previous_text(lines, i)
        elif line.startswith("Hint:"):
            hints.append(line[len("Hint:"):].strip())
        elif line.startswith("User code traceback:"):
            in_stack = True
        elif not doc_url and (url := _URL.search(line)):
            doc_url = url.group(0)
            gb = _GB_ID.search(doc_url)
            gb_id = gb.group(1) if gb else ""
    if not gb_type:
        # Short form: "Graph Break Reason: <type>" with no explanation block.
        reason = next((ln for ln in lines if ln.startswith("Graph Break Reason:")), "")
        gb_type = reason[len("Graph Break Reason:"):].strip()
    if header is None:
        gb_type = gb_type or lines[0].strip().rstrip(":")
        last = stack[-1] if stack else StackFrame("", 0, "")
        reported = (last.filename, last.lineno)
    else:
        reported = (header["file"], int(header["line"]))
    if gb_type and not gb_id:
        gb_id = _torch.gb_id_for_type(gb_type)
    if gb_type and not doc_url:
        doc_url = _torch.doc_url_for(gb_type, gb_id)
    return ParsedBreak(
        reported_filename=reported[0],
        reported_lineno=reported[1],
        gb_type=gb_type,
        explanation=explanation,
        hints=tuple(hints),
        gb_id=gb_id,
        doc_url=doc_url,
        user_stack=tuple(stack),
        gave_up=any(
            ln.startswith("Graph Break Reason:") and _torch.is_secondary_break(ln.split(":", 1)[1])
            for ln in lines[:3]
        ),
    )


def _is_caret_line(text: str) -> bool:
    return bool(text) and set(text) <= {"^", "~", " "}


def _previous_text(lines: list[str], index: int) -> str:
    """The last non-blank line before ``index`` (the graph-break type)."""
    for j in range(index - 1, 0, -1):
        text = lines[j].strip()
        if text:
            if text.startswith("Graph Break Reason:"):
                return text[len("Graph Break Reason:"):].strip()
            return text
    return ""


def user_site(parsed: ParsedBreak) -> StackFrame:
    """The break's site for the user: innermost frame outside torch and the stdlib.

    Dynamo's own location can lie in copy.py or logging; the user wants the line that
    called into them. Falls back to Dynamo's location when the stack has no user frame.
    """
    for frame in reversed(parsed.user_stack):
        if _torch.is_user_file(frame.filename):
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
