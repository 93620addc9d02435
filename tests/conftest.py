"""Shared fixtures: golden files and quiet helpers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from this run")


# The longest modules, longest first (a cold run of `make test` on 2 cores, Inductor's cache
# empty: 130 s down to 39 s each). With --no-loadscope-reorder (Makefile) pytest-xdist hands
# modules to workers in collection order, so these go first and the short ones fill in around
# them; handed out last, the one-test corpus module ran alone for two minutes at the end.
LONGEST_FIRST = (
    "tests/capture/fix/test_fix_corpus.py",
    "tests/cli/test_memory_front.py",
    "tests/capture/test_memory.py",
    "tests/capture/fix/test_fix.py",
    "tests/capture/test_timing_attack.py",
    "tests/capture/test_timing_cost.py",
    "tests/read/test_cache_diff.py",
    "tests/render/test_script.py",
    "tests/read/test_trace_fuzz.py",
    "tests/capture/test_capture_cache.py",
)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the longest modules first (stable: each module's own order is kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    # a node id starts with the module's path from the root (the rootdir, where pyproject.toml is)
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def normalise(text: str) -> str:
    """Drop what varies between machines and runs: paths, times, memory addresses."""
    text = text.replace(str(ROOT), "<root>")
    text = re.sub(r"\d+\.\d+ s\b", "<t> s", text)
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    return text


class Golden:
    def __init__(self, update: bool) -> None:
        self.update = update

    def check(self, name: str, text: str) -> None:
        path = GOLDEN / name
        if self.update or not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            if not self.update:
                pytest.fail(f"golden file {path} did not exist; written now, check it and rerun")
        expected = path.read_text(encoding="utf-8")
        assert text == expected, f"output differs from {path}; rerun with --update-golden if intended"


@pytest.fixture(autouse=True)
def _plain_summaries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Summaries are plain text in tests, also under ``pytest -s`` in a terminal or with
    FORCE_COLOR set by CI (tests/render/test_notebook.py tests the colour). No progress lines on
    stderr either, which tests of exact stderr would see when a compile runs long
    (tests/capture/test_budgets_progress.py turns them back on)."""
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("DYNSCOPE_PROGRESS", "0")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(bool(request.config.getoption("--update-golden")))


@pytest.fixture(autouse=True)
def _invariants(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Check tests/invariants.py on every report the suite makes: each report() and load()
    result, and each capture's report, compared with the records PyTorch logged while it
    was open. A test marked ``synthetic_reports`` loads reports built from random data
    (hypothesis), or reads logs damaged on purpose (tests/read/test_trace_fuzz.py), which need not
    be what any run could make: its loads and logs are not checked."""
    from dynscope._capture import capture as _capture
    from dynscope._model import codec as _codec
    from dynscope._read import trace_report as _trace_report
    from tests import invariants

    report_locked, enter, exit_, build, from_dict, from_log = (
        _capture._report_locked, _capture.Capture.__enter__, _capture.Capture.__exit__,
        _capture.Capture._build, _codec.report_from_dict, _trace_report.report_of_log,
    )

    def checked_report(*args: object, **kwargs: object) -> object:
        rep = report_locked(*args, **kwargs)
        invariants.check(rep, live=True)
        return rep

    def counted_enter(self: _capture.Capture) -> _capture.Capture:
        invariants.counting(self)
        try:
            return enter(self)
        except BaseException:
            invariants.stop_counting(self)
            raise

    def counted_exit(self: _capture.Capture, *exc: object) -> None:
        try:
            exit_(self, *exc)
        finally:
            invariants.stop_counting(self)

    def checked_build(self: _capture.Capture, *args: object) -> object:
        rep = build(self, *args)
        invariants.check(rep, getattr(self, "_dynscope_test_counts", None), live=True)
        return rep

    def checked_load(data: object) -> object:
        rep = from_dict(data)
        invariants.check(rep)
        return rep

    def checked_log(path: Path, *, single: bool) -> object:
        rep = from_log(path, single=single)
        invariants.check(rep, invariants.LogCounts(path))
        return rep

    monkeypatch.setattr(_capture, "_report_locked", checked_report)
    if request.node.get_closest_marker("synthetic_reports") is None:
        monkeypatch.setattr(_trace_report, "report_of_log", checked_log)
    monkeypatch.setattr(_capture.Capture, "__enter__", counted_enter)
    monkeypatch.setattr(_capture.Capture, "__exit__", counted_exit)
    monkeypatch.setattr(_capture.Capture, "_build", checked_build)
    if request.node.get_closest_marker("synthetic_reports") is None:
        monkeypatch.setattr(_codec, "report_from_dict", checked_load)


# Under pytest-xdist (`make test` runs two workers) each worker checks its own reports: the
# workers hand their counts to the controller, which adds them to its own (none) for the line.
_WORKERS_CHECKED = [0, 0, 0.0]


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        from tests import invariants

        out["dynscope_invariants"] = (invariants.checked, invariants.compared, invariants.seconds)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    checked, compared, seconds = getattr(node, "workeroutput", {}).get("dynscope_invariants", (0, 0, 0.0))
    _WORKERS_CHECKED[0] += checked
    _WORKERS_CHECKED[1] += compared
    _WORKERS_CHECKED[2] += seconds


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests import invariants

    checked = invariants.checked + int(_WORKERS_CHECKED[0])
    compared = invariants.compared + int(_WORKERS_CHECKED[1])
    seconds = invariants.seconds + _WORKERS_CHECKED[2]
    terminalreporter.write_line(
        f"dynscope invariants (tests/invariants.py) held on {checked} reports, "
        f"{compared} of them compared with PyTorch's own trace records, in {seconds:.1f} s"
    )


pytest_plugins = ["pytester"]


@pytest.fixture(scope="session")
def _every_dynscope_module() -> None:
    """Import every dynscope module (but the command, which runs when imported)."""
    import importlib
    import pkgutil

    import dynscope

    for info in pkgutil.walk_packages(dynscope.__path__, "dynscope."):
        if info.name != "dynscope.__main__":
            importlib.import_module(info.name)


@pytest.fixture
def pytester(_every_dynscope_module: None, pytester: pytest.Pytester) -> pytest.Pytester:
    """pytest's own, made after every dynscope module is imported. Pytester snapshots
    sys.modules when it is made and drops what was imported after, when the test ends: a
    dynscope module first imported inside an in-process run (a renderer the inner session
    needed first) would be imported again afterwards, and the worker would hold two copies
    of its classes (``isinstance`` of a block from one against the other's class fails: a
    page rendered with empty sections). Seen: tests/cli/test_memory_front.py's exports
    marker run, then the CLI's report in the same worker wrote sections with no blocks and
    a page that raised StopIteration."""
    return pytester
