"""Compile budgets in a test suite: copy this file next to your own tests.

Run it:  pytest examples/test_compile_budget.py --dynscope-report dynscope-reports/
(the dynscope pytest plugin is registered when dynscope is installed).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).log_softmax(-1)


def test_classifier_compiles_in_one_graph(dynscope) -> None:
    """The fixture: assert_compiles fails with every break and recompile spelled out."""
    rep = dynscope.assert_compiles(Classifier(), torch.randn(8, 16), max_graph_breaks=0, max_recompiles=0)
    assert rep.graph_count == 1


def test_classifier_tolerates_one_batch_size_change(dynscope) -> None:
    """Several calls: a new batch size may recompile once (then shapes go dynamic)."""
    calls = [torch.randn(8, 16), torch.randn(4, 16), torch.randn(2, 16)]
    dynscope.assert_compiles(Classifier(), calls=calls, max_graph_breaks=0, max_recompiles=1)


@pytest.mark.compile_budget(graph_breaks=0, recompiles=1)
def test_inference_loop_with_plain_torch_compile() -> None:
    """The marker watches the test's own torch.compile calls, whatever their backend."""
    model = torch.compile(Classifier(), backend="eager")
    with torch.no_grad():
        for batch in (8, 8, 16):
            model(torch.randn(batch, 16))
