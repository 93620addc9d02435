"""Graph.to_script and `dynscope script`: standalone scripts that rebuild a graph and time it again.

Each script is run in a clean folder by a Python that cannot import dynscope (``-I``, and
``sys.modules["dynscope"] = None``: the venv's editable install would otherwise be found),
and its figures are compared with the report's.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.checkpoint

import dynscope
from dynscope._capture import sampling
from dynscope._cli import main as cli
from dynscope._format import ms
from dynscope._render.script import SCRIPT_MODES
from dynscope._torch import runtime

# No whole-program timing. Samples as by default (about 20 a side of >= 10 ms each: half a
# second a graph; the compiles cost far more): with 10, medians of the same graph moved by 3x
# between runs on a loaded 2-core machine; with 20 the speedups agreed within 10%.
OPTS = dynscope.TimingOptions(end_to_end=False, progress=False)

# Runs script.py (in the cwd) under -I with dynscope made unimportable, passing the arguments on.
BLOCKED = (
    "import runpy, sys; sys.modules['dynscope'] = None; sys.argv = ['script.py', *sys.argv[1:]]; "
    "runpy.run_path('script.py', run_name='__main__')"
)


class MLP(torch.nn.Module):
    """Big enough that a run is a few hundred microseconds of matmul, not Python overhead."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(256, 512)
        self.l2 = torch.nn.Linear(512, 256)

    def forward(self, x: torch.Tensor, scale: int) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x))) * scale


