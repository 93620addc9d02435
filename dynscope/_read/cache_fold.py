"""A run's compile-cache lookups folded from its trace events: the cache records
(``records.CACHE_RESULTS``, read by ``_torch.cache_keys`` into ``CacheLookup``) with the
compile's metrics, which give a miss its cost (the seconds its compile took after the lookup)
and its function's name. Used by the report builder (``Report.cache_lookups``) and by
``cache_diff`` on a log (torch-free).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from dynscope._model.cache import AOT_AUTOGRAD, FX_GRAPH, MISS, CacheLookup
from dynscope._torch import records

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from dynscope._torch.metrics import CompileMetrics
    from dynscope._torch.trace import TraceEvent

__all__ = ["lookups_of"]


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
        out.append(replace(lk, frame=m.co_name, seconds=seconds, release=m.pytorch_version))
    return out


def lookups_of(events: Iterable[TraceEvent]) -> list[CacheLookup]:
    """Every compile-cache lookup among ``events``, in order, each numbered within its compile
    and cache (``ordinal``), named by its function and costed (a miss) from the compile's metrics."""
    fold = _Fold()
    for ev in events:
        handler = _HANDLERS.get(ev.name)
        if handler is not None:
            handler(fold, ev)
    return _with_costs(fold)
