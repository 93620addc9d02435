"""Each report section is built once (dynscope._render.sections) and laid out twice: the
summary and the page show the same rows and say the same words. On stored reports
(tests/golden/reports), without compiling."""

from __future__ import annotations

from dataclasses import replace
from html import escape
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynscope
from dynscope._model import Coverage, GraphMemory, ModeTiming
from dynscope._render import figures, sections, words
from dynscope._render.html import render_html
from dynscope._render.section_html import entry_html, table_html
from dynscope._render.section_text import entry_lines, table_text
from dynscope._render.text import render_summary

STORED = Path(__file__).parents[1] / "golden" / "reports"
NAMES = sorted(p.stem for p in STORED.glob("*.json"))


def stored(name: str) -> dynscope.Report:
    return dynscope.load(STORED / f"{name}.json")


def _flat(text: str) -> str:
    """Text with its wrapping undone (the summary wraps long lines at spaces)."""
    return " ".join(text.split())


def _measured() -> dynscope.Report:
    """lowered_train with memory measured: graph 0 as a training graph, graph 2 forward only."""
    rep = stored("lowered_train")
    trains = GraphMemory(
        "default", "cpu", "profiler", eager_peak=8192, compiled_peak=4608,
        eager_train_peak=14628, compiled_train_peak=12288,
        eager_saved=4096, eager_saved_count=1, compiled_saved=2048, compiled_saved_count=1,
    )
    graphs = list(rep.graphs)
    graphs[0] = replace(graphs[0], memory=trains)
    graphs[2] = replace(graphs[2], memory=GraphMemory("default", "cpu", "profiler", eager_peak=2048, compiled_peak=1024))
    return replace(rep, graphs=tuple(graphs))


@pytest.mark.parametrize("name", NAMES)
def test_break_rows_and_entries_are_the_same_in_both_views(name: str) -> None:
    rep = stored(name)
    section = sections.breaks(rep)
    text, page = render_summary(rep), render_html(rep)
    assert escape(section.title) in page
    if not rep.breaks:
        assert section.blocks == () and "Graph breaks: none" in text and "<p>Graph breaks: none</p>" in page
        return
    assert section.title in text
    (table, *entries) = section.blocks
    assert isinstance(table, sections.Table) and len(table.rows) == len(rep.breaks)
    assert table_text(table) in text and table_html(table) in page
    # One row per site in both: the text's columns and the page's differ only where a
    # column says which view it is for (the line's code on a terminal, the reason on the page).
    text_cols, text_rows = table.view("text")
    html_cols, html_rows = table.view("html")
    assert [c.header for c in text_cols if c.only == ""] == [c.header for c in html_cols if c.only == ""]
    assert [r[:-1] for r in text_rows] == [r[:-1] for r in html_rows]
    assert len(entries) == len(rep.breaks)
    for entry in entries:
        assert isinstance(entry, sections.Entry)
        assert "\n".join(entry_lines(entry)) in text and entry_html(entry) in page
        for f in entry.fields:
            said = f"{f.label}: {f.text}" if f.label else f.text
            if f.kind == "folded":
                assert escape(f.text) in page and said not in text  # a terminal shows no folds
            elif f.kind != "pre":
                assert _flat(said) in _flat(text)
                assert escape(f.text) in page
    assert section.lead and section.lead in text and escape(section.lead[1:]) in page


@pytest.mark.parametrize("name", NAMES)
def test_coverage_is_said_the_same_way_in_both(name: str) -> None:
    rep = stored(name)
    section = sections.coverage(rep)
    if rep.coverage is None:
        assert section is None
        return
    assert section is not None
    text, page = render_summary(rep), render_html(rep)
    assert f"Coverage: {section.lead}" in text and escape(section.lead) in page
    assert "were in graphs" in section.lead and "inside graphs" not in page


def test_coverage_lists_every_eager_site_on_the_page_and_the_first_in_the_summary() -> None:
    sites = tuple((f"model.py:{i} aten::item", i + 1) for i in range(7))
    rep = replace(stored("advised"), coverage=Coverage(ops_in_graphs=90, ops_eager=28, eager_sites=sites, ops_dynamo=3))
    section = sections.coverage(rep)
    assert section is not None
    (listing,) = section.blocks
    assert isinstance(listing, sections.Listing) and len(listing.items) == 7
    text, page = render_summary(rep), render_html(rep)
    shown = [ln for ln in text.splitlines() if ln.startswith("    eager: ")]
    assert shown[:5] == [f"    eager: {item}" for item in listing.items[:5]]
    assert shown[5] == "    eager: +13 more at 2 other sites (all in the JSON and on the page)"
    assert all(escape(item) in page for item in listing.items)
    (note,) = section.notes
    assert f"    {note}" in text and escape(note[1:]) in page  # the page says what is not counted too


