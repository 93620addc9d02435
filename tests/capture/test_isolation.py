"""dynscope leaves PyTorch as it found it, also after a failure."""

from __future__ import annotations

import pytest
import torch

import dynscope
from dynscope import _torch
from tests.corpus.programs import MLP, PrintModel, _x


@pytest.fixture(autouse=True, scope="module")
def _torch_logging_initialised() -> None:
    # PyTorch sets up its own logging (a TORCH_TRACE handler) on the first compile of a
    # process, whoever makes it; do that first so the comparison sees only dynscope.
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))


def _state() -> dict:
    return _torch.snapshot_state()


def test_report_restores_state() -> None:
    before = _state()
    dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)])
    assert _state() == before


def test_report_restores_state_after_failure() -> None:
    def boom(x: torch.Tensor) -> torch.Tensor:
        print("about to fail", x.shape)
        raise ValueError("model failure")

    before = _state()
    with pytest.raises(dynscope.CaptureError):
        dynscope.report(boom, _x(3))
    assert _state() == before


def test_capture_restores_trace_logger_even_when_block_raises() -> None:
    log = _torch.trace_logger()
    handlers, level, propagate = list(log.handlers), log.level, log.propagate
    with pytest.raises(RuntimeError, match="user error"):
        with dynscope.capture() as cap:
            torch.compile(lambda x: x.sin() + 1, backend="eager")(_x(3))
            raise RuntimeError("user error")
    assert (list(log.handlers), log.level, log.propagate) == (handlers, level, propagate)
    assert cap.report.graph_count == 1, "what was captured before the error is kept"


def test_report_keeps_user_stance() -> None:
    torch.compiler.set_stance("force_eager")
    try:
        rep = dynscope.report(MLP(), _x(4, 8))
        assert rep.graph_count == 1, "report compiles even when the user forced eager"
        assert _torch.snapshot_state()["stance"][0] == "force_eager"
    finally:
        torch.compiler.set_stance("default")


def test_report_keeps_user_config_changes() -> None:
    with torch._dynamo.config.patch(recompile_limit=3, capture_scalar_outputs=True):
        before = torch._dynamo.config.get_config_copy()
        dynscope.report(MLP(), _x(4, 8))
        assert torch._dynamo.config.get_config_copy() == before


def test_plain_compile_after_report_behaves_as_without_dynscope() -> None:
    model = MLP()
    dynscope.report(model, calls=[_x(4, 8), _x(6, 8)])  # teaches Dynamo x is dynamic
    frames: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        frames.append(len(example_inputs))
        return gm.forward

    compiled = torch.compile(model, backend=counting)
    out = compiled(_x(4, 8))
    compiled(_x(6, 8))
    torch.testing.assert_close(out, model(_x(4, 8)))
    # Without dynscope: one static graph, then one dynamic after the shape change. Had the
    # report's automatic-dynamic memory leaked, the first graph would already be dynamic.
    assert len(frames) == 2


def test_earlier_compile_does_not_hide_graphs() -> None:
    model = PrintModel()
    torch.compile(model, backend="eager")(_x(4, 8))
    rep = dynscope.report(model, _x(4, 8))
    assert rep.graph_count == 2 and rep.break_count == 1
    assert rep.recompile_count == 0, "a different backend's earlier compile is not a recompile"
    again = dynscope.report(model, _x(4, 8))
    assert (again.graph_count, again.break_count) == (2, 1)


def test_outputs_equal_eager() -> None:
    model = PrintModel()
    x = _x(4, 8)
    with dynscope.capture() as cap:
        out = torch.compile(model, backend=cap.backend)(x)
    torch.testing.assert_close(out, model(x), rtol=0, atol=0)
    assert cap.report.graph_count == 2


def test_users_learnt_dynamic_shapes_do_not_change_the_report() -> None:
    model = MLP()
    plain = torch.compile(model, backend="eager")
    plain(_x(4, 8))
    plain(_x(6, 8))  # Dynamo now remembers dim 0 of x as dynamic
    rep = dynscope.report(model, _x(4, 8))
    assert rep.graphs[0].inputs[2].shape == (4, 8), "the report's graph is static, as in a fresh process"


def _marked_fn(x: torch.Tensor) -> torch.Tensor:
    return x.sin() + 1


def test_a_skip_mark_missing_from_dynamos_own_list_is_lifted_for_the_report() -> None:
    """A frame Dynamo gave up on keeps a "skip" mark; Dynamo's list of seen codes can lose
    such a code (seen after torch._dynamo.reset() calls in a long suite). report() still
    compiles it, and the user's mark is back after."""
    from torch._dynamo.eval_frame import reset_code, skip_code

    code = _marked_fn.__code__
    skip_code(code)  # Dynamo's own call for a frame it gives up on; this code was never listed
    try:
        rep = dynscope.report(_marked_fn, torch.randn(4))
        assert rep.graph_count == 1 and len(rep.frames) == 1
        graphs: list[object] = []

        def counting(gm: torch.fx.GraphModule, _inputs: list[object]) -> object:
            graphs.append(gm)
            return gm.forward

        torch.compile(_marked_fn, backend=counting)(torch.randn(4))
        assert graphs == [], "the user's skip mark is back: Dynamo skips the frame again"
    finally:
        reset_code(code)
        torch._dynamo.reset()
