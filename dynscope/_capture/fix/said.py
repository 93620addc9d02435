"""What a program says while it runs, and the Python state it leaves on its modules: the two
behaviours outputs and gradients do not show, compared by the verifier between the unpatched
eager run and the patched compiled one.

- Messages: the lines it prints and the records its own loggers emit. A guard that runs a
  ``print`` or ``logger.info`` in eager code only keeps outputs and gradients but silences the
  message under ``torch.compile``; a patch that does so is not called verified. Numbers in a
  message are read as ``#`` (a printed time differs from run to run); records of PyTorch's and
  dynscope's own loggers (Dynamo's graph-break warnings) are not the program's. What the
  program prints still reaches the terminal: the capture tees it.
- State: plain Python values a module keeps in its attributes (a list of logged floats, a
  step counter, a flag), or in an object of the program's own classes it holds (a stats
  logger's dict of logged values). A rewrite that makes ``self.log.append(loss.item())`` append a tensor
  keeps every output but changes what the trainer reads back.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import io
import logging
import re
import sys
import textwrap
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["Said", "differs", "listening", "python_state"]

_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf", re.IGNORECASE)
# Loggers whose records are not the program's: PyTorch's (Dynamo's break warnings, Inductor) and
# dynscope's own.
_NOT_THEIRS = ("torch", "dynscope", "py.warnings")


class Said:
    """The messages of one run, in the order they came: printed lines and log records."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = ""
        self._lock = threading.Lock()

    def printed(self, text: str) -> None:
        with self._lock:
            text = self._partial + text
            *whole, self._partial = text.split("\n")
            self.lines += [f"print: {_NUMBER.sub('#', ln)}" for ln in whole]

    def logged(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record whose arguments do not format: its template
            message = str(record.msg)
        with self._lock:
            self.lines.append(f"{record.name} {record.levelname}: {_NUMBER.sub('#', message)}")

    def done(self) -> list[str]:
        if self._partial:
            self.lines.append(f"print: {_NUMBER.sub('#', self._partial)}")
            self._partial = ""
        return self.lines


class _Tee(io.TextIOBase):
    """sys.stdout for the run: every write goes on to the stream that was there, and is noted."""

    def __init__(self, stream: Any, said: Said) -> None:
        self.stream, self.said = stream, said

    def write(self, text: str) -> int:
        self.said.printed(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True


def _reaches_a_handler(logger: logging.Logger, record: logging.LogRecord) -> bool:
    """Whether the record gets written somewhere: a handler along the logger's chain (as
    ``Logger.callHandlers`` walks it) that is not a NullHandler and takes its level, or none at
    all (then Python's last resort writes warnings and above to stderr)."""
    found = False
    node: logging.Logger | None = logger
    while node is not None:
        for h in node.handlers:
            found = True
            if not isinstance(h, logging.NullHandler) and record.levelno >= h.level:
                return True
        if not node.propagate:
            break
        node = node.parent
    return not found and logging.lastResort is not None and record.levelno >= logging.lastResort.level


@contextlib.contextmanager
def listening() -> Iterator[Said]:
    """Note what the block prints and logs, in this thread. Log records are noted where the
    logger hands them to its handlers (``Logger.callHandlers``, wrapped for the block and put
    back): what a level or a filter drops is never made, and nothing is added to any logger's
    handlers, so what the program writes, and where, is as without fix."""
    said = Said()
    me = threading.get_ident()
    call_handlers = logging.Logger.callHandlers

    def noting(logger: logging.Logger, record: logging.LogRecord) -> None:
        try:
            if (record.thread == me and not record.name.startswith(_NOT_THEIRS)
                    and _reaches_a_handler(logger, record)):
                said.logged(record)
        except Exception:  # noqa: BLE001 - noting must never stop the program's own logging
            pass
        call_handlers(logger, record)

    logging.Logger.callHandlers = noting  # type: ignore[method-assign, assignment]
    stdout = sys.stdout
    sys.stdout = _Tee(stdout, said)
    try:
        yield said
    finally:
        sys.stdout = stdout
        logging.Logger.callHandlers = call_handlers  # type: ignore[method-assign]
        said.done()


def differs(expected: list[str], got: list[str]) -> str:
    """"" when the two runs said the same messages (in any order: Dynamo may run a reordered
    call after its graph), else what differs, in one line."""
    if sorted(expected) == sorted(got):
        return ""
    missing = [m for m in expected if m not in got]
    extra = [m for m in got if m not in expected]
    parts = [f"the unpatched eager run said {len(expected)} message(s), the patched compiled run {len(got)}"]
    if missing:
        parts.append(f"not said under torch.compile: {missing[0][:120]!r}")
    elif extra:
        parts.append(f"said only under torch.compile: {extra[0][:120]!r}")
    return "; ".join(parts)


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def python_state(modules: list[tuple[str, Any]], copy_tensor: Any, is_tensor: Any) -> dict[str, Any]:
    """The plain Python values each module keeps in its own attributes (not its parameters,
    buffers or submodules, which the weights compare): numbers (numpy's read as Python's),
    strings, and lists, tuples and dicts of those or of tensors (copied by ``copy_tensor``),
    and the same kept by an object of the program's own classes it holds
    (``self.logger.stats``), by ``who.attribute``."""

    def plain(value: Any, depth: int = 0) -> tuple[bool, Any]:
        if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
            # numpy's numbers and arrays as Python's: under torch.compile, numpy code Dynamo
            # traced leaves a 0-d array where eager left an np.float64 (the same number)
            return plain(value.tolist(), depth)
        if isinstance(value, _PLAIN):
            return True, value
        if is_tensor(value):
            return True, copy_tensor(value)
        if depth < 3 and isinstance(value, (list, tuple)):
            items = [plain(v, depth + 1) for v in value]
            kept = [v for _, v in items]
            return all(ok for ok, _ in items), tuple(kept) if isinstance(value, tuple) else kept
        if depth < 3 and isinstance(value, dict):
            pairs = {k: plain(v, depth + 1) for k, v in value.items()}
            return all(ok for ok, _ in pairs.values()), {k: v for k, (_, v) in pairs.items()}
        return False, None

    def attributes(who: str, owner: Any, out: State, held: int = 0) -> None:
        for name, value in vars(owner).items():
            if name.startswith("_") or name == "training":
                continue
            ok, kept = plain(value)
            if ok:
                out[f"{who}.{name}"] = kept
                if held or only_accumulated(type(owner), name):
                    out.held.add(f"{who}.{name}")
            elif held < 2 and hasattr(value, "__dict__") and _programs_own(type(value)):
                attributes(f"{who}.{name}", value, out, held + 1)  # its own attributes, said by their path

    out = State()
    for who, module in modules:
        attributes(who, module, out)
    return out


class State(dict[str, Any]):
    """What :func:`python_state` found: attribute path -> value, and in ``held`` the paths of
    the attributes of plain objects the modules hold (a meter's ``avg``) and of a module's own
    that its class only adds to (:func:`only_accumulated`), apart from the modules' other
    attributes (a ``self.total_loss`` the module also reads, to format or divide)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()


def only_accumulated(cls: Any, name: str) -> bool:
    """Whether the code of ``cls`` (its own classes up its MRO, from their source) only ever
    sets ``self.<name>`` and adds to it (``self.train_l2 = 0`` and ``self.train_l2 +=
    loss.item()``, an FNO's running loss) and never reads it otherwise: a value kept for code
    outside the call, which the module's own calls never read back. One it reads
    (``self.total_loss / (1 + idx)`` formatted for a progress bar every call) is not."""
    uses = _self_attributes(cls)
    return uses is not None and name in uses[0] and name not in uses[1]


@functools.lru_cache(maxsize=1024)
def _self_attributes(cls: Any) -> tuple[frozenset[str], frozenset[str]] | None:  # Any: lru_cache wants a Hashable
    """The ``self.<name>`` the code of ``cls`` (its own classes up its MRO) sets, and those it
    reads, each class's source parsed once; None when a class's source cannot be read."""
    stored: set[str] = set()
    loaded: set[str] = set()
    for klass in cls.__mro__:
        if klass.__module__.split(".")[0] in _LIBRARIES:
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            return None
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                (stored if isinstance(node.ctx, ast.Store) else loaded).add(node.attr)
    return frozenset(stored), frozenset(loaded)


#: Top packages whose objects hold no program state fix should compare (Python's own, torch's,
#: numpy's, dynscope's): a logging.Logger or a random.Random kept on a module is not the program's.
_LIBRARIES = frozenset(sys.stdlib_module_names) | {"builtins", "torch", "numpy", "dynscope"}


def _programs_own(kind: type) -> bool:
    """Whether ``kind`` is one of the program's own classes (defined in its files, not in an
    installed package), whose instances' attributes (a stats logger's, a replay buffer's, a
    schedule's) are the program's state as much as a module's list is (pymarl's learner keeps
    its logged stats in a ``Logger`` object); classes (``type`` itself) are not. Not cached: fix
    imports a fresh patched copy of the program for each run, and a cache would keep each alive."""
    if issubclass(kind, type) or (kind.__module__ or "").split(".")[0] in _LIBRARIES:
        return False
    # An installed package's object (a wandb run, a tensorboardX writer) holds its own
    # bookkeeping (clocks, handles), not the program's: only classes of the program's files.
    where = str(getattr(sys.modules.get(kind.__module__), "__file__", None) or "")
    return "site-packages" not in where and "dist-packages" not in where

