"""Below Dynamo on the HTML page and in the text: kernels tables, compile phases, caches,
saved-for-backward bytes and Inductor's output code, from a report recorded from a real
timed Inductor build of a training step (tests/golden/reports/lowered_train.json)."""

from __future__ import annotations

import dataclasses
import re
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path

import pytest

import dynscope
from dynscope._model import AotGraph, Kernel, Report
from dynscope._render.figures import phase_seconds
from dynscope._render.html import code_anchor, render_html
from dynscope._render.text import kernels_table
from dynscope._render.words import cache_text, phases_text

STORED = Path(__file__).parents[1] / "golden" / "reports"
HOSTILE = "<script>alert(1)</script>\"'&{}\\\n</pre></table>"


@pytest.fixture(scope="module")
def rep() -> Report:
    return dynscope.load(STORED / "lowered_train.json")


@pytest.fixture(scope="module")
def page(rep: Report) -> str:
    return render_html(rep)


class _Tables(HTMLParser):
    """Rows of every <table> with an id, as lists of cell texts; every id and href on the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[list[str]]] = {}
        self.ids: list[str] = []
        self.hrefs: list[str] = []
        self.links: dict[str, list[str]] = {}  # table id -> href of each row's first link
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.append(str(a["id"]))
        if tag == "a" and a.get("href"):
            self.hrefs.append(str(a["href"]))
            if self._table and self._row is not None and len(self._row) == 0 and self._cell is not None:
                self.links.setdefault(self._table, []).append(str(a["href"]))
        if tag == "table":
            self._table = a.get("id") or a.get("class") or "?"
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._table and self._row is not None:
            if self._row:
                self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(html: str) -> _Tables:
    p = _Tables()
    p.feed(html)
    return p


def test_kernels_table_lists_every_kernel_slowest_first(rep: Report, page: str) -> None:
    parsed = _parse(page)
    for g in rep.graphs:
        low = g.lowering
        assert low is not None and low.kernels
        rows = parsed.tables[f"kernels-{g.id}"]
        kernel_rows, outside = rows[:-1], rows[-1]
        assert [r[0] for r in kernel_rows] == [k.name for k in low.kernels_by_time()]
        assert sorted(r[0] for r in kernel_rows) == sorted(k.name for k in low.kernels)  # every kernel
        times = [float(r[4].removesuffix(" ms")) for r in kernel_rows]  # the page's precise figure, with its unit
        assert times == sorted(times, reverse=True)
        assert [r[1] for r in kernel_rows] == [k.kind for k in low.kernels_by_time()]
        assert outside[0] == "(outside kernels)"
        assert low.outside_kernels_ms is not None and float(outside[4].removesuffix(" ms")) == pytest.approx(low.outside_kernels_ms, abs=1e-4)
    # Graph 1's slowest kernel is the backward mm at 52% of the graph's profiled time.
    first = parsed.tables["kernels-1"][0]
    assert first[:6] == ["extern_kernels.mm", "extern", "bwd", "1", "0.2050 ms", "51.8%"]
    assert first[6:] == ["aten.mm", "linear, relu", "programs.py:65"]
    # The cell shows the base name; the full path is in its tooltip.
    assert 'title="&lt;root&gt;/tests/corpus/programs.py:65">programs.py:65</span>' in page


def test_kernel_links_resolve_to_their_call_lines(rep: Report, page: str) -> None:
    parsed = _parse(page)
    ids = set(parsed.ids)
    assert len(ids) == len(parsed.ids), "ids on the page are unique"
    local = [h[1:] for h in parsed.hrefs if h.startswith("#")]
    assert local and all(h in ids for h in local), sorted(set(local) - ids)
    for g in rep.graphs:
        assert g.lowering is not None
        links = parsed.links[f"kernels-{g.id}"]
        for k, href in zip(g.lowering.kernels_by_time(), links, strict=False):
            side = "bwd" if k.graph == "backward" else "fwd"
            assert href == "#" + code_anchor(g.id, side, k.code_line)
            code = g.lowering.backward_code if side == "bwd" else g.lowering.code
            # The anchored line is the line that calls the kernel.
            line = re.search(rf'<span id="{href[1:]}">\s*\d+  (.*?)</span>', page)
            assert line and unescape(line.group(1)) == code.splitlines()[k.code_line - 1]
            assert k.name in code.splitlines()[k.code_line - 1]
        assert len(links) == len(g.lowering.kernels)


def test_output_code_is_on_the_page_escaped_and_folded(rep: Report, page: str) -> None:
    for g in rep.graphs:
        low = g.lowering
        assert low is not None and low.code and low.backward_code
        for side, code in (("fwd", low.code), ("bwd", low.backward_code)):
            block = re.search(rf'<details><summary>Inductor output code, \w+ \((\d+) lines\)</summary>'
                              rf'<pre class="code" id="code-{g.id}-{side}">(.*?)</pre></details>', page, re.S)
            assert block, (g.id, side)
            lines = code.splitlines()
            assert int(block.group(1)) == len(lines)
            shown = re.findall(r'<span id="[^"]+">\s*\d+  (.*?)</span>', block.group(2))
            assert [unescape(s) for s in shown] == lines
    # C++ includes are text, never tags.
    assert "#include &lt;torch/csrc/inductor/cpp_prefix.h&gt;" in page
    assert "<torch/" not in page


def test_lowering_facts_phases_cache_and_notes_per_graph(rep: Report, page: str) -> None:
    sections = {g.id: page[page.index(f'id="lowering-{g.id}"') :].split("</div>", 1)[0] for g in rep.graphs}
    assert "saved for backward: 2 tensors, 768 B" in sections[1]
    assert "saved for backward: 0 tensors, 0 B" in sections[0]
    for g in rep.graphs:
        assert escape(phases_text(phase_seconds([g]))) in sections[g.id]
        assert "Cache: FX graph cache: 2 bypass; AOTAutograd cache: 1 bypass" in sections[g.id]
        assert "100% of the graph's compute nodes mapped to a kernel" in sections[g.id]
    note = rep.graphs[2].lowering.notes[0] if rep.graphs[2].lowering else ""
    assert note and f"<li>{escape(note)}</li>" in sections[2]
    assert "<li>" not in sections[0].split("<details>", 1)[0]  # no notes, no list


def test_program_part_has_top_kernels_phases_and_cache(rep: Report, page: str) -> None:
    section = page[page.index('<section id="below-dynamo">') :].split("</section>", 1)[0]
    rows = _parse(section).tables["top-kernels"]
    top = rep.top_kernels(10)
    assert [(int(r[0]), r[1], float(r[4].removesuffix(" ms"))) for r in rows] == [
        (g.id, k.name, round(cost, 4)) for g, k, cost in top
    ]
    assert len(rows) == 10  # every kernel of this report (10) is timed
    assert escape(phases_text(phase_seconds(rep.graphs))) in section
    assert escape(cache_text(rep.graphs)) in section
    assert "Saved for backward: 2 tensors, 768 B over 3 training graphs" in section
    # It sits with the program's figures, before the guards and the graphs.
    assert page.index('id="below-dynamo"') < page.index("<h2>Guards</h2>") < page.index('id="graph-0"')


def test_aot_pictures_shown_when_given(rep: Report) -> None:
    svgs = {(1, "forward"): '<svg id="fwd-pic"></svg>', (1, "backward"): '<svg id="bwd-pic"></svg>'}
    page = render_html(rep, aot_svgs=svgs)
    assert '<div class="svgbox" id="aot-svg-1-forward"><svg id="fwd-pic"></svg></div>' in page
    assert '<div class="svgbox" id="aot-svg-1-backward"><svg id="bwd-pic"></svg></div>' in page
    assert "aot-svg-0-" not in page and "aot-svg-2-" not in page
    assert "aot-svg-" not in render_html(rep)


def test_untimed_lowering_says_so(rep: Report) -> None:
    """A lowering read from the trace (capture(), inner="inductor") has no kernel times."""
    graphs = tuple(
        dataclasses.replace(g, lowering=dataclasses.replace(
            g.lowering, source="trace", profiled_ms=None,
            kernels=tuple(dataclasses.replace(k, time_ms=None, share=None) for k in g.lowering.kernels),
        )) if g.lowering else g
        for g in rep.graphs
    )
    untimed = dataclasses.replace(rep, graphs=graphs)
    page = render_html(untimed)
    assert "Kernels not timed" in page and 'class="top-kernels"' not in page
    assert "the compile PyTorch logged" in page and "(outside kernels)" not in page
    rows = _parse(page).tables["kernels-1"]
    assert [r[0] for r in rows] == [k.name for k in graphs[1].lowering.kernels]  # call order
    assert "kernels not timed" in untimed.summary()
    assert "(outside kernels)" not in kernels_table(graphs[1])


def _hostile(rep: Report) -> Report:
    g = rep.graphs[1]
    assert g.lowering is not None
    k = Kernel(name=HOSTILE, kind=HOSTILE, graph="forward", aten_ops=(HOSTILE,), nodes=(HOSTILE,),
               source_lines=((HOSTILE, 1),), time_ms=1.0, share=0.5, code_line=1)
    low = dataclasses.replace(
        g.lowering, mode=HOSTILE, kernels=(k, *g.lowering.kernels), unmapped=(HOSTILE,),
        code=HOSTILE + "\n" + g.lowering.code, backward_code="</details>" + HOSTILE, notes=(HOSTILE,),
        cache=((HOSTILE, HOSTILE, HOSTILE),), phases=((HOSTILE, 1.0),),
        forward=AotGraph(kind=HOSTILE, node_count=1, op_count=1),
    )
    graphs = tuple(dataclasses.replace(x, lowering=low) if x.id == 1 else x for x in rep.graphs)
    return dataclasses.replace(rep, graphs=graphs)


def test_hostile_kernel_fields_and_code_are_escaped(rep: Report) -> None:
    bad = _hostile(rep)
    page = render_html(bad, aot_svgs={(1, HOSTILE): "<svg></svg>"})
    assert "<script>alert" not in page and page.count("<script>") == 1, "only dynscope's own script"
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;{}\\" in page
    assert "</pre></table>" not in page
    # The structure survives: the hostile kernel leads graph 1's table (1 ms), linked to line 1.
    parsed = _parse(page)
    rows = parsed.tables["kernels-1"]
    assert rows[0][0] == HOSTILE and len(rows) == len(bad.graphs[1].lowering.kernels) + 1
    assert parsed.links["kernels-1"][0] == "#g1-fwd-L1"
    assert all(h[1:] in set(parsed.ids) for h in parsed.hrefs if h.startswith("#"))


def test_reports_without_lowering_have_no_lowering_parts() -> None:
    rep = dynscope.load(STORED / "mlp.json")
    assert all(g.lowering is None for g in rep.graphs)
    page = render_html(rep)
    for marker in ("Below Dynamo", 'class="kernels"', "top-kernels", "Inductor output code", "aot-svg-"):
        assert marker not in page
    assert "Below Dynamo" not in rep.summary()
    with pytest.raises(dynscope.InputError, match="graph 0 has no lowering"):
        kernels_table(rep.graphs[0])
