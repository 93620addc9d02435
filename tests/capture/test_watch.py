"""The live cross-rank check (issue 34): dynscope.watch_ranks, DYNSCOPE_WATCH_RANKS=1 and
python -m dynscope.watch.

The torchrun tests run examples/diverging_job.py, 2 and 4 gloo ranks on CPU: each seeded
case is shown to hang until the collective timeout without the watch, and to stop with its
cause, well before the timeout, with it. The rest checks the comparison on reports of live
compiles in this process, and that a watch outside a process group changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import dynscope
from dynscope._capture.watch import watch_from_env
from dynscope._model.watch import (
    Verdict,
    blocked_divergence,
    compare,
    digest,
    frame_key,
    new_collectives,
    unmatched,
)
from dynscope._torch.distributed import raisable_in_compile
from dynscope._torch.logger import trace_logger

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "examples" / "diverging_job.py"
#: The collective timeout of the seeded jobs (gloo), and the watch's wait. 20 s: on a loaded
#: two-core machine a rank's first compile has taken 6 s (CI), and the seeded jobs must still
#: end in well under half of it.
COLLECTIVE_TIMEOUT_S = 20.0
WAIT_S = 2.0


# -- the comparison, on reports of live compiles ---------------------------------------------


def _report_of(fn: Any, *calls: tuple[Any, ...], rank: int) -> dynscope.Report:
    """The report of ``fn`` compiled afresh (backend eager) and called with each of ``calls``,
    as rank ``rank`` of 2."""
    torch._dynamo.reset()
    with dynscope.capture() as cap:
        compiled = torch.compile(fn, backend="eager")
        for args in calls:
            compiled(*args)
    return dataclasses.replace(cap.report, rank=rank, world_size=2)


def _mlp(dtype: torch.dtype) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).to(dtype)


def test_the_same_program_compiled_twice_agrees_and_digests_alike() -> None:
    model = _mlp(torch.float32)
    x = torch.randn(4, 8)
    a = _report_of(model, (x,), rank=0)
    b = _report_of(model, (x,), rank=1)
    # Object ids, addresses and the like differ between the two compiles: not compared.
    assert compare([a, b]) == ()
    assert digest(a) == digest(b)


def test_a_rank_in_float16_makes_another_graph_and_the_first_difference_is_named() -> None:
    x = torch.randn(4, 8)
    a = _report_of(lambda m, t: m(t.to(torch.float32)), (_mlp(torch.float32), x), rank=0)
    b = _report_of(lambda m, t: m(t.to(torch.float16)), (_mlp(torch.float16), x), rank=1)
    found = compare([a, b])
    assert digest(a) != digest(b)
    kinds = [d.kind for d in found]
    assert kinds[0] == "graph_structure", found
    assert "f16" in found[0].detail and "f32" in found[0].detail
    assert "cache" not in kinds and "compile_time_skew" not in kinds


def _logs_on(x: torch.Tensor, log: bool) -> torch.Tensor:
    y = x.sin()
    if log:
        print("rank-dependent print")  # a graph break where log is True
    return y.cos()


def test_a_break_on_one_rank_is_a_break_sites_divergence_at_its_line(capsys: pytest.CaptureFixture[str]) -> None:
    x = torch.randn(4)
    a = _report_of(_logs_on, (x, True), rank=0)
    b = _report_of(_logs_on, (x, False), rank=1)
    (brk,) = [d for d in compare([a, b]) if d.kind == "break_sites"]
    line = _logs_on.__code__.co_firstlineno + 3
    assert f"test_watch.py:{line}" in brk.detail and "print" in brk.detail
    capsys.readouterr()


def test_a_recompile_only_one_rank_made_is_said_with_its_guard() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    rep = _report_of(f, (torch.randn(8, 3),), (torch.randn(4, 3),), rank=1)
    div = unmatched(rep, rank=1, nth=1, compile_id="0/1", missing=[0], waited_s=2.0)
    assert div.kind == "recompiles" and div.ranks == (1,)
    assert "input x changed size in dim 0: compiled for 8, called with 4" in div.detail
    assert div.detail.endswith("rank 0 made no such compile within 2.0 s")
    assert new_collectives(rep, 1) == (), "a recompile without collectives never stops the job"
    first = _report_of(f, (torch.randn(8, 3),), rank=1)
    assert unmatched(first, rank=1, nth=0, compile_id="3/0", missing=[0], waited_s=2.0).kind == "graph_count"
    assert new_collectives(first, 0) == (), "a frame only one rank compiled, without collectives, is only said"
    doing = unmatched(rep, rank=1, nth=1, compile_id="0/1", missing=[0], waited_s=0.5, doing="rank 0 waits in barrier")
    assert doing.detail.endswith("rank 0 made no such compile within 0.5 s (rank 0 waits in barrier)")


def test_frame_keys_leave_out_the_folder_and_count_compiles() -> None:
    assert frame_key("forward", "/a/b/train.py", 12, 0) == frame_key("forward", "/c/train.py", 12, 0)
    assert frame_key("forward", "train.py", 12, 0) != frame_key("forward", "train.py", 12, 1)


def _verdict(ranks: tuple[int, ...], world: int) -> Verdict:
    return Verdict(
        found_by=ranks[0], world_size=world, frame="forward", where="train.py:12", compile_id="0/1",
        line="train.py:41: loss = forward(x)",
        divergences=(dynscope.Divergence("recompiles", ranks, "rank 3 recompiled forward (0/1): ..."),),
        remedy="recompiles", waited_s=2.0,
    )


def test_a_verdict_travels_as_plain_data_and_says_who_where_and_what_to_do() -> None:
    v = _verdict((3,), 4)
    assert Verdict.from_dict(v.to_dict()) == v
    text = v.message(saved="dynscope-ranks/rank-3.json")
    assert text.startswith("rank 3 of 4 ranks diverged at forward (train.py:12), compile 0/1, found by rank 3")
    assert "  your line: train.py:41: loss = forward(x)" in text and "  remedy: make the value that changed the same on every rank: pad every batch" in text
    assert "dynscope merge dynscope-ranks" in text
    # Two ranks, one each way: neither is the odd one.
    assert _verdict((1,), 2).message().startswith("the 2 ranks diverged at forward")
    assert dataclasses.replace(_verdict((1,), 2), answered=False).message().startswith("rank 1 of 2 ranks diverged")


def test_the_error_pickles_as_itself() -> None:
    err = dynscope.RankDivergenceError(_verdict((3,), 4), saved="x/rank-3.json")
    back = pickle.loads(pickle.dumps(raisable_in_compile(dynscope.RankDivergenceError)(err.verdict, saved=err.saved)))
    assert isinstance(back, dynscope.RankDivergenceError) and isinstance(back, dynscope.DynscopeError)
    assert back.verdict == err.verdict and str(back) == str(err)


def _accounts(log: Path, rank: int, world: int) -> dict[str, Any]:
    """What the watch says at each compile of a recorded rank log: the frame's events up to
    that compile's guards record, as the watch holds them then."""
    from dynscope._capture.watch import account
    from dynscope._torch import records
    from dynscope._torch.trace_log import read_log

    by_frame: dict[str, list[Any]] = {}
    out = {}
    for ev in read_log(log, lowering=False).events:
        if not ev.compile_id:
            continue
        by_frame.setdefault(ev.compile_id.split("/")[0], []).append(ev)
        if ev.name == records.DYNAMO_CPP_GUARDS_STR:
            acc = account(list(by_frame[ev.compile_id.split("/")[0]]), ev.compile_id, rank=rank, world_size=world)
            out[acc.key] = acc.report
    return out


