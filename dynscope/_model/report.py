"""The report: everything dynscope learned about one run, its frames, guards and recompiles."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dynscope._model.plain as _plain
from dynscope._format import clip, location, percent, plural
from dynscope._lexicon.wording import is_resume_name, resume_label

# The imports marked TC001 stay at run time though only annotations name them: the codec
# resolves a model class's type hints in its own module (typing.get_type_hints).
from dynscope._model.advice import Trial  # noqa: TC001
from dynscope._model.base import _brief, _Live, _live_field
from dynscope._model.breaks import BreakEvent, GraphBreak  # noqa: TC001
from dynscope._model.cache import CacheLookup  # noqa: TC001
from dynscope._model.causes import FIX_SAID, SAID, Cause, RecompileFix
from dynscope._model.display import GuardFailureShortcuts, RecompileShortcuts, ReportShortcuts
from dynscope._model.graph import Graph, Kernel  # noqa: TC001
from dynscope._model.memory import ProgramMemory  # noqa: TC001
from dynscope._model.timing import CompileTime, Coverage, ModeTiming, TimingCost

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["SCHEMA_VERSION", "Frame", "Guard", "Recompile", "RecompileGroup", "Report"]

#: Version of the JSON layout. Bump when a field changes meaning, is removed, or holds a
#: new layer a reader must not silently drop; older files still load (missing fields take
#: their defaults). 2: Graph.lowering. 3: ranks (Report.rank/world_size, Graph.split_by),
#: what a break costs and PyTorch's whole words (GraphBreak), Recompile.causes, Report.trials.
#: 4: where sizes came from (Frame.shapes, Frame.dynamic_sizes), Recompile.failures.
#: 5: memory (Graph.memory, Report.memory). 6: causes as fields (Recompile.why and .causes,
#: GuardFailure.cause: ``Cause`` records where 5 saved words, read back as kind SAID).
#: 7: one tuple of causes per recompile (Recompile.causes, one per failed guard; "why" before),
#: fixes as records (RecompileFix, each with the change it answers; words before),
#: Recompile.raw_reasons ("reasons" before). Older files are read into it (Recompile._upgraded).
#: 8: a lowering's cache lookups as (cache, AOT graph, result) where 7 kept the cache and graph in
#: one key ("fx_graph forward"), a kernel's source lines as (path, line) where 7 kept "path:LINE";
#: older files are read into it (Lowering._upgraded, Kernel._upgraded).
#: 9: a break no longer keeps dynscope's advice words (GraphBreak.fix is its category's row,
#: made where it is shown); older files' "fix" words are not read. A trial's targets are records
#: (Target: a site, a recompiled frame and its causes, a size, a block) where 8 kept words; older
#: words are read into them (Target._from_words).
SCHEMA_VERSION = 9



@dataclass(frozen=True, repr=False)  # the repr says the cause: GuardFailureShortcuts
class GuardFailure(GuardFailureShortcuts):
    """A guard of an earlier cache entry that failed on the call that recompiled
    (``explained`` says its cause)."""

    entry: str  # the earlier compile whose guard failed ("0/0")
    guard: str  # the guard as PyTorch words it ("tensor 'x' size mismatch at index 0. expected 5, actual 6")
    # What changed, as fields (``explained`` says it); a report saved before causes were
    # fields carries its words here ("explained", kind SAID).
    cause: Cause | None = field(default=None, metadata={"was": "explained"})
    then: str = ""  # what the entry was compiled for ("5"), "" when PyTorch's words do not say
    now: str = ""  # what the new call brought ("6"), "" when PyTorch's words do not say
    # "pytorch": the failure PyTorch logged for the entry (its first failed guard);
    # "dynscope": found by report() checking the entry's guards on the call's own inputs.
    source: str = "pytorch"


_BRANCH = re.compile(r"(?:if|elif|while)\b")


@dataclass(frozen=True)
class SizeFix:
    """An input size a compile fixed to one value, or guarded, and the user line that did it.

    PyTorch's ``symbolic_shape_specialization`` (kind "fixed": a dynamic size the program
    made static, ``range(x.size(0))``, ``if x.shape[1] == 8:``) and ``guard_added_fast``
    (kind "guarded": ``x.size(0) < 1024`` from ``torch.arange(x.size(0))``) records.
    """

    compile_id: str  # the compile
    size: str  # the input size, as the user writes it ("x.size(0)", "pos")
    kind: str  # "fixed" or "guarded"
    value: str  # "fixed": the value ("5"); "guarded": the guard in words ("x.size(0) < 1024")
    reason: str = ""  # PyTorch's reason for a fix ("range_refined_to_singleton")
    filename: str = ""  # the user line that fixed or guarded it
    lineno: int = 0
    function: str = ""
    code: str = ""  # that line's source
    # The torch function it happened inside, where that line called into torch and the size
    # was fixed there ("linear (linear.py:134)": nn.Linear pins the input's last size); "" else.
    via: str = ""

    @property
    def on_branch(self) -> bool:
        """True when the line is a branch (``if``, ``elif``, ``while``): a guard it made
        splits the sizes into compiles, one per side."""
        return _BRANCH.match(self.code) is not None

    def __repr__(self) -> str:
        what = f"{self.size} fixed to {self.value}" if self.kind == "fixed" else self.value
        return _brief("SizeFix", f"{self.compile_id} {what} at {location(self.filename, self.lineno)}")


@dataclass(frozen=True, repr=False)  # the repr says the causes: RecompileShortcuts
class Recompile(RecompileShortcuts):
    """A compile of a frame that had been compiled before, and why (``explained`` and
    ``cause_words`` say its causes and changes)."""

    compile_id: str  # the new compile ("0/1")
    frame: str  # the function recompiled
    # PyTorch's failed-guard lines as it logged them, unread: the raw record ``causes`` is
    # read from (saved as "reasons" before schema 7).
    raw_reasons: tuple[str, ...] = field(default=(), metadata={"was": "reasons"})
    # What changed, one cause per failed guard, with its values where known (``explained``
    # says them). Older files saved these as "why" (6) or as words, "explained" (5 and
    # before): the codec reads them here (``_upgraded``).
    causes: tuple[Cause, ...] = ()
    # What to do, one fix per change the failed guards name (each fix's ``change``: what
    # recompiles are grouped by, without values); ``words`` says a fix.
    fixes: tuple[RecompileFix, ...] = ()
    # The failed guard of every earlier cache entry of the frame (PyTorch checks each entry
    # and logs, per entry, the first guard that failed), in PyTorch's order: newest entry first.
    failures: tuple[GuardFailure, ...] = ()
    # The installed package whose code the recompiled frame is ("transformers"): the library
    # recompiles on its own, and the fixes say so; "" for the user's own code (and torch's).
    library: str = ""

    @property
    def reasons(self) -> tuple[str, ...]:
        """``raw_reasons``, by the name the public API gave it before schema 7 (kept so code
        written against it still runs; the field is ``raw_reasons``)."""
        return self.raw_reasons

    @property
    def changes(self) -> tuple[Cause, ...]:
        """What changed, without values, one per fix (requires_grad of input x): what
        recompiles are grouped by."""
        return tuple(f.change for f in self.fixes)

    @classmethod
    def _upgraded(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A recompile as an older file saved it, in this layout (the codec calls it on every
        recompile it reads): before schema 7, "causes" held what changed (words before 6,
        records in 6) beside the failed guards' own causes ("explained" words before 6,
        "why" records in 6), and "fixes" held words. Each old fix becomes a FIX_SAID fix
        holding its words and the change it was for, so groups and words stay as saved."""
        own = data.get("why", data.get("explained"))
        fixes = data.get("fixes", [])
        if own is None and not any(type(f) is str for f in fixes):
            return data  # this layout (or a file from before causes were kept at all)
        out = {k: v for k, v in data.items() if k not in ("why", "explained", "causes", "fixes")}
        out["causes"] = own if own is not None else []
        changes = data.get("causes", []) if own is not None else []
        out["fixes"] = [{"kind": FIX_SAID, "said": f, "change": c} for c, f in zip(changes, fixes, strict=False)]
        return out


