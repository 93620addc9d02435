"""The model's output shortcuts (``summary()``, ``str()``, ``to_html()``, ``render()``,
``to_dot()``, ``to_svg()``, ``to_script()``, ``_repr_html_``): mixins whose every method hands the object to
one function of the renderers' door, ``dynscope._render``.

The model never imports the door: the public package (``dynscope/__init__``, the front end
above both) hands it a loader of the door with :func:`use_renderers` when dynscope is
imported, and each shortcut calls through it. So the model imports nothing above it, not even
late, and importing the model loads no renderer (the loader runs at a shortcut's first call).
The renderers never call these shortcuts (they call each other). Below them, what must say a
record in words where it raises or warns calls the shortcut as a user would, never a renderer:
the watch's ``RankDivergenceError`` and warning (``Verdict.message``) and advise's plans (a
recompile's cause words); those floors never import the renderers (tests/house).

Each mixin serves one model class (named in its docstring); ``self`` is left unannotated
(mypy does not accept a mixin's self typed as the class that inherits it), and the door's
functions carry the types.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import CompileBudgetError
from dynscope._lexicon.wording import resume_label
from dynscope._model.base import _brief

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from dynscope._model.graph import Lowering
    from dynscope._model.report import Report

__all__ = [
    "use_renderers",
    "AdviceShortcuts",
    "AotGraphShortcuts",
    "BreakShortcuts",
    "BudgetShortcuts",
    "CacheDiffShortcuts",
    "CacheMissShortcuts",
    "CauseShortcuts",
    "DivergenceShortcuts",
    "ExportShortcuts",
    "FixShortcuts",
    "GraphShortcuts",
    "GuardFailureShortcuts",
    "MergedShortcuts",
    "PartChangeShortcuts",
    "RecompileFixShortcuts",
    "RecompileShortcuts",
    "VerdictShortcuts",
    "ReportShortcuts",
]


#: The loader of the renderers' door, given by the front end (:func:`use_renderers`).
_load_door: Callable[[], ModuleType] | None = None


def use_renderers(load: Callable[[], ModuleType]) -> None:
    """Give the shortcuts their renderers: ``load()`` returns the render door's module.

    Called once by ``dynscope/__init__`` (with a loader of ``dynscope._render``), which every
    import of a dynscope module runs first; a test may wire other renderers the same way.
    """
    global _load_door
    _load_door = load


def _door() -> ModuleType:
    """The render door, loaded through what :func:`use_renderers` was given."""
    if _load_door is None:  # only when dynscope's own __init__ failed before wiring them
        raise RuntimeError("dynscope's renderers are not wired to the model's output shortcuts: "
                           "import dynscope (its __init__ wires them) before calling summary() or to_html()")
    return _load_door()


class ReportShortcuts:
    """``Report``'s ways to be shown: summary text, the page, the card, the bundle, the program picture."""

    __slots__ = ()

    def summary(self, *, color: bool | None = None) -> str:
        """The terminal summary (also ``str(report)``).

        Args:
            color: ANSI colour: True or False; None (default) colours when stdout is a
                terminal, unless ``NO_COLOR`` is set (``FORCE_COLOR`` colours a pipe too).
                Pass False for text that goes to a file.
        """
        return str(_door().summary_text(self, color=color))

    def __str__(self) -> str:
        return self.summary()

    def to_html(self, *, pictures: bool | None = None, full: bool = False, progress: bool | None = None) -> str:
        """One self-contained HTML page (inline CSS and SVG; no network).

        Args:
            pictures: include SVG pictures; None (default) includes them when Graphviz is
                installed and says how to get it otherwise.
            full: draw every node of every graph (no node budget; each layout still has
                its time limit). Defaults to False: big graphs are folded, and the page says how.
            progress: False says nothing on stderr while the pictures are laid out (see
                docs/reading-a-report.md, "Big graphs"). Defaults to None (shown).
        """
        return str(_door().report_html(self, pictures=pictures, full=full, progress=progress))

    def _repr_html_(self) -> str:
        """A compact card in a notebook; ``to_html()`` / ``render(folder)`` give the whole page."""
        return str(_door().report_card(self))

    def render(self, folder: str | Path, *, full: bool = False, progress: bool | None = None) -> Path:
        """Write index.html, graph_<id>.svg, program.svg, report.json to ``folder``.

        ``full`` draws every node of every graph (else big graphs are folded and the page
        says how); ``progress=False`` says nothing on stderr while pictures are laid out.
        """
        return Path(_door().render_folder(self, Path(folder), full=full, progress=progress))

    def program_dot(self) -> str:
        """DOT of the whole program: graphs chained through the breaks."""
        return str(_door().program_dot(self))

    def program_svg(self, path: str | Path | None = None) -> str:
        """SVG of the whole program; also written to ``path`` when given."""
        return str(_door().program_svg(self, path))


