"""The model: frozen plain data (no torch objects), its JSON codec, budgets, diffs, merges and
the analyses that draw nothing. Imports nothing above it except the one deferred door into
``dynscope._render`` that the output shortcuts go through (``dynscope._model.display``).

Every model type is re-exported here: code outside the model imports ``from dynscope._model
import Report``; modules inside it import their siblings directly (an import of this package
would load every family and circle back).

    base       what the families share (the live holder, the one-line repr)
    graph      TensorMeta, Node, Graph, AotGraph, SavedTensors, Kernel, Lowering
    breaks     StackFrame, BreakEvent, GraphBreak, Site (a break site as fields)
    causes     Cause, StateChange: why a guard failed, as fields (kind, name, values);
               RecompileFix: what to do about a change (kind and arguments)
    timing     CompileTime, Timing, ModeTiming, Coverage, TimingCost
    memory     GraphMemory, ProgramMemory
    measured   Measured, GraphMeasured: what timing measured, the builder's input
    export     ExportReport, ExportBlocker, SuggestedShapes, CompileBreakMatch
    advice     Outcome, Target (what a remedy addresses, as fields), Trial, Advice
    report     Report, Frame, Guard, GuardFailure, Recompile, RecompileGroup, SizeFix, SCHEMA_VERSION
    ranks      MultiRankReport, Divergence, Fact
    watch      Verdict (what watch_ranks found at one compile)
    fix        FixResult, Patch, Unpatched (what dynscope.fix proposed and verified)
    budget     Budget (Report.check), Overrun
    cache      CacheLookup, KeyPart: one compile-cache lookup and its key's parts; CacheDiff,
               CacheMiss, PartChange: two runs' lookups compared (dynscope.cache_diff)
    display    the output shortcuts (summary(), to_html(), to_svg()...): the door's one caller
    plain, codec   model -> JSON and back, checked
    merge      rank folders saved, read and compared
    diff       ReportDiff, FigureChange, WorseFigure: two reports compared (dynscope.diff)
    ops, structure, order   analyses that draw nothing: op categories; a graph's structure,
               hash and repeated blocks; the program's order through its breaks
"""

from dynscope._model.advice import Advice, Outcome, Target, Trial
from dynscope._model.breaks import BreakEvent, GraphBreak, Site, StackFrame
from dynscope._model.budget import Budget, Overrun
from dynscope._model.cache import CacheDiff, CacheLookup, CacheMiss, KeyPart, PartChange
from dynscope._model.causes import Cause, RecompileFix, StateChange
from dynscope._model.diff import FigureChange, ReportDiff, WorseFigure
from dynscope._model.export import CompileBreakMatch, ExportBlocker, ExportReport, SuggestedShapes
from dynscope._model.fix import FixResult, Patch, Unpatched
from dynscope._model.graph import (
    SHORT_DTYPES,
    AotGraph,
    Graph,
    Kernel,
    Lowering,
    Node,
    SavedTensors,
    TensorMeta,
)
from dynscope._model.measured import GraphMeasured, Measured
from dynscope._model.memory import GraphMemory, ProgramMemory
from dynscope._model.ranks import Divergence, Fact, MultiRankReport
from dynscope._model.report import (
    SCHEMA_VERSION,
    Frame,
    Guard,
    GuardFailure,
    Recompile,
    RecompileGroup,
    Report,
    SizeFix,
)
from dynscope._model.timing import CompileTime, Coverage, ModeTiming, Timing, TimingCost
from dynscope._model.watch import Verdict

__all__ = [
    "SCHEMA_VERSION",
    "SHORT_DTYPES",
    "Advice",
    "AotGraph",
    "BreakEvent",
    "Budget",
    "CacheDiff",
    "CacheLookup",
    "CacheMiss",
    "Cause",
    "CompileBreakMatch",
    "CompileTime",
    "Coverage",
    "Divergence",
    "ExportBlocker",
    "ExportReport",
    "Fact",
    "FigureChange",
    "FixResult",
    "Frame",
    "Graph",
    "GraphMeasured",
    "GraphMemory",
    "GraphBreak",
    "Guard",
    "Kernel",
    "KeyPart",
    "Lowering",
    "Measured",
    "ModeTiming",
    "MultiRankReport",
    "Node",
    "Outcome",
    "Overrun",
    "PartChange",
    "Patch",
    "ProgramMemory",
    "GuardFailure",
    "Recompile",
    "RecompileFix",
    "RecompileGroup",
    "Site",
    "SizeFix",
    "Report",
    "ReportDiff",
    "SavedTensors",
    "StackFrame",
    "StateChange",
    "SuggestedShapes",
    "TensorMeta",
    "Timing",
    "TimingCost",
    "Target",
    "Trial",
    "Unpatched",
    "Verdict",
    "WorseFigure",
]
