"""A report diff (:class:`dynscope._model.diff.ReportDiff`) as terminal text: its figures,
sites and reasons said here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tabulate import tabulate

from dynscope._format import percent

if TYPE_CHECKING:
    from dynscope._model.breaks import GraphBreak
    from dynscope._model.diff import FigureChange, ReportDiff, WorseFigure

#: Each figure's name in the table (``FigureChange.part`` follows where it has one).
_NAMES = {
    "torch": "torch", "graphs": "graphs", "graph_breaks": "graph breaks", "break_sites": "break sites",
    "recompiles": "recompiles", "graph_ops": "graph ops", "compile_s": "compile s", "phase_s": "compile s:",
    "cache": "cache", "coverage": "coverage %", "speedup": "speedup",
}


def figure_row(f: FigureChange) -> tuple[str, str, str, str]:
    """One figure as a table row: what, old, new, and the change ("+2", "-0.5", "changed"; "" none)."""
    what = " ".join([_NAMES.get(f.what, f.what), *f.part])
    if isinstance(f.old, str) or isinstance(f.new, str):  # torch's version
        return what, str(f.old) or "-", str(f.new) or "-", "changed" if f.changed else ""
    a, b = f.old, f.new
    change = "" if a == b else (f"+{b - a:g}" if b > a else f"{b - a:g}")
    return what, f"{a:g}", f"{b:g}", change


def worse_words(w: WorseFigure) -> str:
    """Why the new report is worse, in words ("graph breaks rose from 0 to 1")."""
    if w.what == "coverage":
        return f"coverage fell from {percent(w.old, 1)} to {percent(w.new, 1)}"
    return f"{_NAMES.get(w.what, w.what)} rose from {w.old} to {w.new}"  # counts: ints, as they are


def site_words(b: GraphBreak) -> str:
    """A break site as the diff lists it: "file:line [category] code"."""
    return f"{b.location} [{b.category}] {b.source}"


def render_diff(d: ReportDiff) -> str:
    """The diff as terminal text."""
    out = [tabulate([figure_row(f) for f in d.figures], headers=["", "old", "new", "change"], tablefmt="simple"), ""]
    if d.breaks_added:
        out += ["Breaks added:"] + [f"  + {site_words(b)}" for b in d.breaks_added] + [""]
    if d.breaks_removed:
        out += ["Breaks removed:"] + [f"  - {site_words(b)}" for b in d.breaks_removed] + [""]
    if d.breaks_moved:
        out += ["Breaks moved (the same statement, the same reason):"] + [
            f"  ~ {a.location} -> {site_words(b)}" for a, b in d.breaks_moved] + [""]
    if d.ops_changed:
        out += ["Graph ops changed:"] + [f"  {op}: {a} -> {b}" for op, a, b in d.ops_changed] + [""]
    if d.worse:
        out += ["WORSE: " + "; ".join(worse_words(w) for w in d.worse_because)]
    else:
        out += ["not worse"]
    return "\n".join(out) + "\n"
