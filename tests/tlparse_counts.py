"""What tlparse counts in a TORCH_TRACE log, and the same counts from a dynscope Report.

tlparse (``pip install tlparse``, a Rust binary from meta-pytorch/tlparse) reads the logs
``TORCH_TRACE`` writes into a folder of HTML pages plus a few machine-readable files. The
counts here are read back from what it writes, never from its source:

- ``compile_directory.json``: one key per compile id it saw (``"[0/0]"``, ``"[0/0_1]"`` for
  attempt 1 after a restart, ``"[!0/1/0]"`` under compiled autograd, ``"[-/-]"`` for records
  outside any compile), each holding the ``artifacts`` it wrote for that id, named
  ``<record kind>_<n>.<ext>`` (``dynamo_graph_break_reason_1.txt``, ``recompile_reasons_13.json``,
  ``compilation_metrics_4.html``...), ``n`` counting every artifact of the log.
- ``failures_and_restarts.html``: one table row per restart reason and one per failure, both
  read from the ``compilation_metrics`` records: a ``RestartAnalysis`` row for each entry of
  ``restart_reasons``, a row naming the ``fail_type`` for each compile that has one.

With ``--all-ranks-html`` on a folder of rank logs, tlparse writes the same files per rank
under ``rank_<r>/``.

:func:`dynscope_counts` gives the same fields from a dynscope Report, each defined to line up
with tlparse's (see the field docstrings of :class:`TlparseCounts`), so that the two compare
with ``==``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dynscope import Report

__all__ = ["TlparseCounts", "dynscope_counts", "read_tlparse_output", "tlparse_binary", "tlparse_counts", "tlparse_rank_counts"]

#: A compile id as tlparse writes it: optional compiled-autograd prefix, frame, compile, attempt.
_COMPILE_ID = re.compile(r"^\[(?:!(\d+)/)?(\d+|-)/(\d+|-)(?:_(\d+))?\]$")
#: tlparse's artifact file names for the two records counted.
_BREAK_ARTIFACT = re.compile(r"^dynamo_graph_break_reason_\d+\.\w+$")
_RECOMPILE_ARTIFACT = re.compile(r"^recompile_reasons_\d+\.\w+$")
#: A row of failures_and_restarts.html: its first cell (the compile id, as a link) and the
#: second (the failure type, or the words RestartAnalysis for a restart).
_ROW = re.compile(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", re.S)
_TAG = re.compile(r"<[^>]+>")
#: Seconds tlparse may take on one log (it reads a few MB in milliseconds).
_TIMEOUT_S = 120


@dataclass(frozen=True)
class TlparseCounts:
    """The counts tlparse's output gives for one log (or one rank of a folder)."""

    compile_ids: tuple[str, ...]
    """Every compile id tlparse saw, as ``"F/C"`` (``"!A/F/C"`` under compiled autograd),
    sorted by number. From the keys of ``compile_directory.json``: the attempt suffix
    (``[0/0_1]``, the compile restarted once) is dropped, as the attempts of one compile are
    one compile, and ``[-/-]`` (records outside any compile) is not a compile, nor an id
    listed with no artifact (torch 2.15's export: only tensor descriptions under "0/0").

    dynscope: ``rep.frames[i].torch_compile_id``, PyTorch's own ids (one Frame per compile,
    restarts included in it)."""

    graph_breaks: int
    """Graph-break records: the ``dynamo_graph_break_reason_<n>`` artifacts over every id of
    ``compile_directory.json`` (tlparse writes one file per record).

    dynscope: ``rep.break_count``, one event per ``dynamo_graph_break_reason`` record folded
    into sites (a break record whose payload dynscope could not read is counted in
    ``unparsed_kinds`` instead, so it would show here as a disagreement)."""

    recompiles: int
    """Recompiles: the ``recompile_reasons_<n>`` artifacts of ``compile_directory.json``
    (PyTorch writes that record before each compile of a frame it had compiled before, the
    failed guards as payload; a compile refused by the recompile limit still has one).

    dynscope: ``rep.recompile_count``, compiles whose id is ``F/C`` with ``C > 0``, counted
    from the ids whether or not a reason was logged. The two differ only for a torch that
    writes no ``recompile_reasons`` record (before 2.5); the logs compared here all have it."""

    failures: int
    """Compiles that failed: the rows of ``failures_and_restarts.html`` whose failure type is
    not ``RestartAnalysis`` (one per ``compilation_metrics`` record with a ``fail_type``).

    dynscope: frames with ``status == "failed"`` (a ``fail_type`` in their metrics). A frame
    dynscope calls ``"empty"`` (no ops, no graph) is no failure in either tool."""

    restarts: int
    """Times Dynamo restarted its analysis of a compile: the ``RestartAnalysis`` rows of
    ``failures_and_restarts.html`` (one per entry of ``restart_reasons``; tlparse's index
    page adds these and the failures into its "N restart(s) and/or compilation failure(s)").

    dynscope: the sum of ``rep.frames[i].restarts`` (``len(restart_reasons)`` per compile)."""


