"""Budgets and progress (issue 30): timing, memory and advise stop when their budget is
spent and say what was cut; progress is a line per phase off a terminal, a bar on one, and
off with an option or DYNSCOPE_PROGRESS=0."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import dynscope
from dynscope._progress import Progress, progress_enabled
from tests.corpus.programs import PROGRAMS


@pytest.fixture(autouse=True)
def _progress_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Progress as a user gets it (tests/conftest.py turns it off for the rest of the suite)."""
    monkeypatch.delenv("DYNSCOPE_PROGRESS", raising=False)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_off_a_terminal_and_off_by_env(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    p = Progress("render", stream=out)
    p.phase("laying out 3 pictures", total=3)
    for k in range(3):
        p.advance(f"graph {k}")
    p.done("done")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("dynscope render [") and lines[0].endswith("laying out 3 pictures")
    monkeypatch.setenv("DYNSCOPE_PROGRESS", "0")
    assert not progress_enabled(None) and not progress_enabled(True)
    quiet = io.StringIO()
    Progress("render", stream=quiet).phase("x")
    assert quiet.getvalue() == ""
    monkeypatch.delenv("DYNSCOPE_PROGRESS")
    off = io.StringIO()
    Progress("render", stream=off, show=False).phase("x")
    assert off.getvalue() == ""


def test_progress_is_a_bar_on_a_terminal() -> None:
    tty = _Tty()
    p = Progress("timing", stream=tty)
    p.phase("graphs", total=4)
    for _ in range(4):
        p.advance()
    p.done()
    text = tty.getvalue()
    assert "dynscope timing: graphs" in text and "/4 [" in text  # tqdm's bar, not plain lines


def test_short_work_stays_silent_and_long_work_speaks() -> None:
    out = io.StringIO()
    p = Progress("render", stream=out, quiet_s=3600)
    p.phase("laying out 2 pictures", total=2)
    p.advance()
    p.done("done")
    assert out.getvalue() == ""
    # A phase still running when the quiet time ends is said then, by a timer.
    slow = Progress("report", stream=out, quiet_s=0.2)
    slow.phase("compiling and running the program")
    time.sleep(0.6)
    assert "compiling and running the program" in out.getvalue()
    slow.done()
    out = io.StringIO()
    p = Progress("render", stream=out, quiet_s=0.0)
    p.phase("laying out 2 pictures", total=2)
    assert "laying out 2 pictures" in out.getvalue()


@pytest.mark.heavy
def test_cli_says_its_phases_and_quiet_silences_them(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from dynscope import _cli

    monkeypatch.setattr(_cli, "_QUIET_S", 0.0)  # as if each phase had run past the quiet second
    log = Path(__file__).parents[1] / "traces" / "torch-2.13" / "logs" / "vit-tiny.log.gz"
    assert _cli.main(["trace", str(log), "-o", str(tmp_path / "a")]) == 0
    said = capfd.readouterr().err.splitlines()
    assert any(line.startswith("dynscope trace [") and "reading" in line and "KiB)" in line for line in said), said
    assert any("writing the page to" in line for line in said), said
    assert _cli.main(["trace", str(log), "-o", str(tmp_path / "b"), "--quiet"]) == 0
    assert "dynscope " not in capfd.readouterr().err


def test_advise_budget_lists_what_it_did_not_try() -> None:
    # The corpus's .item() break: remedies to try (capture_scalar_outputs...), none tried in time.
    model, calls = next(p for p in PROGRAMS if p.name == "item_break").make()
    adv = dynscope.advise(model, calls=calls, budget_s=1e-9, progress=False)
    assert adv.trials == [] or all(not t.tried for t in adv.trials)
    assert "budget of 1e-09 s (budget_s) was spent before" in adv.note
    assert any("budget" in n for n in adv.report.notes)
    with pytest.raises(dynscope.InputError, match="budget_s must be a positive number"):
        dynscope.advise(model, calls=calls, budget_s=-1)


def test_timing_options_budget_is_checked() -> None:
    with pytest.raises(dynscope.InputError, match="budget_s"):
        dynscope.TimingOptions(budget_s=0)


@pytest.mark.slow
def test_timing_budget_cuts_and_says_what(capfd: pytest.CaptureFixture[str]) -> None:
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    rep = dynscope.report(model, torch.randn(4, 16), timing=True, modes=("default", "max-autotune-no-cudagraphs"),
                          timing_options=dynscope.TimingOptions(budget_s=1e-3))
    (note,) = [n for n in rep.notes if "TimingOptions.budget_s" in n]
    assert "mode max-autotune-no-cudagraphs not compiled nor measured" in note
    assert "graph" in note and "not measured" in note
    assert len(rep.timing_cost.phases) > 0 and all(not g.timings for g in rep.graphs)
    err = capfd.readouterr().err
    assert "dynscope timing [" in err and "compiling the program with Inductor (mode default)" in err


@pytest.mark.heavy
def test_advise_speaks_for_its_trials(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    # The timed reports advise runs once printed their own "dynscope timing" lines, even
    # under advise(progress=False).
    monkeypatch.setenv("DYNSCOPE_PROGRESS", "1")
    model, calls = next(p for p in PROGRAMS if p.name == "item_break").make()
    dynscope.advise(model, calls=calls, timing=True, progress=False)
    assert capfd.readouterr().err.count("dynscope ") == 0
    dynscope.advise(model, calls=calls, timing=True)
    err = capfd.readouterr().err
    assert "dynscope advise" in err and "dynscope timing" not in err, err
