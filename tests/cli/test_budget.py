"""Compile budgets: assert_compiles, Report.check, coverage, and the pytest plugin."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo.repro.after_dynamo

import dynscope

# pytester runs the inner sessions in this process and afterwards drops every module first
# imported inside them; Inductor's modules register global cache artifacts on import and
# fail on a second import. Loading Dynamo's backend machinery here keeps inner runs from
# importing it at all.
from tests.corpus.markers import break_line
from tests.corpus.programs import (
    MLP,
    PROGRAMS,
    PrintModel,
    _train_step_setup,
    _x,
    disabled_fn,
    item_fn,
    loop_print_fn,
)

PRINT_LINE = break_line(PrintModel)

BY_NAME = {p.name: p for p in PROGRAMS}


def test_assert_compiles_passes_and_returns_report() -> None:
    rep = dynscope.assert_compiles(MLP(), _x(4, 8))
    assert rep.graph_count == 1 and rep.coverage is not None and rep.coverage.ratio == 1.0


def test_assert_compiles_message_lists_breaks_and_recompiles() -> None:
    with pytest.raises(dynscope.CompileBudgetError) as info:
        dynscope.assert_compiles(PrintModel(), calls=[_x(4, 8), _x(6, 8)])
    err = info.value
    assert isinstance(err, AssertionError)
    text = str(err)
    assert "2 graph breaks at 1 site (budget: 0):" in text
    assert f"programs.py:{PRINT_LINE} [logging/print side effect] x2" in text
    assert 'print("activations ready")' in text
    assert "fix: print/logging inside the compiled region" in text
    assert "2 recompiles (budget: 0):" in text
    assert "input x changed size in dim 0: compiled for 4, called with 6" in text
    assert err.report.break_count == 2 and len(err.problems) == 2


def test_report_check_and_limits() -> None:
    rep = dynscope.report(PrintModel(), _x(4, 8))
    assert rep.check(max_graph_breaks=1) is rep
    with pytest.raises(dynscope.CompileBudgetError, match="2 graphs"):
        rep.check(max_graph_breaks=None, max_graphs=1)
    with pytest.raises(dynscope.InputError, match="max_graph_breaks must be a number"):
        rep.check(max_graph_breaks=-1)
    with pytest.raises(dynscope.InputError, match="min_coverage must be between 0 and 1"):
        rep.check(min_coverage=2)


def test_coverage_known_values() -> None:
    # No break, no eager op: 1.0.
    model, calls = BY_NAME["mlp_no_break"].make()
    cov = dynscope.report(model, calls=calls).coverage
    assert (cov.ops_in_graphs, cov.ops_eager, cov.ratio) == (7, 0, 1.0)
    # A print break costs no coverage: 3 ops (linear, linear, relu), all in graphs.
    model, calls = BY_NAME["print_break"].make()
    cov = dynscope.report(model, calls=calls).coverage
    assert (cov.ops_in_graphs, cov.ops_eager) == (3, 0)
    # .item() runs one op eagerly: abs, max in graph 1; div in graph 2; item eager -> 3/4.
    model, calls = BY_NAME["item_break"].make()
    cov = dynscope.report(model, calls=calls).coverage
    assert (cov.ops_in_graphs, cov.ops_eager, cov.ratio) == (3, 1, 0.75)
    assert cov.eager_sites == ((f"programs.py:{break_line(item_fn)} aten::item", 1),), "tied to the .item() break's line"
    # A disabled function: its one multiply runs eagerly between two graphs -> 2/3.
    model, calls = BY_NAME["disabled_break"].make()
    cov = dynscope.report(model, calls=calls).coverage
    assert (cov.ops_in_graphs, cov.ops_eager) == (2, 1)
    assert cov.eager_sites == ((f"programs.py:{break_line(disabled_fn)} aten::mul", 1),)
    # A break in a loop: the frame falls back, all three adds run eagerly -> 0.
    model, calls = BY_NAME["loop_print"].make()
    cov = dynscope.report(model, calls=calls).coverage
    assert (cov.ops_in_graphs, cov.ops_eager, cov.ratio) == (0, 3, 0.0)
    # Each at the line that ran it (issue 43: the frame began before the line tracer did).
    add_line = break_line(loop_print_fn) - 1  # `x = x + 1`, the line before the print
    assert cov.eager_sites == ((f"programs.py:{add_line} (outside compiled frames) aten::add", 3),)
    # Training: the backward of the captured forward graph counts as in graphs (its autograd
    # nodes were made inside the graph); AccumulateGrad's .grad writes are not counted. Only
    # the seed gradient loss.backward() makes (ones_like) runs eagerly, at its break line:
    # 26 of 27 ops (before issue 10 the 20 backward ops were counted eager: 10 of 31).
    model, calls = BY_NAME["train_step"].make()
    cov = dynscope.report(model, calls=calls).coverage
    backward_line = break_line(_train_step_setup, "backward() in compiled code")
    assert cov.eager_sites == ((f"programs.py:{backward_line} aten::ones_like", 1),)
    assert cov.ops_eager == 1 and cov.ratio > 0.9  # 26/27 on torch 2.13; backward op counts vary by version


def test_min_coverage_budget() -> None:
    model, calls = BY_NAME["item_break"].make()
    with pytest.raises(dynscope.CompileBudgetError, match=r"(?s)coverage 75.0% below 90.0%.*aten::item x1"):
        dynscope.assert_compiles(model, calls=calls, max_graph_breaks=None, min_coverage=0.9)


PASSING = """
import pytest, torch

