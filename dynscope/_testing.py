"""Assertions for test suites: hold a program to a compile budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynscope._capture.capture import _MISSING, report
from dynscope._model.budget import Budget

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dynscope._model import Report


def assert_compiles(
    model: Callable[..., Any],
    inputs: Any = _MISSING,
    *,
    calls: Sequence[Any] | None = None,
    max_graph_breaks: int | None = 0,
    max_recompiles: int | None = 0,
    min_coverage: float | None = None,
    max_graphs: int | None = None,
    allow_unparsed: bool = False,
    max_memory_ratio: float | None = None,
    inner: str | Callable[..., Any] = "eager",
    dynamic: bool | None = None,
) -> Report:
    """Compile and run ``model``; fail if it breaks its compile budget.

    Args:
        model, inputs, calls, inner, dynamic: as for :func:`dynscope.report`.
        max_graph_breaks, max_recompiles, min_coverage, max_graphs, allow_unparsed: the
            limits, as for :class:`dynscope.Budget` (graph breaks and recompiles default
            to 0, the others to no limit).
        max_memory_ratio: most the compiled call's peak memory may be, as a multiple of
            eager's; set, the program is also measured (``report(memory=True)``: one
            Inductor compile). Defaults to None.

    Returns:
        The report, when the budget holds.

    Raises:
        InputError: a limit is not usable (before anything is compiled).
        CompileBudgetError: (an AssertionError) listing every break and recompile over
            budget with file:line, code, category, reason and fix.

    Example:
        >>> dynscope.assert_compiles(model, x, max_graph_breaks=0, max_recompiles=0)
    """
    __tracebackhide__ = True
    # Built first: a bad limit is reported before the model is compiled and run.
    budget = Budget(
        max_graph_breaks=max_graph_breaks,
        max_recompiles=max_recompiles,
        min_coverage=min_coverage,
        max_graphs=max_graphs,
        allow_unparsed=allow_unparsed,
        max_memory_ratio=max_memory_ratio,
    )
    kwargs: dict[str, Any] = {"calls": calls} if calls is not None else {}
    if inputs is not _MISSING:
        kwargs["inputs"] = inputs
    memory = max_memory_ratio is not None
    return budget.check(report(model, inner=inner, dynamic=dynamic, memory=memory, **kwargs))
