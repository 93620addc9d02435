"""A report diff (:class:`dynscope._model.diff.ReportDiff`) as terminal text."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabulate import tabulate

if TYPE_CHECKING:
    from dynscope._model.diff import ReportDiff


def render_diff(d: ReportDiff) -> str:
    """The diff as terminal text."""
    out = [tabulate(d.rows, headers=["", "old", "new", "change"], tablefmt="simple"), ""]
    if d.breaks_added:
        out += ["Breaks added:"] + [f"  + {s}" for s in d.breaks_added] + [""]
    if d.breaks_removed:
        out += ["Breaks removed:"] + [f"  - {s}" for s in d.breaks_removed] + [""]
    if d.breaks_moved:
        out += ["Breaks moved (the same statement, the same reason):"] + [f"  ~ {s}" for s in d.breaks_moved] + [""]
    if d.ops_changed:
        out += ["Graph ops changed:"] + [f"  {op}: {a} -> {b}" for op, a, b in d.ops_changed] + [""]
    if d.worse:
        out += ["WORSE: " + "; ".join(d.worse_because)]
    else:
        out += ["not worse"]
    return "\n".join(out) + "\n"
