"""``watch_ranks()``: stop a diverging multi-rank job at the compile that diverged.

At the end of each Dynamo compile (PyTorch's guards record, logged after the backend
compiled and before the compiled code runs), each rank publishes what it compiled through
the job's own c10d store and waits, for a bounded time, for the other ranks' account of the
same compile (same function, file, line and nth compile of it). Digests first: the whole
report of the frame's compiles travels only when digests differ. What is compared is
:mod:`dynscope._model.watch`'s; here are the store, the waiting and the stopping.

A rank that finds a divergence writes a verdict to the store, saves its report so far for
``merge``, waits briefly for the others to save theirs, and raises
:class:`~dynscope.RankDivergenceError` out of the compile (or warns). A rank blocked in a
collective cannot raise: its watcher thread reads the verdict, saves its report, says the
verdict on stderr and, unless the process ends by itself (gloo fails once a peer exits;
torchrun stops the other workers), ends it. No collective of dynscope's own, no server.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import linecache
import os
import sys
import threading
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.assemble import build_report
from dynscope._errors import InputError, RankDivergenceError, RankDivergenceWarning
from dynscope._lexicon.wording import resume_label
from dynscope._model.codec import report_from_dict
from dynscope._model.merge import save_rank
from dynscope._model.watch import Verdict, can_hang, compare, digest, frame_key, remedy_for, unmatched
from dynscope._torch import records
from dynscope._torch.distributed import job_store, raisable_in_compile
from dynscope._torch.registry import is_user_file
from dynscope._torch.trace import TraceCollector

if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Iterator

    from dynscope._model import Report
    from dynscope._torch.trace import TraceEvent

__all__ = ["ENV", "Account", "RankWatch", "account", "watch_from_env", "watch_ranks"]

#: Set to 1 to watch every compile of the process from ``import dynscope`` on.
ENV = "DYNSCOPE_WATCH_RANKS"
#: Options of the watch the variable turns on: seconds to wait, raise or warn, the folder.
ENV_WAIT_S, ENV_ON, ENV_FOLDER = "DYNSCOPE_WATCH_WAIT_S", "DYNSCOPE_WATCH_ON", "DYNSCOPE_WATCH_FOLDER"

DEFAULT_WAIT_S = 60.0
DEFAULT_FOLDER = "dynscope-ranks"
#: How long a rank that found a divergence waits for the others to save their reports.
ACK_WAIT_S = 5.0
#: How long a rank told of a divergence by another waits for its process to end by itself.
GRACE_S = 10.0
#: While a missing rank is still compiling, the wait goes on, up to this many times ``wait_s``.
COMPILING_STRETCH = 10
_STATE_EVERY_S = 0.25
_PREFIX = "dynscope-watch"
_VERDICT, _VERDICTS, _ACKS = "verdict", "verdict/n", "verdict/acks"

_instances = 0
_instances_lock = threading.Lock()
_process_watch: RankWatch | None = None  # the one DYNSCOPE_WATCH_RANKS=1 started


class _Collector(TraceCollector):
    """A :class:`TraceCollector` that indexes its events by frame and calls back when a
    compile's guards are logged (its compile is done, nothing compiled has run yet)."""

    def __init__(self, on_guards: Callable[[str], None]) -> None:
        super().__init__()
        self.by_frame: defaultdict[str, list[TraceEvent]] = defaultdict(list)
        self._on_guards = on_guards

    def emit(self, record: Any) -> None:
        before = len(self.events)
        super().emit(record)
        if len(self.events) == before:
            return
        ev = self.events[-1]  # only the watched thread appends (TraceCollector.thread)
        if not ev.compile_id:
            return
        self.by_frame[ev.compile_id.split("/")[0]].append(ev)
        if ev.name == records.DYNAMO_CPP_GUARDS_STR:
            # Raising here leaves the compile as the error itself (raisable_in_compile).
            self._on_guards(ev.compile_id)


