"""Dynamo's graph-break report text (``dynamo_graph_break_reason``), read once.

Forms read (torch 2.11 .. 2.14, recorded in tests/traces): the usual "Graph break in user
code at FILE:LINE" report with "Graph Break Reason:", "Explanation:", "Hint:" lines, a gb
doc link and a "User code traceback:" section; the header-less "Graph break: skip: from
user code at:" form; and the "Failed to handle graph break gracefully" form Dynamo logs
when it gives up on a frame.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from dynscope._lexicon.wording import is_secondary_break
from dynscope._model import StackFrame
from dynscope._torch.registry import doc_url_for, gb_id_for_type

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
    # Dynamo gave up on the whole frame ("Failed to handle graph break gracefully..."): the
    # frame runs eagerly. Still one record, one event: PyTorch's own tests count it so.
    gave_up: bool = False
    # The explanation's further lines (e.g. "The branch condition involves a tensor
    # computed as follows: ..." with the graph code of the condition), dedented.
    detail: str = ""
    debug_context: str = ""  # "Developer debug context: ..." ("attempted to jump with TensorVariable()")
    text: str = ""  # the whole report, up to Dynamo's own traceback


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
    if header is None and not any(_FILE_LINE.match(ln) for ln in lines[1:]):
        return None
    # Without the usual header the user stack follows the first line directly.
    body = _read_body(lines, in_stack=header is None)
    gb_type = body.gb_type or _short_reason(lines)
    if header is None:
        gb_type = gb_type or lines[0].strip().rstrip(":")
        last = body.stack[-1] if body.stack else StackFrame("", 0, "")
        reported = (last.filename, last.lineno)
    else:
        reported = (header["file"], int(header["line"]))
    gb_id, doc_url = _doc_of(gb_type, body.gb_id, body.doc_url)
    return ParsedBreak(
        reported_filename=reported[0],
        reported_lineno=reported[1],
        gb_type=gb_type,
        explanation=body.explanation,
        hints=tuple(body.hints),
        gb_id=gb_id,
        doc_url=doc_url,
        user_stack=tuple(body.stack),
        detail=textwrap.dedent("\n".join(body.detail)).strip(),
        debug_context=body.debug_context,
        text="\n".join(lines[: next((j for j, ln in enumerate(lines) if ln.startswith("Traceback (most recent")), len(lines))]).rstrip(),
        gave_up=any(
            ln.startswith("Graph Break Reason:") and is_secondary_break(ln.split(":", 1)[1])
            for ln in lines[:3]
        ),
    )


@dataclass
class _Body:
    """What the lines after a report's first say, gathered in one pass."""

    gb_type: str = ""
    explanation: str = ""
    hints: list[str] = field(default_factory=list)
    doc_url: str = ""
    gb_id: str = ""
    debug_context: str = ""
    detail: list[str] = field(default_factory=list)  # the explanation's further lines, as written
    stack: list[StackFrame] = field(default_factory=list)


# Lines that end the explanation's further lines (the detail).
_DETAIL_ENDS = ("Hint:", "Developer debug context:", "User code traceback:", "For more details")


def _read_body(lines: list[str], *, in_stack: bool) -> _Body:
    """The report's lines after the first: its labelled lines, then the user stack (from
    "User code traceback:", or from the start when ``in_stack``) up to Dynamo's own traceback."""
    body = _Body()
    in_detail = False
    for i, raw in enumerate(lines[1:], start=1):
        if in_detail and not in_stack:
            if not raw.strip().startswith(_DETAIL_ENDS):
                body.detail.append(raw)
                continue
            in_detail = False
        if in_stack:
            if raw.startswith("Traceback (most recent call last)"):
                break  # Dynamo's own traceback follows; not the user's stack
            if m := _FILE_LINE.match(raw):
                body.stack.append(_frame(m, lines, i))
        elif raw.strip().startswith("User code traceback:"):
            in_stack = True
        else:
            in_detail = _read_labelled(body, lines, i)
    return body


def _read_labelled(body: _Body, lines: list[str], i: int) -> bool:
    """Read line ``i`` if it is one of the labelled lines ("Explanation:", "Hint:", the doc
    link...); True when it opens the explanation, whose further lines are the detail."""
    line = lines[i].strip()
    if line.startswith("Explanation:") and not body.explanation:
        body.explanation = line[len("Explanation:"):].strip()
        body.gb_type = _previous_text(lines, i)
        return True
    if line.startswith("Developer debug context:"):
        body.debug_context = line[len("Developer debug context:"):].strip()
    elif line.startswith("Hint:"):
        body.hints.append(line[len("Hint:"):].strip())
    elif not body.doc_url and (url := _URL.search(line)):
        body.doc_url = url.group(0)
        gb = _GB_ID.search(body.doc_url)
        body.gb_id = gb.group(1) if gb else ""
    return False


def _frame(m: re.Match[str], lines: list[str], i: int) -> StackFrame:
    """The stack frame whose ``File "...", line N, in f`` line is ``lines[i]``, with the code
    line under it (none when the next line is another frame or a caret line)."""
    code = lines[i + 1].strip() if i + 1 < len(lines) else ""
    if code.startswith("File ") or _is_caret_line(code):
        code = ""
    return StackFrame(m["file"], int(m["line"]), m["func"], code)


def _short_reason(lines: list[str]) -> str:
    """The type in the short form, "Graph Break Reason: <type>" with no explanation block."""
    reason = next((ln for ln in lines if ln.startswith("Graph Break Reason:")), "")
    return reason[len("Graph Break Reason:"):].strip()


def _doc_of(gb_type: str, gb_id: str, doc_url: str) -> tuple[str, str]:
    """The gb id and doc link, from the registry by type where the report gave none."""
    if gb_type and not gb_id:
        gb_id = gb_id_for_type(gb_type)
    if gb_type and not doc_url:
        doc_url = doc_url_for(gb_type, gb_id)
    return gb_id, doc_url


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


def without_outer_frames(text: str, count: int) -> str:
    """A break report with the first ``count`` frames of its "User code traceback:" removed
    (each frame is a ``File "...", line N, in f`` line and the code and caret lines under it)."""
    if count <= 0:
        return text
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("User code traceback:")) + 1
    except StopIteration:
        return text
    frame_starts = [i for i in range(start, len(lines)) if _FILE_LINE.match(lines[i])]
    if len(frame_starts) <= count:
        cut_end = len(lines) if len(frame_starts) == count else start
        return "\n".join(lines[:start] + lines[cut_end:])
    return "\n".join(lines[:start] + lines[frame_starts[count]:])
