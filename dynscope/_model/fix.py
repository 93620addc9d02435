"""What ``dynscope.fix`` found: source patches that remove graph breaks, each with its
evidence, and the break sites it left alone and why. Plain data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynscope._model.base import _brief
from dynscope._model.display import FixShortcuts

__all__ = ["FixResult", "Patch", "Unpatched"]


@dataclass(frozen=True)
class Patch:
    """One source change at one break site, verified or only proposed."""

    site: str  # "file.py:LINE", the break's line in the user's file
    filename: str  # the file it changes (absolute path)
    lineno: int
    category: str  # the break's category ("logging/print side effect")
    rewrite: str  # which rewrite ("guard side effect", "branch to torch.where", ...)
    diff: str  # the unified diff of the file
    verified: bool  # rerun on a copy: the break gone, no new one, outputs (and gradients) equal to eager's
    why_not: str = ""  # why it is not verified ("" when it is)
    assumes: str = ""  # what the rewrite relies on ("both branches give tensors of one shape")
    # Another remedy for the same break and whether the installed PyTorch supports it, tried
    # live (a logger call: reorderable_logging_functions instead of the guard); "" when none.
    instead: str = ""
    breaks_before: int = 0  # break events at the site before
    # Every "after" field is None when the patched program never ran (it did not import, its
    # function could not be found, it raised): nothing was measured, which is not 0.
    breaks_after: int | None = None  # at the rewritten lines after
    program_breaks_before: int = 0  # the whole program's break events
    program_breaks_after: int | None = None
    graphs_before: int = 0
    graphs_after: int | None = None
    coverage_before: float | None = None  # share of torch ops run inside graphs
    coverage_after: float | None = None
    outputs_matched: bool | None = None  # the patched compiled program against the unpatched eager one; None: not run
    gradients_matched: bool | None = None  # None: nothing required grad, or not run
    max_abs_error: float | None = None
    added: tuple[str, ...] = ()  # the lines the patch puts in, each stripped (what a table shows of it)

    @property
    def ran(self) -> bool:
        """Whether the patched program ran (and the "after" fields were measured)."""
        return self.program_breaks_after is not None

    def __repr__(self) -> str:
        state = "verified" if self.verified else f"proposed ({self.why_not})"
        return _brief("Patch", f"{self.site} {self.rewrite}: {state}")


@dataclass(frozen=True)
class Unpatched:
    """A break site with no patch, and why (a library's code, a break on purpose, no rewrite)."""

    site: str
    category: str
    owner: str  # "your code", or the package whose code it is ("transformers", "torch")
    why: str  # why no patch, and what to do instead
    count: int = 1  # break events there
    # The verified patches' sites that, applied together, removed this break too (it only
    # followed from theirs: a comprehension compiled alone over a loop that broke); () when none.
    gone_with: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return _brief("Unpatched", f"{self.site} ({self.owner}): {self.why}")


@dataclass(frozen=True)
class FixResult(FixShortcuts):
    """Every break site of a program: the patches tried, verified or not, and the rest."""

    title: str = ""
    patches: tuple[Patch, ...] = ()
    unpatched: tuple[Unpatched, ...] = ()
    breaks_before: int = 0  # the program's break events before any patch
    breaks_after: int | None = None  # with every verified patch applied together; None: none verified
    outputs_matched_after: bool | None = None  # the same, for outputs
    written: tuple[str, ...] = ()  # files written (--write), each with a backup beside it
    backups: tuple[str, ...] = ()
    note: str = ""  # why write=True wrote nothing ("" otherwise)
    # Why the program stops under torch.compile (it runs in eager): where, the error, and that
    # the sites after it are not known; "" when the program ran under compile.
    blocked: str = ""

    @property
    def verified(self) -> tuple[Patch, ...]:
        """The verified patches."""
        return tuple(p for p in self.patches if p.verified)

    def to_dict(self) -> dict[str, Any]:
        """Plain data (JSON-able)."""
        from dynscope._model.plain import to_plain

        return {"kind": "dynscope-fix", **to_plain(self)}

    def __repr__(self) -> str:
        return _brief("FixResult", f"{len(self.verified)} of {len(self.patches)} patches verified, "
                                   f"{len(self.unpatched)} sites unpatched")
