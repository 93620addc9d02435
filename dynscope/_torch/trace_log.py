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
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

from dynscope._errors import DecompressionLimitError
from dynscope._torch import records
from dynscope._torch.bounded_json import load_json
from dynscope._torch.records import unknown_kind
from dynscope._torch.trace import TraceEvent, event_from

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

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
NUL_BYTES = "record with NUL bytes (replaced)"


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
    notes: list[str] = field(default_factory=list)  # what the report says of the file as a whole (a .gz cut short)
    # (kind, what is wrong) -> [records, byte offset of the first]: records that failed the
    # registry's schema, counted in ``unreadable`` with the first one's line once read
    invalid: dict[tuple[str, str], list[int]] = field(default_factory=dict)


def rank_from_name(path: str | Path) -> int | None:
    """The rank in a trace file's name (``..._rank_3_x.log`` -> 3), None without one."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


_RANK_FIELD = re.compile(rb'"rank": (\d+)[,}]')
_RANK_SCAN = 8 << 20


def rank_of(path: str | Path) -> int | None:
    """A trace file's rank: the "rank" its records carry (torch.distributed was initialised),
    else the one in its name, None when neither says (a single process). Reads only the
    first records."""
    try:
        with _open(Path(path)) as f:
            line_start, seen = True, 0
            for _ in range(2000):  # the first 2000 lines, at most 8 MiB: a line of any length is read in pieces
                piece = f.readline(65536)
                if not piece or seen > _RANK_SCAN:
                    break
                seen += len(piece)
                if line_start and piece[:1] != b"\t" and (m := _RANK_FIELD.search(piece, 0, 600)):
                    return int(m.group(1))
                line_start = piece.endswith(b"\n")
    except _UNREADABLE:
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
    except _UNREADABLE:
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
    except _UNREADABLE:
        return False
    return bool(_PREFIX.match(first)) and b"{" in first


#: What reading a log can raise past its opening: the file system's errors, and a ``.gz``
#: file's cut short (EOFError), not gzip (BadGzipFile, an OSError) or corrupt (zlib.error).
_UNREADABLE = (OSError, EOFError, zlib.error)


def _open(path: Path) -> IO[bytes]:
    """The file in binary; a ``.gz`` file (logs copied off a cluster compressed) is unzipped as read."""
    if path.suffix == ".gz":
        return cast("IO[bytes]", gzip.open(path, "rb"))
    return path.open("rb")


#: The most of one record's payload kept in memory, and so in a report, on a page or in
#: report.json: 32 MiB (``DYNSCOPE_PAYLOAD_MB`` overrides). A longer payload keeps its head
#: (cut at a line end), is still checked whole against its MD5, and is named in
#: ``Report.unparsed_kinds`` with its size and the byte where its record starts in the file.
PAYLOAD_CAP = 32 << 20
#: A ``.gz`` log that unzips to more than GZIP_MAX_RATIO times the compressed bytes read, once
#: past GZIP_FLOOR bytes unzipped, stops with DecompressionLimitError naming the file (``DYNSCOPE_GZIP_MAX_RATIO``
#: overrides the ratio). Trace logs compress 5-15 times; gzip's best, a file of zeros, about
#: 1030 times.
GZIP_MAX_RATIO = 100
GZIP_FLOOR = 256 << 20


def payload_cap() -> int:
    """The bytes of one payload kept: ``DYNSCOPE_PAYLOAD_MB`` (MiB, a fraction allowed), else PAYLOAD_CAP."""
    return _env_number("DYNSCOPE_PAYLOAD_MB", PAYLOAD_CAP, 1 << 20)


def _env_number(name: str, default: int, unit: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        value = 0.0
    return int(value * unit) if value > 0 else default


class _Read(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Unzipped:
    """A ``.gz`` log read through a limit: once past GZIP_FLOOR bytes unzipped, more than
    GZIP_MAX_RATIO times the compressed bytes read so far raises DecompressionLimitError (a
    gzip bomb, or something that is not a log), within a second whatever the file's size."""

    def __init__(self, f: IO[bytes], path: Path, raw: Any = None) -> None:
        self._f, self._path, self._n = f, path, 0
        self._raw = raw if raw is not None else getattr(f, "fileobj", None)  # the compressed file under gzip's reader
        self._ratio = _env_number("DYNSCOPE_GZIP_MAX_RATIO", GZIP_MAX_RATIO, 1)

    def _compressed(self) -> int:
        try:
            return max(1, int(self._raw.tell())) if self._raw is not None else self._path.stat().st_size
        except (OSError, ValueError):
            return self._path.stat().st_size

    def read(self, size: int, /) -> bytes:
        data = self._f.read(size)
        self._n += len(data)
        if self._n > GZIP_FLOOR and self._n > self._ratio * (packed := self._compressed()):
            why = (f"its first {packed:,} compressed bytes unzipped to {self._n:,}, over "
                   f"{self._ratio} times as many (a trace log compresses 5 to 15 times): stopped, as a "
                   f"gzip bomb or a file that is not a log. If it is a real log, unzip it (gunzip -k) "
                   f"and read the .log, or raise the limit with DYNSCOPE_GZIP_MAX_RATIO=<ratio>")
            raise DecompressionLimitError(f"{self._path}: {why}", why=why)
        return data


