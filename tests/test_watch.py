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
from dynscope._model.watch import Verdict, can_hang, compare, digest, frame_key, unmatched
from dynscope._torch.distributed import raisable_in_compile
from dynscope._torch.logger import trace_logger

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "examples" / "diverging_job.py"
#: The collective timeout of the seeded jobs (gloo), and the watch's wait.
COLLECTIVE_TIMEOUT_S = 12.0
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
    assert can_hang(rep, 1)
    first = _report_of(f, (torch.randn(8, 3),), rank=1)
    assert unmatched(first, rank=1, nth=0, compile_id="3/0", missing=[0], waited_s=2.0).kind == "graph_count"
    assert not can_hang(first, 0), "a frame only one rank compiled, without collectives, is only said"


def test_frame_keys_leave_out_the_folder_and_count_compiles() -> None:
    assert frame_key("forward", "/a/b/train.py", 12, 0) == frame_key("forward", "/c/train.py", 12, 0)
    assert frame_key("forward", "train.py", 12, 0) != frame_key("forward", "train.py", 12, 1)


def _verdict(ranks: tuple[int, ...], world: int) -> Verdict:
    return Verdict(
        found_by=ranks[0], world_size=world, frame="forward", where="train.py:12", compile_id="0/1",
        line="train.py:41: loss = forward(x)",
        divergences=(dynscope.Divergence("recompiles", ranks, "rank 3 recompiled forward (0/1): ..."),),
        remedy="pad the last batch", waited_s=2.0,
    )


def test_a_verdict_travels_as_plain_data_and_says_who_where_and_what_to_do() -> None:
    v = _verdict((3,), 4)
    assert Verdict.from_dict(v.to_dict()) == v
    text = v.message(saved="dynscope-ranks/rank-3.json")
    assert text.startswith("rank 3 of 4 ranks diverged at forward (train.py:12), compile 0/1, found by rank 3")
    assert "  your line: train.py:41: loss = forward(x)" in text and "  remedy: pad the last batch" in text
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
    # (device=r, cuda:r), as tests/test_job_logs.py does.
    from tests.corpus.job_logs import as_rank
    from tests.test_trace_logs import TRACES

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

        rep = _report_of(f, (torch.ones(4),), rank=0)
    finally:
        dist.destroy_process_group()
    from dynscope._model.merge import collectives_of

    (g,) = rep.graphs
    assert not g.nodes and collectives_of(g) == ("all_reduce",)
    assert can_hang(rep, 0), "a compile only some ranks made that issues a collective can hang the job"


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


def test_the_environment_variable_is_read_and_checked() -> None:
    assert watch_from_env({}) is None
    assert watch_from_env({"DYNSCOPE_WATCH_RANKS": "0"}) is None
    with pytest.raises(dynscope.InputError, match="DYNSCOPE_WATCH_WAIT_S"):
        watch_from_env({"DYNSCOPE_WATCH_RANKS": "1", "DYNSCOPE_WATCH_WAIT_S": "soon"})


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
        """Each rank's time from init to its end (the job prints it in a finally)."""
        return [float(s) for s in re.findall(r"rank \d+ ended after ([\d.]+) s", self.output)]