@dataclass(frozen=True)
class RecompileGroup:
    """Recompiles of one function for one cause (``Report.recompile_groups``)."""

    frame: str  # the function recompiled
    cause: Cause  # what changed, without values (``what_changed`` says it: "requires_grad changed on input x")
    fix: RecompileFix | None = None  # what to do about it; None when the recompile names no change
    compile_ids: tuple[str, ...] = ()  # the recompiles, in order

    @property
    def count(self) -> int:
        """How many recompiles."""
        return len(self.compile_ids)

    def __repr__(self) -> str:
        return _brief("RecompileGroup", f"{self.count} of {resume_label(self.frame)}: {self.cause!r}")


@dataclass(frozen=True)
class Guard:
    """One guard Dynamo installed on a compiled frame."""

    compile_id: str  # the compile that installed it
    kind: str  # TENSOR_MATCH, ID_MATCH, TYPE_MATCH, EQUALS_MATCH, ...
    source: str  # what it checks, e.g. L['x'] or G['torch']
    detail: str  # the check itself, without PyTorch's trailing comment
    user_line: str = ""  # the user code that made the guard, when PyTorch says

    def __repr__(self) -> str:
        source = f" {self.source}" if self.source else ""
        return _brief("Guard", f"{self.compile_id} {self.kind}{source}: {self.detail}")


