"""``advise(..., patches=True)``: dynscope.fix's source patches as trials beside the config
remedies, ranked with them by what they bought (a verified patch is a remedy that helped)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynscope._model.advice import Outcome, Target, Trial

if TYPE_CHECKING:
    from dynscope._capture.advise.plans import Call
    from dynscope._model.fix import Patch

__all__ = ["patch_trials"]


def as_trial(p: Patch) -> Trial:
    """One patch as a trial: before and after as fix measured them."""
    before = Outcome(graphs=p.graphs_before, breaks=p.program_breaks_before, coverage=p.coverage_before)
    # The "after" fields are None when the patched program never ran.
    after = (Outcome(graphs=p.graphs_after, breaks=p.program_breaks_after, coverage=p.coverage_after)
             if p.graphs_after is not None and p.program_breaks_after is not None else None)
    ran = after is not None
    return Trial(
        remedy=f"source patch ({p.rewrite})", code="; ".join(p.added), target=(Target(site=p.site),), before=before,
        after=after, helped=p.verified, tried=True, outputs_match=bool(p.outputs_matched) if ran else True,
        error="" if p.verified else p.why_not,
        note="verified on a patched copy of your file: `dynscope fix ... --write` applies it" if p.verified else "",
    )


def patch_trials(model: Any, calls: list[Call]) -> list[Trial]:
    """Every patch dynscope.fix proposes for the program, as trials."""
    from dynscope._capture.fix import fix_calls

    return [as_trial(p) for p in fix_calls(model, calls).patches]
