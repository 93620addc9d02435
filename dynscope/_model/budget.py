"""Compile budgets: check a report against limits and say plainly what is over.

:class:`Budget` is the one definition of the limits, their validation and the messages;
``assert_compiles``, ``Report.check``, the ``compile_budget`` marker and the command line
all build one.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynscope._errors import CompileBudgetError, InputError
from dynscope._format import location, percent, plural

if TYPE_CHECKING:  # pragma: no cover
    from dynscope._model.report import Report

#: ``@pytest.mark.compile_budget`` keyword -> Budget field
MARKER_KEYWORDS = {
    "graph_breaks": "max_graph_breaks",
    "recompiles": "max_recompiles",
    "graphs": "max_graphs",
    "coverage": "min_coverage",
    "allow_unparsed": "allow_unparsed",
    "memory_ratio": "max_memory_ratio",
}


def _invalid(field: str, value: object) -> str | None:
    """What is wrong with ``value`` as the limit ``field`` ("must be ..."), or None."""
    if field == "allow_unparsed":
        return None if isinstance(value, bool) else "must be True or False"
    if value is None:
        return None
    # bool is an int to Python, but graph_breaks=True is a mistake, not a limit of 1.
    # The range tests are written so that NaN, which every comparison would let pass, fails.
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else None
    if field == "min_coverage":
        return None if number is not None and 0.0 <= number <= 1.0 else "must be between 0 and 1"
    return None if number is not None and number >= 0 else "must be a number >= 0 or None"


@dataclass(frozen=True)
class Budget:
    """Limits a compiled program must keep; None means no limit.

    Attributes:
        max_graph_breaks: most graph-break events. Defaults to 0.
        max_recompiles: most recompiles. Defaults to 0.
        min_coverage: least share of torch ops that must run inside graphs (0..1; only
            ``report()`` measures it). Defaults to None.
        max_graphs: most graphs. Defaults to None.
        allow_unparsed: pass even when PyTorch emitted trace messages dynscope could not
            read (``Report.unparsed``; the counts may then be short). Defaults to False.
        max_memory_ratio: most the compiled call's peak memory may be, as a multiple of
            eager's (``Report.memory``: ``report(memory=True)`` measures it; 1.1 allows 10%
            more). Defaults to None.

    Raises:
        InputError: a limit is not usable (the message names it and the value).

    Example:
        >>> budget = dynscope.Budget(max_graph_breaks=0, max_recompiles=1)
        >>> budget.check(rep)
    """

    max_graph_breaks: int | None = 0
    max_recompiles: int | None = 0
    min_coverage: float | None = None
    max_graphs: int | None = None
    allow_unparsed: bool = False
    max_memory_ratio: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            why = _invalid(f.name, value)
            if why is not None:
                raise InputError(f"{f.name} {why}; got {value!r}")

    @classmethod
    def from_marker(cls, mark: Any) -> Budget:
        """The budget of a ``@pytest.mark.compile_budget(graph_breaks=0, ...)`` marker.

        Keywords: graph_breaks, recompiles, graphs, coverage, allow_unparsed, memory_ratio
        (checked on the reports the test makes through the ``dynscope`` fixture, which then
        measure memory). A bare marker
        (no arguments) is the default budget: no graph breaks, no recompiles. A marker with
        keywords checks only the limits it names.

        Raises:
            InputError: a positional argument, an unknown keyword or a bad value, named.
        """
        name = f"@pytest.mark.{getattr(mark, 'name', 'compile_budget')}"
        if mark.args:
            raise InputError(
                f"{name} takes keywords only ({', '.join(MARKER_KEYWORDS)}); "
                f"got positional {mark.args!r}"
            )
        if not mark.kwargs:
            # A bare marker must check something: it means "compiles whole, once".
            return cls()
        limits: dict[str, Any] = {"max_graph_breaks": None, "max_recompiles": None}
        for key, value in mark.kwargs.items():
            if key not in MARKER_KEYWORDS:
                raise InputError(f"{name}: unknown keyword {key!r}; use {', '.join(MARKER_KEYWORDS)}")
            why = _invalid(MARKER_KEYWORDS[key], value)
            if why is not None:  # named as the user wrote it, not by the field's name
                raise InputError(f"{name}: {key} {why}; got {value!r}")
            limits[MARKER_KEYWORDS[key]] = value
        return cls(**limits)

    def problems(self, rep: Report) -> list[str]:
        """One readable block per exceeded limit; empty when the budget holds.

        A report with trace messages dynscope could not read (``rep.unparsed``) fails unless
        ``allow_unparsed``: its counts may be short, and a budget that passes on short counts
        is worse than none.
        """
        max_graph_breaks, max_recompiles = self.max_graph_breaks, self.max_recompiles
        min_coverage, max_graphs = self.min_coverage, self.max_graphs
        problems: list[str] = []
        if rep.unparsed and not self.allow_unparsed:
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
                lines.append(f"  {location(b.filename, b.lineno, full=True)} [{b.category}] x{b.count}")
                lines.append(f"      {b.source}")
                lines.append(f"      why: {b.reason}")
                lines.append(f"      fix: {b.fix}")
            problems.append("\n".join(lines))
        if max_recompiles is not None and rep.recompile_count > max_recompiles:
            lines = [f"{plural(rep.recompile_count, 'recompile')} (budget: {max_recompiles}):"]
            for r in rep.recompiles:
                lines.append(f"  {r.compile_id} {r.frame}: " + "; ".join(r.explained or r.reasons))
            problems.append("\n".join(lines))
        # DDP's bucket splits are not the user's graphs: a compile DDP split counts once.
        graphs = _budget_graphs(rep)
        if max_graphs is not None and graphs > max_graphs:
            split = rep.graph_count - graphs
            extra = f"; {plural(split, 'more graph')} from DDP bucket splits not counted" if split else ""
            problems.append(f"{plural(graphs, 'graph')} (budget: {max_graphs}{extra})")
        if min_coverage is not None:
            if rep.coverage is None:
                problems.append("coverage was not measured; use dynscope.report() / assert_compiles()")
            elif rep.coverage.ratio < min_coverage:
                c = rep.coverage
                lines = [
                    f"coverage {percent(c.ratio, 1)} below {percent(min_coverage, 1)} "
                    f"({c.ops_eager} torch ops ran eagerly, {c.ops_in_graphs} in graphs):"
                ]
                lines += [f"  {site} x{n}" for site, n in c.eager_sites[:10]]
                problems.append("\n".join(lines))
        if self.max_memory_ratio is not None:
            problems += _memory_problems(rep, self.max_memory_ratio)
        return problems

    def check(self, rep: Report) -> Report:
        """Return ``rep`` when the budget holds; raise CompileBudgetError listing every exceeded limit."""
        __tracebackhide__ = True
        problems = self.problems(rep)
        if problems:
            head = f"compile budget exceeded for {rep.title or 'the program'}"
            raise CompileBudgetError(
                head + "\n" + "\n".join(problems), report=rep, problems=problems
            )
        return rep


def _budget_graphs(rep: Report) -> int:
    """Graphs that count against ``max_graphs``: every graph, except that the pieces DDP's
    optimizer split one compile into (``Graph.split_by == "ddp_bucket"``) count as one."""
    plain = sum(1 for g in rep.graphs if g.split_by != "ddp_bucket")
    return plain + len({g.compile_id for g in rep.graphs if g.split_by == "ddp_bucket"})


def _memory_problems(rep: Report, limit: float) -> list[str]:
    """What is over a memory budget: the whole call's compiled peak against eager's, with
    the graphs that grew most; or why it cannot be told."""
    from dynscope._format import human_bytes

    m = rep.memory
    if m is None:
        return ["memory was not measured; use dynscope.report(..., memory=True) or "
                "assert_compiles(..., max_memory_ratio=...)"]
    if m.error:
        return [f"memory could not be measured: {m.error}"]
    if m.eager_peak <= 0 or m.ratio <= limit:
        return []
    lines = [
        f"compiled peak memory {human_bytes(m.compiled_peak)} is {m.ratio:.2f}x eager's {human_bytes(m.eager_peak)} "
        f"(budget: {limit:.2f}x; {m.method}):"
    ]
    grown = sorted((g for g in rep.graphs if g.memory is not None and not g.memory.error and g.memory.growth > 0),
                   key=lambda g: -(g.memory.growth if g.memory else 0))
    for g in grown[:5]:
        assert g.memory is not None
        eager, compiled = g.memory.peak
        lines.append(f"  graph {g.id} {g.frame} ({location(g.filename, g.lineno, full=True)}): "
                     f"{human_bytes(eager)} -> {human_bytes(compiled)} ({g.memory.ratio:.2f}x)")
    lines.append("  try: dynscope.advise(model, inputs, memory=True) measures activation checkpointing and "
                 "AOTAutograd's activation_memory_budget")
    return ["\n".join(lines)]
