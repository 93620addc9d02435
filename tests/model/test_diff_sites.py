"""Break sites matched by code, not line (issue 45): ``dynscope diff`` and ``dynscope.fix``
follow a break across edits by its file, function, normalised statement and category, so
lines inserted above a break (a patch written by ``fix --write``) move it; they do not make
it a new site and the old one gone."""

from __future__ import annotations

import importlib
import linecache
import sys
from pathlib import Path

import pytest

import dynscope
from dynscope._cli import main
from dynscope._model.breaks import GraphBreak
from dynscope._model.diff import FigureChange, diff_reports, match_sites, normalised_code
from dynscope._render.diff import render_diff

TRACES = Path(__file__).resolve().parents[1] / "traces"

PROGRAM = '''import torch


def step(x):
    x = x * 2
    print("step", x.shape)  # a side effect: a break
    return x.sin()
'''


def _break(line: int, source: str, category: str = "logging/print side effect", function: str = "step",
           filename: str = "/p/model.py") -> GraphBreak:
    return GraphBreak(filename=filename, lineno=line, function=function, source=source, reason="r",
                      category=category)


def test_normalised_code_drops_spacing_and_comments() -> None:
    assert normalised_code("x  = f( y )  # note") == normalised_code("x = f(y)") == "x = f ( y )"
    assert normalised_code('print("a # b")') == 'print ( "a # b" )'  # a hash in a string is code
    assert normalised_code("if (a and") == "if (a and"  # one line of a longer statement: as written


def test_sites_pair_by_statement_and_reason_not_line() -> None:
    old = [_break(5, "print(x)"), _break(9, "y = x.item()", ".item()/scalar output")]
    new = [_break(7, "print(x)  # moved"), _break(11, "y = x.item()", "data-dependent branch"),
           _break(20, "print(x)", function="other")]
    pairs, gone, came = match_sites(old, new)
    assert [(a.lineno, b.lineno) for a, b in pairs] == [(5, 7)]
    assert [b.lineno for b in gone] == [9]  # same statement, another reason: not the same site
    assert [b.lineno for b in came] == [11, 20]  # another function: not the same site


def test_one_statement_twice_pairs_the_unmoved_first_then_in_line_order() -> None:
    old = [_break(5, "print(x)"), _break(8, "print(x)")]
    pairs, gone, came = match_sites(old, [_break(8, "print(x)")])
    assert [(a.lineno, b.lineno) for a, b in pairs] == [(8, 8)] and [b.lineno for b in gone] == [5] and not came
    pairs, gone, came = match_sites(old, [_break(6, "print(x)"), _break(9, "print(x)"), _break(30, "print(x)")])
    assert [(a.lineno, b.lineno) for a, b in pairs] == [(5, 6), (8, 9)] and not gone
    assert [b.lineno for b in came] == [30]


def _report_of(folder: Path, text: str) -> dynscope.Report:
    path = folder / "diffmodel.py"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
        linecache.checkcache(str(path))  # as a fresh process would read it
    sys.modules.pop("diffmodel", None)
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("diffmodel")
        import torch

        return dynscope.report(module.step, torch.ones(3))
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("diffmodel", None)


def test_diff_says_a_break_moved_when_lines_are_inserted_above_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    old = _report_of(tmp_path, PROGRAM)
    new = _report_of(tmp_path, PROGRAM.replace("    x = x * 2\n", "    x = x * 2\n    # a comment\n    x = x + 0\n"))
    (a,), (b,) = old.breaks, new.breaks
    assert b.lineno == a.lineno + 2
    d = diff_reports(old, new)
    assert not d.breaks_added and not d.breaks_removed
    assert d.breaks_moved == ((a, b),)
    text = render_diff(d)
    assert f"  ~ diffmodel.py:{a.lineno} -> diffmodel.py:{b.lineno} [{a.category}] {a.source}\n" in text
    assert "Breaks moved (the same statement, the same reason):" in text and "Breaks added" not in text
    # The command line reads the saved reports the same way.
    old.save(tmp_path / "old.json")
    new.save(tmp_path / "new.json")
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    out = capsys.readouterr().out
    assert f"~ diffmodel.py:{a.lineno} -> diffmodel.py:{b.lineno}" in out and "Breaks removed" not in out


FIXABLE = '''import logging

import torch


def step(x):
    logging.debug("step %s", x.shape)
    x = x * 2
    torch._dynamo.graph_break()
    return x.sin()
'''


@pytest.mark.heavy
def test_after_fix_write_diff_follows_the_break_below_the_patch(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    old = _report_of(tmp_path, FIXABLE)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("diffmodel")
        import torch

        res = dynscope.fix(module.step, torch.ones(3), write=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("diffmodel", None)
    assert res.written, res.summary()  # the log line guarded: one line more above the explicit break
    new = _report_of(tmp_path, (tmp_path / "diffmodel.py").read_text())
    d = diff_reports(old, new)
    kept = next(b for b in old.breaks if "graph_break" in b.source)
    assert [b for b in d.breaks_removed if "logging.debug" in b.source] and not d.breaks_added
    assert [(a.lineno, b.lineno, b.source) for a, b in d.breaks_moved] == [(kept.lineno, kept.lineno + 1, kept.source)]
    capsys.readouterr()


def test_two_releases_side_by_side_put_torch_and_what_changed_first() -> None:
    # The same training step recorded on torch 2.13 and 2.15 (tests/traces/README.md says how).
    old = dynscope.load_trace(TRACES / "torch-2.13" / "logs" / "inductor-train.log")
    new = dynscope.load_trace(TRACES / "torch-2.15" / "logs" / "inductor-train.log")
    d = diff_reports(old, new)
    whats = [(f.what, *f.part) for f in d.figures]
    assert d.figures[0] == FigureChange("torch", old.torch_version, new.torch_version) and d.figures[0].changed
    changed = [f.changed for f in d.figures]
    assert changed == sorted(changed, reverse=True), "the changed figures first"
    phases = [p for p, _ in old.compile_time.phases]
    assert phases and all(("phase_s", p) in whats for p in phases)
    figure = next(f for f in d.figures if f.what == "phase_s" and f.part == (phases[0],))
    assert figure.old == round(dict(old.compile_time.phases)[phases[0]], 3)
    assert {("cache", "fx_graph", "miss"), ("cache", "aot_autograd", "miss")} <= set(whats)
    text = render_diff(d)
    assert text.splitlines()[2].split()[:4] == ["torch", old.torch_version, new.torch_version, "changed"]
    assert f"compile s: {phases[0]} " in text and "cache fx_graph miss " in text
    # One release against itself: no torch figure, nothing changed.
    same = diff_reports(old, old)
    assert "torch" not in [f.what for f in same.figures] and not any(f.changed for f in same.figures)
