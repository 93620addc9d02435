"""Real-shaped programs (tests/corpus/real.py): dynscope's counts are PyTorch's own.

Each program runs twice in this process: once compiled by plain ``torch.compile`` with
PyTorch's ``CompileCounter`` backend and a trace handler of the suite's own counting the
records PyTorch logs (graph-break records, compiled frames, recompiles), once under dynscope
(``report()`` or ``capture()``). PyTorch's run starts from ``torch._dynamo.reset()`` (a test
may; dynscope never does) and dynscope's runs after it, so dynscope also has to give a fresh
process's answer after the user's own compiles.
"""

from __future__ import annotations

import inspect
import threading
from typing import TYPE_CHECKING, Any

import pytest
import torch
import torch.distributed as dist
from torch._dynamo.testing import CompileCounter

import dynscope
from dynscope._torch.logger import attached
from tests.corpus.real import REAL_PROGRAMS, RealProgram
from tests.invariants import DYNSCOPE_DIR, TraceCounts

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from dynscope import Report


def _run(prog: RealProgram, compile: Any) -> None:
    if prog.kind == "calls":
        fn, calls = prog.factory()
        compiled = compile(fn)
        for call in calls:
            compiled(*call) if isinstance(call, tuple) else compiled(call)
    else:
        prog.factory()(compile)


def pytorch_counts(prog: RealProgram) -> dict[str, int]:
    """What PyTorch itself compiled and logged for ``prog``, without dynscope."""
    torch._dynamo.reset()
    counter = CompileCounter()
    counts = TraceCounts(threading.get_ident())
    with attached(counts):  # the handler on PyTorch's trace logger, as TORCH_TRACE's would be
        _run(prog, lambda f: torch.compile(f, backend=counter))
    assert counts.graphs <= counter.frame_count  # DDP's optimizer hands the backend pieces of one graph
    return {"graphs": counts.graphs, "breaks": counts.breaks, "frames": counts.frames, "recompiles": counts.recompiles,
            "backend_calls": counter.frame_count}


def dynscope_report(prog: RealProgram) -> Report:
    if prog.kind == "calls":
        fn, calls = prog.factory()
        return dynscope.report(fn, calls=calls)
    # capture() reports what happened in this process, so compiles of the same code before
    # the block are real history (a recompile there is PyTorch's too): start it fresh, as
    # PyTorch's run was. report() needs no such help: it answers as a fresh process would.
    torch._dynamo.reset()
    with dynscope.capture(title=prog.name) as cap:
        prog.factory()(lambda m: torch.compile(m, backend="eager"))
    return cap.report


def counts_of(rep: Report) -> dict[str, int]:
    """dynscope's counts, named as :func:`pytorch_counts` names PyTorch's (graphs: Dynamo's
    graphs, a DDP-split graph once; backend calls: the graphs a backend was handed)."""
    return {
        "graphs": len({(g.compile_id, g.split_by) if g.split_by else g.id for g in rep.graphs}),
        "breaks": rep.break_count,
        "frames": len(rep.frames),
        "recompiles": rep.recompile_count,
        "backend_calls": rep.graph_count,
    }


@pytest.fixture
def process_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.heavy
@pytest.mark.parametrize("prog", REAL_PROGRAMS, ids=[p.name for p in REAL_PROGRAMS])
def test_counts_are_pytorchs(prog: RealProgram, request: pytest.FixtureRequest) -> None:
    if prog.needs == "distributed":
        request.getfixturevalue("process_group")
    expected = pytorch_counts(prog)
    rep = dynscope_report(prog)
    got = counts_of(rep)
    if prog.kind == "loop":
        # With the user's own backend dynscope sees Dynamo's graphs through the trace, not
        # the pieces DDP's optimizer hands that backend (issue 21 reads those from the trace).
        del got["backend_calls"], expected["backend_calls"]
    assert got == expected
    assert not any(f.filename.startswith(DYNSCOPE_DIR) for f in rep.frames)
    if prog.kind == "calls":
        assert rep.coverage is not None and 0.0 < rep.coverage.ratio <= 1.0


@pytest.mark.heavy
def test_train_step_lists_no_dynscope_frame() -> None:
    # The backward-counting hook dynscope puts on a graph's output ran under the user's
    # compiled frame and was compiled as a frame of the program (8 frames where PyTorch
    # compiled 7); break stacks carried report()'s own frames.
    fn, calls = REAL_PROGRAMS[0].factory()
    rep = dynscope.report(fn, calls=calls)
    names = [f.function for f in rep.frames]
    assert "seen" not in names and names.count("train_step") == 1
    assert rep.graphs[0].backward_runs == len(calls)  # the hook still counts the backward runs
    for b in rep.breaks:
        assert b.user_stack and b.user_stack[0].function == "train_step", b.user_stack
        assert DYNSCOPE_DIR not in b.torch_text and "in _report_locked" not in b.torch_text
    assert "backend.py" not in rep.program_dot() and "seen" not in rep.program_dot()


