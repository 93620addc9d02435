"""Damaged and hostile TORCH_TRACE logs: reading never raises anything but a DynscopeError
naming the file (issue 44).

A seeded mutator over the real logs in tests/traces/torch-*/logs/ (every release, AOTInductor
and DDP ranks included) makes logs as jobs, copies and people damage them: a field of the
wrong type anywhere in a record's metadata, a payload edited with its MD5 remade (so the
payload's own parser reads it), a file cut at a random byte, JSON nested 100,000 deep, bytes
that are not UTF-8 and whole files in other encodings, records duplicated, reordered and
dropped, CRLF line ends, gzip files whole, cut short and corrupt, and rank folders with one
such file (or an empty one) beside real ranks. Each is read with ``dynscope.load_trace`` and
its report summarised; anything raised other than a :class:`dynscope.DynscopeError` whose
message names the file fails the test, with the seed to replay it.

The fast tier reads a few hundred mutated logs (a few seconds); the ``heavy`` tier thousands.
``python tests/read/test_trace_fuzz.py N [SEED]`` surveys N cases and prints what raised, grouped
by the place in dynscope's code that raised it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import re
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

import dynscope

ROOT = Path(__file__).resolve().parents[2]
LOGS = sorted((ROOT / "tests" / "traces").glob("torch-*/logs"))
#: The single-process logs of every release (small corpus logs, Inductor, AOTInductor, gzip).
FILES = sorted(p for d in LOGS for p in [*d.glob("*.log"), *d.glob("*.log.gz")])
#: The fast tier's logs: those under 600 KB (the corpus, AOTInductor), not the large gzip ones.
FAST_FILES = [p for p in FILES if p.suffix == ".log" and p.stat().st_size < 600_000]
#: The rank folders (a real 2-rank DDP job per release).
FOLDERS = sorted(p for d in LOGS for p in d.iterdir() if p.is_dir())

#: A metadata line: the glog prefix, then one JSON object.
_META = re.compile(rb"^((?:\[rank\d+\]:)?[VIWEC]\d{4} [^\]\n]*\] )(\{.*)$", re.DOTALL)
#: Values a field's value is swapped for: every JSON type, odd numbers, odd strings.
SWAPS: tuple[object, ...] = (
    "x", "", "0", "-1", "\x1b]0;title\x07", "é" * 3, 0, -1, 1, 10**30, -(10**30), 1.5, 1e308, float("nan"),
    float("inf"), True, False, None, [], {}, ["x"], [1, 2], [None], [{}], {"x": 1}, {"filename": 3},
    [[[[]]]], {"": {"": {}}}, 99_999_999_999,
)
DEEP = 100_000
#: The bodies of the records whose fields dynscope reads.
READ_BODIES = ("dynamo_start", "compilation_metrics", "create_symbol", "symbolic_shape_specialization",
               "guard_added_fast", "optimize_ddp_split_child", "str")
#: Field names dynscope reads: the registry's schemas, the common fields, frames' fields.
READ_FIELDS = frozenset({
    "frame_id", "frame_compile_id", "attempt", "rank", "stack", "user_stack", "filename", "line", "name", "loc",
    "str", "artifact", "graph_dump", "symbol", "val", "source", "sources", "value", "reason", "expr", "co_name",
    "co_filename", "co_firstlineno", "entire_frame_compile_time_s", "backend_compile_time_s",
    "inductor_compile_time_s", "guard_count", "graph_op_count", "graph_node_count", "fail_type", "fail_reason",
    "restart_reasons", "recompile_reason", "pytorch_version",
})


def _records(data: bytes) -> list[bytes]:
    """A log cut into records: a first line and the payload lines after it (each with its newline)."""
    parts = re.split(rb"(?<=\n)(?!\t)", data)
    return [p for p in parts if p]


def _split(record: bytes) -> tuple[bytes, dict[str, object], bytes] | None:
    """(prefix, metadata, payload lines) of a record; None when its first line is not a record's."""
    nl = record.find(b"\n")
    first, rest = (record, b"") if nl < 0 else (record[:nl], record[nl + 1:])
    m = _META.match(first)
    if m is None:
        return None
    try:
        meta = json.loads(m.group(2))
    except (ValueError, RecursionError):  # damaged, or nested deep by an earlier mutation
        return None
    return (m.group(1), meta, rest) if isinstance(meta, dict) else None


