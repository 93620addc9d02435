"""dynscope.advise: each remedy tried on real compiles of corpus programs, and measured."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch._dynamo
import torch._inductor.config

import dynscope
from dynscope._render.causes import target_words
from dynscope._render.words import trial_verdict
from tests.corpus.programs import PROGRAMS
from tests.corpus.pytorch_says import logger_methods_reorder

if TYPE_CHECKING:
    from pathlib import Path

_BY_NAME = {p.name: p for p in PROGRAMS}


def _corpus(name: str) -> tuple[Any, list[Any]]:
    return _BY_NAME[name].make()


def _trial(adv: dynscope.Advice, remedy: str, code: str = "") -> dynscope.Trial:
    found = [t for t in adv.trials if t.remedy == remedy and code in t.code]
    assert len(found) == 1, [(t.remedy, t.code) for t in adv.trials]
    return found[0]


def float_tolist_fn(x: torch.Tensor) -> torch.Tensor:
    vals = x.sum(-1).tolist()  # .tolist() of a float tensor
    return x * max(vals)


def log_and_halve(t: torch.Tensor) -> None:
    """A "logging" helper that also changes its argument in place."""
    print("halving", t.shape)
    t.mul_(0.5)


def mutating_log_fn(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    log_and_halve(y)
    return y + 1


def test_capture_scalar_outputs_removes_the_item_break() -> None:
    model, calls = _corpus("item_break")
    adv = dynscope.advise(model, calls=calls)
    t = _trial(adv, "capture_scalar_outputs")
    assert t.code == "torch._dynamo.config.capture_scalar_outputs = True"
    assert t.target and t.target[0].site.startswith("programs.py:")
    assert (t.before.breaks, t.before.graphs) == (1, 2)
    assert t.after is not None and (t.after.breaks, t.after.graphs) == (0, 1)
    assert t.helped and t.outputs_match and not t.error
    assert adv.best is t and adv.trials[0] is t
    assert adv.report.trials == adv.trials and adv.report.break_count == 1  # the before report
    assert "capture_scalar_outputs" in adv.summary()
    assert repr(adv).startswith("<Advice 1 trial, 1 helped")


def test_capture_scalar_outputs_does_not_help_float_tolist() -> None:
    # PyTorch 2.13 traces .tolist() of integer tensors with capture_scalar_outputs, never of
    # float tensors ("Tensor.tolist() with non-integer tensor"): the break stays.
    adv = dynscope.advise(float_tolist_fn, torch.randn(4, 8))
    t = _trial(adv, "capture_scalar_outputs")
    assert t.tried and t.after is not None and not t.error
    assert t.after.breaks == t.before.breaks == 1
    assert not t.helped and adv.best is None
    assert "still breaks at test_advise.py:" in t.note and "tolist" in t.note


def item_then_branch_fn(x: torch.Tensor) -> torch.Tensor:
    n = x.sum().item()
    # With capture_scalar_outputs the break moves to the next line: a data-dependent branch.
    if n > 0:
        return x * 2
    return x - 1


def _line_of(fn: Any, text: str) -> int:
    """The file line of the first line of ``fn`` that holds ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_capture_scalar_outputs_that_only_moves_the_break_did_not_help(tmp_path: Path) -> None:
    # capture_scalar_outputs traces .item(), then `if n > 0` on its value breaks: coverage
    # rises (the sum joins a graph) yet the program breaks as often. That is no help, and
    # the trial says where the break went.
    item, branch = _line_of(item_then_branch_fn, ".item()"), _line_of(item_then_branch_fn, "if n > 0")
    old, new = dynscope.Site("test_advise.py", item), dynscope.Site("test_advise.py", branch)
    adv = dynscope.advise(item_then_branch_fn, torch.randn(8, generator=torch.Generator().manual_seed(0)))
    t = _trial(adv, "capture_scalar_outputs")
    assert t.after is not None and not t.error and t.outputs_match
    assert t.before.sites == (old,) and t.after.sites == (new,)
    assert t.after.breaks == t.before.breaks == 1
    assert t.before.coverage is not None and t.after.coverage is not None and t.after.coverage > t.before.coverage
    assert not t.helped and adv.best is None
    assert t.moved == ((old, new),)
    assert f"the break moved from test_advise.py:{item} to test_advise.py:{branch} (data-dependent branch: `if n > 0:" in t.note
    assert trial_verdict(t) == f"no, moved from :{item} to :{branch}"
    assert f"[1] capture_scalar_outputs: no, moved from :{item} to :{branch}" in adv.summary()
    assert "What each fix buys (1 remedy tried, 0 helped)" in adv.report.summary()
    assert f'<span class="warn">no, moved from :{item} to :{branch}</span>' in adv.report.to_html()
    assert repr(adv).startswith("<Advice 1 trial, 0 helped")
    # Saved ("file.py:LINE", as before sites were fields) and loaded, the trial still says what moved.
    saved = adv.report.save(tmp_path / "moved.json")
    assert f'"test_advise.py:{item}"' in saved.read_text()
    loaded = dynscope.load(saved)
    assert loaded.trials[0].moved == t.moved and loaded.trials[0].after is not None
    assert loaded.trials[0].after.sites == (new,)
    # A trial that removes the break is still help, and moved nothing.
    model, calls = _corpus("item_break")
    removed = _trial(dynscope.advise(model, calls=calls), "capture_scalar_outputs")
    assert removed.after is not None and (removed.before.breaks, removed.after.breaks) == (1, 0)
    assert removed.helped and removed.moved == () and removed.after.sites == ()
    assert trial_verdict(removed) == "yes"


