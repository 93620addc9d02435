"""The private torch names fix writes into user code exist in the installed torch and do what
its rewrites say (dynscope/_torch/spelled.py)."""

from __future__ import annotations

import pytest
import torch

from dynscope._torch.spelled import ASYNC_ASSERT


def test_the_async_assert_exists_and_raises_runtime_error_with_the_message() -> None:
    head, _, name = ASYNC_ASSERT.partition(".")
    assert head == "torch" and hasattr(torch, name)
    check = getattr(torch, name)
    check(torch.tensor(True), "never said")
    with pytest.raises(RuntimeError, match="the loss is NaN"):
        check(torch.tensor(False), "the loss is NaN")
