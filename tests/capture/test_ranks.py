"""Many ranks (issue 13): real 2-rank gloo jobs on CPU, merged; divergences; DDP bucket splits."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

import dynscope
from dynscope._cli import main
from dynscope._model.merge import load_merged

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ddp_two_ranks.py"
JOB_TIMEOUT_S = 120


def trace_dir(folder: Path) -> Path:
    """Where the job run for ``folder`` wrote its TORCH_TRACE logs (beside the saved reports)."""
    return folder.parent / f"{folder.name}-trace"


def _torchrun(folder: Path, *extra: str) -> str:
    """Run examples/ddp_two_ranks.py under torchrun with 2 gloo ranks on CPU, with TORCH_TRACE
    set (logs in :func:`trace_dir`); its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "TORCH_TRACE": str(trace_dir(folder))}
    env.pop("DYNSCOPE_PLANT", None)
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        str(EXAMPLE), "--folder", str(folder), *extra,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("planted")
    return folder, _torchrun(folder, "--plant")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("clean")
    return folder, _torchrun(folder)


@pytest.mark.torchrun
def test_planted_job_names_the_recompile_and_break_on_rank_1(planted: tuple[Path, str]) -> None:
    folder, out = planted
    assert sorted(p.name for p in folder.iterdir()) == ["rank-0.json", "rank-1.json"]
    m = dynscope.merge(folder)
    assert m.ranks == (0, 1) and m.world_size == 2
    assert [(r.rank, r.world_size) for r in m.reports] == [(0, 2), (1, 2)]
    kinds = {d.kind for d in m.divergences}
    assert {"recompiles", "break_sites"} <= kinds
    (rec,) = m.of_kind("recompiles")
    assert rec.ranks == (1,)
    assert rec.detail.startswith("rank 1 recompiled Mlp.forward")
    assert "compiled for 8, called with 7" in rec.detail and rec.detail.endswith("rank 0 did not")
    (brk,) = m.of_kind("break_sites")
    assert brk.ranks == (1,)
    assert "ddp_two_ranks.py:" in brk.detail and "print" in brk.detail
    # Rank 0 merged after the barrier and printed the same divergences.
    assert "recompiles (ranks 1): rank 1 recompiled Mlp.forward" in out
    assert m.report(1).recompile_count >= 1 and m.report(0).recompile_count == 0


@pytest.mark.torchrun
def test_job_without_plants_has_no_divergences(clean: tuple[Path, str]) -> None:
    folder, out = clean
    m = dynscope.merge(folder)
    assert m.divergences == () and not m.diverged
    assert "No divergences" in out and "No divergences" in m.summary()


@pytest.mark.torchrun
def test_ddp_bucket_splits_are_labelled_and_not_counted(clean: tuple[Path, str]) -> None:
    rep = dynscope.merge(clean[0]).report(0)
    # 3 layers of 1 MiB with bucket_cap_mb=1: DDP's optimizer splits the one compile in 3.
    assert [g.split_by for g in rep.graphs] == ["ddp_bucket"] * 3
    assert len({g.compile_id for g in rep.graphs}) == 1
    assert rep.break_count == 0 and rep.recompile_count == 0
    assert "[DDP bucket split]" in rep.summary(color=False)
    assert rep.to_html(pictures=False).count("[DDP bucket split]") >= 3
    rep.check(max_graphs=1)  # the split pieces count as one graph
    with pytest.raises(dynscope.CompileBudgetError, match=r"1 graph \(budget: 0; 2 more graphs from DDP bucket splits not counted\)"):
        rep.check(max_graphs=0)