class GraphShortcuts:
    """``Graph``'s pictures (DOT, SVG, the notebook card) and its standalone script."""

    __slots__ = ()

    def to_dot(self, *, depth: int | None = None, fold_params: bool = True, color_by: str = "auto",
               full: bool = False) -> str:
        """DOT source of the graph (see dynscope._render.dot).

        ``color_by``: "op" (op category), "kernel" (the Inductor kernel each node was fused
        into), "time" (share of the graph's time, when kernels were timed) or "auto"
        ("kernel" when the graph has a lowering with kernels, else "op"). ``full``: every
        node and edge, past the node budget too (dynscope._render.dot.NODE_BUDGET).
        """
        return str(_door().graph_dot(self, depth=depth, fold_params=fold_params, color_by=color_by, full=full))

    def to_svg(
        self,
        path: str | Path | None = None,
        *,
        depth: int | None = None,
        fold_params: bool = True,
        color_by: str = "auto",
        full: bool = False,
    ) -> str:
        """SVG of the graph; also written to ``path`` when given. Needs Graphviz's ``dot``.

        ``dot`` runs under a time limit (``DYNSCOPE_DOT_TIMEOUT``, 20 s by default): past it
        the SVG is a box saying so, with the graph's most used ops.
        """
        return str(_door().graph_svg(self, path, depth=depth, fold_params=fold_params, color_by=color_by, full=full))

    def to_script(
        self,
        path: str | Path | None,
        *,
        timing: bool = True,
        mode: str | None = None,
        report: Report | None = None,
    ) -> str:
        """Write a standalone Python script that rebuilds this graph and runs it eager against
        Inductor; returns its text.

        The script needs only torch (it never imports dynscope): it rebuilds the GraphModule
        from the graph's code, makes inputs from the recorded shapes, dtypes and strides
        (random data, seed 0; symbolic sizes as they ran), checks numerics and times the two
        as dynscope did, printing ``eager_ms=... compiled_ms=... speedup=...`` beside the
        report's figures (``--json`` for one JSON line). Attach it to a bug report, or rerun
        it after a torch upgrade. See docs/timing.md, "Rerunning one graph".

        Args:
            path: the file to write; None only returns the text.
            timing: the script times eager against Inductor; False: it compiles and checks
                numerics only. Defaults to True.
            mode: Inductor mode; None takes the mode of the graph's first timing, else
                "default". Defaults to None.
            report: the report the graph belongs to (its title and torch version go into
                the script's header). Defaults to None.

        Raises:
            InputError: the graph cannot be rebuilt standalone (its code reads a constant or
                calls a function of the program the report does not keep; an input is not a
                tensor or a number...): the message says why. Or a bad ``mode``, or a
                ``path`` that cannot be written.

        Example:
            >>> rep.graph(0).to_script("graph_0.py", report=rep)
        """
        return str(_door().graph_script(self, path, timing=timing, mode=mode, report=report))

    def _repr_html_(self) -> str:
        """Its picture in a notebook (its summary when Graphviz is not installed or does not work)."""
        return str(_door().graph_card(self))


class AotGraphShortcuts:
    """``AotGraph``'s pictures: DOT and SVG."""

    __slots__ = ()

    def to_dot(self, lowering: Lowering | None = None, *, full: bool = False) -> str:
        """DOT source of the graph (see dynscope._render.dot.aot_graph_to_dot); pass the
        ``Lowering`` it belongs to so a backward graph highlights the saved activations;
        ``full`` draws every node past the node budget too."""
        return str(_door().aot_graph_dot(self, lowering, full=full))

    def to_svg(self, path: str | Path | None = None, lowering: Lowering | None = None, *, full: bool = False) -> str:
        """SVG of the graph; also written to ``path`` when given. Needs Graphviz's ``dot``
        (under its time limit, as ``Graph.to_svg``)."""
        return str(_door().aot_graph_svg(self, path, lowering, full=full))


