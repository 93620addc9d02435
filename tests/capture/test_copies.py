"""dynscope._capture.copies: deep copies of what copy.deepcopy refuses (a tensor with a history)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from dynscope._capture.copies import deep_copy


def test_a_weight_normed_module_is_copied_with_its_computed_weight_detached() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        conv = nn.utils.weight_norm(nn.Conv1d(2, 3, 3))
    x = torch.randn(1, 2, 6)
    conv(x)
    assert conv.weight.grad_fn is not None  # the hook's weight: what copy.deepcopy refuses
    twin = deep_copy(conv)
    assert twin.weight.grad_fn is None and torch.equal(twin.weight, conv.weight)
    assert torch.equal(twin(x), conv(x))
    twin.weight_g.data.mul_(2)  # a copy, not a view of the user's parameters
    assert not torch.equal(twin(x), conv(x))


def test_inputs_with_a_history_are_copied_shared_once_and_keep_requires_grad() -> None:
    leaf = torch.randn(3, requires_grad=True)
    made = leaf * 2
    calls = [((made, {"again": made}), {}), ((leaf.detach(),), {"n": 3})]
    out = deep_copy(calls)
    a, b = out[0][0]
    assert a is b["again"] and a.requires_grad and a.grad_fn is None and torch.equal(a, made)
    assert out[1] == ((out[1][0][0],), {"n": 3}) and out[1][0][0] is not calls[1][0][0]


def test_what_deepcopy_takes_is_copied_as_deepcopy_copies_it() -> None:
    model = nn.Linear(2, 2)
    twin = deep_copy(model)
    assert twin is not model and torch.equal(twin.weight, model.weight) and twin.weight.requires_grad


class _Holder:
    def __init__(self, fn: object) -> None:
        self.run = lambda x: fn(x)  # type: ignore[operator]


class _WithClosure(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        lin = self.lin
        self.holder = _Holder(lambda x: lin(x) * 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.holder.run(x)


def test_closures_the_copy_holds_read_the_copy_s_modules_not_the_user_s() -> None:
    # copy.deepcopy keeps a function as itself: the lambda would still call the user's own
    # Linear, and a backward through the copy would fill the user's .grad.
    model = _WithClosure()
    twin = deep_copy(model)
    twin(torch.randn(3, 2)).sum().backward()
    assert model.lin.weight.grad is None and twin.lin.weight.grad is not None
    with torch.no_grad():
        twin.lin.weight.add_(1.0)
    x = torch.randn(1, 2)
    assert not torch.equal(twin(x), model(x))  # the copy's closure reads the copy's weight
