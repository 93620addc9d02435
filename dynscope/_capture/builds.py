"""torch.compile's own Inductor builds of the program's graphs, kept for timing.

timing=True compiles the whole program once with Inductor, as ``torch.compile(model,
mode=m)`` does, to time it end to end. That compile already builds every graph the capture
saw: the backend here is torch's Inductor backend with a hook that keeps each compiled
callable, and each captured graph is then timed on the very build torch.compile made (the
one the user's program would run) instead of being compiled again.

A captured graph and a build are the same graph when Dynamo traced the same code to the same
graph: same FX code (symbol names aside: a fresh compile may number them differently) and
the same inputs (dtype, rank, sizes, grad). They are matched in compile order, each build
used once; a graph no build matches is built apart (:mod:`dynscope._capture.timing`).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._capture.backend import RecordedGraph

#: Dynamo's symbol names (backed s0/s77, unbacked u0): numbered per compile.
_SYMBOL = re.compile(r"\b[su]\d+\b")


def _size(s: Any) -> str:
    return "s" if isinstance(s, torch.SymInt) else str(int(s))


def graph_key(gm: torch.fx.GraphModule) -> tuple[str, tuple[str, ...]]:
    """What makes two Dynamo graphs the same graph: their code and their inputs' kinds,
    dtypes, sizes (symbolic ones as "s") and grad, from Dynamo's example values."""
    inputs: list[str] = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        ev = node.meta.get("example_value")
        if isinstance(ev, torch.Tensor):
            sizes = ",".join(_size(s) for s in ev.shape)
            inputs.append(f"{ev.dtype}[{sizes}]{'g' if ev.requires_grad else ''}")
        elif isinstance(ev, torch.SymInt):
            inputs.append("symint")
        else:
            inputs.append(type(ev).__name__)
    return _SYMBOL.sub("s", gm.code), tuple(inputs)


@dataclass
class Build:
    """One graph as torch.compile's Inductor built it.

    Attributes:
        key: :func:`graph_key` of the graph Dynamo handed Inductor.
        compile_id: PyTorch's "frame/compile" id of the compile that built it.
        compiled: the compiled callable Dynamo runs (AOTAutograd's wrapper around Inductor's code).
        seconds: the backend call: AOTAutograd and Inductor's forward or inference compile.
        grad_enabled: the grad mode it was built in.
    """

    key: tuple[str, tuple[str, ...]]
    compile_id: str
    compiled: Callable[..., Any]
    seconds: float
    grad_enabled: bool
    used: bool = False


@dataclass
class ProgramBuilds:
    """Collects torch.compile's Inductor builds of one mode; :meth:`backend` is the
    torch.compile backend that fills it.

    Only the thread that made it records: another thread's compiles meanwhile are not this
    program's.
    """

    mode: str
    builds: list[Build] = field(default_factory=list)
    thread: int = field(default_factory=threading.get_ident)
    dynamic: bool | None = None  # torch.compile's ``dynamic``, which its Inductor backend is told too

    def backend(self) -> Any:
        """torch.compile(mode=..., dynamic=...)'s own Inductor backend, recording each build here."""
        return _torch.recording_inductor(self.mode, self._key, self._keep, dynamic=self.dynamic)

    def _key(self, gm: Any, _inputs: list[Any]) -> Any:
        return graph_key(gm) if threading.get_ident() == self.thread else None

    def _keep(self, key: Any, compiled: Callable[..., Any], seconds: float) -> None:
        if key is None:
            return
        self.builds.append(
            Build(
                key=key,
                compile_id=_torch.current_compile_id(),
                compiled=compiled,
                seconds=seconds,
                grad_enabled=torch.is_grad_enabled(),
            )
        )

    def take(self, rec: RecordedGraph) -> Build | None:
        """The first unused build of the same graph as ``rec`` in the same grad mode, marked
        used; None when torch.compile built no such graph."""
        key = graph_key(rec.module)
        for b in self.builds:
            if not b.used and b.key == key and b.grad_enabled == rec.grad_enabled:
                b.used = True
                return b
        return None

    def shared_ids(self) -> set[str]:
        """Compile ids that built several graphs (DDP's split pieces): their logged events
        cannot be told apart per graph."""
        seen: set[str] = set()
        shared: set[str] = set()
        for b in self.builds:
            (shared if b.compile_id in seen else seen).add(b.compile_id)
        return shared
