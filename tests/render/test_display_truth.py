"""Figures that agree with each other (issue 18): one description of dynamic inputs in
report() and capture(), pages that survive a broken Graphviz, ids unique on a page, one
percent rule, "graph ops" against "torch ops run", repeated timing doubts said once."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import dynscope
from dynscope._errors import DynscopeError, GraphvizNotFoundError
from dynscope._format import percent
from dynscope._model import Coverage, Timing
from dynscope._render.card import render_card
from dynscope._render.svg import dot_to_svg

STORED = Path(__file__).parents[1] / "golden" / "reports"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot")


def stored(name: str) -> dynscope.Report:
    """A report recorded from a real compile (scripts/record_golden_reports.py)."""
    return dynscope.load(STORED / f"{name}.json")


# -- dynamic inputs: one description in report() and capture() ---------------------------


def scaled_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum(1) + y.sum()


def grow(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def _described(rep: dynscope.Report) -> list[list[str]]:
    return [[m.describe() for m in g.inputs] for g in rep.graphs]


def test_dynamic_inputs_read_the_same_in_report_and_capture(tmp_path: Path) -> None:
    """report() reads a graph's inputs from the GraphModule, capture() with the user's own
    backend only from the trace's code: both name the symbolic dims and the size they ran at."""
    x, y = torch.ones(4, 9, dtype=torch.int64), torch.ones(3)
    rep = dynscope.report(scaled_rows, (x, y), dynamic=True)
    with dynscope.capture() as cap:
        torch.compile(scaled_rows, dynamic=True, backend="eager")(x, y)
    assert cap.report.graphs[0].origin == "trace", "capture() knows this graph from the trace only"
    ours, theirs = _described(rep), _described(cap.report)
    assert ours == theirs
    (inputs,) = ours
    tensors = [d for d in inputs if "[" in d]
    assert re.fullmatch(r"i64\[s\d+=4, s\d+=9\]", tensors[0]), inputs
    assert re.fullmatch(r"f32\[s\d+=3\]", tensors[1]), inputs
    assert all(re.fullmatch(r"s\d+=\d", d) for d in inputs if "[" not in d), inputs
    for r in (rep, cap.report):
        assert tensors[0] in r.summary() and tensors[0] in r.to_html(pictures=False)
        # JSON keeps the symbol and the size, and reads back the same.
        saved = json.loads(r.to_json())["graphs"][0]["inputs"]
        assert [i["ran_at"] for i in saved if i["kind"] == "tensor"] == [[4, 9], [3]]
        r.save(tmp_path / "r.json")
        assert _described(dynscope.load(tmp_path / "r.json")) == ours


def test_automatic_dynamic_marks_only_the_dim_that_changed() -> None:
    """A recompile made dynamic by a size change: the static dim stays a number, the
    dynamic one is named, the same way in both."""
    calls = [torch.ones(4, 9), torch.ones(4, 10)]
    rep = dynscope.report(grow, calls=calls)
    with dynscope.capture() as cap:
        compiled = torch.compile(grow, backend="eager")
        for c in calls:
            compiled(c)
    assert _described(rep) == _described(cap.report)
    assert _described(rep)[0] == ["f32[4, 9]"]
    assert re.fullmatch(r"f32\[4, s\d+=10\]", _described(rep)[1][-1]), _described(rep)


def test_reports_saved_without_sizes_still_describe_their_inputs() -> None:
    """A stored report from before ``ran_at`` reads as it did."""
    g = stored("mlp").graphs[0]
    assert all(m.ran_at == () for m in g.inputs)
    assert "f32[4, 8]" in [m.describe() for m in g.inputs]


# -- a dot that exists but fails -------------------------------------------------------------


def _fake_dot(folder: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    folder.mkdir()
    dot = folder / "dot"
    dot.write_text("#!/bin/sh\n" + body + "\n")
    dot.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{Path('/usr/bin')}:{Path('/bin')}")


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ('echo "dot: cannot open libgvc.so.6" >&2; exit 1', "cannot open libgvc.so.6"),
        ("kill -SEGV $$", "exit status -11"),
    ],
    ids=["exits-1", "crashes"],
)
def test_failing_dot_renders_the_page_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], body: str, said: str
) -> None:
    rep = stored("print_model")
    _fake_dot(tmp_path / "bin", body, monkeypatch)
    out = rep.render(tmp_path / "out")
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "No pictures:" in page and "does not work" in page and said in page
    assert "dynscope bug" not in page
    assert not list(out.glob("*.svg")), "no picture files from a broken dot"
    assert "No pictures:" in rep.to_html()
    assert "<svg" not in rep.graphs[0]._repr_html_()  # the notebook card falls back too
    with pytest.raises(GraphvizNotFoundError, match="does not work"):
        rep.graphs[0].to_svg()
    assert "libgvc" not in capfd.readouterr().err, "dot's words go in the note, not on stderr"


