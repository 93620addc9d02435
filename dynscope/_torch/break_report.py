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
from dataclasses import dataclass

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
    explanation, hints, gb_type = "", [], ""
    doc_url, gb_id = "", ""
    stack: list[StackFrame] = []
    # Without the usual header the user stack follows the first line directly.
    in_stack = header is None
    if header is None and not any(_FILE_LINE.match(ln) for ln in lines[1:]):
        return None
    detail: list[str] = []
    in_detail = False
    debug_context = ""
    for i, raw in enumerate(lines[1:], start=1):
        line = raw.strip()
        if in_detail and not in_stack:
            if line.startswith(("Hint:", "Developer debug context:", "User code traceback:", "For more details")):
                in_detail = False
            else:
                detail.append(raw)
                continue
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
            in_detail = True
        elif line.startswith("Developer debug context:"):
            debug_context = line[len("Developer debug context:"):].strip()
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
        gb_id = gb_id_for_type(gb_type)
    if gb_type and not doc_url:
        doc_url = doc_url_for(gb_type, gb_id)
    return ParsedBreak(
        reported_filename=reported[0],
        reported_lineno=reported[1],
        gb_type=gb_type,
        explanation=explanation,
        hints=tuple(hints),
        gb_id=gb_id,
        doc_url=doc_url,
        user_stack=tuple(stack),
        detail=textwrap.dedent("\n".join(detail)).strip(),
        debug_context=debug_context,
        text="\n".join(lines[: next((j for j, ln in enumerate(lines) if ln.startswith("Traceback (most recent")), len(lines))]).rstrip(),
        gave_up=any(
            ln.startswith("Graph Break Reason:") and is_secondary_break(ln.split(":", 1)[1])
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