def _cuda_ranks(folder: Path, ranks: int) -> list[Path]:
    # tests/traces/torch-2.13/logs/corpus-mlp_no_break.log made rank r of a CUDA job
    # (device=r, cuda:r), as tests/read/test_job_logs.py does.
    from tests.corpus.job_logs import as_rank
    from tests.read.test_trace_logs import TRACES

    src = TRACES / "torch-2.13" / "logs" / "corpus-mlp_no_break.log"
    folder.mkdir()
    paths = [folder / f"dedicated_log_torch_trace_rank_{r}_abc{r}.log" for r in range(ranks)]
    for r, path in enumerate(paths):
        as_rank(src, path, r)
    return paths


def test_the_ranks_of_a_clean_cuda_job_agree_at_every_compile(tmp_path: Path) -> None:
    paths = _cuda_ranks(tmp_path / "job", 4)
    assert "device=3" in paths[3].read_text(encoding="utf-8")  # really rank-local
    accounts = [_accounts(p, r, 4) for r, p in enumerate(paths)]
    assert accounts[0] and all(a.keys() == accounts[0].keys() for a in accounts)
    for key in accounts[0]:
        reports = [a[key] for a in accounts]
        assert len({digest(r) for r in reports}) == 1, key
        assert compare(reports) == ()


