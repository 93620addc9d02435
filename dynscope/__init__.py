"""dynscope: see what torch.compile did to your program and what it cost.

Example:
    >>> import dynscope
    >>> rep = dynscope.report(model, x)
    >>> print(rep)

Importing dynscope does not import torch: the names that need it (``report``,
``capture``, ``Capture``, ``advise``, ``assert_compiles``, ``export_report``,
``assert_exports``, ``TimingOptions``, ``watch_ranks``, ``fix``) load on first use, so
reading a saved report or a TORCH_TRACE log (``dynscope.load``, ``dynscope.load_trace``,
``dynscope.read``, ``dynscope.diff``, ``dynscope show|diff|render|trace``) works where torch is not installed.
With ``DYNSCOPE_WATCH_RANKS=1`` set, importing dynscope imports torch and starts
``watch_ranks()`` for the whole process (docs/distributed.md).
"""

import importlib
import os as _os
import typing

from dynscope._errors import (
    CacheMissError,
    CaptureError,
    CompileBudgetError,
    DynscopeError,
    GraphvizNotFoundError,
    InputError,
    RankDivergenceError,
    RankDivergenceWarning,
    SchemaError,
)
from dynscope._model import (
    Advice,
    AotGraph,
    BreakEvent,
    Budget,
    CacheDiff,
    CacheLookup,
    CacheMiss,
    Cause,
    CompileBreakMatch,
    CompileTime,
    Coverage,
    Divergence,
    ExportBlocker,
    ExportReport,
    FigureChange,
    FixResult,
    Frame,
    Graph,
    GraphBreak,
    GraphMemory,
    Guard,
    GuardFailure,
    Kernel,
    KeyPart,
    Lowering,
    ModeTiming,
    MultiRankReport,
    Node,
    Outcome,
    PartChange,
    Patch,
    ProgramMemory,
    Recompile,
    RecompileFix,
    RecompileGroup,
    Report,
    ReportDiff,
    SavedTensors,
    Site,
    SizeFix,
    StackFrame,
    StateChange,
    SuggestedShapes,
    Target,
    TensorMeta,
    Timing,
    TimingCost,
    Trial,
    Unpatched,
    Verdict,
    WorseFigure,
)
from dynscope._model.codec import load
from dynscope._model.diff import diff_reports as diff
from dynscope._model.display import use_renderers as _use_renderers
from dynscope._model.merge import merge, save_rank

if typing.TYPE_CHECKING:
    from dynscope._capture.advise import advise
    from dynscope._capture.capture import Capture, capture, report
    from dynscope._capture.export import assert_exports, export_report
    from dynscope._capture.fix import fix
    from dynscope._capture.raised import raised_at
    from dynscope._capture.timing_options import TimingOptions
    from dynscope._capture.watch import watch_ranks
    from dynscope._read.cache_runs import assert_warm, cache_diff
    from dynscope._read.reading import read
    from dynscope._read.trace_file import load_trace
    from dynscope._testing import assert_compiles

# The model's output shortcuts (summary(), to_html(), ...) reach the renderers through this
# loader, given from here, above both floors: the model never imports a renderer, and the
# door is imported at a shortcut's first call, not with dynscope.
_use_renderers(lambda: importlib.import_module("dynscope._render"))

__version__ = "0.1.0"

#: Public names loaded on first use -> the module that defines them: those that need torch,
#: and the torch-free readers (load_trace, read, raised_at: they bring the trace assembly or
#: the file registry, unneeded to read a report).
_LAZY = {
    "cache_diff": "dynscope._read.cache_runs",
    "assert_warm": "dynscope._read.cache_runs",
    "load_trace": "dynscope._read.trace_file",
    "read": "dynscope._read.reading",
    "raised_at": "dynscope._capture.raised",
    "advise": "dynscope._capture.advise",
    "Capture": "dynscope._capture.capture",
    "capture": "dynscope._capture.capture",
    "report": "dynscope._capture.capture",
    "assert_compiles": "dynscope._testing",
    "export_report": "dynscope._capture.export",
    "assert_exports": "dynscope._capture.export",
    "TimingOptions": "dynscope._capture.timing_options",
    "watch_ranks": "dynscope._capture.watch",
    "fix": "dynscope._capture.fix",
}

__all__ = [
    "Advice",
    "AotGraph",
    "BreakEvent",
    "Budget",
    "CacheDiff",
    "CacheLookup",
    "CacheMiss",
    "CacheMissError",
    "Capture",
    "CaptureError",
    "Cause",
    "CompileBreakMatch",
    "CompileBudgetError",
    "CompileTime",
    "Coverage",
    "Divergence",
    "DynscopeError",
    "ExportBlocker",
    "ExportReport",
    "FigureChange",
    "FixResult",
    "Frame",
    "Graph",
    "GraphBreak",
    "GraphMemory",
    "GraphvizNotFoundError",
    "Guard",
    "GuardFailure",
    "InputError",
    "Kernel",
    "KeyPart",
    "Lowering",
    "ModeTiming",
    "MultiRankReport",
    "Node",
    "Outcome",
    "PartChange",
    "Patch",
    "ProgramMemory",
    "RankDivergenceError",
    "RankDivergenceWarning",
    "Recompile",
    "RecompileFix",
    "RecompileGroup",
    "Report",
    "ReportDiff",
    "SavedTensors",
    "SchemaError",
    "Site",
    "SizeFix",
    "StackFrame",
    "StateChange",
    "SuggestedShapes",
    "Target",
    "TensorMeta",
    "Timing",
    "TimingCost",
    "TimingOptions",
    "Trial",
    "Unpatched",
    "Verdict",
    "WorseFigure",
    "advise",
    "assert_compiles",
    "assert_exports",
    "assert_warm",
    "cache_diff",
    "capture",
    "diff",
    "export_report",
    "fix",
    "load",
    "load_trace",
    "merge",
    "raised_at",
    "read",
    "report",
    "save_rank",
    "watch_ranks",
]


def _rehome(obj: typing.Any) -> typing.Any:
    """Show a public name as ``dynscope.X`` (tracebacks, help()), not its private module.

    The model dataclasses the codec reads (Report and all it holds, MultiRankReport) keep
    their module: the codec resolves their annotations there (Budget is never decoded).
    """
    obj.__module__ = __name__
    return obj


for _obj in (Budget, load, merge, save_rank, diff, CacheMissError, CaptureError, CompileBudgetError, DynscopeError, GraphvizNotFoundError,
             InputError, RankDivergenceError, RankDivergenceWarning, SchemaError):
    _rehome(_obj)


def __getattr__(name: str) -> typing.Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'dynscope' has no attribute {name!r}")
    module = importlib.import_module(home)
    for other, where in _LAZY.items():  # bind every name of that module: looked up once
        if where == home:
            globals()[other] = _rehome(getattr(module, other))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if _os.environ.get("DYNSCOPE_WATCH_RANKS") == "1":
    # The no-code-change form (torchrun, Slurm): watch every compile of this process. Never
    # fatal: without torch (a torch-free CLI command) or on any failure, say so and go on.
    try:
        importlib.import_module("dynscope._capture.watch").watch_from_env()
    except Exception as _err:  # noqa: BLE001 - the variable must never break the import
        import warnings as _warnings

        _warnings.warn(f"DYNSCOPE_WATCH_RANKS=1: not watching this process ({type(_err).__name__}: {_err})",
                       RankDivergenceWarning, stacklevel=2)
