"""timing=True attacked like a user with real code would (issue 20): live runs, tiny models.

Each test runs ``dynscope.report(..., timing=True)`` on a real program compiled by
torch.compile with Inductor, and asserts on structure, counts, errors and the state left
behind, never on speedups. What each pins:

- the user's own ``torch.compile`` of the same model keeps working, without a compile or a
  recompile caused by dynscope; dynscope's figures are of its own compile;
- each graph is timed on torch.compile's build made in the grad mode Dynamo captured it in
  (no_grad, inference_mode, grad on, a no_grad block inside forward, a helper called in both);
- graphs that write to their inputs (in-place on an input, a KV cache, BatchNorm in train
  mode) are judged on the same input values eager and compiled, and timing leaves those
  tensors, and the gradients a training step accumulates, as the capture left them;
- graphs returning non-tensors or views, a program with no compute, dynamic shapes over
  several calls, ``dynamic=False``/``True``, identical graphs matched to their own builds
  in compile order;
- a program that raises on its second call keeps its report; two modes; two threads; the
  process state (Dynamo and Inductor config, RNG, grad mode, threads) after timing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

import dynscope

FAST = dynscope.TimingOptions(warmup=1, repeats=5, min_time_s=0.02, min_sample_ms=0.2, progress=False)

pytestmark = pytest.mark.slow


def _counters() -> dict[str, dict[str, Any]]:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items()}


def _all_on_torch_compiles_builds(rep: dynscope.Report, modes: int = 1) -> None:
    """Every graph was timed, without failure, on torch.compile's own build of it."""
    assert rep.timing_cost is not None
    assert (rep.timing_cost.reused, rep.timing_cost.rebuilt) == (modes * rep.graph_count, 0), rep.notes
    for g in rep.graphs:
        assert len(g.timings) == modes
        for t in g.timings:
            assert not t.failed, t.error
            assert t.numerics_ok, (g.frame, t.max_abs_err)
    assert [m.error for m in rep.timing] == [""] * modes


# -- the user's own torch.compile ---------------------------------------------------------


def test_users_compiled_model_is_left_alone() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)
    users = torch.compile(model)  # Inductor, as a user compiles
    with torch.no_grad():
        before = users(x)
        seen = _counters()
        rep = dynscope.report(model, x, timing=True, timing_options=FAST)
        assert _counters() == seen, "dynscope's compiles leave torch's counters as they were"
        after = users(x)
    # The user's compiled model runs its own cache entry: no compile, no recompile.
    assert _counters() == seen
    assert torch.equal(before, after)
    # dynscope's figures are of its own compile of the program, not of the user's.
    _all_on_torch_compiles_builds(rep)
    assert rep.compile_time.measure_builds == 0 and rep.timing[0].first_call_s > 0
    # The compiled object itself: dynscope reports on the module it wraps, and leaves it be.
    with torch.no_grad():
        again = dynscope.report(users, x, timing=True, timing_options=FAST)
        assert torch.equal(users(x), before) and _counters() == seen
    assert any("already a torch.compile result" in n for n in again.notes)
    _all_on_torch_compiles_builds(again)


def test_a_compile_after_the_report_is_a_first_compile() -> None:
    from torch._dynamo.utils import guard_failures

    def program(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    x = torch.randn(4, 8)
    with torch.no_grad():
        dynscope.report(program, x, timing=True, timing_options=FAST)
        seen = _counters()
        torch.compile(program)(x)
    # dynscope's cache entries are gone: the user's compile is a first one, not a recompile.
    frames = _counters()["frames"]
    assert frames["total"] - seen.get("frames", {}).get("total", 0) == 1
    assert program.__code__ not in guard_failures


# -- grad mode ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "grad"), [("no_grad", False), ("inference_mode", False), ("enable_grad", True)]
)
def test_each_graph_is_timed_on_the_build_of_its_grad_mode(mode: str, grad: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with getattr(torch, mode)():
        rep = dynscope.report(model, torch.randn(4, 8), timing=True, timing_options=FAST)
        assert torch.is_grad_enabled() is grad, "report() leaves the caller's grad mode"
    (g,) = rep.graphs
    assert g.grad_enabled is grad
    _all_on_torch_compiles_builds(rep)
    assert g.timing is not None and g.timing.trains is grad
    # With grad on the program never ran backward: dynscope's first step compiled it (one extra build).
    assert rep.compile_time.measure_builds == (1 if grad else 0)


def test_a_no_grad_block_inside_forward() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 8)

    def forward(x: torch.Tensor) -> torch.Tensor:
        h = lin(x)
        with torch.no_grad():
            scale = h.abs().amax() + 1
        return h / scale

    rep = dynscope.report(forward, torch.randn(4, 8), timing=True, timing_options=FAST)
    (g,) = rep.graphs
    assert g.grad_enabled and g.timing is not None and g.timing.trains and g.timing.grads_checked
    _all_on_torch_compiles_builds(rep)


