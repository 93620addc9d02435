"""Compile coverage of training steps: the backward of a captured graph counts as in graphs.

Real report() runs of small train steps. The autograd engine runs backward ops from
``loss.backward()``, outside every graph marker; they belong to the graph whose forward
made their autograd nodes (see dynscope._torch.profiler), and eager backward ops belong to
the break that left their forward outside a graph.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import dynscope
from tests.corpus.markers import break_line

FILE = "test_coverage_training.py"


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=gen), torch.randn(4, 1, generator=gen)


def _full_step() -> Any:
    """Forward, loss and backward in one compiled function: the only break is backward()."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # BREAK: backward() in compiled code
        return loss.detach()

    return train_step, model


def _check_full_step(inner: str) -> None:
    step, model = _full_step()
    rep = dynscope.report(step, calls=[_data()], inner=inner)
    cov = rep.coverage
    assert cov is not None
    assert all(p.grad is not None for p in model.parameters()), "the step really ran backward"
    # Only the seed gradient backward() makes (ones_like) runs outside a graph, at its line;
    # before, every backward op (mm, t, sum, threshold_backward ...) was counted eager.
    line = break_line(_full_step, "backward() in compiled code")
    assert cov.eager_sites == ((f"{FILE}:{line} aten::ones_like", 1),)
    assert cov.ops_in_graphs >= 15, "forward and backward ops both counted in graphs"
    assert cov.ratio >= 0.9


def test_fully_compiled_train_step_has_coverage_near_one() -> None:
    # The "eager" inner backend (report()'s default): the graph's own autograd nodes
    # (AddmmBackward0, ...) run the backward; they belong to the captured forward graph.
    _check_full_step("eager")


@torch._dynamo.disable
def _eager_scale(h: torch.Tensor) -> torch.Tensor:
    return h * 2.0


def _step_with_disabled() -> Any:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))

    def train_step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = _eager_scale(model(x))  # BREAK: skipped or disallowed function
        loss = nn.functional.mse_loss(h, y)
        loss.backward()  # BREAK: backward() in compiled code
        return loss.detach()

    return train_step


def test_eager_backward_op_is_tied_to_the_break_of_its_forward() -> None:
    # The multiply runs eagerly (a disabled function); its backward (MulBackward0's mul)
    # runs from loss.backward(), but the break that left it outside a graph is the call of
    # the disabled function, not the backward() line the engine was started from.
    rep = dynscope.report(_step_with_disabled(), calls=[_data()])
    cov = rep.coverage
    assert cov is not None
    scale = break_line(_step_with_disabled, "skipped or disallowed function")
    backward = break_line(_step_with_disabled, "backward() in compiled code")
    sites = dict(cov.eager_sites)
    assert sites == {
        f"{FILE}:{scale} aten::mul": 2,  # forward h * 2.0 and its backward grad * 2.0
        f"{FILE}:{backward} aten::ones_like": 1,
    }
    assert cov.ratio >= 0.8


def test_compiled_backward_counts_in_graphs() -> None:
    # aot_eager: one CompiledFunctionBackward node runs AOTAutograd's backward graph, made
    # by the CompiledFunction forward that ran inside the graph marker. Its lazy compile
    # (on the first backward) is not counted.
    _check_full_step("aot_eager")


def test_lazy_backward_compile_leaves_later_reports_alone() -> None:
    # Pausing the profiler inside the autograd engine (AOTAutograd's lazy backward compile)
    # left a callback behind: every later profiler session recorded each op twice.
    def counts() -> tuple[int, int]:
        step, _ = _full_step()
        cov = dynscope.report(step, calls=[_data()]).coverage
        assert cov is not None
        return cov.ops_in_graphs, cov.ops_eager

    before = counts()
    step, _ = _full_step()
    dynscope.report(step, calls=[_data()], inner="aot_eager")
    assert counts() == before