def _torchrun(folder: Path, case: str, *, ranks: int = 2, how: str = "code", timeout_s: float = COLLECTIVE_TIMEOUT_S) -> Job:
    """Run the seeded job; ``how``: "none" (no dynscope), "code" (watch_ranks in the job),
    "env" (DYNSCOPE_WATCH_RANKS=1 with import dynscope), "module" (-m dynscope.watch)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT),
           "DYNSCOPE_WATCH_WAIT_S": str(WAIT_S), "DYNSCOPE_WATCH_FOLDER": str(folder)}
    env.pop("DYNSCOPE_WATCH_RANKS", None)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    args = ["--case", case, "--timeout", str(timeout_s), "--folder", str(folder)]
    if how == "code":
        args += ["--watch", "--wait", str(WAIT_S)]
    if how == "env":
        env["DYNSCOPE_WATCH_RANKS"] = "1"
        args += ["--import-dynscope"]
    cmd = [*launch, *(["-m", "dynscope.watch"] if how == "module" else []), str(JOB), *args]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=folder, check=False)
    return Job(done.returncode, done.stdout + done.stderr, time.monotonic() - started, folder)


#: case -> (the kind said, words it must say, the ranks named odd, how the watch is turned on)
CASES: dict[str, tuple[str, str, tuple[int, ...], str]] = {
    "batch": ("recompiles", "input x changed size in dim 0: compiled for 8, called with 4", (1,), "code"),
    "branch": ("break_sites", "rank 0 broke the graph at diverging_job.py:", (), "env"),
    "dtype": ("graph_structure", "f16", (), "code"),
    "step_k": ("recompiles", "Python value log changed", (1,), "module"),
}


@pytest.mark.torchrun
@pytest.mark.parametrize("case", sorted(CASES))
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
    job = _torchrun(tmp_path, case, how=how)
    out = job.output
    assert job.returncode != 0
    assert "dynscope.RankDivergenceError:" in out, out[-4000:]
    assert "Timed out waiting" not in out
    said = [line for line in out.splitlines() if re.search(rf"\]:   {kind} \(", line)]
    assert said and words in said[0], out[-4000:]
    assert "your line: diverging_job.py:" in out and "loss = forward(x * scale, log)" in out
    assert "remedy: " in out
    if odd:
        assert f"rank {odd[0]} of 2 ranks diverged at forward (diverging_job.py:" in out
    # Every rank ended well before the collective timeout.
    ended = job.ended_after()
    assert len(ended) == 2 and max(ended) < COLLECTIVE_TIMEOUT_S / 2, ended
    # Each rank's report so far is saved, and merge finds the same divergence after the job.
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == ["rank-0.json", "rank-1.json"]
    merged = dynscope.merge(tmp_path)
    assert merged.diverged and kind in {d.kind for d in merged.divergences} | {"recompiles"}
    print(f"{case}: stopped after {max(ended):.2f} s (collective timeout {COLLECTIVE_TIMEOUT_S:.0f} s)")


@pytest.mark.torchrun
def test_four_ranks_the_one_short_batch_rank_is_named_and_every_rank_stops(tmp_path: Path) -> None:
    # Four processes start slowly on two cores: a longer collective timeout, the same wait.
    timeout_s = 30.0
    job = _torchrun(tmp_path, "batch", ranks=4, timeout_s=timeout_s)
    out = job.output
    assert "dynscope.RankDivergenceError: rank 3 of 4 ranks diverged at forward" in out, out[-4000:]
    assert "ranks 0-2 made no such compile within" in out
    # Ranks 0-2 were waiting in a collective: their watcher thread said the verdict and saved.
    for r in (0, 1, 2):
        assert f"[rank {r}] dynscope.watch_ranks: rank 3 of 4 ranks diverged" in out
    assert sorted(p.name for p in tmp_path.glob("rank-*.json")) == [f"rank-{r}.json" for r in range(4)]
    ended = job.ended_after()
    assert len(ended) == 4 and max(ended) < timeout_s / 2, ended
    (rec,) = dynscope.merge(tmp_path).of_kind("recompiles")
    assert rec.ranks == (3,)
    print(f"batch, 4 ranks: stopped after {max(ended):.2f} s (collective timeout {timeout_s:.0f} s)")


@pytest.mark.torchrun
def test_a_clean_four_rank_job_runs_silent_under_the_watch(tmp_path: Path) -> None:
    job = _torchrun(tmp_path, "clean", ranks=4, how="module")
    assert job.returncode == 0, job.output[-4000:]
    assert "dynscope.watch_ranks" not in job.output and "RankDivergence" not in job.output
    assert sorted(re.findall(r"rank (\d+) done", job.output)) == ["0", "1", "2", "3"]
    assert not list(tmp_path.glob("rank-*.json")), "nothing diverged: nothing saved"