def _helper(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


def test_a_helper_that_breaks_called_with_grad_on_and_off() -> None:
    def program(x: torch.Tensor) -> torch.Tensor:
        a = _helper(x)
        with torch.no_grad():
            b = _helper(x)
        return a + b

    rep = dynscope.report(program, torch.randn(4, 8, requires_grad=True), timing=True, timing_options=FAST)
    # The helper's two graphs twice (one build per grad mode), and the program's last graph.
    assert [g.grad_enabled for g in rep.graphs] == [True, True, False, False, True]
    assert [g.frame for g in rep.graphs][:4] == ["_helper", rep.graphs[1].frame] * 2
    _all_on_torch_compiles_builds(rep)


# -- graphs that write to their inputs ------------------------------------------------------


def _adds_one(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * 2


def _timed_one_graph(fn: Any, x: torch.Tensor) -> tuple[dynscope.Report, Any]:
    """report(timing=True) of a one-graph program under no_grad: the report and its graph's timing."""
    with torch.no_grad():
        rep = dynscope.report(fn, x, timing=True, timing_options=FAST)
    (g,) = rep.graphs
    assert g.timing is not None
    return rep, g.timing


def test_a_graph_writing_to_its_input_is_judged_on_the_same_values() -> None:
    x = torch.zeros(4, 8)
    rep, t = _timed_one_graph(_adds_one, x)
    # Eager ran on x, then compiled on x + 1: without putting x back between them the
    # outputs differ by 2 and two seeds "differ" (a random graph, a numerics build).
    assert t.numerics_ok and t.max_abs_err == 0.0
    assert t.numerics_mode == "default" and rep.compile_time.measure_builds == 0
    _all_on_torch_compiles_builds(rep)
    # report() ran the program once; timing's hundreds of runs leave x as that run left it.
    assert torch.equal(x, torch.ones(4, 8))


def _adds_noise(x: torch.Tensor) -> torch.Tensor:
    return x.add_(torch.rand_like(x))  # returns its input, written


def test_a_graph_returning_its_written_input_is_still_checked() -> None:
    x = torch.zeros(4, 8)
    rep, t = _timed_one_graph(_adds_noise, x)
    # Both seeds' outputs are x itself unless copied: the second run would overwrite the
    # first, the graph would look deterministic and be judged on Inductor's own RNG.
    assert t.numerics_mode == "fallback_random" and t.numerics_ok
    _all_on_torch_compiles_builds(rep)
    assert rep.compile_time.measure_builds == 1, "one numerics build"
    assert not torch.equal(x, torch.zeros(4, 8)) and bool((x < 1).all()), "x as the program's one call left it"


def test_a_training_graph_writing_to_its_input() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)

    def program(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return lin(x).tanh()

    x = torch.ones(4, 8)
    rep = dynscope.report(program, x, timing=True, timing_options=FAST)
    (g,) = rep.graphs
    assert g.timing is not None and g.timing.trains and g.timing.grads_checked
    _all_on_torch_compiles_builds(rep)
    assert torch.equal(x, torch.full((4, 8), 2.0))


def test_a_kv_cache_written_with_index_copy() -> None:
    torch.manual_seed(0)
    proj = torch.nn.Linear(8, 8).eval()

    def decode(x: torch.Tensor, cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(0, pos, proj(x))
        return torch.softmax(x @ cache.T, -1) @ cache

    cache = torch.zeros(8, 8)
    steps = [(torch.randn(2, 8), torch.tensor([0, 1])), (torch.randn(2, 8), torch.tensor([2, 3]))]
    expected = cache.clone()
    with torch.no_grad():
        for x, pos in steps:
            decode(x, expected, pos)
        rep = dynscope.report(decode, calls=[(x, cache, pos) for x, pos in steps], timing=True, timing_options=FAST)
    _all_on_torch_compiles_builds(rep)
    assert torch.equal(cache, expected), "the cache holds what the program's own calls wrote"


def test_batchnorm_in_train_mode() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)).train()
    stats = [b.clone() for b in model.buffers()]
    rep = dynscope.report(model, torch.randn(4, 8), timing=True, timing_options=FAST)
    (g,) = rep.graphs
    assert g.timing is not None and g.timing.trains and g.timing.grads_checked
    _all_on_torch_compiles_builds(rep)
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), stats, strict=True))


