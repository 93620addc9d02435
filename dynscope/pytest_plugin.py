"""pytest plugin: compile budgets as test assertions (registered through ``pytest11``).

- fixture ``dynscope``: ``dynscope.report(...)`` and ``dynscope.assert_compiles(...)``,
  whose reports are kept for ``--dynscope-report``;
- marker ``@pytest.mark.compile_budget(graph_breaks=0, recompiles=1)``: watches everything
  the test compiles (its own plain ``torch.compile`` calls included) and fails the test with
  a readable message when the budget is exceeded; a bare ``@pytest.mark.compile_budget``
  means no graph breaks and no recompiles; markers are checked when tests are collected;
  ``memory_ratio=1.1`` also holds each report the test makes through the fixture (which
  then measures memory) to a compiled peak at most 1.1x eager's;
- marker ``@pytest.mark.exports``: a ``torch.export`` failure in the test fails it with the
  blocker's kind, the user's file:line and the fix;
- option ``--dynscope-report DIR``: a report folder per watched test;
- a terminal summary line with totals when the plugin was used.

Hooks only; torch is imported when a test uses the plugin, not when pytest starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dynscope._lexicon.wording import TRACE_LOGGER_NAME

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

MARKER = "compile_budget"
EXPORT_MARKER = "exports"


@dataclass
class _State:
    report_dir: Path | None
    watched: list[tuple[str, Any]] = field(default_factory=list)  # (nodeid, Report)
    written: int = 0
    # Tests whose marker sets memory_ratio: their fixture reports measure memory.
    memory: set[str] = field(default_factory=set)


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dynscope", "dynscope: torch.compile reports and compile budgets")
    group.addoption(
        "--dynscope-report",
        metavar="DIR",
        default=None,
        help="write a dynscope report (JSON, and HTML when Graphviz is there) for each test "
        "that used the dynscope fixture or the compile_budget marker",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(graph_breaks=None, recompiles=None, graphs=None, coverage=None, "
        "allow_unparsed=False, memory_ratio=None): fail the test when what it compiles exceeds the budget; "
        "without arguments: no graph breaks, no recompiles (dynscope)",
    )
    config.addinivalue_line(
        "markers",
        f"{EXPORT_MARKER}: a torch.export failure in the test fails it with dynscope's words: the "
        "blocker's kind, your file:line and the fix (dynscope)",
    )
    folder = config.getoption("--dynscope-report")
    config.stash[_STATE] = _State(report_dir=Path(folder) if folder else None)


#: PyTorch's structured-trace logger (events for dynscope and tlparse, not messages).
TRACE_LOGGER = TRACE_LOGGER_NAME


def _drop_trace_record(record: logging.LogRecord) -> bool:
    return record.name != TRACE_LOGGER


@contextlib.contextmanager
def _trace_records_hidden() -> Iterator[None]:
    """Keep trace records out of pytest's log capture ("Captured log call").

    pytest (9.x) attaches its capture handlers to the root logger and also to every logger
    that does not propagate, which includes ``torch.__trace``; while dynscope listens,
    PyTorch emits its trace events there and each became an empty DEBUG line in a failed
    test's report. The filter sits on the root logger's handlers (pytest's are there too)
    and drops only that logger's records.
    """
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(_drop_trace_record)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(_drop_trace_record)


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect: a typo is a typo in any test
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every ``compile_budget`` marker when the tests are collected.

    A typo in a budget (``graph_brakes=0``) would otherwise show only when that test runs,
    possibly after a long suite; as a usage error it stops the run before any test starts,
    naming the test and the keyword.
    """
    from dynscope._errors import InputError  # torch-free: collection stays cheap
    from dynscope._model.budget import Budget

    problems = []
    for item in items:
        for mark in item.iter_markers(MARKER):
            try:
                Budget.from_marker(mark)
            except InputError as err:
                problems.append(f"{item.nodeid}: {err}")
    if problems:
        raise pytest.UsageError("\n".join(problems))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, Any]:
    __tracebackhide__ = True
    if item.get_closest_marker(EXPORT_MARKER) is None:
        return (yield from _budgeted(item))
    try:
        return (yield from _budgeted(item))
    except Exception as err:
        from dynscope._capture.export import export_blocker_of
        from dynscope._render.export import blocker_text

        blocker = export_blocker_of(err)
        if blocker is None:
            raise
        raise AssertionError(
            f"torch.export failed: {blocker_text(blocker)}\n  (dynscope.export_report(model, inputs, "
            "dynamic_shapes=...) says more: draft_export's findings, the suggested dynamic_shapes, tried)"
        ) from err


