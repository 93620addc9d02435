"""A user's source file as Python reads it, and its patched bytes as a careful editor writes them.

Python's lines end at ``\\n``, ``\\r\\n`` or ``\\r`` only (``str.splitlines`` also splits at a
form feed, ``\\x1c``, ``\\u2028``...: line numbers would drift from the tokenizer's), the text
is decoded as the file declares (a UTF-8 BOM, a ``# -*- coding: ... -*-`` cookie), and a
patched file keeps every byte of the lines it does not replace: their line endings, the
encoding and BOM, comments, tabs, form feeds. No torch import: this is text.
"""

from __future__ import annotations

import codecs
import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["Source", "SourceError", "line_map", "python_lines"]

_LINE = re.compile(rb"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")


class SourceError(Exception):
    """A file fix cannot read as Python source, or a patch it cannot encode; the message says why."""


def python_lines(text: str) -> list[str]:
    """``text``'s lines with their endings, split where Python's tokenizer splits them."""
    return io.StringIO(text, newline="").readlines()


def _byte_lines(data: bytes) -> list[bytes]:
    """The same split over bytes (the tokenizer reads only ASCII-compatible encodings, where
    ``\\r`` and ``\\n`` are themselves)."""
    return _LINE.findall(data)


@dataclass(frozen=True)
class Source:
    """One file as fix read it: its bytes, how they decode, and the text the rewrites see."""

    path: str
    raw: bytes  # the file's bytes as read
    encoding: str  # the codec of the text after the BOM ("utf-8", "iso-8859-1", ...)
    bom: bytes  # the UTF-8 BOM the file starts with, or b""
    text: str  # the decoded text, line endings as they are (no BOM)

    @classmethod
    def read(cls, path: str) -> Source:
        """Read ``path`` as Python does.

        Raises:
            SourceError: it cannot be read, or does not decode as it declares.
        """
        try:
            raw = Path(path).read_bytes()
        except OSError as err:
            raise SourceError(f"cannot read {path}: {err.strerror or err}") from err
        try:
            declared, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        except SyntaxError as err:
            raise SourceError(f"{Path(path).name} declares an encoding Python cannot use ({err})") from err
        bom = codecs.BOM_UTF8 if raw.startswith(codecs.BOM_UTF8) else b""
        encoding = "utf-8" if declared == "utf-8-sig" else declared
        try:
            text = raw[len(bom):].decode(encoding)
        except UnicodeDecodeError as err:
            raise SourceError(f"{Path(path).name} does not decode as {declared}, its declared encoding ({err.reason} "
                              f"at byte {err.start})") from err
        return cls(path, raw, encoding, bom, text)

    def to_bytes(self, new_text: str) -> bytes:
        """The file's bytes with ``new_text``'s changed lines in place of its own: every line
        the patch does not replace is the file's own bytes, unchanged.

        Raises:
            SourceError: a new line has a character the file's encoding cannot write.
        """
        old_lines = python_lines(self.text)
        old_bytes = _byte_lines(self.raw[len(self.bom):])
        if len(old_bytes) != len(old_lines):  # pragma: no cover - an ASCII-compatible encoding splits alike
            raise SourceError(f"the lines of {Path(self.path).name} do not split alike as bytes and as text")
        new_lines = python_lines(new_text)
        out = [self.bom]
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                out += old_bytes[i1:i2]
                continue
            try:
                out.append("".join(new_lines[j1:j2]).encode(self.encoding))
            except UnicodeEncodeError as err:
                raise SourceError(f"the patch writes {err.object[err.start:err.end]!r}, which {self.encoding} "
                                  f"(the encoding of {Path(self.path).name}) cannot hold") from err
        return b"".join(out)


def line_map(spans: Sequence[tuple[int, int, int]]) -> Callable[[int], int | None]:
    """Old line -> new line for a text with the statements at ``first..last`` replaced by
    ``count`` lines each (``spans`` of ``(first, last, count)``, not overlapping); None for a
    line inside a replaced statement."""

    def where(line: int) -> int | None:
        shift = 0
        for first, last, count in spans:
            if first <= line <= last:
                return None
            if last < line:
                shift += count - (last - first + 1)
        return line + shift

    return where
