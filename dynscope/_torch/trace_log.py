"""Read a TORCH_TRACE log file: PyTorch's structured compile trace as it writes it to disk.

With ``TORCH_TRACE=<folder>`` set, PyTorch writes the records of the ``torch.__trace`` logger
(those :mod:`dynscope._torch.trace` reads in process) to
``<folder>/dedicated_log_torch_trace_[rank_<r>_]<random>.log``, one file per process, through
``TorchLogsFormatter(trace=True)`` (torch/_logging/_internal.py, torch 2.2 .. 2.14). A record is:

- one line: a glog-style prefix, ``V1201 14:41:29.123456 12345 torch/_dynamo/x.py:123]``
  (level letter, month and day, time with microseconds, process id, the logging call's file
  and line), a space, then the record's metadata as one JSON object whose first key is the
  record's kind (``{"dynamo_start": {...}, "frame_id": 0, ...}``, or ``{"artifact": {"name":
  ...}}``), with ``has_payload`` (the payload's MD5) when a payload follows;
- then, when it has one, the payload: each of its lines with a tab in front.

``{"str": [text, n]}`` records intern strings: later stacks give a file as the number ``n``.

The reader streams the file in binary, line by line, and decodes only the records it keeps
(their kind decided from the metadata's first key, before any JSON is parsed), so a 2 GB log
is never read whole and the payloads of records dynscope does not read are skipped unseen.
What it could not read is counted per kind, never dropped silently: lines in no record
(another stream's output interleaved), metadata that is not JSON, record kinds dynscope does
not know, non-UTF-8 bytes, and a last record cut short by a job killed mid-write.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from dynscope._torch import records
from dynscope._torch.records import unknown_kind
from dynscope._torch.trace import TraceEvent, event_from

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

#: The prefix of a record's first line (torch 2.2 .. 2.14 write the same): level, month and
#: day, time, process id, the logging call's "file:line]". Anything before the metadata's
#: "{" is the prefix; a rank prefix ("[rank0]:", written by the non-trace formatter) is
#: allowed so logs that went through it still read.
_PREFIX = re.compile(
    rb"^(?:\[rank\d+\]:)?[VIWEC](\d\d)(\d\d) (\d\d):(\d\d):(\d\d\.\d+) +(\d+) [^\]\n]*\] ")
#: The first key of the metadata object: the record's kind.
_FIRST_KEY = re.compile(rb'\{"([^"\\]+)"')
#: An artifact's name, the kind dynscope reads it by.
_ARTIFACT_NAME = re.compile(rb'"name": "([^"\\]+)"')
#: A trace file's rank, from its name: PyTorch's ``dedicated_log_torch_trace_rank_3_x8k2.log``,
#: and the names tools and people leave after renaming (``..._rank_3.log``, ``rank3.log.gz``,
#: ``trace-rank-3.log``): "rank", an optional separator, the number, then a separator or the end.
_RANK_IN_NAME = re.compile(r"(?:^|[_.\-])rank[_\-]?(\d+)(?=[_.\-]|$)", re.IGNORECASE)

#: The words for what could not be read, as Report.unparsed_kinds counts them.
INTERLEAVED = "line in no trace record (another stream's output mixed in)"
BAD_METADATA = "record whose metadata is not JSON"
CUT_SHORT = "last record cut short (the job stopped mid-write)"
NOT_UTF8 = "record with bytes that are not UTF-8 (replaced)"


def damaged(kind: str) -> str:
    """The unparsed_kinds label of a record whose payload fails the MD5 PyTorch wrote beside
    it (the file was damaged after it was written: a bad copy, a disk error, an edit)."""
    return f"record {kind!r} whose payload fails its MD5 (damaged; read as far as it goes)"


@dataclass
class TraceLog:
    """What one log file held: its kept events in order, and what could not be read."""

    path: str
    events: list[TraceEvent] = field(default_factory=list)
    rank: int | None = None  # the records' "rank", else the file name's; None: not in a job
    records: int = 0  # records read, kept or not
    unreadable: Counter[str] = field(default_factory=Counter)  # what could not be read, per kind
    torch_version: str = ""  # from the torch_version artifact, when the log has it
    strings: dict[int, str] = field(default_factory=dict)  # interned strings ("str" records)


def rank_from_name(path: str | Path) -> int | None:
    """The rank in a trace file's name (``..._rank_3_x.log`` -> 3), None without one."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


_RANK_FIELD = re.compile(rb'"rank": (\d+)[,}]')


def rank_of(path: str | Path) -> int | None:
    """A trace file's rank: the "rank" its records carry (torch.distributed was initialised),
    else the one in its name, None when neither says (a single process). Reads only the
    first records."""
    try:
        with _open(Path(path)) as f:
            for _, line in zip(range(2000), f, strict=False):
                if line[:1] != b"\t" and (m := _RANK_FIELD.search(line, 0, 600)):
                    return int(m.group(1))
    except (OSError, EOFError, gzip.BadGzipFile):
        pass
    return rank_from_name(path)


