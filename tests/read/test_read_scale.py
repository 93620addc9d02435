"""Reading any log in linear time and bounded memory (issue 44): structure, never speed.

The logs are real ones recorded by PyTorch (tests/traces/torch-*/logs/), grown in the test
the way hostile or odd logs grow: one of their ``inductor_output_code`` payloads given a line
of tens of megabytes (its MD5 remade, as PyTorch would write it), a ``.gz`` whose first record
is real and the rest gzip's best case (zeros), rank files copied under huge rank numbers.
The speed and memory figures themselves are benchmarks/read_scale.py's (ratios printed side
by side), not asserted here.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import tracemalloc
from pathlib import Path

import pytest

import dynscope
from dynscope._model.ranks import missing_ranks
from dynscope._render.pictures import QUICK_EDGES, quick
from dynscope._torch import trace_log
from dynscope._torch.trace_log import read_log
from tests.corpus.job_logs import record_bytes

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "traces" / "torch-2.13" / "logs"
TRAIN = LOGS / "inductor-train.log"
SMALL = LOGS / "corpus-print_break.log"
MB = 1 << 20


def _with_long_line(src: Path, dst: Path, extra: bytes) -> str:
    """``src`` with ``extra`` (one line, no newline) added to the first output code's payload,
    its MD5 remade; returns the whole new payload."""
    recs = record_bytes(src.read_bytes())
    for i, rec in enumerate(recs):
        first, _, body = rec.partition(b"\n")
        if b'"inductor_output_code"' in first:
            payload = body.replace(b"\n\t", b"\n")[1:-1] + b"\n" + extra
            md5 = hashlib.md5(payload, usedforsecurity=False).hexdigest()
            first = re.sub(rb'"has_payload": "[0-9a-f]+"', b'"has_payload": "' + md5.encode() + b'"', first)
            recs[i] = first + b"\n\t" + payload.replace(b"\n", b"\n\t") + b"\n"
            dst.write_bytes(b"".join(recs))
            return payload.decode()
    raise AssertionError("no output code record")


def _output_code(log: trace_log.TraceLog) -> str:
    return next(e.payload for e in log.events if e.name == "inductor_output_code")


@pytest.mark.parametrize("block", [61, 4096, 1 << 22])
def test_long_payload_lines_stream_whole_at_any_read_size(tmp_path: Path, block: int) -> None:
    # Payload lines longer than a read, with tabs and CRs inside, come out as PyTorch wrote them.
    src = tmp_path / "long.log"
    payload = _with_long_line(TRAIN, src, b"# " + b"\tx\r = 1; " * 20_000)
    log = read_log(src, block_size=block)
    assert _output_code(log) == payload
    assert not [k for k in log.unreadable if "MD5" in k or "cut" in k]


def test_a_payload_over_the_cap_keeps_its_head_and_says_where_the_rest_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 40 MB payload line (longer than the reader ever holds whole) with a 1 MiB cap: read in
    # bounded memory, its MD5 checked over all of it, its head kept, the cut said with the byte.
    monkeypatch.setenv("DYNSCOPE_PAYLOAD_MB", "1")
    src = tmp_path / "big.log"
    whole = _with_long_line(TRAIN, src, b"# " + b"0123456789" * (4 * MB))
    tracemalloc.start()
    try:
        log = read_log(src, block_size=MB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * MB, f"read a 40 MB line holding {peak / MB:.0f} MB"
    kept = _output_code(log)
    assert len(kept.encode()) <= MB and whole.startswith(kept) and "0123456789" not in kept  # cut at a line end
    offset = src.read_bytes().index(b'{"inductor_output_code"')
    offset = src.read_bytes().rindex(b"\n", 0, offset) + 1
    [said] = [k for k in log.unreadable if "the rest cut" in k]
    assert f"payload of {len(whole.encode()):,} bytes" in said and "first 1 MiB read" in said
    assert f"big.log, byte {offset:,}" in said and "tlparse" in said
    assert not [k for k in log.unreadable if "MD5" in k]  # the whole payload was checked


def test_page_and_report_json_hold_the_capped_payload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNSCOPE_PAYLOAD_MB", "1")
    src = tmp_path / "big.log"
    _with_long_line(TRAIN, src, b"# " + b"x" * (12 * MB))
    rep = dynscope.load_trace(src)
    assert any("the rest cut" in kind for kind, _ in rep.unparsed_kinds)
    out = rep.render(tmp_path / "out")
    for name in ("index.html", "report.json"):
        assert (out / name).stat().st_size < 6 * MB, name


def test_a_gzip_bomb_stops_with_a_clear_error_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # gzip's best ratio (zeros, about 1000:1) after a real first record; the floor lowered from
    # 256 MiB so the test unzips 8 MiB, not 256.
    monkeypatch.setattr(trace_log, "GZIP_FLOOR", 4 * MB)
    bomb = tmp_path / "rank_0.log.gz"
    first = record_bytes(SMALL.read_bytes())[0]
    bomb.write_bytes(gzip.compress(first) + gzip.compress(b"\t" + bytes(16 * MB)))
    with pytest.raises(dynscope.DynscopeError, match=re.escape(str(bomb))) as err:
        dynscope.load_trace(bomb)
    assert isinstance(err.value, dynscope.InputError)
    assert "over 100 times" in str(err.value) and "DYNSCOPE_GZIP_MAX_RATIO" in str(err.value)
    # A real compressed log (about 12:1) reads under the same lowered floor.
    real = read_log(LOGS / "vit-tiny.log.gz")
    assert real.events


def test_missing_ranks_are_ranges_never_one_entry_per_rank(tmp_path: Path) -> None:
    assert missing_ranks(10**11, [0, 5, 5, 99_999_999_999]) == ([(1, 4), (6, 99_999_999_998)], 10**11 - 3)
    assert missing_ranks(4, [0, 1, 2, 3]) == ([], 0)
    for r in (0, 1, 99_999_999_999):
        (tmp_path / f"dedicated_log_torch_trace_rank_{r}_x.log").write_bytes(SMALL.read_bytes())
    tracemalloc.start()
    try:
        merged = dynscope.load_trace(tmp_path, jobs=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert merged.world_size == 10**11 and peak < 200 * MB
    assert merged.missing == (((2, 99_999_999_998),), 99_999_999_997)
    assert "note: ranks 2-99,999,999,998 of world size 100,000,000,000 wrote no trace log" in merged.summary()


def test_a_world_size_of_1e11_in_saved_reports_merges(tmp_path: Path) -> None:
    rep = dynscope.load_trace(SMALL)
    paths = []
    for r in (0, 7):
        p = tmp_path / f"rank{r}.json"
        p.write_text(json.dumps({**json.loads(rep.to_json()), "rank": r, "world_size": 10**11}))
        paths.append(p)
    merged = dynscope.merge(paths)
    assert merged.missing == (((1, 6), (8, 99_999_999_999)), 99_999_999_998)
    assert "ranks 1-6, 8-99,999,999,999 of world size 100,000,000,000 wrote no report" in merged.summary()


def test_dense_pictures_get_the_quick_placement_and_say_so() -> None:
    edges = "".join(f"  n{i} -> n{i + 1};\n" for i in range(QUICK_EDGES + 1))
    dot, note = quick(f'digraph "g" {{\n{edges}}}\n', "1 repeated block drawn once")
    assert dot.startswith('digraph "g" { nslimit=1; nslimit1=1; mclimit=0.1;')
    assert note.startswith("1 repeated block drawn once; laid out with Graphviz's quick placement")
    small = 'digraph "g" {\n  a -> b;\n}\n'
    assert quick(small, "") == (small, "")
