"""A graph read from a TORCH_TRACE log tells its parameters from its inputs as report() does.

A trace-only graph has no FX nodes: its inputs are read from the annotations of the
``forward`` Dynamo printed (``dynamo_output_graph``), and its parameters by the names it
printed for them (``L_self_modules_fc1_parameters_weight_``, ``Graph.input_names``). The
recorded logs of every release (tests/traces/torch-*/logs, scripts/record_trace_logs.py)
are checked against live reports of the same corpus programs (tests/corpus/programs.py),
and the summary and the page are checked to say the same of both.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import dynscope
from dynscope._render.html_parts import esc
from dynscope._render.words import inputs_text
from tests.corpus.programs import PROGRAMS
from tests.read.test_recorded_traces import _corpus_expected

TRACES = Path(__file__).parents[1] / "traces"
LOGS = sorted(TRACES.glob("torch-*/logs/corpus-*.log"))
_LIVE: dict[str, dynscope.Report] = {}


def _live(name: str) -> dynscope.Report:
    """report() of a corpus program compiled as its logs were (backend "eager"), once per run."""
    if name not in _LIVE:
        torch._dynamo.reset()
        model, calls = next(p for p in PROGRAMS if p.name == name).make()
        _LIVE[name] = dynscope.report(model, calls=calls)
    return _LIVE[name]


def _split(rep: dynscope.Report) -> list[tuple[list[tuple[object, ...]], int]]:
    """Per graph: (its own inputs as (kind, shape, dtype), how many parameters it takes)."""
    out = []
    for g in rep.graphs:
        user, params = g.user_inputs()
        out.append(([(m.kind, m.shape, m.dtype) for m in user], params))
    return out


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parent.parent.name}/{p.stem}" for p in LOGS])
def test_trace_graphs_count_parameters_apart_as_a_live_report_does(log: Path) -> None:
    version, name = log.parent.parent.name, log.stem.removeprefix("corpus-")
    prog = next(p for p in PROGRAMS if p.name == name)
    rep = dynscope.load_trace(log)
    assert isinstance(rep, dynscope.Report)
    for g in rep.graphs:
        assert g.origin == "trace" and not g.nodes
        assert len(g.input_names) == len(g.inputs), g.code[:300]
    installed = "torch-" + ".".join(torch.__version__.split(".")[:2])
    recorded, here = _corpus_expected(version, prog)["graphs"], _corpus_expected(installed, prog)["graphs"]
    if recorded != prog.graphs or here != prog.graphs:
        # The recorded release, or the installed one, captured other graphs than 2.13 did
        # (CORPUS_OVERRIDES says why): the live report has no graph to hold each one to.
        assert rep.graph_count == recorded
        return
    assert _split(rep) == _split(_live(name))


def test_the_corpus_has_parameters_to_tell_apart() -> None:
    """What the test above compares is not all zeros: the 2.13 MLP's graph takes x and its
    three layers' weights and biases, as the live report says."""
    rep = dynscope.load_trace(TRACES / "torch-2.13" / "logs" / "corpus-mlp_no_break.log")
    assert isinstance(rep, dynscope.Report)
    (g,) = rep.graphs
    assert _split(rep) == [([("tensor", (4, 8), "float32")], 6)]
    assert repr(g) == "<Graph 0 MLP.forward (programs.py:52): 7 ops, 1 input (+6 params)>"
    assert repr(_live("mlp_no_break").graphs[0]) == repr(g)
    # The printed names are Dynamo's: the layers' parameters, then x among them.
    assert g.input_names[2] == "L_x_" and g.input_names[0].endswith("_parameters_weight_")


@pytest.mark.parametrize("version", sorted(p.parent.parent.name for p in TRACES.glob("torch-*/logs/inductor-train.log")))
def test_inductor_train_log_counts_each_layers_weight_and_bias(version: str) -> None:
    """scripts/record_trace_logs.py's TwoLayerMlp (Linear 32->64, print, Linear 64->8) at
    batch 16: each graph takes the activations and one layer's weight and bias."""
    rep = dynscope.load_trace(TRACES / version / "logs" / "inductor-train.log")
    assert isinstance(rep, dynscope.Report)
    assert _split(rep) == [([("tensor", (16, 32), "float32")], 2), ([("tensor", (16, 64), "float32")], 2)]


def _summary_cells(rep: dynscope.Report) -> list[str]:
    """The inputs column of the summary's graph table (its last column here: no timing)."""
    text = rep.summary()
    table = text[text.index("Graphs ("):text.index("Graph breaks")]
    rows = [line for line in table.splitlines() if re.match(r"\s+\d+\s", line)]
    return [re.split(r"\s{2,}", row.strip())[-1] for row in rows]


def _page_cells(rep: dynscope.Report) -> list[str]:
    """The inputs column of the page's graph table."""
    html = rep.to_html()
    table = html[html.index('class="graph-table"'):]
    table = table[:table.index("</table>")]
    return [re.findall(r"<td>(.*?)</td>", row)[3] for row in re.findall(r"<tr><td>.*?</tr>", table)]


@pytest.mark.parametrize("name", ["print_break", "mlp_no_break"])
def test_summary_and_page_say_the_same_inputs_for_trace_and_live(name: str) -> None:
    trace = dynscope.load_trace(TRACES / "torch-2.13" / "logs" / f"corpus-{name}.log")
    live = _live(name)
    assert isinstance(trace, dynscope.Report)
    for rep in (trace, live):
        cells = [inputs_text(g) for g in rep.graphs]
        assert all("params)" in c for c in cells) and not any("f32[8, 8]" in c for c in cells)
        assert _summary_cells(rep) == cells
        assert _page_cells(rep) == [esc(c) for c in cells]
        html = rep.to_html()
        for g in rep.graphs:  # each graph's own section too, its inputs all listed
            assert f"nodes; inputs: {esc(inputs_text(g, None))}" in html
    assert [inputs_text(g) for g in trace.graphs] == [inputs_text(g) for g in live.graphs]