def test_a_training_step_leaves_gradients_as_one_step_does() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        return loss.detach()

    x = torch.randn(4, 8)
    step(x)
    one_step = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    rep = dynscope.report(step, x, timing=True, timing_options=FAST)
    _all_on_torch_compiles_builds(rep)
    # Each of timing's runs of the program called backward(): .grad would hold their sum.
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert all(torch.allclose(g, e) for g, e in zip(grads, one_step, strict=True))  # type: ignore[arg-type]


# -- what graphs return, and what they are --------------------------------------------------


def test_graphs_returning_non_tensors_views_or_nothing_computed() -> None:
    def mixed(x: torch.Tensor) -> tuple[Any, ...]:
        return x.sin(), x.shape[0] * 2, "label", x.view(-1)[:3]

    def views(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.t(), x[1:]

    def passthrough(x: torch.Tensor, n: int) -> torch.Tensor:
        return x

    with torch.no_grad():
        for fn in (mixed, views):
            rep = dynscope.report(fn, torch.randn(4, 8), timing=True, timing_options=FAST)
            assert rep.graph_count == 1
            _all_on_torch_compiles_builds(rep)
        empty = dynscope.report(passthrough, (torch.randn(4, 8), 3), timing=True, timing_options=FAST)
    # Nothing to compile: no graph, no graph timing, the program still timed end to end.
    assert empty.graph_count == 0
    assert empty.timing_cost is not None and (empty.timing_cost.reused, empty.timing_cost.rebuilt) == (0, 0)
    assert [m.error for m in empty.timing] == [""]


def _scaled(x: torch.Tensor) -> torch.Tensor:
    return (x.sin() * x.shape[0]).sum(0)


def test_automatic_dynamic_over_several_calls() -> None:
    calls = [torch.randn(4, 8), torch.randn(6, 8), torch.randn(9, 8)]
    with torch.no_grad():
        rep = dynscope.report(_scaled, calls=calls, timing=True, timing_options=FAST)
    # Static at the first size, then one dynamic graph for every later size.
    assert rep.graph_count == 2 and rep.recompile_count == 1
    assert [any(m.kind == "symint" for m in g.inputs) for g in rep.graphs] == [False, True]
    _all_on_torch_compiles_builds(rep)


@pytest.mark.parametrize(("dynamic", "graphs"), [(False, 2), (True, 1)])
def test_dynamic_is_compiled_as_the_user_asked(dynamic: bool, graphs: int) -> None:
    with torch.no_grad():
        rep = dynscope.report(
            _scaled, calls=[torch.randn(4, 8), torch.randn(6, 8)], dynamic=dynamic, timing=True, timing_options=FAST
        )
    # dynamic=False: the same code at two shapes, each matched to its own build; True: one
    # dynamic graph. torch.compile's run must compile as the capture did to build them.
    assert rep.graph_count == graphs
    _all_on_torch_compiles_builds(rep)


def _three_blocks(x: torch.Tensor) -> torch.Tensor:
    # Three frames (the function and two resume functions), one graph code.
    x = x.sin() + 1
    torch._dynamo.graph_break()
    x = x.sin() + 1
    torch._dynamo.graph_break()
    x = x.sin() + 1
    torch._dynamo.graph_break()
    return x


def test_identical_graphs_each_get_their_own_build_in_order() -> None:
    from dynscope import _torch
    from dynscope._capture.backend import RecordingBackend
    from dynscope._capture.builds import ProgramBuilds, graph_key

    with torch.no_grad():
        rep = dynscope.report(_three_blocks, torch.randn(4, 8), timing=True, timing_options=FAST)
        assert rep.graph_count == 3
        _all_on_torch_compiles_builds(rep)
        # The matching itself, on a live compile of each kind: three graphs of one key.
        recorder = RecordingBackend(keep_inputs=True)
        builds = ProgramBuilds("default")
        # In a sandbox, as report() compiles: these compiles leave no cache entry behind.
        with _torch.DynamoSandbox() as sandbox:
            for backend in (recorder, builds.backend()):
                compiled = torch.compile(_three_blocks, backend=backend, **_torch.compile_kwargs())
                sandbox.own(compiled, backend=backend)
                compiled(torch.randn(4, 8))
    assert len({graph_key(r.module) for r in recorder.graphs}) == 1 and len(builds.builds) == 3
    taken = [builds.take(r) for r in recorder.graphs]
    assert taken == builds.builds, "each graph its own build, in compile order"
    assert builds.take(recorder.graphs[0]) is None, "a build is used once"


# -- failures, modes, threads, process state ------------------------------------------------


def test_a_program_that_raises_on_its_second_call_keeps_its_report() -> None:
    def program(x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 6:
            raise ValueError("no batch of six")
        return x.sin().sum(0)

    seen = _counters()
    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(program, calls=[torch.randn(4, 8), torch.randn(6, 8)], timing=True, timing_options=FAST)
    err = info.value
    assert err.call_index == 1 and "no batch of six" in str(err)
    assert err.report.graph_count >= 1 and err.report.calls == 2
    # Timing never starts on a program that fails: no graph or program timing.
    assert all(g.timings == () for g in err.report.graphs) and err.report.timing == ()
    assert _counters() == seen


def test_a_program_that_fails_only_when_timing_runs_it_again() -> None:
    runs = {"n": 0}

    def program(x: torch.Tensor) -> torch.Tensor:
        runs["n"] += 1
        if runs["n"] > 1:
            raise RuntimeError("runs once")
        return x.sin() * 2

    with torch.no_grad():
        rep = dynscope.report(program, torch.randn(4, 8), timing=True, timing_options=FAST)
    # torch.compile's run failed: the graph was built apart and timed, the program was not.
    assert rep.timing_cost is not None and (rep.timing_cost.reused, rep.timing_cost.rebuilt) == (0, 1)
    assert any("torch.compile of the program with Inductor failed" in n and "runs once" in n for n in rep.notes)
    (g,) = rep.graphs
    assert g.timing is not None and not g.timing.failed and g.timing.numerics_ok
    assert [m.error for m in rep.timing] == ["RuntimeError: runs once"]


def test_two_modes() -> None:
    with torch.no_grad():
        rep = dynscope.report(
            lambda x: torch.nn.functional.gelu(x) * 2,
            torch.randn(8, 8),
            timing=True,
            timing_options=FAST,
            modes=["default", "max-autotune-no-cudagraphs"],
        )
    _all_on_torch_compiles_builds(rep, modes=2)
    assert [t.mode for t in rep.graphs[0].timings] == ["default", "max-autotune-no-cudagraphs"]
    assert [m.mode for m in rep.timing] == ["default", "max-autotune-no-cudagraphs"]


def test_two_threads_time_their_own_models() -> None:
    torch.manual_seed(0)
    models = {
        "wide": (torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval(), torch.randn(4, 8)),
        "narrow": (torch.nn.Sequential(torch.nn.Linear(6, 2), torch.nn.Tanh()).eval(), torch.randn(3, 6)),
    }
    got: dict[str, Any] = {}

    def run(name: str) -> None:
        model, x = models[name]
        try:
            with torch.no_grad():
                got[name] = dynscope.report(model, x, timing=True, timing_options=FAST)
        except BaseException as err:  # noqa: BLE001 - asserted below, in the test's thread
            got[name] = err

    threads = [threading.Thread(target=run, args=(name,)) for name in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads)
    for name, (model, x) in models.items():
        rep = got[name]
        assert isinstance(rep, dynscope.Report), rep
        _all_on_torch_compiles_builds(rep)
        # Each report holds its own model's graph: its weight, bias and input.
        shapes = sorted(m.shape for m in rep.graphs[0].inputs)
        assert shapes == sorted(tuple(t.shape) for t in (model[0].weight, model[0].bias, x))


def test_timing_leaves_the_process_as_it_found_it() -> None:
    import torch._inductor.config as inductor_config

    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.3))
    x = torch.randn(4, 8)

    def program(x: torch.Tensor) -> torch.Tensor:
        return model(x) + torch.rand(4, 8)

    def state() -> dict[str, Any]:
        return {
            "dynamo": torch._dynamo.config.get_config_copy(),
            "inductor": inductor_config.get_config_copy(),
            "grad": torch.is_grad_enabled(),
            "threads": torch.get_num_threads(),
            "dtype": torch.get_default_dtype(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "matmul": torch.get_float32_matmul_precision(),
        }

    before = state()
    torch.manual_seed(7)
    rng = torch.get_rng_state()
    dynscope.report(program, x, timing=True, timing_options=FAST)
    assert torch.equal(torch.get_rng_state(), rng), "restore_state puts the RNG back"
    assert state() == before
    # Without restore_state the program's own draws move the RNG, and timing's do not:
    # the state is the one report() leaves without timing.
    torch.manual_seed(7)
    dynscope.report(program, x, restore_state=False)
    untimed = torch.get_rng_state()
    torch.manual_seed(7)
    dynscope.report(program, x, timing=True, timing_options=FAST, restore_state=False)
    assert torch.equal(torch.get_rng_state(), untimed)
    assert state() == before
