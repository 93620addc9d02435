"""Graph breaks: each event PyTorch logged, and the sites they fold into."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from dynscope._format import location
from dynscope._lexicon.break_categories import category_named
from dynscope._model.base import _brief
from dynscope._model.display import BreakShortcuts

__all__ = ["BreakEvent", "GraphBreak", "Site", "StackFrame"]


@dataclass(frozen=True, order=True)
class Site:
    """A line of the user's code as a report names a break site: the file's base name and the
    line (:attr:`GraphBreak.location` in fields). Sites order by file, then line. Saved as
    "file.py:LINE", as reports saved them before they had fields."""

    file: str  # the file's base name ("model.py")
    line: int  # 1-based line number

    @classmethod
    def at(cls, filename: str, lineno: int) -> Site:
        """The site of line ``lineno`` of the file at path ``filename``."""
        return cls(PurePath(filename).name, lineno)

    def _to_words(self) -> str:
        """The codec's writing of a site: "file.py:LINE"."""
        return f"{self.file}:{self.line}"

    @classmethod
    def _from_words(cls, words: str) -> Site:
        """The codec's reading of a saved site, "file.py:LINE": the line is what follows the
        last colon (a number has none); words without one read as line 0."""
        file, sep, line = words.rpartition(":")
        try:
            return cls(file, int(line)) if sep else cls(words, 0)
        except ValueError:
            return cls(words, 0)


@dataclass(frozen=True)
class StackFrame:
    """One frame of a user stack."""

    filename: str  # absolute path as Python reported it
    lineno: int  # 1-based line number
    function: str  # function name
    line: str = ""  # the source line, stripped

    def __repr__(self) -> str:
        return _brief("StackFrame", f"{location(self.filename, self.lineno)} in {self.function}: {self.line}")



@dataclass(frozen=True)
class BreakEvent:
    """One graph break as PyTorch reported it (before folding by site)."""

    compile_id: str  # the compile that hit the break
    filename: str  # the site (the user's line, see GraphBreak)
    lineno: int
    reported_filename: str  # where Dynamo said the break was (may be inside copy.py, torch...)
    reported_lineno: int
    # Dynamo gave up on the frame at this record ("Failed to handle graph break gracefully"):
    # the frame ran eagerly. Still one event (one record PyTorch logged).
    gave_up: bool = False

    def __repr__(self) -> str:
        site, reported = location(self.filename, self.lineno), location(self.reported_filename, self.reported_lineno)
        where = f" (reported at {reported})" if reported != site else ""
        return _brief("BreakEvent", f"{self.compile_id} {site}{where}" + (", gave up on the frame" if self.gave_up else ""))


@dataclass(frozen=True)
class GraphBreak(BreakShortcuts):
    """One distinct graph-break site, with every event that hit it folded into ``count``."""

    filename: str  # the user's file: innermost user frame outside torch and the stdlib
    lineno: int  # the user's line
    function: str  # the user's function
    source: str  # the user's line of code, stripped
    reason: str  # one line: why Dynamo broke
    category: str  # one of dynscope._lexicon.break_categories.CATEGORY_NAMES
    explanation: str = ""  # PyTorch's explanation
    hints: tuple[str, ...] = ()  # PyTorch's hints
    gb_type: str = ""  # PyTorch's graph-break type ("Failed to trace builtin operator")
    gb_id: str = ""  # PyTorch's graph-break id ("gb0059"), "" when unknown
    doc_url: str = ""  # PyTorch's page about this break
    # Outermost first, as PyTorch reported it, from the frame the program was called in
    # (under report(), the frames above the compiled call, dynscope's own among them, are dropped).
    user_stack: tuple[StackFrame, ...] = ()
    count: int = 1  # break events at this site (one per graph-break record PyTorch logged)
    gave_up: int = 0  # of ``count``, events on which Dynamo gave up on the frame (it ran eagerly)
    compile_ids: tuple[str, ...] = ()  # compiles that hit the site, in order
    excerpt: tuple[tuple[int, str], ...] = ()  # (line number, text) around the site, read at capture
    detail: str = ""  # PyTorch's further explanation (how a branch condition was computed), as it wrote it
    debug_context: str = ""  # PyTorch's "Developer debug context"
    torch_text: str = ""  # PyTorch's whole report of the site's first break (without Dynamo's own traceback)
    call_chain: tuple[StackFrame, ...] = ()  # the user's frames leading to the site (the end of user_stack), outermost first
    # What the site costs (Report.breaks_by_cost ranks by these); -1: not known (coverage
    # not measured; a report saved before dynscope counted them):
    eager_ms: float = -1.0  # per call, time of the eager ops run at the site
    graphs_split: int = -1  # graphs of resume functions Dynamo made after this site
    recompiles_caused: int = -1  # recompiles of those resume functions
    # The installed package whose code the site is ("transformers"): its line is not the
    # user's to edit (say so beside the fix); "" for the user's own code.
    library: str = ""

    @property
    def location(self) -> str:
        """``file.py:LINE``: the base name and line."""
        return location(self.filename, self.lineno)

    @property
    def fix(self) -> str:
        """dynscope's advice for the site's category (its row's ``fix`` in
        ``dynscope._lexicon.break_categories``): words made where they are shown, not kept in
        the report (schema 9; older files' words are not read back)."""
        return category_named(self.category).fix

    @property
    def actionable(self) -> bool:
        """False when PyTorch or a library breaks here on purpose (torch.optim's step, a
        library's own ``graph_break()``): no change at this line removes the break, so "fix
        first" never names the site (``fix`` says what helps instead). From the category's
        row in ``dynscope._lexicon.break_categories``."""
        return category_named(self.category).actionable

    def __repr__(self) -> str:
        return _brief("GraphBreak", f"{self.location} {self.category} x{self.count}: {self.source}")
