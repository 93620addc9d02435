"""Reports from TORCH_TRACE logs: any job's trace, one file or a folder of rank logs.

``load_trace(path)`` reads what PyTorch wrote with ``TORCH_TRACE=<folder>`` (the same records
``capture()`` listens to in process) and assembles them as ``capture()`` does: one log file is
a :class:`Report`; a folder of a job's rank logs is a :class:`MultiRankReport`, merged and
compared as ``dynscope.merge`` merges the reports ranks saved. Nothing here imports torch:
logs are read where the job's results land, often a machine with no torch and no GPU.

Ranks are read in parallel processes when there are many (each streams its own file, so
memory grows with the largest log, not with the number of ranks).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from dynscope._errors import DynscopeError, InputError
from dynscope._format import plural, rank_ranges
from dynscope._model.merge import COMPILE_SKEW_S, merge_reports
from dynscope._read import trace_report
from dynscope._read.trace_report import TRACE_NOTE
from dynscope._torch.trace_log import LogStamp, is_trace_log, log_stamp, rank_from_name, rank_of

if TYPE_CHECKING:
    from dynscope._model import MultiRankReport, Report

__all__ = ["RUN_GAP_S", "TRACE_NOTE", "TraceRun", "default_run", "file_rank", "load_trace", "trace_files", "trace_runs"]

_T = TypeVar("_T")

#: Name patterns of the logs TORCH_TRACE writes (gzip-compressed copies read too).
_PATTERNS = ("dedicated_log_torch_trace*.log", "dedicated_log_torch_trace*.log.gz")
#: Below this many bytes in all, ranks are read in this process: starting workers costs more.
_PARALLEL_FROM_BYTES = 16 << 20
#: The logs of one run start within this many seconds of the first (torchrun and Slurm start
#: every rank at once); a rank seen again, or a log started later, opens another run.
RUN_GAP_S = 300.0


@dataclass(frozen=True)
class TraceRun:
    """The logs of one run of a job found in a folder (a rerun into the same TORCH_TRACE
    folder is another run): grouped by rank and by when each log was started."""

    index: int  # 0 for the earliest run
    files: tuple[Path, ...]
    ranks: tuple[int | None, ...]  # per file; None: a single process's log (no rank)
    stamps: tuple[LogStamp | None, ...]  # per file: its first record's time and process id
    # per file: the rank its records carry where it is not the one its name gives (a copied
    # or renamed log); None where they agree or the records carry none
    record_ranks: tuple[int | None, ...] = ()

    @property
    def rank_count(self) -> int:
        """How many ranks the run holds (0 for a single process's log)."""
        return len({r for r in self.ranks if r is not None})

    def describe(self) -> str:
        """"run 1: ranks 0-3 (pids 4101-4104), started 12-01 14:52:04"."""
        ranks = [r for r in self.ranks if r is not None]
        who = f"ranks {rank_ranges(ranks)}" if len(ranks) > 1 else (f"rank {ranks[0]}" if ranks else "one process")
        pids = sorted({s.pid for s in self.stamps if s is not None})
        when = min((s for s in self.stamps if s is not None), key=lambda s: s.seconds, default=None)
        pid_text = f" (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids[:4]))}{', ...' if len(pids) > 4 else ''})"
        return f"run {self.index}: {who}{pid_text if pids else ''}" + (f", started {when.when}" if when else "")


def file_rank(path: Path) -> tuple[int | None, int | None]:
    """(the rank a trace file is read as, the rank its records say where that differs).

    The file name's rank wins, as tlparse reads a folder: a log copied or renamed into a
    job's folder (``..._rank_5.log`` holding rank 1's records) is the rank its name says, and
    the records' rank is returned beside it so the reader can say they disagree. Without a
    rank in the name, the records' rank (None: a single process)."""
    named = rank_from_name(path)
    recorded = rank_of(path)  # the records' "rank", else the name's
    if named is None:
        return recorded, None
    return named, (recorded if recorded is not None and recorded != named else None)


def trace_runs(folder: str | Path) -> tuple[list[TraceRun], list[Path]]:
    """The runs of the logs in ``folder``, earliest first, and the files left out as copies
    (a log of the same rank, process and start time as one already grouped).

    When every log has a rank and no rank appears twice, the folder is one job, however far
    apart its logs started (as tlparse reads it: logs gathered by hand from several runs
    are still the ranks their names give; the notes say how far apart they started).
    Otherwise a run is a set of logs of distinct ranks started within RUN_GAP_S of its
    first; a log without a rank (a single process) is a run of its own.
    """
    files = trace_files(Path(folder))
    logs = sorted(((f, *file_rank(f), log_stamp(f)) for f in files),
                  key=lambda t: (t[3].seconds if t[3] is not None else math.inf, str(t[0])))
    kept: list[tuple[Path, int | None, int | None, LogStamp | None]] = []
    copies: list[Path] = []
    seen: set[tuple[int | None, int, float]] = set()
    for f, rank, recorded, stamp in logs:
        if stamp is not None and (rank, stamp.pid, stamp.seconds) in seen:
            copies.append(f)
            continue
        if stamp is not None:
            seen.add((rank, stamp.pid, stamp.seconds))
        kept.append((f, rank, recorded, stamp))
    ranks = [rank for _, rank, _, _ in kept]
    groups: list[list[tuple[Path, int | None, int | None, LogStamp | None]]] = []
    if kept and None not in ranks and len(set(ranks)) == len(ranks):
        groups = [kept]  # one job: every rank once
    else:
        for item in kept:
            _, rank, _, stamp = item
            run = groups[-1] if groups else None
            first = run[0][3] if run else None
            fits = (
                run is not None and rank is not None and all(r is not None for _, r, _, _ in run)
                and rank not in {r for _, r, _, _ in run}
                and (stamp is None or first is None or stamp.seconds - first.seconds <= RUN_GAP_S)
            )
            if fits and run is not None:
                run.append(item)
            else:
                groups.append([item])
    runs = [
        TraceRun(i, tuple(f for f, _, _, _ in g), tuple(r for _, r, _, _ in g), tuple(st for _, _, _, st in g),
                 tuple(rec for _, _, rec, _ in g))
        for i, g in enumerate(groups)
    ]
    return runs, copies


def default_run(runs: list[TraceRun]) -> TraceRun:
    """The run shown when none is asked for: the one with the most ranks (a rerun of one
    rank beside a whole job is not the job), the latest of those on a tie."""
    return max(runs, key=lambda r: (r.rank_count, r.index))


def trace_files(folder: Path) -> list[Path]:
    """The TORCH_TRACE logs in a folder: PyTorch's file names first, else any ``*.log``
    file that starts like a trace log (logs renamed when copied off a cluster)."""
    found = sorted({p for pattern in _PATTERNS for p in folder.glob(pattern) if p.is_file()})
    if not found:
        found = sorted(p for p in [*folder.glob("*.log"), *folder.glob("*.log.gz")] if p.is_file() and is_trace_log(p))
    return found


def load_trace(
    path: str | Path,
    *,
    jobs: int | None = None,
    compile_skew_s: float = COMPILE_SKEW_S,
    run: int | None = None,
) -> Report | MultiRankReport:
    """Read a TORCH_TRACE log, or a folder of a job's rank logs, into a report.

    Args:
        path: a log file PyTorch wrote with ``TORCH_TRACE=<folder>`` (``.gz`` too), or that
            folder. A folder holding one log without a rank (a single process) gives a Report.
        jobs: processes reading rank logs at once. Defaults to the CPU count for folders
            over 16 MB in all, else 1 (reading in this process).
        compile_skew_s: seconds between the fastest and slowest rank's compile time that
            count as a divergence, as in :func:`dynscope.merge`. Defaults to 5.0.
        run: for a folder holding more than one run (a job rerun into the same folder, a
            single process's log beside a job's): which, by number, earliest first
            (:func:`trace_runs`). Defaults to None: the latest. The report's notes say how
            the logs were grouped.

    Returns:
        A :class:`Report` for one log; a :class:`MultiRankReport` for the ranks of a job.

    Raises:
        InputError: the path does not exist, holds no trace log, or is not a trace log; or
            ``run`` names no run of the folder.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such trace log or folder: {p}. Pass the folder TORCH_TRACE named, or one of its files")
    if p.is_file():
        return trace_report.report_of_log(p, single=True)
    runs, copies = trace_runs(p)
    if not runs:
        raise InputError(
            f"{p} holds no TORCH_TRACE log (dedicated_log_torch_trace_*.log). Run the job with "
            f"TORCH_TRACE={p} set (docs/traces.md), then read that folder"
        )
    if run is None:
        chosen = default_run(runs)
    elif isinstance(run, bool) or not isinstance(run, int) or not 0 <= run < len(runs):
        listed = "; ".join(r.describe() for r in runs)
        raise InputError(f"run={run!r}: {p} holds {plural(len(runs), 'run')} ({listed}); pick one by its number")
    else:
        chosen = runs[run]
    notes = _run_notes(p, runs, chosen, copies, asked=run is not None)
    files = list(chosen.files)
    if len(files) == 1 and chosen.ranks[0] is None:
        rep = trace_report.report_of_log(files[0], single=True)
        return replace(rep, notes=(*notes, *rep.notes)) if notes else rep
    order = sorted(range(len(files)), key=lambda i: chosen.ranks[i] or 0)
    files = [files[i] for i in order]
    ranks = [chosen.ranks[i] or 0 for i in order]
    read = list(zip(files, ranks, _read_all(files, jobs), strict=True))
    # A rank's file that cannot be read (empty, not a log, unreadable) is a note about that
    # rank, never the end of the job's read.
    unread = [f"rank {r}'s log {f.name} could not be read ({why}): left out" for f, r, why in read if isinstance(why, str)]
    read = [(f, r, rep) for f, r, rep in read if not isinstance(rep, str)]
    if not read:
        raise InputError(f"{p}: none of the {plural(len(files), 'rank log')} of the run could be read: " + "; ".join(unread[:3]))
    files = [f for f, _, _ in read]
    reports = [rep if rep.rank == r else replace(rep, rank=r, title=f"trace of rank {r}")
               for _, r, rep in read if not isinstance(rep, str)]
    notes = (*notes, *unread)
    merged = _merged(reports, [str(f) for f in files], compile_skew_s)
    shown = _shown(chosen, runs, asked=run is not None)
    return replace(merged, notes=(*merged.notes, *notes), shown=shown)


def _shown(chosen: TraceRun, runs: list[TraceRun], *, asked: bool) -> str:
    """Which run the report is, for the summary's first line ("" for a folder of one run)."""
    if len(runs) < 2:
        return ""
    why = "asked for" if asked else (
        "the most ranks" + (", the latest of those" if sum(r.rank_count == chosen.rank_count for r in runs) > 1 else ""))
    return f"run {chosen.index} of the folder's {len(runs)} ({why}; --run N or load_trace(path, run=N) shows another)"


def _run_notes(folder: Path, runs: list[TraceRun], chosen: TraceRun, copies: list[Path], *, asked: bool = False) -> tuple[str, ...]:
    """What the page says about how a folder's logs were grouped into runs."""
    notes = []
    if len(runs) > 1:
        others = [r.index for r in runs if r is not chosen]
        if asked:
            why = "as asked"
        else:
            why = f"the run with the most ranks ({chosen.rank_count})" if chosen.rank_count else "the latest"
            if chosen is runs[-1]:
                why += ", the latest"
        notes.append(
            f"{folder} holds {plural(len(runs), 'run')}, grouped by rank and by when each log started "
            f"(a rank seen again or a log started over {RUN_GAP_S:g} s later opens a run): "
            + "; ".join(r.describe() for r in runs)
            + f". Shown: run {chosen.index} ({why}); "
            f"load_trace(path, run={others[0]}) or `dynscope trace {folder} --run {others[0]}` shows another"
        )
    stamps = [s for s in chosen.stamps if s is not None]
    if len(runs) == 1 and len(stamps) > 1:
        first, last = min(stamps, key=lambda s: s.seconds), max(stamps, key=lambda s: s.seconds)
        if last.seconds - first.seconds > RUN_GAP_S:
            pids = sorted({s.pid for s in stamps})
            notes.append(
                f"the logs started {_span(last.seconds - first.seconds)} apart ({first.when} to {last.when}, "
                f"{len(pids)} process{'es' if len(pids) > 1 else ''}), more than the {RUN_GAP_S:g} s within which a job's ranks start: "
                "logs of different runs put in one folder? Every rank appears once, so they are read as one "
                "job, each rank the one its file name gives (as tlparse reads them)"
            )
    if chosen.record_ranks and any(r is not None for r in chosen.record_ranks):
        said = [f"{f.name} (rank {named} by its name) holds rank {rec}'s records"
                for f, named, rec in zip(chosen.files, chosen.ranks, chosen.record_ranks, strict=False) if rec is not None]
        notes.append(
            f"file names and records disagree on the rank of {plural(len(said), 'log')}: " + "; ".join(said[:4])
            + ("; ..." if len(said) > 4 else "")
            + ": a copied or renamed log? Each is read as the rank its file name gives, as tlparse reads it"
        )
    if copies:
        notes.append(
            f"{plural(len(copies), 'log')} left out as a copy of another (same rank, process and start time): "
            + ", ".join(c.name for c in copies[:3]) + (", ..." if len(copies) > 3 else "")
        )
    return tuple(notes)


def _span(seconds: float) -> str:
    """"141 days", "5.2 hours", "12 minutes"."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.0f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.0f} minutes"


def _read_all(files: list[Path], jobs: int | None) -> list[Report | str]:
    """Every rank's report in the order of ``files`` (for a file that cannot be read, why),
    read by worker processes when it pays; values the ranks have in common (code, guards,
    kernels) are kept once."""
    size = sum(f.stat().st_size for f in files if f.is_file())
    workers = jobs if jobs is not None else (os.cpu_count() or 1) if size >= _PARALLEL_FROM_BYTES else 1
    workers = max(1, min(workers, len(files)))
    memo: dict[object, object] = {}

    def here(f: Path) -> Report | str:
        try:
            return _shared(trace_report.rank_report(str(f)), memo)
        except (DynscopeError, OSError) as err:
            return trace_report.unreadable_why(f, err)

    if workers == 1:
        return [here(f) for f in files]
    from dynscope._read.trace_worker import read_in_workers

    by_path = read_in_workers([str(f) for f in files], workers, lambda rep: _shared(rep, memo))
    # A worker that died (killed, out of memory) leaves its files unread: read them here.
    return [by_path.get(str(f)) or here(f) for f in files]


def _shared(rep: Report, memo: dict[object, object]) -> Report:
    """``rep`` with the values it has in common with the ranks read before it made the same
    objects: the ranks of a data-parallel job compile the same graphs, so a 256-rank job holds
    each graph's code, kernels and guards about once, not 256 times."""

    def one(value: _T) -> _T:
        try:
            return memo.setdefault(value, value)  # type: ignore[return-value]
        except TypeError:  # a value holding something unhashable: kept as it is
            return value

    graphs = []
    for g in rep.graphs:
        low = g.lowering
        if low is not None:
            low = replace(
                low, code=one(low.code), backward_code=one(low.backward_code), forward=one(low.forward),
                backward=one(low.backward), kernels=one(low.kernels), saved_for_backward=one(low.saved_for_backward),
            )
        graphs.append(replace(g, code=one(g.code), inputs=one(g.inputs), input_names=one(g.input_names),
                              op_counts=one(g.op_counts), lowering=low))
    return replace(
        rep,
        graphs=tuple(graphs),
        guards=tuple(one(guard) for guard in rep.guards),
        breaks=one(rep.breaks),
        break_events=one(rep.break_events),
        recompiles=one(rep.recompiles),
    )


def _merged(reports: list[Report], sources: list[str], compile_skew_s: float) -> MultiRankReport:
    world = max(r.rank for r in reports) + 1
    reports = [replace(r, world_size=world) for r in reports]
    merged = merge_reports(
        list(zip(reports, sources, strict=True)),
        compile_skew_s=compile_skew_s,
        duplicate_hint=(
            "two logs of one rank: the folder holds the traces of more than one run of the job; "
            "keep one run's logs in a folder of their own"
        ),
        written="trace log",
    )
    note = f"{TRACE_NOTE}; the world size is read as the highest rank + 1 ({world})"
    return replace(merged, notes=(note, *merged.notes))