def _join(prefix: bytes, meta: dict[str, object], rest: bytes) -> bytes:
    return prefix + json.dumps(meta).encode() + b"\n" + rest


def _payload(rest: bytes) -> bytes:
    data = rest[1:] if rest.startswith(b"\t") else rest
    data = data.replace(b"\n\t", b"\n")
    return data[:-1] if data.endswith(b"\n") else data


def _lines(payload: bytes) -> bytes:
    return b"".join(b"\t" + line + b"\n" for line in payload.split(b"\n"))


def _paths(value: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every path to a value inside a JSON value (dict keys and list indices)."""
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:8]):
            out += _paths(v, (*path, i))
    return out


def _set(root: object, path: tuple[object, ...], value: object) -> object:
    if not path:
        return value
    node = root
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    return root


def _deep(rng: random.Random) -> object:
    """JSON nested DEEP levels, as text (json.dumps would recurse)."""
    open_, close = rng.choice([("[", "]"), ('{"a": ', "}")])
    return _Raw(open_ * DEEP + "1" + close * DEEP)


@dataclass(frozen=True)
class _Raw:
    """JSON text put into a record as it is."""

    text: str


def _dumps(meta: object) -> bytes:
    """json.dumps, with _Raw values put in as their text."""
    raws: list[str] = []

    def mark(v: object) -> object:
        if isinstance(v, _Raw):
            raws.append(v.text)
            return f"\x00RAW{len(raws) - 1}\x00"
        if isinstance(v, dict):
            return {k: mark(x) for k, x in v.items()}
        if isinstance(v, list):
            return [mark(x) for x in v]
        return v

    text = json.dumps(mark(meta))
    for i, raw in enumerate(raws):
        text = text.replace(f'"\\u0000RAW{i}\\u0000"', raw)
    return text.encode("utf-8", "surrogatepass")


# -- the mutations: (rng, records) -> records --------------------------------------------------


def swap_field(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """A field somewhere in 1-4 records' metadata swapped for a value of another type."""
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(recs))
        split = _split(recs[i])
        if split is None:
            continue
        prefix, meta, rest = split
        paths = [p for p in _paths(meta) if p and p[0] != "has_payload"] or [()]
        # Half the time a field dynscope reads (a field PyTorch adds is not read at all).
        read = [p for p in paths if p[-1] in READ_FIELDS or len(p) == 1]
        path = rng.choice(read if read and rng.random() < 0.5 else paths)
        value = _deep(rng) if rng.random() < 0.05 else rng.choice(SWAPS)
        meta = _set(meta, path, value)  # type: ignore[assignment]
        recs[i] = prefix + _dumps(meta) + b"\n" + rest
    return recs


