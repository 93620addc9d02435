"""Remedies tried on the program: what each one changed, and the advice they add up to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynscope._format import plural
from dynscope._model.base import _brief

# TC001: at run time though only annotations name it (the codec resolves Outcome's hints here).
from dynscope._model.breaks import Site  # noqa: TC001
from dynscope._model.causes import Cause  # noqa: TC001
from dynscope._model.display import AdviceShortcuts

if TYPE_CHECKING:
    # Not at run time: the report holds trials (report -> advice); Advice is never decoded
    # from JSON, so its ``report`` hint need not resolve here.
    from dynscope._model.report import Report

__all__ = ["Advice", "Outcome", "Target", "Trial"]


@dataclass(frozen=True)
class Outcome:
    """What a capture counted: the "before" or "after" side of a :class:`Trial`."""

    graphs: int = 0
    breaks: int = 0  # break events
    break_sites: int = 0
    recompiles: int = 0
    coverage: float | None = None  # share of torch ops run inside graphs; None when not measured
    speedup: float | None = None  # end to end, eager / compiled (default mode), when timed
    compile_s: float = 0.0
    peak: int | None = None  # the compiled call's peak memory in bytes (Report.memory), when measured
    step_ms: float | None = None  # the compiled call's median time (end to end), when timed
    # The break sites (saved "file.py:LINE", as GraphBreak.location), so a trial can tell a
    # break removed from one that only moved (the same count at other lines); () in older reports.
    sites: tuple[Site, ...] = ()


@dataclass(frozen=True)
class Target:
    """What a remedy addresses, as fields (``dynscope._render`` words it): a break site, or a
    recompiled function and what changed on it; all empty for the whole program."""

    site: str = ""  # a break site, "file.py:LINE" (as GraphBreak.location)
    category: str = ""  # the break's category, where the target names it (a rewrite of yours)
    frame: str = ""  # a recompiled function ("MLP.forward")
    changes: tuple[Cause, ...] = ()  # what changed on it, one per fix (worded as recompiles are grouped)
    failed: tuple[Cause, ...] = ()  # the failed guards' causes, where no change is named (worded plainly)
    raw: tuple[str, ...] = ()  # PyTorch's own reasons, where no cause is known
    size: str = ""  # a size the user's line at ``site`` fixes or branches on ("x.size(0)")
    branched: bool = False  # the line at ``site`` branches on ``size`` (it does not fix it)
    block: str = ""  # a repeated block a memory remedy checkpoints ("layers.0")
    said: str = ""  # the words a report saved before targets were fields (schema 8 and older)

    @classmethod
    def _from_words(cls, words: str) -> Target:
        """A target an older report saved as words: a site ("file.py:LINE", or with its
        category after ": ") keeps its fields; anything else its words."""
        head, _, rest = words.partition(": ")
        site = head if head.rpartition(":")[2].isdigit() and ":" in head else ""
        if site and (not rest or ": " not in rest):
            return cls(site=site, category=rest)
        return cls(said=words)

    def __repr__(self) -> str:
        return _brief("Target", self.site or self.frame or self.block or self.said or "the program")


@dataclass(frozen=True)
class Trial:
    """One remedy dynscope tried on the program, in isolation, and what it changed."""

    remedy: str  # short name: "capture_scalar_outputs", "mark_dynamic", "dynamic=True", ...
    code: str  # the exact line(s) you would add
    target: tuple[Target, ...] = ()  # what it addresses: break sites, recompiled functions and what changed
    before: Outcome = Outcome()
    after: Outcome | None = None  # None when the remedy was not run (tried False) or failed to run
    # Fewer breaks or recompiles, or measured faster (timing) or a smaller peak (memory
    # remedies), with outputs unchanged. A break that only moved (``moved``) is not help.
    helped: bool = False
    tried: bool = True  # False: a change to the user's code, shown, not run here (dynscope.fix verifies patches)
    outputs_match: bool = True  # the program's outputs with the remedy equal eager's
    error: str = ""  # why the remedy failed or was rejected ("changed outputs: ...")
    note: str = ""  # what else to know
    # Breaks the remedy moved, not removed: (site before, site after) pairs (a site the run
    # with the remedy no longer breaks at, and one it newly breaks at).
    moved: tuple[tuple[Site, Site], ...] = ()

    @property
    def delta(self) -> dict[str, float]:
        """after - before for the counts (empty when not run)."""
        if self.after is None:
            return {}
        out = {
            "graphs": float(self.after.graphs - self.before.graphs),
            "breaks": float(self.after.breaks - self.before.breaks),
            "recompiles": float(self.after.recompiles - self.before.recompiles),
        }
        if self.after.coverage is not None and self.before.coverage is not None:
            out["coverage"] = self.after.coverage - self.before.coverage
        if self.after.speedup is not None and self.before.speedup is not None:
            out["speedup"] = self.after.speedup - self.before.speedup
        if self.after.peak is not None and self.before.peak:
            out["peak"] = (self.after.peak - self.before.peak) / self.before.peak  # share of the peak saved (< 0)
        return out



@dataclass(frozen=True)
class Advice(AdviceShortcuts):
    """What :func:`dynscope.advise` found: each remedy tried on the program and what it bought."""

    report: Report  # the "before" report, its ``trials`` filled, best first
    trials: tuple[Trial, ...] = ()  # the same trials, best first
    # Why no remedy was tried ("" when some were); the report's notes carry it too, so a
    # saved report and its page say it.
    note: str = ""

    @property
    def best(self) -> Trial | None:
        """The trial that helped most, or None when none helped."""
        return next((t for t in self.trials if t.helped), None)

    def __repr__(self) -> str:
        helped = sum(1 for t in self.trials if t.helped)
        best = f", best {self.best.remedy}" if self.best is not None else ""
        return _brief("Advice", f"{plural(len(self.trials), 'trial')}, {helped} helped{best}")