def test_memory_rows_are_the_same_in_both_views() -> None:
    rep = _measured()
    section = sections.memory(rep)
    assert section is not None
    (table,) = section.blocks
    assert isinstance(table, sections.Table)
    assert [list(r) for r in table.rows] == sections.memory_rows(rep)
    assert sorted(r[2] for r in table.rows) == ["forward", "forward", "fwd+bwd"]
    text, page = render_summary(rep), render_html(rep)
    assert table_text(table) in text and table_html(table) in page
    assert all(f"    {n}" in text and escape(n[1:]) in page for n in table.notes)
    assert escape(section.title) in page and section.title in text
    assert sections.memory(stored("mlp")) is None


@pytest.mark.parametrize("name", NAMES)
def test_compile_time_notes_are_the_same_in_both(name: str) -> None:
    rep = stored(name)
    section = sections.compile_time(rep)
    text, page = _flat(render_summary(rep)), render_html(rep)
    assert section.lead in text
    for note in section.notes:
        assert _flat(note) in text and escape(note[1:]) in page


def test_end_to_end_rows_are_the_same_in_both_views() -> None:
    steady = ModeTiming("default", "cpu", eager_ms=1.1, compiled_ms=0.6, first_call_s=2.5, in_graphs_ms=0.5,
                        eager_samples_ms=(1.1,) * 7, compiled_samples_ms=(0.6,) * 7)
    failed = ModeTiming("reduce-overhead", "cpu", 0.0, 0.0, 0.0, error="CUDA graphs need a CUDA device " * 3)
    rep = replace(stored("lowered_train"), timing=(steady, failed))
    section = sections.end_to_end(rep)
    assert section is not None
    (table,) = section.blocks
    assert isinstance(table, sections.Table)
    text, page = render_summary(rep), render_html(rep)
    assert f"{section.title}\n{table_text(table)}" in text and table_html(table) in page
    _, text_rows = table.view("text")
    _, html_rows = table.view("html")
    assert [r[:8] for r in html_rows] == text_rows  # the page adds the whole error, no other cell
    assert text_rows[0][2:5] == ["1.100 ms", "600.0 us", "1.83x"] and html_rows[1][8] == failed.error
    assert all(escape(n) in page and _flat(n) in _flat(text) for n in section.notes)
    assert sections.end_to_end(stored("mlp")) is None


def test_below_dynamo_lines_are_the_same_in_both_views() -> None:
    rep = stored("lowered_train")
    section = sections.below_dynamo(rep)
    assert section is not None and section.title == "Below Dynamo (10 kernels in 3 lowered graphs)"
    text, page = _flat(render_summary(rep)), render_html(rep)
    assert section.title in text and f"<h2>{section.title}</h2>" in page
    assert any(n.startswith("cache: FX graph cache") for n in section.notes)
    for note in section.notes:
        assert _flat(note) in text and f"<p>{escape(note[:1].upper() + note[1:])}</p>" in page
    assert sections.below_dynamo(stored("mlp")) is None


def test_warnings_come_from_one_builder() -> None:
    rep = replace(stored("mlp"), notes=("the recompile limit was hit",))
    section = sections.warnings(rep, ("No pictures: dot failed",))
    assert section is not None and section.notes == ("the recompile limit was hit", "No pictures: dot failed")
    assert "    ! the recompile limit was hit" in render_summary(rep)
    page = render_html(rep, pictures_note="dot failed")
    assert all(f"<li>{escape(n)}</li>" in page for n in section.notes)
    assert sections.warnings(stored("mlp")) is None


def test_the_phrasebook_keeps_phrases_and_the_figures_their_order() -> None:
    for name in ("memory_rows", "memory_order", "phase_seconds", "cache_counts", "sizes_of", "runs_shown"):
        found = getattr(words, name, None)
        assert found is None or found.__module__ != words.__name__, f"words.{name} computes figures"
    # Every phase and cache the figures order has its words, in the same order.
    assert tuple(words.PHASE_LABELS) == figures.PHASE_ORDER
    assert tuple(words.CACHE_LABELS) == figures.CACHE_ORDER


