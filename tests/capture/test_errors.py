"""Bad input gets a clear error from one tree; a failing model keeps what was captured."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import dynscope
from tests.corpus.programs import MLP, _x

if TYPE_CHECKING:
    import torch


def test_error_tree() -> None:
    for cls in (dynscope.InputError, dynscope.CaptureError, dynscope.SchemaError,
                dynscope.GraphvizNotFoundError, dynscope.CompileBudgetError):
        assert issubclass(cls, dynscope.DynscopeError)
    assert issubclass(dynscope.CompileBudgetError, AssertionError)


def test_model_not_callable() -> None:
    with pytest.raises(dynscope.InputError, match="model must be callable .* got int 3"):
        dynscope.report(3, _x(2))


def test_inputs_of_wrong_kind() -> None:
    with pytest.raises(dynscope.InputError, match=r"inputs must be a Tensor .* got str.*\('abc',\)"):
        dynscope.report(MLP(), "abc")


def test_calls_and_inputs_together() -> None:
    with pytest.raises(dynscope.InputError, match="not both"):
        dynscope.report(MLP(), _x(4, 8), calls=[_x(4, 8)])


def test_calls_must_be_a_list_of_inputs() -> None:
    with pytest.raises(dynscope.InputError, match="calls must be a list"):
        dynscope.report(MLP(), calls=_x(4, 8))
    with pytest.raises(dynscope.InputError, match="calls is empty"):
        dynscope.report(MLP(), calls=[])
    with pytest.raises(dynscope.InputError, match=r"calls\[1\] must be a Tensor"):
        dynscope.report(MLP(), calls=[_x(4, 8), 5])


def test_unknown_inner_backend() -> None:
    with pytest.raises(dynscope.InputError, match="unknown backend 'nope'.*eager"):
        dynscope.report(MLP(), _x(4, 8), inner="nope")


def test_failing_model_keeps_partial_report() -> None:
    def flaky(x: torch.Tensor) -> torch.Tensor:
        y = x.cos()
        print("halfway")
        if x.shape[0] > 4:
            raise RuntimeError("shape too big for this model")
        return y + 1

    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(flaky, calls=[_x(3), _x(9)])
    err = info.value
    assert "RuntimeError: shape too big for this model" in str(err)
    assert "call 1 of 2" in str(err)
    assert err.call_index == 1
    assert isinstance(err.__cause__, RuntimeError)
    rep = err.report
    assert rep.graph_count >= 2 and rep.break_count >= 1
    assert rep.breaks[0].source == 'print("halfway")'


def test_load_rejects_newer_schema(tmp_path) -> None:
    rep = dynscope.report(MLP(), _x(4, 8))
    data = rep.to_dict()
    data["schema_version"] = 999
    path = tmp_path / "new.json"
    import json

    path.write_text(json.dumps(data))
    with pytest.raises(dynscope.SchemaError, match="schema version 999, newer .* upgrade dynscope"):
        dynscope.load(path)


def test_load_rejects_non_report(tmp_path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    with pytest.raises(dynscope.SchemaError, match="not a dynscope report"):
        dynscope.load(path)
    path.write_text("not json")
    with pytest.raises(dynscope.SchemaError, match="is not JSON"):
        dynscope.load(path)