def test_a_guard_one_cuda_rank_alone_has_is_found_at_its_compile(tmp_path: Path) -> None:
    from tests.corpus.job_logs import rewrite

    paths = _cuda_ranks(tmp_path / "job", 2)
    # Rank 1 saw another batch size: its tensor guard says so (as a shorter last batch would).
    rewrite(paths[1], paths[1], meta=lambda m: m, payload=lambda kind, t: t.replace("size=[4, 8]", "size=[3, 8]")
            if kind == "dynamo_cpp_guards_str" else t)
    a, b = (_accounts(p, r, 2) for r, p in enumerate(paths))
    (key,) = a.keys()
    found = compare([a[key], b[key]])
    assert [d.kind for d in found] == ["guards"] and "size=[3, 8]" in found[0].detail


def test_collectives_are_read_from_a_graph_known_only_from_the_trace() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        def f(x: torch.Tensor) -> torch.Tensor:
            y = x.sin()
            dist.all_reduce(y)
            return y * 2

        rep = _report_of(f, (torch.ones(4),), (torch.ones(6),), rank=0)
    finally:
        dist.destroy_process_group()
    from dynscope._model.merge import collectives_of

    first, again = rep.graphs
    assert not first.nodes and collectives_of(first) == ("all_reduce",)
    assert new_collectives(rep, 0) == ("all_reduce",), "a compile that brings a collective can hang the job"
    # The recompile for another size issues the same collectives as the compile before it
    # (as FSDP's and DDP's, sized by parameters): it desynchronises nothing.
    assert collectives_of(again) == ("all_reduce",) and new_collectives(rep, 1) == ()


def test_ranks_waiting_in_collectives_that_never_meet_are_named() -> None:
    div = blocked_divergence({
        0: {"op": "barrier", "seq": 4, "where": "train.py:90 in main"},
        1: {"op": "barrier", "seq": 4, "where": "train.py:90 in main"},
        2: {"op": "wait_tensor", "seq": 4, "where": "train.py:41 in main: total = sync(loss)"},
    })
    assert div.kind == "collectives" and div.ranks == (2,)
    assert div.detail.startswith("ranks 0, 1 wait in barrier (its collective #4) at train.py:90 in main; rank 2 waits in wait_tensor")
    v = dataclasses.replace(_verdict((2,), 3), divergences=(div,), blocked=True, compile_id="")
    assert Verdict.from_dict(v.to_dict()) == v
    assert "found by rank 2 while every rank waited in a collective the others never reach" in v.message()
    assert "compile" not in v.message().splitlines()[0]


