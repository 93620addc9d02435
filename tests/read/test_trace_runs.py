"""Folders that hold more than one run, logs whose names and records disagree on the rank,
collectives issued in another order, and the CLI around them (issue 44).

Every log is a real one (tests/traces/torch-2.13/logs, written by PyTorch's own trace
formatter: scripts/record_trace_logs.py), changed the way a copy, a rename or a rerun changes
it (tests/corpus/job_logs.py): a new file name, a record's rank, the first-record times and
process ids of a second run, records PyTorch writes on GPUs added (a collective schedule, the
graph execution order).
"""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

import dynscope
from dynscope._cli import main
from tests.read.test_job_logs import DDP, LOGS, _second_run

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

_ALL_REDUCE = "torch.ops._c10d_functional.all_reduce_.default"
_ALL_GATHER = "torch.ops._c10d_functional.all_gather_into_tensor.default"
_WAIT = "torch.ops._c10d_functional.wait_tensor.default"


def _job(folder: Path, ranks: int, tag: str) -> None:
    from tests.corpus.job_logs import as_rank

    folder.mkdir(exist_ok=True)
    for r in range(ranks):
        as_rank(LOGS / "corpus-mlp_no_break.log", folder / f"dedicated_log_torch_trace_rank_{r}_{tag}{r}.log", r)


def test_the_run_with_the_most_ranks_is_shown_and_said_first(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    _job(folder, 4, "a")
    # Later, rank 0 alone is rerun into the same folder: one rank, started two hours on.
    _second_run(folder / "dedicated_log_torch_trace_rank_0_a0.log", folder / "dedicated_log_torch_trace_rank_0_b0.log",
                hours=2, pid_shift=500)
    merged = dynscope.load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport) and merged.ranks == (0, 1, 2, 3)
    first = merged.summary().splitlines()[0]
    assert "4 ranks" in first and "run 0 of the folder's 2 (the most ranks" in first, first
    said = " ".join(merged.notes)
    assert "Shown: run 0 (the run with the most ranks (4))" in said and "run 1: rank 0" in said, said
    assert "No divergences" in merged.summary()
    # The latest run asked for: one rank, and nothing is claimed about agreement.
    one = dynscope.load_trace(folder, run=1)
    assert isinstance(one, dynscope.MultiRankReport) and one.ranks == (0,)
    text = one.summary()
    assert "run 1 of the folder's 2 (asked for" in text.splitlines()[0]
    assert "One rank read: nothing to compare" in text and "No divergences" not in text, text
    assert "nothing to compare" in one.to_html() and "No divergences" not in one.to_html()


def test_a_log_named_for_another_rank_is_read_as_its_name_says_and_said(tmp_path: Path) -> None:
    folder = tmp_path / "trace"
    folder.mkdir()
    for src in DDP:
        shutil.copy(src, folder / src.name)
    # Rank 1's log copied in as rank 2 (a hand-made folder, as tlparse's own test logs are).
    rank1 = next(p for p in DDP if "_rank_1_" in p.name)
    shutil.copy(rank1, folder / "dedicated_log_torch_trace_rank_2.log")
    merged = dynscope.load_trace(folder)
    assert isinstance(merged, dynscope.MultiRankReport) and merged.ranks == (0, 1, 2)
    said = " ".join(merged.notes)
    assert "dedicated_log_torch_trace_rank_2.log (rank 2 by its name) holds rank 1's records" in said, said
    assert "as tlparse reads it" in said
    assert merged.report(2).title == "trace of rank 2"
    # Rank 2 is rank 1's twin: where rank 1 broke and recompiled alone, rank 0 is now the one apart.
    assert merged.divergences and {r for d in merged.divergences for r in d.ranks} == {0}


def _ordered_job(folder: Path, orders: list[list[str]]) -> Path:
    """The recorded Inductor train step as ranks of a GPU job: compile 0/0 issues an
    all_reduce, compile 1/0 an all_gather (their collective schedules), and each rank ran
    the compiled graphs in its own order (the graph execution record)."""
    from tests.corpus.job_logs import as_rank, insert

    folder.mkdir()
    for rank, order in enumerate(orders):
        path = folder / f"dedicated_log_torch_trace_rank_{rank}_o{rank}.log"
        as_rank(LOGS / "inductor-train.log", path, rank)
        for frame, schedule in ((0, [_ALL_REDUCE, _WAIT]), (1, [_ALL_GATHER, _WAIT])):
            done = {"yes": False}

            def before(kind: str, meta: dict, frame: int = frame, done: dict = done) -> bool:
                if kind == "inductor_output_code" and meta.get("frame_id") == frame and not done["yes"]:
                    done["yes"] = True
                    return True
                return False

            artifact = {"artifact": {"name": "inductor_collective_schedule", "encoding": "json"}, "rank": rank,
                        "frame_id": frame, "frame_compile_id": 0, "attempt": 0}
            insert(path, path, before=before, records=[(artifact, json.dumps(schedule))])
        execution = {"artifact": {"name": "graph_execution", "encoding": "json"}, "rank": rank}
        insert(path, path, before=lambda k, m: False, at_end=True,
               records=[(execution, json.dumps({"graph_execution_order": [{"compile_id": c} for c in order]}))])
    return folder