@dataclass(frozen=True)
class LogStamp:
    """When and by which process a log was started, from its first record's prefix (the
    glog prefix carries month, day, time and process id, no year)."""

    when: str  # "12-01 14:41:29", as a person reads it
    seconds: float  # seconds since the start of the year (months counted as 31 days: for order and gaps)
    pid: int


def log_stamp(path: str | Path) -> LogStamp | None:
    """The first record's time and process id; None when the file does not start like a
    trace log or cannot be read."""
    try:
        with _open(Path(path)) as f:
            first = f.readline(65536)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    m = _PREFIX.match(first)  # its groups: month, day, hour, minute, seconds, pid
    if m is None:
        return None
    month, day, hour, minute = (int(m.group(i)) for i in range(1, 5))
    sec = float(m.group(5))
    seconds = (((month - 1) * 31 + day - 1) * 24 + hour) * 3600 + minute * 60 + sec
    return LogStamp(f"{month:02d}-{day:02d} {hour:02d}:{minute:02d}:{int(sec):02d}", seconds, int(m.group(6)))


def is_trace_log(path: str | Path) -> bool:
    """True when the file starts like a TORCH_TRACE log (its first line is a trace record)."""
    try:
        with _open(Path(path)) as f:
            first = f.readline(65536)
    except (OSError, EOFError, gzip.BadGzipFile):
        return False
    return bool(_PREFIX.match(first)) and b"{" in first


def _open(path: Path) -> IO[bytes]:
    """The file in binary; a ``.gz`` file (logs copied off a cluster compressed) is unzipped as read."""
    if path.suffix == ".gz":
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return path.open("rb")


def read_log(path: str | Path, *, lowering: bool = True, block_size: int = 0) -> TraceLog:
    """Read one TORCH_TRACE log into its kept events.

    Args:
        path: the log file (``.gz`` is read through gzip).
        lowering: keep AOTAutograd's and Inductor's records too (AOT graphs, kernels,
            compile steps). Defaults to True.
        block_size: bytes read at a time. Defaults to 4 MiB (tests read in tiny blocks to
            cut records at every place).

    Raises:
        OSError: the file cannot be opened.
    """
    p = Path(path)
    log = TraceLog(path=str(p))
    with _open(p) as f:
        for raw in _records(f, log, block_size or _BLOCK):
            _keep(raw, log, lowering)
    if log.rank is None:
        log.rank = rank_from_name(p)
    return log


@dataclass
class _Raw:
    """One record as read: its kind, metadata line, payload (tabs removed), whether it ended cleanly."""

    kind: str  # the event's name, or the artifact's
    artifact: bool
    meta: bytes
    payload: list[bytes] | None  # None: not kept, its payload was skipped unread
    complete: bool = True


#: Bytes read at a time: records are cut out of each block with C-level searches, so the
#: payloads of records dynscope does not read are never split into lines in Python.
_BLOCK = 1 << 22
#: Where a line that is not a payload line starts: a record's first line (or an interleaved one).
_LINE_START = re.compile(rb"\n(?!\t)")


def _records(f: IO[bytes], log: TraceLog, block_size: int) -> Iterator[_Raw]:
    """The records of a log, in order; lines outside any record counted in ``log.unreadable``."""
    current: _Raw | None = None
    rest = b""  # the end of the last read: a line not yet known to be whole
    ended_cleanly = True
    while True:
        block = f.read(block_size)
        data = rest + block
        if block:
            ended_cleanly = block.endswith(b"\n")
        # Cut after the last whole line (at the end of the file, all of it): a line is
        # never split between two reads.
        cut = data.rfind(b"\n") + 1 if block else len(data)
        whole, rest = data[:cut], data[cut:]
        for segment in _segments(whole):
            current = yield from _take(segment, current, log)
        if not block:
            break
    if current is not None:
        # A file that does not end in a newline was cut mid-write; its last record is whole
        # only if its payload still matches the MD5 PyTorch wrote beside it (checked in _keep).
        current.complete = ended_cleanly
        yield current


def _segments(data: bytes) -> Iterator[bytes]:
    """``data`` cut before each line that is not a payload line."""
    start = 0
    for m in _LINE_START.finditer(data):
        yield data[start:m.end()]
        start = m.end()
    if start < len(data):
        yield data[start:]


