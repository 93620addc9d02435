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
import zlib
from dataclasses import dataclass

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
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 4

    def uint64(self, what: str) -> int:
        if self.at + 8 > len(self.data):
            raise BundleFormatError(f"the bundle ends inside {what} (byte {self.at} of {len(self.data)})")
        value = int.from_bytes(self.data[self.at: self.at + 8], "big")
        self.at += 8
        return value

    def skip(self, what: str) -> int:
        size = self.uint64(f"the length of {what}")
        if self.at + size > len(self.data):
            raise BundleFormatError(f"{what} claims {size:,} bytes; the bundle has {len(self.data) - self.at:,} left")
        self.at += size
        return size

    def text(self, what: str) -> str:
        start = self.at + 8
        size = self.skip(what)
        if size > _KEY_MAX:
            raise BundleFormatError(f"{what} is {size:,} bytes long: not a key PyTorch writes")
        try:
            return base64.b64decode(self.data[start: start + size], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError) as err:
            raise BundleFormatError(f"{what} is not base64 text ({err})") from None


def read_bundle(data: bytes) -> tuple[int, tuple[BundleEntry, ...]]:
    """The bundle's encoding version and its artifacts, in order.

    Raises:
        BundleFormatError: too short, a checksum that does not match (damaged or not a
            bundle), another encoding version, or a block that runs past the end.
    """
    if len(data) < 12:
        raise BundleFormatError(f"{len(data)} bytes: too short for a cache-artifact bundle (checksum and version)")
    if zlib.crc32(data[4:]).to_bytes(4, "big") != data[:4]:
        raise BundleFormatError("the checksum does not match: not a bundle save_cache_artifacts() wrote, or damaged")
    reader = _Reader(data)
    version = reader.uint64("the encoding version")
    if version != ENCODING_VERSION:
        raise BundleFormatError(f"encoding version {version}; this dynscope reads version {ENCODING_VERSION}")
    entries: list[BundleEntry] = []
    while reader.at < len(data):
        kind = reader.text("an artifact type")
        count = reader.uint64(f"the number of {kind!r} artifacts")
        if count > MAX_ARTIFACTS:
            raise BundleFormatError(f"{count:,} {kind!r} artifacts claimed: more than a bundle holds")
        for i in range(count):
            key = reader.text(f"the key of {kind!r} artifact {i}")
            entries.append(BundleEntry(kind, key, reader.skip(f"{kind!r} artifact {key!r}")))
    return version, tuple(entries)