@dataclass(frozen=True)
class Frame:
    """One compile of one Python frame."""

    compile_id: str  # "frame/compile"
    function: str  # code name
    filename: str
    lineno: int  # first line of the function
    graph_ids: tuple[int, ...] = ()  # graphs this compile produced
    guard_count: int = 0
    op_count: int = 0  # ops Dynamo put in the graph (0: nothing compiled)
    compile_time: CompileTime = CompileTime()
    restarts: int = 0  # times Dynamo restarted its analysis (usually once per break)
    status: str = "compiled"  # "compiled", "empty" (no ops, so no graph), "failed" (fell back to eager) or "crashed" (its compile error raised into the program)
    fail_reason: str = ""  # why compiling failed or was skipped
    torch_compile_id: str = ""  # PyTorch's own id (process-wide; matches TORCH_LOGS / tlparse)
    # Dynamic shapes: the input sizes this compile fixed or guarded, each with the user line
    # that did it, and the input sizes that stayed dynamic ("x.size(0)"); empty when static.
    shapes: tuple[SizeFix, ...] = ()
    dynamic_sizes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        status = f"failed: {self.fail_summary}" if self.status == "failed" else self.status
        return _brief(
            "Frame",
            f"{self.compile_id} {resume_label(self.function)} ({location(self.filename, self.lineno)}): {status}, "
            f"{plural(len(self.graph_ids), 'graph')}, {plural(self.op_count, 'op')}",
        )

    @property
    def fail_summary(self) -> str:
        """The first line of ``fail_reason`` ("" when the frame did not fail)."""
        return self.fail_reason.splitlines()[0] if self.fail_reason else ""

    @property
    def is_resume(self) -> bool:
        """True for resume functions Dynamo generates after a graph break."""
        return is_resume_name(self.function)



