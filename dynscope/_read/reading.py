"""``dynscope.read``: whatever a path holds, read into a report (torch-free).

A saved report (``Report.save``, ``--json``), a merged job (``merged.json``), or a
TORCH_TRACE log or the folder TORCH_TRACE named: the one rule ``dynscope show``, ``diff``
and ``render`` read their files by.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._model.codec import load
from dynscope._model.merge import is_merged_file, load_merged
from dynscope._torch.trace_log import is_trace_log

if TYPE_CHECKING:
    from dynscope._model import MultiRankReport, Report

__all__ = ["read"]


def read(path: str | Path) -> Report | MultiRankReport:
    """Read what ``path`` holds: a saved report, a merged report, or a TORCH_TRACE log or folder.

    Args:
        path: a report saved with ``Report.save`` (or the CLI's ``--json``), a ``merged.json``
            written by ``dynscope merge``, a TORCH_TRACE log, or the folder TORCH_TRACE named.

    Returns:
        A :class:`Report`, or a :class:`MultiRankReport` for a merged job or a folder of a
        job's rank logs (as :func:`dynscope.load_trace` reads it).

    Raises:
        FileNotFoundError: no such file, or a folder with no TORCH_TRACE log in it (a
            rendered folder keeps its report as report.json).
        SchemaError: the file is not a report dynscope can read.
        InputError: a trace log that cannot be read (as :func:`dynscope.load_trace`).

    Example:
        >>> rep = dynscope.read("run.json")   # or "merged.json", or the TORCH_TRACE folder
    """
    p = Path(path)
    if p.is_dir() or (p.is_file() and is_trace_log(p)):
        # Deferred: the trace assembly is not needed to read a saved report.
        from dynscope._read.trace_file import load_trace, trace_files

        if p.is_dir() and not trace_files(p):
            raise FileNotFoundError(
                f"{path} is a folder with no TORCH_TRACE log; pass a report file (a rendered folder keeps "
                f"it as report.json) or the folder TORCH_TRACE named"
            )
        return load_trace(p)
    if not p.exists():
        raise FileNotFoundError(f"no such file: {path}")
    return load_merged(path) if is_merged_file(p) else load(p)
