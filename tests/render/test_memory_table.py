"""The memory table shows a training graph's forward peak beside its forward+backward step.

report(memory=True) measures both for a training graph (GraphMemory.eager_peak /
compiled_peak, and eager_train_peak / compiled_train_peak); the summary's and the page's
memory tables give each its row. Rendered from a stored report (tests/golden/reports) given
known figures, and from a live train step, whose measured figures must be the ones shown.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import dynscope
from dynscope._format import human_bytes
from dynscope._model import GraphMemory

STORED = Path(__file__).parents[1] / "golden" / "reports"


def _text_rows(rep: dynscope.Report) -> list[list[str]]:
    """The summary's memory table, a list of cells per row."""
    text = rep.summary()
    part = text[text.index("Memory ("):]
    part = part[:part.index("\n\n")]
    lines = part.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("graph  frame")) + 2
    rows = []
    for line in lines[start:]:
        if not re.match(r"\s+\d+\s", line):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


def _page_rows(rep: dynscope.Report) -> list[list[str]]:
    """The page's memory table, a list of cells per row (graph links as their text)."""
    html = rep.to_html()
    part = html[html.index('<section id="memory">'):]
    part = part[:part.index("</table>")]
    return [
        [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr><td>.*?</tr>", part)
    ]


def _measured() -> dynscope.Report:
    """lowered_train (a recorded train step, three training graphs) with known memory:
    graph 0 measured as a training graph, graph 2 as a forward alone."""
    rep = dynscope.load(STORED / "lowered_train.json")
    trains = GraphMemory(
        "default", "cpu", "profiler", eager_peak=8192, compiled_peak=4608,
        eager_train_peak=14628, compiled_train_peak=12288,
        eager_saved=4096, eager_saved_count=1, compiled_saved=2048, compiled_saved_count=1,
    )
    forward_only = GraphMemory("default", "cpu", "profiler", eager_peak=2048, compiled_peak=1024)
    graphs = list(rep.graphs)
    graphs[0] = replace(graphs[0], memory=trains)
    graphs[2] = replace(graphs[2], memory=forward_only)
    return replace(rep, graphs=tuple(graphs))


def test_a_training_graph_has_a_forward_row_and_a_step_row() -> None:
    rep = _measured()
    recomputed = rep.graphs[0].lowering.recomputed if rep.graphs[0].lowering is not None else ()
    # Graphs that grew most first (by the peak the program makes: graph 0's step shrank more);
    # a graph's forward row, then its step's.
    want = [
        ["2", "resume train_step_at_35", "forward", "2.0 KiB", "1.0 KiB", "0.50x", "-", "-", "-"],
        ["0", "forward", "forward", "8.0 KiB", "4.5 KiB", "0.56x", "4.0 KiB (1)", "2.0 KiB (1)", "-"],
        ["0", "forward", "fwd+bwd", "14.3 KiB", "12.0 KiB", "0.84x", "-", "-", f"{len(recomputed)} ops"],
    ]
    assert _text_rows(rep) == want
    assert _page_rows(rep) == want
    assert "fwd+bwd one step through its backward" in rep.summary()
    assert "fwd+bwd one step through its backward" in rep.to_html()


@pytest.mark.slow
def test_live_train_step_shows_both_measured_peaks() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).sum()
        loss.backward()  # a graph break: the graph before it is a training graph
        return loss

    rep = dynscope.report(step, torch.randn(16, 32), memory=True)
    trained = [g for g in rep.graphs if g.memory is not None and g.memory.trains]
    assert trained, [g.memory for g in rep.graphs]
    g = trained[0]
    m = g.memory
    assert m is not None and m.eager_peak > 0 and m.eager_train_peak > 0
    forward = [human_bytes(m.eager_peak), human_bytes(m.compiled_peak)]
    step_peaks = [human_bytes(m.eager_train_peak), human_bytes(m.compiled_train_peak)]
    for rows in (_text_rows(rep), _page_rows(rep)):
        mine = [r for r in rows if r[0] == str(g.id)]
        assert [r[2] for r in mine] == ["forward", "fwd+bwd"]
        assert mine[0][3:5] == forward and mine[1][3:5] == step_peaks
        assert mine[0][6:8] == [f"{human_bytes(m.eager_saved)} ({m.eager_saved_count})",
                                f"{human_bytes(m.compiled_saved)} ({m.compiled_saved_count})"]
