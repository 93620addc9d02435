"""Why it recompiled, down to the line (issue 22): where each size was fixed or guarded, and
every earlier cache entry's failed guard. Live torch.compile runs of programs whose sizes
the user's own code specialises, checked against PyTorch's own shape records."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from torch import nn

import dynscope


def _line(fn: Any, needle: str) -> int:
    """The file line of the first line of ``fn`` that holds ``needle``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if needle in ln)


def _fixes(rep: dynscope.Report, kind: str) -> list[dynscope.SizeFix]:
    return [fx for f in rep.frames for fx in f.shapes if fx.kind == kind]


def loop_over_size(x: torch.Tensor) -> torch.Tensor:
    for i in range(x.size(0)):  # fixes x.size(0)
        x = x + i
    return x


def branch_on_size(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] == 8:  # guards x.size(1) != 8 once dynamic
        return x * 2
    return x - 1


def view_from_other(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.view(y.size(0), -1) + 1  # ties x's sizes to y's


def scale_by(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * n  # an int argument


class KwargsModel(nn.Module):
    """An HF-style forward: a size passed through **kwargs."""

    def forward(self, input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        keep = kwargs["keep"]
        return input_ids[:, :keep].sum(-1)  # uses the kwarg as a size


class Decoder(nn.Module):
    """A KV-cache decode step whose position moves each call."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 16, 8))

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        self.cache[:, pos] = x  # the position moves
        return self.cache[:, : pos + 1].mean(1)


def test_a_loop_over_a_size_names_the_line_that_fixed_it() -> None:
    rep = dynscope.report(loop_over_size, calls=[torch.ones(4, 3), torch.ones(5, 3), torch.ones(6, 3)])
    assert rep.recompile_count == 2
    fixed = _fixes(rep, "fixed")
    assert [(fx.size, fx.value) for fx in fixed] == [("x.size(0)", "5"), ("x.size(0)", "6")]
    line = _line(loop_over_size, "for i in range")
    assert all(fx.lineno == line and fx.code.startswith("for i in range(x.size(0))") for fx in fixed)
    assert all(fx.filename == __file__ and fx.reason for fx in fixed)
    # The fix says the size is fixed by that line: marking it dynamic cannot help.
    last = rep.recompiles[-1]
    assert "ConstraintViolationError" in last.fixes[0].words and f"test_shapes.py:{line}" in last.fixes[0].words
    # Every earlier entry's failed guard, with what it was compiled for and what came.
    assert [(f.entry, f.then, f.now) for f in last.failures] == [("0/1", "5", "6"), ("0/0", "4", "6")]
    assert all(f.source == "dynscope" for f in last.failures)
    text = rep.summary()
    assert "where sizes were fixed or guarded:" in text and f"x.size(0) fixed to 5 at test_shapes.py:{line}" in text
    assert "every failed guard, per earlier cache entry:" in text
    page = rep.to_html(pictures=False)
    assert "Every failed guard, per earlier cache entry" in page and "x.size(0) fixed to 6" in page
    back = dynscope.load(rep.save(_tmp() / "loop.json"))
    assert back.frames == rep.frames and back.recompiles == rep.recompiles


def _tmp() -> Any:
    import tempfile
    from pathlib import Path

    return Path(tempfile.mkdtemp(prefix="dynscope-shapes-"))


def test_a_branch_on_a_size_is_a_guard_at_its_line() -> None:
    rep = dynscope.report(branch_on_size, calls=[torch.ones(2, 8), torch.ones(2, 9), torch.ones(2, 10)])
    assert rep.recompile_count == 1  # 8 -> 9 made dim 1 dynamic; 10 reuses it
    guarded = _fixes(rep, "guarded")
    line = _line(branch_on_size, "if x.shape[1]")
    assert any(fx.size == "x.size(1)" and "!= 8" in fx.value and fx.lineno == line for fx in guarded), guarded
    frame = rep.frames[-1]
    assert "x.size(1)" in frame.dynamic_sizes
    (rec,) = rep.recompiles
    # Every guard of entry 0/0 that the call fails, not only PyTorch's first: dim 1's size,
    # and dim 0's stride (a contiguous [2, 8] has stride 8 there, a [2, 9] has 9).
    assert [(f.entry, f.guard, f.then, f.now) for f in rec.failures] == [
        ("0/0", "tensor 'x' size mismatch at index 1", "8", "9"),
        ("0/0", "tensor 'x' stride mismatch at index 0", "8", "9"),
    ]
    assert all(f.source == "dynscope" for f in rec.failures)


@pytest.mark.heavy
def test_a_view_with_another_tensors_size_guards_the_relation() -> None:
    rep = dynscope.report(view_from_other, calls=[(torch.ones(4, 6), torch.ones(4)), (torch.ones(6, 6), torch.ones(6)),
                                                  (torch.ones(8, 6), torch.ones(8))])
    assert rep.recompile_count == 1
    frame = rep.frames[-1]
    assert {"x.size(0)", "y.size(0)"} <= set(frame.dynamic_sizes) or any(
        fx.size in ("x.size(0)", "y.size(0)") for fx in frame.shapes)
    assert rep.recompiles[0].failures and rep.recompiles[0].failures[0].entry == "0/0"


def test_an_int_argument_that_changes_is_a_value_guard_then_dynamic() -> None:
    rep = dynscope.report(scale_by, calls=[(torch.ones(3), 2), (torch.ones(3), 3), (torch.ones(3), 4)])
    assert rep.recompile_count == 1
    (rec,) = rep.recompiles
    assert [(f.entry, f.then, f.now) for f in rec.failures if f.source == "dynscope"] == [("0/0", "2", "3")]
    assert "n" in rep.frames[-1].dynamic_sizes


def test_a_size_through_kwargs_is_named_by_its_key() -> None:
    model = KwargsModel()
    ids = torch.arange(24.0).reshape(2, 12)
    rep = dynscope.report(model, calls=[{"input_ids": ids, "keep": 4}, {"input_ids": ids, "keep": 5},
                                        {"input_ids": ids, "keep": 6}])
    assert rep.recompile_count >= 1
    said = " ".join(f.explained for r in rep.recompiles for f in r.failures)
    assert "keep" in said and "kwargs" not in said.replace("keep", "")
    assert ("keep",) in [f.dynamic_sizes for f in rep.frames]
    line = _line(KwargsModel.forward, "input_ids[:, :keep]")
    guards = [fx for fx in _fixes(rep, "guarded") if fx.size == "keep"]
    assert guards and all(fx.lineno == line for fx in guards)
    assert "keep <= 12" in " ".join(fx.value for fx in guards)


def test_a_kv_cache_position_that_moves() -> None:
    model = Decoder()
    rep = dynscope.report(model, calls=[(torch.ones(1, 8), 0), (torch.ones(1, 8), 1), (torch.ones(1, 8), 2),
                                        (torch.ones(1, 8), 3)])
    assert rep.recompile_count == 3  # every position compiles anew
    line = _line(Decoder.forward, "self.cache[:, pos] = x")
    # PyTorch made pos dynamic, and the indexing line fixed it again each time.
    fixed = _fixes(rep, "fixed")
    assert [(fx.size, fx.value, fx.lineno) for fx in fixed] == [("pos", "1", line), ("pos", "2", line), ("pos", "3", line)]
    last = rep.recompiles[-1]
    assert [(f.entry, f.then, f.now) for f in last.failures] == [("0/2", "2", "3"), ("0/1", "1", "3"), ("0/0", "0", "3")]
    assert f"test_shapes.py:{line}" in last.fixes[0].words and "dynamic=True cannot keep it dynamic" in last.fixes[0].words


@pytest.mark.heavy
def test_the_trace_alone_tells_the_same(tmp_path: Any) -> None:
    """capture() with the user's backend reads the same shape records as report()."""
    with dynscope.capture() as cap:
        compiled = torch.compile(loop_over_size, backend="eager")
        for n in (4, 5, 6):
            compiled(torch.ones(n, 3))
    got = [(fx.size, fx.value, fx.lineno) for f in cap.report.frames for fx in f.shapes]
    rep = dynscope.report(loop_over_size, calls=[torch.ones(4, 3), torch.ones(5, 3), torch.ones(6, 3)])
    assert got == [(fx.size, fx.value, fx.lineno) for f in rep.frames for fx in f.shapes]
    # The trace alone has PyTorch's first failed guard per entry; report() checks every guard
    # of each entry on its own calls and finds those and more.
    logged = {(f.entry, f.then, f.now) for f in cap.report.recompiles[-1].failures}
    assert logged and logged <= {(f.entry, f.then, f.now) for f in rep.recompiles[-1].failures}
    assert all(f.source == "pytorch" for f in cap.report.recompiles[-1].failures)


# -- the smallest change that helps, tried ----------------------------------------------------

@pytest.mark.heavy
def test_advise_keeps_the_narrowest_change_that_removes_the_recompile() -> None:
    # A size tied to another input's: mark_dynamic (with the tied dim) is the narrowest fix.
    adv = dynscope.advise(view_from_other, calls=[(torch.ones(4, 6), torch.ones(4)), (torch.ones(6, 6), torch.ones(6)),
                                                  (torch.ones(8, 6), torch.ones(8))])
    assert adv.best is not None and adv.best.remedy == "mark_dynamic" and adv.best.after.recompiles == 0
    assert "mark_dynamic(y, 0)" in adv.best.code and adv.best.outputs_match
    # An int argument: passing it as a 0-d tensor beats dynamic=True (narrower), outputs equal.
    adv = dynscope.advise(scale_by, calls=[(torch.ones(3), 2), (torch.ones(3), 3), (torch.ones(3), 4)])
    assert adv.best is not None and adv.best.remedy == "value as tensor" and adv.best.outputs_match
    assert {t.remedy for t in adv.trials if t.helped} == {"value as tensor", "dynamic=True"}


@pytest.mark.heavy
def test_advise_says_when_the_users_line_fixes_the_size() -> None:
    adv = dynscope.advise(loop_over_size, calls=[torch.ones(4, 3), torch.ones(5, 3), torch.ones(6, 3)])
    by = {t.remedy: t for t in adv.trials}
    assert "ConstraintViolationError" in by["mark_dynamic"].error
    assert not any(t.helped for t in adv.trials)  # no mark gets past range(x.size(0))
    shown = by["size independence"]
    assert not shown.tried and f"test_shapes.py:{_line(loop_over_size, 'for i in range')}" in shown.code
    assert "range(x.size(0))" in shown.code


@pytest.mark.heavy
def test_file_names_interned_before_a_report_are_still_read() -> None:
    """PyTorch logs an interned file name once a process: a report after the user's own
    compile of the same file still names the user's file, from PyTorch's string table."""
    compiled = torch.compile(loop_over_size, backend="eager")
    for n in (4, 5):
        compiled(torch.ones(n, 3))
    rep = dynscope.report(loop_over_size, calls=[torch.ones(4, 3), torch.ones(5, 3)])
    (fx,) = [fx for f in rep.frames for fx in f.shapes]
    assert fx.filename == __file__ and fx.lineno == _line(loop_over_size, "for i in range")


@pytest.mark.parametrize("version", ["torch-2.11", "torch-2.13", "torch-2.14"])
def test_recorded_logs_of_three_releases_say_which_sizes_went_dynamic(version: str) -> None:
    from pathlib import Path

    log = Path(__file__).parents[1] / "traces" / version / "logs" / "corpus-recompile_shape.log"
    rep = dynscope.load_trace(log)
    assert isinstance(rep, dynscope.Report)
    assert [f.dynamic_sizes for f in rep.frames] == [(), ("x.size(0)",)]
    assert [(f.entry, f.then, f.now, f.source) for r in rep.recompiles for f in r.failures] == [("0/0", "4", "6", "pytorch")]


# -- a rewrite of the user's, verified: where no mark helps, the code change does -------------

def loop_rewritten(x: torch.Tensor) -> torch.Tensor:
    return x + torch.arange(x.size(0), dtype=x.dtype).sum()  # no Python loop over the size


def branch_rewritten(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.tensor(x.shape[1]) == 8, x * 2, x - 1)  # both branches, chosen in the graph


class DecoderRewritten(Decoder):
    """The KV-cache step with the position used as a value in tensor ops, never as an index."""

    def forward(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        rows = torch.arange(self.cache.size(1))
        self.cache.copy_(torch.where((rows == pos)[None, :, None], x[:, None, :], self.cache))
        return (self.cache * (rows <= pos)[None, :, None]).sum(1) / (pos + 1)


@pytest.mark.heavy
def test_advise_verifies_the_users_rewrite_where_no_mark_helps() -> None:
    calls = [torch.ones(4, 3), torch.ones(5, 3), torch.ones(6, 3)]
    adv = dynscope.advise(loop_over_size, calls=calls, variants={"arange instead of a loop": loop_rewritten})
    assert adv.best is not None and adv.best.remedy == "your rewrite"
    assert adv.best.outputs_match and adv.best.after.recompiles < adv.best.before.recompiles
    assert "arange instead of a loop" in adv.best.note
    steps = [(torch.ones(1, 8) * (i + 1), i) for i in range(4)]
    adv = dynscope.advise(Decoder(), calls=steps, variants={"pos in tensor ops": DecoderRewritten()})
    best = adv.best
    assert best is not None and best.remedy == "your rewrite" and best.outputs_match
    assert (best.before.recompiles, best.after.recompiles) == (3, 1)  # one dynamic compile takes every position
    # A branch on a size: the rewrite keeps both branches in the graph, and with the dim marked
    # dynamic from the first call, nothing recompiles (mark_dynamic alone fails on the branch).
    adv = dynscope.advise(branch_on_size, calls=[torch.ones(2, 8), torch.ones(2, 9), torch.ones(2, 10)],
                          variants={"torch.where on the size": branch_rewritten})
    best = adv.best
    assert best is not None and best.remedy == "your rewrite" and "with mark_dynamic" in best.note
    assert best.after.recompiles == 0 and best.after.breaks == 0 and best.outputs_match
    with pytest.raises(dynscope.InputError, match="variants must map a name"):
        dynscope.advise(loop_over_size, calls=calls, variants=[loop_rewritten])  # type: ignore[arg-type]


def _pad_helper(x: torch.Tensor) -> torch.Tensor:
    if x.size(0) > 5:  # a branch on a size, in a helper
        return x[:5]
    return x * 2


def outer_with_helper(x: torch.Tensor) -> torch.Tensor:
    return _pad_helper(x.sin()) + 1


def count_items(xs: list[torch.Tensor]) -> torch.Tensor:
    out = xs[0]
    for t in xs[1:]:
        out = out + t
    return out * len(xs)


def test_a_branch_in_a_helper_names_the_helpers_line_not_the_first_use() -> None:
    """PyTorch words such a guard with the line of the size's first use and a note that the
    cause is elsewhere: the report names the branch, fills in what came, and its fix says so."""
    rep = dynscope.report(outer_with_helper, calls=[torch.ones(n) for n in (3, 4, 6, 7)])
    line = _line(_pad_helper, "if x.size(0) > 5")
    last = rep.recompiles[-1]
    logged = [f for f in last.failures if f.source == "pytorch"]
    assert logged and f"test_shapes.py:{line} in _pad_helper" in logged[0].explained
    assert "first use" not in logged[0].explained and "_dynamo" not in logged[0].explained
    assert logged[0].now == "x.size(0) = 6"
    assert any(f"test_shapes.py:{line}" in fix.words and "branched on" in fix.words for fix in last.fixes)
    assert any("mark_dynamic(x, 0)" in fix.words for r in rep.recompiles for fix in r.fixes)


def test_a_list_whose_length_changes_says_what_came() -> None:
    rep = dynscope.report(count_items, calls=[([torch.ones(3)] * n,) for n in (2, 3, 4)])
    (rec, *_) = rep.recompiles
    assert [(f.entry, f.then, f.now) for f in rec.failures] == [("0/0", "2", "3")]
    assert "called with 3" in rec.failures[0].explained
