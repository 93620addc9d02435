"""What PyTorch says, understood: recompile reasons through **kwargs, break categories
and their advice measured on live runs, and a quiet pytest failure (issue 8)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch._dynamo.repro.after_dynamo
from torch import nn

import dynscope
from dynscope._lexicon.break_categories import fix_for
from dynscope._read.break_sites import category_of
from dynscope._render.causes import explained
from dynscope._torch.guard_text import reason_cause
from tests.corpus.programs import PROGRAMS, _x

if TYPE_CHECKING:
    from collections.abc import Callable

BY_NAME = {p.name: p for p in PROGRAMS}

# -- recompile reasons for inputs reached through **kwargs ------------------------------


def kw_tensor(**kwargs: Any) -> torch.Tensor:
    return kwargs["x"] * 2


def kw_scalar(**kwargs: Any) -> torch.Tensor:
    return kwargs["x"] * kwargs["n"]


class HFStyle(nn.Module):
    """Named inputs plus **kwargs, the signature of Hugging Face models."""

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return input_ids * 2 + kwargs["attention_mask"].sum()


KWARG_CASES: list[tuple[str, Callable[..., Any], list[dict[str, Any]], str]] = [
    ("size", kw_tensor, [{"x": _x(2, 4)}, {"x": _x(2, 6)}],
     "input x changed size in dim 1: compiled for 4, called with 6"),
    ("dtype", kw_tensor, [{"x": _x(2, 4)}, {"x": _x(2, 4).double()}],
     "input x changed dtype: compiled for Float, called with Double"),
    ("requires_grad", kw_tensor, [{"x": _x(2, 4)}, {"x": _x(2, 4).requires_grad_()}],
     "input x changed requires_grad (compiled for requires_grad=0)"),
    ("rank", kw_tensor, [{"x": _x(2, 4)}, {"x": _x(2, 4, 1)}],
     "input x changed number of dims: compiled for 2, called with 3"),
    ("python int", kw_scalar, [{"x": _x(3), "n": 2}, {"x": _x(3), "n": 3}],
     "Python value n changed: the graph was specialised to n == 2"),
    ("hf module", HFStyle(),
     [{"input_ids": _x(3), "attention_mask": _x(3)}, {"input_ids": _x(3), "attention_mask": _x(3).double()}],
     "input attention_mask changed dtype: compiled for Float, called with Double"),
]


@pytest.mark.parametrize(
    "model, calls, said", [c[1:] for c in KWARG_CASES], ids=[c[0] for c in KWARG_CASES]
)
def test_kwargs_recompile_reason_in_words(model: Callable[..., Any], calls: list[dict[str, Any]], said: str) -> None:
    rep = dynscope.report(model, calls=calls)
    assert rep.recompile_count == 1
    (recompile,) = rep.recompiles
    assert any("kwargs['" in r for r in recompile.raw_reasons), "PyTorch names the input kwargs['...']"
    (explained,) = recompile.explained
    assert explained.startswith(said)
    assert "kwargs[" not in explained.split(" (from ")[0]


def test_positional_dict_keeps_its_path() -> None:
    """A dict passed positionally is not **kwargs: its name stays (live wording, 2.13)."""
    assert explained(reason_cause("tensor 'd['x']' size mismatch at index 1. expected 4, actual 6")) == (
        "input d['x'] changed size in dim 1: compiled for 4, called with 6")
    assert explained(reason_cause("len(kwargs['xs']) == 2")) == "length of xs changed: compiled for 2 items"


# -- tensor -> Python scalar: category, advice, and what capture_scalar_outputs does ------


def item_fn(x: torch.Tensor) -> torch.Tensor:
    return x * x.sum().item()


def int_tolist_fn(x: torch.Tensor) -> torch.Tensor:
    return x * max((x > 0).long().sum(-1).tolist())


def numpy_fn(x: torch.Tensor) -> torch.Tensor:
    return x * float(x.numpy().sum())


def float_tolist_fn(x: torch.Tensor) -> torch.Tensor:
    return x * x.sum(-1).tolist()[0]


# (program, whether capture_scalar_outputs=True removes the break): measured on torch 2.13.
SCALAR_CASES: list[tuple[Callable[..., Any], bool]] = [
    (item_fn, True),
    (int_tolist_fn, True),  # "Data dependent operator aten._local_scalar_dense"
    (numpy_fn, True),  # "Data dependent operator aten._local_scalar_dense"
    (float_tolist_fn, False),  # "Tensor.tolist() with non-integer tensor"
]


@pytest.mark.parametrize("fn, removed", SCALAR_CASES, ids=[c[0].__name__ for c in SCALAR_CASES])
def test_scalar_output_category_and_honest_advice(fn: Callable[..., Any], removed: bool) -> None:
    x = _x(4, 8)
    rep = dynscope.report(fn, x)
    (site,) = rep.breaks
    assert site.category == ".item()/scalar output", site.reason
    assert "capture_scalar_outputs = True" in site.fix
    assert "capture_dynamic_output_shape_ops" not in site.fix
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        fixed = dynscope.report(fn, x)
    assert fixed.break_count == (0 if removed else 1)
    if not removed:
        assert "not for .tolist() of a float tensor" in site.fix


def test_data_dependent_operator_local_scalar_dense_is_a_scalar_output() -> None:
    explanation = (
        "Operator `aten._local_scalar_dense.default` has a non-Tensor output whose value is "
        "dependent on the data of Tensor inputs."
    )
    assert category_of("Data dependent operator", explanation) == ".item()/scalar output"
    nonzero = "Operator `aten.nonzero.default`'s output shape depends on input Tensor data."
    assert category_of("Dynamic shape operator", nonzero) == "data-dependent guard/shape"


# -- backward() in compiled code, generators and iterators --------------------------------


def test_backward_in_compiled_code() -> None:
    lin = nn.Linear(4, 4)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = lin(x).sum()
        loss.backward()
        return loss.detach()

    rep = dynscope.report(step, _x(2, 4))
    (site,) = rep.breaks
    assert site.source == "loss.backward()"
    assert site.category == "backward() in compiled code"
    assert "call backward() outside" in site.fix
    if hasattr(torch._dynamo.config, "trace_autograd_ops"):
        # The fix text says trace_autograd_ops removes the break where torch has it.
        with torch._dynamo.config.patch(trace_autograd_ops=True):
            assert dynscope.report(step, _x(2, 4)).break_count == 0
    # The corpus training step says so too.
    prog = BY_NAME["train_step"]
    model, calls = prog.make()
    cats = {b.source: b.category for b in dynscope.report(model, calls=calls).breaks}
    assert cats["loss.backward()  # BREAK: backward() in compiled code"] == "backward() in compiled code"


def _gen_for(x: torch.Tensor, gen: Any) -> torch.Tensor:
    for t in gen:
        x = x + t
    return x


@pytest.mark.parametrize("name", ["next", "for"])
def test_generator_passed_in_is_a_generator_break(name: str) -> None:
    if name == "next":
        model, calls = BY_NAME["generator_break"].make()
    else:
        model, calls = _gen_for, [(_x(4), (torch.ones(1) for _ in range(2)))]
    rep = dynscope.report(model, calls=calls)
    (site,) = rep.breaks
    assert site.category == "generator/iterator", site.reason
    assert "list(gen)" in site.fix


def test_generator_wordings_of_other_torch_versions() -> None:
    # torch 2.11 (enable_faithful_generator_behavior)
    assert category_of(
        "call_method on generator",
        "Detected a method call to a user-defined generator object. This is not fully supported.",
    ) == "generator/iterator"
    # torch 2.13
    assert category_of(
        "Missing tp_iternext",
        "Dynamo does not support next() on generator. Add tp_iternext_impl to this "
        "VariableTracker subclass.",
    ) == "generator/iterator"
    # torch 2.14: the type alone is about any C slot; the user's line says it is iteration.
    c_slot = "C-implemented special method without VariableTracker model"
    assert category_of(c_slot, "", "return x * next(scales)") == "generator/iterator"
    assert category_of(c_slot, "", "for t in gen:") == "generator/iterator"
    assert category_of(c_slot, "", "h = hash(key)") == "unsupported builtin or C/numpy call"
    # A random-number generator is not a Python generator.
    assert category_of(
        "torch.Generator method",
        "torch.Generator.manual_seed() is a stateful RNG operation that cannot be soundly "
        "traced in the FX graph.",
    ) != "generator/iterator"
    # torch 2.11 words the backward break without trace_autograd_ops.
    assert category_of(
        "Unsupported Tensor.backward() call",
        "Dynamo currently does not support tracing `Tensor.backward()`.",
    ) == "backward() in compiled code"
    assert fix_for("generator/iterator") != fix_for("other")


# -- the pytest plugin's failure output ------------------------------------------------

NOISY = """
import pytest, torch

def g(x):
    y = x.cos()
    print("side effect")
    return y * 2

@pytest.mark.compile_budget(graph_breaks=0)
def test_marker():
    x = torch.ones(3)
    torch.compile(g, backend="eager")(x)

def test_fixture(dynscope):
    x = torch.ones(3)
    dynscope.assert_compiles(g, x)
"""


def test_plugin_failure_is_quiet(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_noisy=NOISY)
    result = pytester.runpytest("-p", "no:cacheprovider", "--tb=long")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "torch.__trace" not in out, "trace events are not log messages"
    assert "tensor(" not in out, "no tensors dumped from the plugin's frames"
    assert "pytest_plugin.py" not in out and "DynscopeFixture" not in out
    result.stdout.fnmatch_lines([
        "*CompileBudgetError: compile budget exceeded for test_noisy.py::test_marker*",
        "*test_noisy.py:5 [[]logging/print side effect[]] x1*",
        "*CompileBudgetError: compile budget exceeded for g*",
        "*test_noisy.py:5 [[]logging/print side effect[]] x1*",
    ])
