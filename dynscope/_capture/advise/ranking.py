"""Judging trials and ordering them: what a run counted, whether a remedy helped, best first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._capture.advise.plans import REMEDIES
from dynscope._model import Outcome, Report, Site, Trial

if TYPE_CHECKING:
    from dynscope._capture.advise.plans import Plan

#: Outputs of a trial must match eager's within these (the eager inner backend runs the
#: same ATen ops, so differences are reordering noise at most).
RTOL, ATOL = 1e-4, 1e-5
#: Looser for remedies that change numerics on purpose (TF32 matmuls, Inductor autotuning).
LOOSE_RTOL, LOOSE_ATOL = 1e-2, 1e-2
#: A timing remedy helps when the end-to-end speedup grows by more than this share.
SPEEDUP_MARGIN = 0.05
#: A memory remedy must cut the compiled peak by more than this share to count as helping.
MEMORY_MARGIN = 0.05

_ORDER = {r.name: i for i, r in enumerate(REMEDIES)}


def outcome(rep: Report) -> Outcome:
    """What a report counted, as one side of a Trial."""
    speedup = step_ms = None
    if rep.timing:
        first = rep.timing[0]
        speedup = first.speedup if not first.error else None
        step_ms = first.compiled_ms if not first.error else None
    peak = rep.memory.compiled_peak if rep.memory is not None and not rep.memory.error else None
    return Outcome(
        peak=peak,
        step_ms=step_ms,
        graphs=rep.graph_count,
        breaks=rep.break_count,
        break_sites=len(rep.breaks),
        recompiles=rep.recompile_count,
        coverage=rep.coverage.ratio if rep.coverage is not None else None,
        speedup=speedup,
        compile_s=rep.compile_time.total_s,
        sites=tuple(Site.at(b.filename, b.lineno) for b in rep.breaks),
    )


def helped(plan: Plan, before: Outcome, after: Outcome, *, timing: bool = False) -> bool:
    """True when the run with the plan applied is better than the one before, and no worse
    elsewhere: fewer breaks or recompiles, measured faster (the CUDA timing remedies, or any
    remedy when ``timing``: the user asked for speed), or (memory remedies) a smaller peak.

    More coverage alone is not help: a remedy that moves a break (capture_scalar_outputs
    traces ``.item()``, then the ``if`` on its value breaks) puts the ops between the two
    lines into a graph, yet the program breaks as often as before (:func:`moved`)."""
    no_worse = after.breaks <= before.breaks and after.recompiles <= before.recompiles
    fewer_breaks = after.breaks < before.breaks and after.recompiles <= before.recompiles
    fewer_recompiles = after.recompiles < before.recompiles and after.breaks <= before.breaks
    faster = (
        (plan.cuda or (timing and no_worse)) and after.speedup is not None and before.speedup is not None
        and after.speedup > before.speedup * (1 + SPEEDUP_MARGIN)
    )
    # A memory remedy helps when the compiled peak falls, the counts no worse.
    smaller = (
        plan.memory and after.peak is not None and before.peak is not None
        and after.peak < before.peak * (1 - MEMORY_MARGIN) and no_worse
    )
    return fewer_breaks or fewer_recompiles or faster or smaller


def moved(before: Outcome, after: Outcome) -> tuple[tuple[Site, Site], ...]:
    """(site before, site after) for each break the run with the remedy has at another line
    than the run before: the sites it no longer breaks at, paired in order (file, then line:
    a Site's order) with those it newly breaks at; () when none moved (or the outcomes carry
    no sites)."""
    gone = sorted(set(before.sites) - set(after.sites))
    new = sorted(set(after.sites) - set(before.sites))
    return tuple(zip(gone, new, strict=False))


def rank_key(t: Trial) -> tuple[int, float, int]:
    """Sort key, best first: what helped (by how much), then what ran and did not, failures,
    not run; ties in catalog order (the narrower remedy first: mark_dynamic before dynamic=True)."""
    order = _ORDER.get(t.remedy, len(_ORDER))
    if t.helped:
        d = t.delta
        gain = (-d.get("breaks", 0.0) - d.get("recompiles", 0.0) + 10 * d.get("coverage", 0.0) + d.get("speedup", 0.0)
                - d.get("peak", 0.0))
        return (0, -gain, order)
    if t.tried and not t.error:
        return (1, 0.0, order)
    if t.tried:
        return (2, 0.0, order)
    return (3, 0.0, order)


def ranked(trials: list[Trial]) -> tuple[Trial, ...]:
    """The trials, best first."""
    return tuple(sorted(trials, key=rank_key))
