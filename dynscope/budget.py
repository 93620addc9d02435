"""Compile budgets: check a report against limits and say plainly what is over."""

from __future__ import annotations

from dynscope.errors import CompileBudgetError, InputError
from dynscope.model import Report
from dynscope.render_text import plural


def _limit(name: str, value: int | float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise InputError(f"{name} must be a number >= 0 or None; got {value!r}")


def budget_problems(
    rep: Report,
    *,
    max_graph_breaks: int | None = 0,
    max_recompiles: int | None = 0,
    min_coverage: float | None = None,
    max_graphs: int | None = None,
    allow_unparsed: bool = False,
) -> list[str]:
    """One readable block per exceeded limit; empty when the budget holds.

    A report with trace messages dynscope could not read (``rep.unparsed``) fails unless
    ``allow_unparsed``: its counts may be short, and a budget that passes on short counts
    is worse than none.
    """
    _limit("max_graph_breaks", max_graph_breaks)
    _limit("max_recompiles", max_recompiles)
    _limit("max_graphs", max_graphs)
    if min_coverage is not None and not (0.0 <= min_coverage <= 1.0):
        raise InputError(f"min_coverage must be between 0 and 1; got {min_coverage!r}")
    problems: list[str] = []
    if rep.unparsed and not allow_unparsed:
        problems.append(
            f"{plural(rep.unparsed, 'PyTorch trace message')} could not be read, so the counts "
            f"below may be short. Report it with your torch version "
            f"({rep.torch_version or 'unknown'}); pass allow_unparsed=True to accept"
        )
    if max_graph_breaks is not None and rep.break_count > max_graph_breaks:
        lines = [
            f"{plural(rep.break_count, 'graph break')} at {plural(len(rep.breaks), 'site')} "
            f"(budget: {max_graph_breaks}):"
        ]
        for b in rep.breaks:
            lines.append(f"  {b.filename}:{b.lineno} [{b.category}] x{b.count}")
            lines.append(f"      {b.source}")
            lines.append(f"      why: {b.reason}")
            lines.append(f"      fix: {b.fix}")
        problems.append("\n".join(lines))
    if max_recompiles is not None and rep.recompile_count > max_recompiles:
        lines = [f"{plural(rep.recompile_count, 'recompile')} (budget: {max_recompiles}):"]
        for r in rep.recompiles:
            lines.append(f"  {r.compile_id} {r.frame}: " + "; ".join(r.explained or r.reasons))
        problems.append("\n".join(lines))
    if max_graphs is not None and rep.graph_count > max_graphs:
        problems.append(f"{plural(rep.graph_count, 'graph')} (budget: {max_graphs})")
    if min_coverage is not None:
        if rep.coverage is None:
            problems.append("coverage was not measured; use dynscope.report() / assert_compiles()")
        elif rep.coverage.ratio < min_coverage:
            c = rep.coverage
            lines = [
                f"coverage {c.ratio:.1%} below {min_coverage:.1%} "
                f"({c.ops_eager} torch ops ran eagerly, {c.ops_in_graphs} in graphs):"
            ]
            lines += [f"  {site} x{n}" for site, n in c.eager_sites[:10]]
            problems.append("\n".join(lines))
    return problems


def check_budget(rep: Report, **limits: int | float | None) -> None:
    """Raise CompileBudgetError listing every exceeded limit."""
    __tracebackhide__ = True
    problems = budget_problems(rep, **limits)  # type: ignore[arg-type]
    if problems:
        head = f"compile budget exceeded for {rep.title or 'the program'}"
        raise CompileBudgetError(
            head + "\n" + "\n".join(problems), report=rep, problems=problems
        )