def tlparse_binary() -> Path:
    """The tlparse executable: beside ``sys.executable`` (a venv's bin/), else on PATH.

    Raises:
        FileNotFoundError: tlparse is not installed (``pip install 'tlparse>=0.4'``; it is
            in dynscope's test extras).
    """
    here = Path(sys.executable).parent / "tlparse"
    if here.is_file():
        return here
    found = shutil.which("tlparse")
    if found is None:
        raise FileNotFoundError(
            f"tlparse is not installed beside {sys.executable} nor on PATH: pip install 'tlparse>=0.4' "
            f"(dynscope's test extras have it)"
        )
    return Path(found)


def _run_tlparse(args: list[str]) -> None:
    proc = subprocess.run(
        [str(tlparse_binary()), *args, "--overwrite", "--no-browser"],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"tlparse {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")


def tlparse_counts(log: Path, out: Path) -> TlparseCounts:
    """Run tlparse on one log into ``out`` (replaced) and read its counts back.

    Raises:
        FileNotFoundError: tlparse is not installed.
        RuntimeError: tlparse exited non-zero.
    """
    _run_tlparse([str(log), "-o", str(out)])
    return read_tlparse_output(out)


def tlparse_rank_counts(folder: Path, out: Path) -> dict[int, TlparseCounts]:
    """Run tlparse's multi-rank mode (``--all-ranks-html``) on a folder of rank logs into
    ``out`` and read each rank's counts back from its ``rank_<r>/`` folder.

    Raises:
        FileNotFoundError: tlparse is not installed.
        RuntimeError: tlparse exited non-zero or wrote no rank folder.
    """
    _run_tlparse([str(folder), "--all-ranks-html", "-o", str(out)])
    ranks = {int(d.name.removeprefix("rank_")): read_tlparse_output(d) for d in out.glob("rank_*") if d.name[5:].isdigit()}
    if not ranks:
        raise RuntimeError(f"tlparse --all-ranks-html wrote no rank_<r>/ folder under {out}")
    return dict(sorted(ranks.items()))


def _id_key(cid: str) -> tuple[int, ...]:
    """Numeric order of "F/C" and "!A/F/C" ids: plain ids first, then by each number."""
    parts = cid.lstrip("!").split("/")
    return (1 if cid.startswith("!") else 0, *(int(p) for p in parts))


def _compile_id(key: str) -> str | None:
    """``"[0/0_1]"`` -> ``"0/0"``; ``"[!0/1/0]"`` -> ``"!0/1/0"``; None for ``[-/-]`` and the like."""
    m = _COMPILE_ID.match(key)
    if m is None or not (m.group(2).isdigit() and m.group(3).isdigit()):
        return None
    autograd, frame, compile_no = m.group(1), m.group(2), m.group(3)
    return f"!{autograd}/{frame}/{compile_no}" if autograd is not None else f"{frame}/{compile_no}"


def read_tlparse_output(out: Path) -> TlparseCounts:
    """The counts in a folder tlparse wrote for one log (see :class:`TlparseCounts`).

    Raises:
        FileNotFoundError: the folder lacks compile_directory.json or failures_and_restarts.html.
    """
    directory = json.loads((out / "compile_directory.json").read_text(encoding="utf-8"))
    ids: set[str] = set()
    breaks = recompiles = 0
    for key, entry in directory.items():
        cid = _compile_id(key)
        # An id with no artifact is not a compile: torch 2.15's torch.export describes its
        # fake tensors under "0/0" (describe_tensor records) without Dynamo compiling.
        if cid is not None and entry.get("artifacts"):
            ids.add(cid)
        for artifact in entry.get("artifacts", []):
            name = str(artifact.get("name", ""))
            breaks += bool(_BREAK_ARTIFACT.match(name))
            recompiles += bool(_RECOMPILE_ARTIFACT.match(name))
    failures = restarts = 0
    page = (out / "failures_and_restarts.html").read_text(encoding="utf-8")
    for _, kind in _ROW.findall(page):
        # Failure reasons are HTML-escaped by tlparse, so a cell never holds a stray "<td>".
        if _TAG.sub("", kind).strip() == "RestartAnalysis":
            restarts += 1
        else:
            failures += 1
    return TlparseCounts(
        compile_ids=tuple(sorted(ids, key=_id_key)),
        graph_breaks=breaks,
        recompiles=recompiles,
        failures=failures,
        restarts=restarts,
    )


def dynscope_counts(rep: Report) -> TlparseCounts:
    """The same counts from a dynscope Report, by the definitions of :class:`TlparseCounts`."""
    # Dynamo's compiles: an ahead-of-time compile (AOTInductor) has no compile id, and
    # tlparse files it under "-_-_-_-" with no id either.
    ids = {f.torch_compile_id or f.compile_id for f in rep.frames if f.compile_id}
    return TlparseCounts(
        compile_ids=tuple(sorted(ids, key=_id_key)),
        graph_breaks=rep.break_count,
        recompiles=rep.recompile_count,
        failures=sum(1 for f in rep.frames if f.status == "failed"),
        restarts=sum(f.restarts for f in rep.frames),
    )
