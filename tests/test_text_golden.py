"""The terminal summary of a real capture, compared with a golden file."""

from __future__ import annotations

import dynscope
from tests.conftest import normalise
from tests.corpus.programs import PrintModel, _x


def test_summary_golden(golden) -> None:
    rep = dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])
    text = normalise(rep.summary())
    assert text == normalise(str(rep))
    golden.check("print_model_summary.txt", text)


def test_summary_without_breaks(golden) -> None:
    from tests.corpus.programs import MLP

    rep = dynscope.report(MLP(), _x(4, 8))
    text = normalise(rep.summary())
    assert "Graph breaks: none" in text
    golden.check("mlp_summary.txt", text)
