"""Blame the right party: when a call raises under report(), the calls are rerun on copies,
eagerly and under a plain torch.compile, to say whether the model, PyTorch's compiler or
dynscope failed; the user's frame is named, never Dynamo's resume function.

Before: every failure read "the model raised ... in torch_dynamo_resume_in_forward_at_25", and
a compile that raised was listed under "frames that fell back to eager".
"""

from __future__ import annotations

import pytest
import torch

import dynscope
from dynscope._capture.raised import raised_at

pytestmark = pytest.mark.filterwarnings("ignore")


class RaisesAfterBreak(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        print("halfway")  # a break: the rest runs in Dynamo's resume function
        if bool(y.sum() > -1e9):
            raise ValueError("the model's own error")
        return y


def test_the_models_own_error_is_the_models_at_its_own_line() -> None:
    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(RaisesAfterBreak(), torch.randn(3))
    err = info.value
    assert err.party == "model"
    assert "the model raised during call 0 of 1 (eagerly too, without torch.compile)" in str(err)
    assert isinstance(err.__cause__, ValueError)
    where = raised_at(err.__cause__)
    assert " in forward :: raise ValueError" in where and "resume" not in where
    assert "resume" not in str(err)


def _broken_backend(gm: torch.fx.GraphModule, example_inputs: list) -> None:
    raise RuntimeError("lowering exploded")


class Plain(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * 2).sin()


def test_a_compiler_failure_is_the_compilers_with_the_workaround() -> None:
    model = Plain()
    x = torch.randn(3)
    expected = model(x)
    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(model, x, inner=_broken_backend)
    err = info.value
    assert err.party == "compiler"
    text = str(err)
    assert text.startswith("torch.compile failed during call 0 of 1 (compiling Plain.forward at ")
    assert "lowering exploded" in text and "torch.compiler.disable" in text and "suppress_errors" in text
    # Its frame raised into the program: a crash, not a fallback.
    statuses = [f.status for f in err.report.frames]
    assert statuses == ["crashed"]
    summary = err.report.summary()
    assert "The compile that raised into your program" in summary
    assert "Frames that fell back to eager" not in summary
    assert "raised into your program" in err.report.to_html()
    # The reruns were on copies: the user's model is untouched and still runs.
    torch.testing.assert_close(model(x), expected)


class ShyOfProfilers(torch.nn.Module):
    """A program that refuses to run under a profiler (dynscope's coverage runs one)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.autograd.profiler._is_profiler_enabled:
            raise RuntimeError("no profiling in production")
        return x + 1


def test_a_failure_only_under_dynscope_is_dynscopes() -> None:
    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(ShyOfProfilers(), torch.randn(3))
    assert info.value.party == "dynscope"
    assert "this is a dynscope bug" in str(info.value)
    # Without dynscope's profiler the same program reports.
    rep = dynscope.report(ShyOfProfilers(), torch.randn(3), coverage=False)
    assert rep.graph_count == 1


def test_the_cli_names_the_party(tmp_path, capsys) -> None:
    from dynscope._cli import main

    prog = tmp_path / "prog_blame.py"
    prog.write_text(
        "import torch\n"
        "from torch._dynamo import register_backend\n"
        "@register_backend(name='dynscope_test_broken')\n"
        "def broken(gm, inputs):\n"
        "    raise RuntimeError('lowering exploded')\n"
        "class Plain(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x.sin()\n"
        "def build():\n"
        "    return Plain(), torch.randn(3)\n"
    )
    assert main(["report", f"{prog}:build", "--inner", "dynscope_test_broken"]) == 2
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("dynscope: error: report: torch.compile failed with BackendCompilerFailed during call 0")