class RankWatch:
    """The live cross-rank check; use :func:`watch_ranks`."""

    def __init__(self, *, on_divergence: str = "raise", wait_s: float = DEFAULT_WAIT_S,
                 folder: str | Path | None = DEFAULT_FOLDER, poll_s: float = 0.5) -> None:
        if on_divergence not in ("raise", "warn"):
            raise InputError(f"on_divergence must be 'raise' or 'warn', got {on_divergence!r}")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s > 0:
            raise InputError(f"wait_s must be a number of seconds above 0, got {wait_s!r}")
        self.on_divergence = on_divergence
        self.wait_s = float(wait_s)
        self.folder = Path(folder) if folder is not None else None
        self.poll_s = poll_s
        #: What this rank found or was told, in order (a warn-mode job keeps going).
        self.verdicts: list[Verdict] = []
        #: Compiles checked, seconds spent checking them, and of those the seconds spent
        #: waiting for the other ranks (what is left is the watch's own work).
        self.checks, self.check_s, self.wait_s_spent = 0, 0.0, 0.0
        self._collector = _Collector(self._compiled)
        self._stack: contextlib.ExitStack | None = None
        self._store: Any = None
        self._rank, self._world = 0, 1
        self._published: set[str] = set()
        self._said: set[tuple[str, str]] = set()
        self._verdict_seen = False
        self._raised = False
        self._broken = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._instance = 0

    # -- entering and leaving ----------------------------------------------------------

    def __enter__(self) -> RankWatch:
        if self._stack is not None:
            raise InputError("this watch is already active; use a new dynscope.watch_ranks()")
        global _instances
        with _instances_lock:
            _instances += 1
            self._instance = _instances  # every rank opens its watches in the same order
        self._collector.thread = threading.get_ident()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_torch.attached(self._collector))
        self._collector.strings.update(_torch.interned_strings())
        self._stack.enter_context(_torch.around_compiles(self._compiling, self._compiled_all))
        return self

    def __exit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=2 * self.poll_s + 1)

    # -- the store ------------------------------------------------------------------------

    def _ready(self) -> Any:
        """The job's store under this watch's prefix, once a process group exists; None before."""
        if self._store is not None:
            return self._store
        base = job_store()
        if base is None:
            return None
        dist = torch.distributed
        self._rank, self._world = int(dist.get_rank()), int(dist.get_world_size())
        # A job torchrun restarted reuses its store: each restart and each watch its own keys.
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self._store = dist.PrefixStore(f"{_PREFIX}/{restart}/{self._instance}/", base)
        self._monitor = threading.Thread(target=self._watch_verdicts, name="dynscope-watch-ranks", daemon=True)
        self._monitor.start()
        return self._store

    def _set_state(self, state: str) -> None:
        if self._store is not None:
            self._store.set(f"state/{self._rank}", state)

    def _compiling(self) -> None:
        # At every compile start (a frame, a lazy backward): a rank waiting for this one
        # sees it is on its way and waits longer.
        self._mark("compiling")

    def _compiled_all(self) -> None:
        self._mark("running")

    def _mark(self, state: str) -> None:
        if self._stack is None or self._store is None or self._broken or threading.get_ident() != self._collector.thread:
            return
        try:
            self._set_state(state)
        except Exception as err:  # noqa: BLE001 - never fail the user's compile for the watch
            self._give_up(err)

    # -- one compile ------------------------------------------------------------------------

    def _compiled(self, compile_id: str) -> None:
        if self._broken:
            return
        started = time.perf_counter()
        try:
            self._check(compile_id)
        except RankDivergenceError:
            raise
        except Exception as err:  # noqa: BLE001 - never fail the user's compile for the watch
            self._give_up(err)
        finally:
            self.check_s += time.perf_counter() - started

    def _give_up(self, err: BaseException) -> None:
        """The watch failed (the store went away, a bug of dynscope's): say so once and stop
        watching; the job itself goes on."""
        self._broken = True
        warnings.warn(f"dynscope.watch_ranks stopped watching rank {self._rank}: {type(err).__name__}: {err}",
                      RankDivergenceWarning, stacklevel=2)

    def _check(self, compile_id: str) -> None:
        store = self._ready()
        if store is None or self._world < 2:
            return
        events = list(self._collector.by_frame[compile_id.split("/")[0]])
        acc = account(events, compile_id, rank=self._rank, world_size=self._world)
        name, filename, line, key, nth, rep = acc.name, acc.filename, acc.line, acc.key, acc.nth, acc.report
        found, waited, complete = self._exchange(store, key, rep, compile_id, nth)
        if not found:
            self._set_state("running")
            return
        frame = resume_label(rep.graphs[-1].frame) if rep.graphs else resume_label(name)
        verdict = Verdict(
            found_by=self._rank, world_size=self._world, frame=frame or name,
            where=f"{PurePath(filename).name}:{line}", compile_id=compile_id, line=_calling_line(),
            divergences=found, remedy=remedy_for(found), waited_s=round(waited, 2),
            stops=complete or can_hang(rep, nth), answered=complete,
        )
        self._set_state("running")
        self._diverged(verdict)

    def _exchange(self, store: Any, key: str, rep: Report, compile_id: str, nth: int) -> tuple[tuple[Any, ...], float, bool]:
        """Publish this rank's account of ``key``, wait for the others', compare: (the
        divergences found, seconds waited, whether every rank answered)."""
        mine = digest(rep)
        store.set(f"{key}/report/{self._rank}", rep.to_json(indent=None))
        store.set(f"{key}/digest/{self._rank}", mine)
        store.add(f"{key}/n", 1)
        self._published.add(key)
        self._set_state("waiting:" + key)
        started = time.monotonic()
        self._await(store, key, started)
        waited = time.monotonic() - started
        self.checks += 1
        self.wait_s_spent += waited
        others = [q for q in range(self._world) if q != self._rank]
        present = [q for q in others if store.check([f"{key}/digest/{q}"])]
        missing = [q for q in others if q not in present]
        if missing:
            div = unmatched(rep, rank=self._rank, nth=nth, compile_id=compile_id, missing=missing, waited_s=waited)
            return (div,), waited, False
        digests = {q: store.get(f"{key}/digest/{q}").decode() for q in present}
        if all(d == mine for d in digests.values()):
            self._done(store, key)
            return (), waited, True
        # One report per digest: the ranks that agree share it.
        by_digest: dict[str, Report] = {mine: rep}
        reports = [rep]
        for q, d in digests.items():
            if d not in by_digest:
                by_digest[d] = report_from_dict(json.loads(store.get(f"{key}/report/{q}")))
            reports.append(replace(by_digest[d], rank=q))
        return compare(sorted(reports, key=lambda r: r.rank)), waited, True

    def _done(self, store: Any, key: str) -> None:
        """The last rank to agree on ``key`` clears its keys: a long job's store stays small."""
        if store.add(f"{key}/done", 1) < self._world or not hasattr(store, "delete_key"):
            return
        for q in range(self._world):
            store.delete_key(f"{key}/report/{q}")
            store.delete_key(f"{key}/digest/{q}")

    def _await(self, store: Any, key: str, started: float) -> None:
        """Wait until every rank has published ``key``, the wait runs out (stretched while a
        missing rank is still compiling), the ranks are provably waiting on different
        compiles, or another rank's verdict arrives (then stop with it)."""
        deadline = started + self.wait_s
        cap = started + self.wait_s * COMPILING_STRETCH
        pause, states_at = 0.001, 0.0
        while True:
            if self.on_divergence == "raise" and store.check([_VERDICT]):
                self._told(store)
            if store.add(f"{key}/n", 0) >= self._world:
                return
            now = time.monotonic()
            if now - states_at >= _STATE_EVERY_S:
                states_at = now
                compiling, elsewhere = self._peer_states(store, key)
                if elsewhere:
                    return  # they wait on a compile this rank never made, and this one on theirs
                if compiling:
                    deadline = min(max(deadline, now + self.wait_s), cap)
            if now >= deadline:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _peer_states(self, store: Any, key: str) -> tuple[bool, bool]:
        """(some rank that has not published ``key`` is compiling, such a rank waits on a key
        this rank never published)."""
        compiling = elsewhere = False
        for q in range(self._world):
            if q == self._rank or store.check([f"{key}/digest/{q}"]) or not store.check([f"state/{q}"]):
                continue
            state = store.get(f"state/{q}").decode()
            compiling |= state == "compiling"
            if state.startswith("waiting:") and state[len("waiting:"):] not in self._published:
                elsewhere = True
        return compiling, elsewhere

    # -- stopping ---------------------------------------------------------------------------

    def _diverged(self, verdict: Verdict) -> None:
        said = (verdict.compile_id, "\n".join(d.detail for d in verdict.divergences))
        if said in self._said:
            return
        self._said.add(said)
        self.verdicts.append(verdict)
        saved = self._save()
        if self.on_divergence == "raise" and verdict.stops:
            store = self._store
            if store.add(_VERDICTS, 1) == 1:
                store.set(_VERDICT, json.dumps(verdict.to_dict()))
            if self._first_verdict():
                store.add(_ACKS, 1)  # this rank has saved; a rank that found it too counts itself
            self._await_acks(store)
            self._raised = True
            raise raisable_in_compile(RankDivergenceError)(verdict, saved=saved)
        warnings.warn(verdict.message(saved=saved), RankDivergenceWarning, stacklevel=2)

    def _told(self, store: Any) -> None:
        """Another rank found a divergence: save, acknowledge, stop with its verdict."""
        verdict = Verdict.from_dict(json.loads(store.get(_VERDICT)))
        first = self._first_verdict()
        saved = self._save() if first else ""
        if first:
            store.add(_ACKS, 1)
            self.verdicts.append(verdict)
        self._set_state("running")
        self._raised = True
        raise raisable_in_compile(RankDivergenceError)(verdict, saved=saved)

    def _first_verdict(self) -> bool:
        """Whether this is the first verdict this rank handles (the main thread and the watcher
        thread both may see it: one saves and acknowledges)."""
        with self._lock:
            first = not self._verdict_seen
            self._verdict_seen = True
        return first

    def _await_acks(self, store: Any) -> None:
        deadline = time.monotonic() + min(ACK_WAIT_S, self.wait_s)
        while time.monotonic() < deadline and store.add(_ACKS, 0) < self._world:
            time.sleep(0.02)

    def _watch_verdicts(self) -> None:
        """The watcher thread: a rank blocked outside dynscope (in a collective) still saves
        its report and says the verdict when another rank found one."""
        store = self._store
        while not self._stop.wait(self.poll_s):
            try:
                if not store.check([_VERDICT]):
                    continue
                if not self._first_verdict():
                    return
                verdict = Verdict.from_dict(json.loads(store.get(_VERDICT)))
                saved = self._save()
                store.add(_ACKS, 1)
            except Exception:  # noqa: BLE001 - the store went away with the job: nothing to do
                return
            self.verdicts.append(verdict)
            print(f"[rank {self._rank}] dynscope.watch_ranks: {verdict.message(saved=saved)}", file=sys.stderr, flush=True)
            if self.on_divergence == "raise" and not self._stop.wait(GRACE_S) and not self._raised:
                print(f"[rank {self._rank}] dynscope.watch_ranks: stopping this rank (blocked for "
                      f"{GRACE_S:.0f} s after the verdict)", file=sys.stderr, flush=True)
                os._exit(1)
            return

    def _save(self) -> str:
        """This rank's report so far, saved for merge; "" when there is no folder or it failed."""
        if self.folder is None:
            return ""
        events = self._collector.snapshot()
        rep = build_report(events, [], ignore_backend_mismatch=False, title=f"rank {self._rank} (watch_ranks)",
                           rank=self._rank, world_size=self._world, torch_version=str(torch.__version__))
        try:
            return str(save_rank(rep, self.folder))
        except OSError as err:
            print(f"[rank {self._rank}] dynscope.watch_ranks: could not save the report to {self.folder}: {err}",
                  file=sys.stderr, flush=True)
            return ""


