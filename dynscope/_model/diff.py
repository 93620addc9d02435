"""Compare two reports: what changed, and whether the new one is worse (plain data;
``dynscope._render.diff`` draws it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynscope._format import percent

if TYPE_CHECKING:
    from dynscope._model.breaks import GraphBreak
    from dynscope._model.report import Report


@dataclass(frozen=True)
class ReportDiff:
    """What changed from ``old`` to ``new``."""

    rows: tuple[tuple[str, str, str, str], ...]  # (what, old, new, change)
    breaks_added: tuple[str, ...]  # "file:line [category] code"
    breaks_removed: tuple[str, ...]
    ops_changed: tuple[tuple[str, int, int], ...]  # (op, old count, new count) over all graphs
    worse_because: tuple[str, ...]  # empty when the new report is not worse

    @property
    def worse(self) -> bool:
        """True when the new run has more breaks or recompiles, or lower coverage."""
        return bool(self.worse_because)


def _site(b: GraphBreak) -> tuple[str, int]:
    return (b.filename, b.lineno)


def _ops(rep: Report) -> dict[str, int]:
    total: dict[str, int] = {}
    for g in rep.graphs:
        for op, n in g.op_counts:
            total[op] = total.get(op, 0) + n
    return total


def diff_reports(old: Report, new: Report) -> ReportDiff:
    """Compare two reports."""
    rows: list[tuple[str, str, str, str]] = []

    def add(what: str, a: float, b: float, fmt: str = "{:g}") -> None:
        change = "" if a == b else (f"+{fmt.format(b - a)}" if b > a else fmt.format(b - a))
        rows.append((what, fmt.format(a), fmt.format(b), change))

    add("graphs", old.graph_count, new.graph_count)
    add("graph breaks", old.break_count, new.break_count)
    add("break sites", len(old.breaks), len(new.breaks))
    add("recompiles", old.recompile_count, new.recompile_count)
    add("graph ops", sum(g.op_count for g in old.graphs), sum(g.op_count for g in new.graphs))
    add("compile s", round(old.compile_time.total_s, 3), round(new.compile_time.total_s, 3))
    worse: list[str] = []
    if old.coverage is not None and new.coverage is not None:
        add("coverage %", round(old.coverage.ratio * 100, 1), round(new.coverage.ratio * 100, 1))
        if new.coverage.ratio < old.coverage.ratio - 1e-9:
            worse.append(f"coverage fell from {percent(old.coverage.ratio, 1)} to {percent(new.coverage.ratio, 1)}")
    old_t = {m.mode: m for m in old.timing}
    for m in new.timing:
        if m.mode in old_t and old_t[m.mode].speedup and m.speedup:
            add(f"speedup {m.mode}", round(old_t[m.mode].speedup, 2), round(m.speedup, 2))
    if new.break_count > old.break_count:
        worse.append(f"graph breaks rose from {old.break_count} to {new.break_count}")
    if new.recompile_count > old.recompile_count:
        worse.append(f"recompiles rose from {old.recompile_count} to {new.recompile_count}")
    old_sites = {_site(b): b for b in old.breaks}
    new_sites = {_site(b): b for b in new.breaks}

    def says(b: GraphBreak) -> str:
        return f"{b.location} [{b.category}] {b.source}"

    added = tuple(says(b) for k, b in new_sites.items() if k not in old_sites)
    removed = tuple(says(b) for k, b in old_sites.items() if k not in new_sites)
    a_ops, b_ops = _ops(old), _ops(new)
    ops_changed = tuple(
        (op, a_ops.get(op, 0), b_ops.get(op, 0))
        for op in sorted(set(a_ops) | set(b_ops))
        if a_ops.get(op, 0) != b_ops.get(op, 0)
    )
    return ReportDiff(tuple(rows), added, removed, ops_changed, tuple(worse))