# -- the recompiles, the advice, the graph and kernel tables ----------------------------------


def _many_failures() -> dynscope.Report:
    """print_model with its first recompile given 11 failed guards (one unsaid) and 7 sizes:
    more than the summary shows of either."""
    from dynscope._model import GuardFailure, SizeFix

    rep = stored("print_model")
    first = rep.recompiles[0]
    failures = tuple(
        GuardFailure(entry="0/0", guard=f"tensor 'x' size mismatch at index 0. expected {4 + i}, actual 6",
                     then=str(4 + i), now="" if i == 10 else "6")
        for i in range(11)
    )
    shapes = tuple(SizeFix(first.compile_id, f"x.size({d})", "fixed", str(d + 2), filename="m.py", lineno=d)
                   for d in range(7))
    frames = tuple(replace(f, shapes=shapes) if f.compile_id == first.compile_id else f for f in rep.frames)
    return replace(rep, recompiles=(replace(first, failures=failures), *rep.recompiles[1:]), frames=frames)


@pytest.mark.parametrize("make", [lambda: stored("print_model"), _many_failures], ids=["stored", "many"])
def test_recompile_groups_are_the_same_in_both_views(make) -> None:
    rep = make()
    section = sections.recompiles(rep)
    text, page = render_summary(rep), render_html(rep)
    assert section.title == f"Recompiles ({rep.recompile_count})" and section.title in text
    assert len(section.blocks) == len(rep.recompile_groups())
    for group in section.blocks:
        assert isinstance(group, sections.Group)
        assert group.title in text and f'<h3 id="{group.anchor}">{escape(group.title)}</h3>' in page
        said, sizes, failures = group.blocks
        assert isinstance(said, sections.Listing) and isinstance(sizes, sections.Listing)
        assert isinstance(failures, sections.Table)
        # The summary shows the first few of each; the page every one.
        for shown, listing in ((said.items[: said.limit], said), (sizes.items[: sizes.limit], sizes)):
            assert all(_flat(f"- {x}") in _flat(text) for x in shown)
            assert all(f"<li>{escape(x)}</li>" in page for x in listing.items)
        assert all(f"<td>{escape(str(row[2]))}</td>" in page for row in failures.rows)
        if len(failures.rows) > failures.limit:
            assert failures.rest in text
            hidden = failures.rows[failures.limit][2]
            assert escape(str(hidden)) in page and str(hidden)[:50] not in text
            assert _flat(failures.notes[0]) in _flat(text) and escape(failures.notes[0]) in page
        if len(sizes.items) > sizes.limit:
            assert sizes.rest in text and sizes.items[-1] not in text


def test_many_failures_are_cut_where_the_summary_says() -> None:
    text = render_summary(_many_failures())
    assert "      ... 3 more rows (Recompile.failures)" in text
    assert "      ... 2 more sizes (Frame.shapes)" in text
    assert "    where sizes were fixed or guarded:" in text


def test_advice_rows_are_the_same_in_both_views() -> None:
    rep = stored("advised")
    section = sections.advice(rep.trials)
    text, page = render_summary(rep), render_html(rep)
    table, *groups = section.blocks
    assert isinstance(table, sections.Table) and len(table.rows) == len(rep.trials) == len(groups)
    assert table_text(table) in text and table_html(table) in page
    assert section.title in text and escape(section.title) in page and escape(section.lead) in page
    for t, group in zip(rep.trials, groups, strict=True):
        assert isinstance(group, sections.Group) and group.title in text
        assert all(line in text for line in t.code.splitlines())  # the code, kept as written
        assert f"<pre>{escape(t.code)}</pre>" in page


@pytest.mark.parametrize("name", NAMES)
def test_graph_rows_are_the_same_in_both_views(name: str) -> None:
    from dynscope._render import graph_tables

    rep = stored(name)
    table = graph_tables.graphs(rep)
    text, page = render_summary(rep), render_html(rep)
    assert len(table.rows) == len(rep.graphs)
    if rep.graphs:
        assert table_text(table) in text
    columns, rows = table.view("html")
    headers = [c.header for c in columns]
    for row in rows:
        cells = "".join(f"<td>{escape(str(v))}</td>" for v in row)
        assert cells in page, (headers, row)