@dataclass(frozen=True)
class Account:
    """What one rank says of one compile: the frame's compiles so far as a report, and the
    key every rank files it under."""

    name: str  # the frame's function
    filename: str
    line: int
    nth: int  # which compile of the frame (0 first)
    key: str  # _model.watch.frame_key
    report: Report


def account(events: list[TraceEvent], compile_id: str, *, rank: int, world_size: int) -> Account:
    """The account of ``compile_id`` from the events of its frame logged so far (in the
    watch, up to that compile's guards record)."""
    cids = list(dict.fromkeys(ev.compile_id for ev in events))
    nth = cids.index(compile_id)
    name, filename, line = _frame_of(events)
    rep = build_report(events, [], ignore_backend_mismatch=False, rank=rank, world_size=world_size)
    return Account(name, filename, line, nth, frame_key(name, filename, line, nth), rep)


def _frame_of(events: list[TraceEvent]) -> tuple[str, str, int]:
    """(function, file, line) of the frame the events compile, from its first compile's
    dynamo_start (the top of the stack Dynamo starts on)."""
    start = next((ev for ev in events if ev.name == records.DYNAMO_START), None)
    stack = start.metadata.get("stack") if start is not None else None
    if not isinstance(stack, list) or not stack or not isinstance(stack[-1], dict):
        return "?", "?", 0
    top = stack[-1]
    return str(top.get("name", "?")), str(top.get("filename", "?")), int(top.get("line") or 0)


