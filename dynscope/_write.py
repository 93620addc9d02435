"""The one place dynscope writes files.

Every write is atomic: the data goes to a temporary file in the target's folder, which
then replaces the target in one step (``os.replace``). A write that dies midway (disk
full, a file-size limit, an exception while the data is produced, a killed process)
leaves the previous file as it was, never half of a new one.
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynscope._errors import DynscopeError, InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

#: errno values that mean "this path cannot be written": the caller chose a bad path.
_PATH_ERRORS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST}

#: Text is handed to the file in pieces of about this many characters.
_BATCH = 1 << 20


def ensure_folder(folder: Path) -> Path:
    """Create ``folder`` and its parents when missing; returns it.

    Raises:
        InputError: ``folder`` (or a parent) is a file, or cannot be created here.
    """
    if folder.exists() and not folder.is_dir():
        raise InputError(f"cannot write into {folder}: it is a file, not a folder; pass a folder path")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(
            f"cannot create the folder {folder}: {err.strerror or err}; choose a folder you can write to"
        ) from err
    return folder


def write_text(path: Path, text: str | Iterable[str]) -> Path:
    """Write UTF-8 text atomically, creating parent folders; returns the path.

    Args:
        path: the file to (re)place.
        text: the text, or its pieces in order (an encoder's ``iterencode``, so a big
            report is never held twice in memory).

    Raises:
        InputError: ``path`` is a folder, or its folder is a file or not writable.
        DynscopeError: writing failed midway (the previous file, if any, is unchanged).
    """
    pieces = (text,) if isinstance(text, str) else text

    def write(f: Any) -> None:
        batch: list[str] = []
        size = 0
        for piece in pieces:
            batch.append(piece)
            size += len(piece)
            if size >= _BATCH:
                f.write("".join(batch).encode("utf-8", "replace"))
                batch, size = [], 0
        f.write("".join(batch).encode("utf-8", "replace"))

    return _atomic(Path(path), write)


def write_bytes(path: Path, data: bytes) -> Path:
    """Write bytes atomically, creating parent folders; returns the path (see write_text)."""
    return _atomic(Path(path), lambda f: f.write(data))


def _atomic(path: Path, write: Callable[[Any], object]) -> Path:
    if path.is_dir():
        raise InputError(f"cannot write {path}: it is a folder; pass a file path")
    ensure_folder(path.parent)
    # Same folder as the target, so os.replace is a rename within one file system.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        # 0o666 and the umask, as an ordinary open() would give (mkstemp would give 0o600).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as err:
        if err.errno in _PATH_ERRORS:
            raise InputError(
                f"cannot write to the folder {path.parent}: {err.strerror}; choose a folder you can write to"
            ) from err
        raise DynscopeError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise DynscopeError(
                f"writing {path} failed: {err.strerror or err}; the previous file, if any, is unchanged"
            ) from err
        raise
    return path
