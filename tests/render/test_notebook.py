"""A report in a notebook and a terminal: short reprs, the HTML card, rich display of a
graph and a break, colour in the terminal summary."""

from __future__ import annotations

import dataclasses
import html
import io
import json
import os
import re
import select
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import dynscope
from dynscope._render import words
from tests.render.test_text_golden import STORED as STORED_DIR
from tests.render.test_text_golden import stored

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

STORED = ("print_model", "mlp", "lowered_train")


@pytest.fixture(scope="module")
def quickstart() -> dynscope.Report:
    """The quickstart report, built live (the example the README starts from)."""
    from examples.quickstart import build

    model, calls = build()
    return dynscope.report(model, **calls)


def model_objects(value: object) -> Iterator[object]:
    """Every model object (dataclass instance) inside ``value``, itself included."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        yield value
        for f in dataclasses.fields(value):
            yield from model_objects(getattr(value, f.name))
    elif isinstance(value, tuple):
        for item in value:
            yield from model_objects(item)


# -- 1. short reprs ---------------------------------------------------------------------


@pytest.mark.heavy
def test_quickstart_repr_is_one_short_line(quickstart: dynscope.Report) -> None:
    rep = quickstart
    assert repr(rep) == (
        f"<Report TinyTransformer: {rep.graph_count} graphs, {rep.break_count} breaks at "
        f"{len(rep.breaks)} sites, {rep.recompile_count} recompiles, coverage {rep.coverage.ratio:.0%}>"
    )
    g = next(g for g in rep.graphs if not g.is_resume)
    user, params = g.user_inputs()
    assert g.frame.endswith("forward") and len(user) == 1 and params
    assert repr(g) == f"<Graph {g.id} {g.frame} (quickstart.py:{g.lineno}): {g.op_count} ops, 1 input (+{params} params)>"
    b = rep.breaks[0]
    assert repr(b).startswith(f"<GraphBreak quickstart.py:{b.lineno} {b.category} x{b.count}: ")


@pytest.mark.parametrize("name", [pytest.param("quickstart", marks=pytest.mark.heavy), *STORED])  # the whole example
def test_every_repr_is_short(name: str, request: pytest.FixtureRequest) -> None:
    rep = request.getfixturevalue("quickstart") if name == "quickstart" else stored(name)
    seen = 0
    for obj in model_objects(rep):
        text = repr(obj)
        assert len(text) < 300 and "\n" not in text, f"{type(obj).__name__}: {len(text)} chars: {text[:200]}"
        seen += 1
    assert seen > 50, "the walk reached the report's objects"


def test_timed_and_lowered_reprs_say_so() -> None:
    rep = stored("lowered_train")
    assert "speedup" not in repr(rep), "not timed end to end: no speedup claimed"
    m = dynscope.ModeTiming(mode="default", device="cpu", eager_ms=3.0, compiled_ms=2.0, first_call_s=1.5)
    assert "speedup 1.50x (default)" in repr(dataclasses.replace(rep, timing=(m,)))
    kernels = sum(1 for _ in rep.kernels())
    assert f"{kernels} kernels" in repr(rep)
    g = next(g for g in rep.graphs if g.lowering is not None and g.lowering.kernels)
    low = g.lowering
    assert low is not None
    assert f"{len(low.kernels)} kernel" in repr(g)
    assert repr(low).startswith(f"<Lowering {low.mode} ({low.source}): forward {low.forward.op_count} ops")
    k = low.kernels[0]
    assert repr(k).startswith(f"<Kernel {k.name} {k.kind} {k.graph}")
    assert repr(low.forward).startswith(f"<AotGraph forward: {low.forward.op_count} ops")
    t = g.timing
    assert t is not None and repr(t).startswith(f"<Timing {t.mode} {t.device}: ")


def test_short_reprs_leave_equality_and_json_alone(tmp_path: Path) -> None:
    rep = stored("lowered_train")
    text = rep.to_json()
    assert "<Graph" not in text and "<Report" not in text, "JSON is written from the fields, not the reprs"
    i, graph = next(
        (i, g) for i, g in enumerate(rep.graphs) if g.lowering and g.lowering.saved_for_backward and g.lowering.saved_for_backward.names
    )
    assert graph.lowering is not None
    saved = graph.lowering.saved_for_backward
    assert saved is not None and saved.names and "names" not in repr(saved)
    plain = json.loads(text)["graphs"][i]["lowering"]["saved_for_backward"]
    assert plain["names"] == list(saved.names), "a field left out of the repr is still saved"
    again = dynscope.load(rep.save(tmp_path / "r.json"))
    assert again == rep and again.to_json() == text
    assert dataclasses.replace(graph, op_count=graph.op_count + 1) != graph, "fields still compare"
    assert dataclasses.replace(saved, names=()) != saved, "a field left out of the repr still compares"


# -- 2. rich display: the report's card, a graph's picture, a break's code ---------------

EVIL = "<script>alert(1)</script>"


def style_selectors(html: str) -> list[str]:
    """Every selector of every rule in the <style> blocks of ``html``."""
    css = "".join(re.findall(r"<style>(.*?)</style>", html, flags=re.DOTALL))
    rules = re.findall(r"([^{}]+)\{[^{}]*\}", css)
    assert rules, "the card has a style"
    return [sel.strip() for rule in rules for sel in rule.split(",")]


def assert_self_contained(html: str) -> None:
    assert html.startswith('<div class="dynscope-card">') and html.endswith("</div>")
    assert "<script" not in html.lower() and "<!doctype" not in html.lower()
    assert all(sel.startswith(".dynscope-card") for sel in style_selectors(html)), style_selectors(html)
    # Nothing fetched: no imports or urls in the style, no src, links only to https pages.
    assert "@import" not in html and "url(" not in html and " src=" not in html
    assert re.search(r'href="(?!https://)', html) is None


@pytest.mark.parametrize("name", ["quickstart", "lowered_train"])
def test_report_card_is_compact(name: str, request: pytest.FixtureRequest) -> None:
    rep = request.getfixturevalue("quickstart") if name == "quickstart" else stored(name)
    card = rep._repr_html_()
    assert len(card.encode()) < 100_000, len(card.encode())
    assert len(card) < len(rep.to_html(pictures=False)) / 2, "a card, not the page"
    assert_self_contained(card)
    assert f"dynscope report: {html.escape(rep.title)}" in card
    # The card's totals are the summary's line, the bad counts marked as they were made.
    assert f'<span class="ds-bad">{rep.break_count} graph breaks</span> at {len(rep.breaks)} sites' in card
    assert html.escape(words.totals_line(rep)) in re.sub(r"</?span[^>]*>", "", card)
    assert f"coverage {rep.coverage.ratio:.0%}" in card
    for b in rep.breaks[:5]:
        assert f">{b.location}</code>" in card and html.escape(b.category) in card
    if rep.recompiles:
        assert f"Recompiles ({rep.recompile_count})" in card
    assert 'rep.render("out/")' in html.unescape(card) and "rep.to_html()" in card
    kernels = rep.top_kernels(5)
    assert ("<h4>The kernels that cost the program most</h4>" in card) == bool(kernels)  # the table's own title
    for _, k, _ in kernels:
        assert k.name.removeprefix("extern_kernels.")[:30] in card


def test_report_card_shows_the_speedup_when_timed() -> None:
    rep = stored("mlp")
    assert "Timing (end to end)" not in rep._repr_html_()
    m = dynscope.ModeTiming(mode="default", device="cpu", eager_ms=3.0, compiled_ms=2.0, first_call_s=1.5)
    card = dataclasses.replace(rep, timing=(m,))._repr_html_()
    # the timing section's own title and its table in the card's columns (no samples, no error column)
    assert "<h4>Timing (end to end)</h4>" in card and "<td>1.50x</td><td>1.50 s</td>" in card
    assert "<th>samples</th>" not in card and "<th>error</th>" not in card
    failed = dataclasses.replace(m, error="RuntimeError: out of memory")
    assert "failed: RuntimeError: out of memory" in dataclasses.replace(rep, timing=(failed,))._repr_html_()


def test_graph_shows_its_picture() -> None:
    g = stored("mlp").graphs[0]
    shown = g._repr_html_()
    assert_self_contained(shown)
    svg = shown[shown.index("<svg"):shown.rindex("</svg>") + 6]
    assert svg == g.to_svg().rstrip(), "the graph's own picture, inline"


def test_graph_without_graphviz_shows_its_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on PATH
    g = stored("mlp").graphs[0]
    shown = g._repr_html_()
    assert_self_contained(shown)
    assert "<svg" not in shown and "Graphviz" in shown
    for target, n in g.op_counts:
        assert f"<td><code>{html.escape(target)}</code></td><td>{n}</td>" in shown


def test_break_shows_its_code() -> None:
    b = stored("print_model").breaks[0]
    shown = b._repr_html_()
    assert_self_contained(shown)
    hit = dict(b.excerpt)[b.lineno]
    assert f'<span class="ds-hit">&gt;{b.lineno:5d}  {html.escape(hit)}</span>' in shown
    for n, text in b.excerpt:
        if n != b.lineno:
            assert f" {n:5d}  {html.escape(text)}" in shown
    assert html.escape(b.reason) in shown and html.escape(b.fix) in shown


def test_hostile_strings_are_escaped() -> None:
    rep = stored("print_model")
    b = rep.breaks[0]
    evil_break = dataclasses.replace(
        b, source=EVIL, function=EVIL, reason=EVIL, category=EVIL, hints=(EVIL,),
        excerpt=((b.lineno, EVIL),), doc_url="javascript:alert(1)",
    )
    rep = dataclasses.replace(
        rep,
        title=EVIL,
        breaks=(evil_break,),
        graphs=tuple(dataclasses.replace(g, frame=EVIL) for g in rep.graphs),
        recompiles=tuple(dataclasses.replace(
            r, frame=EVIL, causes=(dynscope.Cause("said", said=EVIL),),
            fixes=(dynscope.RecompileFix("said", dynscope.Cause("said", said=EVIL), said=EVIL),)) for r in rep.recompiles),
        notes=(EVIL,),
    )
    for shown in (rep._repr_html_(), rep.graphs[0]._repr_html_(), rep.breaks[0]._repr_html_()):
        assert "<script" not in shown.lower() and "javascript:" not in shown
        assert "&lt;script&gt;" in shown
    assert html.escape(EVIL) in rep.breaks[0]._repr_html_()


# -- 3. colour in the terminal ----------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PRINT_REPORT = "import sys, dynscope; print(dynscope.load(sys.argv[1]))"


def run_printing(path: Path, env: dict[str, str], *, tty: bool) -> str:
    """What ``print(report)`` writes in a child process whose stdout is a terminal (a
    pseudo-terminal) or a pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"TERM": "xterm"} | env
    cmd = [sys.executable, "-c", PRINT_REPORT, str(path)]
    if not tty:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    master, slave = os.openpty()
    proc = subprocess.Popen(cmd, env=env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    try:
        while select.select([master], [], [], 120)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(master)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_summary_colours_on_a_terminal() -> None:
    path = STORED_DIR / "print_model.json"
    plain = dynscope.load(path).summary(color=False)
    coloured = run_printing(path, {}, tty=True)
    assert "\x1b[" in coloured
    assert ANSI.sub("", coloured) == plain + "\n", "colour adds escape codes and nothing else"
    assert "\x1b[" not in run_printing(path, {"NO_COLOR": "1"}, tty=True)
    assert "\x1b[" not in run_printing(path, {"FORCE_COLOR": "1", "NO_COLOR": ""}, tty=True), "NO_COLOR: any value"
    assert run_printing(path, {}, tty=False) == plain + "\n", "a pipe gets plain text"
    assert "\x1b[" in run_printing(path, {"FORCE_COLOR": "1"}, tty=False)


def test_what_is_coloured() -> None:
    rep = stored("print_model")
    text = rep.summary(color=True)
    assert ANSI.sub("", text) == rep.summary(color=False) == str(rep), "str() is plain when stdout is not a terminal"
    bold, red, reset = "\x1b[1m", "\x1b[1;31m", "\x1b[0m"
    assert text.startswith(f"{bold}dynscope report: PrintModel{reset}\n")
    assert f"{bold}Graphs ({rep.graph_count}){reset}" in text
    totals = text.splitlines()[2]
    assert f"{red}{rep.break_count} graph breaks{reset}" in totals
    assert f"{red}{rep.recompile_count} recompiles{reset}" in totals
    noted = dataclasses.replace(rep, notes=("look " * 40,)).summary(color=True)
    assert "\x1b[33m    ! look" in noted, "'!' lines in yellow"
    clean = stored("mlp").summary(color=True)
    assert "\x1b[32mGraph breaks: none" in clean and red not in clean, "nothing bad, nothing red"


def test_colour_comes_from_tones_not_from_the_words() -> None:
    # A note whose lines read like a title or like good news is still a note: the terminal
    # colours each line by the tone it was made with, never by what the finished text says.
    rep = dataclasses.replace(stored("mlp"), notes=("one\n\nRecompiles (3)\nGraph breaks: none",))
    text = rep.summary(color=True)
    assert ANSI.sub("", text) == rep.summary(color=False)
    assert "\x1b[33mRecompiles (3)\x1b[0m" in text and "\x1b[1;31m" not in text, "a note's line in the note's yellow"
    assert text.count("\x1b[32mGraph breaks: none") == 1, "only the section says there is no break"


def test_colour_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from dynscope._render.terminal import use_color

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as terminal:
        assert use_color(None, terminal) and not use_color(None, io.StringIO())
        assert use_color(True, io.StringIO()) and not use_color(False, terminal)
        monkeypatch.setenv("FORCE_COLOR", "0")
        assert not use_color(None, io.StringIO()), "FORCE_COLOR=0 forces nothing"
        monkeypatch.setenv("FORCE_COLOR", "1")
        assert use_color(None, io.StringIO())
        monkeypatch.setenv("NO_COLOR", "")
        assert not use_color(None, terminal), "NO_COLOR wins, whatever its value"
    os.close(master)
