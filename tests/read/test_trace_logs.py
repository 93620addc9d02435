"""Any job's trace (issue 21): TORCH_TRACE logs read into the same report capture() and report() build.

The logs are real: written by PyTorch's own trace formatter, either through the TORCH_TRACE
environment variable (a child process) or, for the corpus, by a ``logging.FileHandler`` with
``TorchLogsFormatter(trace=True)`` on the trace logger (what TORCH_TRACE installs, one file
per program in one child). Recorded logs of torch 2.11, 2.13 and 2.14 are under
tests/traces/torch-*/logs/ (scripts/record_trace_logs.py).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynscope
from dynscope._cli import main
from dynscope._errors import InputError
from dynscope._read.trace_file import TRACE_NOTE, load_trace
from dynscope._torch.trace_log import CUT_SHORT, INTERLEAVED, NOT_UTF8, damaged, read_log, unknown_kind
from tests.corpus.programs import PROGRAMS

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "traces"
CHILD_TIMEOUT_S = 300


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_TRACE", "TORCH_LOGS"))}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", **extra}


def signature(rep: Any) -> dict[str, Any]:
    """What capture(), report() and load_trace() must agree on for one program."""
    return {
        "graphs": [
            (g.compile_id, g.frame, g.filename, g.lineno, g.op_count, g.op_counts, g.split_by,
             [(i.kind, i.shape, i.dtype) for i in g.inputs])
            for g in rep.graphs
        ],
        "events": [(e.compile_id, e.filename, e.lineno, e.gave_up) for e in rep.break_events],
        "sites": [(b.filename, b.lineno, b.category, b.count, b.gb_type) for b in rep.breaks],
        "frames": [(f.compile_id, f.function, f.filename, f.lineno, f.status, f.op_count, f.graph_ids) for f in rep.frames],
        "recompiles": [(r.compile_id, r.frame, r.raw_reasons) for r in rep.recompiles],
    }


# -- the corpus, both ways -------------------------------------------------------------------

_CORPUS_CHILD = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path

    import torch
    from torch._logging._internal import TorchLogsFormatter, trace_log

    import dynscope
    from dynscope._capture.capture import _MISSING, normalise_calls
    from tests.corpus.programs import PROGRAMS

    out = Path(sys.argv[1])
    for prog in PROGRAMS:
        torch._dynamo.reset()
        model, calls = prog.make()
        # What TORCH_TRACE installs on the trace logger: a file with PyTorch's trace formatter.
        handler = logging.FileHandler(out / f"{prog.name}.log", encoding="utf-8")
        handler.setFormatter(TorchLogsFormatter(trace=True))
        trace_log.addHandler(handler)
        try:
            with dynscope.capture() as cap:
                compiled = torch.compile(model, backend="eager")
                for args, kwargs in normalise_calls(model, _MISSING, calls):
                    compiled(*args, **kwargs)
        finally:
            trace_log.removeHandler(handler)
            handler.close()
        cap.report.save(out / f"{prog.name}.json")
    """
)


