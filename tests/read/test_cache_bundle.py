"""The mega-cache (issue 47): a bundle ``torch.compiler.save_cache_artifacts()`` wrote, read
torch-free for its keys (dynscope/_torch/cache_bundle.py), and ``cache_diff(a, b, bundle=...)``
predicting which of a machine's lookups it would serve. Checked against PyTorch itself: the
runs in tests/traces/cache/torch-2.13-bundle (recorded by scripts/record_cache_bundle.py)
include the same program after ``load_cache_artifacts(bundle)``, so each prediction is
compared with what PyTorch did with the bundle. Damaged bundles get a clear error."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dynscope
from dynscope._cli import main
from dynscope._read.cache_runs import cache_lookups
from dynscope._torch.cache_bundle import BundleFormatError, read_bundle

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "traces" / "cache" / "torch-2.13-bundle"
BUNDLE = RUNS / "bundle.bin"


def test_the_bundle_holds_the_keys_the_saving_run_made() -> None:
    version, entries = read_bundle(BUNDLE.read_bytes())
    assert version == 1 and {e.kind for e in entries} == {"inductor", "aot_autograd"}
    made = {lk.key for lk in cache_lookups(RUNS / "made")}
    assert {e.key for e in entries} == made and all(e.size > 1000 for e in entries)


@pytest.mark.parametrize(("run", "truth"), [("here", "loaded"), ("threads", "loaded-threads")])
def test_the_prediction_is_what_pytorch_did_with_the_bundle(run: str, truth: str) -> None:
    d = dynscope.cache_diff(RUNS / "made", RUNS / run, bundle=BUNDLE)
    predicted = sorted((lk.cache, lk.result) for lk in d.lookups_b)
    pytorch = sorted((lk.cache, lk.result) for lk in cache_lookups(RUNS / truth))
    assert predicted == pytorch


def test_a_machine_with_another_core_count_misses_and_the_part_is_named() -> None:
    d = dynscope.cache_diff(RUNS / "made", RUNS / "threads", bundle=BUNDLE)
    assert len(d.misses) == 2 and {c.family for c in d.causes} == {"threads"}
    assert "the CPU thread count the C++ code specialises on changed: 1 -> 2" in d.summary()
    warm = dynscope.cache_diff(RUNS / "made", RUNS / "here", bundle=BUNDLE.read_bytes())
    assert not warm.misses and "predicted with the bundle (2 artifacts)" in warm.summary()


def test_the_cli_gates_on_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["cache-diff", str(RUNS / "made"), str(RUNS / "here"), "--bundle", str(BUNDLE), "--fail-on-cache-miss"]
    assert main(args) == 0
    assert main([*args[:2], str(RUNS / "threads"), *args[3:]]) == 1
    assert "thread count" in capsys.readouterr().out


def test_reading_a_bundle_imports_no_torch_and_loads_nothing() -> None:
    code = (f"import sys, dynscope; d = dynscope.cache_diff({str(RUNS / 'made')!r}, {str(RUNS / 'here')!r}, "
            f"bundle={str(BUNDLE)!r}); assert not d.misses; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "False"


def _bundle(*blocks: tuple[str, list[tuple[str, bytes]]], version: int = 1) -> bytes:
    import base64

    def text(s: str) -> bytes:
        b = base64.b64encode(s.encode())
        return struct.pack(">Q", len(b)) + b

    body = struct.pack(">Q", version)
    for kind, items in blocks:
        body += text(kind) + struct.pack(">Q", len(items))
        for key, content in items:
            body += text(key) + struct.pack(">Q", len(content)) + content
    return zlib.crc32(body).to_bytes(4, "big") + body


def test_damaged_bundles_are_named_not_crashed_on(tmp_path: Path) -> None:
    good = _bundle(("inductor", [("fabc", b"x" * 10)]))
    assert read_bundle(good)[1][0].key == "fabc"
    data = BUNDLE.read_bytes()
    cases = {
        "checksum": data[:100] + bytes([data[100] ^ 1]) + data[101:],
        "too short": data[:8],
        "encoding version 2": _bundle(("inductor", []), version=2),
        "claims": _bundle(("inductor", [("fabc", b"x" * 10)]))[:-5] + b"",
    }
    cases["claims"] = zlib.crc32(cases["claims"][4:]).to_bytes(4, "big") + cases["claims"][4:]
    for words, bad in cases.items():
        with pytest.raises(BundleFormatError, match=words):
            read_bundle(bad)
        path = tmp_path / "bad.bin"
        path.write_bytes(bad)
        with pytest.raises(dynscope.InputError, match="is not a cache-artifact bundle"):
            dynscope.cache_diff(RUNS / "made", RUNS / "here", bundle=path)
    with pytest.raises(dynscope.InputError, match="no such bundle file"):
        dynscope.cache_diff(RUNS / "made", RUNS / "here", bundle=tmp_path / "none.bin")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 2**64 - 1))
def test_any_bytes_read_or_raise_the_format_error(noise: bytes, count: int) -> None:
    for data in (noise, _bundle(("inductor", [])) + noise,
                 zlib.crc32(struct.pack(">Q", 1) + noise).to_bytes(4, "big") + struct.pack(">Q", 1) + noise):
        try:
            read_bundle(data)
        except BundleFormatError:
            pass
    huge = struct.pack(">Q", 1) + struct.pack(">Q", 4) + b"aW5k" + struct.pack(">Q", count)
    try:
        read_bundle(zlib.crc32(huge).to_bytes(4, "big") + huge)
    except BundleFormatError:
        pass


def test_a_large_bundle_is_read_in_place_not_loaded(tmp_path: Path) -> None:
    import base64
    import tracemalloc

    # One 64 MiB artifact (zeros, written sparse): its key is read, its content skipped.
    size = 64 << 20
    kind, key = base64.b64encode(b"inductor"), base64.b64encode(b"fbig")
    head = (struct.pack(">Q", 1) + struct.pack(">Q", len(kind)) + kind + struct.pack(">Q", 1)
            + struct.pack(">Q", len(key)) + key + struct.pack(">Q", size))
    path = tmp_path / "big.bin"
    with path.open("wb") as f:
        f.write(b"\0\0\0\0" + head)
        f.truncate(4 + len(head) + size)
    crc = zlib.crc32(head)
    zeros = bytes(1 << 20)
    for _ in range(size >> 20):
        crc = zlib.crc32(zeros, crc)
    with path.open("r+b") as f:
        f.write(crc.to_bytes(4, "big"))
    tracemalloc.start()
    with path.open("rb") as f:
        _, entries = read_bundle(f)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert [(e.kind, e.key, e.size) for e in entries] == [("inductor", "fbig", size)]
    assert peak < size // 8, f"read {peak:,} bytes into memory for a {size:,}-byte bundle"
