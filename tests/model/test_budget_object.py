"""dynscope.Budget: the one definition of compile-budget limits, used by every front end."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch._dynamo.repro.after_dynamo

import dynscope
from dynscope import Budget
from tests.corpus.programs import PrintModel, _x


@pytest.fixture(scope="module")
def broken() -> dynscope.Report:
    """A real report over budget: 4 graphs, 2 print-break events, 2 recompiles (one per graph)."""
    return dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"max_graph_breaks": -1}, "max_graph_breaks must be a number >= 0 or None; got -1"),
        ({"max_recompiles": "1"}, "max_recompiles must be a number >= 0 or None; got '1'"),
        ({"max_graphs": True}, "max_graphs must be a number >= 0 or None; got True"),
        ({"max_graph_breaks": float("nan")}, "max_graph_breaks must be a number >= 0 or None; got nan"),
        ({"min_coverage": 2}, "min_coverage must be between 0 and 1; got 2"),
        ({"min_coverage": float("nan")}, "min_coverage must be between 0 and 1; got nan"),
        ({"allow_unparsed": "yes"}, "allow_unparsed must be True or False; got 'yes'"),
    ],
)
def test_bad_limits_are_named(limits: dict, message: str) -> None:
    with pytest.raises(dynscope.InputError) as info:
        Budget(**limits)
    assert str(info.value) == message


def test_budget_is_frozen_and_defaults_like_assert_compiles() -> None:
    budget = Budget()
    assert (budget.max_graph_breaks, budget.max_recompiles, budget.min_coverage, budget.max_graphs,
            budget.allow_unparsed) == (0, 0, None, None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        budget.max_graph_breaks = 3  # type: ignore[misc]
    assert "Budget" in dynscope.__all__


def test_nan_limit_no_longer_passes_silently(broken: dynscope.Report) -> None:
    # Every comparison with NaN is False, so a NaN limit used to accept any count.
    with pytest.raises(dynscope.InputError, match="max_graph_breaks must be a number"):
        broken.check(max_graph_breaks=float("nan"), max_recompiles=None)


def test_problems_and_check_on_a_real_report(broken: dynscope.Report) -> None:
    assert (broken.graph_count, broken.break_count, broken.recompile_count) == (4, 2, 2)
    problems = Budget().problems(broken)
    assert [p.splitlines()[0] for p in problems] == [
        "2 graph breaks at 1 site (budget: 0):",
        "2 recompiles (budget: 0):",
    ]
    assert Budget(max_graph_breaks=2, max_recompiles=2).problems(broken) == []
    assert Budget(max_graph_breaks=None, max_recompiles=None, max_graphs=1).problems(broken) == [
        "4 graphs (budget: 1)"
    ]
    assert Budget(max_graph_breaks=2, max_recompiles=2).check(broken) is broken
    with pytest.raises(dynscope.CompileBudgetError) as info:
        Budget().check(broken)
    assert info.value.problems == problems and info.value.report is broken
    # Report.check is the same budget spelled as keywords: the same message.
    with pytest.raises(dynscope.CompileBudgetError) as via_report:
        broken.check()
    assert str(via_report.value) == str(info.value)


def test_assert_compiles_refuses_a_bad_limit_before_running_the_model() -> None:
    ran: list[int] = []

    def model(x: torch.Tensor) -> torch.Tensor:
        ran.append(1)
        return x.sin()

    with pytest.raises(dynscope.InputError, match="max_recompiles must be a number >= 0 or None; got -2"):
        dynscope.assert_compiles(model, torch.ones(3), max_recompiles=-2)
    assert ran == [], "the limits are checked before anything is compiled or run"


def test_from_marker() -> None:
    mark = pytest.mark.compile_budget(graph_breaks=1, coverage=0.5, allow_unparsed=True).mark
    assert Budget.from_marker(mark) == Budget(
        max_graph_breaks=1, max_recompiles=None, min_coverage=0.5, allow_unparsed=True
    )
    # A marker with keywords limits only what it names; a bare one is the default budget.
    assert Budget.from_marker(pytest.mark.compile_budget(graphs=3).mark) == Budget(
        max_graph_breaks=None, max_recompiles=None, max_graphs=3
    )
    assert Budget.from_marker(pytest.mark.compile_budget.mark) == Budget(max_graph_breaks=0, max_recompiles=0)
    assert Budget.from_marker(pytest.mark.compile_budget().mark) == Budget()
    with pytest.raises(dynscope.InputError) as info:
        Budget.from_marker(pytest.mark.compile_budget(graph_brakes=0).mark)
    assert str(info.value) == (
        "@pytest.mark.compile_budget: unknown keyword 'graph_brakes'; "
        "use graph_breaks, recompiles, graphs, coverage, allow_unparsed, memory_ratio"
    )
    with pytest.raises(dynscope.InputError, match=r"takes keywords only .*got positional \(0,\)"):
        Budget.from_marker(pytest.mark.compile_budget(0).mark)
    with pytest.raises(dynscope.InputError) as info:
        Budget.from_marker(pytest.mark.compile_budget(recompiles=-1).mark)
    assert str(info.value) == "@pytest.mark.compile_budget: recompiles must be a number >= 0 or None; got -1"


def test_plugin_reports_a_bad_marker_value_without_running_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_value="""
import pytest

RAN = []

@pytest.mark.compile_budget(coverage=95)
def test_percent_instead_of_share():
    RAN.append(1)
    print("TEST BODY RAN")
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-s")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*test_value.py::test_percent_instead_of_share: "
        "@pytest.mark.compile_budget: coverage must be between 0 and 1; got 95*"
    ])
    assert "TEST BODY RAN" not in result.stdout.str()