@pytest.mark.torchrun
def test_cli_merge_page_exit_status_and_show(
    planted: tuple[Path, str], clean: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "merged"
    assert main(["merge", str(planted[0]), "-o", str(out), "--fail-on-divergence"]) == 1
    page = (out / "index.html").read_text()
    assert page.index("<h2 id='divergences'>") < page.index("<h2>Ranks</h2>")
    assert "<th>rank 0</th>" in page and "<th>rank 1 *</th>" in page
    assert "data-kind='recompiles'" in page and "DDP bucket split" in page
    capsys.readouterr()
    assert main(["show", str(out / "merged.json")]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("dynscope: 2 ranks of world size 2") and "recompiles (ranks 1)" in shown
    assert main(["merge", str(clean[0]), "-o", str(tmp_path / "ok"), "--fail-on-divergence"]) == 0
    assert main(["merge", str(planted[0]), "-o", str(tmp_path / "no-gate")]) == 0


@pytest.mark.torchrun
def test_merged_json_round_trip(planted: tuple[Path, str], tmp_path: Path) -> None:
    m = dynscope.merge(planted[0])
    back = load_merged(m.save(tmp_path / "merged.json"))
    assert back == m
    assert back.divergences == m.divergences and back.report(1).graphs[0].split_by == m.report(1).graphs[0].split_by


def _same_job(from_trace: dynscope.MultiRankReport, saved: dynscope.MultiRankReport) -> None:
    """The trace's merged report and the saved reports' agree on what the job compiled."""
    from tests.read.test_trace_logs import signature

    assert from_trace.ranks == saved.ranks and from_trace.world_size == saved.world_size
    for a, b in zip(from_trace.reports, saved.reports, strict=True):
        assert signature(a) == signature(b), f"rank {a.rank}"
    assert [(d.kind, d.ranks) for d in from_trace.divergences] == [(d.kind, d.ranks) for d in saved.divergences]


@pytest.mark.torchrun
def test_the_jobs_trace_is_its_merged_report(planted: tuple[Path, str], clean: tuple[Path, str]) -> None:
    """Issue 21: the TORCH_TRACE folder of a real 2-rank job reads to what save_rank + merge gave."""
    for folder, _ in (planted, clean):
        logs = sorted(p.name for p in trace_dir(folder).iterdir())
        assert len(logs) == 2 and logs[0].startswith("dedicated_log_torch_trace_rank_0_"), logs
        from_trace = dynscope.load_trace(trace_dir(folder))
        assert isinstance(from_trace, dynscope.MultiRankReport)
        _same_job(from_trace, dynscope.merge(folder))
    split = dynscope.load_trace(trace_dir(clean[0])).report(0)
    assert [g.split_by for g in split.graphs] == ["ddp_bucket"] * 3 and split.break_count == 0


@pytest.fixture(scope="module")
def no_torch_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv with dynscope and without torch (tests/read/test_no_torch.py)."""
    from tests.read.test_no_torch import build_no_torch_venv

    return build_no_torch_venv(tmp_path_factory)


@pytest.mark.torchrun
def test_capture_with_the_users_own_backend_reads_ddp_pieces_from_the_trace(
    planted: tuple[Path, str], tmp_path: Path
) -> None:
    """Issue 21: under DDP(torch.compile(model, backend="eager")) and capture() only listening,
    the pieces DDP's optimizer made come from the trace: labelled, not breaks, and the same
    merged report as with dynscope's backend."""
    folder = tmp_path / "own"
    _torchrun(folder, "--plant", "--own-backend")
    own = dynscope.merge(folder)
    assert [g.split_by for g in own.report(0).graphs] == ["ddp_bucket"] * 3
    assert all(g.origin == "trace" for g in own.report(0).graphs) and own.report(0).break_count == 0
    _same_job(own, dynscope.merge(planted[0]))
    _same_job(dynscope.load_trace(trace_dir(folder)), own)


@pytest.mark.torchrun
@pytest.mark.venv
def test_the_jobs_trace_reads_without_torch(planted: tuple[Path, str], no_torch_python: Path, tmp_path: Path) -> None:
    from tests.read.test_no_torch import _run

    folder, _ = planted
    res = _run([str(no_torch_python), "-m", "dynscope", "trace", str(trace_dir(folder)), "--json",
                "-o", str(tmp_path / "page"), "--fail-on-divergence"], cwd=tmp_path)
    assert res.returncode == 1, res.stderr  # the planted job diverges
    assert "the ranks compiled differently" in res.stderr
    from_trace = load_merged(tmp_path / "page" / "merged.json")
    _same_job(from_trace, dynscope.merge(folder))
    assert json.loads(res.stdout.split("\nwrote ")[0])["kind"] == "dynscope-merged"
    page = (tmp_path / "page" / "index.html").read_text(encoding="utf-8")
    assert page.index("<h2 id='divergences'>") < page.index("<h2>Ranks</h2>")


def _small_report() -> dynscope.Report:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2

    return dynscope.report(f, torch.randn(4), coverage=False)


def test_save_rank_merge_round_trip_outside_a_job(tmp_path: Path) -> None:
    rep = _small_report()
    assert (rep.rank, rep.world_size) == (0, 1)  # no process group: rank 0 of 1
    path = dynscope.save_rank(rep, tmp_path / "ranks")
    assert path == tmp_path / "ranks" / "rank-0.json"
    m = dynscope.merge(tmp_path / "ranks")
    assert m.reports == (dynscope.load(path),) and m.divergences == () and m.notes == ()
    assert load_merged(m.save(tmp_path / "m.json")) == m


def test_missing_rank_is_a_note(tmp_path: Path) -> None:
    rep = dataclasses.replace(_small_report(), world_size=3)
    dynscope.save_rank(rep, tmp_path)
    dynscope.save_rank(dataclasses.replace(rep, rank=2), tmp_path)
    m = dynscope.merge(tmp_path)
    # A field (the ranks missing), said by the renderers: in the text and on the page.
    assert m.ranks == (0, 2) and m.missing == (((1, 1),), 1) and m.notes == ()
    said = "rank 1 of world size 3 wrote no report (crashed, hung, or saved elsewhere): divergences are among the 2 ranks read"
    assert f"note: {said}" in m.summary() and said in m.to_html()
    # Saved and read back, the merged report keeps what the ranks wrote.
    assert dynscope.read(m.save(tmp_path / "merged.json")).missing == m.missing
    # Its bundle: the page to_html() gives and the JSON save() writes, in a folder made for them.
    out = m.render(tmp_path / "bundle" / "job")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "merged.json"]
    assert (out / "index.html").read_text(encoding="utf-8") == m.to_html()
    assert dynscope.read(out / "merged.json") == m


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp, rep: tmp, "holds no rank-.*json files.*save_rank"),
        (lambda tmp, rep: [], "empty list"),
        (
            lambda tmp, rep: [rep.save(tmp / "a.json"), dataclasses.replace(rep, rank=1, world_size=4).save(tmp / "b.json")],
            "different sizes: a.json \\(world size 1\\), b.json \\(world size 4\\)",
        ),
        (lambda tmp, rep: [rep.save(tmp / "a.json"), rep.save(tmp / "b.json")], "rank 0 appears twice.*init_process_group"),
        (lambda tmp, rep: [tmp], "is a folder"),
        (lambda tmp, rep: [tmp / "nope.json"], "no such report file"),
    ],
    ids=["empty-folder", "empty-list", "mixed-world-sizes", "duplicate-ranks", "folder-in-list", "missing-file"],
)
def test_bad_merge_input(
    tmp_path: Path, make: Callable[[Path, dynscope.Report], object], message: str
) -> None:
    rep = _small_report()
    with pytest.raises(dynscope.InputError, match=message):
        dynscope.merge(make(tmp_path, rep))  # type: ignore[arg-type]


