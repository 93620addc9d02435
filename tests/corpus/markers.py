"""Read ``# BREAK: <category> [xN]`` markers from corpus source."""

from __future__ import annotations

import inspect
import re
from typing import Any

_MARK = re.compile(r"#\s*BREAK:\s*(?P<cat>.+?)(?:\s+x(?P<n>\d+))?\s*$")


def markers(objs: tuple[Any, ...]) -> dict[tuple[str, int], tuple[str, int]]:
    """(file, line) -> (category, count) for every marker in the objects' source."""
    out: dict[tuple[str, int], tuple[str, int]] = {}
    for obj in objs:
        filename = inspect.getsourcefile(obj)
        lines, start = inspect.getsourcelines(obj)
        for offset, text in enumerate(lines):
            m = _MARK.search(text)
            if m:
                out[(filename, start + offset)] = (m["cat"], int(m["n"] or 1))
    return out


def break_line(obj: Any, category: str | None = None, nth: int = 0) -> int:
    """The line number of a ``# BREAK:`` marker in ``obj``'s source (the nth one, optionally
    of one category), so tests never hard-code corpus line numbers."""
    found = sorted(
        line for (_, line), (cat, _) in markers((obj,)).items() if category is None or cat == category
    )
    if len(found) <= nth:
        raise LookupError(f"no BREAK marker #{nth} ({category or 'any category'}) in {obj!r}")
    return found[nth]
