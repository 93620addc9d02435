"""Issue 8, capture under fire: same answer whatever ran before, no crash, no leak.

Every test here runs real torch.compile; each one failed before its fix.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
import threading
import weakref
from dataclasses import replace

import pytest
import torch

import dynscope
from dynscope import _torch
from dynscope._model.codec import report_from_dict
from dynscope._read.assemble import build_report
from dynscope._torch.trace import TraceCollector
from tests.conftest import ROOT
from tests.corpus.programs import MLP, PrintModel, _x


@pytest.fixture(autouse=True, scope="module")
def _torch_logging_initialised() -> None:
    # PyTorch sets up its own logging on the first compile of a process; do it first.
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))


class LoopPrint(torch.nn.Module):
    """A break inside a loop: Dynamo gives up on forward and marks its code "skip"."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x)
        for _ in range(2):
            print("in a loop")
        return x.relu()


def _counts(rep: dynscope.Report) -> tuple:
    return (
        rep.graph_count,
        rep.break_count,
        len(rep.breaks),
        rep.recompile_count,
        tuple((f.function, f.status) for f in rep.frames),
    )


def _live_entries(code: object) -> list[tuple[int, int]]:
    """(frame_compile_id, recompile region) of the cache entries that can still run."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    return [
        (e.compile_id.frame_compile_id, getattr(e, "isolate_recompiles_id", -1))  # none on 2.11
        for e in _debug_get_cache_entry_list(code)
        if e.code is not None
    ]


# -- same answer whatever ran before -----------------------------------------------------


def test_frame_skipped_by_users_compile_is_reported_as_in_a_fresh_process() -> None:
    fresh = dynscope.report(LoopPrint(), _x(4, 8))
    assert fresh.break_count >= 1 and any(f.status == "failed" for f in fresh.frames)

    model = LoopPrint()
    torch.compile(model, backend="eager")(_x(4, 8))  # marks forward "skip"
    after = dynscope.report(model, _x(4, 8))
    assert _counts(after) == _counts(fresh)


def test_skip_mark_is_restored_after_the_report() -> None:
    def loop_fn(x: torch.Tensor) -> torch.Tensor:
        x = x + 1
        for _ in range(2):
            print("again")
        return x * 2

    def second_compile_sees(between: bool) -> tuple[int, int]:
        """(breaks, frames) of a second plain compile, after a first one marked the frame."""
        torch.compile(loop_fn, backend="eager")(_x(3))
        if between:
            dynscope.report(loop_fn, _x(3))
        with dynscope.capture() as cap:
            torch.compile(loop_fn, backend=torch._dynamo.testing.CompileCounter())(_x(3))
        torch._dynamo.reset_code(loop_fn.__code__)
        return cap.report.break_count, len(cap.report.frames)

    # Without dynscope the second compile sees a skipped frame: no break, no frame. Had the
    # report left the mark lifted, Dynamo would try the frame again: (1, 1).
    assert second_compile_sees(between=True) == second_compile_sees(between=False) == (0, 0)


@pytest.mark.heavy
def test_thirty_reports_give_the_same_counts_and_leave_the_users_cache_alone() -> None:
    model = PrintModel()
    compiled = torch.compile(model, backend="eager")
    compiled(_x(4, 8))
    code = type(model).forward.__code__
    before = _live_entries(code)
    state = _torch.snapshot_state()
    first = _counts(dynscope.report(model, calls=[_x(4, 8), _x(6, 8)]))
    for _ in range(29):
        assert _counts(dynscope.report(model, calls=[_x(4, 8), _x(6, 8)])) == first
    assert _live_entries(code) == before
    assert _torch.snapshot_state() == state
    # The user's compiled code still runs from its cache: no new compile.
    with dynscope.capture() as cap:
        compiled(_x(4, 8))
    assert cap.report.frames == ()


def test_recompile_limit_hit_is_said_not_hidden() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    with torch._dynamo.config.patch(recompile_limit=2):
        rep = dynscope.report(f, calls=[_x(n) for n in range(1, 6)], dynamic=False)
    assert rep.recompile_count == 2
    assert any("recompile limit hit in f" in n for n in rep.notes)
    assert "Read this first" in rep.summary() and "recompile limit hit" in rep.summary()
    assert "recompile limit hit" in rep.to_html(pictures=False)


def _recorded(model: object, calls: list) -> tuple[list, list]:
    """Trace events and recorded graphs of a real run (the raw material of a report)."""
    collector = TraceCollector()
    backend = dynscope.capture().backend
    with _torch.DynamoSandbox() as box, _torch.attached(collector):
        box.own(backend=backend)
        compiled = torch.compile(model, backend=backend, dynamic=False)
        box.own(compiled)
        for c in calls:
            compiled(c)
    return collector.snapshot(), list(backend.graphs)


def test_unreadable_payloads_are_counted_and_fail_the_budget() -> None:
    events, graphs = _recorded(PrintModel(), [_x(4, 8), _x(6, 8)])
    clean = build_report(events, graphs, ignore_backend_mismatch=True)
    assert clean.unparsed == 0 and clean.recompile_count >= 1
    # The same real trace as a future torch might word it: every break and recompile
    # payload in a format no parser knows.
    future = [
        replace(ev, payload="\x00 format v99 \x00")
        if ev.name in ("dynamo_graph_break_reason", "recompile_reasons")
        else ev
        for ev in events
    ]
    rep = build_report(future, graphs, ignore_backend_mismatch=True)
    changed = sum(ev.name in ("dynamo_graph_break_reason", "recompile_reasons") for ev in events)
    assert rep.unparsed == changed
    # Counted per kind (tlparse's Stats), by event name; the kinds add up to the total.
    per_kind = {name: sum(ev.name == name for ev in events) for name in ("dynamo_graph_break_reason", "recompile_reasons")}
    assert dict(rep.unparsed_kinds) == {k: n for k, n in per_kind.items() if n}
    assert sum(n for _, n in rep.unparsed_kinds) == rep.unparsed
    assert "dynamo_graph_break_reason" in rep.summary()
    assert report_from_dict(json.loads(rep.to_json())).unparsed_kinds == rep.unparsed_kinds
    # Recompiles come from compile ids: an unreadable reason still counts.
    assert rep.recompile_count == clean.recompile_count
    assert "could not read" in rep.summary()
    assert "could not read" in rep.to_html(pictures=False)
    with pytest.raises(dynscope.CompileBudgetError, match="could not be read"):
        rep.check(max_graph_breaks=None, max_recompiles=None)
    rep.check(max_graph_breaks=None, max_recompiles=None, allow_unparsed=True)


# -- threads -------------------------------------------------------------------------------


@pytest.mark.heavy
def test_two_threads_reporting_at_once_do_not_crash_and_agree() -> None:
    model = PrintModel()
    expected = _counts(dynscope.report(model, calls=[_x(4, 8), _x(6, 8)]))
    results: list[tuple] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(3):
                results.append(_counts(dynscope.report(model, calls=[_x(4, 8), _x(6, 8)])))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [expected] * 6


def test_report_ignores_and_spares_another_threads_compiles() -> None:
    def other(x: torch.Tensor) -> torch.Tensor:
        return x.cos() * 3

    counter = torch._dynamo.testing.CompileCounter()
    theirs = torch.compile(other, backend=counter)
    started, stop = threading.Event(), threading.Event()

    def user_thread() -> None:
        n = 0
        while not stop.is_set():
            theirs(_x(n % 5 + 1))  # compiles (static, then dynamic), then runs cached code
            n += 1
            if n >= 5:
                started.set()

    t = threading.Thread(target=user_thread)
    t.start()
    started.wait(30)
    try:
        rep = dynscope.report(MLP(), _x(4, 8))
    finally:
        stop.set()
        t.join()
    assert {g.frame for g in rep.graphs} == {"MLP.forward"}
    assert all(f.function != "other" for f in rep.frames)
    compiled_before = counter.frame_count
    for n in range(1, 6):
        theirs(_x(n))  # every size was compiled by now: nothing evicted, nothing recompiled
    assert counter.frame_count == compiled_before


# -- nothing kept alive -----------------------------------------------------------------


def test_nothing_the_report_saw_stays_alive() -> None:
    model = MLP()
    x = _x(4, 8)
    refs = [weakref.ref(model), weakref.ref(x), weakref.ref(next(model.parameters()))]
    rep = dynscope.report(model, x)
    refs.append(weakref.ref(rep.graphs[0].module))
    del rep, model, x
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)


# -- what the user passes ----------------------------------------------------------------


def test_a_class_is_rejected_before_anything_is_patched() -> None:
    call_before = MLP.__call__
    with pytest.raises(dynscope.InputError, match="class MLP, not an instance"):
        dynscope.report(MLP, _x(4, 8))
    assert MLP.__call__ is call_before


@pytest.mark.parametrize("kind", ["module", "function"])
def test_an_already_compiled_model_is_unwrapped_with_a_note(kind: str) -> None:
    model = PrintModel()
    target = model if kind == "module" else (lambda x: model(x))
    compiled = torch.compile(target, backend="eager")
    rep = dynscope.report(compiled, _x(4, 8))
    plain = dynscope.report(target, _x(4, 8))
    assert _counts(rep) == _counts(plain)
    assert any("already a torch.compile result" in n for n in rep.notes)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dynamic": "yes"}, "dynamic must be True, False or None"),
        ({"timing_options": "fast"}, "timing_options must be a dynscope.TimingOptions"),
    ],
)
def test_bad_options_are_input_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(dynscope.InputError, match=message):
        dynscope.report(MLP(), _x(4, 8), **kwargs)


def test_a_finished_capture_cannot_be_reentered() -> None:
    cap = dynscope.capture()
    with cap:
        torch.compile(lambda x: x + 2, backend=cap.backend)(_x(3))
    with pytest.raises(dynscope.InputError, match=r"has finished.*Use a new dynscope\.capture\(\)"):
        with cap:
            pass
    assert cap.report.graph_count == 1


# -- the user's profiler, stderr, model state --------------------------------------------


def test_report_inside_users_profiler_keeps_their_profile() -> None:
    with torch.profiler.profile() as prof:
        torch.mm(torch.ones(3, 3), torch.ones(3, 3))
        rep = dynscope.report(MLP(), _x(4, 8))
        torch.bmm(torch.ones(1, 3, 3), torch.ones(1, 3, 3))
    names = {e.name for e in prof.events()}
    assert {"aten::mm", "aten::bmm"} <= names
    assert rep.coverage is None
    assert any("coverage not measured" in n for n in rep.notes)


@pytest.mark.heavy
@pytest.mark.parametrize(
    "setup",
    ["sys.stderr = None", "import os; os.close(2)"],
    ids=["stderr-None", "fd2-closed"],
)
def test_report_works_without_stderr(setup: str) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        import torch, dynscope
        {setup}
        def f(x):
            x = x + 1
            print("break", file=sys.stdout)
            return x * 2
        rep = dynscope.report(f, torch.ones(3))
        sys.stdout.write(f"OK {{rep.graph_count}} {{rep.break_count}}\\n")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "OK 2 1" in done.stdout


class Stateful(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(8)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.bn(x))


def test_buffers_and_rng_are_put_back() -> None:
    model = Stateful().train()
    buffers = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1234)
    expected_next = torch.rand(4)
    torch.manual_seed(1234)
    dynscope.report(model, calls=[_x(4, 8), _x(4, 8)])
    assert torch.equal(torch.rand(4), expected_next), "the random stream was not consumed"
    for key, value in model.state_dict().items():
        assert torch.equal(value, buffers[key]), f"{key} changed"


def test_state_can_be_left_as_the_calls_made_it() -> None:
    model = Stateful().train()
    before = model.bn.num_batches_tracked.item()
    dynscope.report(model, calls=[_x(4, 8), _x(4, 8)], restore_state=False)
    assert model.bn.num_batches_tracked.item() == before + 2
