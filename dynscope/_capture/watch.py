"""``watch_ranks()``: stop a job whose ranks compiled differently, and only when it would hang.

At the start of each Dynamo compile each rank marks itself "compiling" in the job's own c10d
store; at its end (PyTorch's guards record, logged after the backend compiled and before the
compiled code runs) it publishes its account of the compile (same function, file, line and
nth compile of it). Digests first: the whole report of the frame's compiles travels only when
digests differ. What is compared is :mod:`dynscope._model.watch`'s; here are the store, the
waiting and the stopping.

A compile is a stopping point only when it can desynchronise the ranks' collectives: its
graphs bring collectives (:func:`~dynscope._model.watch.new_collectives`). Only there, and only
with ``on_divergence="raise"``, does a rank wait for the others' account before its compiled
code runs; a difference found there raises :class:`~dynscope.RankDivergenceError` out of the
compile on every rank that takes part. Every other compile (a recompile for another batch
size, a rank-local helper, FSDP's and DDP's blocks, whose collectives run in hooks sized by
parameters) is compared in the background by the watcher thread: a difference is said
(:class:`~dynscope.RankDivergenceWarning`) and kept as a suspect, and the job goes on.

The watcher thread also looks at the watched thread's stack: a rank that waits in a collective
publishes which one and how many collectives it has issued. When every rank waits in a
collective and they are not the same one, the job is hung: each rank says the verdict (led by
the suspects), its last compile, its line and step, saves its report and, in raise mode, ends.
A rank that waits alone says every few seconds what it waits for, and saves its report before
the collective timeout. Every wait stays well under the process group's timeout. No collective
of dynscope's own, no server; on any failure of its own the watch says so and turns itself off.
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
import traceback
import warnings
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._errors import InputError, RankDivergenceError, RankDivergenceWarning
from dynscope._lexicon.wording import resume_label
from dynscope._model.codec import report_from_dict
from dynscope._model.compile_ids import frame_of
from dynscope._model.merge import save_rank
from dynscope._model.watch import (
    BLOCKED,
    Verdict,
    blocked_divergence,
    compare,
    digest,
    frame_key,
    goes_on_why,
    new_collectives,
    remedy_for,
    unmatched,
)
from dynscope._read.assemble import build_report
from dynscope._torch import records
from dynscope._torch.distributed import (
    collective_timeout_s,
    collectives_issued,
    hooks_around,
    job_store,
    raisable_in_compile,
    waiting_in,
)
from dynscope._torch.registry import is_user_file
from dynscope._torch.trace import TraceCollector

if TYPE_CHECKING:
    import types
    from collections.abc import Callable, Iterator

    from dynscope._model import Report
    from dynscope._model.ranks import Divergence
    from dynscope._torch.trace import TraceEvent

__all__ = ["ENV", "Account", "RankWatch", "account", "process_watch", "watch_from_env", "watch_ranks"]

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
#: Shares of the process group's collective timeout: a compile's wait stays under the first,
#: stretched while a rank compiles under the second; a rank that has waited the third in one
#: collective says where it is and saves its report (before the timeout ends the job).
#: A rank that compiles is on its way, not diverging: without the watch, this rank would wait
#: for it in the collective, up to the timeout. So the stretch runs to nine tenths of the
#: timeout (half of it stopped a healthy job whose first compile took 6 s of a 12 s timeout).
WAIT_SHARE, STRETCH_SHARE, SAVE_SHARE = 0.25, 0.9, 0.6
#: Every rank waiting this long in collectives that are not the same one: the job is hung.
BLOCKED_S = 2.0
#: How often a waiting rank says what it waits for.
SAY_EVERY_S = 5.0
#: Names of a local that a training loop counts its steps in (innermost user frame first).
STEP_NAMES = ("step", "global_step", "iteration", "iter_num", "it", "batch_idx", "i", "epoch")
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
        # record kind -> what its arrival does (a compile's guards: the compile is done)
        self._at_kind: dict[str, Callable[[str], None]] = {records.DYNAMO_CPP_GUARDS_STR: on_guards}

    def emit(self, record: Any) -> None:
        before = len(self.events)
        super().emit(record)
        if len(self.events) == before:
            return
        ev = self.events[-1]  # only the watched thread appends (TraceCollector.thread)
        if not ev.compile_id:
            return
        self.by_frame[frame_of(ev.compile_id)].append(ev)
        at = self._at_kind.get(ev.name)
        if at is not None:
            # Raising here leaves the compile as the error itself (raisable_in_compile).
            at(ev.compile_id)


@dataclass
class _Pending:
    """A compile whose accounts are compared in the background (it cannot stop the job)."""

    key: str
    acc: Account
    compile_id: str
    line: str  # the user's line that called it
    hooks: str  # the FSDP/DDP hooks around it, in words ("" none)
    collectives: tuple[str, ...]  # what it brings (warn mode keeps even those in the background)
    at: tuple[str, int] | None = None  # the user's line that called it (file, line)
    started: float = field(default_factory=time.monotonic)
    deadline: float = 0.0


@dataclass
class _Stuck:
    """The watched thread waiting in one collective (one C++ call of one Python frame)."""

    frame_id: int
    lineno: int
    op: str
    seq: int | None
    since: float  # time.monotonic() when first seen
    where: str  # the user's line, in words ("train.py:90 in main: dist.barrier()")
    site: str = "?"  # its parts, as fields: file:line, function, code
    function: str = "?"
    code: str = ""
    published: bool = False
    said_at: float = 0.0
    saved: bool = False
    seen_hung: int = 0  # consecutive checks that found every rank stuck in other collectives


class RankWatch:
    """The live cross-rank check; use :func:`watch_ranks`."""

    def __init__(self, *, on_divergence: str = "raise", wait_s: float = DEFAULT_WAIT_S,
                 folder: str | Path | None = DEFAULT_FOLDER, poll_s: float = 0.25,
                 say_every_s: float = SAY_EVERY_S) -> None:
        if on_divergence not in ("raise", "warn"):
            raise InputError(f"on_divergence must be 'raise' or 'warn', got {on_divergence!r}")
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or not wait_s > 0:
            raise InputError(f"wait_s must be a number of seconds above 0, got {wait_s!r}")
        self.on_divergence = on_divergence
        self.wait_s = float(wait_s)
        self.folder = Path(folder) if folder is not None else None
        self.poll_s = poll_s
        self.say_every_s = say_every_s
        #: What stopped the job (or would have: ``warn``), in order.
        self.verdicts: list[Verdict] = []
        #: Differences said while the job went on (a compile that brings no collective).
        self.notes: list[Verdict] = []
        #: Compiles checked and the seconds spent checking them; of those, the compiles at which
        #: this rank waited for the others (only compiles that bring collectives, in raise mode)
        #: and the seconds it waited (what is left is the watch's own work).
        self.checks, self.check_s, self.waits, self.wait_s_spent = 0, 0.0, 0, 0.0
        #: The process group's collective timeout (seconds), once read; None unknown.
        self.timeout_s: float | None = None
        self._collector = _Collector(self._compiled)
        self._stack: contextlib.ExitStack | None = None
        self._store: Any = None
        self._rank, self._world = 0, 1
        self._published: set[str] = set()
        self._said: set[tuple[str, object]] = set()  # notes: (frame, kinds); verdicts: (compile id, divergences)
        self._pending: list[_Pending] = []
        self._suspects: list[dict[str, Any]] = []
        self._last: tuple[str, str, float] | None = None  # (compile id, frame in words, when it ended)
        self._stuck: _Stuck | None = None
        self._peers_at = 0.0
        self._verdict_seen = False
        self._raised = False
        self._broken = False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._instance = 0
        self._entered = time.monotonic()

    # -- entering and leaving ----------------------------------------------------------

    def __enter__(self) -> RankWatch:
        if self._stack is not None:
            raise InputError("this watch is already active; use a new dynscope.watch_ranks()")
        global _instances
        with _instances_lock:
            _instances += 1
            self._instance = _instances  # every rank opens its watches in the same order
        self._collector.thread = threading.get_ident()
        self._entered = time.monotonic()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(_torch.attached(self._collector))
        self._collector.strings.update(_torch.interned_strings())
        self._stack.enter_context(_torch.around_compiles(self._compiling, self._compiled_all))
        self._monitor = threading.Thread(target=self._watch, name="dynscope-watch-ranks", daemon=True)
        self._monitor.start()
        return self

    def __exit__(self, exc_type: object = None, exc: BaseException | None = None, tb: object = None) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self._stop.set()
        if self._monitor is not None and self._monitor is not threading.current_thread():
            self._monitor.join(timeout=2 * self.poll_s + 1)
        if self._broken or self._store is None:
            return
        try:
            if exc is not None and not isinstance(exc, RankDivergenceError) and _collective_failed(exc):
                self._timed_out(exc)
            self._set_state("ended")
        except Exception:  # noqa: BLE001 - the job is ending; the store may be gone
            pass

    def stats(self) -> dict[str, Any]:
        """What the watch did, as plain data: compiles checked, the waits at compiles (count
        and seconds), its own seconds, the collective timeout it kept under, the verdicts and
        how many notes it said, and whether it turned itself off."""
        return {
            "rank": self._rank, "checks": self.checks, "waits": self.waits, "waited_s": round(self.wait_s_spent, 3),
            "own_s": round(self.check_s - self.wait_s_spent, 4), "timeout_s": self.timeout_s,
            "wait_limit_s": round(self._wait, 3), "verdicts": [v.to_dict() for v in self.verdicts],
            "notes": len(self.notes), "off": self._broken,
        }

    # -- limits, from the process group's timeout ---------------------------------------------

    @property
    def _wait(self) -> float:
        """A compile's wait: ``wait_s``, at most a share of the collective timeout."""
        t = self.timeout_s
        return self.wait_s if t is None else min(self.wait_s, WAIT_SHARE * t)

    @property
    def _cap(self) -> float:
        """The wait stretched while another rank compiles, at most a share of the timeout."""
        t = self.timeout_s
        cap = self.wait_s * COMPILING_STRETCH
        return cap if t is None else min(cap, STRETCH_SHARE * t)

    @property
    def _settle(self) -> float:
        t = self.timeout_s
        return BLOCKED_S if t is None else min(BLOCKED_S, t / 8)

    # -- the store ------------------------------------------------------------------------

    def _ready(self) -> Any:
        """The job's store under this watch's prefix, once a process group exists; None before."""
        if self._store is not None:
            return self._store
        with self._lock:
            if self._store is not None:
                return self._store
            base = job_store()
            if base is None:
                return None
            dist = torch.distributed
            self._rank, self._world = int(dist.get_rank()), int(dist.get_world_size())
            self.timeout_s = collective_timeout_s()
            # A job torchrun restarted reuses its store: each restart and each watch its own keys.
            restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
            self._store = dist.PrefixStore(f"{_PREFIX}/{restart}/{self._instance}/", base)
        t = self.timeout_s
        if self._world > 1 and t is not None and self.wait_s > WAIT_SHARE * t:
            self._say(f"wait_s={self.wait_s:g} s is not well under the process group's collective timeout "
                      f"({t:g} s): a compile's wait stays under {self._wait:g} s")
        return self._store

    def _set_state(self, state: str, **extra: Any) -> None:
        if self._store is not None:
            self._store.set(f"state/{self._rank}", json.dumps({"s": state, "t": time.time(), **extra}))

    def _compiling(self) -> None:
        # At every compile start (a frame, a lazy backward), the first included: a rank waiting
        # for this one sees it is on its way and waits longer.
        self._mark("compiling")

    def _compiled_all(self) -> None:
        self._mark("running")

    def _mark(self, state: str) -> None:
        if self._stack is None or self._broken or threading.get_ident() != self._collector.thread:
            return
        try:
            if self._ready() is not None and self._world > 1:
                self._set_state(state)
        except Exception as err:  # noqa: BLE001 - never fail the user's compile for the watch
            self._give_up(err)

    def _say(self, text: str) -> None:
        """A line (or lines) on stderr, each prefixed with this rank."""
        head = f"[rank {self._rank}] dynscope.watch_ranks: "
        print("\n".join(head + line for line in text.splitlines()), file=sys.stderr, flush=True)

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
        if self._broken:
            return
        self._broken = True
        self._stop.set()
        # Where it failed, for a report of the bug: the innermost frame of dynscope's own.
        frames = [f for f in traceback.extract_tb(err.__traceback__) if "dynscope" in f.filename]
        at = f" (at {PurePath(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
        warnings.warn(f"dynscope.watch_ranks stopped watching rank {self._rank} and turned itself off "
                      f"(your job goes on, unwatched): {type(err).__name__}: {err}{at}", RankDivergenceWarning,
                      stacklevel=2)

    def _check(self, compile_id: str) -> None:
        store = self._ready()
        if store is None or self._world < 2:
            return
        events = list(self._collector.by_frame[frame_of(compile_id)])
        acc = account(events, compile_id, rank=self._rank, world_size=self._world)
        self._last = (compile_id, _frame_words(acc), time.monotonic())
        self._publish(store, acc.key, acc.report)
        self.checks += 1
        here = sys._getframe(1)
        pend = _Pending(acc.key, acc, compile_id, _calling_line(here), hooks_around(here),
                        new_collectives(acc.report, acc.nth), _user_position(here))
        if pend.collectives and self.on_divergence == "raise":
            self._check_now(store, pend)  # it can desynchronise collectives: before it runs
            return
        pend.deadline = pend.started + self._wait
        with self._lock:
            self._pending.append(pend)  # the watcher thread compares it; the job goes on

    def _publish(self, store: Any, key: str, rep: Report) -> None:
        # Cache lookups (their key parts run to tens of KB a graph) decide nothing the ranks
        # compare: they stay out of what goes through the job's store at every compile.
        store.set(f"{key}/report/{self._rank}", replace(rep, cache_lookups=()).to_json(indent=None))
        store.set(f"{key}/digest/{self._rank}", digest(rep))
        store.add(f"{key}/n", 1)
        self._published.add(key)

    def _check_now(self, store: Any, pend: _Pending) -> None:
        """Wait for the others' account of a compile that brings collectives, compare, and stop
        every rank when they differ or do not come."""
        self.waits += 1
        self._set_state("waiting", key=pend.key)
        started = time.monotonic()
        try:
            doing = self._await(store, pend, started)
        finally:
            waited = time.monotonic() - started
            self.wait_s_spent += waited
        found, complete = self._compare(store, pend, waited, doing)
        self._set_state("compiling")
        if found:
            # The differences found earlier at compiles that could not stop the job come first:
            # they are what led here (a float16 rank's other graph, then the sync it skips).
            self._settle_pending(store, now=True)
            earlier = [d for v in self._all_suspects(store) for d in v.divergences if d not in found]
            self._diverged(self._verdict(pend, (*earlier, *found), waited, complete, stops=True))

    def _compare(self, store: Any, pend: _Pending, waited: float, doing: str) -> tuple[tuple[Divergence, ...], bool]:
        """(The divergences between the ranks' accounts of ``pend``, whether every rank gave one)."""
        key, rep = pend.key, pend.acc.report
        others = [q for q in range(self._world) if q != self._rank]
        present = [q for q in others if store.check([f"{key}/digest/{q}"])]
        missing = [q for q in others if q not in present]
        if missing:
            div = unmatched(rep, rank=self._rank, nth=pend.acc.nth, compile_id=pend.compile_id, missing=missing,
                            waited_s=waited, doing=doing)
            return (div,), False
        mine = digest(rep)
        digests = {q: store.get(f"{key}/digest/{q}").decode() for q in present}
        if all(d == mine for d in digests.values()):
            self._done(store, key)
            return (), True
        # One report per digest: the ranks that agree share it.
        by_digest: dict[str, Report] = {mine: rep}
        reports = [rep]
        for q, d in digests.items():
            if d not in by_digest:
                by_digest[d] = report_from_dict(json.loads(store.get(f"{key}/report/{q}")))
            reports.append(replace(by_digest[d], rank=q))
        return compare(sorted(reports, key=lambda r: r.rank)), True

    def _done(self, store: Any, key: str) -> None:
        """The last rank to agree on ``key`` clears its keys: a long job's store stays small."""
        if store.add(f"{key}/done", 1) < self._world or not hasattr(store, "delete_key"):
            return
        for q in range(self._world):
            store.delete_key(f"{key}/report/{q}")
            store.delete_key(f"{key}/digest/{q}")

    def _await(self, store: Any, pend: _Pending, started: float) -> str:
        """Wait until every rank has published ``pend``'s key, the wait runs out (stretched
        while a missing rank compiles), the missing ranks wait in collectives or on compiles
        this rank never made, or another rank's verdict arrives (then stop with it). Says every
        few seconds what it waits for. Returns what the missing ranks were doing, in words."""
        key = pend.key
        deadline, cap = started + self._wait, started + self._cap
        pause, states_at, said_at = 0.001, 0.0, started
        doing = ""
        while True:
            if store.check([_VERDICT]):
                self._told(store)
            if store.add(f"{key}/n", 0) >= self._world:
                return ""
            now = time.monotonic()
            if now - states_at >= _STATE_EVERY_S:
                states_at = now
                peers = self._peers(store, key)
                doing = _doing_words(peers)
                if peers and all(p.get("stuck") or _waits_elsewhere(p, self._published) for p in peers.values()):
                    return doing  # they wait in collectives, or on compiles this rank never made
                if any(p["state"].get("s") == "compiling" for p in peers.values()):
                    deadline = min(max(deadline, now + self._wait), started + self._cap)
                if now - said_at >= self.say_every_s:
                    said_at = now
                    self._say(f"has waited {now - started:.0f} s at {_frame_words(pend.acc)} (compile "
                              f"{pend.compile_id}, it issues {', '.join(pend.collectives)}) for the others' "
                              f"account: {doing} (waiting at most {max(deadline, cap) - started:.0f} s)")
            if now >= deadline:
                return doing
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _peers(self, store: Any, key: str | None = None) -> dict[int, dict[str, Any]]:
        """Each other rank's state (``state``: its compile state; ``stuck``: the collective it
        waits in, if any), less those that already published ``key``."""
        out: dict[int, dict[str, Any]] = {}
        for q in range(self._world):
            if q == self._rank or (key is not None and store.check([f"{key}/digest/{q}"])):
                continue
            state = json.loads(store.get(f"state/{q}")) if store.check([f"state/{q}"]) else {"s": "unseen"}
            raw = store.get(f"blocked/{q}") if store.check([f"blocked/{q}"]) else b""
            out[q] = {"state": state, "stuck": json.loads(raw) if raw else None}
        return out

    # -- the background: compiles that cannot stop the job, and collectives that never meet ------

    def _watch(self) -> None:
        """The watcher thread: compares the compiles left to it, watches the watched thread's
        collectives, and says a verdict another rank found (a rank blocked outside dynscope, in
        a collective, cannot raise)."""
        while not self._stop.wait(self.poll_s):
            try:
                store = self._ready()
                if store is None:
                    continue
                if self._world < 2:
                    return
                if self._verdict_found(store):
                    return
                self._settle_pending(store)
                self._look(store)
            except Exception as err:  # noqa: BLE001 - never into the job
                if self._stop.is_set() or not (torch.distributed.is_available() and torch.distributed.is_initialized()):
                    return  # the job is being torn down: its store goes with it
                self._give_up(err)
                return

    def _all_suspects(self, store: Any) -> list[Verdict]:
        """The differences every rank found at compiles that could not stop the job, by rank."""
        out: list[Verdict] = []
        for q in range(self._world):
            if store.check([f"suspects/{q}"]):
                out += [Verdict.from_dict(d) for d in json.loads(store.get(f"suspects/{q}"))]
        return out

    def _settle_pending(self, store: Any, *, now: bool = False) -> None:
        """Compare the compiles left to the background whose accounts are in, or whose wait
        ran out; ``now``: all of them, at once (a verdict is being written)."""
        with self._lock:
            pending = list(self._pending)
        if not pending:
            return
        peers: dict[int, dict[str, Any]] | None = None
        now_all, at = now, time.monotonic()
        for p in pending:
            waited = at - p.started
            if store.add(f"{p.key}/n", 0) < self._world:
                if peers is None:
                    peers = self._peers(store)
                missing = {q: s for q, s in peers.items() if not store.check([f"{p.key}/digest/{q}"])}
                if any(s["state"].get("s") == "compiling" for s in missing.values()):
                    p.deadline = min(max(p.deadline, at + self._wait), p.started + self._cap)
                gone = now_all or (bool(missing) and all(s.get("stuck") for s in missing.values()))
                if at < p.deadline and not gone:
                    continue
                found, complete = self._compare(store, p, waited, _doing_words(missing))
            else:
                found, complete = self._compare(store, p, waited, "")
            with self._lock:
                if p not in self._pending:
                    continue  # the other thread took it meanwhile
                self._pending.remove(p)
            if found:
                self._noted(p, found, waited, complete)

    def _noted(self, p: _Pending, found: tuple[Divergence, ...], waited: float, complete: bool) -> None:
        """A difference found in the background: said and kept as a suspect for a later hang;
        in warn mode, a compile that brings collectives is a verdict (warned)."""
        if p.collectives:
            verdict = self._verdict(p, found, waited, complete, stops=True)
            self._suspect(verdict)
            self._diverged(verdict, p.at)
            return
        why = goes_on_why(p.acc.nth, complete=complete)
        verdict = self._verdict(p, found, waited, complete, stops=False, why=why, hooks=p.hooks)
        self._suspect(verdict)
        self.notes.append(verdict)
        said = (verdict.frame, ",".join(sorted({d.kind for d in found})))
        if said in self._said or (complete and self._rank != 0):
            return  # said once per function and kind; rank 0 says what every rank found
        self._said.add(said)
        _warn(verdict.message(), p.at)

    def _suspect(self, verdict: Verdict) -> None:
        """Keep a difference found at a compile where every rank can read it: a hang found
        later is told with it (its likely cause)."""
        self._suspects = ([*self._suspects, verdict.to_dict()])[-8:]
        if self._store is not None:
            self._store.set(f"suspects/{self._rank}", json.dumps(self._suspects))

    def _look(self, store: Any) -> None:
        """Is the watched thread waiting in a collective? Publish it; when every rank waits in
        one and they are not the same, the job is hung: write the verdict. Say every few
        seconds what this rank waits for, and save its report before the timeout."""
        frame = sys._current_frames().get(self._collector.thread or -1)
        op = waiting_in(frame)
        st = self._stuck
        if op is None or frame is None:
            if st is not None:
                self._stuck = None
                if st.published:
                    store.set(f"blocked/{self._rank}", "")
            return
        seq = collectives_issued()
        now = time.monotonic()
        if st is None or (st.frame_id, st.lineno, st.op, st.seq) != (id(frame), frame.f_lineno, op, seq):
            if st is not None and st.published:
                store.set(f"blocked/{self._rank}", "")
            where, fn, code = _user_site(frame)
            self._stuck = _Stuck(id(frame), frame.f_lineno, op, seq, now, f"{where} in {fn}" + (f": {code}" if code else ""),
                                 site=where, function=fn, code=code)
            return
        stuck_for = now - st.since
        if stuck_for < self._settle:
            return
        mine = {"op": op, "seq": seq, "where": st.where, "site": st.site, "fn": st.function, "code": st.code,
                "t": time.time() - stuck_for}
        if not st.published:
            st.published = True
            store.set(f"blocked/{self._rank}", json.dumps(mine))
        if now - self._peers_at < self.poll_s * max(1, self._world // 16):
            return
        self._peers_at = now
        peers = self._peers(store)
        stuck = {q: p["stuck"] for q, p in peers.items() if p.get("stuck")}
        if len(stuck) == len(peers):
            everyone = {**stuck, self._rank: mine}
            differ = len({(b.get("op"), b.get("seq")) for b in everyone.values()}) > 1
            st.seen_hung = st.seen_hung + 1 if differ else 0
            if st.seen_hung >= 2:  # twice in a row, a poll apart: no collective completed between
                self._hung(store, everyone, stuck_for)
                return
        else:
            st.seen_hung = 0
        if stuck_for >= self.say_every_s and now - st.said_at >= self.say_every_s:
            st.said_at = now
            seq_words = f" (its collective #{seq})" if seq is not None else ""
            self._say(f"has waited {stuck_for:.0f} s in {op}{seq_words} at {st.where}; {_doing_words(peers)}")
        t = self.timeout_s
        if t is not None and stuck_for >= SAVE_SHARE * t and not st.saved:
            st.saved = True
            saved = self._save()
            self._say(f"has waited {stuck_for:.0f} s of the {t:g} s collective timeout in {op} at {st.where}: "
                      f"the job will fail at the timeout\n  {self._whereabouts(frame)}"
                      + (f"\n  this rank's report so far: {saved}" if saved else ""))

    def _hung(self, store: Any, everyone: dict[int, dict[str, Any]], stuck_for: float) -> None:
        """Every rank waits in a collective and they are not the same one: the verdict, led by
        the differences found at compiles (their likely cause). The first rank to find it writes it."""
        suspects = self._all_suspects(store)
        blocked = blocked_divergence(everyone)
        divs: list[Divergence] = []
        for d in [d for v in suspects for d in v.divergences] + [blocked]:
            if d not in divs:
                divs.append(d)
        lead = suspects[-1] if suspects else None
        if lead is not None:
            frame, where, compile_id, line = lead.frame, lead.where, lead.compile_id, lead.line
        else:
            odd = blocked.ranks[0] if blocked.ranks else min(everyone)
            stuck = everyone[odd]
            where, frame, code = str(stuck.get("site", "?")), str(stuck.get("fn", "?")), str(stuck.get("code", ""))
            compile_id, line = "", f"{where}: {code}" if code else where
        verdict = Verdict(
            found_by=self._rank, world_size=self._world, frame=frame, where=where, compile_id=compile_id, line=line,
            divergences=tuple(divs), remedy=remedy_for([d for v in suspects for d in v.divergences]) if suspects
            else BLOCKED, waited_s=round(stuck_for, 2), stops=True,
            answered=all(v.answered for v in suspects), blocked=True,
        )
        if store.add(_VERDICTS, 1) == 1:
            store.set(_VERDICT, json.dumps(verdict.to_dict()))

    # -- stopping ---------------------------------------------------------------------------

    def _verdict(self, pend: _Pending, found: tuple[Divergence, ...], waited: float, complete: bool, *,
                 stops: bool, why: str = "", hooks: str = "") -> Verdict:
        rep = pend.acc.report
        frame = resume_label(rep.graphs[-1].frame) if rep.graphs else resume_label(pend.acc.name)
        return Verdict(
            found_by=self._rank, world_size=self._world, frame=frame or pend.acc.name,
            where=f"{PurePath(pend.acc.filename).name}:{pend.acc.line}", compile_id=pend.compile_id, line=pend.line,
            divergences=found, remedy=remedy_for(found), waited_s=round(waited, 2), stops=stops, answered=complete,
            why=why, hooks=hooks,
        )

    def _diverged(self, verdict: Verdict, at: tuple[str, int] | None = None) -> None:
        said = (verdict.compile_id, verdict.divergences)  # the same records: said once
        if said in self._said:
            return
        self._said.add(said)
        self.verdicts.append(verdict)
        main = threading.get_ident() == self._collector.thread
        if self.on_divergence == "raise" and verdict.stops and main:
            saved = self._save()
            store = self._store
            if store.add(_VERDICTS, 1) == 1:
                store.set(_VERDICT, json.dumps(verdict.to_dict()))
            if self._first_verdict():
                store.add(_ACKS, 1)  # this rank has saved; a rank that found it too counts itself
            self._await_acks(store)
            self._raised = True
            raise raisable_in_compile(RankDivergenceError)(verdict, saved=saved)
        saved = self._save()
        _warn(verdict.message(saved=saved), at)

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
        deadline = time.monotonic() + min(ACK_WAIT_S, self._wait)
        while time.monotonic() < deadline and store.add(_ACKS, 0) < self._world:
            time.sleep(0.02)

    def _verdict_found(self, store: Any) -> bool:
        """A verdict is in the store (another rank's, or a hang this watcher found): say it with
        where this rank is, save, acknowledge; in raise mode end a rank that cannot raise.
        True when this watcher is done."""
        if not store.check([_VERDICT]):
            return False
        if not self._first_verdict():
            return True  # the watched thread took it (it raises, or it raised)
        verdict = Verdict.from_dict(json.loads(store.get(_VERDICT)))
        saved = self._save()
        store.add(_ACKS, 1)
        self.verdicts.append(verdict)
        frame = sys._current_frames().get(self._collector.thread or -1)
        stop = self.on_divergence == "raise"
        head = "dynscope.RankDivergenceError: " if stop else "RankDivergenceWarning: "
        self._say(head + verdict.message(saved=saved) + f"\n  {self._whereabouts(frame)}")
        if not stop:
            return True
        if verdict.blocked:  # every rank waits in a collective: nothing will end it but this
            self._await_acks(store)
            self._say(f"stopping rank {self._rank} after {time.monotonic() - self._entered:.2f} s watched: it waits "
                      "in a collective the others never reach")
            _end()
        if not self._stop.wait(GRACE_S) and not self._raised:
            self._say(f"stopping rank {self._rank} after {time.monotonic() - self._entered:.2f} s watched (blocked "
                      f"for {GRACE_S:.0f} s after the verdict)")
            _end()
        return True

    def _whereabouts(self, frame: types.FrameType | None) -> str:
        """This rank's last compile, where it is now and its step, in one line."""
        parts = [f"rank {self._rank}:"]
        if self._last is not None:
            cid, words, at = self._last
            parts.append(f"last compile {cid} of {words}, {time.monotonic() - at:.1f} s ago;")
        else:
            parts.append("no compile yet;")
        st = self._stuck
        if st is not None and frame is not None and st.frame_id == id(frame):
            parts.append(f"now waits in {st.op} at {st.where};")
        elif frame is not None:
            where, fn, code = _user_site(frame)
            parts.append(f"now at {where} in {fn}" + (f": {code};" if code else ";"))
        step = _step(frame)
        parts.append(f"step {step}" if step else "step unknown (no step counter among its locals)")
        return " ".join(parts)

    def _timed_out(self, exc: BaseException) -> None:
        """A collective failed in the watched block (its timeout, or a peer gone): say where this
        rank was and save its report."""
        st = self._stuck
        saved = self._save() if st is None or not st.saved else ""
        first = next(iter(str(exc).strip().splitlines()), type(exc).__name__)
        tb, frame = exc.__traceback__, None
        while tb is not None:  # the innermost frame the error passed through
            frame, tb = tb.tb_frame, tb.tb_next
        self._say(f"a collective failed ({first[:200]})\n  {self._whereabouts(frame)}"
                  + (f"\n  this rank's report so far: {saved}" if saved else ""))

    def _save(self) -> str:
        """This rank's report so far, saved for merge; "" when there is no folder or it failed."""
        if self.folder is None:
            return ""
        try:
            events = self._collector.snapshot()
            rep = build_report(events, [], ignore_backend_mismatch=False, title=f"rank {self._rank} (watch_ranks)",
                               rank=self._rank, world_size=self._world, torch_version=str(torch.__version__))
            return str(save_rank(rep, self.folder))
        except Exception as err:  # noqa: BLE001 - saving is the watch's, never the job's failure
            self._say(f"could not save the report to {self.folder}: {type(err).__name__}: {err}")
            return ""


_STATE_EVERY_S = 0.25


def _end() -> None:
    """End this process now (a rank that waits in a collective cannot raise)."""
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(1)


def _collective_failed(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective's failure: its timeout, or a peer gone (gloo, NCCL)."""
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(
        w in text for w in ("timed out", "timeout", "connection closed", "connection reset", "gloo", "nccl"))


def _waits_elsewhere(peer: dict[str, Any], published: set[str]) -> bool:
    state = peer["state"]
    return state.get("s") == "waiting" and state.get("key") not in published


def _doing_words(peers: dict[int, dict[str, Any]]) -> str:
    """What each other rank does, in words ("rank 1 waits in barrier at train.py:90 in main; rank
    2 compiles (4 s)")."""
    now = time.time()
    parts = []
    for q, p in sorted(peers.items()):
        stuck, state = p.get("stuck"), p["state"]
        s = state.get("s")
        if stuck:
            seq = stuck.get("seq")
            words = f"waits in {stuck.get('op')}" + (f" (its collective #{seq})" if seq is not None else "") + (
                f" at {stuck.get('where')}")
        elif s == "compiling":
            words = f"compiles ({now - float(state.get('t', now)):.0f} s)"
        elif s == "waiting":
            words = f"waits for the others' account of {state.get('key', '?')}"
        elif s == "ended":
            words = "has left the watched block"
        elif s == "unseen":
            words = "has not compiled yet"
        else:
            words = "runs (not in a collective)"
        parts.append(f"rank {q} {words}")
    return "; ".join(parts)


def _frame_words(acc: Account) -> str:
    rep = acc.report
    frame = resume_label(rep.graphs[-1].frame) if rep.graphs else resume_label(acc.name)
    return f"{frame or acc.name} ({PurePath(acc.filename).name}:{acc.line})"


def _user_site(frame: types.FrameType | None) -> tuple[str, str, str]:
    """(file:line, function, code) of the innermost frame of the user's own files from
    ``frame`` outwards; ("?", "?", "") when none. A compiled function runs in its own frame
    at its first line: its caller's line is the one to read ("run, in compiled sync")."""
    inside = ""
    while frame is not None:
        filename = frame.f_code.co_filename
        # Read once: another thread's frame can say None between instructions (Python 3.11+),
        # which once turned a rank's watch off mid-job.
        line = frame.f_lineno
        if is_user_file(filename):
            fn = frame.f_code.co_name + (f", in compiled {inside}" if inside else "")
            if line is None:
                return f"{PurePath(filename).name}:?", fn, ""
            if line <= frame.f_code.co_firstlineno and frame.f_back is not None and not inside:
                inside = frame.f_code.co_name
            else:
                return f"{PurePath(filename).name}:{line}", fn, linecache.getline(filename, line).strip()
        frame = frame.f_back
    return "?", "?", ""


def _warn(text: str, at: tuple[str, int] | None) -> None:
    """Warn (RankDivergenceWarning) at the user's line ``at`` (file, line) when known: from the
    watcher thread a warning would otherwise point into dynscope."""
    if at is None:
        warnings.warn(text, RankDivergenceWarning, stacklevel=3)
        return
    warnings.warn_explicit(text, RankDivergenceWarning, at[0], at[1], module="dynscope.watch_ranks")


def _user_position(frame: types.FrameType | None) -> tuple[str, int] | None:
    """(file, line) of the innermost frame of the user's own files from ``frame`` outwards."""
    while frame is not None:
        line = frame.f_lineno  # None between instructions: not known here
        if is_user_file(frame.f_code.co_filename) and line is not None and line > frame.f_code.co_firstlineno:
            return frame.f_code.co_filename, line
        frame = frame.f_back
    return None


def _step(frame: types.FrameType | None) -> str:
    """The training loop's step, from the first of :data:`STEP_NAMES` a frame of the user's
    own files holds as an int ("i=3 in run"); "" when none. Read only while the frame's thread
    waits (in a collective, or in dynscope)."""
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            names = frame.f_code.co_varnames
            for name in STEP_NAMES:
                if name in names:
                    value = frame.f_locals.get(name)
                    if isinstance(value, int) and not isinstance(value, bool):
                        return f"{name}={value} in {frame.f_code.co_name}"
        frame = frame.f_back
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
    start = next(records.of_kind(events, records.DYNAMO_START), None)
    stack = start.record if start is not None else None
    if not isinstance(stack, list) or not stack or not isinstance(stack[-1], dict):
        return "?", "?", 0
    top = stack[-1]
    return str(top.get("name", "?")), str(top.get("filename", "?")), int(top.get("line") or 0)


def _calling_line(frame: types.FrameType | None) -> str:
    """The user's line that called the function being compiled ("train.py:41: loss =
    forward(x)"): the innermost frame of the user's own files from ``frame`` outwards (the
    compiled frame itself has not started; torch, dynscope and the standard library are
    skipped)."""
    where, _, code = _user_site(frame)
    return "" if where == "?" else where + (f": {code}" if code else "")


@contextlib.contextmanager
def watch_ranks(*, on_divergence: str = "raise", wait_s: float = DEFAULT_WAIT_S,
                folder: str | Path | None = DEFAULT_FOLDER) -> Iterator[RankWatch]:
    """Compare every Dynamo compile in the block across the ranks of the job, live, and stop
    the job only where it would hang.

    At the end of each compile each rank publishes what it compiled through the job's c10d
    store. A compile that brings collectives (an all_reduce in its graphs, on some ranks only
    or in another order) is compared before the compiled code runs: when the ranks' accounts
    differ or do not come, every rank stops with the same words instead of hanging in the next
    collective. Any other compile (a recompile for another batch size, a rank-local helper,
    FSDP's and DDP's blocks, whose collectives run in hooks) is compared in the background: a
    difference is said and the job goes on. When every rank waits in a collective and they are
    not the same one, the job is hung: each rank says the cause, its last compile, line and
    step, saves its report and stops. Outside a process group (one process) it does nothing.

    Args:
        on_divergence: "raise" (default) raises :class:`~dynscope.RankDivergenceError` out of
            the compile on each rank that takes part (a rank waiting in a collective says it on
            stderr and ends); "warn" never waits and never stops: it warns
            (:class:`~dynscope.RankDivergenceWarning`) and lets the job go on.
        wait_s: how long a rank waits for the others at a compile that brings collectives
            (longer while a missing rank is still compiling). Every wait stays under a quarter
            of the process group's collective timeout (half while a rank compiles), whatever
            ``wait_s`` says. Defaults to 60.
        folder: where each rank saves its report so far on a divergence, and before a
            collective timeout (``rank-<r>.json``, for ``dynscope merge``); None saves nothing.
            Defaults to "dynscope-ranks".

    Yields:
        The :class:`RankWatch`; ``.verdicts`` lists what stopped the job, ``.notes`` what was
        said while it went on, ``.stats()`` what the watch did (checks, waits, seconds).

    Raises:
        InputError: an unknown ``on_divergence`` or a ``wait_s`` that is not above 0.
    """
    watch = RankWatch(on_divergence=on_divergence, wait_s=wait_s, folder=folder)
    with watch:
        yield watch


def process_watch() -> RankWatch | None:
    """The process-long watch ``DYNSCOPE_WATCH_RANKS=1`` started, if any."""
    return _process_watch


def watch_from_env(environ: dict[str, str] | None = None) -> RankWatch | None:
    """Start the process-long watch ``DYNSCOPE_WATCH_RANKS=1`` asks for (at ``import
    dynscope`` and in ``python -m dynscope.watch``); None when the variable is not 1.

    Never raises: a bad option is warned about and its default used; a failure to start
    (no torch.distributed, a dynscope bug) is warned about and nothing is watched.
    """
    global _process_watch
    env = os.environ if environ is None else environ
    if env.get(ENV) != "1":
        return None
    if _process_watch is not None:  # import dynscope and python -m dynscope.watch: one watch
        return _process_watch
    wait_s = DEFAULT_WAIT_S
    raw = env.get(ENV_WAIT_S)
    if raw is not None:
        try:
            wait_s = float(raw)
            if not wait_s > 0 or wait_s != wait_s or wait_s == float("inf"):
                raise ValueError(raw)
        except ValueError:
            warnings.warn(f"{ENV_WAIT_S} must be a number of seconds above 0, got {raw!r}: "
                          f"using {DEFAULT_WAIT_S:g}", RankDivergenceWarning, stacklevel=2)
            wait_s = DEFAULT_WAIT_S
    on = env.get(ENV_ON, "raise")
    if on not in ("raise", "warn"):
        warnings.warn(f"{ENV_ON} must be 'raise' or 'warn', got {on!r}: using 'raise'", RankDivergenceWarning,
                      stacklevel=2)
        on = "raise"
    folder = env.get(ENV_FOLDER, DEFAULT_FOLDER)
    try:
        watch = RankWatch(on_divergence=on, wait_s=wait_s, folder=folder or None)
        watch.__enter__()
    except Exception as err:  # noqa: BLE001 - never into the user's program
        warnings.warn(f"{ENV}=1: dynscope could not start watching this process ({type(err).__name__}: {err}); "
                      "the program runs unwatched", RankDivergenceWarning, stacklevel=2)
        return None
    atexit.register(watch.__exit__, None, None, None)
    _process_watch = watch
    return watch
