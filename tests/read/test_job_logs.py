"""Logs as real jobs and other tools leave them (issue 31): a payload damaged mid-log,
rank logs renamed, folders holding more than one run, copies.

Every log here is a real one (tests/traces/torch-2.13/logs, written by PyTorch's own trace
formatter: scripts/record_trace_logs.py), changed the way a copy, a rename or a rerun
changes it: bytes flipped inside one payload, a new file name, the first-record times and
process ids of a second run.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import TYPE_CHECKING

import pytest

import dynscope
from dynscope._cli import main
from dynscope._read.trace_file import trace_runs
from dynscope._torch.trace_log import damaged, log_stamp, rank_from_name

if TYPE_CHECKING:
    from pathlib import Path

from tests.read.test_trace_logs import TRACES

LOGS = TRACES / "torch-2.13" / "logs"
DDP = sorted((LOGS / "ddp-2ranks").glob("*.log"))


def test_a_damaged_payload_mid_log_is_counted_by_kind(tmp_path: Path) -> None:
    lines = (LOGS / "inductor-train.log").read_bytes().splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if b'{"chromium_event"' in line and not line.startswith(b"\t")]
    at = starts[len(starts) // 2] + 1  # the first payload line of a chromium_event mid-log
    assert lines[at].startswith(b"\t{")
    lines[at] = lines[at].replace(b'"ph"', b'"pH"', 1) if b'"ph"' in lines[at] else lines[at][:-2] + b"!\n"
    broken = tmp_path / "broken.log"
    broken.write_bytes(b"".join(lines))
    whole, rep = dynscope.load_trace(LOGS / "inductor-train.log"), dynscope.load_trace(broken)
    kinds = dict(rep.unparsed_kinds)
    assert kinds == {damaged("chromium_event"): 1}, kinds
    assert dict(whole.unparsed_kinds) == {}
    assert (rep.graph_count, rep.break_count) == (whole.graph_count, whole.break_count)
    assert any("chromium_event" in w and "MD5" in w for w in rep.summary().splitlines()), rep.summary()


@pytest.mark.parametrize("name", ["dedicated_log_torch_trace_rank_{r}.log", "rank{r}.log", "job-rank-{r}.log.gz"])
def test_renamed_rank_logs_keep_their_ranks(tmp_path: Path, name: str) -> None:
    import gzip

    folder = tmp_path / "job"
    folder.mkdir()
    for src in DDP:
        rank = rank_from_name(src)
        assert rank is not None
        # The records' own "rank" field taken out: the name is all that says which rank it is.
        data = re.sub(rb'"rank": \d+, ', b"", src.read_bytes())
        target = folder / name.format(r=rank)
        target.write_bytes(gzip.compress(data) if target.suffix == ".gz" else data)
    merged = dynscope.load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert [r.rank for r in merged.reports] == [0, 1]
    assert {d.kind for d in merged.divergences} >= {"break_sites", "recompiles"}  # rank 1's plants


def _second_run(src: Path, dst: Path, *, hours: int, pid_shift: int) -> None:
    """``src`` as a rerun would write it: every record's time ``hours`` later, another pid."""
    def shift(m: re.Match[bytes]) -> bytes:
        hour = (int(m.group(2)) + hours) % 24
        return m.group(1) + b"%02d" % hour + m.group(3) + b"%d" % (int(m.group(4)) + pid_shift) + b" "

    data = re.sub(rb"(?m)^([VIWEC]\d{4} )(\d\d)(:\d\d:\d\d\.\d+ +)(\d+) ", shift, src.read_bytes())
    dst.write_bytes(data)