@pytest.fixture(scope="module")
def corpus_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each corpus program compiled with the user's own backend under capture(), in one child
    process, its trace written to a log beside the capture's report."""
    out = tmp_path_factory.mktemp("corpus-logs")
    done = subprocess.run(
        [sys.executable, "-c", _CORPUS_CHILD, str(out)], cwd=ROOT, env=_child_env(),
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("prog", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_corpus_log_capture_and_report_agree(prog: Any, corpus_logs: Path) -> None:
    from_log = load_trace(corpus_logs / f"{prog.name}.log")
    captured = dynscope.load(corpus_logs / f"{prog.name}.json")
    model, calls = prog.make()
    reported = dynscope.report(model, calls=calls)
    assert isinstance(from_log, dynscope.Report)
    assert signature(from_log) == signature(captured)
    want = signature(reported)
    got = signature(from_log)
    # report() reads each graph from dynscope's backend, the log from its printed code:
    # the same graphs, ops and input shapes.
    assert got == want
    assert from_log.graph_count == reported.graph_count and from_log.break_count == reported.break_count
    assert TRACE_NOTE in from_log.notes and TRACE_NOTE not in reported.notes
    assert from_log.unparsed == 0, from_log.unparsed_kinds


# -- a real TORCH_TRACE run --------------------------------------------------------------------

_TRACED_PROGRAM = textwrap.dedent(
    """
    import torch

    def step(x, n):
        y = torch.sin(x) * n
        print("logged")                # a graph break
        if y.sum() > 0:                # a data-dependent branch
            return y.cos()
        return y + 1

    compiled = torch.compile(step, backend="eager")
    for size in (4, 5, 6):             # 4 -> 5: a recompile that makes the size dynamic
        compiled(torch.ones(size, 3), 2)
    """
)


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder TORCH_TRACE named for a small program run in a child process."""
    folder = tmp_path_factory.mktemp("traced")
    script = folder / "prog.py"
    script.write_text(_TRACED_PROGRAM, encoding="utf-8")
    logs = folder / "logs"
    done = subprocess.run(
        [sys.executable, str(script)], cwd=folder, env=_child_env(TORCH_TRACE=str(logs)),
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return logs


_FAILING_PROGRAM = textwrap.dedent(
    """
    import sys
    import torch
    import torch._dynamo
    import dynscope

    torch._dynamo.config.recompile_limit = 1

    def scale(x):
        return x * 2

    with dynscope.capture() as cap:
        compiled = torch.compile(scale, backend="eager")
        for dtype in (torch.float32, torch.float64):   # the second compile hits the limit
            compiled(torch.ones(3, dtype=dtype))
    cap.report.save(sys.argv[1])
    """
)


@pytest.mark.heavy
def test_a_frame_that_hit_the_recompile_limit_reads_as_capture_says(tmp_path: Path) -> None:
    script = tmp_path / "limit.py"
    script.write_text(_FAILING_PROGRAM, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "captured.json")], cwd=tmp_path,
        env=_child_env(TORCH_TRACE=str(tmp_path / "logs")),
        capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rep = load_trace(tmp_path / "logs")
    assert isinstance(rep, dynscope.Report)
    failed = [f for f in rep.frames if f.status == "failed"]
    assert len(failed) == 1 and "recompile" in failed[0].fail_reason.lower()
    assert any("recompile limit hit in scale" in n for n in rep.notes)
    assert rep.recompile_count == 1 and rep.graph_count == 1
    assert signature(rep) == signature(dynscope.load(tmp_path / "captured.json"))


#: A real log (torch 2.13, scripts/record_trace_logs.py): 4 graphs, 3 break events, a recompile.
SAMPLE = TRACES / "torch-2.13" / "logs" / "corpus-nested_break.log"


def _log_of(folder: Path) -> Path:
    (log,) = folder.glob("dedicated_log_torch_trace_*.log")
    return log


@pytest.mark.heavy
def test_folder_of_one_process_is_a_report(traced: Path) -> None:
    rep = load_trace(traced)
    assert isinstance(rep, dynscope.Report)
    assert rep.graph_count == 6  # 3 pieces, compiled twice (static, then dynamic)
    assert rep.break_count == 4 and len(rep.breaks) == 2
    assert {b.category for b in rep.breaks} == {"logging/print side effect", "data-dependent branch"}
    assert rep.recompile_count == 3  # each of the 3 frames, once (4 -> 5)
    assert all("changed size" in " ".join(r.explained) for r in rep.recompiles)
    assert rep.torch_version and rep.rank == 0 and rep.world_size == 1
    # A dynamic graph's inputs say the size its symbol ran at.
    dynamic = [i for g in rep.graphs for i in g.inputs if i.kind == "tensor" and any(isinstance(d, str) for d in i.shape)]
    assert dynamic and all(i.ran_at == (5, 3) for i in dynamic)
    assert rep.notes.count(TRACE_NOTE) == 1
    assert rep == load_trace(_log_of(traced)), "the folder and its one file read the same"


def test_cli_trace_show_render_and_gates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traced = tmp_path / "trace"  # the folder TORCH_TRACE named, for one process
    traced.mkdir()
    log = traced / "dedicated_log_torch_trace_ab12cd.log"
    shutil.copy(SAMPLE, log)
    assert main(["trace", str(traced), "-o", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "4 graphs, 3 graph breaks at 1 site, 1 recompile" in out and "wrote " in out
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert page.count("read from PyTorch&#x27;s trace log alone") + page.count("read from PyTorch's trace log alone") == 1
    assert dynscope.load(tmp_path / "out" / "report.json").break_count == 3
    assert main(["trace", str(traced), "--fail-on-break"]) == 1
    assert "3 graph breaks (--fail-on-break)" in capsys.readouterr().err
    assert main(["trace", str(traced), "--max-recompiles", "1"]) == 0
    assert main(["trace", str(traced), "--max-recompiles", "0"]) == 1
    capsys.readouterr()
    assert main(["trace", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["graphs"]
    assert main(["show", str(log)]) == 0
    assert "4 graphs, 3 graph breaks" in capsys.readouterr().out
    assert main(["diff", str(log), str(log)]) == 0
    assert main(["diff", str(TRACES / "torch-2.13" / "logs" / "corpus-mlp_no_break.log"), str(log)]) == 1  # worse
    capsys.readouterr()
    assert main(["render", str(traced), "-o", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "index.html").exists()
    capsys.readouterr()
    # Bad paths: one line on stderr, exit 2, never a traceback.
    assert main(["trace", str(tmp_path / "nowhere")]) == 2
    assert "no such trace log or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["trace", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "holds no TORCH_TRACE log" in err and "Traceback" not in err
    assert main(["show", str(tmp_path / "empty")]) == 2
    assert "no TORCH_TRACE log" in capsys.readouterr().err


# -- bad logs keep what could be read ------------------------------------------------------------

def test_truncated_last_record_keeps_the_rest(tmp_path: Path) -> None:
    data = SAMPLE.read_bytes()
    # Cut inside the payload of the last break record: a job killed mid-write.
    last_break = data.rindex(b'"dynamo_graph_break_reason"')
    record_start = data.rindex(b"\n", 0, last_break) + 1
    before = tmp_path / "before.log"
    before.write_bytes(data[:record_start])
    cut = tmp_path / "cut.log"
    cut.write_bytes(data[: data.index(b"\n\t", last_break) + 40])
    rep, kept = load_trace(cut), load_trace(before)
    assert isinstance(rep, dynscope.Report) and isinstance(kept, dynscope.Report)
    # Everything before the cut record is kept; the cut record is counted, not read.
    assert signature(rep) == signature(kept) and rep.break_count == load_trace(SAMPLE).break_count - 1
    assert dict(rep.unparsed_kinds).get(CUT_SHORT) == 1 and kept.unparsed == 0
    # Cut inside the metadata line of a record.
    meta = tmp_path / "meta.log"
    meta.write_bytes(data[: last_break + 10])
    assert dict(load_trace(meta).unparsed_kinds).get(CUT_SHORT) == 1
    # Cut right after a whole record that has no payload: nothing lost.
    end_of_line = data.index(b"\n", data.index(b'{"dynamo_start"')) + 1
    clean = tmp_path / "clean.log"
    clean.write_bytes(data[:end_of_line])
    assert load_trace(clean).unparsed == 0


def test_interleaved_unknown_and_non_utf8_are_counted(tmp_path: Path) -> None:
    lines = SAMPLE.read_bytes().splitlines(keepends=True)
    whole = load_trace(SAMPLE)
    hostile = []
    for i, line in enumerate(lines):
        hostile.append(line)
        if i == 5:
            hostile.append(b"Traceback (most recent call last): another stream's stderr\n")
        if i == 9:
            hostile.append(b'V1201 10:00:00.000000 1 torch/x.py:1] {"brand_new_record": {}, "frame_id": 0}\n')
    at = next(i for i, ln in enumerate(hostile) if b"dynamo_graph_break_reason" in ln)
    hostile[at + 2] = b"\t\xff\xfe not utf-8 \xc3\x28\n"  # inside a break's payload
    path = tmp_path / "hostile.log"
    path.write_bytes(b"".join(hostile))
    rep = load_trace(path)
    kinds = dict(rep.unparsed_kinds)
    assert kinds.get(INTERLEAVED) == 1
    assert kinds.get(unknown_kind("brand_new_record")) == 1
    assert kinds.get(NOT_UTF8) == 1
    # The bytes changed after PyTorch wrote them: the break's payload fails its MD5, said so.
    assert kinds.get(damaged("dynamo_graph_break_reason")) == 1
    assert rep.graph_count == whole.graph_count and rep.break_count == whole.break_count
    assert "\ufffd" in " ".join(b.torch_text for b in rep.breaks)


def test_gzip_copy_reads_the_same(tmp_path: Path) -> None:
    gz = tmp_path / "copied.log.gz"
    gz.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    assert signature(load_trace(gz)) == signature(load_trace(SAMPLE))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=st.integers(min_value=1, max_value=5000))
def test_any_read_size_cuts_records_the_same(block: int) -> None:
    log = SAMPLE
    assert read_log(log, block_size=block).events == read_log(log).events


def test_not_a_log_and_empty_folders_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such trace log"):
        load_trace(tmp_path / "missing")
    with pytest.raises(InputError, match="holds no TORCH_TRACE log"):
        load_trace(tmp_path)
    saved = tmp_path / "report.json"
    saved.write_text("{}", encoding="utf-8")
    with pytest.raises(InputError, match="not a TORCH_TRACE log.*dynscope.load"):
        load_trace(saved)


def test_big_skipped_payload_is_streamed(tmp_path: Path) -> None:
    """A log is never read whole: a 64 MB payload of a record dynscope does not read costs
    the reader about one read block, not the payload."""
    big = tmp_path / "big.log"
    line = b"\t" + b"x" * 1023 + b"\n"
    with big.open("wb") as f:
        f.write(SAMPLE.read_bytes())
        f.write(b'V1201 10:00:00.000000 1 torch/x.py:1] {"artifact": {"name": "inductor_aot_wrapper_code"}, "has_payload": "0"}\n')
        for _ in range(64 * 1024):
            f.write(line)
    tracemalloc.start()
    try:
        rep = load_trace(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rep.graph_count == load_trace(SAMPLE).graph_count
    assert peak < 24 << 20, f"reading a 64 MB log peaked at {peak / 2**20:.1f} MB"


# -- recorded logs of three releases ---------------------------------------------------------------

RECORDED = sorted(TRACES.glob("torch-*/logs/corpus-*.log"))


@pytest.mark.parametrize("log", RECORDED, ids=[f"{p.parent.parent.name}/{p.stem}" for p in RECORDED])
def test_recorded_corpus_logs_match_the_stored_records(log: Path) -> None:
    """Each release's log reads to what the corpus pins for that release (counts, sites and
    categories, as tests/read/test_recorded_traces.py checks the stored records) and to the counts
    of that release's stored records."""
    from tests.read.test_recorded_traces import _corpus_expected, _report

    version, name = log.parent.parent.name, log.stem.removeprefix("corpus-")
    prog = next(p for p in PROGRAMS if p.name == name)
    rep = load_trace(log)
    assert isinstance(rep, dynscope.Report)
    assert rep.unparsed == 0, rep.unparsed_kinds
    assert rep.torch_version.startswith(version.removeprefix("torch-"))
    want = _corpus_expected(version, prog)
    assert rep.graph_count == want["graphs"] and rep.break_count == want["breaks"]
    assert len(rep.breaks) == want["sites"] and rep.recompile_count == want["recompiles"]
    assert sorted((os.path.basename(b.filename), b.category, b.count) for b in rep.breaks) == want["categories"]
    stored = _report(version, f"corpus-{name}")
    assert (rep.graph_count, rep.break_count, rep.recompile_count, len(rep.frames)) == (
        stored.graph_count, stored.break_count, stored.recompile_count, len(stored.frames))


DDP_FOLDERS = sorted(TRACES.glob("torch-*/logs/ddp-2ranks"))


@pytest.mark.parametrize("folder", DDP_FOLDERS, ids=[p.parent.parent.name for p in DDP_FOLDERS])
def test_recorded_ddp_job_merges_with_splits_and_divergences(folder: Path) -> None:
    merged = load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert merged.ranks == (0, 1) and merged.world_size == 2
    r0, r1 = merged.reports
    # DDP's optimizer split rank 0's one graph at 3 buckets: 3 pieces, not breaks.
    assert r0.break_count == 0 and r0.graph_count == 3
    assert all(g.split_by == "ddp_bucket" for g in r0.graphs)
    # Rank 1's plants: a print (a break only rank 1 has) and a smaller batch (a recompile).
    assert r1.break_count >= 1 and r1.recompile_count >= 1
    kinds = {d.kind: d.ranks for d in merged.divergences}
    assert kinds.get("break_sites") == (1,) and kinds.get("recompiles") == (1,)
    assert merged.notes[0].startswith(TRACE_NOTE)


def test_folder_with_a_missing_rank_and_a_duplicate(tmp_path: Path) -> None:
    if not DDP_FOLDERS:
        pytest.fail("no recorded ddp-2ranks folder under tests/traces (scripts/record_trace_logs.py)")
    src = DDP_FOLDERS[0]
    (r0,) = src.glob("*_rank_0_*.log")
    (r1,) = src.glob("*_rank_1_*.log")
    shutil.copy(r0, tmp_path / r0.name)
    shutil.copy(r1, tmp_path / r1.name.replace("_rank_1_", "_rank_2_"))
    text = (tmp_path / r1.name.replace("_rank_1_", "_rank_2_")).read_text(encoding="utf-8")
    (tmp_path / r1.name.replace("_rank_1_", "_rank_2_")).write_text(text.replace('"rank": 1,', '"rank": 2,'), encoding="utf-8")
    merged = load_trace(tmp_path)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert merged.ranks == (0, 2) and merged.world_size == 3
    assert merged.missing == (((1, 1),), 1) and merged.written == "trace log"
    assert "note: rank 1 of world size 3 wrote no trace log (crashed, hung, or saved elsewhere)" in merged.summary()
    # A second log of rank 0 with the same process and start time: a copy, left out and said
    # (issue 31: a folder is never refused while its logs are readable).
    shutil.copy(r0, tmp_path / r0.name.replace("_rank_0_", "_rank_0_again"))
    again = load_trace(tmp_path)
    assert isinstance(again, dynscope.MultiRankReport) and again.ranks == (0, 2)
    assert any("1 log left out as a copy" in n for n in again.notes), again.notes


def test_folder_of_separate_processes_reads_each_as_a_run(tmp_path: Path) -> None:
    for name in ("dedicated_log_torch_trace_a.log", "dedicated_log_torch_trace_b.log"):
        shutil.copy(SAMPLE, tmp_path / name)
    one = load_trace(tmp_path)  # the same process twice: one log and a copy
    assert isinstance(one, dynscope.Report) and any("left out as a copy" in n for n in one.notes)
    shutil.copy(TRACES / "torch-2.13" / "logs" / "corpus-print_break.log", tmp_path / "dedicated_log_torch_trace_c.log")
    two = load_trace(tmp_path)  # two processes: each a run, the latest shown, both named
    assert isinstance(two, dynscope.Report)
    assert any("holds 2 runs" in n and "one process" in n for n in two.notes), two.notes


@pytest.mark.heavy  # a fresh Python
@pytest.mark.parametrize("version", sorted(p.parent.parent.name for p in TRACES.glob("torch-*/logs/inductor-train.log")))
def test_inductor_log_reads_kernels_the_same_without_torch(version: str) -> None:
    """AOT graphs and Inductor kernels (with the ops each computes) from the trace alone, the
    same in a fresh process that never imports torch as in this one (torch loaded)."""
    log = TRACES / version / "logs" / "inductor-train.log"
    code = (
        "import json, sys, dynscope\n"
        f"rep = dynscope.load_trace({str(log)!r})\n"
        "print(json.dumps([[g.id, [[k.name, list(k.aten_ops), k.graph] for k in g.lowering.kernels]]"
        " for g in rep.graphs if g.lowering is not None]))\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    kernels, imported = done.stdout.splitlines()
    assert imported == "False"
    rep = load_trace(log)
    here = [[g.id, [[k.name, list(k.aten_ops), k.graph] for k in g.lowering.kernels]] for g in rep.graphs if g.lowering is not None]
    assert json.loads(kernels) == here
    assert len(here) == 2 and all(ks for _, ks in here)  # both graphs of the train step: forward and backward kernels
    assert {k[2] for _, ks in here for k in ks} >= {"forward", "backward"}
    assert all(k[1] for _, ks in here for k in ks), "every kernel names the ops it computes"
    # Compile phases, cache results, AOT graphs and provenance (each kernel's user lines).
    assert dict(rep.compile_time.phases).get("compile", 0) > 0 and dict(rep.compile_time.phases).get("aot_autograd", 0) > 0
    for g in rep.graphs:
        low = g.lowering
        assert low is not None and low.source == "trace"
        assert low.forward is not None and low.backward is not None and low.saved_for_backward is not None
        assert ("aot_autograd", "", "miss") in low.cache and low.code and low.backward_code
        assert all(k.source_lines and k.source_lines[0][0].endswith("record_trace_logs.py") for k in low.kernels)


def _job_folder(folder: Path, ranks: int, odd: Callable[[int], bool]) -> tuple[int, ...]:
    """A job of ``ranks`` ranks made from the recorded 2-rank job (torch 2.13): rank 0's log
    for most ranks, rank 1's (a print break and a recompile) where ``odd``; the odd ranks."""
    src = TRACES / "torch-2.13" / "logs" / "ddp-2ranks"
    (r0,) = src.glob("*_rank_0_*.log")
    (r1,) = src.glob("*_rank_1_*.log")
    texts = {0: r0.read_text(encoding="utf-8"), 1: r1.read_text(encoding="utf-8")}
    for r in range(ranks):
        orig = 1 if odd(r) else 0
        (folder / f"dedicated_log_torch_trace_rank_{r}_x.log").write_text(
            texts[orig].replace(f'"rank": {orig},', f'"rank": {r},'), encoding="utf-8")
    return tuple(r for r in range(ranks) if odd(r))


@pytest.mark.heavy
def test_256_ranks_read_in_parallel_and_the_page_opens_on_the_diverging_ranks(tmp_path: Path) -> None:
    odd = _job_folder(tmp_path, 256, lambda r: r % 37 == 5)
    merged = load_trace(tmp_path)  # 27 MB: read by worker processes
    assert isinstance(merged, dynscope.MultiRankReport)
    assert merged.ranks == tuple(range(256)) and merged.world_size == 256
    assert {d.kind for d in merged.divergences} >= {"graph_count", "break_sites", "recompiles"}
    assert all(d.ranks == odd for d in merged.divergences)
    assert load_trace(tmp_path, jobs=1) == merged, "read in this process or in workers: the same report"
    page = merged.to_html()
    assert len(page.encode("utf-8")) < 1_500_000
    first_column = page.split("<h2>Ranks</h2>")[1].split("<th>")[2]
    assert first_column.startswith("ranks 5, 42, 79, 116, 153, 190, 227 *"), first_column[:80]
    summary = merged.summary()
    assert summary.splitlines()[0] == "dynscope: 256 ranks of world size 256 (0-255)"
    assert max(len(line) for line in summary.splitlines()) < 600  # ranks as runs, not 256 columns


def test_a_small_job_keeps_one_column_a_rank(tmp_path: Path) -> None:
    _job_folder(tmp_path, 4, lambda r: r == 2)
    merged = load_trace(tmp_path)
    assert isinstance(merged, dynscope.MultiRankReport)
    header = merged.summary().splitlines()
    # The rank that differs is starred in both views.
    assert any(line.split() == ["rank", "0", "rank", "1", "rank", "2", "*", "rank", "3"] for line in header), header
    assert "<th>rank 2 *</th>" in merged.to_html()


@given(st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=60))
def test_rank_runs_say_every_rank(ranks: set[int]) -> None:
    from dynscope._format import rank_ranges

    text = rank_ranges(ranks, limit=1000)
    said: set[int] = set()
    for word in text.split(", "):
        a, _, b = word.partition("-")
        said.update(range(int(a), int(b or a) + 1))
    assert said == ranks
    short = rank_ranges(ranks, limit=3)
    assert short == text or short.endswith(f"({len(ranks)} ranks)")


_RECORDED_LOG = TRACES / "torch-2.14" / "logs" / "corpus-nested_break.log"


@settings(max_examples=20, deadline=None)
@given(
    cut=st.floats(min_value=0.0, max_value=1.0),
    junk=st.lists(st.tuples(st.floats(min_value=0.0, max_value=1.0), st.binary(max_size=80)), max_size=6),
)
def test_a_mangled_log_reads_without_raising(tmp_path_factory: pytest.TempPathFactory, cut: float, junk: list[tuple[float, bytes]]) -> None:
    """Any prefix of a real log, with any bytes put in at any places, reads into a report
    (what cannot be read counted), never an exception."""
    data = bytearray(_RECORDED_LOG.read_bytes())
    for where, bytes_ in junk:
        at = int(where * len(data))
        data[at:at] = bytes_
    path = tmp_path_factory.mktemp("mangled") / "dedicated_log_torch_trace_x.log"
    path.write_bytes(b'V1201 10:00:00.000000 1 torch/x.py:1] {"str": ["f", 0]}\n' + bytes(data[: int(cut * len(data))]))
    rep = load_trace(path)
    assert isinstance(rep, dynscope.Report)
    assert rep.unparsed == sum(n for _, n in rep.unparsed_kinds)


def test_renamed_and_compressed_rank_logs_keep_their_ranks(tmp_path: Path) -> None:
    """Logs copied off a cluster under other names, some gzipped: the rank is the records' own."""
    src = TRACES / "torch-2.14" / "logs" / "ddp-2ranks"
    (r0,) = src.glob("*_rank_0_*.log")
    (r1,) = src.glob("*_rank_1_*.log")
    shutil.copy(r0, tmp_path / "node-a.log")
    (tmp_path / "node-b.log.gz").write_bytes(gzip.compress(r1.read_bytes()))
    merged = load_trace(tmp_path)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert merged.ranks == (0, 1)
    assert [(d.kind, d.ranks) for d in merged.divergences] == [(d.kind, d.ranks) for d in load_trace(src).divergences]


@pytest.mark.heavy  # a fresh Python
def test_workers_start_from_a_script_without_a_main_guard(tmp_path: Path) -> None:
    """Rank logs read in worker processes from a plain script (no ``if __name__ ==
    "__main__":``, which multiprocessing's spawn would run again in every worker)."""
    script = tmp_path / "read.py"
    folder = TRACES / "torch-2.13" / "logs" / "ddp-2ranks"
    script.write_text(
        "import dynscope\n"
        f"m = dynscope.load_trace({str(folder)!r}, jobs=2)\n"
        "print(m.ranks, [d.kind for d in m.divergences])\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    merged = load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert done.stdout.strip() == f"{merged.ranks} {[d.kind for d in merged.divergences]}"
