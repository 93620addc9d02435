"""Will it export? What ``torch.export`` made of a program: whether it exported, what blocked
it and where, what ``draft_export`` found, the exported graph and its shape ranges, the
``dynamic_shapes`` PyTorch suggests, and how ``torch.compile``'s graph breaks compare.

Plain data (no torch): built by ``dynscope._capture.export``, saved by the codec like a Report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dynscope._model.plain as _plain
from dynscope._format import location, plural
from dynscope._model.base import _brief, _Live, _live_field
from dynscope._model.display import ExportShortcuts

# TC001: at run time though only annotations name it (the codec resolves the hints here).
from dynscope._model.graph import Graph  # noqa: TC001

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["BLOCKER_KINDS", "CompileBreakMatch", "ExportBlocker", "ExportReport", "SuggestedShapes"]

#: What can stop ``torch.export``, in the words a blocker's ``kind`` uses.
BLOCKER_KINDS = (
    "data-dependent",  # a branch, guard or size that depends on a tensor's values
    "unsupported operator",  # an operation export cannot trace (reads a tensor's data...)
    "missing fake kernel",  # a custom operator without a fake (meta) implementation
    "constraint violation",  # code that fixes or bounds a dim marked dynamic
    "graph break",  # a construct torch.compile would break the graph at (strict export)
    "other",
)


@dataclass(frozen=True)
class ExportBlocker:
    """One thing that stopped ``torch.export`` (or that ``draft_export`` had to assume)."""

    kind: str  # one of BLOCKER_KINDS
    pytorch: str  # PyTorch's words, whole (the exception text or draft_export's failure)
    summary: str  # the same, said plainly in one line
    fix: str  # what to change
    filename: str = ""  # the user's file: innermost frame outside torch, dynscope and the stdlib
    lineno: int = 0  # the user's line; 0 when PyTorch gave no user frame
    function: str = ""  # the user's function
    code: str = ""  # that line's source, stripped
    # "export": torch.export.export raised it; "draft_export": one of draft_export's findings
    # (export went on, assuming what it could not prove, or adding a guard)
    source: str = "export"
    # PyTorch's own name for it: the exception ("GuardOnDataDependentSymNode",
    # "UserError.CONSTRAINT_VIOLATION", "Unsupported") or the draft failure type
    # ("DATA_DEPENDENT_ERROR", "GUARD_ADDED", "MISSING_FAKE_KERNEL")
    error_type: str = ""
    detail: str = ""  # the expression, guard or operator concerned ("zuf0 > 0.0", "Eq(s77, 4)")

    @property
    def where(self) -> str:
        """``file.py:12``, or "" when PyTorch gave no user frame."""
        return location(self.filename, self.lineno) if self.filename else ""

    def __repr__(self) -> str:
        where = f" at {self.where}" if self.where else ""
        return _brief("ExportBlocker", f"{self.kind}{where} ({self.source}): {self.summary}")


@dataclass(frozen=True)
class SuggestedShapes:
    """The ``dynamic_shapes`` PyTorch suggested after a constraint violation, and whether
    dynscope exported again with them."""

    fixes: tuple[str, ...]  # PyTorch's "Suggested fixes" lines ("batch = 4", "dx = Dim('dx', max=6)")
    source: str  # the whole dynamic_shapes as Python the user can paste (Dim definitions first)
    # True: export worked with them; False: it failed again (see ``error``); None: not tried
    exported: bool | None = None
    error: str = ""  # first line of the error the re-export raised
    rounds: int = 1  # how many rounds of PyTorch's suggestions it took

    def __repr__(self) -> str:
        state = {True: "exports", False: "still fails", None: "not tried"}[self.exported]
        return _brief("SuggestedShapes", f"{'; '.join(self.fixes)} ({state})")


@dataclass(frozen=True)
class CompileBreakMatch:
    """One graph break of ``dynscope.report()`` on the same program, and whether export
    stops at the same line."""

    filename: str  # the break's site (GraphBreak.filename)
    lineno: int
    function: str
    code: str  # the site's source line
    reason: str  # the break's reason, one line
    category: str  # dynscope's break category
    blocker: bool  # True when an export blocker sits at the same file:line
    blocker_kind: str = ""  # that blocker's kind; "" when none

    def __repr__(self) -> str:
        verdict = f"blocks export ({self.blocker_kind})" if self.blocker else "does not block export"
        return _brief("CompileBreakMatch", f"{location(self.filename, self.lineno)} {self.category}: {verdict}")


@dataclass(frozen=True)
class ExportReport(ExportShortcuts):
    """What ``torch.export`` made of a program (``dynscope.export_report``)."""

    title: str  # the model's name
    exported: bool  # torch.export.export worked with the dynamic_shapes given
    strict: bool  # strict export (Dynamo traces the Python) or non-strict (Python runs)
    error: str = ""  # first line of the error export raised; "" when it exported
    blockers: tuple[ExportBlocker, ...] = ()  # what torch.export.export raised (source "export")
    # draft_export's findings (source "draft_export"): data-dependent assumptions, guards it
    # added, missing fake kernels; empty when export worked or draft_export was not run
    draft: tuple[ExportBlocker, ...] = ()
    draft_exported: bool | None = None  # draft_export produced a program; None: not run
    # The exported program's graph: of export when it worked, else of the suggested shapes'
    # re-export, else draft_export's (unsound: made on its assumptions); None when none worked
    graph: Graph | None = None
    graph_source: str = ""  # "export", "suggested", "draft_export" or ""
    # The graph's symbolic sizes in words: ("s0", "s0 (x.size(0)): 2 to 1024")
    range_constraints: tuple[tuple[str, str], ...] = ()
    dynamic_shapes: str = ""  # the dynamic_shapes tried, as Python source; "" when none
    suggested_shapes: SuggestedShapes | None = None  # after a constraint violation
    # How each graph break of dynscope.report() on the same program maps to export
    compile_breaks: tuple[CompileBreakMatch, ...] = ()
    compile_compared: bool = False  # whether report() ran for the comparison
    torch_version: str = ""
    notes: tuple[str, ...] = ()  # what could not be done, and why
    _program: _Live = _live_field()  # the live ExportedProgram the graph was read from (not saved)

    @property
    def program(self) -> Any:
        """The live ``torch.export.ExportedProgram`` of ``graph_source``, or None (nothing
        exported, or a loaded report)."""
        return self._program.value

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON to ``path`` (atomically); returns the path. Read it back
        with ``dynscope._model.codec.from_plain(ExportReport, json.load(...))``."""
        return _plain.save(self, path)

    @property
    def suggested_exported(self) -> bool | None:
        """Whether the suggested dynamic_shapes exported; None when none were suggested or tried."""
        return self.suggested_shapes.exported if self.suggested_shapes is not None else None

    @property
    def all_blockers(self) -> tuple[ExportBlocker, ...]:
        """export's blockers, then draft_export's findings."""
        return self.blockers + self.draft

    @property
    def break_blockers(self) -> tuple[CompileBreakMatch, ...]:
        """The compile graph breaks that are export blockers too."""
        return tuple(b for b in self.compile_breaks if b.blocker)

    def blockers_of(self, kind: str) -> tuple[ExportBlocker, ...]:
        """Blockers and draft findings of one kind."""
        return tuple(b for b in self.all_blockers if b.kind == kind)

    def __repr__(self) -> str:
        if self.exported:
            text = f"{self.title}: exports"
        else:
            kinds = sorted({b.kind for b in self.all_blockers})
            text = f"{self.title}: does not export, {plural(len(self.all_blockers), 'blocker')}"
            if kinds:
                text += f" ({', '.join(kinds)})"
        if self.suggested_shapes is not None:
            text += ", suggested shapes " + ("export" if self.suggested_shapes.exported else "fail")
        return _brief("ExportReport", text)
