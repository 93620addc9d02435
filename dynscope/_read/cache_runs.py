"""``dynscope.cache_diff`` and ``dynscope.assert_warm``: runs' compile-cache lookups, from
their TORCH_TRACE logs or their reports, compared (torch-free).

A log's lookups are folded from its events by ``cache_fold`` (as a report's were when it was
built). A folder of several rank logs, or a many-rank report, is read rank by rank: rank r of
A is compared with rank r of B.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dynscope._errors import CacheMissError, InputError
from dynscope._model.cache import AOT_AUTOGRAD, FX_GRAPH, HIT, MISS, CacheDiff, CacheLookup, compare_lookups
from dynscope._model.ranks import MultiRankReport
from dynscope._model.report import Report
from dynscope._read.cache_fold import lookups_of
from dynscope._read.trace_file import trace_files
from dynscope._torch.cache_bundle import BundleFormatError, read_bundle
from dynscope._torch.trace_log import rank_of, read_log

#: What a run is given as: its TORCH_TRACE log or folder, or its report (live, loaded or read).
Run = str | Path | Report | MultiRankReport

__all__ = ["assert_warm", "cache_diff", "cache_lookups"]


def _log_lookups(path: Path, prefix: str = "") -> list[CacheLookup]:
    found = lookups_of(read_log(path, lowering=True).events)
    return [replace(lk, compile_id=prefix + lk.compile_id) for lk in found] if prefix else found


def cache_lookups(source: Run) -> tuple[CacheLookup, ...]:
    """Every compile-cache lookup a run made, in order.

    Args:
        source: a log file PyTorch wrote with ``TORCH_TRACE`` (``.gz`` too), or its folder; or
            the run's ``Report`` (``Report.cache_lookups``: ``dynscope.capture()``, ``load_trace``,
            ``load``). A folder of several ranks' logs, or a ``MultiRankReport``, gives each
            rank's compile ids a "rank r " prefix.

    Raises:
        InputError: the path does not exist, or the folder holds no trace log.
    """
    if isinstance(source, Report):
        return source.cache_lookups
    if isinstance(source, MultiRankReport):
        return tuple(replace(lk, compile_id=f"rank {r.rank} {lk.compile_id}")
                     for r in source.reports for lk in r.cache_lookups)
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


def cache_diff(a: Run, b: Run, *, bundle: str | Path | bytes | None = None) -> CacheDiff:
    """Why run B compiled what run A hit or cached: each of B's lookups that did not hit,
    with the part of the cache key that changed, in words, and what to do.

    With ``bundle``, what a saved cache-artifact bundle (``torch.compiler.save_cache_artifacts()``,
    the "mega-cache") would do for B: A is the run that saved it, B a run on the machine it is
    meant for (any run there: its lookups' keys are what that machine makes); each of B's
    lookups hits when the bundle holds its key, else misses and is explained against A's. The
    bundle is read, never loaded into a cache.

    Args:
        a: the reference run's TORCH_TRACE log or folder, or its report (a warm run, or the run
            that filled the cache B read, or the run that saved ``bundle``).
        b: the run to explain, the same way.
        bundle: the bundle's bytes or the file they were written to. Defaults to None.

    Returns:
        A ``CacheDiff``: ``misses`` (each a ``CacheMiss`` with its ``changes``), ``summary()``.

    Raises:
        InputError: a path that holds no log, a bundle file that does not exist or is not a
            bundle PyTorch wrote (damaged, another format).

    Example:
        >>> d = dynscope.cache_diff("traces/monday", "traces/tuesday")
        >>> print(d)   # e.g. "Inductor config `max_autotune` changed: False -> True"
        >>> dynscope.cache_diff("traces/build", "traces/cluster", bundle="cache.bin").misses
    """
    lookups_b = cache_lookups(b)
    label_b = _label(b, "B")
    if bundle is not None:
        held = _bundle_keys(bundle)
        lookups_b = tuple(replace(lk, result=HIT if lk.key and (lk.cache, lk.key) in held else MISS)
                          for lk in lookups_b)
        label_b = f"{label_b}, predicted with the bundle ({len(held)} artifacts)"
    return compare_lookups(cache_lookups(a), lookups_b, label_a=_label(a, "A"), label_b=label_b)


#: The bundle's artifact types, as the caches they fill.
_BUNDLE_CACHES = {"inductor": FX_GRAPH, "aot_autograd": AOT_AUTOGRAD}


def _bundle_keys(bundle: str | Path | bytes) -> set[tuple[str, str]]:
    """(cache, key) of every artifact of the bundle that fills a cache a lookup reads."""
    try:
        if isinstance(bundle, bytes):
            _, entries = read_bundle(bundle)
        else:
            path = Path(bundle)
            if not path.is_file():
                raise InputError(f"no such bundle file: {path} (the bytes torch.compiler.save_cache_artifacts() "
                                 "returned)")
            with path.open("rb") as f:  # read in place: the artifacts' contents are skipped, not loaded
                _, entries = read_bundle(f)
    except BundleFormatError as err:
        name = "the bundle" if isinstance(bundle, bytes) else str(bundle)
        raise InputError(f"{name} is not a cache-artifact bundle: {err}") from None
    return {(_BUNDLE_CACHES[e.kind], e.key) for e in entries if e.kind in _BUNDLE_CACHES}


def _label(run: Run, which: str) -> str:
    """How a run is named in the summary: its path, or "report A"."""
    return f"report {which}" if isinstance(run, (Report, MultiRankReport)) else str(run)


def assert_warm(run: Run, *, reference: Run | None = None) -> CacheDiff:
    """Fail unless every compile-cache lookup of ``run`` hit: a CI gate for warm-start jobs.

    Args:
        run: the run's TORCH_TRACE log or folder, or its report (``dynscope.capture()``'s).
        reference: a run that filled or hit the same cache (its log, folder or report): each
            miss is then explained by the key part that changed. Defaults to None (misses listed only).

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
                           label_a=_label(reference, "A") if reference is not None else "(no reference run)",
                           label_b=_label(run, "B"))
    if not lookups:
        raise CacheMissError(f"{_label(run, 'B')} logged no compile-cache lookup: nothing shows it started warm "
                             "(no Inductor compile, caches disabled, or not a TORCH_TRACE log of the run)", diff=diff)
    if diff.misses:
        lines = [line for miss in diff.misses for line in miss.lines()] if reference is not None else \
            [miss.head() for miss in diff.misses]
        raise CacheMissError(f"{_label(run, 'B')} did not start warm: {len(diff.misses)} of {len(lookups)} cache lookup(s) "
                             "did not hit\n" + "\n".join(lines), diff=diff)
    return diff