def test_kernel_tables_are_the_same_in_both_views() -> None:
    from dynscope._render import graph_tables
    from dynscope._render.text import kernels_table

    rep = stored("lowered_train")
    page = render_html(rep)
    for g in rep.graphs:
        assert g.lowering is not None
        table = graph_tables.kernels(g, g.lowering)
        assert kernels_table(g) == table_text(table)
        assert table_html(table, f'class="kernels" id="kernels-{g.id}"') in page
        assert len(table.rows) == len(g.lowering.kernels) + (g.lowering.outside_kernels_ms is not None)
    top = graph_tables.top_kernels(rep)
    assert table_text(top) in render_summary(rep) and table_html(top, 'class="top-kernels"') in page
    assert len(top.rows) == len(rep.top_kernels(10)) and top.limit == 5
    assert all(str(row[1]) not in render_summary(rep) for row in top.rows[top.limit:] if len(str(row[1])) > 12)


@pytest.mark.parametrize("name", NAMES)
def test_the_document_is_built_once_and_both_views_walk_it(name: str) -> None:
    # One ordered list of parts: the summary reads them in that order, the page shows the
    # same titles (compile time under its header, guards and graphs at its end).
    rep = stored(name)
    doc = sections.document(rep)
    keys = [part.key for part in doc]
    assert len(set(keys)) == len(keys) and keys[0] == "header" and keys[-1] == "compile-time"
    text, page = render_summary(rep), render_html(rep)
    shown = [part for part in doc if part.key not in ("header", "compile-time") and (part.blocks or part.lead)]
    at = [text.index(part.title if part.key != "coverage" else f"{part.title}: ") for part in shown]
    assert at == sorted(at), "the summary reads the parts in the document's order"
    for part in doc:  # compile time is said under the page's header figure, without its title
        assert part.key == "compile-time" or escape(part.title) in page
    guards = sections.guards(rep)
    if rep.guards:
        assert guards.lead in text and escape(guards.lead) in page


def test_frames_that_fell_back_say_the_same_words_in_both_views() -> None:
    from dynscope._model import Frame

    rep = stored("print_model")
    failed = Frame(compile_id="1/0", function="loop_print_fn", filename="<root>/p.py", lineno=7, status="failed",
                   fail_reason="skipped: a <loop>")
    rep = replace(rep, frames=(*rep.frames, failed))
    part = sections.fallbacks(rep)
    assert part is not None and part.tone == "bad"
    text, page = render_summary(rep), render_html(rep)
    assert part.lead in text and escape(part.lead) in page
    assert "    1/0 loop_print_fn (p.py:7): skipped: a <loop>" in text
    assert "<td>skipped: a &lt;loop&gt;</td>" in page


def test_a_figure_cell_is_one_column_each_view_says_its_own_way() -> None:
    # One column per figure: the terminal short, the page precise, both from the value.
    from dynscope._render.blocks import Amount, Column, Items, Table

    table = Table((Column("time"), Column("share"), Column("ops")),
                  ((Amount(0.20503, "ms"), Amount(0.5183, "share"), Items(("a", "b", "c", "d", "e"), shown=2)),
                   (Amount(None, "ms"), Amount(None, "share"), Items(()))))
    text = table_text(table).splitlines()
    assert text[2].split() == ["205.0", "us", "52%", "a,", "b,", "+3"] and text[3].split() == ["-", "-", "-"]
    page = table_html(table)
    assert "<td>0.2050 ms</td>" in page and "<td>51.8%</td>" in page and "<td>a, b, c, d, +1</td>" in page


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=12), min_size=1, max_size=40),
       figures=st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=8), width=st.integers(30, 100))
def test_a_note_is_never_wrapped_between_a_figure_and_its_unit(words: list[str], figures: list[float], width: int) -> None:
    from dynscope._format import seconds
    from dynscope._render.text import wrap_figures

    said = [seconds(f) for f in figures]
    note = " ".join(words + said)
    lines = wrap_figures(note, width)
    assert all(not line.rstrip().split()[-1].replace(".", "").isdigit() for line in lines), lines
    assert " ".join(" ".join(lines).split()) == " ".join(" ".join(words + [s.replace("\u00a0", " ") for s in said]).split())
    assert all("\u00a0" not in line for line in lines)