class _RaiseAtGuards(logging.Handler):
    """Raises the watch's error when the first compile's guards are logged, as the watch does."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.armed = True

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        if self.armed and isinstance(metadata, dict) and "dynamo_cpp_guards_str" in metadata:
            self.armed = False
            raise raisable_in_compile(dynscope.RankDivergenceError)(_verdict((1,), 2))


def test_the_error_leaves_a_live_compile_as_itself_and_dynamo_goes_on() -> None:
    from dynscope._torch.logger import attached

    torch._dynamo.reset()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    compiled = torch.compile(f, backend="eager")
    with attached(_RaiseAtGuards()), pytest.raises(dynscope.RankDivergenceError, match="diverged at forward"):
        compiled(torch.ones(3))
    # Nothing compiled ran and Dynamo's state is whole: the next call compiles and runs.
    assert torch.equal(compiled(torch.ones(3)), torch.ones(3).sin() + 1)
    from torch._dynamo.callback import callback_handler

    assert not callback_handler.start_callbacks and not callback_handler.end_callbacks


def test_outside_a_process_group_the_watch_changes_nothing() -> None:
    from torch._dynamo.callback import callback_handler

    log = trace_logger()
    before = (list(log.handlers), log.level, log.propagate)
    torch._dynamo.reset()
    with dynscope.watch_ranks(wait_s=1) as watch:
        compiled = torch.compile(lambda x: x * 3, backend="eager")
        assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
        compiled(torch.ones(5))
    assert watch.verdicts == []
    assert (list(log.handlers), log.level, log.propagate) == before
    assert not callback_handler.start_callbacks and not callback_handler.end_callbacks


@pytest.mark.parametrize("options", [{"on_divergence": "stop"}, {"wait_s": 0}, {"wait_s": "5"}, {"wait_s": True}])
def test_bad_options_are_refused_by_name(options: dict[str, Any]) -> None:
    name = next(iter(options))
    with pytest.raises(dynscope.InputError, match=name), dynscope.watch_ranks(**options):
        pass


def test_the_environment_variable_is_read_and_a_bad_option_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import dynscope._capture.watch as watch_module

    assert watch_from_env({}) is None
    assert watch_from_env({"DYNSCOPE_WATCH_RANKS": "0"}) is None
    monkeypatch.setattr(watch_module, "_process_watch", None)
    for wait in ("soon", "-1", "nan"):
        with pytest.warns(dynscope.RankDivergenceWarning, match="DYNSCOPE_WATCH_WAIT_S"):
            watch = watch_from_env({"DYNSCOPE_WATCH_RANKS": "1", "DYNSCOPE_WATCH_WAIT_S": wait,
                                    "DYNSCOPE_WATCH_ON": "stop"})
        assert watch is not None and watch.wait_s == watch_module.DEFAULT_WAIT_S and watch.on_divergence == "raise"
        watch.__exit__(None, None, None)
        monkeypatch.setattr(watch_module, "_process_watch", None)


@pytest.mark.heavy  # a fresh interpreter
def test_the_variable_never_breaks_a_torch_free_command(tmp_path: Path) -> None:
    src = tmp_path / "report.json"
    _report_of(lambda x: x * 2, (torch.ones(2),), rank=0).save(src)
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['dynscope', 'show', sys.argv[1]]; "
            "import runpy; runpy.run_module('dynscope', run_name='__main__')")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DYNSCOPE_WATCH_RANKS": "1", "DYNSCOPE_WATCH_WAIT_S": "soon"}
    done = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "not watching this process" in done.stderr and done.stdout.strip()


@pytest.mark.heavy  # a fresh interpreter importing torch: seconds
def test_python_m_dynscope_watch_runs_a_script_as_python_would(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import sys
        import torch
        f = torch.compile(lambda x: x + 1, backend="eager")
        print("ran", __name__, sys.argv[1:], f(torch.ones(1)).item())
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "dynscope.watch", str(script), "--lr", "3"], capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran __main__ ['--lr', '3'] 2.0" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "dynscope.watch", str(tmp_path / "nope.py")], capture_output=True,
                             text=True, timeout=120, env=env, check=False)
    assert missing.returncode == 2 and "nope.py is not a file" in missing.stderr


# -- seeded jobs under torchrun ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Job:
    returncode: int
    output: str
    seconds: float  # wall time of the whole torchrun
    folder: Path

    def ended_after(self) -> list[float]:
        """Each rank's time from init to its end (the job prints it in a finally; a rank the
        watch ends from its watcher thread says when, from the watch's start)."""
        ended = {int(r): float(s) for r, s in re.findall(r"rank (\d+) ended after ([\d.]+) s", self.output)}
        for r, s in re.findall(r"dynscope.watch_ranks: stopping rank (\d+) after ([\d.]+) s watched", self.output):
            ended.setdefault(int(r), float(s))
        return [ended[r] for r in sorted(ended)]

    def stats(self) -> dict[int, dict[str, Any]]:
        """What each rank's watch did (the job prints ``rank R watch: {...}`` at its end)."""
        import json

        # Each object decoded from where its line says it starts, to its own end: the ranks share
        # one pipe, and text of the other rank once followed one on its line ("Extra data").
        decode = json.JSONDecoder().raw_decode
        found = (decode(self.output, m.end())[0] for m in re.finditer(r"rank \d+ watch: (?=\{)", self.output))
        return {s["rank"]: s for s in found}

    def done(self) -> bool:
        return self.returncode == 0 and all(f"rank {r} done" in self.output for r in (0, 1))


