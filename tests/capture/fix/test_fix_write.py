"""``fix --write`` changes a file as a careful editor does (issue 42), and verification runs the
object the user passed, where the original runs, and cleans up after itself.

Every write test runs ``dynscope.fix`` live (Dynamo, eager backend) on a small file written
byte by byte, then compares the whole file with the bytes expected, computed here
independently: the original with only the patched statement's lines replaced. The text and
file-system halves (how a file is read, spliced and written) are tested without torch first.
"""

from __future__ import annotations

import codecs
import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

import dynscope
from dynscope._capture.fix.rewrites import candidates
from dynscope._capture.fix.source import Source, SourceError, line_map, python_lines
from dynscope._errors import InputError
from dynscope._model.codec import from_plain
from dynscope._write import rewrite_file

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[3]
GUARD = "if not torch.compiler.is_compiling():"


def _guarded(line: bytes, indent: bytes, unit: bytes = b"    ", ending: bytes = b"\n") -> bytes:
    """What the guard rewrite puts in place of ``indent + line + ending``, spelled out here."""
    return indent + GUARD.encode() + ending + indent + unit + line + ending


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def imported() -> Iterator[Any]:
    """Import a file as a module for the test; forgotten afterwards."""
    names: list[str] = []

    def load(path: Path, name: str) -> Any:
        names.append(name)
        return _load(path, name)

    yield load
    for name in names:
        sys.modules.pop(name, None)


def _fix(module: Any, fn: str = "f", **kw: Any) -> dynscope.FixResult:
    return dynscope.fix(getattr(module, fn), torch.ones(3), write=True, **kw)


def _siblings(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "dynscope-fix" in p.name)


# -- reading, splicing and writing, without torch ------------------------------------------------


def test_lines_split_where_pythons_tokenizer_splits_them() -> None:
    text = "a = 1\r\nb = 2\rc = 3\x0c\n# \u2028 \x1c \x85\nd = 4"
    assert python_lines(text) == ["a = 1\r\n", "b = 2\r", "c = 3\x0c\n", "# \u2028 \x1c \x85\n", "d = 4"]
    assert len(text.splitlines()) > len(python_lines(text)), "str.splitlines splits at more characters"