def swap_read_field(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """One field dynscope reads, in one record of a kind it keeps, swapped for a value of
    another type (alone, so what it breaks is not hidden behind another damage)."""
    candidates = [i for i, r in enumerate(recs) if any(f'"{k}"'.encode() in r[:3000] for k in READ_BODIES)]
    for i in rng.sample(candidates, min(len(candidates), 8)):
        split = _split(recs[i])
        if split is None:
            continue
        prefix, meta, rest = split
        paths = [p for p in _paths(meta) if p and p[-1] in READ_FIELDS]
        if not paths:
            continue
        meta = _set(meta, rng.choice(paths), rng.choice(SWAPS))  # type: ignore[assignment]
        recs[i] = prefix + _dumps(meta) + b"\n" + rest
        break
    return recs


def _remake_md5(meta: dict[str, object], payload: bytes) -> None:
    if "has_payload" in meta:
        meta["has_payload"] = hashlib.md5(payload).hexdigest()


def edit_payload(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """A payload edited (its JSON's fields swapped, or its text cut, shuffled, junked), its MD5
    remade or not."""
    with_payload = [i for i, r in enumerate(recs) if b"has_payload" in r[:2000]]
    for i in rng.sample(with_payload, min(len(with_payload), rng.randint(1, 4))):
        split = _split(recs[i])
        if split is None:
            continue
        prefix, meta, rest = split
        payload = _payload(rest)
        try:
            doc = json.loads(payload)
        except (ValueError, RecursionError):
            doc = None
        if doc is not None and rng.random() < 0.7:
            path = rng.choice(_paths(doc))
            value = _deep(rng) if rng.random() < 0.1 else rng.choice(SWAPS)
            payload = _dumps(_set(doc, path, value))
        else:
            lines = payload.split(b"\n")
            how = rng.randrange(5)
            if how == 0 and lines:
                lines = lines[: rng.randrange(len(lines) + 1)]
            elif how == 1:
                rng.shuffle(lines)
            elif how == 2 and lines:
                j = rng.randrange(len(lines))
                lines[j] = lines[j][: rng.randrange(len(lines[j]) + 1)] + rng.choice(
                    [b"\xff\xfe", b"(", b"]]", b"'", b"\x00", b": ", b" = ", b"[" * 2000, b"\x1b[31m"])
            elif how == 3 and lines:
                j = rng.randrange(len(lines))
                lines.insert(j, lines[j])
            else:
                lines = [re.sub(rb"\d+", lambda m: rng.choice([b"-1", b"99999999999999999999", b"x", b""]), ln)
                         for ln in lines]
            payload = b"\n".join(lines)
        if rng.random() < 0.8:
            _remake_md5(meta, payload)
        recs[i] = prefix + _dumps(meta) + b"\n" + _lines(payload)
    return recs


def deep_nesting(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """A record whose metadata (or a whole new record) is JSON nested 100,000 deep."""
    i = rng.randrange(len(recs))
    split = _split(recs[i])
    if split is not None and rng.random() < 0.7:
        prefix, meta, rest = split
        key = next(iter(meta))
        meta[key] = _deep(rng)
        recs[i] = prefix + _dumps(meta) + b"\n" + rest
    else:
        recs.insert(i, b'V1201 14:50:23.614000 21891 torch/_dynamo/utils.py:1] {"dynamo_start": ' + b"[" * DEEP + b"]" * DEEP + b"}\n")
    return recs


def bad_bytes(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """Bytes that are not UTF-8 put into a few records (metadata or payload)."""
    for _ in range(rng.randint(1, 5)):
        i = rng.randrange(len(recs))
        r = recs[i]
        j = rng.randrange(len(r) + 1)
        recs[i] = r[:j] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xfe\xff", b"\x00"]) + r[j:]
    return recs


def reorder(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """Records duplicated, dropped, moved, or the whole log reversed or shuffled."""
    if len(recs) < 3:
        return recs
    how = rng.randrange(5)
    if how == 0:
        for _ in range(rng.randint(1, 10)):
            i = rng.randrange(len(recs))
            recs.insert(rng.randrange(len(recs) + 1), recs[i])
    elif how == 1:
        for _ in range(rng.randint(1, min(10, len(recs) - 1))):
            recs.pop(rng.randrange(len(recs)))
    elif how == 2:
        recs.reverse()
    elif how == 3:
        rng.shuffle(recs)
    else:
        i, j = sorted(rng.sample(range(len(recs) + 1), 2))
        recs[i:j] = recs[i:j] * 2
    return recs


def line_level(rng: random.Random, recs: list[bytes]) -> list[bytes]:
    """Single lines (payload lines too) duplicated or moved, or a payload line's tab lost."""
    lines = b"".join(recs).splitlines(keepends=True)
    for _ in range(rng.randint(1, 10)):
        i = rng.randrange(len(lines))
        how = rng.randrange(3)
        if how == 0:
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
        elif how == 1:
            lines.insert(rng.randrange(len(lines) + 1), lines.pop(i))
        else:
            lines[i] = lines[i].lstrip(b"\t")
    return _records(b"".join(lines))


MUTATIONS = (swap_field, swap_read_field, edit_payload, deep_nesting, bad_bytes, reorder, line_level)


def _encode(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """The log's bytes as written to disk: whole, cut at a random byte, re-encoded, gzip
    whole or cut or corrupt; and its suffix."""
    how = rng.randrange(12)
    if how == 0:
        return data[: rng.randrange(len(data) + 1)], ".log"
    if how == 1:
        text = data.decode("utf-8", "replace")
        enc = rng.choice(["utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252", "utf-8-sig"])
        return text.encode(enc, "replace"), ".log"
    if how == 2:
        return data.replace(b"\n", b"\r\n"), ".log"
    if how == 3:
        return gzip.compress(data, mtime=0), ".log.gz"
    if how == 4:
        z = gzip.compress(data, mtime=0)
        return z[: rng.randrange(len(z) + 1)], ".log.gz"
    if how == 5:
        z = bytearray(gzip.compress(data, mtime=0))
        for _ in range(rng.randint(1, 3)):
            z[rng.randrange(10, len(z))] ^= 1 << rng.randrange(8)
        return bytes(z), ".log.gz"
    if how == 6:
        return data, ".log.gz"  # named .gz but not gzip
    return data, ".log"


@dataclass(frozen=True)
class Case:
    seed: int
    source: Path
    what: str


def make_case(seed: int, out: Path, *, fast: bool = False) -> tuple[Case, Path]:
    """Write mutated log (or rank folder) number ``seed`` under ``out``; return it and its
    path. ``fast``: from the smaller logs only (FAST_FILES)."""
    rng = random.Random(seed)
    folder = rng.random() < 0.15
    source = rng.choice(FOLDERS) if folder else rng.choice(FAST_FILES if fast else FILES)
    names: list[str] = []
    if folder:
        dest = out / f"case-{seed}"
        dest.mkdir(parents=True)
        ranks = sorted(source.iterdir())
        victim = rng.randrange(len(ranks))
        for k, f in enumerate(ranks):
            data = f.read_bytes()
            if k != victim:
                (dest / f.name).write_bytes(data)
                continue
            if rng.random() < 0.25:
                (dest / f.name).write_bytes(b"")
                names.append("empty rank file")
                continue
            recs = _records(data)
            for mutate in rng.sample(MUTATIONS, rng.randint(1, 2)):
                recs = mutate(rng, recs) or recs
                names.append(mutate.__name__)
            body, suffix = _encode(rng, b"".join(recs))
            (dest / (f.name.removesuffix(".log") + suffix)).write_bytes(body)
        return Case(seed, source, "+".join(names)), dest
    data = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
    recs = _records(data)
    for mutate in rng.sample(MUTATIONS, rng.randint(1, 3)) if rng.random() < 0.7 else [swap_read_field]:
        recs = mutate(rng, recs) or recs
        names.append(mutate.__name__)
    body, suffix = _encode(rng, b"".join(recs))
    path = out / f"case-{seed}{suffix}"
    path.write_bytes(body)
    return Case(seed, source, "+".join(names)), path


def read_case(path: Path) -> BaseException | None:
    """Read a mutated log as a user would (load_trace, then the summary); the exception that is
    not a DynscopeError naming the file, or None."""
    try:
        rep = dynscope.load_trace(path)
        rep.summary()
    except dynscope.DynscopeError as err:
        if path.name not in str(err):
            return AssertionError(f"DynscopeError not naming {path.name}: {err}")
        return None
    except RecursionError as err:  # a BaseException subclass would escape the line below
        return err
    except Exception as err:  # noqa: BLE001 - anything else is the failure this test finds
        return err
    return None


def _where(err: BaseException) -> str:
    """The innermost frame of dynscope's own code in ``err``'s traceback."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/dynscope/" in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"dynscope/{f.filename.rsplit('/dynscope/', 1)[1]}:{f.lineno} ({f.name})"


def _run(seeds: range, tmp: Path, *, fast: bool = False) -> list[str]:
    failures = []
    for seed in seeds:
        case, path = make_case(seed, tmp, fast=fast)
        err = read_case(path)
        if err is not None:
            failures.append(f"seed {seed} ({case.source.relative_to(ROOT)}, {case.what}): "
                            f"{type(err).__name__}: {str(err)[:200]} at {_where(err)}")
    return failures


@pytest.mark.synthetic_reports
def test_mutated_logs_read_or_raise_a_dynscope_error(tmp_path: Path) -> None:
    failures = _run(range(150), tmp_path, fast=True)
    assert not failures, f"{len(failures)} of 150 mutated logs raised:\n" + "\n".join(failures[:20])


@pytest.mark.heavy
@pytest.mark.synthetic_reports
def test_thousands_of_mutated_logs(tmp_path: Path) -> None:
    # 2,000 in the suite (45 s); `python tests/read/test_trace_fuzz.py N` surveys more (4,000 passed).
    failures = _run(range(300, 2300), tmp_path)
    assert not failures, f"{len(failures)} of 2000 mutated logs raised:\n" + "\n".join(failures[:20])


# -- each damage alone, on a real log: what the report says --------------------------------

ITEM = ROOT / "tests" / "traces" / "torch-2.13" / "logs" / "corpus-item_break.log"
JOB = ROOT / "tests" / "traces" / "torch-2.13" / "logs" / "ddp-2ranks"


def _line_of(data: bytes, needle: bytes) -> int:
    return data[: data.index(needle)].count(b"\n") + 1


@pytest.mark.synthetic_reports
def test_fields_of_the_wrong_type_are_counted_per_kind_and_reason_with_their_line(tmp_path: Path) -> None:
    data = ITEM.read_bytes()
    bad = re.sub(rb'"guard_count": \d+', b'"guard_count": "x"', data, count=1)
    bad = bad.replace(b'{"dynamo_start": {"stack": [', b'{"dynamo_start": {"stack": "x", "was": [', 1)
    path = tmp_path / "typed.log"
    path.write_bytes(bad)
    rep = dynscope.load_trace(path)
    whole = dynscope.load_trace(ITEM)
    unread = dict(rep.unparsed_kinds)
    line = _line_of(bad, b'"stack": "x"')
    assert unread[f"record 'dynamo_start' whose field 'stack' is a string, not a list of stack frames "
                  f"(read as absent); first at line {line}"] == 1
    line = _line_of(bad, b'"guard_count": "x"')
    assert unread[f"record 'compilation_metrics' whose field 'guard_count' is a string, not an int "
                  f"(read as absent); first at line {line}"] == 1
    # reading went on: every graph, break and frame is still there
    assert (rep.graph_count, rep.break_count, len(rep.frames)) == (whole.graph_count, whole.break_count, len(whole.frames))


@pytest.mark.synthetic_reports
def test_a_damaged_compile_id_leaves_the_record_out(tmp_path: Path) -> None:
    data = ITEM.read_bytes()
    at = data.index(b'{"compilation_metrics": ')
    end = data.index(b"\n", at)
    bad = data[:at] + re.sub(rb'"frame_id": \d+', b'"frame_id": [1]', data[at:end]) + data[end:]
    path = tmp_path / "cid.log"
    path.write_bytes(bad)
    rep = dynscope.load_trace(path)
    assert any(k.startswith("record 'compilation_metrics' whose field 'frame_id' is a list, not an int (the record left out); first at line ") for k, _ in rep.unparsed_kinds)


@pytest.mark.synthetic_reports
@pytest.mark.parametrize("where", ["metadata", "payload", "record"])
def test_json_nested_100k_deep_is_counted_not_a_recursion_error(tmp_path: Path, where: str) -> None:
    data = ITEM.read_bytes()
    deep = b"[" * DEEP + b"]" * DEEP
    if where == "metadata":  # the stack of a dynamo_start
        bad = data.replace(b'{"dynamo_start": {"stack": [', b'{"dynamo_start": {"stack": ' + deep + b', "was": [', 1)
    elif where == "payload":  # a chromium_event's JSON payload, its MD5 remade so it is read
        recs = _records(data)
        i = next(i for i, r in enumerate(recs) if r[:400].find(b'"chromium_event"') > 0)
        prefix, meta, _ = _split(recs[i])  # type: ignore[misc]
        payload = b'{"name": "x", "ph": "B", "ts": 1, "args": ' + deep + b"}"
        _remake_md5(meta, payload)
        recs[i] = prefix + json.dumps(meta).encode() + b"\n" + _lines(payload)
        bad = b"".join(recs)
    else:  # a whole record of it
        bad = data + b'V1201 14:50:23.614000 21891 torch/_dynamo/utils.py:1] {"dynamo_start": ' + deep + b"}\n"
    path = tmp_path / f"deep-{where}.log"
    path.write_bytes(bad)
    rep = dynscope.load_trace(path)
    assert rep.graph_count == dynscope.load_trace(ITEM).graph_count
    said = " ".join(k for k, _ in rep.unparsed_kinds)
    assert ("nested over 100 deep" in said) if where == "payload" else ("metadata is not JSON" in said), said


@pytest.mark.synthetic_reports
def test_a_gz_cut_short_reads_as_far_as_it_goes_and_says_so(tmp_path: Path) -> None:
    z = gzip.compress(ITEM.read_bytes())
    path = tmp_path / "cut.log.gz"
    path.write_bytes(z[: len(z) // 2])
    rep = dynscope.load_trace(path)
    assert rep.graph_count >= 1  # what the first half holds
    assert any(n.startswith("cut.log.gz: the gzip file ends early") for n in rep.notes), rep.notes
    assert dict(rep.unparsed_kinds).get("last record cut short (the job stopped mid-write)") == 1


@pytest.mark.synthetic_reports
def test_a_corrupt_gz_is_named(tmp_path: Path) -> None:
    z = bytearray(gzip.compress(ITEM.read_bytes()))
    z[-6] ^= 0xFF  # the CRC
    path = tmp_path / "crc.log.gz"
    path.write_bytes(bytes(z))
    rep = dynscope.load_trace(path)
    assert rep.graph_count == dynscope.load_trace(ITEM).graph_count
    assert any(n.startswith("crc.log.gz: the gzip file fails its check (CRC check failed") for n in rep.notes)
    z = bytearray(gzip.compress(ITEM.read_bytes()))
    z[len(z) // 3] ^= 0xFF  # the deflate data
    path.write_bytes(bytes(z))
    rep = dynscope.load_trace(path)
    assert any(n.startswith("crc.log.gz: the gzip file ") for n in rep.notes), rep.notes


@pytest.mark.synthetic_reports
@pytest.mark.parametrize("damage", [b"", b"garbage\n", b"\x1f\x8b\x08\x00cut"])
def test_a_rank_file_that_cannot_be_read_is_a_note_about_that_rank(tmp_path: Path, damage: bytes) -> None:
    job = tmp_path / "job"
    job.mkdir()
    rank0, rank1 = sorted(JOB.iterdir())
    (job / rank0.name).write_bytes(rank0.read_bytes())
    (job / rank1.name).write_bytes(damage)  # a rank that died before writing, or a bad copy
    m = dynscope.load_trace(job)
    assert isinstance(m, dynscope.MultiRankReport) and m.ranks == (0,)
    assert m.report(0).graph_count == dynscope.load_trace(rank0).graph_count
    assert any(n.startswith(f"rank 1's log {rank1.name} could not be read (") for n in m.notes), m.notes
    if not damage:
        assert any("an empty file" in n for n in m.notes)


def test_a_folder_of_rank_files_none_readable_names_them(tmp_path: Path) -> None:
    for r in (0, 1):
        (tmp_path / f"dedicated_log_torch_trace_rank_{r}_x.log").write_bytes(b"")
    with pytest.raises(dynscope.DynscopeError, match=r"none of the 2 rank logs .* could be read: rank 0's log "
                                                     r"dedicated_log_torch_trace_rank_0_x.log"):
        dynscope.load_trace(tmp_path)


def main(argv: list[str]) -> int:
    import tempfile
    import time

    n = int(argv[0]) if argv else 1000
    first = int(argv[1]) if len(argv) > 1 else 0
    places: Counter[str] = Counter()
    raised = 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(first, first + n):
            case, path = make_case(seed, Path(tmp))
            err = read_case(path)
            if err is not None:
                raised += 1
                key = f"{type(err).__name__} at {_where(err)}"
                if key not in places:
                    print(f"seed {seed} ({case.source.name}, {case.what}): {key}: {str(err)[:160]}", flush=True)
                places[key] += 1
    print(f"{raised} of {n} mutated logs raised, at {len(places)} places ({time.monotonic() - start:.1f} s)")
    for key, count in places.most_common():
        print(f"{count:5d}  {key}")
    return 1 if raised else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