def test_ranks_that_run_graphs_in_another_order_issue_collectives_in_another_order(tmp_path: Path) -> None:
    job = _ordered_job(tmp_path / "job", [["0/0", "1/0", "0/0"], ["1/0", "0/0", "0/0"]])
    merged = dynscope.load_trace(job)
    by_kind = {d.kind: d for d in merged.divergences}
    assert "execution_order" in by_kind and "collective_order" in by_kind, list(by_kind)
    order = by_kind["collective_order"]
    assert order.ranks == (1,)
    assert order.detail.startswith("ranks issue their collectives in a different order: ")
    assert ("rank 1 issues all_gather_into_tensor (graph run 1, compile 1/0) as collective 1, where rank 0 issues "
            "all_reduce (graph run 1, compile 0/0)") in order.detail, order.detail
    assert "collective_schedule" not in by_kind  # each graph's own schedule is the same on both ranks
    assert main(["trace", str(job), "--fail-on-divergence", "--quiet"]) == 1


def test_graphs_in_another_order_with_the_same_collectives_are_no_collective_divergence(tmp_path: Path) -> None:
    # Both graphs issue only an all_reduce: run in either order, the ranks issue the same sequence.
    job = _ordered_job(tmp_path / "job", [["0/0", "1/0"], ["1/0", "0/0"]])
    for p in job.glob("*.log"):
        p.write_text(p.read_text(encoding="utf-8").replace("all_gather_into_tensor", "all_reduce_"), encoding="utf-8")
    merged = dynscope.load_trace(job)
    kinds = [d.kind for d in merged.divergences]
    assert "execution_order" in kinds and "collective_order" not in kinds, kinds


def test_cli_global_options_one_page_and_options_that_do_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = LOGS / "corpus-print_break.log"
    page = tmp_path / "page.html"
    assert main(["-q", "trace", str(log), "-o", str(page), "--run", "5", "--jobs", "2"]) == 0
    captured = capsys.readouterr()
    assert page.is_file() and not page.is_dir() and page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert "ignored --run 5" in captured.err and "ignored --jobs 2" in captured.err
    assert "[" not in captured.err.replace("--run", "")  # -q before the command: no progress lines
    folder_page = tmp_path / "job.html"
    assert main(["trace", str(DDP[0].parent), "-o", str(folder_page), "-q"]) == 0
    text = folder_page.read_text(encoding="utf-8")
    assert "rank 1" in text and "<h2 id='divergences'>" in text
    assert main(["trace", str(log), "--full", "-q"]) == 0
    assert "ignored --full" in capsys.readouterr().err


def test_text_files_written_escape_terminal_controls(tmp_path: Path) -> None:
    # A function whose name holds a raw terminal escape (OSC: set the window title).
    log = LOGS / "corpus-print_break.log"
    hostile = tmp_path / "hostile.log"
    data = log.read_text(encoding="utf-8")
    name = next(n for n in ("forward", "fn", "f") if f'"co_name": "{n}"' in data)
    hostile.write_text(data.replace(f'"co_name": "{name}"', f'"co_name": "{name}\\u001b]0;pwned\\u0007"'),
                       encoding="utf-8")
    rep = dynscope.load_trace(hostile)
    assert any("\x1b" in (f.function or "") for f in rep.frames) or "\x1b" in rep.to_json()
    out = tmp_path / "bundle"
    assert main(["render", str(hostile), "-o", str(out), "-q"]) == 0
    for written in out.iterdir():
        if written.suffix in (".txt", ".html", ".svg", ".json"):
            raw = written.read_bytes()
            assert b"\x1b" not in raw and b"\x07" not in raw, written.name
    assert "\\x1b]0;pwned\\x07" in (out / "summary.txt").read_text(encoding="utf-8")
    back = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert any("\x1b]0;pwned\x07" in g["frame"] for g in back["graphs"])  # JSON keeps the character itself
