"""Compare two reports: what changed, and whether the new one is worse (plain data;
``dynscope._render.diff`` says it in words)."""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dynscope._model.display import DiffShortcuts

if TYPE_CHECKING:
    from collections.abc import Sequence

    from dynscope._model.breaks import GraphBreak
    from dynscope._model.report import Report

#: What a :class:`FigureChange` counts: torch's version (the values are its text, "" unknown),
#: the counts, compile seconds (in all; per phase: ``part`` is the phase), cache lookups
#: (``part``: the cache and the result), coverage in percent, speedup (``part``: the mode).
FIGURES = ("torch", "graphs", "graph_breaks", "break_sites", "recompiles", "graph_ops", "compile_s",
           "phase_s", "cache", "coverage", "speedup")

#: What makes the new report worse (a :class:`WorseFigure`): coverage fell, breaks or recompiles rose.
WORSE_KINDS = ("coverage", "graph_breaks", "recompiles")


@dataclass(frozen=True)
class FigureChange:
    """One figure of the two reports side by side, as rounded as it is compared."""

    what: str  # one of FIGURES
    old: float | str  # the old report's figure (torch: its version, "" unknown)
    new: float | str
    part: tuple[str, ...] = ()  # the phase, (cache, result) or the timing mode it is of

    @property
    def changed(self) -> bool:
        """True when the two reports' figures differ."""
        return self.old != self.new


@dataclass(frozen=True)
class WorseFigure:
    """One way the new report is worse than the old: its figure before and after."""

    what: str  # one of WORSE_KINDS
    old: float  # the old report's count, or its coverage ratio (0..1)
    new: float


@dataclass(frozen=True)
class ReportDiff(DiffShortcuts):
    """What changed from ``old`` to ``new`` (``dynscope.diff``; ``summary()`` says it, as
    ``dynscope diff`` prints it)."""

    # counts, compile seconds (and per phase), cache lookups per cache and result, torch's
    # version, coverage, speedups; the changed figures first
    figures: tuple[FigureChange, ...]
    breaks_added: tuple[GraphBreak, ...]  # sites only in the new report
    breaks_removed: tuple[GraphBreak, ...]  # sites only in the old report
    ops_changed: tuple[tuple[str, int, int], ...]  # (op, old count, new count) over all graphs
    worse_because: tuple[WorseFigure, ...]  # empty when the new report is not worse
    # Sites whose statement and reason are the same but whose line changed (lines inserted
    # above, a patch written by ``fix --write``): (old site, new site)
    breaks_moved: tuple[tuple[GraphBreak, GraphBreak], ...] = ()

    @property
    def worse(self) -> bool:
        """True when the new run has more breaks or recompiles, or lower coverage."""
        return bool(self.worse_because)


SiteKey = tuple[str, str, str, str]


def normalised_code(text: str) -> str:
    """A statement's code with its spelling removed: tokens joined by one space, comments and
    line breaks dropped (``x  = f( y ) # note`` and ``x = f(y)`` read the same); the text with
    its whitespace collapsed when it does not tokenize (one line of a longer statement)."""
    try:
        toks = [t.string for t in tokenize.generate_tokens(io.StringIO(text.strip() + "\n").readline)
                if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                                  tokenize.DEDENT, tokenize.ENDMARKER)]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return " ".join(text.split("#", 1)[0].split())
    return " ".join(toks)


def site_key(b: GraphBreak) -> SiteKey:
    """A break site as ``diff`` and ``fix`` follow it across edits: its file, its function,
    its statement's normalised code and its category (the same statement breaking for the same
    reason), not its line, which any edit above it moves."""
    return (b.filename, b.function, normalised_code(b.source), b.category)


def match_sites(old: Sequence[GraphBreak], new: Sequence[GraphBreak]) -> tuple[
        list[tuple[GraphBreak, GraphBreak]], list[GraphBreak], list[GraphBreak]]:
    """Pair the sites of two reports by :func:`site_key`: (pairs, only in old, only in new).

    Sites of one key (the same statement twice in a function) pair in line order; a site at
    the same line as before pairs first, so an edit elsewhere moves none that did not move."""
    groups_old: dict[SiteKey, list[GraphBreak]] = {}
    groups_new: dict[SiteKey, list[GraphBreak]] = {}
    for b in old:
        groups_old.setdefault(site_key(b), []).append(b)
    for b in new:
        groups_new.setdefault(site_key(b), []).append(b)
    pairs: list[tuple[GraphBreak, GraphBreak]] = []
    gone: list[GraphBreak] = []
    for key, olds in groups_old.items():
        news = groups_new.pop(key, [])
        # A site at the same line as before pairs first: an edit elsewhere moves none of them.
        at = {b.lineno: b for b in news}
        still = [(a, at.pop(a.lineno)) for a in olds if a.lineno in at]
        rest_old = sorted((a for a in olds if all(a is not x for x, _ in still)), key=lambda b: b.lineno)
        rest_new = sorted(at.values(), key=lambda b: b.lineno)
        pairs += still + list(zip(rest_old, rest_new, strict=False))  # the longer side keeps the rest
        gone += rest_old[len(rest_new):]
        groups_new[key] = rest_new[len(rest_old):]
    came = [b for bs in groups_new.values() for b in bs]
    new_order = {id(b): i for i, b in enumerate(new)}
    came.sort(key=lambda b: new_order[id(b)])
    order = {id(b): i for i, b in enumerate(old)}
    gone.sort(key=lambda b: order[id(b)])
    pairs.sort(key=lambda p: order[id(p[0])])
    return pairs, gone, came


