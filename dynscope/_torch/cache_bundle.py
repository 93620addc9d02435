"""The bytes ``torch.compiler.save_cache_artifacts()`` returns (the "mega-cache"), read for
what they hold: each artifact's cache and key, and its size. Nothing in them is unpickled or
loaded into any cache: the artifacts' contents are skipped.

PyTorch's format (torch 2.13, ``torch/utils/_appending_byte_serializer.py`` and
``torch/compiler/_cache.py``; the same in 2.11 to 2.15): a CRC32 of the rest (4 bytes, big
endian), the encoding version (uint64, big endian: 1), then one block per artifact type: the
type (a length-prefixed base64 string: "inductor", "aot_autograd", "autotune", "pgo"...), the
number of artifacts (uint64), and each artifact's key (a length-prefixed base64 string) and
content (length-prefixed bytes). Torch-free: the bytes are read here, not through torch.
"""

from __future__ import annotations

import base64
import binascii
import io
import zlib
from dataclasses import dataclass
from typing import BinaryIO

__all__ = ["BundleFormatError", "ENCODING_VERSION", "read_bundle"]

#: The encoding version PyTorch writes (``_ENCODING_VERSION``).
ENCODING_VERSION = 1
#: The most artifacts a bundle may claim in one block: a damaged count must not make the
#: reader loop for ever (real bundles hold tens to thousands).
MAX_ARTIFACTS = 1_000_000
_KEY_MAX = 4096  # bytes of one base64 key or type name


class BundleFormatError(ValueError):
    """The bytes are not a cache-artifact bundle PyTorch wrote (or were damaged since)."""


@dataclass(frozen=True)
class BundleEntry:
    """One artifact: its type ("inductor", "aot_autograd"...), its cache key, its size."""

    kind: str
    key: str
    size: int


class _Reader:
    """The bundle read in place: lengths checked against what is left, contents skipped by
    seeking (a bundle of gigabytes is not held in memory)."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size = f, size
        f.seek(4)

    @property
    def at(self) -> int:
        return self.f.tell()

    def uint64(self, what: str) -> int:
        raw = self.f.read(8)
        if len(raw) < 8:
            raise BundleFormatError(f"the bundle ends inside {what} (byte {self.at} of {self.size})")
        return int.from_bytes(raw, "big")

    def skip(self, what: str) -> int:
        size = self.uint64(f"the length of {what}")
        if self.at + size > self.size:
            raise BundleFormatError(f"{what} claims {size:,} bytes; the bundle has {self.size - self.at:,} left")
        self.f.seek(size, 1)
        return size

    def text(self, what: str) -> str:
        size = self.uint64(f"the length of {what}")
        if size > _KEY_MAX:
            raise BundleFormatError(f"{what} is {size:,} bytes long: not a key PyTorch writes")
        raw = self.f.read(size)
        if len(raw) < size:
            raise BundleFormatError(f"{what} claims {size:,} bytes; the bundle ends first")
        try:
            return base64.b64decode(raw, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise BundleFormatError(f"{what} is not base64 text ({err})") from None


def _checksum(f: BinaryIO) -> int:
    """The CRC32 of everything after the first 4 bytes, read a megabyte at a time."""
    f.seek(4)
    crc = 0
    while chunk := f.read(1 << 20):
        crc = zlib.crc32(chunk, crc)
    return crc


def read_bundle(data: bytes | BinaryIO) -> tuple[int, tuple[BundleEntry, ...]]:
    """The bundle's encoding version and its artifacts, in order.

    Args:
        data: the bundle's bytes, or a binary file open on them (read in place, contents
            skipped: a large bundle is not loaded into memory).

    Raises:
        BundleFormatError: too short, a checksum that does not match (damaged or not a
            bundle), another encoding version, or a block that runs past the end.
    """
    f = io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data
    size = f.seek(0, io.SEEK_END)
    if size < 12:
        raise BundleFormatError(f"{size} bytes: too short for a cache-artifact bundle (checksum and version)")
    f.seek(0)
    stored = f.read(4)
    if _checksum(f).to_bytes(4, "big") != stored:
        raise BundleFormatError("the checksum does not match: not a bundle save_cache_artifacts() wrote, or damaged")
    reader = _Reader(f, size)
    version = reader.uint64("the encoding version")
    if version != ENCODING_VERSION:
        raise BundleFormatError(f"encoding version {version}; this dynscope reads version {ENCODING_VERSION}")
    entries: list[BundleEntry] = []
    while reader.at < size:
        kind = reader.text("an artifact type")
        count = reader.uint64(f"the number of {kind!r} artifacts")
        if count > MAX_ARTIFACTS:
            raise BundleFormatError(f"{count:,} {kind!r} artifacts claimed: more than a bundle holds")
        for i in range(count):
            key = reader.text(f"the key of {kind!r} artifact {i}")
            entries.append(BundleEntry(kind, key, reader.skip(f"{kind!r} artifact {key!r}")))
    return version, tuple(entries)
