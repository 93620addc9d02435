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

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from dynscope._capture import trace_report
from dynscope._capture.trace_report import TRACE_NOTE
from dynscope._errors import InputError
from dynscope._format import plural
from dynscope._model.merge import COMPILE_SKEW_S, merge_reports
from dynscope._torch.trace_log import is_trace_log, rank_of

if TYPE_CHECKING:
    from dynscope._model import MultiRankReport, Report

__all__ = ["TRACE_NOTE", "load_trace", "trace_files"]

_T = TypeVar("_T")

#: Name patterns of the logs TORCH_TRACE writes (gzip-compressed copies read too).
_PATTERNS = ("dedicated_log_torch_trace*.log", "dedicated_log_torch_trace*.log.gz")
#: Below this many bytes in all, ranks are read in this process: starting workers costs more.
_PARALLEL_FROM_BYTES = 16 << 20


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
) -> Report | MultiRankReport:
    """Read a TORCH_TRACE log, or a folder of a job's rank logs, into a report.

    Args:
        path: a log file PyTorch wrote with ``TORCH_TRACE=<folder>`` (``.gz`` too), or that
            folder. A folder holding one log without a rank (a single process) gives a Report.
        jobs: processes reading rank logs at once. Defaults to the CPU count for folders
            over 16 MB in all, else 1 (reading in this process).
        compile_skew_s: seconds between the fastest and slowest rank's compile time that
            count as a divergence, as in :func:`dynscope.merge`. Defaults to 5.0.

    Returns:
        A :class:`Report` for one log; a :class:`MultiRankReport` for the ranks of a job.

    Raises:
        InputError: the path does not exist, holds no trace log, is not a trace log, or a
            folder mixes logs of different processes that are not ranks of one job.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such trace log or folder: {p}. Pass the folder TORCH_TRACE named, or one of its files")
    if p.is_file():
        return trace_report.report_of_log(p, single=True)
    files = trace_files(p)
    if not files:
        raise InputError(
            f"{p} holds no TORCH_TRACE log (dedicated_log_torch_trace_*.log). Run the job with "
            f"TORCH_TRACE={p} set (docs/traces.md), then read that folder"
        )
    ranks = [rank_of(f) for f in files]
    if len(files) == 1 and ranks[0] is None:
        return trace_report.report_of_log(files[0], single=True)
    if None in ranks:
        plain = [f.name for f, r in zip(files, ranks, strict=True) if r is None]
        raise InputError(
            f"{p} holds {plural(len(files), 'trace log')}, {len(plain)} with no rank in "
            f"the name ({', '.join(plain[:3])}{', ...' if len(plain) > 3 else ''}): these are separate "
            f"processes, not the ranks of one job. Read one file with load_trace(FILE), or keep one "
            f"job's rank logs in a folder of their own"
        )
    reports = _read_all(files, jobs)
    return _merged(reports, [str(f) for f in files], compile_skew_s)


def _read_all(files: list[Path], jobs: int | None) -> list[Report]:
    """Every rank's report in the order of ``files``, read by worker processes when it pays;
    values the ranks have in common (code, guards, kernels) are kept once."""
    size = sum(f.stat().st_size for f in files)
    workers = jobs if jobs is not None else (os.cpu_count() or 1) if size >= _PARALLEL_FROM_BYTES else 1
    workers = max(1, min(workers, len(files)))
    memo: dict[object, object] = {}
    if workers == 1:
        return [_shared(trace_report.rank_report(str(f)), memo) for f in files]
    from dynscope._capture.trace_worker import read_in_workers

    by_path = read_in_workers([str(f) for f in files], workers, lambda rep: _shared(rep, memo))
    # A worker that died (killed, out of memory) leaves its files unread: read them here.
    return [by_path.get(str(f)) or _shared(trace_report.rank_report(str(f)), memo) for f in files]


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
        graphs.append(replace(g, code=one(g.code), inputs=one(g.inputs), op_counts=one(g.op_counts), lowering=low))
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