def read_log(path: str | Path, *, lowering: bool = True, block_size: int = 0) -> TraceLog:
    """Read one TORCH_TRACE log into its kept events, in time linear in its size and memory
    bounded by the block size and the payload cap (``payload_cap()``), whatever its lines.

    Args:
        path: the log file (``.gz`` is read through gzip).
        lowering: keep AOTAutograd's and Inductor's records too (AOT graphs, kernels,
            compile steps). Defaults to True.
        block_size: bytes read at a time. Defaults to 4 MiB (tests read in tiny blocks to
            cut records at every place).

    Raises:
        OSError: the file cannot be opened.
        DecompressionLimitError: a ``.gz`` file unzips to over GZIP_MAX_RATIO times its size.
    """
    p = Path(path)
    log = TraceLog(path=str(p))
    with _open(p) as f:
        reader: _Read = _Unzipped(cast("IO[bytes]", _GzipRead(f, log)), p, getattr(f, "fileobj", None)) if p.suffix == ".gz" else f
        for raw in _records(reader, log, block_size or _BLOCK, payload_cap()):
            _keep(raw, log, lowering)
    if log.rank is None:
        log.rank = rank_from_name(p)
    if log.invalid:
        lines = _lines_at(p, [offset for _, offset in log.invalid.values()])
        for (kind, problem), (n, offset) in log.invalid.items():
            log.unreadable[invalid_label(kind, problem, lines.get(offset))] += n
    return log


class _GzipRead:
    """A ``.gz`` log read as far as it goes: where it ends early (a copy cut short) or its
    data is corrupt (a deflate or CRC error), reading stops there and a note names the file."""

    def __init__(self, f: IO[bytes], log: TraceLog) -> None:
        self._f, self._log, self._n, self._done = cast("gzip.GzipFile", f), log, 0, False

    def read(self, size: int, /) -> bytes:
        """Up to ``size`` bytes, in pieces of one inflate each (``read1``), so what was
        unzipped before the damage is returned, never lost with a failed whole read."""
        pieces: list[bytes] = []
        got = 0
        while not self._done and got < size:
            try:
                piece = self._f.read1(size - got)
            except EOFError:
                self._stop("ends early (cut short, as by a copy that stopped): read as far as it goes")
                break
            except (gzip.BadGzipFile, zlib.error) as err:
                checked = isinstance(err, gzip.BadGzipFile) and ("CRC" in str(err) or "length" in str(err))
                self._stop(f"fails its check ({err}): read whole, but records in it may be damaged" if checked
                           else f"is corrupt ({err}): read up to the damage, the rest lost")
                break
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
            self._n += len(piece)
        return b"".join(pieces)

    def _stop(self, what: str) -> None:
        self._done = True
        self._log.notes.append(f"{Path(self._log.path).name}: the gzip file {what} ({self._n:,} bytes unzipped)")