def test_a_trial_saved_before_moved_existed_still_loads() -> None:
    # Reports written before Outcome.sites and Trial.moved: both take their defaults.
    from dynscope._model.codec import from_plain

    old = {"remedy": "capture_scalar_outputs", "code": "x", "before": {"graphs": 2, "breaks": 1},
           "after": {"graphs": 1, "breaks": 0}, "helped": True}
    t = from_plain(dynscope.Trial, old)
    assert t.moved == () and t.before.sites == () and t.after is not None and t.after.sites == ()
    assert trial_verdict(t) == "yes"


def test_reorderable_logging_on_a_logger_method_as_pytorch_does_it() -> None:
    # 2.14 and older reorder only plain functions and builtins (a logging.Logger method is
    # handled by its logger variable, which honours only ignore_logging_functions); 2.15
    # reorders Logger methods too. The trial must say what PyTorch itself does here.
    reorders = logger_methods_reorder()
    model, calls = _corpus("logger_break")
    adv = dynscope.advise(model, calls=calls)
    t = _trial(adv, "reorderable_logging_functions")
    assert t.code == "torch._dynamo.config.reorderable_logging_functions.add(log.info)"
    assert t.after is not None and t.before.breaks == 1
    assert t.after.breaks == (0 if reorders else 1)
    assert t.helped is reorders
    # The "only plain functions" note is said only where it is true.
    assert ("ignore_logging_functions" in t.note and "method" in t.note) is not reorders


def test_reorderable_print_removes_the_print_break() -> None:
    model, calls = _corpus("print_break")
    adv = dynscope.advise(model, calls=calls)
    t = _trial(adv, "reorderable_logging_functions")
    assert t.code == "torch._dynamo.config.reorderable_logging_functions.add(print)"
    assert t.after is not None and (t.before.breaks, t.after.breaks) == (1, 0)
    assert t.helped and t.outputs_match


def test_a_mutating_logging_helper_changes_outputs() -> None:
    x = torch.randn(4, 8)
    kept = x.clone()
    adv = dynscope.advise(mutating_log_fn, x)
    # Added whole, the helper runs after the graph: y + 1 is computed before y is halved.
    t = _trial(adv, "reorderable_logging_functions", "add(log_and_halve)")
    assert t.error.startswith("changed outputs: max abs diff ")
    assert not t.outputs_match and not t.helped
    assert t.after is not None and t.after.breaks < t.before.breaks  # fewer breaks, wrong answer
    assert torch.equal(x, kept)  # the user's tensor was never run on
    # print itself cannot be reordered with a torch.Size argument: PyTorch says so.
    direct = _trial(adv, "reorderable_logging_functions", "add(print)")
    assert not direct.helped and "can't actually be reordered" in direct.note


def test_recompile_shape_mark_dynamic_and_dynamic_true() -> None:
    model, calls = _corpus("recompile_shape")
    adv = dynscope.advise(model, calls=calls)
    marked = _trial(adv, "mark_dynamic")
    assert marked.code.startswith("torch._dynamo.mark_dynamic(x, 0)")
    (target,) = marked.target
    assert target.frame == "MLP.forward" and [(c.kind, c.name, c.dim) for c in target.changes] == [("size", "x", "0")]
    assert target_words(target) == "MLP.forward: size of input x changed (dim 0)"
    dynamic = _trial(adv, "dynamic=True")
    for t in (marked, dynamic):
        assert t.before.recompiles == 1
        assert t.after is not None and t.after.recompiles == 0
        assert t.helped and t.outputs_match
    assert all(not hasattr(c, "_dynamo_dynamic_indices") for c in calls)  # clones were marked
    assert adv.best is marked  # the narrower remedy first when both remove the recompile