class BreakShortcuts:
    """``GraphBreak``'s notebook card."""

    __slots__ = ()

    def _repr_html_(self) -> str:
        """The code around the site with the line marked, the reason and the fix, in a notebook."""
        return str(_door().break_card(self))


class AdviceShortcuts:
    """``Advice``'s table of trials."""

    __slots__ = ()

    def summary(self) -> str:
        """A plain-text table of the trials, best first."""
        return str(_door().advice_text(self))

    def __str__(self) -> str:
        return self.summary()


class MergedShortcuts:
    """``MultiRankReport``'s text and page."""

    __slots__ = ()

    def summary(self) -> str:
        """Divergences first, then each rank's figures side by side (plain text)."""
        return str(_door().merged_text(self))

    def __str__(self) -> str:
        return self.summary()

    def to_html(self) -> str:
        """One self-contained HTML page: divergences first, then ranks as columns."""
        return str(_door().merged_html(self))

    def render(self, folder: str | Path) -> Path:
        """Write index.html (the page ``to_html`` gives) and merged.json to ``folder`` (made
        when missing); returns the folder."""
        return Path(_door().merged_bundle(self, Path(folder)))


class ExportShortcuts:
    """``ExportReport``'s text and page."""

    __slots__ = ()

    def summary(self) -> str:
        """Whether it exports, each blocker at your line with its fix, draft_export's
        findings, the suggested dynamic_shapes, the sizes, compile's breaks (plain text)."""
        return str(_door().export_text(self))

    def __str__(self) -> str:
        return self.summary()

    def to_html(self, *, pictures: bool | None = None) -> str:
        """One self-contained HTML page; the exported graph drawn when Graphviz is there
        (``pictures`` None), or as asked."""
        return str(_door().export_html(self, pictures=pictures))


class FixShortcuts:
    """``FixResult``'s text and page."""

    __slots__ = ()

    def summary(self) -> str:
        """Each patch as a diff with its evidence, then the sites left alone and why (plain text)."""
        return str(_door().fix_text(self))

    def __str__(self) -> str:
        return self.summary()

    def to_html(self) -> str:
        """One self-contained HTML page of the patches and their evidence."""
        return str(_door().fix_html(self))


class CauseShortcuts:
    """``Cause``'s words (made in one place, ``dynscope._render.causes``)."""

    __slots__ = ()

    @property
    def explained(self) -> str:
        """The failed guard said plainly, with its values where known ("input x changed size
        in dim 0: compiled for 4, called with 6")."""
        return str(_door().cause_explained(self))

    @property
    def what_changed(self) -> str:
        """What changed, as recompiles are grouped ("size of input x changed (dim 0)")."""
        return str(_door().cause_changed(self))


class GuardFailureShortcuts:
    """``GuardFailure``'s words and repr (its cause said by ``dynscope._render.causes``).

    The class is a dataclass made with ``repr=False``: a generated ``__repr__`` would hide this one.
    """

    __slots__ = ()

    @property
    def explained(self) -> str:
        """The failed guard said plainly ("" when not known)."""
        cause = self.cause  # type: ignore[attr-defined]
        return str(cause.explained) if cause is not None else ""

    def __repr__(self) -> str:
        return _brief("GuardFailure", f"{self.entry}: {self.explained or self.guard}")  # type: ignore[attr-defined]


class RecompileShortcuts:
    """``Recompile``'s words and repr (its causes said by ``dynscope._render.causes``).

    The class is a dataclass made with ``repr=False``: a generated ``__repr__`` would hide this one.
    """

    __slots__ = ()

    @property
    def explained(self) -> tuple[str, ...]:
        """The failed guards said plainly, one per cause."""
        return tuple(c.explained for c in self.causes)  # type: ignore[attr-defined]

    @property
    def cause_words(self) -> tuple[str, ...]:
        """What changed, in words, one per fix ("requires_grad changed on input x")."""
        return tuple(c.what_changed for c in self.changes)  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        said = "; ".join(self.explained or self.raw_reasons)  # type: ignore[attr-defined]
        return _brief("Recompile", f"{self.compile_id} {resume_label(self.frame)}: {said}")  # type: ignore[attr-defined]