@needs_dot
def test_a_working_dot_that_rejects_the_source_is_still_a_bug() -> None:
    with pytest.raises(DynscopeError, match="dynscope bug") as err:
        dot_to_svg("digraph { a -> }")
    assert not isinstance(err.value, GraphvizNotFoundError)


# -- ids unique across the pictures of one page ---------------------------------------------


class _Ids(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids += [v for k, v in attrs if k == "id" and v is not None]


@needs_dot
@pytest.mark.parametrize("name", ["lowered_train", "print_model"])
def test_every_id_on_the_page_is_unique(name: str, tmp_path: Path) -> None:
    rep = stored(name)
    for page in (rep.to_html(), (rep.render(tmp_path) / "index.html").read_text(encoding="utf-8")):
        parser = _Ids()
        parser.feed(page)
        repeated = [i for i, n in Counter(parser.ids).items() if n > 1]
        assert not repeated, repeated[:10]
        assert page.count("<svg") >= 1 + rep.graph_count, "the pictures are on the page"
        # What the page's script looks up by id is still there.
        assert all(f'id="{i}"' in page for i in ("program-view", "graph-svg-0", "find", "find-count"))


# -- one percent rule --------------------------------------------------------------------------


@given(st.floats(min_value=0, max_value=1, allow_nan=False), st.integers(min_value=0, max_value=2))
def test_percent_never_rounds_to_a_bound_it_does_not_reach(share: float, digits: int) -> None:
    text = percent(share, digits)
    assert text.endswith("%")
    number = float(text.lstrip("<>").rstrip("%"))
    if share < 1:
        assert text != f"{100:.{digits}f}%" and not (number == 100 and text[0] != ">")
    if share > 0:
        assert not (number == 0 and text[0] != "<")
    if text[0] not in "<>":
        assert abs(number - share * 100) <= 0.5 * 10 ** -digits + 1e-9 or number not in (0.0, 100.0)
        # More digits only where rounding would have hit a bound.
        assert len(text.rstrip("%").partition(".")[2]) <= digits + 2


def test_nearly_full_coverage_never_prints_as_full() -> None:
    rep = replace(stored("mlp"), coverage=Coverage(ops_in_graphs=999, ops_eager=1))
    for shown in (rep.summary(), rep.to_html(pictures=False), render_card(rep), repr(rep)):
        assert not re.search(r"\b100(\.0)?% (?!})", shown.replace("width:100%", ""))
        assert "99.9%" in shown
    rep = replace(rep, coverage=Coverage(ops_in_graphs=1, ops_eager=9999))
    assert "coverage 0.01%" in rep.summary() and "0%" not in rep.summary().split("\n")[2]


# -- "graph ops" and "torch ops run" ---------------------------------------------------------


def test_graph_ops_and_torch_ops_run_are_named_apart() -> None:
    rep = stored("advised")
    c = rep.coverage
    assert c is not None
    text, page, card = rep.summary(), rep.to_html(pictures=False), render_card(rep)
    assert "graph ops" in text.split("Graphs (")[1].splitlines()[1]
    run = f"torch ops run: {c.ops_in_graphs} in graphs, {c.ops_eager} eagerly"
    for shown in (text, page, card):
        assert run in shown
    assert "<th>graph ops</th>" in page and f"{rep.graphs[0].op_count} graph op" in page
    assert "ops in graphs" not in text + page + card


# -- repeated timing doubts said once --------------------------------------------------------


def test_a_doubt_many_graphs_share_is_one_line() -> None:
    base = stored("print_model")
    small = Timing(mode="default", device="cpu", eager_ms=0.03, compiled_ms=0.02,
                   eager_samples_ms=(0.03,) * 7, compiled_samples_ms=(0.02,) * 7)
    graphs = tuple(replace(base.graphs[i % base.graph_count], id=i, timings=(replace(small, eager_ms=0.03 + i / 1e4),))
                   for i in range(14))
    failed = replace(graphs[13], timings=(Timing(mode="default", device="cpu", error="boom"),))
    rep = replace(base, graphs=(*graphs[:13], failed))
    text = rep.summary()
    lines = [ln for ln in text.splitlines() if "both under" in ln]
    assert lines == ["    ! 13 graphs (0-12): eager and compiled both under 50.0 us: the speedups are set by Python and"]
    assert "graph 13: failed: boom" in text
    # A doubt of one graph still names that graph's own figures.
    one = replace(base, graphs=(graphs[0],))
    assert "graph 0: eager 30.0 us and compiled 20.0 us are both under 50.0 us" in one.summary()
