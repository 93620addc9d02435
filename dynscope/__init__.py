"""dynscope: see what torch.compile did to your program and what it cost.

Example:
    >>> import dynscope
    >>> rep = dynscope.report(model, x)
    >>> print(rep)

Importing dynscope does not import torch: the names that need it (``report``,
``capture``, ``Capture``, ``assert_compiles``, ``TimingOptions``) load on first use, so
reading a saved report (``dynscope.load``, ``dynscope show|diff|render``) works where
torch is not installed.
"""

import importlib
import sys
import types
import typing

from dynscope.budget import Budget
from dynscope.codec import load
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
)

if typing.TYPE_CHECKING:
    from dynscope.capture import Capture, capture, report
    from dynscope.testing import assert_compiles
    from dynscope.timing import TimingOptions

__version__ = "0.1.0"

#: Public names that need torch -> the module that defines them (imported on first use).
_LAZY = {
    "Capture": "dynscope.capture",
    "capture": "dynscope.capture",
    "report": "dynscope.capture",
    "assert_compiles": "dynscope.testing",
    "TimingOptions": "dynscope.timing",
}

__all__ = [
    "Budget",
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


def __getattr__(name: str) -> typing.Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module 'dynscope' has no attribute {name!r}")
    module = importlib.import_module(home)
    for other, where in _LAZY.items():  # bind every name of that module: looked up once
        if where == home:
            globals()[other] = getattr(module, other)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """dynscope's module type: keeps ``dynscope.capture`` the function.

    Python binds a submodule on its package once it is imported (``dynscope.capture``, the
    module); with the names loaded lazily that would hide the function of the same name.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