def _budgeted(item: pytest.Item) -> Generator[None, None, Any]:
    __tracebackhide__ = True  # show the budget message, not the plugin's code
    mark = item.get_closest_marker(MARKER)
    if mark is None:
        if "dynscope" not in getattr(item, "fixturenames", ()):
            return (yield)
        with _trace_records_hidden():
            return (yield)
    import dynscope
    from dynscope._model.budget import Budget

    try:
        budget = Budget.from_marker(mark)  # checked before the test runs
    except dynscope.InputError as err:
        raise pytest.UsageError(str(err)) from None
    state = item.config.stash[_STATE]
    ratio = budget.max_memory_ratio
    if ratio is not None:
        # Memory is measured on the reports the test makes through the fixture (capture()
        # watches the test's own compiles and cannot rerun them eagerly).
        state.memory.add(item.nodeid)
        budget = dataclasses.replace(budget, max_memory_ratio=None)
    before = len(state.watched)
    cap = dynscope.capture(title=item.nodeid)
    try:
        with _trace_records_hidden(), cap:
            result = yield
    finally:
        state.memory.discard(item.nodeid)
        # Kept for --dynscope-report even when the test itself failed.
        state.watched.append((item.nodeid, cap.report))
    budget.check(cap.report)
    if ratio is not None:
        made = [rep for nodeid, rep in state.watched[before:-1] if nodeid == item.nodeid]
        if not made:
            raise dynscope.CompileBudgetError(
                f"compile budget of {item.nodeid}: memory_ratio={ratio} needs a report that measured memory; "
                "make one with the dynscope fixture (dynscope.report(model, x)) in the test",
                report=cap.report, problems=["memory was not measured"],
            )
        memory_budget = Budget(max_graph_breaks=None, max_recompiles=None, max_memory_ratio=ratio)
        for rep in made:
            memory_budget.check(rep)
    return result


class DynscopeFixture:
    """What the ``dynscope`` fixture gives a test."""

    def __init__(self, state: _State, nodeid: str) -> None:
        self._state = state
        self._nodeid = nodeid

    def __repr__(self) -> str:
        # pytest prints the test's arguments in a failure; keep that line short.
        return "<dynscope fixture>"

    def report(self, *args: Any, **kwargs: Any) -> Any:
        """``dynscope.report``; the report is kept for ``--dynscope-report``."""
        __tracebackhide__ = True  # a failure shows the test's line, not the inputs passed on
        import dynscope

        if self._nodeid in self._state.memory:  # the test's marker sets memory_ratio
            kwargs.setdefault("memory", True)
        rep = dynscope.report(*args, **kwargs)
        self._state.watched.append((self._nodeid, rep))
        return rep

    def assert_compiles(self, *args: Any, **kwargs: Any) -> Any:
        """``dynscope.assert_compiles``; the report is kept also when the budget fails."""
        __tracebackhide__ = True  # a failure shows the test's line, not the inputs passed on
        import dynscope

        try:
            rep = dynscope.assert_compiles(*args, **kwargs)
        except dynscope.CompileBudgetError as err:
            self._state.watched.append((self._nodeid, err.report))
            raise
        self._state.watched.append((self._nodeid, rep))
        return rep


    def assert_exports(self, *args: Any, **kwargs: Any) -> Any:
        """``dynscope.assert_exports``: fails listing each export blocker with file:line and fix."""
        __tracebackhide__ = True
        import dynscope

        return dynscope.assert_exports(*args, **kwargs)


@pytest.fixture
def dynscope(request: pytest.FixtureRequest) -> DynscopeFixture:
    """dynscope.report / assert_compiles whose reports the plugin keeps."""
    return DynscopeFixture(request.config.stash[_STATE], request.node.nodeid)


def _folder_name(nodeid: str, index: int) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:120]
    return f"{name}_{index}" if index else name


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None or state.report_dir is None or not state.watched:
        return
    from dynscope._render.bundle import render_bundle

    seen: dict[str, int] = {}
    for nodeid, rep in state.watched:
        index = seen.get(nodeid, 0)
        seen[nodeid] = index + 1
        render_bundle(rep, state.report_dir / _folder_name(nodeid, index))
        state.written += 1


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or not state.watched:
        return
    reports = [rep for _, rep in state.watched]
    tests = len({nodeid for nodeid, _ in state.watched})
    line = (
        f"dynscope: {tests} tests watched, {sum(r.graph_count for r in reports)} graphs, "
        f"{sum(r.break_count for r in reports)} graph breaks, "
        f"{sum(r.recompile_count for r in reports)} recompiles"
    )
    terminalreporter.write_sep("-", "dynscope")
    terminalreporter.write_line(line)
    if state.report_dir is not None:
        terminalreporter.write_line(f"dynscope: {state.written} reports written to {state.report_dir}")