def test_save_rank_takes_a_report(tmp_path: Path) -> None:
    with pytest.raises(dynscope.InputError, match="takes a dynscope Report"):
        dynscope.save_rank("report.json", tmp_path)  # type: ignore[arg-type]


_COLLECTIVES_JOB = textwrap.dedent(
    """
    import sys
    import torch, torch.distributed as dist
    import dynscope
    from dynscope._model.merge import collective_sequence
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1)

    def step(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    def quiet(x):
        return x * 2 + 1

    with_ar = dynscope.report(step, torch.randn(4), coverage=False)
    without = dynscope.report(quiet, torch.randn(4), coverage=False)
    print("SEQ", collective_sequence(with_ar), collective_sequence(without), with_ar.world_size)
    dynscope.save_rank(with_ar, sys.argv[1] + "/ranks")
    import dataclasses
    dynscope.save_rank(dataclasses.replace(without, rank=1, world_size=1), sys.argv[1] + "/other")
    dist.destroy_process_group()
    """
)


@pytest.mark.heavy
def test_collectives_inside_graphs_are_compared(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTIVES_JOB, str(tmp_path)],
        capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SEQ ('all_reduce',) () 1" in done.stdout
    # Rank 0 issues an all_reduce inside its graph, "rank 1" none: the sequence differs.
    m = dynscope.merge([tmp_path / "ranks" / "rank-0.json", tmp_path / "other" / "rank-1.json"])
    (d,) = m.of_kind("collectives")
    assert d.ranks == (1,) or d.ranks == (0,)
    assert "all_reduce" in d.detail and "hangs" in d.detail