def _torchrun(folder: Path, case: str, *, ranks: int = 2, how: str = "code", timeout_s: float = COLLECTIVE_TIMEOUT_S,
              wait_s: float = WAIT_S, on: str = "raise", extra: tuple[str, ...] = ()) -> Job:
    """Run the seeded job; ``how``: "none" (no dynscope), "code" (watch_ranks in the job),
    "env" (DYNSCOPE_WATCH_RANKS=1 with import dynscope), "module" (-m dynscope.watch)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "DYNSCOPE_WATCH_WAIT_S": str(wait_s), "DYNSCOPE_WATCH_FOLDER": str(folder), "DYNSCOPE_WATCH_ON": on}
    env.pop("DYNSCOPE_WATCH_RANKS", None)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    args = ["--case", case, "--timeout", str(timeout_s), "--folder", str(folder), *extra]
    if how == "code":
        args += ["--watch", "--wait", str(wait_s), "--on", on]
    if how == "env":
        env["DYNSCOPE_WATCH_RANKS"] = "1"
        args += ["--import-dynscope"]
    cmd = [*launch, *(["-m", "dynscope.watch"] if how == "module" else []), str(JOB), *args]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=folder, check=False)
    return Job(done.returncode, done.stdout + done.stderr, time.monotonic() - started, folder)


def _errors_of(out: str) -> list[str]:
    """The lines of a job's output that name an error or the watch: what a failed run said."""
    return [line for line in out.splitlines()
            if re.search(r"Error|dynscope|watch|exitcode|Traceback", line) and "site-packages" not in line][-40:]


#: case -> (the kind said, words it must say, the rank named odd or None, how the watch is turned on)
CASES: dict[str, tuple[str, str, int | None, str]] = {
    "batch": ("recompiles", "input x changed size in dim 0: compiled for 8, called with 4", 1, "code"),
    "batch-env": ("recompiles", "input x changed size in dim 0: compiled for 8, called with 4", 1, "env"),
    "branch": ("break_sites", "rank 0 broke the graph at diverging_job.py:", None, "env"),
    "dtype": ("graph_structure", "f16", None, "code"),
    "step_k": ("recompiles", "Python value log changed", 1, "module"),
    "data_if": ("graph_count", "rank 1 compiled resume forward_at_", 1, "code"),
    "data_if-env": ("graph_count", "rank 1 compiled resume forward_at_", 1, "env"),
    "extra_step": ("collectives", "these collectives never meet", None, "code"),
}


@pytest.mark.torchrun
# Two of the six seeded cases as controls in the suite (about 20 s each: they run to the
# collective timeout); all six hung without the watch when measured (docs/distributed.md).
@pytest.mark.parametrize("case", ["batch", "data_if"])
def test_without_the_watch_the_seeded_job_hangs_until_the_collective_timeout(case: str, tmp_path: Path) -> None:
    job = _torchrun(tmp_path, case, how="none")
    assert job.returncode != 0
    assert "Timed out waiting" in job.output, job.output[-3000:]
    assert min(job.ended_after()) >= COLLECTIVE_TIMEOUT_S, job.ended_after()
    assert "RankDivergenceError" not in job.output