@dataclass(frozen=True)
class Report(ReportShortcuts):
    """Everything dynscope learned about one run of compiled code."""

    graphs: tuple[Graph, ...] = ()  # captured graphs in compile order
    breaks: tuple[GraphBreak, ...] = ()  # distinct break sites, in order of first hit
    break_events: tuple[BreakEvent, ...] = ()  # every break as reported, in order
    recompiles: tuple[Recompile, ...] = ()
    guards: tuple[Guard, ...] = ()
    frames: tuple[Frame, ...] = ()  # every compile, in order
    compile_time: CompileTime = CompileTime()  # summed over frames
    coverage: Coverage | None = None  # None when not measured (capture() of foreign code)
    timing: tuple[ModeTiming, ...] = ()  # end to end, one per mode, when timing ran
    # Where timing=True's wall time went (dynscope's measurement by phase); None without timing.
    timing_cost: TimingCost | None = None
    # The whole callable's peak memory, eager against compiled (report(memory=True) or
    # timing=True; the first mode); None when not measured. Per graph: Graph.memory.
    memory: ProgramMemory | None = None
    calls: int = 0  # calls dynscope made (report()); 0 for capture()
    torch_version: str = ""
    title: str = ""  # what was captured, e.g. the model's class name
    notes: tuple[str, ...] = ()  # what the reader must know: an input unwrapped, coverage skipped...
    unparsed: int = 0  # trace payloads no parser understood: non-zero means counts may be short
    # The same, per trace-event kind: (event name, count), by name, as tlparse's Stats counts
    # each kind of failure; sums to ``unparsed``. Empty in reports saved before it existed.
    unparsed_kinds: tuple[tuple[str, int], ...] = ()
    trials: tuple[Trial, ...] = ()  # remedies tried by advise(), best first (empty until then)
    # Where the report was made: torch.distributed's rank and world size when a process
    # group was initialised, else 0 and 1 (a single process is rank 0 of 1).
    rank: int = 0
    world_size: int = 1
    # The compiled graphs in the order they ran, by compile id (Inductor's graph_execution
    # record, logged when a run records it); () when not logged.
    execution_order: tuple[str, ...] = ()
    # Every compile-cache lookup (AOTAutograd's, Inductor's FX graph cache), in order, with its
    # key's parts (dynscope.cache_diff, assert_warm); () when Inductor's records were not kept.
    cache_lookups: tuple[CacheLookup, ...] = ()
    schema_version: int = SCHEMA_VERSION
    # The model and calls report() ran (never saved): dynscope.advise(rep) reruns them.
    _subject: _Live = _live_field()

    # -- counts -------------------------------------------------------------------------
    @property
    def graph_count(self) -> int:
        """Number of captured graphs (recompiled variants included)."""
        return len(self.graphs)

    @property
    def break_count(self) -> int:
        """Number of graph-break events (sum of ``count`` over sites)."""
        return sum(b.count for b in self.breaks)

    @property
    def recompile_count(self) -> int:
        """Number of recompiles."""
        return len(self.recompiles)

    @property
    def resume_count(self) -> int:
        """Compiles of resume functions Dynamo created after breaks."""
        return sum(1 for f in self.frames if f.is_resume)

    def graphs_ms(self, mode: str) -> tuple[float, float, int]:
        """Per-graph medians added up for ``mode``: (eager ms, compiled ms, graphs left out).

        Each graph counts its median times the runs it made during ``report()``'s calls,
        plus its backward (forward+backward minus forward) for each run whose backward ran;
        a graph that was not timed, failed, or whose runs are unknown is left out (and
        counted), so a non-zero third value means the sums are short.
        """
        eager = compiled = 0.0
        left_out = 0
        for g in self.graphs:
            t = g.timing_for(mode)
            if t is None or t.failed or g.runs <= 0:
                left_out += 1
                continue
            eager += t.eager_ms * g.runs + t.backward_share("eager") * g.backward_runs
            compiled += t.compiled_ms * g.runs + t.backward_share("compiled") * g.backward_runs
        return eager, compiled, left_out

    def kernels(self) -> Iterator[tuple[Graph, Kernel]]:
        """Every kernel of every lowered graph, as (graph, kernel), in graph order."""
        for g in self.graphs:
            if g.lowering is not None:
                for k in g.lowering.kernels:
                    yield g, k

    def top_kernels(self, n: int = 10) -> list[tuple[Graph, Kernel, float]]:
        """The ``n`` timed kernels that cost the program most: (graph, kernel, ms over the
        graph's runs during report(); per run when runs are unknown), largest first."""
        costed = [
            (g, k, k.time_ms * max(g.runs, 1)) for g, k in self.kernels() if k.time_ms is not None
        ]
        return sorted(costed, key=lambda t: -t[2])[:n]

    def recompile_groups(self) -> tuple[RecompileGroup, ...]:
        """Recompiles grouped by function and cause, the largest group first.

        PyTorch lists a failed guard against each earlier compile of the function, so a
        recompile can name causes an earlier one already had: each counts under the first
        cause not seen before in that function (its first cause when all were seen).
        ``recompiles`` keeps the flat list.
        """
        groups: dict[tuple[str, Cause], RecompileGroup] = {}
        seen: dict[str, set[Cause]] = {}
        for r in self.recompiles:
            # A recompile that names no change (PyTorch's reason unread) is grouped by its
            # first cause as it stands (NO_REASON, or the words an older file saved).
            pairs: list[tuple[Cause, RecompileFix | None]] = [(f.change, f) for f in r.fixes] or [
                (r.causes[0] if r.causes else Cause(SAID, said="recompiled"), None)]
            known = seen.setdefault(r.frame, set())
            cause, fix = next(((c, f) for c, f in pairs if c not in known), pairs[0])
            known.update(c for c, _ in pairs)
            g = groups.get((r.frame, cause)) or RecompileGroup(r.frame, cause, fix)
            groups[(r.frame, cause)] = RecompileGroup(g.frame, g.cause, g.fix, (*g.compile_ids, r.compile_id))
        return tuple(sorted(groups.values(), key=lambda g: -g.count))

    def breaks_by_cost(self) -> tuple[GraphBreak, ...]:
        """Break sites, the one whose fix buys most first: sites the user's own change can fix
        before those PyTorch or a library breaks on purpose (``GraphBreak.actionable``), then
        most eager time per call (to 0.1 ms: finer is noise), then most events, then most
        graphs and recompiles it causes (figures not known count as 0); ties keep the order
        of first hit. The break table is in this order, so among rows of one eager time a
        site never stands above one that broke more often."""
        return tuple(
            sorted(
                self.breaks,
                key=lambda b: (
                    not b.actionable,
                    -round(max(b.eager_ms, 0.0), 1),
                    -b.count,
                    -(max(b.graphs_split, 0) + max(b.recompiles_caused, 0)),
                ),
            )
        )

    def graph(self, graph_id: int) -> Graph:
        """The graph with this id."""
        for g in self.graphs:
            if g.id == graph_id:
                return g
        raise KeyError(f"no graph {graph_id}; ids are {[g.id for g in self.graphs]}")

    # -- output (summary(), to_html(), render()... come from ReportShortcuts) ----------
    def __repr__(self) -> str:
        parts = [
            plural(self.graph_count, "graph"),
            f"{plural(self.break_count, 'break')} at {plural(len(self.breaks), 'site')}",
            plural(self.recompile_count, "recompile"),
        ]
        if self.coverage is not None:
            parts.append(f"coverage {percent(self.coverage.ratio)}")
        for m in self.timing[:1]:  # the first mode, as Graph.timing
            parts.append(f"{m.mode} timing failed" if m.error else f"speedup {m.speedup:.2f}x ({m.mode})")
        kernels = sum(1 for _ in self.kernels())
        if kernels:
            parts.append(plural(kernels, "kernel"))
        if self.unparsed:
            parts.append(plural(self.unparsed, "unread trace message"))
        title = f"{clip(self.title, 60)}: " if self.title else ""
        return _brief("Report", title + ", ".join(parts))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (live modules left out)."""
        result: dict[str, Any] = _plain.to_plain(self)
        return result

    def to_json(self, *, indent: int | None = 1) -> str:
        """The report as JSON text."""
        return _plain.to_json(self, indent=indent)

    def iter_json(self) -> Iterator[str]:
        """The report's JSON (as ``save`` writes it) in pieces, in order, for a stream."""
        return _plain.iter_json(self)

    def save(self, path: str | Path) -> Path:
        """Write the report as JSON to ``path``; returns the path.

        The write is atomic: if it fails midway, a report already at ``path`` stays as it was.

        Raises:
            InputError: ``path`` is a folder, or its folder cannot be written.
            DynscopeError: writing failed midway (disk full, ...).
        """
        return _plain.save(self, path)

    def check(
        self,
        *,
        max_graph_breaks: int | None = 0,
        max_recompiles: int | None = 0,
        min_coverage: float | None = None,
        max_graphs: int | None = None,
        allow_unparsed: bool = False,
    ) -> Report:
        """Raise CompileBudgetError when this report exceeds the budget; return self.

        A report with unread PyTorch trace messages (``unparsed`` > 0) fails too, unless
        ``allow_unparsed``: its counts may be short.
        """
        __tracebackhide__ = True
        from dynscope._model.budget import Budget

        return Budget(
            max_graph_breaks=max_graph_breaks,
            max_recompiles=max_recompiles,
            min_coverage=min_coverage,
            max_graphs=max_graphs,
            allow_unparsed=allow_unparsed,
        ).check(self)
