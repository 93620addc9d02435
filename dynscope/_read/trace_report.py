"""One TORCH_TRACE log -> the Report ``capture()`` would build from the same records.

Used by ``load_trace`` (dynscope._read.trace_file) in this process and by its worker
processes (dynscope._read.trace_worker). Torch-free.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import InputError
from dynscope._read.assemble import build_report
from dynscope._torch import records
from dynscope._torch.trace_log import is_trace_log, read_log

if TYPE_CHECKING:
    from dynscope._model import Report
    from dynscope._torch.trace import TraceEvent

__all__ = ["TRACE_NOTE", "rank_report", "report_of_log"]

#: What a report read from a trace does not have, said once (Report.notes).
TRACE_NOTE = (
    "read from PyTorch's trace log alone: no timing, no compile coverage, no live graph "
    "modules and no call count (what a run under dynscope.report() adds)"
)
def report_of_log(path: Path, *, single: bool) -> Report:
    """The report of one log file; ``single``: it is all that was read (not one rank of a folder)."""
    if not is_trace_log(path):
        why = ("is not a TORCH_TRACE log: its first line is not a trace record "
               "('V1201 12:00:00.000000 123 torch/...py:12] {...}'). A saved dynscope report "
               "is read with dynscope.load")
        raise InputError(f"{path} {why}", why=why)
    log = read_log(path)
    rank = log.rank if log.rank is not None else 0
    rep = build_report(
        log.events,
        [],
        ignore_backend_mismatch=False,
        title=f"trace of rank {rank}" if log.rank is not None else f"trace {path.name}",
        rank=rank,
        world_size=rank + 1 if single and log.rank is not None else 1,
        torch_version=log.torch_version or _version_in_metrics(log.events),
    )
    notes = [TRACE_NOTE, *log.notes] if single else list(log.notes)
    if single and log.rank is not None:
        notes.append(f"one rank's log (rank {rank}): the job's other ranks were not read; read the folder for all")
    unread = dict(rep.unparsed_kinds)
    for kind, n in log.unreadable.items():
        unread[kind] = unread.get(kind, 0) + n
    return replace(
        rep,
        notes=(*notes, *rep.notes),
        unparsed=sum(unread.values()),
        unparsed_kinds=tuple(sorted(unread.items())),
    )


def _version_in_metrics(events: list[TraceEvent]) -> str:
    """The torch release compilation_metrics names (torch_version is logged once a process,
    so a log that starts after it, or a release that omits it, still says which torch)."""
    return next((v for ev in records.of_kind(events, records.COMPILATION_METRICS) if (v := ev.record.pytorch_version)), "")


def unreadable_why(path: Path, err: BaseException) -> str:
    """Why a rank's log could not be read, in a few words (for the note about that rank)."""
    if isinstance(err, OSError):
        return err.strerror or type(err).__name__
    try:
        empty = path.stat().st_size == 0
    except OSError:
        empty = False
    if empty:
        return "an empty file: the rank died before PyTorch wrote a record?"
    return err.why if isinstance(err, InputError) else str(err)


def rank_report(path: str) -> Report:
    """One rank's report, as a folder is read (what a worker process runs)."""
    return report_of_log(Path(path), single=False)