@pytest.mark.torchrun
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_watch_stops_the_seeded_job_with_its_cause_before_the_timeout(case: str, tmp_path: Path) -> None:
    kind, words, odd, how = CASES[case]
    job = _torchrun(tmp_path, case.split("-")[0], how=how)
    out = job.output
    assert job.returncode != 0
    # On failure, each rank's last error line and the watch's own lines first (a rank's error is
    # often far above the tail of the launcher's traceback), then the tail.
    assert "dynscope.RankDivergenceError:" in out, "\n".join(_errors_of(out) + [out[-2000:]])
    assert "Timed out waiting" not in out
    said = [line for line in out.splitlines() if re.search(rf"(\]:|watch_ranks:)   {kind} \(", line)]
    # On failure, what the watch said (its lines), not the tail of the ranks' tracebacks.
    told = [line for line in out.splitlines() if "RankDivergenceError" in line or re.search(r"\]:   [a-z_]+ \(", line)]
    assert said and any(words in line for line in said), "\n".join(told) or out[-4000:]
    if case != "extra_step":
        assert "your line: diverging_job.py:" in out
    assert "remedy: " in out
    if odd is not None:
        assert f"rank {odd} of 2 ranks diverged at " in out
    # Every rank ended well before the collective timeout.
    ended = job.ended_after()
    assert len(ended) == 2 and max(ended) < COLLECTIVE_TIMEOUT_S / 2, ended
    # Each rank's report so far is saved, and merge reads them after the job.
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
    merged = dynscope.merge(tmp_path)
    assert merged.world_size == 2
    print(f"{case}: stopped after {max(ended):.2f} s (collective timeout {COLLECTIVE_TIMEOUT_S:.0f} s)")


@pytest.mark.torchrun
def test_a_rank_that_runs_one_step_more_says_where_each_rank_waits(tmp_path: Path) -> None:
    job = _torchrun(tmp_path, "extra_step", how="env")
    out = job.output
    # No compile differs: the ranks are found waiting in collectives that never meet.
    assert "found by rank" in out and "while every rank waited in a collective the others never reach" in out
    assert "waits in barrier" in out and "waits in wait_tensor" in out, out[-4000:]
    for r in (0, 1):  # each rank: its last compile, where it waits, its step; its report saved
        line = next(ln for ln in out.splitlines() if ln.startswith(f"[rank {r}] dynscope.watch_ranks:   rank {r}: "))
        assert "last compile " in line and "now waits in " in line and "step i=" in line, line
    assert "step i=3 in run" in out, "rank 1 waits in its extra step"
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
    assert max(job.ended_after()) < COLLECTIVE_TIMEOUT_S / 2


@pytest.mark.torchrun
def test_with_wait_s_over_the_collective_timeout_the_watch_still_stops_first(tmp_path: Path) -> None:
    job = _torchrun(tmp_path, "batch", wait_s=60)
    out = job.output
    assert f"is not well under the process group's collective timeout ({COLLECTIVE_TIMEOUT_S:.0f} s)" in out
    assert "dynscope.RankDivergenceError:" in out and "Timed out waiting" not in out, out[-4000:]
    assert max(job.ended_after()) < COLLECTIVE_TIMEOUT_S / 2


# -- healthy jobs under the watch: never stopped, never slowed ---------------------------------------