_FSDP2_JOB = textwrap.dedent(
    """
    import sys
    import torch, torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    import dynscope

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            return torch.relu(self.lin(x)) + x

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    with dynscope.capture() as cap:
        for block in model:
            fully_shard(block)
            block.compile(backend=cap.backend)
        fully_shard(model)
        for _ in range(2):
            model(torch.randn(4, 16)).sum().backward()
    dynscope.save_rank(cap.report, sys.argv[1])
    dist.destroy_process_group()
    """
)


@pytest.mark.torchrun
def test_fsdp2_blocks_compile_and_report(tmp_path: Path) -> None:
    script = tmp_path / "fsdp2_job.py"
    script.write_text(_FSDP2_JOB)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(script), str(tmp_path / "ranks")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT_S, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    m = dynscope.merge(tmp_path / "ranks")
    assert m.ranks == (0, 1) and m.divergences == ()
    for rep in m.reports:
        # One graph per block (the second block recompiles on its own `self` guard).
        assert [g.frame for g in rep.graphs] == ["Block.forward", "Block.forward"]
        assert rep.break_count == 0 and all(g.split_by == "" for g in rep.graphs)


def test_a_rank_file_saved_before_causes_were_fields_agrees_with_a_new_one(tmp_path: Path) -> None:
    """A job whose rank files mix schemas (a rerun wrote some ranks with a newer dynscope):
    the same recompile, words only in the older file and fields in the newer, is no divergence;
    a different one still is (both are compared by PyTorch's failed guards, which both keep)."""
    from dynscope._model.causes import MARK_DYNAMIC, SAID, SIZE, Cause, RecompileFix

    stored = dynscope.load(Path(__file__).parents[1] / "golden" / "reports" / "print_model.json")
    first = stored.recompiles[0]
    assert [c.kind for c in first.causes] == [SAID]  # saved before causes were fields
    words = first.causes[0].said
    fields = dataclasses.replace(first, causes=(Cause(SIZE, name="x", dim="0", then="4", now="6"),),
                                 fixes=(RecompileFix(MARK_DYNAMIC, Cause(SIZE, name="x", dim="0"), name="x", dim="0"),))
    assert fields.explained == (words,)  # the new words are the old file's
    new = dataclasses.replace(stored, recompiles=(fields, *stored.recompiles[1:]), rank=1, world_size=2)
    dynscope.save_rank(dataclasses.replace(stored, rank=0, world_size=2), tmp_path / "job")
    dynscope.save_rank(new, tmp_path / "job")
    assert [d.kind for d in dynscope.merge(tmp_path / "job").divergences if "recompile" in d.kind] == []
    # Another call size: PyTorch's failed guard says so too (the files agree on its words, not on dynscope's).
    other = dataclasses.replace(fields, causes=(Cause(SIZE, name="x", dim="0", then="4", now="7"),),
                                raw_reasons=("tensor 'x' size mismatch at index 0. expected 4, actual 7",))
    dynscope.save_rank(dataclasses.replace(new, recompiles=(other, *stored.recompiles[1:])), tmp_path / "job")
    kinds = [d.kind for d in dynscope.merge(tmp_path / "job").divergences]
    assert any("recompile" in k for k in kinds), kinds
