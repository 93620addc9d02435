"""dynscope: see what torch.compile did to your program and what it cost.

Example:
    >>> import dynscope
    >>> rep = dynscope.report(model, x)
    >>> print(rep)
"""


from dynscope.capture import Capture, capture, report
from dynscope.errors import (
    CaptureError,
    CompileBudgetError,
    DynscopeError,
    GraphvizNotFoundError,
    InputError,
    SchemaError,
)
from dynscope.model import (
    Coverage,
    Frame,
    Graph,
    GraphBreak,
    Guard,
    Recompile,
    Report,
    load,
)
from dynscope.testing import assert_compiles
from dynscope.timing import TimingOptions

__version__ = "0.1.0"

__all__ = [
    "Capture",
    "CaptureError",
    "CompileBudgetError",
    "Coverage",
    "DynscopeError",
    "Frame",
    "Graph",
    "GraphBreak",
    "GraphvizNotFoundError",
    "Guard",
    "InputError",
    "Recompile",
    "Report",
    "SchemaError",
    "TimingOptions",
    "assert_compiles",
    "capture",
    "load",
    "report",
]