def _x(rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, 256, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def one_thread() -> Any:
    # One torch thread, in the reports and (through Timing.threads) the scripts: on a shared
    # 2-core machine two OpenMP threads fight each other and the other jobs, and a graph can
    # then time many times slower in one process than in the next (docs/timing.md).
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def inference(one_thread: Any) -> dynscope.Report:
    """Two calls under no_grad: graph 0 static, graph 1 dynamic (batch size and ``scale`` symbolic)."""
    model = MLP()
    with torch.no_grad():
        return dynscope.report(model, calls=[(_x(64), 2), (_x(96, 1), 3)], timing=True, timing_options=OPTS)


def _step(net: MLP, x: torch.Tensor) -> torch.Tensor:
    h = net.l1(x).relu()
    torch._dynamo.graph_break()
    return net.l2(torch.nn.functional.dropout(h, 0.1, training=True)).square().mean()


@pytest.fixture(scope="module")
def training(one_thread: Any) -> dynscope.Report:
    """A training step broken in two: graph 1 is the resume graph, its input the first graph's
    output; its dropout draws random numbers."""
    net = MLP()
    return dynscope.report(lambda x: _step(net, x), _x(64), timing=True, timing_options=OPTS)


def _run(text: str, folder: Path, *, as_json: bool = True) -> tuple[int, dict[str, Any], str]:
    """Write the script to an empty folder and run it there without dynscope: (exit status,
    its figures, stderr). The figures come from its JSON line, or (``as_json=False``) from
    its ``key=value`` lines, numbers as floats."""
    folder.mkdir()
    (folder / "script.py").write_text(text, encoding="utf-8")
    res = subprocess.run(
        [sys.executable, "-I", "-c", BLOCKED, *(["--json"] if as_json else [])],
        cwd=folder, capture_output=True, text=True, timeout=600,
    )
    lines = res.stdout.strip().splitlines()
    if as_json:
        return res.returncode, json.loads(lines[-1]) if lines else {}, res.stderr
    out: dict[str, Any] = {}
    for line in lines:
        pairs = [w.split("=", 1) for w in line.split() if "=" in w]
        if pairs and len(pairs) == len(line.split()):  # a figures line: nothing but key=value
            out.update((k, v == "True" if v in ("True", "False") else _number(v)) for k, v in pairs)
    out["text"] = res.stdout
    return res.returncode, out, res.stderr


def _number(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def _imports_no_dynscope(text: str) -> None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            assert all(not a.name.startswith("dynscope") for a in node.names)
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("dynscope")
    assert "import dynscope" not in text and "from dynscope" not in text


def _check_figures(out: dict[str, Any], t: dynscope.Timing) -> None:
    # The script times what it rebuilt and carries the report's own figures beside them. How
    # close a rerun's medians come to the report's is a matter of the machine's load, measured
    # side by side in benchmarks/timing_accuracy.py, not asserted here: a loaded 2-core CI
    # machine moved a median 3x. Here: figures were made, and the report's are carried exactly.
    assert out["threads"] == t.threads == 1
    assert out["eager_ms"] > 0 and out["compiled_ms"] > 0 and out["speedup"] > 0, out
    if "report" in out:  # the JSON line carries the report's figures
        assert out["report"]["speedup"] == pytest.approx(t.speedup, rel=1e-5)
        assert out["report"]["eager_ms"] == t.eager_ms


@pytest.mark.slow
def test_inference_graph_script_runs_alone_and_agrees(inference: dynscope.Report, tmp_path: Path) -> None:
    g = inference.graph(0)
    t = g.timing
    assert t is not None and not t.failed and not g.grad_enabled
    text = g.to_script(tmp_path / "graph_0.py", report=inference)
    assert (tmp_path / "graph_0.py").read_text(encoding="utf-8") == text
    _imports_no_dynscope(text)
    rc, out, err = _run(text, tmp_path / "clean", as_json=False)
    assert rc == 0, err
    assert out["numerics_ok"] is True and out["max_abs_err"] < 1e-3
    assert "train_eager_ms" not in out, "an inference graph has no backward to time"
    assert f"graph 0 ({g.frame}), mode default on cpu" in out["text"] and "numerics match" in out["text"]
    assert f"the report (torch {inference.torch_version}, 1 thread(s)) had {t.speedup:.2f}x" in out["text"]
    _check_figures(out, t)


@pytest.mark.slow
def test_dynamic_graph_script_from_a_loaded_report(inference: dynscope.Report, tmp_path: Path) -> None:
    loaded = dynscope.load(inference.save(tmp_path / "report.json"))
    g = loaded.graph(1)
    assert g.module is None, "a loaded report keeps no live module"
    symbolic = [m for m in g.inputs if m.kind == "symint"]
    assert len(symbolic) == 2 and any(isinstance(d, str) for m in g.inputs for d in m.shape)
    text = g.to_script(None, report=loaded)
    assert text == inference.graph(1).to_script(None, report=inference), "live and loaded give one script"
    assert "SIZES = {" in text and "'s" in text.split("SIZES = ", 1)[1].split("\n", 1)[0]
    rc, out, err = _run(text, tmp_path / "clean")
    assert rc == 0, err
    assert "compiled static" not in err, "the graph is compiled dynamic, as Dynamo did"
    assert out["numerics_ok"]
    t = g.timing
    assert t is not None
    _check_figures(out, t)


@pytest.mark.slow
def test_training_graph_after_a_break(training: dynscope.Report, tmp_path: Path) -> None:
    assert training.graph_count == 2
    g = training.graph(1)
    assert g.is_resume and g.grad_enabled
    user, params = g.user_inputs()
    assert params == 2 and any(m.requires_grad for m in user), "the resume graph's input is the first graph's output"
    t = g.timing
    assert t is not None and t.train_compiled_ms > 0, t
    rc, out, err = _run(g.to_script(None, report=training), tmp_path / "clean")
    assert rc == 0, err
    assert out["numerics_ok"] and out["grads_ok"] and out["max_grad_err"] < 1e-3
    # Judged on a build whose random ops call eager's kernels: one seed, one dropout mask.
    assert out["numerics_mode"] == "fallback_random"
    _check_figures(out, t)
    assert out["train_eager_ms"] > 0 and out["train_compiled_ms"] > 0 and out["train_speedup"] > 0, out


# -- rebuilding: the script's graph is the captured one (no Inductor) ------------------------------


def _inplace(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = y.clone()
    y[0] = 3.0
    y += x
    with torch.no_grad():
        z = x * 2
    a = torch.ops.aten.add.Tensor(x, z)
    return a.view(x.shape[0], -1) + y, x.new_zeros(3, dtype=torch.float16), torch.full((2,), float("inf"))


def _cond(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))


_LIN = torch.nn.Linear(4, 4)


def _checkpointed(x: torch.Tensor) -> torch.Tensor:
    return torch.utils.checkpoint.checkpoint(lambda t: _LIN(t).relu(), x, use_reentrant=False).sum()


def _sizes(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
    n = x.shape[0]
    return x.reshape(n // 2, -1).amax(dim=1, keepdim=True)[idx], torch.arange(n), x.t()[:, 1:]


def _shadowing(x: torch.Tensor) -> torch.Tensor:
    graph = x.sin()  # nodes named after the script's own names
    root = graph * 2
    operator = root + 1
    return operator - graph


REBUILT = {
    "nodes named graph, root and operator": (_shadowing, (torch.randn(3),), {}),
    "in-place ops, setitem, a no_grad block, an ATen op": (_inplace, (torch.randn(2, 3), torch.randn(2, 3)), {}),
    "torch.cond: nested graph bodies": (_cond, (torch.randn(3),), {}),
    "activation checkpointing": (_checkpointed, (torch.randn(2, 4),), {}),
    "dynamic sizes, an index tensor, a strided input": (_sizes, (torch.randn(3, 6).t(), torch.tensor([0, 2])), {"dynamic": True}),
}


@pytest.mark.parametrize("case", list(REBUILT))
def test_the_script_rebuilds_the_captured_graph(case: str, tmp_path: Path) -> None:
    fn, args, kwargs = REBUILT[case]
    rep = dynscope.report(fn, args, coverage=False, **kwargs)
    assert rep.graph_count == 1
    g = rep.graphs[0]
    path = tmp_path / "script.py"
    g.to_script(path, report=rep)
    ns = runpy.run_path(str(path), run_name="dynscope_test_script")  # defines, does not run
    rebuilt = ns["build_graph"]()
    live = g.module

    def shape(gm: torch.fx.GraphModule) -> list[tuple[str, str, object]]:
        return [(n.op, n.name, n.target) for n in gm.graph.nodes]

    assert shape(rebuilt) == shape(live)
    for name, sub in live.named_children():  # higher-order ops' bodies, node for node
        assert shape(getattr(rebuilt, name)) == shape(sub)
    inputs = ns["make_inputs"](ns["RECORDED"], "cpu")
    for spec, value, meta in zip(ns["INPUTS"], inputs, g.inputs, strict=True):
        if spec["kind"] == "tensor":
            assert list(value.shape) == [ns["size"](d, ns["SIZES"]) for d in meta.shape]
            assert value.stride() == tuple(ns["size"](s, ns["SIZES"]) for s in meta.stride)
            assert str(value.dtype) == f"torch.{meta.dtype}" and value.requires_grad == meta.requires_grad
    torch.manual_seed(0)
    want = live(*inputs)
    torch.manual_seed(0)
    got = rebuilt(*inputs)
    assert ns["compare_outputs"](want, got)[2], "the rebuilt graph computes what the captured one does"


def test_a_python_int_the_graph_takes_is_rebuilt_from_its_value(tmp_path: Path) -> None:
    rep = dynscope.report(lambda x, n: x * n + n, calls=[(torch.randn(3), 2), (torch.randn(3), 5)], coverage=False)
    g = rep.graphs[-1]  # the recompile: n became an input
    assert any(m.kind == "symint" for m in g.inputs)
    g.to_script(tmp_path / "s.py")
    ns = runpy.run_path(str(tmp_path / "s.py"), run_name="dynscope_test_script")
    inputs = ns["make_inputs"](ns["RECORDED"], "cpu")
    assert [v for v in inputs if type(v) is int] == [5], "a symbolic int runs at the value it ran at"
    assert ns["compare_outputs"](g.module(*inputs), ns["build_graph"]()(*inputs))[2]


# -- the runtime: the script carries dynscope's own timing code -----------------------------------


def test_the_script_carries_the_runtime_verbatim(tmp_path: Path) -> None:
    rep = dynscope.report(lambda x: x.sin() * 2, torch.randn(3), coverage=False)
    text = rep.graphs[0].to_script(None, report=rep)
    source = Path(runtime.__file__).read_text(encoding="utf-8")
    assert text.count(source) == 1, "the runtime module's source, exactly, once"
    # ... and nothing else of it: the script defines no timing code of its own.
    durations = inspect.getsource(ms)
    assert text.count(durations) == 1, "dynscope's rule for a duration, exactly, once"
    head, tail = text.replace(durations, "").split(source)
    own = {n.name for n in ast.parse(head + tail).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    assert own == {"build_graph"}, own
    _imports_no_dynscope(text)


def _call_order(interleaved: Any, clock: Any, opts: Any) -> tuple[str, Any, Any]:
    """The order in which ``interleaved`` runs the two sides ("e"/"c" per call), and its samples."""
    calls: list[str] = []
    fn = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def eager() -> Any:
        calls.append("e")
        return fn(x)

    def compiled() -> Any:
        calls.append("c")
        return fn(x)

    a, b = interleaved(eager, compiled, clock, opts)
    return "".join(calls), a, b


@pytest.mark.parametrize("interleave", [True, False])
def test_the_script_interleaves_as_dynscope_does(interleave: bool, tmp_path: Path) -> None:
    rep = dynscope.report(lambda x: x.cos() + 1, torch.randn(3), coverage=False)
    rep.graphs[0].to_script(tmp_path / "s.py", report=rep)
    ns = runpy.run_path(str(tmp_path / "s.py"), run_name="dynscope_test_script")
    argv = ["--warmup", "2", "--repeats", "6", "--min-time-s", "0", "--min-sample-ms", "0"]
    args = ns["parse_args"](ns["RECORDED"], [*argv, "--interleave" if interleave else "--no-interleave"])
    opts = dynscope.TimingOptions(warmup=2, repeats=6, min_time_s=0.0, min_sample_ms=0.0, interleave=interleave)
    order, eager, comp = _call_order(ns["interleaved"], ns["Clock"]("cpu"), args)
    mine, mine_eager, mine_comp = _call_order(sampling.interleaved, sampling.Clock("cpu"), opts)
    assert order == mine, "the script samples in dynscope's order"
    assert len(eager) == len(comp) == len(mine_eager.ms) == len(mine_comp.ms) == 5
    assert all(v > 0 for v in [*eager, *comp, *mine_eager.ms, *mine_comp.ms])
    # A warm-up of both, one run a side to set the loop count, then the samples: alternating,
    # or each side's own warm-up and samples back to back.
    samples = "ec" * 5 if interleave else "ee" + "e" * 5 + "cc" + "c" * 5
    assert order == "ecec" + "ec" + samples


# -- what cannot be rebuilt: a clear error, no script --------------------------------------------


def _helper(x: torch.Tensor) -> torch.Tensor:
    return x * 2


torch._dynamo.allow_in_graph(_helper)


@torch.library.custom_op("dynscope_script_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@_twice.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@pytest.mark.parametrize(
    ("fn", "said"),
    [
        (lambda x: _helper(x) + 1, "_helper, a name of the program"),
        (lambda x: _twice(x) + 1, "torch.ops.dynscope_script_test"),
    ],
    ids=["a function of the program", "a custom operator"],
)
def test_a_graph_that_cannot_stand_alone_says_why(fn: Any, said: str, tmp_path: Path) -> None:
    rep = dynscope.report(fn, torch.randn(3), coverage=False)
    with pytest.raises(dynscope.InputError, match="cannot rebuild") as err:
        rep.graphs[0].to_script(tmp_path / "s.py")
    assert said in str(err.value) and f"graph {rep.graphs[0].id}" in str(err.value)
    assert not (tmp_path / "s.py").exists(), "no broken script is written"


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("torch.os.system('true')", "reads .system"),
        ("exec('import os')", "calls or reads exec"),
        ("torch.relu(l_x_.__class__)", "reads .__class__"),
        ("__import__('os').getcwd()", "calls or reads __import__"),
    ],
)
def test_a_hostile_report_makes_no_script(line: str, said: str, saved: Path) -> None:
    # The script runs the report's code: a report that would reach past torch is refused.
    rep = dynscope.load(saved)
    g = rep.graph(0)
    assert "l_x_.cos()" in g.code
    hostile = dataclasses.replace(g, code=g.code.replace("l_x_.cos()", line))
    with pytest.raises(dynscope.InputError, match=re.escape(said)):
        hostile.to_script(None)


def test_modes(tmp_path: Path) -> None:
    from dynscope._capture.timing_options import MODES

    assert SCRIPT_MODES == MODES
    g = dynscope.report(lambda x: x.sin(), torch.randn(3), coverage=False).graphs[0]
    assert "MODE = 'max-autotune'" in g.to_script(None, mode="max-autotune")
    assert "MODE = 'default'" in g.to_script(None), "untimed: the default mode"
    with pytest.raises(dynscope.InputError, match="unknown mode 'fast'"):
        g.to_script(None, mode="fast")
    with pytest.raises(dynscope.InputError, match="needs CUDA"):
        g.to_script(None, mode="reduce-overhead")


# -- the command line ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.cos() * 2
        torch._dynamo.graph_break()
        return y.relu()

    return dynscope.report(f, torch.randn(4), coverage=False).save(tmp_path_factory.mktemp("cli") / "run.json")


def test_cli_writes_what_to_script_writes(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rep = dynscope.load(saved)
    assert cli(["script", str(saved), "1", "-o", str(tmp_path / "g1.py")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (tmp_path / "g1.py").read_text(encoding="utf-8") == rep.graph(1).to_script(None, report=rep)
    assert cli(["script", str(saved), "0", "-o", str(tmp_path / "g0.py"), "--no-timing", "--mode", "max-autotune"]) == 0
    text = (tmp_path / "g0.py").read_text(encoding="utf-8")
    assert text == rep.graph(0).to_script(None, timing=False, mode="max-autotune", report=rep)
    assert "TIMING = False" in text and "MODE = 'max-autotune'" in text


@pytest.mark.parametrize("graph", ["7", "first"])
def test_cli_bad_graph_id(graph: str, saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["script", str(saved), graph, "-o", str(tmp_path / "g.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dynscope: error: script: ")
    assert f"no graph {graph!r}" in err and "its graph ids are 0, 1" in err
    assert not (tmp_path / "g.py").exists()


def test_cli_mode_error_is_one_line(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["script", str(saved), "0", "-o", str(tmp_path / "g.py"), "--mode", "reduce-overhead"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs CUDA" in err


def test_cli_needs_no_torch_and_shows_an_example(saved: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["script", "--help"]) == 0
    assert "example: dynscope script run.json 0 -o graph_0.py" in capsys.readouterr().out
    # A saved report to a script without torch: the codec and the renderer never import it.
    code = (
        "import sys; sys.modules['torch'] = None; from dynscope._cli import main; "
        f"sys.exit(main(['script', {str(saved)!r}, '0', '-o', {str(tmp_path / 'g.py')!r}]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "g.py").read_text(encoding="utf-8") == dynscope.load(saved).graph(0).to_script(
        None, report=dynscope.load(saved)
    )