class RecompileFixShortcuts:
    """``RecompileFix``'s words (made in one place, ``dynscope._render.causes``)."""

    __slots__ = ()

    @property
    def words(self) -> str:
        """What to do, in words ("sizes that change between calls: mark the dimension dynamic ...")."""
        return str(_door().fix_words(self))


class PartChangeShortcuts:
    """``PartChange``'s words (made in one place, ``dynscope._render.cache``)."""

    __slots__ = ()

    @property
    def what(self) -> str:
        """The change, in words ("Inductor config `max_autotune` changed: False -> True")."""
        return str(_door().cache_change_what(self))

    @property
    def todo(self) -> str:
        """What to do so that run B hits, in words."""
        return str(_door().cache_change_todo(self))


class CacheMissShortcuts:
    """``CacheMiss``'s words (made in one place, ``dynscope._render.cache``)."""

    __slots__ = ()

    def head(self) -> str:
        """Which compile, which cache, what happened and what it cost, in words (no cause)."""
        return str(_door().cache_miss_head(self))

    def lines(self) -> list[str]:
        """The miss in words: a head line, then one line per change and what to do."""
        return list(_door().cache_miss_lines(self))


class DiffShortcuts:
    """``ReportDiff``'s words (made in one place, ``dynscope._render.diff``)."""

    __slots__ = ()

    def summary(self) -> str:
        """The two reports' figures side by side, the break sites added, removed and moved,
        the ops whose counts changed, and why the new one is worse (plain text)."""
        return str(_door().diff_text(self))

    def __str__(self) -> str:
        return self.summary()


class CacheDiffShortcuts:
    """``CacheDiff``'s words (made in one place, ``dynscope._render.cache``)."""

    __slots__ = ()

    def summary(self) -> str:
        """The comparison as text: each run's results, then each miss in B and why."""
        return str(_door().cache_diff_summary(self))

    def __str__(self) -> str:
        return self.summary()


class BudgetShortcuts:
    """``Budget``'s overruns in words (made in one place, ``dynscope._render.budget``): its
    problems, and the error ``check`` raises (the budget decides from ``Budget.overruns``;
    only the words come from here)."""

    __slots__ = ()

    def problems(self, rep: Report) -> list[str]:
        """One readable block per exceeded limit (``Budget.overruns`` in words); empty when
        the budget holds."""
        return list(_door().budget_problems(self.overruns(rep), rep))  # type: ignore[attr-defined]

    def check(self, rep: Report) -> Report:
        """Return ``rep`` when the budget holds; raise CompileBudgetError listing every exceeded limit."""
        __tracebackhide__ = True
        overruns = self.overruns(rep)  # type: ignore[attr-defined]
        if overruns:
            message, problems = _door().budget_exceeded(overruns, rep)
            raise CompileBudgetError(message, report=rep, problems=list(problems))
        return rep


class DivergenceShortcuts:
    """``Divergence``'s words (made in one place, ``dynscope._render.divergences``)."""

    __slots__ = ()

    @property
    def detail(self) -> str:
        """What differs, in words ("rank 1 recompiled Mlp.forward (0/1): ...; rank 0 did not")."""
        return str(_door().divergence_detail(self))

    def __repr__(self) -> str:
        # The class is a dataclass made with repr=False: a generated __repr__ would hide this one.
        return _brief("Divergence", f"{self.kind} ranks {list(self.ranks)}: {self.detail}")  # type: ignore[attr-defined]


class VerdictShortcuts:
    """``Verdict``'s words (``dynscope._render.divergences``)."""

    __slots__ = ()

    def message(self, *, saved: str = "") -> str:
        """The words every rank says: which ranks, where, what differs, the line, the remedy
        (``saved``: this rank's report file, named with the command that merges its folder)."""
        return str(_door().verdict_text(self, saved=saved))