@pytest.mark.parametrize("raw", [
    b"import torch\r\nx = 1  # CRLF\r\n",
    b"# -*- coding: latin-1 -*-\nimport torch\ns = '\xe9t\xe9'\n",
    codecs.BOM_UTF8 + "import torch\ns = 'été'\n".encode(),
    b"import torch\n\x0c\nif x:\n\ty = 1\r\n\x0c# end",
])
def test_a_file_reads_and_writes_back_byte_for_byte(raw: bytes, tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(raw)
    src = Source.read(str(path))
    assert src.to_bytes(src.text) == raw
    assert not src.text.startswith("\ufeff")


def test_only_the_changed_lines_are_new_bytes(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    raw = b"# -*- coding: latin-1 -*-\r\nimport torch\r\ns = '\xe9'\r\nt = 1\r\n"
    path.write_bytes(raw)
    src = Source.read(str(path))
    new = src.text.replace("t = 1\r\n", "t = 2\r\nu = 3\r\n")
    assert src.to_bytes(new) == raw.replace(b"t = 1\r\n", b"t = 2\r\nu = 3\r\n")
    with pytest.raises(SourceError, match="latin-1|iso-8859-1"):
        src.to_bytes(new.replace("u = 3", "u = '\u2603'"))


def test_a_file_that_does_not_decode_is_said_not_crashed(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"import torch\ns = '\xe9'\n")  # no cookie: UTF-8, and \xe9 alone is not UTF-8
    with pytest.raises(SourceError, match="does not decode as utf-8"):
        Source.read(str(path))


def test_line_map_follows_statements_that_grew() -> None:
    where = line_map([(3, 3, 2), (8, 10, 1)])
    assert [where(n) for n in (1, 2, 3, 4, 7, 8, 11)] == [1, 2, None, 5, 8, None, 10]


def test_rewrites_count_columns_in_bytes_and_keep_tabs_endings_and_form_feeds() -> None:
    src = ("import torch\r\n\x0c\r\ndef f(x):\r\n\tgröße = x.shape\r\n\tprint('größe', größe)  # ü stays\r\n"
           "\treturn x\r\n")
    (rw,), _ = candidates(src, 5, "logging/print side effect")
    assert rw.source == src.replace("\tprint('größe', größe)  # ü stays\r\n",
                                    f"\t{GUARD}\r\n\t\tprint('größe', größe)  # ü stays\r\n")


def _file(tmp_path: Path, raw: bytes, name: str = "m.py") -> Path:
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def test_rewrite_file_keeps_mode_owner_inode_and_links(tmp_path: Path) -> None:
    path = _file(tmp_path, b"old\n")
    path.chmod(0o600)
    twin = tmp_path / "twin.py"
    os.link(path, twin)
    link = tmp_path / "link.py"
    link.symlink_to(path.name)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    before = os.stat(path)
    backup = rewrite_file(link, b"new\n", expected=b"old\n", backup=".bak")
    after = os.stat(path)
    assert link.is_symlink() and path.read_bytes() == twin.read_bytes() == b"new\n"
    assert (after.st_ino, after.st_nlink, after.st_mode, after.st_uid, after.st_gid) == (
        before.st_ino, 2, before.st_mode, before.st_uid, before.st_gid)
    assert backup == tmp_path / "m.py.bak" and backup.read_bytes() == b"old\n"
    assert stat.S_IMODE(os.stat(backup).st_mode) == 0o600 and os.stat(backup).st_uid == before.st_uid


def test_rewrite_file_refuses_read_only_changed_and_missing_files(tmp_path: Path) -> None:
    path = _file(tmp_path, b"old\n")
    path.chmod(0o444)
    with pytest.raises(InputError, match=r"m\.py is read-only \(mode 0444\)"):
        rewrite_file(path, b"new\n", backup=".bak")
    assert path.read_bytes() == b"old\n" and not (tmp_path / "m.py.bak").exists()
    path.chmod(0o644)
    with pytest.raises(InputError, match="changed since it was read"):
        rewrite_file(path, b"new\n", expected=b"other\n")
    dangling = tmp_path / "gone.py"
    dangling.symlink_to(tmp_path / "nowhere.py")
    with pytest.raises(InputError, match="a symbolic link to .*nowhere.py, which is missing"):
        rewrite_file(dangling, b"new\n")
    assert not (tmp_path / "nowhere.py").exists()


def test_a_backup_is_never_written_through_a_link(tmp_path: Path) -> None:
    path = _file(tmp_path, b"old\n")
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "m.py.bak").symlink_to(elsewhere)  # dangling
    (tmp_path / "m.py.bak1").symlink_to(path)  # to the file itself
    backup = rewrite_file(path, b"new\n", backup=".bak")
    assert backup == tmp_path / "m.py.bak2" and not backup.is_symlink() and backup.read_bytes() == b"old\n"
    assert not elsewhere.exists() and os.readlink(tmp_path / "m.py.bak") == str(elsewhere)
    assert path.read_bytes() == b"new\n"


# -- fix --write, live -------------------------------------------------------------------------------


# The site: a debug log line, which (the root logger at Python's default WARNING) writes nothing, so
# its guard keeps everything the program says (a print that prints would not verify: test_fix_said).
BODY = b'def f(x):\n    logging.debug("shape %s", x.shape)\n    return x * 2\n'
PRINT = b'logging.debug("shape %s", x.shape)'


def test_write_keeps_crlf_form_feeds_tabs_and_a_comment_after_unicode_names(
        tmp_path: Path, imported: Any, capsys: pytest.CaptureFixture[str]) -> None:
    raw = ("import logging\r\nimport torch\r\n\x0c\r\n# section \u2028 one\r\n\r\n"
           "def helper(x):\r\n\tgröße = x.shape\r\n\tlogging.debug('größe %s', größe)  # ü after names\r\n\treturn x + 1\r\n"
           "\r\n\r\ndef f(x):\r\n    logging.debug('f %s', x.shape)\r\n    return helper(x) * 2\r\n").encode()
    path = _file(tmp_path, raw, "kitchen.py")
    res = _fix(imported(path, "kitchen"))
    assert [p.verified for p in res.patches] == [True, True], [p.why_not for p in res.patches]
    assert sorted(p.site for p in res.patches) == ["kitchen.py:13", "kitchen.py:8"]
    expected = raw.replace("\tlogging.debug('größe %s', größe)  # ü after names\r\n".encode(),
                           _guarded("logging.debug('größe %s', größe)  # ü after names".encode(), b"\t", b"\t", b"\r\n"))
    expected = expected.replace(b"    logging.debug('f %s', x.shape)\r\n", _guarded(b"logging.debug('f %s', x.shape)", b"    ", ending=b"\r\n"))
    assert path.read_bytes() == expected
    assert Path(res.backups[0]).read_bytes() == raw
    assert not _siblings(tmp_path)
    capsys.readouterr()


@pytest.mark.heavy
@pytest.mark.parametrize("head, encode", [
    (b"# -*- coding: latin-1 -*-\nimport logging\nimport torch\nNAME = 'caf\xe9'\n\n", "latin-1"),
    (codecs.BOM_UTF8 + "import logging\nimport torch\nNAME = 'café'\n\n".encode(), "utf-8"),
], ids=["latin-1", "bom"])
def test_write_keeps_the_encoding_and_bom(head: bytes, encode: str, tmp_path: Path, imported: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    raw = head + 'def f(x):\n    logging.debug("%s é %s", NAME, x.shape)\n    return x * 2\n'.encode(encode)
    path = _file(tmp_path, raw)
    res = _fix(imported(path, "encoded"))
    (p,) = res.patches
    assert p.verified, p.why_not
    line = 'logging.debug("%s é %s", NAME, x.shape)'.encode(encode)
    assert path.read_bytes() == raw.replace(b"    " + line + b"\n", _guarded(line, b"    "))
    capsys.readouterr()


@pytest.mark.heavy
def test_write_keeps_mode_owner_and_hard_links(tmp_path: Path, imported: Any,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    raw = b"import logging\nimport torch\n\n\n" + BODY
    path = _file(tmp_path, raw)
    path.chmod(0o600)
    twin = tmp_path / "twin.py"
    os.link(path, twin)
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
    before = os.stat(path)
    res = _fix(imported(path, "private"))
    after = os.stat(path)
    expected = raw.replace(b"    " + PRINT + b"\n", _guarded(PRINT, b"    "))
    assert res.written == (str(path),) and path.read_bytes() == twin.read_bytes() == expected
    assert (after.st_ino, after.st_nlink, stat.S_IMODE(after.st_mode), after.st_uid) == (
        before.st_ino, 2, 0o600, before.st_uid)
    assert stat.S_IMODE(os.stat(res.backups[0]).st_mode) == 0o600, "the backup is no more readable than the file"
    capsys.readouterr()


@pytest.mark.heavy
def test_write_refuses_a_read_only_file_and_says_which(tmp_path: Path, imported: Any,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    raw = b"import logging\nimport torch\n\n\n" + BODY
    path = _file(tmp_path, raw)
    module = imported(path, "readonly")
    path.chmod(0o444)
    res = _fix(module)
    assert res.patches[0].verified and res.written == () and res.backups == ()
    assert res.note.startswith(f"nothing written: {path} is read-only (mode 0444)"), res.note
    assert path.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["m.py"]
    assert res.note in res.summary()
    capsys.readouterr()


@pytest.mark.heavy
def test_write_goes_through_a_symlink_to_its_target(tmp_path: Path, imported: Any,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    raw = b"import logging\nimport torch\n\n\n" + BODY
    (tmp_path / "real").mkdir()
    (tmp_path / "src").mkdir()
    real = _file(tmp_path / "real", raw)
    link = tmp_path / "src" / "m.py"
    link.symlink_to(Path("..") / "real" / "m.py")
    res = _fix(imported(link, "linked"))
    assert res.written == (str(link),)
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "real" / "m.py")
    assert real.read_bytes() == raw.replace(b"    " + PRINT + b"\n", _guarded(PRINT, b"    "))
    assert res.backups == (str(tmp_path / "real" / "m.py.dynscope-backup"),), "the backup beside the real file"
    capsys.readouterr()


@pytest.mark.heavy
def test_write_never_puts_a_backup_through_a_dangling_link(tmp_path: Path, imported: Any,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    raw = b"import logging\nimport torch\n\n\n" + BODY
    path = _file(tmp_path, raw)
    target = tmp_path / "victim.txt"
    (tmp_path / "m.py.dynscope-backup").symlink_to(target)
    res = _fix(imported(path, "dangling"))
    assert not target.exists(), "the link was followed"
    assert (tmp_path / "m.py.dynscope-backup").is_symlink()
    assert res.backups == (str(tmp_path / "m.py.dynscope-backup1"),)
    assert Path(res.backups[0]).read_bytes() == raw and not Path(res.backups[0]).is_symlink()
    capsys.readouterr()


# -- verifying the object the user passed, where it lives --------------------------------------------


TWICE = b"""import logging
import torch


def f(x):
    logging.debug("first %s", x.shape)
    return x * 3


g = f


def f(x):
    return x * 2
"""


@pytest.mark.heavy
def test_a_name_bound_twice_patches_the_definition_the_object_came_from(tmp_path: Path, imported: Any,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, TWICE)
    res = _fix(imported(path, "twice"), "g")
    (p,) = res.patches
    assert p.site == "m.py:6" and p.verified and p.outputs_matched, p.why_not
    line = b'logging.debug("first %s", x.shape)'
    assert path.read_bytes() == TWICE.replace(b"    " + line + b"\n", _guarded(line, b"    "))
    written = _load(path, "twice_after")
    sys.modules.pop("twice_after", None)
    x = torch.ones(3)
    assert torch.equal(torch.compile(written.g, backend="eager")(x), x * 3) and torch.equal(written.f(x), x * 2)
    capsys.readouterr()


@pytest.mark.heavy
def test_a_definition_no_name_holds_is_refused_not_confused(tmp_path: Path, imported: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    raw = TWICE.replace(b"g = f\n", b"KEPT = [f]\n")
    path = _file(tmp_path, raw)
    module = imported(path, "hidden_def")
    res = dynscope.fix(module.KEPT[0], torch.ones(3), write=True)
    (p,) = res.patches
    assert not p.verified and "the def at line 5" in p.why_not and "cannot be run" in p.why_not
    assert p.breaks_after is None and res.written == () and path.read_bytes() == raw
    capsys.readouterr()


EXITS = b"""import logging
import os
import sys

import torch

if os.path.basename(__file__) != "m.py":  # a script that stops unless run from its own file
    sys.exit(0)


def f(x):
    logging.debug("shape %s", x.shape)
    return x * 2
"""


def test_sys_exit_at_import_fails_the_verification_never_the_process(
        tmp_path: Path, imported: Any, capsys: pytest.CaptureFixture[str]) -> None:
    path = _file(tmp_path, EXITS)
    res = _fix(imported(path, "exits"))
    (p,) = res.patches
    assert not p.verified and p.why_not == "the patched copy of m.py did not import: it called sys.exit(0)"
    # Never run: its "after" fields are empty, not 0, in the model, JSON and text.
    assert (p.breaks_after, p.program_breaks_after, p.graphs_after, p.outputs_matched) == (None, None, None, None)
    data = json.loads(json.dumps(res.to_dict()))
    assert data["patches"][0]["breaks_after"] is None and data["patches"][0]["program_breaks_after"] is None
    data.pop("kind")
    assert from_plain(dynscope.FixResult, data) == res
    text = res.summary()
    assert "not run: breaks at the site 1, program 1 breaks, 1 graphs" in text and "-> 0" not in text
    assert "not run" in res.to_html()
    assert res.written == () and path.read_bytes() == EXITS and not _siblings(tmp_path)
    capsys.readouterr()


DATA = b"""import logging
from pathlib import Path

import torch

SCALE = float((Path(__file__).parent / "scale.txt").read_text())


def f(x):
    logging.debug("scale %s", SCALE)
    return x * SCALE
"""


@pytest.mark.heavy
def test_a_file_that_reads_a_sibling_data_file_verifies(tmp_path: Path, imported: Any,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "scale.txt").write_text("3.5")
    path = _file(tmp_path, DATA)
    res = _fix(imported(path, "reads_data"))
    (p,) = res.patches
    assert p.verified, p.why_not
    assert res.written == (str(path),) and not _siblings(tmp_path)
    capsys.readouterr()


HOLDS = b"""import logging
import os
import time

import torch

if "dynscope_fix" in __name__:  # the patched copy: say where it is, then wait to be killed
    with open(os.environ["HOLD_MARKER"], "w") as marker:
        marker.write(__file__)
    time.sleep(120)


def f(x):
    logging.debug("shape %s", x.shape)
    return x * 2


def build():
    return f, torch.ones(3)
"""


@pytest.mark.heavy
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_fix_leaves_no_copy_of_the_source(sig: int, tmp_path: Path) -> None:
    work, tmp = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    path = _file(work, HOLDS)
    marker = tmp_path / "copy-at"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp), "HOLD_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "dynscope", "fix", f"{path}:build", "-q"], cwd=work, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        copy = Path(marker.read_text())
        assert copy.parent == work and copy.exists() and copy.name.startswith(".m.dynscope-fix-")
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc != 0
    if sig == signal.SIGTERM:
        assert rc == -signal.SIGTERM, "the default action still ends the process"
    assert not copy.exists() and not _siblings(work)
    left = [p for p in tmp.rglob("*") if "dynscope" in p.name or (p.is_file() and b"HOLD_MARKER" in p.read_bytes())]
    assert not left, "a copy of the source left in the temporary folder"
    assert path.read_bytes() == HOLDS


@pytest.mark.heavy
def test_the_cli_exits_1_when_write_is_refused(tmp_path: Path) -> None:
    raw = b"import logging\nimport torch\n\n\n" + BODY + b"\n\ndef build():\n    return f, torch.ones(3)\n"
    path = _file(tmp_path, raw)
    path.chmod(0o444)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "dynscope", "fix", f"{path}:build", "--write", "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"nothing written: {path} is read-only (mode 0444)" in done.stdout
    assert path.read_bytes() == raw


@pytest.mark.heavy
def test_a_module_of_a_package_verifies_with_its_relative_imports(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    pkg = tmp_path / "fixpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("SCALE = 2.5\n")
    (pkg / "model.py").write_text("import logging\n\nimport torch\n\nfrom .helpers import SCALE\n\n\n"
                                  'def f(x):\n    logging.debug("scale %s", SCALE)\n    return x * SCALE\n')
    sys.path.insert(0, str(tmp_path))
    try:
        import fixpkg.model  # type: ignore[import-not-found]

        res = dynscope.fix(fixpkg.model.f, torch.ones(3))
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "fixpkg" or m.startswith("fixpkg.")]:
            sys.modules.pop(name, None)
    (p,) = res.patches
    assert p.verified, p.why_not
    assert not _siblings(pkg)
    capsys.readouterr()
