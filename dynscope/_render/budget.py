"""A compile budget's overruns in words: the blocks ``Budget.problems`` returns, the
``CompileBudgetError`` message ``Budget.check`` raises and the command line's gates say."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import human_bytes, location, percent, plural

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynscope._model.budget import Overrun
    from dynscope._model.report import Report

__all__ = ["exceeded_text", "overrun_detail", "overrun_head", "overrun_text", "problems_text"]


def _limit(o: Overrun) -> int:
    return int(o.allowed or 0)


def overrun_head(o: Overrun, rep: Report) -> str:
    """The first line of an overrun: the figure against the limit ("2 graph breaks at 1 site
    (budget: 0):")."""
    if o.kind == "unparsed":
        return (f"{plural(int(o.found), 'PyTorch trace message')} could not be read, so the counts "
                f"below may be short. Report it with your torch version "
                f"({rep.torch_version or 'unknown'}); pass allow_unparsed=True to accept")
    if o.kind == "graph_breaks":
        return (f"{plural(int(o.found), 'graph break')} at {plural(len(rep.breaks), 'site')} "
                f"(budget: {_limit(o)}):")
    if o.kind == "recompiles":
        return f"{plural(int(o.found), 'recompile')} (budget: {_limit(o)}):"
    if o.kind == "graphs":
        extra = f"; {plural(o.uncounted, 'more graph')} from DDP bucket splits not counted" if o.uncounted else ""
        return f"{plural(int(o.found), 'graph')} (budget: {_limit(o)}{extra})"
    if o.kind == "coverage":
        if not o.measured:
            return "coverage was not measured; use dynscope.report() / assert_compiles()"
        c = rep.coverage
        eager, inside = (c.ops_eager, c.ops_in_graphs) if c is not None else (0, 0)
        return (f"coverage {percent(o.found, 1)} below {percent(o.allowed or 0.0, 1)} "
                f"({eager} torch ops ran eagerly, {inside} in graphs):")
    if o.kind == "memory":
        if o.error:
            return f"memory could not be measured: {o.error}"
        if not o.measured:
            return ("memory was not measured; use dynscope.report(..., memory=True) or "
                    "assert_compiles(..., max_memory_ratio=...)")
        m = rep.memory
        compiled, eager, method = (m.compiled_peak, m.eager_peak, m.method) if m is not None else (0, 0, "")
        return (f"compiled peak memory {human_bytes(compiled)} is {o.found:.2f}x eager's {human_bytes(eager)} "
                f"(budget: {o.allowed or 0.0:.2f}x; {method}):")
    return f"{o.kind}: {o.found:g} (budget: {o.allowed})"


def overrun_detail(o: Overrun, rep: Report) -> list[str]:
    """The lines under an overrun's head: each break site, each recompile with its failed
    guard in words, the eager sites, the graphs that grew."""
    from dynscope._render.causes import explained

    lines: list[str] = []
    if o.kind == "graph_breaks":
        for b in rep.breaks:
            lines.append(f"  {location(b.filename, b.lineno, full=True)} [{b.category}] x{b.count}")
            lines.append(f"      {b.source}")
            lines.append(f"      why: {b.reason}")
            lines.append(f"      fix: {b.fix}")
    elif o.kind == "recompiles":
        lines += [f"  {r.compile_id} {r.frame}: " + "; ".join(tuple(explained(c) for c in r.causes) or r.raw_reasons) for r in rep.recompiles]
    elif o.kind == "coverage" and o.measured and rep.coverage is not None:
        lines += [f"  {site} x{n}" for site, n in rep.coverage.eager_sites[:10]]
    elif o.kind == "memory" and o.measured and not o.error:
        by_id = {g.id: g for g in rep.graphs}
        for gid in o.graphs:
            g = by_id[gid]
            assert g.memory is not None
            eager, compiled = g.memory.peak
            lines.append(f"  graph {g.id} {g.frame} ({location(g.filename, g.lineno, full=True)}): "
                         f"{human_bytes(eager)} -> {human_bytes(compiled)} ({g.memory.ratio:.2f}x)")
        lines.append("  try: dynscope.advise(model, inputs, memory=True) measures activation checkpointing and "
                     "AOTAutograd's activation_memory_budget")
    return lines


def overrun_text(o: Overrun, rep: Report) -> str:
    """One overrun as one readable block: its head, then its detail lines."""
    return "\n".join([overrun_head(o, rep), *overrun_detail(o, rep)])


def problems_text(overruns: Sequence[Overrun], rep: Report) -> list[str]:
    """Every overrun as a block (``Budget.problems``)."""
    return [overrun_text(o, rep) for o in overruns]


def exceeded_text(overruns: Sequence[Overrun], rep: Report) -> tuple[str, list[str]]:
    """The ``CompileBudgetError`` ``Budget.check`` raises, in words: its message (a head naming
    the program, then every overrun's block) and the blocks themselves."""
    problems = problems_text(overruns, rep)
    head = f"compile budget exceeded for {rep.title or 'the program'}"
    return "\n".join([head, *problems]), problems
