"""The one place dynscope writes files.

Every write of dynscope's own output is atomic: the data goes to a temporary file in the
target's folder, which then replaces the target in one step (``os.replace``). A write that
dies midway (disk full, a file-size limit, an exception while the data is produced, a
killed process) leaves the previous file as it was, never half of a new one.

A file of the user's (``fix --write``) is changed as a careful editor changes it
(:func:`rewrite_file`): in place, so it stays the same file (its mode, owner, hard links,
extended attributes; a symbolic link is written through to the file it names), after a
backup beside it that is never written through a link.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
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


#: Terminal control characters: C0 but newline and tab, DEL, C1. A user's names and strings
#: can hold them raw (an ESC sequence in a function name); ``cat summary.txt`` would obey them.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str, *, json: bool = False) -> str:
    """``text`` with every terminal control character written as a visible escape: ``\\x1b``
    (``\\u001b`` in JSON, where it stays the same character once parsed)."""
    if _CONTROLS.search(text) is None:
        return text
    form = "\\u{:04x}" if json else "\\x{:02x}"
    return _CONTROLS.sub(lambda m: form.format(ord(m.group())), text)


def write_text(path: Path, text: str | Iterable[str]) -> Path:
    """Write UTF-8 text atomically, creating parent folders; returns the path.

    Terminal control characters in the text (C0 but newline and tab, DEL, C1) are written as
    visible escapes (:func:`escape_controls`), so no file dynscope writes can retitle or
    recolour the terminal of someone who ``cat``s it.

    Args:
        path: the file to (re)place.
        text: the text, or its pieces in order (an encoder's ``iterencode``, so a big
            report is never held twice in memory).

    Raises:
        InputError: ``path`` is a folder, or its folder is a file or not writable.
        DynscopeError: writing failed midway (the previous file, if any, is unchanged).
    """
    pieces = (text,) if isinstance(text, str) else text
    as_json = Path(path).suffix.lower() == ".json"

    def write(f: Any) -> None:
        batch: list[str] = []
        size = 0
        for piece in pieces:
            batch.append(piece)
            size += len(piece)
            if size >= _BATCH:
                f.write(escape_controls("".join(batch), json=as_json).encode("utf-8", "replace"))
                batch, size = [], 0
        f.write(escape_controls("".join(batch), json=as_json).encode("utf-8", "replace"))

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


def rewrite_file(path: Path, data: bytes, *, expected: bytes | None = None, backup: str = "") -> Path | None:
    """Give an existing file new contents in place, as a careful editor does.

    The file stays the same file: its inode (hard links keep sharing it), mode, owner and
    extended attributes; a symbolic link stays a link and the file it names gets the data.

    Args:
        path: the file (a symbolic link is followed to the file it names).
        data: its new bytes.
        expected: the bytes the caller read; when the file holds others now, nothing is
            written. Defaults to None (no check).
        backup: a suffix: the old bytes are first kept in ``<real file><suffix>`` beside the
            real file (``<suffix>1``, ``<suffix>2``... when the name is taken by anything,
            a dangling link included), created new, never through a link, with the file's
            mode. Defaults to "" (no backup).

    Returns:
        The backup's path, or None without ``backup``.

    Raises:
        InputError: the file is missing (a dangling link), not a regular file, read-only,
            not writable by you, or changed since ``expected`` was read; nothing is written.
        DynscopeError: writing failed midway: the old bytes are put back (and kept in the backup).
    """
    path = Path(path)
    real = Path(os.path.realpath(path))
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    try:
        st = os.stat(real)
    except FileNotFoundError as err:
        link = f" (a symbolic link to {real}, which is missing)" if path.is_symlink() else ""
        raise InputError(f"cannot write {path}: it does not exist{link}") from err
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror or err}") from err
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"cannot write {path}: it is not a regular file")
    if not st.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise InputError(f"{path} is read-only (mode {stat.S_IMODE(st.st_mode):04o}): dynscope does not change "
                         f"read-only files; make it writable (chmod u+w {path}) and run again to apply the patches")
    try:
        fd = os.open(real, flags)
    except OSError as err:
        if err.errno in _PATH_ERRORS or err.errno == errno.ELOOP:
            raise InputError(f"cannot write {path}: {err.strerror} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid "
                             f"{st.st_uid}); make it writable by you and run again to apply the patches") from err
        raise DynscopeError(f"cannot write {path}: {err.strerror or err}") from err
    try:
        current = _read_all(fd)
        if expected is not None and current != expected:
            raise InputError(f"{path} changed since it was read; run again")
        saved = _backup(real, current, os.fstat(fd), backup) if backup else None
        try:
            _write_all(fd, data)
        except OSError as err:
            try:
                _write_all(fd, current)
            except OSError:
                pass
            kept = f"; its old contents are in {saved}" if saved else ""
            raise DynscopeError(f"writing {path} failed: {err.strerror or err}{kept}") from err
    finally:
        os.close(fd)
    return saved


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    offset = 0
    while True:
        chunk = os.pread(fd, _BATCH, offset)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        offset += len(chunk)


def _write_all(fd: int, data: bytes) -> None:
    """``data`` as the whole file behind ``fd``, from its first byte, on disk when this returns."""
    view = memoryview(data)
    offset = 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)
    os.ftruncate(fd, len(data))
    os.fsync(fd)


def _backup(real: Path, data: bytes, st: os.stat_result, suffix: str) -> Path:
    """``data`` in a new file beside ``real``: the first free name, created with O_EXCL and
    O_NOFOLLOW (a link planted there, dangling or not, is never followed), ``real``'s mode."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    for n in range(1000):
        candidate = real.with_name(f"{real.name}{suffix}{n or ''}")
        if os.path.lexists(candidate):
            continue
        try:
            fd = os.open(candidate, flags, 0o600)  # never wider than the file's own mode, even for a moment
        except FileExistsError:
            continue
        except OSError as err:
            raise InputError(f"cannot keep a backup of {real} beside it ({err.strerror or err}); "
                             "make its folder writable") from err
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                if hasattr(os, "fchown") and os.geteuid() == 0:  # root: the backup is the owner's, as the file is
                    os.fchown(f.fileno(), st.st_uid, st.st_gid)
                if hasattr(os, "fchmod"):
                    os.fchmod(f.fileno(), stat.S_IMODE(st.st_mode))
                os.fsync(f.fileno())
        except BaseException as err:
            try:
                os.unlink(candidate)
            except OSError:
                pass
            if isinstance(err, OSError):
                raise DynscopeError(f"keeping a backup of {real} failed: {err.strerror or err}") from err
            raise
        return candidate
    raise InputError(f"cannot keep a backup of {real}: {real.name}{suffix} to {real.name}{suffix}999 are all taken")
