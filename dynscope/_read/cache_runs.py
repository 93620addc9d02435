"""``dynscope.cache_diff``: two runs' compile-cache lookups, read from their TORCH_TRACE logs
and compared (torch-free).

Each log's cache records (``records.CACHE_RESULTS``, read by ``_torch.cache_keys`` into
``CacheLookup``) are folded through a handler table with the compile's metrics, which give
a miss its cost (the seconds its compile took after the lookup) and its function's name.
A folder of several rank logs is read rank by rank: rank r of A is compared with rank r of B.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import CacheMissError, InputError
from dynscope._model.cache import AOT_AUTOGRAD, FX_GRAPH, MISS, CacheDiff, CacheLookup, compare_lookups
from dynscope._read.trace_file import trace_files
from dynscope._torch import records
from dynscope._torch.trace_log import rank_of, read_log

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._torch.metrics import CompileMetrics
    from dynscope._torch.trace import TraceEvent

__all__ = ["assert_warm", "cache_diff", "cache_lookups"]


@dataclass
class _Fold:
    """One log's cache lookups and compile metrics, as they are read."""

    lookups: list[CacheLookup] = field(default_factory=list)
    seen: Counter[tuple[str, str]] = field(default_factory=Counter)  # (compile id, cache) -> lookups so far
    metrics: dict[str, CompileMetrics] = field(default_factory=dict)  # compile id -> its metrics


def _on_lookup(fold: _Fold, ev: TraceEvent) -> None:
    lookup: CacheLookup = ev.record
    slot = (lookup.compile_id, lookup.cache)
    fold.lookups.append(replace(lookup, ordinal=fold.seen[slot]))
    fold.seen[slot] += 1


def _on_metrics(fold: _Fold, ev: TraceEvent) -> None:
    if ev.record is not None:
        fold.metrics[ev.compile_id] = ev.record


#: Record kind (dynscope._torch.records) -> how it folds into one log's lookups.
_HANDLERS: dict[str, Callable[[_Fold, TraceEvent], None]] = {
    **{kind: _on_lookup for kind in records.CACHE_RESULTS},
    records.COMPILATION_METRICS: _on_metrics,
}


def _with_costs(fold: _Fold) -> list[CacheLookup]:
    """Each lookup given its function's name and, for a miss, what the compile after it cost:
    Inductor's seconds for the FX graph cache (when the compile made one FX lookup; a
    training graph's forward and backward share the figure), the backend's for AOTAutograd."""
    out = []
    for lk in fold.lookups:
        m = fold.metrics.get(lk.compile_id)
        if m is None:
            out.append(lk)
            continue
        seconds = lk.seconds
        if lk.result == MISS:
            if lk.cache == FX_GRAPH and fold.seen[(lk.compile_id, FX_GRAPH)] == 1:
                seconds = m.inductor_s or None
            elif lk.cache == AOT_AUTOGRAD:
                seconds = m.backend_s or None
        out.append(replace(lk, frame=m.co_name, seconds=seconds))
    return out


def _log_lookups(path: Path, prefix: str = "") -> list[CacheLookup]:
    fold = _Fold()
    for ev in read_log(path, lowering=True).events:
        handler = _HANDLERS.get(ev.name)
        if handler is not None:
            handler(fold, ev)
    found = _with_costs(fold)
    return [replace(lk, compile_id=prefix + lk.compile_id) for lk in found] if prefix else found


def cache_lookups(source: str | Path) -> tuple[CacheLookup, ...]:
    """Every compile-cache lookup a TORCH_TRACE log (or a folder of them) records, in order.

    Args:
        source: a log file PyTorch wrote with ``TORCH_TRACE`` (``.gz`` too), or its folder.
            A folder of several ranks' logs gives each rank's compile ids a "rank r " prefix.

    Raises:
        InputError: the path does not exist, or the folder holds no trace log.
    """
    path = Path(source)
    if path.is_dir():
        files = trace_files(path)
        if not files:
            raise InputError(f"{path} holds no TORCH_TRACE log (dedicated_log_torch_trace*.log); "
                             "pass the folder TORCH_TRACE named, or one of its log files")
        if len(files) == 1:
            return tuple(_log_lookups(files[0]))
        out: list[CacheLookup] = []
        for i, f in enumerate(files):
            rank = rank_of(f)
            out += _log_lookups(f, prefix=f"rank {rank if rank is not None else i} ")
        return tuple(out)
    if not path.is_file():
        raise InputError(f"no such log or folder: {path}; cache_diff reads TORCH_TRACE logs or their folders")
    return tuple(_log_lookups(path))


def cache_diff(a: str | Path, b: str | Path) -> CacheDiff:
    """Why run B compiled what run A hit or cached: each of B's lookups that did not hit,
    with the part of the cache key that changed, in words, and what to do.

    Args:
        a: the reference run's TORCH_TRACE log or folder (a warm run, or the run that filled
            the cache B read).
        b: the run to explain, the same way.

    Returns:
        A ``CacheDiff``: ``misses`` (each a ``CacheMiss`` with its ``changes``), ``summary()``.

    Example:
        >>> d = dynscope.cache_diff("traces/monday", "traces/tuesday")
        >>> print(d)   # e.g. "Inductor config `max_autotune` changed: False -> True"
    """
    return compare_lookups(cache_lookups(a), cache_lookups(b), label_a=str(a), label_b=str(b))


def assert_warm(run: str | Path, *, reference: str | Path | None = None) -> CacheDiff:
    """Fail unless every compile-cache lookup of ``run`` hit: a CI gate for warm-start jobs.

    Args:
        run: the run's TORCH_TRACE log or folder.
        reference: a run that filled or hit the same cache (its log or folder): each miss is
            then explained by the key part that changed. Defaults to None (misses listed only).

    Returns:
        The ``CacheDiff`` checked (``lookups_b``: the run's lookups, all hits).

    Raises:
        CacheMissError: a lookup missed or was bypassed, or the run logged no lookup at all (no
            Inductor compile, the caches off, or a log without AOTAutograd's and Inductor's records).
        InputError: a path that holds no log.

    Example:
        >>> dynscope.assert_warm("traces/restart", reference="traces/first")
    """
    lookups = cache_lookups(run)
    diff = compare_lookups(cache_lookups(reference) if reference is not None else (), lookups,
                           label_a=str(reference) if reference is not None else "(no reference run)", label_b=str(run))
    if not lookups:
        raise CacheMissError(f"{run} logged no compile-cache lookup: nothing shows it started warm "
                             "(no Inductor compile, caches disabled, or not a TORCH_TRACE log of the run)", diff=diff)
    if diff.misses:
        lines = [line for miss in diff.misses for line in miss.lines()] if reference is not None else \
            [miss.head() for miss in diff.misses]
        raise CacheMissError(f"{run} did not start warm: {len(diff.misses)} of {len(lookups)} cache lookup(s) "
                             "did not hit\n" + "\n".join(lines), diff=diff)
    return diff