def _calling_line() -> str:
    """The user's line that called the function being compiled ("train.py:41: loss =
    forward(x)"): the innermost frame of the user's own files on the live stack (the
    compiled frame itself has not started; torch, dynscope and the standard library are
    skipped)."""
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            code = linecache.getline(filename, frame.f_lineno).strip()
            return f"{PurePath(filename).name}:{frame.f_lineno}" + (f": {code}" if code else "")
        frame = frame.f_back
    return ""


@contextlib.contextmanager
def watch_ranks(*, on_divergence: str = "raise", wait_s: float = DEFAULT_WAIT_S,
                folder: str | Path | None = DEFAULT_FOLDER) -> Iterator[RankWatch]:
    """Compare every Dynamo compile in the block across the ranks of the job, live.

    At the end of each compile, before the compiled code runs, each rank publishes what it
    compiled through the job's c10d store and waits up to ``wait_s`` for the other ranks'
    account of the same compile. When they differ (a recompile, graph break, graph, dtype or
    collective only some ranks have), every rank stops with the same words instead of
    hanging in the next collective. Outside a process group (one process) it does nothing.

    Args:
        on_divergence: "raise" (default) raises :class:`~dynscope.RankDivergenceError` out of
            the compile on each rank that takes part; "warn" warns
            (:class:`~dynscope.RankDivergenceWarning`) and lets the job go on.
        wait_s: how long a rank waits for the others at one compile (longer while a missing
            rank is still compiling). Keep it well under the collective timeout. Defaults to 60.
        folder: where each rank saves its report so far on a divergence
            (``rank-<r>.json``, for ``dynscope merge``); None saves nothing. Defaults to
            "dynscope-ranks".

    Yields:
        The :class:`RankWatch`; ``.verdicts`` lists what was found.

    Raises:
        InputError: an unknown ``on_divergence`` or a ``wait_s`` that is not above 0.
    """
    watch = RankWatch(on_divergence=on_divergence, wait_s=wait_s, folder=folder)
    with watch:
        yield watch


def watch_from_env(environ: dict[str, str] | None = None) -> RankWatch | None:
    """Start the process-long watch ``DYNSCOPE_WATCH_RANKS=1`` asks for (at ``import
    dynscope`` and in ``python -m dynscope.watch``); None when the variable is not 1."""
    global _process_watch
    env = os.environ if environ is None else environ
    if env.get(ENV) != "1":
        return None
    if _process_watch is not None:  # import dynscope and python -m dynscope.watch: one watch
        return _process_watch
    try:
        wait_s = float(env.get(ENV_WAIT_S, DEFAULT_WAIT_S))
    except ValueError:
        raise InputError(f"{ENV_WAIT_S} must be a number of seconds, got {env.get(ENV_WAIT_S)!r}") from None
    folder = env.get(ENV_FOLDER, DEFAULT_FOLDER)
    watch = RankWatch(on_divergence=env.get(ENV_ON, "raise"), wait_s=wait_s, folder=folder or None)
    watch.__enter__()
    atexit.register(watch.__exit__, None, None, None)
    _process_watch = watch
    return watch