@pytest.mark.torchrun
@pytest.mark.parametrize("case", ["fsdp_short", "ddp_short", "helper"])
def test_a_rank_local_recompile_without_collectives_runs_to_the_end_without_waiting(case: str, tmp_path: Path) -> None:
    # FSDP2 / DDP: the last rank's smaller batch at step 3 recompiles its blocks alone (their
    # collectives run in hooks, sized by parameters); helper: rank 0 alone recompiles its own.
    job = _torchrun(tmp_path, case, wait_s=30)
    assert job.done(), job.output[-4000:]
    stats = job.stats()
    assert sorted(stats) == [0, 1]
    for s in stats.values():
        assert s["verdicts"] == [] and not s["off"], s
        # Only a compile that brings a collective waits (helper's sync, which every rank
        # compiles at once); the rank-local recompiles never do.
        assert s["waits"] == (1 if case == "helper" else 0), s
        assert s["waited_s"] < 1.0, s
    assert "RankDivergenceError" not in job.output
    assert not list(tmp_path.glob("rank-*.json"))


@pytest.mark.torchrun
def test_a_first_compile_slower_than_the_wait_is_waited_for_not_declared_missing(tmp_path: Path) -> None:
    # The last rank's first compile takes 9.5 s, over half the 12 s collective timeout and
    # almost 5x the wait; rank 0 compiles sync (an all_reduce) and waits for it: the last rank
    # says it is compiling from the compile's start. (A stretch of half the timeout stopped this
    # healthy job at 6 s, as it did a real one on CI.)
    job = _torchrun(tmp_path, "slow_compile", wait_s=WAIT_S, timeout_s=12, extra=("--slow", "9.5"))
    assert job.done(), job.output[-4000:]
    stats = job.stats()
    assert all(s["verdicts"] == [] for s in stats.values()), stats
    assert stats[0]["waited_s"] > 2 * WAIT_S, "rank 0 waited for the slow compile, past wait_s"


@pytest.mark.torchrun
def test_warn_mode_never_waits(tmp_path: Path) -> None:
    # A compile that brings a collective (sync) and a rank-local recompile (rank 0's helper):
    # with wait_s 30, warn mode waits at neither.
    job = _torchrun(tmp_path, "helper", wait_s=30, on="warn", timeout_s=60)
    assert job.done(), job.output[-4000:]
    stats = job.stats()
    assert all(s["waits"] == 0 and s["waited_s"] == 0.0 and s["checks"] >= 2 for s in stats.values()), stats
    assert max(job.ended_after()) < 15, job.ended_after()


@pytest.mark.torchrun
def test_four_ranks_the_one_short_batch_rank_is_named_and_every_rank_stops(tmp_path: Path) -> None:
    # Four processes start slowly on two cores: a longer collective timeout, the same wait.
    timeout_s = 30.0
    job = _torchrun(tmp_path, "batch", ranks=4, timeout_s=timeout_s)
    out = job.output
    assert "dynscope.RankDivergenceError: rank 3 of 4 ranks diverged at forward" in out, out[-4000:]
    assert "ranks 0-2 made no such compile within" in out
    for r in range(4):  # every rank waited in a collective: its watcher said the verdict and saved
        assert f"[rank {r}] dynscope.watch_ranks: dynscope.RankDivergenceError: rank 3 of 4 ranks diverged" in out
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == [f"rank-{r}.json" for r in range(4)]
    ended = job.ended_after()
    assert len(ended) == 4 and max(ended) < timeout_s / 2, ended
    (rec,) = dynscope.merge(tmp_path).of_kind("recompiles")
    assert rec.ranks == (3,)
    print(f"batch, 4 ranks: stopped after {max(ended):.2f} s (collective timeout {timeout_s:.0f} s)")


def test_a_frame_whose_line_is_not_known_is_said_without_one() -> None:
    # Another thread's frame can say f_lineno None between instructions (Python 3.11+): the
    # watcher once compared it with a number, raised, and turned a rank's watch off mid-job.
    from types import SimpleNamespace

    import dynscope._capture.watch as watch_module

    code = SimpleNamespace(co_filename=str(JOB), co_firstlineno=100, co_name="run")
    frame = SimpleNamespace(f_code=code, f_lineno=None, f_back=None)
    assert watch_module._user_site(frame) == ("diverging_job.py:?", "run", "")  # type: ignore[arg-type]
    assert watch_module._user_position(frame) is None  # type: ignore[arg-type]