@pytest.mark.heavy
def test_dynamic_shapes_glue_is_not_eager_work() -> None:
    # Under dynamic=True Dynamo passes Embedding's Python float norm_type as a tensor: its
    # "Pregraph bytecode" runs aten::empty/lift_fresh/to before each graph call. They were
    # counted as eager work at GPT.forward's def line (nanoGPT with no break showed 74%).
    from tests.corpus.real import GPT, _batch

    torch.manual_seed(0)
    model = GPT()
    rep = dynscope.report(model, calls=[_batch(1), _batch(2, t=9)], dynamic=True)
    assert rep.break_count == 0
    assert rep.coverage is not None
    assert rep.coverage.ratio == 1.0 and rep.coverage.eager_sites == ()
    assert rep.coverage.ops_dynamo > 0
    assert "ops Dynamo ran to build graph arguments" in rep.summary()


@pytest.mark.heavy  # a whole advise() on the KV decoder: eight seconds
def test_advise_trials_count_the_programs_ops_only() -> None:
    # advise() copies each call's outputs to compare them later; the copy ran under the
    # coverage profiler and counted as eager ops: the KV decoder's dynamic=True trial said
    # "100% -> 96%" where report(dynamic=True) says 100%.
    from tests.corpus.real import kv_decode

    fn, calls = kv_decode()
    adv = dynscope.advise(fn, calls=calls)
    direct = dynscope.report(*kv_decode()[:1], calls=calls, dynamic=True)
    assert direct.coverage is not None and direct.coverage.ratio == 1.0
    trial = next(t for t in adv.trials if t.remedy == "dynamic=True")
    assert trial.before.coverage == 1.0
    assert trial.after is not None and trial.after.coverage == direct.coverage.ratio


def test_trial_coverage_is_never_rounded_to_a_bound() -> None:
    from dynscope._model import Outcome, Trial
    from dynscope._render.words import trial_cells

    t = Trial(remedy="x", code="", before=Outcome(coverage=0.9956), after=Outcome(coverage=0.9936))
    cells = trial_cells(t, timed=False)
    assert "99.6% -> 99%" in cells, cells  # _format.percent: a share below 1 is never "100%"


def test_eager_ops_of_frames_dynamo_gave_up_on_say_so() -> None:
    # A break under a try block makes Dynamo give up on the helper's frame: its ops ran all
    # over the helper, and were once listed at the break's line as if they ran there. Each
    # is listed at the line that ran it (issue 32), after the break that left it eager.
    from tests.corpus.real import _try_inner, try_three_deep

    fn, calls = try_three_deep()
    rep = dynscope.report(fn, calls=calls)
    assert rep.coverage is not None and rep.coverage.eager_sites
    (site,) = rep.breaks
    lines, first = inspect.getsourcelines(_try_inner)
    add = first + next(i for i, text in enumerate(lines) if "return x + 1" in text)
    assert rep.coverage.eager_sites == ((f"real.py:{add} (eager after the break at {site.location}) aten::add", 1),)
    assert rep.coverage.ops_eager == sum(n for _, n in rep.coverage.eager_sites)


@pytest.mark.heavy  # the nanoGPT-like train step with its optimizer: six seconds
def test_torch_optim_sites_do_not_tell_the_user_to_remove_torchs_graph_break() -> None:
    # PyTorch's hint at torch.optim's own graph_break() is "Remove the graph_break() call":
    # advice to whoever wrote torch/optim, shown beside dynscope's fix as if it were the user's.
    fn, calls = REAL_PROGRAMS[0].factory()
    rep = dynscope.report(fn, calls=calls)
    optim = [b for b in rep.breaks if not b.actionable]
    assert optim and any("graph_break()" in h for b in optim for h in b.hints)  # PyTorch said it
    text, page = rep.summary(), rep.to_html(pictures=False)
    for b in optim:
        for hint in b.hints:
            assert f"torch hint: {hint[:40]}" not in text.replace("\n      ", " ")
    # The page keeps PyTorch's whole report verbatim (its words, labelled so), not as a hint list.
    assert "<li>Remove the `torch._dynamo.graph_break()` call" not in page
