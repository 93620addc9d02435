"""TORCH_TRACE logs rewritten the way PyTorch writes them on other setups, from real CPU logs.

``as_rank(src, dst, rank, device="cuda")`` turns one process's log into rank ``rank``'s log
of a CUDA job: every record's metadata gets PyTorch's ``"rank"`` field (second key, as
``trace_structured`` puts it), tensors live on ``cuda:<rank>`` (``device=<rank>`` and CUDA
dispatch keys in the guards, ``cuda:<rank>`` in the graphs' annotations), object ids and
addresses differ per process, the process id too, and each changed payload gets its MD5
written again (``has_payload``), exactly as PyTorch would have written it. Used where no GPU
is at hand: a lent GPU records the same with two real CUDA ranks.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

_PREFIX = re.compile(rb"^([VIWEC]\d{4} \d\d:\d\d:\d\d\.\d+ +)(\d+)( [^\]\n]*\] )")
_ADDRESS = re.compile(r"\b(\d{12,})\b")


def _records(data: bytes) -> list[tuple[bytes, list[bytes]]]:
    out: list[tuple[bytes, list[bytes]]] = []
    for line in data.splitlines(keepends=True):
        if line.startswith(b"\t") and out:
            out[-1][1].append(line)
        else:
            out.append((line, []))
    return out


def record_bytes(data: bytes) -> list[bytes]:
    """The log's records as bytes, each its first line and payload lines (newlines kept)."""
    return [first + b"".join(lines) for first, lines in _records(data)]


def rewrite(src: Path, dst: Path, *, meta: Callable[[dict], dict], payload: Callable[[str, str], str],
            pid_shift: int = 0) -> None:
    """``src`` written again to ``dst``: each record's metadata through ``meta``, each
    payload (kind, text) through ``payload``, MD5s written anew, pids shifted."""
    out = []
    for first, lines in _records(src.read_bytes()):
        m = _PREFIX.match(first)
        if m is None:
            out.append(first + b"".join(lines))
            continue
        record = json.loads(first[m.end():])
        kind = next(iter(record))
        kind = record[kind].get("name", kind) if kind == "artifact" and isinstance(record[kind], dict) else kind
        record = meta(record)
        body = b""
        if "has_payload" in record:
            text = b"".join(line[1:] for line in lines).decode("utf-8")
            text = text[:-1] if text.endswith("\n") else text
            text = payload(kind, text)
            record["has_payload"] = hashlib.md5(text.encode("utf-8")).hexdigest()
            body = b"".join(b"\t" + ln.encode("utf-8") + b"\n" for ln in text.split("\n"))
        prefix = m.group(1) + str(int(m.group(2)) + pid_shift).encode() + m.group(3)
        out.append(prefix + json.dumps(record).encode("utf-8") + b"\n" + body)
    dst.write_bytes(b"".join(out))


def as_rank(src: Path, dst: Path, rank: int, *, device: str = "cuda") -> None:
    """Rank ``rank`` of a ``device`` job, from one CPU process's log (see the module)."""

    def meta(record: dict) -> dict:
        first = next(iter(record))
        return {first: record[first], "rank": rank, **{k: v for k, v in record.items() if k not in (first, "rank")}}

    def payload(kind: str, text: str) -> str:
        text = text.replace("DispatchKeySet(CPU, ", f"DispatchKeySet({device.upper()}, ")
        text = text.replace("AutogradCPU", f"Autograd{device.upper()}").replace("device=None", f"device={rank}")
        text = re.sub(r'(\]\[[^\]]*\])cpu"', rf'\1{device}:{rank}"', text)  # "f32[4, 8][8, 1]cpu" annotations
        return _ADDRESS.sub(lambda m: str(int(m.group(1)) + 4096 * (rank + 1)), text)

    rewrite(src, dst, meta=meta, payload=payload, pid_shift=rank + 1)


def insert(src: Path, dst: Path, *, before: Callable[[str, dict], bool], records: list[tuple[dict, str | None]],
           at_end: bool = False) -> None:
    """``src`` with ``records`` ((metadata, payload or None), as ``trace_structured`` writes
    them: the MD5 of the payload as ``has_payload``) written before the first record for
    which ``before(kind, metadata)`` holds, or at the end."""
    stamp_line = next(line for line in src.read_bytes().splitlines() if _PREFIX.match(line))
    m = _PREFIX.match(stamp_line)
    assert m is not None
    prefix = m.group(1) + m.group(2) + b" torch/_logging/structured.py:1] "

    def made() -> bytes:
        out = b""
        for meta, payload in records:
            meta = dict(meta)
            body = b""
            if payload is not None:
                meta["has_payload"] = hashlib.md5(payload.encode("utf-8")).hexdigest()
                body = b"".join(b"\t" + ln.encode("utf-8") + b"\n" for ln in payload.split("\n"))
            out += prefix + json.dumps(meta).encode("utf-8") + b"\n" + body
        return out

    pieces, done = [], False
    for first, lines in _records(src.read_bytes()):
        p = _PREFIX.match(first)
        if not done and not at_end and p is not None:
            record = json.loads(first[p.end():])
            kind = next(iter(record))
            kind = record[kind].get("name", kind) if kind in ("artifact", "graph_dump") else kind
            if before(kind, record):
                pieces.append(made())
                done = True
        pieces.append(first + b"".join(lines))
    if at_end:
        pieces.append(made())
    dst.write_bytes(b"".join(pieces))