def test_is_compiling_guard_is_shown_not_tried() -> None:
    model, calls = _corpus("print_break")
    adv = dynscope.advise(model, calls=calls)
    t = _trial(adv, "is_compiling guard")
    assert not t.tried and t.after is None and not t.helped
    assert 'if not torch.compiler.is_compiling():\n    print("activations ready")' in t.code
    assert adv.trials[-1] is t  # not run: last


def test_advise_leaves_no_config_or_mark_changed() -> None:
    own_reorderable = torch._dynamo.config.reorderable_logging_functions
    dynamo_before = torch._dynamo.config.get_config_copy()
    inductor_before = torch._inductor.config.get_config_copy()
    precision = torch.get_float32_matmul_precision()
    for name in ("item_break", "nonzero_break", "print_break", "recompile_shape"):
        model, calls = _corpus(name)
        adv = dynscope.advise(model, calls=calls)
        assert any(t.helped for t in adv.trials), name
        assert all(not hasattr(c, "_dynamo_dynamic_indices") for c in calls)
    assert torch._dynamo.config.get_config_copy() == dynamo_before
    assert torch._inductor.config.get_config_copy() == inductor_before
    assert torch._dynamo.config.reorderable_logging_functions is own_reorderable
    assert torch.get_float32_matmul_precision() == precision


def test_report_advise_reuses_its_model_and_calls() -> None:
    model, calls = _corpus("item_break")
    rep = dynscope.report(model, calls=calls)
    adv = dynscope.advise(rep)
    assert adv.report is not rep and adv.report.break_count == rep.break_count == 1
    assert _trial(adv, "capture_scalar_outputs").helped
    assert rep.trials == ()  # the report itself is not changed


def test_report_advise_keeps_the_reports_options() -> None:
    # A report made without coverage is advised without coverage: the trial reruns the
    # program the way the report ran it.
    model, calls = _corpus("item_break")
    rep = dynscope.report(model, calls=calls, coverage=False)
    t = _trial(dynscope.advise(rep), "capture_scalar_outputs")
    assert rep.coverage is None and t.before.coverage is None
    assert t.after is not None and t.after.coverage is None and t.helped


def test_advise_on_a_loaded_report_says_what_to_do(tmp_path: Path) -> None:
    model, calls = _corpus("item_break")
    loaded = dynscope.load(dynscope.report(model, calls=calls).save(tmp_path / "r.json"))
    with pytest.raises(dynscope.InputError, match=r"call dynscope\.advise\(model, inputs\)"):
        dynscope.advise(loaded)


def test_advise_on_a_report_takes_no_inputs() -> None:
    # A report brings its own calls: giving it inputs too is one mistake, named.
    model, calls = _corpus("item_break")
    rep = dynscope.report(model, calls=calls)
    with pytest.raises(dynscope.InputError, match=r"got a report and inputs"):
        dynscope.advise(rep, calls=calls)


def test_advise_rejects_an_unknown_report_argument() -> None:
    model, calls = _corpus("item_break")
    with pytest.raises(dynscope.InputError, match="unknown argument 'modez'"):
        dynscope.advise(model, calls=calls, modez=("default",))


def specialising_fn(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 4:  # the code depends on the exact size of dim 0
        return x * 2
    return x + 1


def test_a_remedy_that_raises_is_reported_as_its_error(capfd: pytest.CaptureFixture[str]) -> None:
    # mark_dynamic on a dimension the code specialises: PyTorch raises ConstraintViolationError.
    import logging

    guards_log = logging.getLogger("torch._guards")
    filters_before = list(guards_log.filters)
    adv = dynscope.advise(specialising_fn, calls=[torch.randn(4, 3), torch.randn(6, 3)])
    # The Trial carries the error; PyTorch's traceback of the failed guard is not printed
    # ("Error while creating guard" x30 lines), and its logger is left as it was.
    assert "Error while creating guard" not in capfd.readouterr().err
    assert guards_log.filters == filters_before
    t = _trial(adv, "mark_dynamic")
    assert t.error.startswith("ConstraintViolationError: Constraints violated")
    assert t.after is None and not t.helped
    dynamic = _trial(adv, "dynamic=True")  # runs, but the recompile stays: the size is specialised
    assert dynamic.after is not None and dynamic.after.recompiles == 1 and not dynamic.helped


@pytest.mark.slow
def test_cuda_timing_remedies_are_shown_not_tried_on_cpu() -> None:
    lin = torch.nn.Linear(8, 8)
    adv = dynscope.advise(lin, torch.randn(4, 8), timing=True, timing_options=dynscope.TimingOptions(repeats=3, warmup=1))
    assert adv.report.timing and adv.trials[0].before.speedup is not None  # the before report was timed
    for remedy in ("matmul_precision_high", "max-autotune"):
        t = _trial(adv, remedy)
        assert not t.tried and t.after is None
        assert t.note == "CUDA only: not tried, the inputs are on cpu"
