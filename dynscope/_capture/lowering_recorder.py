"""Live recording of one Inductor compile, for the reading package's lowering builder
(dynscope._read.lowering): a trace collector attached while the compile and its first run
happen. Live capture, so it lives here and not in the torch-free reading package."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from dynscope._read.lowering import CompileEvents

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from dynscope._model import Graph, Lowering
    from dynscope._torch.trace import TraceEvent

__all__ = ["LoweringRecorder"]


class LoweringRecorder:
    """Records what one Inductor compile logs, for :func:`build_lowering`.

    Use ``with recorder.recording():`` around the compile and its first run (AOTAutograd
    compiles a training graph's backward on the first ``backward()``), then
    :meth:`kernel_units` to profile, and :meth:`lowering`.
    """

    def __init__(self, *, kernel_profile: bool = True) -> None:
        from dynscope._torch.trace import TraceCollector

        self.collector = TraceCollector()
        self.collector.lowering = True
        self.collector.thread = threading.get_ident()
        self.kernel_profile = kernel_profile
        self.missing: list[str] = []

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        from dynscope import _torch

        with _torch.attached(self.collector), _torch.lowering_config(kernel_profile=self.kernel_profile) as missing:
            self.missing = list(missing)
            yield

    def compiled(self) -> CompileEvents:
        """Everything recorded, as one compile's events."""
        return CompileEvents(self.collector.snapshot(), self.missing)

    def by_compile(self) -> dict[str, CompileEvents]:
        """The recorded events grouped by PyTorch's compile id (Dynamo compiles only: a
        training graph's lazy backward compile logs under its forward's id)."""
        groups: dict[str, list[TraceEvent]] = {}
        for ev in self.collector.snapshot():
            if ev.compile_id:
                groups.setdefault(ev.compile_id, []).append(ev)
        return {cid: CompileEvents(evs, self.missing) for cid, evs in groups.items()}

    def kernel_units(self) -> list[list[tuple[str, tuple[str, ...]]]]:
        """Per output code, its kernel calls as ("name:n", profiler names), in call order."""
        return self.compiled().kernel_units()

    def lowering(self, graph: Graph, *, notes: Sequence[str] = (), **kwargs: Any) -> Lowering | None:
        return self.compiled().lowering(graph, notes=notes, **kwargs)
