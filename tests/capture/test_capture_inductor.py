"""capture() watches code compiled with the default Inductor backend, untouched."""

from __future__ import annotations

import pytest
import torch

import dynscope
from dynscope._torch.graph_text import op_counts_from_code
from tests.corpus.programs import _x


def tiny(x: torch.Tensor) -> torch.Tensor:
    y = torch.sin(x) * 2
    print("tiny")
    return y.relu() + 1


@pytest.mark.slow
def test_capture_default_inductor() -> None:
    x = _x(16)
    with dynscope.capture() as cap:
        compiled = torch.compile(tiny)  # the user's own, default backend
        out = compiled(x)
        compiled(x)  # second call: cached, no new graphs
    torch.testing.assert_close(out, tiny(x))
    rep = cap.report
    assert rep.graph_count == 2 and rep.break_count == 1 and rep.recompile_count == 0
    assert all(g.origin == "trace" and g.module is None for g in rep.graphs)
    first, second = rep.graphs
    assert dict(first.op_counts) == {"torch.sin": 1, "mul": 1}
    assert first.op_count == 2 and first.node_count == 4, "exact counts from compilation_metrics"
    assert first.inputs[0].describe() == "f32[16]"
    assert second.frame.startswith("torch_dynamo_resume_in_tiny")
    # Inductor's compile time is reported (small when an earlier test left the same graph in
    # Inductor's cache, so only "some"), and what Inductor made is read from the trace.
    assert rep.compile_time.backend_s > 0.0, "Inductor's compile time is reported"
    assert first.lowering is not None and first.lowering.source == "trace"
    # capture() leaves Inductor's provenance tracking off (part of the FX graph cache key):
    # no kernel list, and the report says why (capture(provenance=True): tests/read/test_lowering.py).
    assert not first.lowering.kernels and any("provenance tracking off" in n for n in rep.notes)
    assert rep.breaks[0].source == 'print("tiny")'
    assert rep.guards, "guards come from the trace too"


def test_op_counts_from_trace_code_match_backend_names() -> None:
    code = '''
class GraphModule(torch.nn.Module):
    def forward(self, L_x_: "f32[4, 8][8, 1]cpu"):
        linear: "f32[4, 8][8, 1]cpu" = torch._C._nn.linear(l_x_, w, b)
        relu: "f32[4, 8][8, 1]cpu" = linear.relu();  linear = None
        add: "f32[4, 8][8, 1]cpu" = operator.add(relu, 1)
        mul: "f32[4, 8][8, 1]cpu" = add * 2;  add = None
        return (add,)
'''
    assert dict(op_counts_from_code(code)) == {"torch.nn.functional.linear": 1, "relu": 1, "add": 1, "mul": 1}