class _Payload:
    """A record's payload as it streams in: its lines without the tab PyTorch puts in front,
    the MD5 of all of it, and its first ``cap`` bytes (the rest counted, never held)."""

    __slots__ = ("cap", "head", "md5", "size", "_line_start", "_newline")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.size = 0
        self._line_start = True  # the next byte starts a payload line (its tab is PyTorch's)
        self._newline = False  # a newline held back: the record's last one is not payload

    def add(self, raw: bytes) -> None:
        """Payload lines as written (each "\\t" + line + "\\n"), whole or a piece of one."""
        if self._line_start and raw[:1] == b"\t":
            raw = raw[1:]
        if not raw:
            self._line_start = False
            return
        self._line_start = raw.endswith(b"\n")
        data = raw.replace(b"\n\t", b"\n")
        if self._newline:
            self._emit(b"\n")
        self._newline = data.endswith(b"\n")
        self._emit(memoryview(data)[:-1] if self._newline else data)

    def _emit(self, data: bytes | memoryview) -> None:
        self.md5.update(data)
        self.size += len(data)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += data[:room]

    @property
    def cut(self) -> bool:
        return self.size > self.cap

    def kept(self) -> bytes:
        """The payload, or its first ``cap`` bytes cut at the last line end (a character
        end when it has none)."""
        if not self.cut:
            return bytes(self.head)
        end = self.head.rfind(b"\n")
        return bytes(self.head[:end]) if end > 0 else _whole_chars(bytes(self.head))