def _ops(rep: Report) -> dict[str, int]:
    total: dict[str, int] = {}
    for g in rep.graphs:
        for op, n in g.op_counts:
            total[op] = total.get(op, 0) + n
    return total


def _cache_results(rep: Report) -> dict[tuple[str, str], int]:
    """(cache, result) -> lookups: "fx_graph" / "aotautograd" ... and "hit", "miss", "bypass"."""
    out: dict[tuple[str, str], int] = {}
    for g in rep.graphs:
        for cache, _graph, result in g.lowering.cache if g.lowering is not None else ():
            k = (cache, result)
            out[k] = out.get(k, 0) + 1
    return out


def diff_reports(old: Report, new: Report) -> ReportDiff:
    """What changed from ``old`` to ``new``: the figures side by side (changed first), the
    break sites added, removed and moved (matched by statement and reason, not line), the
    ops whose counts changed, and whether ``new`` is worse (more breaks or recompiles, lower
    coverage): ``.worse``, as ``dynscope diff`` gates on.

    Example:
        >>> d = dynscope.diff(dynscope.load("before.json"), dynscope.load("after.json"))
        >>> d.worse, [b.where for b in d.breaks_added]
    """
    figures: list[FigureChange] = []

    def add(what: str, a: float, b: float, *part: str) -> None:
        figures.append(FigureChange(what, a, b, part))

    add("graphs", old.graph_count, new.graph_count)
    add("graph_breaks", old.break_count, new.break_count)
    add("break_sites", len(old.breaks), len(new.breaks))
    add("recompiles", old.recompile_count, new.recompile_count)
    add("graph_ops", sum(g.op_count for g in old.graphs), sum(g.op_count for g in new.graphs))
    add("compile_s", round(old.compile_time.total_s, 3), round(new.compile_time.total_s, 3))
    # Two releases (or two machines) side by side: where the compile time went, per phase,
    # and what the caches did, per cache and result.
    old_phases, new_phases = dict(old.compile_time.phases), dict(new.compile_time.phases)
    for phase in dict.fromkeys([*old_phases, *new_phases]):
        add("phase_s", round(old_phases.get(phase, 0.0), 3), round(new_phases.get(phase, 0.0), 3), phase)
    old_cache, new_cache = _cache_results(old), _cache_results(new)
    for key in dict.fromkeys([*old_cache, *new_cache]):
        add("cache", old_cache.get(key, 0), new_cache.get(key, 0), *key)
    if old.torch_version != new.torch_version:
        figures.insert(0, FigureChange("torch", old.torch_version, new.torch_version))  # the cause, first
    worse: list[WorseFigure] = []
    if old.coverage is not None and new.coverage is not None:
        add("coverage", round(old.coverage.ratio * 100, 1), round(new.coverage.ratio * 100, 1))
        if new.coverage.ratio < old.coverage.ratio - 1e-9:
            worse.append(WorseFigure("coverage", old.coverage.ratio, new.coverage.ratio))
    old_t = {m.mode: m for m in old.timing}
    for m in new.timing:
        if m.mode in old_t and old_t[m.mode].speedup and m.speedup:
            add("speedup", round(old_t[m.mode].speedup, 2), round(m.speedup, 2), m.mode)
    if new.break_count > old.break_count:
        worse.append(WorseFigure("graph_breaks", old.break_count, new.break_count))
    if new.recompile_count > old.recompile_count:
        worse.append(WorseFigure("recompiles", old.recompile_count, new.recompile_count))
    # Sites by their statement and reason, not their line: lines inserted above a break
    # (a patch written by fix --write) move it, they do not make it a new one.
    pairs, gone, came = match_sites(old.breaks, new.breaks)
    moved = tuple((a, b) for a, b in pairs if a.lineno != b.lineno)
    a_ops, b_ops = _ops(old), _ops(new)
    ops_changed = tuple(
        (op, a_ops.get(op, 0), b_ops.get(op, 0))
        for op in sorted(set(a_ops) | set(b_ops))
        if a_ops.get(op, 0) != b_ops.get(op, 0)
    )
    # What changed first (the order kept within each part), then what held.
    figures.sort(key=lambda f: not f.changed)
    return ReportDiff(tuple(figures), tuple(came), tuple(gone), ops_changed, tuple(worse), moved)