def _take(segment: bytes, current: _Raw | None, log: TraceLog) -> Generator[_Raw, None, _Raw | None]:
    """Read one segment (a first line and the payload lines after it); yield the record it
    ends; return the record now being read."""
    if segment[:1] == b"\t":  # payload lines continuing from the last read
        if current is None:
            log.unreadable[INTERLEAVED] += segment.count(b"\n") or 1
        elif current.payload is not None:
            current.payload.append(segment)
        return current
    nl = segment.find(b"\n")
    first, body = (segment, b"") if nl < 0 else (segment[:nl], segment[nl + 1:])
    m = _PREFIX.match(first)
    if m is None:
        if first.strip():
            log.unreadable[INTERLEAVED] += 1
        if body:  # payload lines after a foreign line: they continue the record being read
            if current is None:
                log.unreadable[INTERLEAVED] += body.count(b"\n") or 1
            elif current.payload is not None:
                current.payload.append(body)
        return current
    if current is not None:
        yield current
    meta = first[m.end():]
    kind = _kind(meta)
    log.records += 1
    container = meta.startswith(_CONTAINERS)
    # AOTInductor's code is read from graph dumps only (an artifact of that name is not it).
    keep = (records.kept_kind(kind, lowering=True) and (kind not in records.AOT_DUMPS or meta.startswith(_DUMP))) \
        or kind in records.READ_APART
    return _Raw(kind=kind, artifact=container, meta=meta, payload=[body] if keep else None)


#: How a container record's metadata line starts (its kind is the name inside).
_DUMP = b'{"' + records.GRAPH_DUMP.encode() + b'"'
_CONTAINERS = (b'{"' + records.ARTIFACT.encode() + b'"', _DUMP)


def _kind(meta: bytes) -> str:
    """A record's kind from its metadata line, without parsing the JSON."""
    m = _FIRST_KEY.match(meta)
    if m is None:
        return ""
    kind = m.group(1).decode("ascii", "replace")
    if kind in (records.ARTIFACT, records.GRAPH_DUMP):  # containers: the kind is the name inside
        a = _ARTIFACT_NAME.search(meta, m.end(), m.end() + 300)
        return a.group(1).decode("ascii", "replace") if a is not None else ""
    return kind


def _text(data: bytes, log: TraceLog) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        log.unreadable[NOT_UTF8] += 1
        return data.decode("utf-8", "replace")


def _keep(raw: _Raw, log: TraceLog, lowering: bool) -> None:
    """Turn one record into an event (or an interned string); count what cannot be read."""
    if raw.payload is None:
        if not raw.complete:  # a record dynscope skips, but the user should know the log was cut
            log.unreadable[CUT_SHORT] += 1
            return
        if records.is_unknown(raw.kind, in_container=raw.artifact):
            log.unreadable[unknown_kind(raw.kind or "?")] += 1
        return
    try:
        metadata = json.loads(_text(raw.meta, log))
    except ValueError:
        log.unreadable[CUT_SHORT if not raw.complete else BAD_METADATA] += 1
        return
    if not isinstance(metadata, dict):
        log.unreadable[BAD_METADATA] += 1
        return
    payload: str | None = None
    if "has_payload" in metadata:
        data = _payload_bytes(raw.payload)
        # Every payload read is checked against the MD5 PyTorch wrote beside it (of its UTF-8
        # bytes). The last record of a log cut mid-write is dropped; a record damaged anywhere
        # else is counted per kind and read as far as it goes (its metadata, which carries the
        # counts, is whole; a payload that no longer parses gives no event).
        if hashlib.md5(data, usedforsecurity=False).hexdigest() != metadata["has_payload"]:
            if not raw.complete:
                log.unreadable[CUT_SHORT] += 1
                return
            log.unreadable[damaged(raw.kind or "?")] += 1
        payload = _text(data, log)
    elif not raw.complete and not raw.meta.rstrip().endswith(b"}"):
        log.unreadable[CUT_SHORT] += 1
        return
    if log.rank is None and isinstance(metadata.get("rank"), int):
        log.rank = metadata["rank"]  # the records' own word; the file name is only a fallback
    if raw.kind == records.STR:
        _intern(metadata.get(records.STR), log)
        return
    if raw.kind == records.TORCH_VERSION and payload:
        try:
            log.torch_version = str(json.loads(payload).get("pytorch_version", ""))
        except (ValueError, AttributeError):
            log.unreadable[records.TORCH_VERSION] += 1
        return
    event = event_from(metadata, payload, lowering=lowering, strings=log.strings)
    if event is not None:
        log.events.append(event)


def _payload_bytes(pieces: list[bytes]) -> bytes:
    """A record's payload from its lines as written (each "\\t" + line + "\\n")."""
    data = b"".join(pieces)
    if data.startswith(b"\t"):
        data = data[1:]
    data = data.replace(b"\n\t", b"\n")
    if data.endswith(b"\n"):
        data = data[:-1]  # the newline that ends the record's last line
    return data


def _intern(entry: Any, log: TraceLog) -> None:
    """A ``{"str": [text, n]}`` record: string n of this log."""
    if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and isinstance(entry[1], int):
        log.strings[entry[1]] = entry[0]
    else:
        log.unreadable[records.STR] += 1