def _whole_chars(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut short at its end."""
    for back in range(1, min(4, len(data)) + 1):
        c = data[-back]
        if c & 0xC0 != 0x80:  # a character's first byte
            need = 2 if c >> 5 == 0b110 else 3 if c >> 4 == 0b1110 else 4 if c >> 3 == 0b11110 else 1
            return data if need <= back else data[:-back]
    return data


@dataclass
class _Raw:
    """One record as read: its kind, metadata line, payload (tabs removed), whether it ended cleanly."""

    kind: str  # the event's name, or the artifact's
    artifact: bool
    meta: bytes
    payload: _Payload | None  # None: not kept, its payload was skipped unread
    complete: bool = True
    offset: int = 0  # the byte of the (unzipped) file where the record starts


#: Bytes read at a time: records are cut out of each block with C-level searches, so the
#: payloads of records dynscope does not read are never split into lines in Python.
_BLOCK = 1 << 22
#: Where a line that is not a payload line starts: a record's first line (or an interleaved one).
_LINE_START = re.compile(rb"\n(?!\t)")
#: The longest start of a line held whole: past it a payload line streams into its record's
#: payload (or is skipped), and a longer metadata line or foreign line is counted and skipped.
_LONG_LINE = 8 << 20
LONG_METADATA = f"record whose metadata line is over {_LONG_LINE >> 20} MiB (skipped)"


def _records(f: _Read, log: TraceLog, block_size: int, cap: int = PAYLOAD_CAP) -> Iterator[_Raw]:
    """The records of a log, in order; lines outside any record counted in ``log.unreadable``.

    Each byte is looked at a bounded number of times and at most one block, one line start
    (``_LONG_LINE``) and one payload head (``cap``) are held: a line is never re-joined as it
    grows, so a gigabyte on one line costs what a gigabyte of short lines costs.
    """
    current: _Raw | None = None
    held: list[bytes] = []  # the start of a line not yet known to be whole
    held_n = 0
    long = ""  # inside a long line: "payload" (streams into current's payload) or "skip"
    base = 0  # the file offset of the first byte not yet cut into segments
    ended_cleanly = True
    while block := f.read(block_size):
        ended_cleanly = block.endswith(b"\n")
        pos = 0
        if long:
            nl = block.find(b"\n")
            pos = len(block) if nl < 0 else nl + 1
            if long == "payload" and current is not None and current.payload is not None:
                current.payload.add(block[:pos] if pos < len(block) else block)
            base += pos
            if nl < 0:
                continue
            long = ""
        last = block.rfind(b"\n")
        if last < pos:  # no line ends in the rest of this block
            held.append(block[pos:] if pos else block)
            held_n += len(block) - pos
            if held_n > _LONG_LINE:
                line = b"".join(held)
                held, held_n = [], 0
                current, long = yield from _long_line(line, current, log, base, cap)
                base += len(line)
            continue
        whole = block[pos:last + 1]
        if held:
            whole = b"".join((*held, whole))
        for start, segment in _segments(whole):
            current = yield from _take(segment, current, log, base + start, cap)
        base += len(whole)
        tail = block[last + 1:]
        held, held_n = ([tail], len(tail)) if tail else ([], 0)
    if held and not long:  # a last line with no newline: the file was cut mid-write
        for start, segment in _segments(b"".join(held)):
            current = yield from _take(segment, current, log, base + start, cap)
    if current is not None:
        # A file that does not end in a newline was cut mid-write; its last record is whole
        # only if its payload still matches the MD5 PyTorch wrote beside it (checked in _keep).
        current.complete = ended_cleanly
        yield current


def _long_line(line: bytes, current: _Raw | None, log: TraceLog, offset: int,
               cap: int) -> Generator[_Raw, None, tuple[_Raw | None, str]]:
    """The start of a line over ``_LONG_LINE`` bytes: a payload line goes on streaming into
    its record's payload; a record's first line is counted (its record skipped); another
    stream's line is counted. Returns the record now being read and what the rest of the line is."""
    if line[:1] == b"\t":
        if current is None:
            log.unreadable[INTERLEAVED] += 1
            return current, "skip"
        if current.payload is None:
            return current, "skip"
        current.payload.add(line)
        return current, "payload"
    m = _PREFIX.match(line)
    if m is None:
        log.unreadable[INTERLEAVED] += 1
        return current, "skip"
    if current is not None:
        yield current
    log.records += 1
    log.unreadable[LONG_METADATA] += 1
    return _Raw(kind="", artifact=False, meta=b"", payload=None, offset=offset), "skip"


def _segments(data: bytes) -> Iterator[tuple[int, bytes]]:
    """``data`` cut before each line that is not a payload line, with where each piece starts."""
    start = 0
    for m in _LINE_START.finditer(data):
        yield start, data[start:m.end()]
        start = m.end()
    if start < len(data):
        yield start, data[start:]


def _take(segment: bytes, current: _Raw | None, log: TraceLog, offset: int = 0,
          cap: int = PAYLOAD_CAP) -> Generator[_Raw, None, _Raw | None]:
    """Read one segment (a first line and the payload lines after it, starting at byte
    ``offset`` of the file); yield the record it ends; return the record now being read."""
    if segment[:1] == b"\t":  # payload lines continuing from the last read
        if current is None:
            log.unreadable[INTERLEAVED] += segment.count(b"\n") or 1
        elif current.payload is not None:
            current.payload.add(segment)
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
                current.payload.add(body)
        return current
    if current is not None:
        yield current
    meta = first[m.end():]
    kind = _kind(meta)
    log.records += 1
    container = meta.startswith(_CONTAINERS)
    keep = records.kept_in_log(kind, in_graph_dump=meta.startswith(_DUMP))
    payload: _Payload | None = None
    if keep:
        payload = _Payload(cap)
        if body:
            payload.add(body)
    return _Raw(kind=kind, artifact=container, meta=meta, payload=payload, offset=offset)


#: How a container record's metadata line starts (its kind is the name inside).
_DUMP = b'{"' + records.GRAPH_DUMP.encode() + b'"'
_CONTAINERS = (b'{"' + records.ARTIFACT.encode() + b'"', _DUMP)


def _kind(meta: bytes) -> str:
    """A record's kind from its metadata line, without parsing the JSON."""
    m = _FIRST_KEY.match(meta)
    if m is None:
        return ""
    kind = m.group(1).decode("ascii", "replace")
    if records.is_container(kind):  # the kind is the name inside
        a = _ARTIFACT_NAME.search(meta, m.end(), m.end() + 300)
        return a.group(1).decode("ascii", "replace") if a is not None else ""
    return kind


def _text(data: bytes, log: TraceLog) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        log.unreadable[NOT_UTF8] += 1
        text = data.decode("utf-8", "replace")
    if "\x00" in text:  # never PyTorch's; a file name holding one cannot even be looked up
        log.unreadable[NUL_BYTES] += 1
        text = text.replace("\x00", "\ufffd")
    return text


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
        metadata = load_json(_text(raw.meta, log))  # depth bounded: never a RecursionError
    except ValueError:
        log.unreadable[CUT_SHORT if not raw.complete else BAD_METADATA] += 1
        return
    if not isinstance(metadata, dict):
        log.unreadable[BAD_METADATA] += 1
        return
    # The one validation step (records.validate): each field against its kind's schema; a
    # damaged field is read as absent, a record without its compile id left out, each counted.
    checked, problems = records.validate(metadata)
    for problem in problems:
        _invalid(log, raw, problem)
    if checked is None:
        return
    metadata = checked
    payload: str | None = None
    if "has_payload" in metadata:
        data = _payload_bytes(raw, raw.payload, log)
        # Every payload read is checked against the MD5 PyTorch wrote beside it (of its UTF-8
        # bytes). The last record of a log cut mid-write is dropped; a record damaged anywhere
        # else is counted per kind and read as far as it goes (its metadata, which carries the
        # counts, is whole; a payload that no longer parses gives no event).
        if raw.payload.md5.hexdigest() != metadata["has_payload"]:
            if not raw.complete:
                log.unreadable[CUT_SHORT] += 1
                return
            log.unreadable[damaged(raw.kind or "?")] += 1
        payload, why = records.validate_payload(raw.kind, _text(data, log))
        if why:
            _invalid(log, raw, why)
    elif not raw.complete and not raw.meta.rstrip().endswith(b"}"):
        log.unreadable[CUT_SHORT] += 1
        return
    if log.rank is None and isinstance(metadata.get("rank"), int):
        log.rank = metadata["rank"]  # the records' own word; the file name is only a fallback
    apart = _READ_APART.get(raw.kind)
    if apart is not None:
        apart(log, metadata, payload)
        return
    event = event_from(metadata, payload, lowering=lowering, strings=log.strings)
    if event is not None:
        log.events.append(event)


def _invalid(log: TraceLog, raw: _Raw, problem: str) -> None:
    """Count a record that failed the registry's schema (its line is found once the log is read)."""
    seen = log.invalid.setdefault((raw.kind or "?", problem), [0, raw.offset])
    seen[0] += 1


def invalid_label(kind: str, problem: str, line: int | None) -> str:
    """The unparsed_kinds label of records of one kind that failed its schema the same way."""
    where = f"first at line {line:,}" if line is not None else "line not found"
    return f"record {kind!r} whose {problem}; {where}"


def _lines_at(path: Path, offsets: list[int]) -> dict[int, int]:
    """The line (1-based) each byte offset of the (unzipped) file is on; one pass, stopped at
    the last offset; offsets past what can be read are left out."""
    out: dict[int, int] = {}
    wanted = sorted(set(offsets))
    line, pos, i = 1, 0, 0
    try:
        with _open(path) as f:
            while i < len(wanted) and (block := f.read(_BLOCK)):
                while i < len(wanted) and wanted[i] < pos + len(block):
                    out[wanted[i]] = line + block.count(b"\n", 0, wanted[i] - pos)
                    i += 1
                line += block.count(b"\n")
                pos += len(block)
    except _UNREADABLE:
        pass
    return out


def _payload_bytes(raw: _Raw, payload: _Payload, log: TraceLog) -> bytes:
    """A record's payload as kept; one over the cap is counted with what was cut and where
    the whole of it is."""
    if payload.cut:
        where = "unzipped " if log.path.endswith(".gz") else ""
        log.unreadable[
            f"record {raw.kind or '?'!r} with a payload of {payload.size:,} bytes: its first "
            f"{_mib(payload.cap)} read, the rest cut (the whole record: {Path(log.path).name}, "
            f"{where}byte {raw.offset:,}; tlparse shows it too; DYNSCOPE_PAYLOAD_MB raises the cap)"
        ] += 1
    return payload.kept()


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def _intern(log: TraceLog, metadata: dict[str, Any], payload: str | None) -> None:
    """A ``{"str": [text, n]}`` record: string n of this log."""
    number, text = records.interned(metadata) or (-1, "")
    if number >= 0:
        log.strings[number] = text
    else:
        log.unreadable[records.STR] += 1


def _torch_version(log: TraceLog, metadata: dict[str, Any], payload: str | None) -> None:
    """The ``torch_version`` artifact: the release that wrote the log."""
    if not payload:
        return
    try:
        log.torch_version = str(load_json(payload).get("pytorch_version", ""))
    except (ValueError, AttributeError):
        log.unreadable[records.TORCH_VERSION] += 1


#: The kinds the log reader reads itself, never events (records.READ_APART) -> how.
_READ_APART: dict[str, Callable[[TraceLog, dict[str, Any], str | None], None]] = {
    records.STR: _intern,
    records.TORCH_VERSION: _torch_version,
}
