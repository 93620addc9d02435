"""Compile budgets: check a report against limits and find what is over, as records.

:class:`Budget` is the one definition of the limits and their validation; ``assert_compiles``,
``Report.check``, the ``compile_budget`` marker and the command line all build one. What is
over is an :class:`Overrun` per limit; ``dynscope._render.budget`` says them in words, reached
through ``Budget.problems`` and ``Budget.check`` (``dynscope._model.display``).
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dynscope._errors import InputError
from dynscope._model.display import BudgetShortcuts

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


#: The limits an :class:`Overrun` names, in the order they are checked.
OVERRUN_KINDS = ("unparsed", "graph_breaks", "recompiles", "graphs", "coverage", "memory")


@dataclass(frozen=True)
class Overrun:
    """One limit a report is over, as fields (``dynscope._render.budget`` says it in words).

    Attributes:
        kind: the limit, one of OVERRUN_KINDS ("unparsed": trace messages not read).
        found: the report's figure: messages not read, break events, recompiles, graphs
            counted, the coverage ratio, the memory ratio. 0 when not measured.
        allowed: the budget's limit (None for "unparsed").
        measured: False when the report did not measure it (coverage, memory).
        uncounted: graphs left out of the count (DDP bucket splits).
        error: why memory could not be measured ("" when it was, or was not asked).
        graphs: the ids of the graphs that grew most (memory), most first.
    """

    kind: str  # one of OVERRUN_KINDS
    found: float = 0  # the report's figure; 0 when not measured
    allowed: float | None = None  # the limit; None for "unparsed"
    measured: bool = True  # False: the report did not measure it
    uncounted: int = 0  # graphs DDP's bucket splits added, not counted
    error: str = ""  # why memory could not be measured
    graphs: tuple[int, ...] = ()  # graph ids that grew most, most first (memory)


@dataclass(frozen=True)
class Budget(BudgetShortcuts):
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

    ``overruns(rep)`` gives each exceeded limit as an :class:`Overrun` record;
    ``problems(rep)`` says them in words; ``check(rep)`` raises CompileBudgetError with them.

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

    def overruns(self, rep: Report) -> tuple[Overrun, ...]:
        """Each exceeded limit as a record (which limit, the figure, the limit); empty when
        the budget holds. :meth:`problems` says them in words.

        A report with trace messages dynscope could not read (``rep.unparsed``) fails unless
        ``allow_unparsed``: its counts may be short, and a budget that passes on short counts
        is worse than none.
        """
        max_graph_breaks, max_recompiles = self.max_graph_breaks, self.max_recompiles
        min_coverage, max_graphs = self.min_coverage, self.max_graphs
        found: list[Overrun] = []
        if rep.unparsed and not self.allow_unparsed:
            found.append(Overrun("unparsed", rep.unparsed))
        if max_graph_breaks is not None and rep.break_count > max_graph_breaks:
            found.append(Overrun("graph_breaks", rep.break_count, max_graph_breaks))
        if max_recompiles is not None and rep.recompile_count > max_recompiles:
            found.append(Overrun("recompiles", rep.recompile_count, max_recompiles))
        # DDP's bucket splits are not the user's graphs: a compile DDP split counts once.
        graphs = _budget_graphs(rep)
        if max_graphs is not None and graphs > max_graphs:
            found.append(Overrun("graphs", graphs, max_graphs, uncounted=rep.graph_count - graphs))
        if min_coverage is not None:
            if rep.coverage is None:
                found.append(Overrun("coverage", allowed=min_coverage, measured=False))
            elif rep.coverage.ratio < min_coverage:
                found.append(Overrun("coverage", rep.coverage.ratio, min_coverage))
        if self.max_memory_ratio is not None:
            found += _memory_overruns(rep, self.max_memory_ratio)
        return tuple(found)


def _budget_graphs(rep: Report) -> int:
    """Graphs that count against ``max_graphs``: every graph, except that the pieces DDP's
    optimizer split one compile into (``Graph.split_by == "ddp_bucket"``) count as one."""
    plain = sum(1 for g in rep.graphs if g.split_by != "ddp_bucket")
    return plain + len({g.compile_id for g in rep.graphs if g.split_by == "ddp_bucket"})


def _memory_overruns(rep: Report, limit: float) -> list[Overrun]:
    """What is over a memory budget: the whole call's compiled peak against eager's, with
    the graphs that grew most; or that it cannot be told."""
    m = rep.memory
    if m is None:
        return [Overrun("memory", allowed=limit, measured=False)]
    if m.error:
        return [Overrun("memory", allowed=limit, measured=False, error=m.error)]
    if m.eager_peak <= 0 or m.ratio <= limit:
        return []
    grown = sorted((g for g in rep.graphs if g.memory is not None and not g.memory.error and g.memory.growth > 0),
                   key=lambda g: -(g.memory.growth if g.memory else 0))
    return [Overrun("memory", m.ratio, limit, graphs=tuple(g.id for g in grown[:5]))]
