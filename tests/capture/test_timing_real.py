"""Timing on real workloads (issue 10): dynamic shapes, random ops, training steps.

Tiny models, Inductor on CPU, real ``dynscope.report`` runs.
"""

from __future__ import annotations

import pytest
import torch

import dynscope

FAST = dynscope.TimingOptions(warmup=1, repeats=5, min_time_s=0.02, min_sample_ms=0.2, progress=False)


class Tiny(torch.nn.Module):
    """A sequence model whose reshape uses the (symbolic) sequence length."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.lin(x))
        return y.reshape(x.shape[0] * x.shape[1], 8).sum(0)


@pytest.mark.slow
def test_dynamic_shape_graph_is_timed_at_its_recorded_sizes() -> None:
    torch.manual_seed(0)
    calls = [torch.randn(2, 5, 8), torch.randn(2, 7, 8)]
    rep = dynscope.report(Tiny(), calls=calls, timing=True, timing_options=FAST)
    assert rep.recompile_count >= 1, "the second length makes Dynamo recompile"
    dynamic = [g for g in rep.graphs if any(m.kind == "symint" for m in g.inputs)]
    assert dynamic, "Dynamo made a graph with symbolic sizes"
    for g in rep.graphs:
        t = g.timing
        assert t is not None and not t.failed, t.error if t else "no timing"
        assert t.eager_ms > 0 and t.compiled_ms > 0 and t.speedup > 0
        assert t.numerics_ok
    (m,) = rep.timing
    assert not m.error and m.speedup > 0


@pytest.mark.slow
def test_dynamic_graph_is_compiled_dynamic_like_dynamo() -> None:
    from dynscope import _torch
    from dynscope._capture.backend import RecordingBackend

    backend = RecordingBackend(keep_inputs=True)
    compiled = torch.compile(Tiny(), backend=backend)
    compiled(torch.randn(2, 5, 8))
    compiled(torch.randn(2, 7, 8))
    rec = backend.graphs[-1]
    assert rec.dynamic and [v for v in rec.example_inputs if type(v) is int] == [7], "SymInts kept as sizes"
    assert not any(isinstance(v, torch.SymInt) for v in rec.example_inputs)
    fn = _torch.inductor_compile(rec.module, rec.example_inputs, "default", symbolic_from=rec.module)
    # A third length runs without recompiling: the compiled graph is symbolic in it.
    args = [torch.randn(2, 9, 8) if isinstance(v, torch.Tensor) and v.dim() == 3 else v for v in rec.example_inputs]
    args = [9 if type(v) is int else v for v in args]
    with torch.no_grad():
        assert fn(*args)[0].shape == (8,)
        assert torch.allclose(fn(*args)[0], rec.module(*args)[0], atol=1e-5)


@pytest.mark.slow
def test_failed_graph_does_not_claim_numerics() -> None:
    from dynscope._capture.backend import RecordingBackend
    from dynscope._capture.graph_timing import time_graph

    backend = RecordingBackend(keep_inputs=True)
    compiled = torch.compile(Tiny(), backend=backend)
    compiled(torch.randn(2, 5, 8))
    (rec,) = backend.graphs
    # Inputs that do not fit the graph: compiling or running fails.
    rec.example_inputs = [torch.randn(3, 3)]
    t = time_graph(rec, "default", FAST)
    assert t.failed and t.error
    assert not t.numerics_ok and t.speedup == 0.0


class Dropout(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.lin(x)))


@pytest.mark.slow
def test_dropout_numerics_judged_with_eager_matching_randomness() -> None:
    model = Dropout().train()
    x = torch.randn(4, 8)
    before = torch.get_rng_state()
    rep = dynscope.report(model, x, timing=True, timing_options=FAST, restore_state=True)
    (g,) = rep.graphs
    t = g.timing
    assert t is not None and not t.failed, t.error if t else "no timing"
    assert t.numerics_mode == "fallback_random"
    assert t.numerics_ok and t.max_abs_err < 1e-5
    assert t.grads_checked and t.max_grad_err < 1e-5, "gradients judged under eager's RNG too"
    assert t.speedup > 0, "times come from the normal build"
    assert torch.equal(torch.get_rng_state(), before), "the RNG state is restored"


@pytest.mark.slow
def test_deterministic_graph_numerics_use_the_default_build() -> None:
    rep = dynscope.report(Dropout().eval(), torch.randn(4, 8), timing=True, timing_options=FAST)
    t = rep.graphs[0].timing
    assert t is not None and t.numerics_ok and t.numerics_mode == "default"


@pytest.mark.slow
def test_train_step_times_end_to_end_with_gradients() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    x, target = torch.randn(16, 8), torch.randn(16, 1)

    def step(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        return loss.detach()

    rep = dynscope.report(step, (x, target), timing=True, timing_options=FAST)
    (m,) = rep.timing
    assert not m.error, m.error
    assert m.eager_ms > 0 and m.compiled_ms > 0 and m.speedup > 0
    assert all(p.grad is not None for p in model.parameters()), "the step's backward ran"
    for g in rep.graphs:
        assert g.timing is not None and not g.timing.failed, g.timing.error if g.timing else ""
    trained = [g.timing for g in rep.graphs if g.timing is not None and g.timing.grads_checked]
    assert trained, "the forward+loss graph is timed forward+backward"
    assert all(t.numerics_ok and t.train_compiled_ms > 0 for t in trained)
    # The step ran each trained graph's backward: 'in graphs' counts it (it used to count the
    # forward only and called the rest "Python between graphs").
    graph = next(g for g in rep.graphs if g.timing is not None and g.timing.grads_checked)
    assert graph.backward_runs == graph.runs == 1
    forward_only = sum(g.timing.compiled_ms * g.runs for g in rep.graphs if g.timing is not None)
    assert m.in_graphs_ms > forward_only
    assert m.in_graphs_ms == pytest.approx(forward_only + graph.timing.backward_share("compiled"))


@pytest.mark.slow
def test_training_graph_times_forward_and_backward_with_gradients_checked() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    x = torch.randn(16, 8)
    rep = dynscope.report(lambda t: model(t).square().mean(), x, timing=True, timing_options=FAST)
    (g,) = rep.graphs
    t = g.timing
    assert t is not None and not t.failed and not t.train_error, (t.error, t.train_error) if t else None
    assert (g.runs, g.backward_runs) == (1, 0), "forward with gradients on, but no backward ran"
    assert t.grads_checked and t.max_grad_err < 1e-4 and t.numerics_ok
    assert t.train_eager_ms > 0 and t.train_compiled_ms > 0
    assert all(p.grad is None for p in model.parameters()), "timing leaves .grad alone"

    with torch.no_grad():
        rep = dynscope.report(model, x, timing=True, timing_options=FAST)
    t = rep.graphs[0].timing
    assert t is not None and not t.grads_checked and t.train_eager_ms == 0.0, "inference graphs: forward only"
