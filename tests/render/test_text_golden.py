"""The terminal summary, compared with golden files.

Two tiers: the goldens are rendered from reports stored in tests/golden/reports (recorded
by scripts/record_golden_reports.py from real compiles), so a torch upgrade cannot churn
them; the live test checks that a fresh compile still means what the stored report says.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dynscope
from tests.conftest import normalise
from tests.corpus.programs import MLP, PrintModel, _x

STORED = Path(__file__).parents[1] / "golden" / "reports"


def stored(name: str) -> dynscope.Report:
    """A report recorded from a real compile (see scripts/record_golden_reports.py)."""
    return dynscope.load(STORED / f"{name}.json")


def test_summary_golden(golden) -> None:
    rep = stored("print_model")
    text = normalise(rep.summary())
    assert text == normalise(str(rep))
    golden.check("print_model_summary.txt", text)


def test_summary_without_breaks(golden) -> None:
    text = normalise(stored("mlp").summary())
    assert "Graph breaks: none" in text
    golden.check("mlp_summary.txt", text)


@pytest.mark.parametrize(
    ("name", "live"),
    [
        ("print_model", lambda: dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])),
        ("mlp", lambda: dynscope.report(MLP(), _x(4, 8))),
    ],
)
def test_stored_reports_still_mean_what_a_live_compile_says(name: str, live) -> None:
    rep, old = live(), stored(name)
    assert (rep.graph_count, rep.break_count, len(rep.breaks), rep.recompile_count) == (
        old.graph_count,
        old.break_count,
        len(old.breaks),
        old.recompile_count,
    )
    assert [b.category for b in rep.breaks] == [b.category for b in old.breaks]
    assert [g.op_counts for g in rep.graphs] == [g.op_counts for g in old.graphs]


def test_lowered_summary_golden(golden) -> None:
    """A training step lowered by Inductor: the "Below Dynamo" section (top kernels, compile
    phases, caches, saved-for-backward bytes) from a report recorded with timing=True."""
    rep = stored("lowered_train")
    text = normalise(rep.summary())
    section = text[text.index("Below Dynamo (10 kernels in 3 lowered graphs)") :]
    assert "extern  bwd     205.0 us  52%" in section  # the slowest kernel first
    assert "cache: FX graph cache: 6 bypass; AOTAutograd cache: 3 bypass" in section
    assert "saved for backward: 2 tensors, 768 B over 3 training graphs" in section
    golden.check("lowered_train_summary.txt", text)


def test_kernels_table_golden(golden) -> None:
    from dynscope._render.text import kernels_table

    rep = stored("lowered_train")
    tables = [kernels_table(g) for g in rep.graphs]
    for g, table in zip(rep.graphs, tables, strict=True):
        assert g.lowering is not None
        assert len(table.splitlines()) == 2 + len(g.lowering.kernels) + 1  # header, rule, kernels, outside
    text = "\n\n".join(f"graph {g.id}\n{t}" for g, t in zip(rep.graphs, tables, strict=True))
    golden.check("lowered_train_kernels.txt", text + "\n")