def f(x):
    return x.sin() + 1

@pytest.mark.compile_budget(graph_breaks=0, recompiles=0)
def test_ok():
    torch.compile(f, backend="eager")(torch.ones(3))

def test_fixture(dynscope):
    rep = dynscope.assert_compiles(f, torch.ones(3))
    assert rep.graph_count == 1
"""

FAILING = """
import pytest, torch

def g(x):
    y = x.cos()
    print("side effect")
    return y * 2

@pytest.mark.compile_budget(graph_breaks=0)
def test_breaks():
    torch.compile(g, backend="eager")(torch.ones(3))
"""


def test_plugin_passing_budget_and_report_folder(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok=PASSING)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dynscope-report", "reports")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*dynscope: 2 tests watched, 2 graphs, 0 graph breaks, 0 recompiles*",
        "*dynscope: 2 reports written to reports*",
    ])
    folders = sorted(p.name for p in (pytester.path / "reports").iterdir())
    assert folders == ["test_ok.py_test_fixture", "test_ok.py_test_ok"]
    rep = dynscope.load(pytester.path / "reports" / "test_ok.py_test_ok" / "report.json")
    assert rep.graph_count == 1


def test_plugin_failing_budget_message(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=FAILING)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dynscope-report", "out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*CompileBudgetError: compile budget exceeded for test_bad.py::test_breaks*",
        "*1 graph break at 1 site (budget: 0):*",
        "*test_bad.py:5 [[]logging/print side effect[]] x1*",
        '*print("side effect")*',
        "*fix: print/logging inside the compiled region*",
    ])
    rep = dynscope.load(pytester.path / "out" / "test_bad.py_test_breaks" / "report.json")
    assert rep.break_count == 1, "a failing test's report is written too"


def test_plugin_bad_marker_keyword(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_kw="""
import pytest

RAN = []

def test_first():
    RAN.append(1)
    print("FIRST TEST RAN")

@pytest.mark.compile_budget(graph_brakes=0)
def test_typo():
    pass
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "-s")
    # A usage error at collection: no test runs, not even the ones before the bad marker.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*test_kw.py::test_typo: @pytest.mark.compile_budget: unknown keyword 'graph_brakes'; "
        "use graph_breaks, recompiles, graphs, coverage*"
    ])
    assert "FIRST TEST RAN" not in result.stdout.str()


BARE = """
import pytest, torch

def g(x):
    y = x.cos()
    print("side effect")
    return y * 2

def h(x):
    return x.sin() + 1

def k(x):  # not h: a function compiled again with other options recompiles
    return x.cos() + 1

@pytest.mark.compile_budget
def test_bare_break():
    torch.compile(g, backend="eager")(torch.ones(3))

@pytest.mark.compile_budget()
def test_bare_recompile():
    f = torch.compile(h, backend="eager", dynamic=False)
    f(torch.ones(3))
    f(torch.ones(5))

@pytest.mark.compile_budget
def test_bare_clean():
    torch.compile(k, backend="eager")(torch.ones(3))
"""


def test_plugin_bare_marker_means_no_breaks_no_recompiles(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bare=BARE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*CompileBudgetError: compile budget exceeded for test_bare.py::test_bare_break*",
        "*1 graph break at 1 site (budget: 0):*",
        "*CompileBudgetError: compile budget exceeded for test_bare.py::test_bare_recompile*",
        "*1 recompile (budget: 0):*",
    ])


def test_plugin_silent_when_unused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_a():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "dynscope:" not in result.stdout.str()


@pytest.mark.heavy
def test_example_budget_file_passes(pytester: pytest.Pytester) -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "test_compile_budget.py"
    pytester.makepyfile(test_example=example.read_text())
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)


def _example_programs() -> dict:
    from examples.quickstart import build
    from examples.test_compile_budget import Classifier
    from examples.timing_transformer import Block

    model, calls = build()
    return {
        # name: (model, calls, (graphs, break events, break sites, recompiles))
        "quickstart": (model, calls["calls"], (14, 10, 3, 10)),
        "timing_transformer": (Block().eval(), [torch.randn(4, 32, 64)], (2, 1, 1, 0)),
        "compile_budget_classifier": (Classifier(), [torch.randn(8, 16), torch.randn(4, 16)], (2, 0, 0, 1)),
    }


@pytest.mark.heavy
@pytest.mark.parametrize("name", ["quickstart", "timing_transformer", "compile_budget_classifier"])
def test_examples_hold_their_budget(name: str) -> None:
    """What dynscope sees in each example model is pinned: a change that alters it is caught."""
    model, calls, (graphs, breaks, sites, recompiles) = _example_programs()[name]
    rep = dynscope.assert_compiles(
        model, calls=calls, max_graph_breaks=breaks, max_recompiles=recompiles, max_graphs=graphs
    )
    assert (rep.graph_count, rep.break_count, len(rep.breaks), rep.recompile_count) == (
        graphs, breaks, sites, recompiles)
    if breaks:
        with pytest.raises(dynscope.CompileBudgetError):
            rep.check(max_graph_breaks=breaks - 1)