def test_a_folder_with_two_runs_reads_the_latest_and_says_how_it_grouped(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    folder.mkdir()
    for src in DDP:
        shutil.copy(src, folder / src.name)
        _second_run(src, folder / src.name.replace(".log", "x.log"), hours=1, pid_shift=1000)
    # A copy of one log under another name (a tool that copied the folder into itself).
    shutil.copy(DDP[0], folder / "dedicated_log_torch_trace_rank_0_copy.log")
    latest = dynscope.load_trace(folder)
    assert isinstance(latest, dynscope.MultiRankReport) and [r.rank for r in latest.reports] == [0, 1]
    said = " ".join(latest.notes)
    first = log_stamp(DDP[0])
    assert first is not None
    assert "holds 2 runs" in said and "run 0: ranks 0, 1" in said and "run 1: ranks 0, 1" in said, said
    assert f"pids {first.pid}" in said or str(first.pid) in said
    assert "Shown: run 1 (the run with the most ranks (2), the latest)" in said and "--run 0" in said
    assert "1 log left out as a copy" in said and ("rank_0_copy.log" in said or DDP[0].name in said)
    earlier = dynscope.load_trace(folder, run=0)
    assert isinstance(earlier, dynscope.MultiRankReport)
    assert [d.kind for d in earlier.divergences] == [d.kind for d in latest.divergences]
    with pytest.raises(dynscope.InputError, match=r"run=5: .* holds 2 runs \(run 0: ranks 0, 1"):
        dynscope.load_trace(folder, run=5)


def test_cli_trace_picks_a_run_and_writes_a_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "trace"
    folder.mkdir()
    for src in DDP:
        shutil.copy(src, folder / src.name)
        _second_run(src, folder / src.name.replace(".log", "-rerun.log"), hours=2, pid_shift=7)
    assert main(["trace", str(folder), "--run", "0", "-o", str(tmp_path / "page"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "holds 2 runs" in out and "Shown: run 0" in out
    assert (tmp_path / "page" / "index.html").is_file()
    assert main(["trace", str(folder), "--run", "3", "--quiet"]) == 2
    assert "run=3" in capsys.readouterr().err


def test_a_single_process_log_beside_a_job_is_a_run_of_its_own(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    folder.mkdir()
    for src in DDP:
        shutil.copy(src, folder / src.name)
    shutil.copy(LOGS / "corpus-print_break.log", folder / "dedicated_log_torch_trace_launcher.log")
    runs, _ = trace_runs(folder)
    assert sorted(len(r.files) for r in runs) == [1, 2]
    rep = dynscope.load_trace(folder)  # never refused: the latest run, the others named
    assert rep.notes and "holds 2 runs" in " ".join(rep.notes)


def _cuda_job(folder: Path, src: Path, ranks: int = 2) -> Path:
    from tests.corpus.job_logs import as_rank

    folder.mkdir()
    for r in range(ranks):
        as_rank(src, folder / f"dedicated_log_torch_trace_rank_{r}_abc{r}.log", r)
    return folder


def test_cuda_ranks_of_a_clean_job_do_not_diverge(tmp_path: Path) -> None:
    job = _cuda_job(tmp_path / "job", LOGS / "corpus-mlp_no_break.log", ranks=4)
    texts = [p.read_text(encoding="utf-8") for p in sorted(job.glob("*.log"))]
    assert "device=0" in texts[0] and "device=1" in texts[1] and "cuda:3" in texts[3]  # really rank-local
    merged = dynscope.load_trace(job)
    assert isinstance(merged, dynscope.MultiRankReport) and merged.ranks == (0, 1, 2, 3)
    assert merged.divergences == (), [d.detail for d in merged.divergences]
    assert all(dict(r.unparsed_kinds) == {} for r in merged.reports)  # every MD5 written anew holds
    assert main(["trace", str(job), "--fail-on-divergence", "--quiet"]) == 0


def test_a_real_guard_difference_on_cuda_ranks_still_shows(tmp_path: Path) -> None:
    from tests.corpus.job_logs import as_rank, rewrite

    job = _cuda_job(tmp_path / "job", LOGS / "corpus-mlp_no_break.log")
    # Rank 1 saw another batch size: its tensor guard says so (as a shorter last batch would).
    one = job / "dedicated_log_torch_trace_rank_1_abc1.log"
    as_rank(LOGS / "corpus-mlp_no_break.log", one, 1)
    rewrite(one, one, meta=lambda m: m, payload=lambda kind, t: t.replace("size=[4, 8]", "size=[3, 8]")
            if kind == "dynamo_cpp_guards_str" else t)
    merged = dynscope.load_trace(job)
    guards = [d for d in merged.divergences if d.kind == "guards"]
    assert guards and "size=[3, 8]" in guards[0].detail, [d.detail for d in merged.divergences]
    assert main(["trace", str(job), "--fail-on-divergence", "--quiet"]) == 1


def test_an_aotinductor_log_is_an_ahead_of_time_compile_with_its_graph_and_kernels(tmp_path: Path) -> None:
    # tests/traces/torch-2.13/logs/aoti-export.log: scripts/record_trace_logs.py aoti-export
    rep = dynscope.load_trace(LOGS / "aoti-export.log")
    assert rep.graph_count == 1 and rep.break_count == 0 and rep.recompile_count == 0
    (g,) = rep.graphs
    assert g.frame.startswith("AOTInductor compile") and g.lowering is not None and g.lowering.mode == "aot"
    assert dict(g.op_counts) == {"aten.addmm": 2, "aten.permute": 2, "aten.relu": 1}  # the exported MLP
    kinds = sorted(k.kind for k in g.lowering.kernels)
    assert kinds == ["cpp", "extern", "extern"], g.lowering.kernels
    assert [k.name for k in g.lowering.kernels if k.kind == "extern"] == ["aten.addmm", "aten.addmm"]
    assert g.lowering.forward is not None and g.lowering.forward.kind == "inference"
    assert "AOTInductorModel" in g.lowering.code
    (frame,) = rep.frames
    assert frame.graph_ids == (g.id,) and frame.status == "compiled"
    assert rep.compile_time.total_s > 1.0  # the compile_fx_aot step: the C++ compile took seconds
    phases = dict(rep.compile_time.phases)
    assert set(phases) - {"backend"} == {"aot_autograd", "lowering", "codegen", "compile"} and phases["compile"] > 1.0
    # compile_fx_aot's time in no step of its own is the backend's other work: small.
    assert phases.get("backend", 0.0) < 0.05 * rep.compile_time.total_s
    text = rep.summary()
    assert "over 1 ahead-of-time compile" in text and "0 graphs" not in text
    out = tmp_path / "page"
    assert main(["trace", str(LOGS / "aoti-export.log"), "-o", str(out), "--quiet"]) == 0
    assert (out / "graph_0_inference.svg").is_file()


_ALL_REDUCE = "torch.ops._c10d_functional.all_reduce_.default"
_ALL_GATHER = "torch.ops._c10d_functional.all_gather_into_tensor.default"


def _inductor_job(folder: Path, *, rank1_schedule: list[str], rank1_order: list[str], rank1_hits: bool,
                  rank1_stride: bool) -> Path:
    """Two CUDA ranks of the recorded Inductor train step, each with the collective schedule
    and graph execution records PyTorch writes, rank 1 changed as asked."""
    from tests.corpus.job_logs import as_rank, insert, rewrite

    folder.mkdir()
    src = LOGS / "inductor-train.log"
    for rank in (0, 1):
        path = folder / f"dedicated_log_torch_trace_rank_{rank}_x{rank}.log"
        as_rank(src, path, rank)
        schedule = [_ALL_REDUCE, _ALL_GATHER] if rank == 0 else rank1_schedule
        first_code = {"done": False}

        def before(kind: str, meta: dict, first_code: dict = first_code) -> bool:
            if kind == "inductor_output_code" and not first_code["done"]:
                first_code["done"] = True
                return True
            return False

        artifact = {"artifact": {"name": "inductor_collective_schedule", "encoding": "json"}, "rank": rank,
                    "frame_id": 0, "frame_compile_id": 0, "attempt": 0}
        insert(path, path, before=before, records=[(artifact, json.dumps(schedule))])
        order = ["0/0", "1/0"] if rank == 0 else rank1_order
        execution = {"artifact": {"name": "graph_execution", "encoding": "json"}, "rank": rank}
        insert(path, path, before=lambda k, m: False, at_end=True,
               records=[(execution, json.dumps({"graph_execution_order": [{"compile_id": c} for c in order]}))])
        if rank == 1 and rank1_hits:
            rewrite(path, path, meta=lambda m: {"artifact": {**m["artifact"], "name": "fx_graph_cache_hit"}, **{
                k: v for k, v in m.items() if k != "artifact"}} if m.get("artifact", {}).get("name") == "fx_graph_cache_miss"
                else m, payload=lambda kind, t: t)
        if rank == 1 and rank1_stride:
            rewrite(path, path, meta=lambda m: m, payload=lambda kind, t: t.replace(
                'L_x_: "f32[16, 32][32, 1]', 'L_x_: "f32[16, 32][1, 16]') if kind == "dynamo_output_graph" else t)
    return folder


def test_schedule_order_cache_and_metadata_agree_on_a_clean_job(tmp_path: Path) -> None:
    job = _inductor_job(tmp_path / "job", rank1_schedule=[_ALL_REDUCE, _ALL_GATHER], rank1_order=["0/0", "1/0"],
                        rank1_hits=False, rank1_stride=False)
    merged = dynscope.load_trace(job)
    assert isinstance(merged, dynscope.MultiRankReport)
    first = merged.reports[0]
    assert first.graphs[0].lowering is not None
    assert first.graphs[0].lowering.collective_schedule == (_ALL_REDUCE, _ALL_GATHER)
    assert first.execution_order == ("0/0", "1/0")
    assert merged.divergences == (), [d.detail for d in merged.divergences]


def test_schedule_order_cache_and_metadata_divergences_name_rank_and_graph(tmp_path: Path) -> None:
    job = _inductor_job(tmp_path / "job", rank1_schedule=[_ALL_GATHER, _ALL_REDUCE], rank1_order=["1/0", "0/0"],
                        rank1_hits=True, rank1_stride=True)
    merged = dynscope.load_trace(job)
    by_kind = {d.kind: d for d in merged.divergences}
    assert {"collective_schedule", "execution_order", "cache", "tensor_metadata"} <= set(by_kind), list(by_kind)
    schedule = by_kind["collective_schedule"]
    assert schedule.ranks == (1,) and "rank 1 runs all_gather_into_tensor, all_reduce_ in graph 0" in schedule.detail
    assert "rank 0 runs all_reduce_, all_gather_into_tensor" in schedule.detail
    assert "rank 1 ran compile 1/0 as graph run 1, where rank 0 ran 0/0" in by_kind["execution_order"].detail
    assert "hit in graph 0" in by_kind["cache"].detail and "miss" in by_kind["cache"].detail
    assert by_kind["tensor_metadata"].detail == (
        "rank 1 gave graph 0 (forward) input 2 as f32[16, 32] strides [1, 16], rank 0 as f32[16, 32] strides [32, 1]")
    assert "graph_structure" not in by_kind  # a stride alone: the ops and shapes agree
    assert main(["trace", str(job), "--fail-on-divergence", "--quiet"]) == 1


def _runtime_meta(runtime_ns: float, stride: list[int]) -> str:
    """An ``inductor_runtime_and_tensor_meta`` payload as PyTorch writes it (torch/_inductor/debug.py)."""
    return json.dumps({"ops": [
        {"name": "extern_kernels.mm", "type": "compute", "estimated_runtime_ns": runtime_ns,
         "outputs": [{"shape": [16, 32], "stride": stride, "dtype": "float32"}]},
        {"name": _ALL_REDUCE, "type": "collective", "estimated_runtime_ns": runtime_ns / 10,
         "outputs": [{"shape": [], "stride": [], "dtype": None}]},
    ]}, indent=1)


def _with_runtime_meta(job: Path, rank1_stride: list[int]) -> Path:
    """Each rank's log of the job with Inductor's runtime and tensor meta record for compile 0/0:
    each rank's own benchmarked runtimes, rank 1's output strides as asked."""
    from tests.corpus.job_logs import insert

    for rank, path in enumerate(sorted(job.glob("*.log"))):
        meta = {"artifact": {"name": "inductor_runtime_and_tensor_meta", "encoding": "json"}, "rank": rank,
                "frame_id": 0, "frame_compile_id": 0, "attempt": 0}
        payload = _runtime_meta(1000.0 + 37.5 * rank, [32, 1] if rank == 0 else rank1_stride)
        insert(path, path, before=lambda k, m: False, at_end=True, records=[(meta, payload)])
    return job


def test_inductor_tensor_meta_ignores_each_ranks_own_runtime_estimates(tmp_path: Path) -> None:
    """tlparse's "tensor meta" check compares the record whole, so ranks that compiled the same
    kernels differ by their benchmarked runtimes (all 5 agreeing ranks of tlparse's
    multi_rank_runtime test): dynscope compares ops and output metadata only."""
    job = _with_runtime_meta(_inductor_job(tmp_path / "job", rank1_schedule=[_ALL_REDUCE, _ALL_GATHER],
                                           rank1_order=["0/0", "1/0"], rank1_hits=False, rank1_stride=False), [32, 1])
    merged = dynscope.load_trace(job)
    assert isinstance(merged, dynscope.MultiRankReport)
    assert all(r.graphs[0].lowering is not None and r.graphs[0].lowering.runtime_meta for r in merged.reports)
    assert merged.divergences == (), [d.detail for d in merged.divergences]


def test_inductor_tensor_meta_names_the_rank_whose_kernels_differ(tmp_path: Path) -> None:
    job = _with_runtime_meta(_inductor_job(tmp_path / "job", rank1_schedule=[_ALL_REDUCE, _ALL_GATHER],
                                           rank1_order=["0/0", "1/0"], rank1_hits=False, rank1_stride=False), [1, 16])
    merged = dynscope.load_trace(job)
    (found,) = [d for d in merged.divergences if d.kind == "inductor_tensor_meta"]
    assert found.ranks == (1,)
    assert found.detail.startswith("rank 1 compiled graph 0 (forward) into kernels of other output shapes")
    assert "inductor_tensor_meta" in merged.summary()
