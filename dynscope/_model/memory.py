"""What compiling did to memory: per graph and end to end, eager against compiled.

Filled by ``report(memory=True)`` (and by ``timing=True``). Peaks are bytes above what was
allocated before the run (its inputs and the parameters), outputs included while they live;
how they were measured is said in ``method``: "profiler" (CPU: torch.profiler's allocation
events summed in time order) or "cuda" (``torch.cuda.max_memory_allocated``).
"""

from __future__ import annotations

from dataclasses import dataclass

from dynscope._format import human_bytes
from dynscope._model.base import _brief

__all__ = ["GraphMemory", "ProgramMemory"]


def _ratio(compiled: int, eager: int) -> float:
    """compiled / eager; 1.0 when neither side allocates (a graph of views or in-place
    ops); 0.0 when eager allocates nothing and compiled does (no ratio to give)."""
    if eager <= 0:
        return 1.0 if compiled == 0 else 0.0
    return compiled / eager


@dataclass(frozen=True)
class GraphMemory:
    """One graph's memory, eager (the captured FX graph run op by op) against the compiled
    build torch.compile made (AOTAutograd + Inductor), on the inputs recorded at capture."""

    mode: str  # the Inductor mode of the build measured
    device: str  # "cpu", "cuda:0"
    method: str  # "profiler" or "cuda": how the peaks were measured
    eager_peak: int = 0  # bytes: peak of one forward run above its inputs
    compiled_peak: int = 0
    # A training graph (outputs needing grad) is also measured forward+backward: the peak of
    # one step through its backward (gradients taken for its inputs); 0 when not a training graph.
    eager_train_peak: int = 0
    compiled_train_peak: int = 0
    # What the forward kept for the backward (``saved_tensors_hooks``, counted once per
    # storage): activations, and apart, inputs (parameters, the graph's inputs) saved as they
    # are, which cost no new memory. -1: not measured (not a training graph).
    eager_saved: int = -1
    eager_saved_count: int = 0
    eager_saved_inputs: int = 0
    compiled_saved: int = -1
    compiled_saved_count: int = 0
    compiled_saved_inputs: int = 0
    error: str = ""  # why memory could not be measured; "" when it was

    @property
    def trains(self) -> bool:
        """Forward+backward was measured: a training graph (its saved tensors were counted,
        even when a step of views allocates nothing)."""
        return not self.error and self.eager_saved >= 0

    @property
    def peak(self) -> tuple[int, int]:
        """(eager, compiled) peak of the run the program makes: forward+backward for a
        training graph, else the forward."""
        if self.trains:
            return self.eager_train_peak, self.compiled_train_peak
        return self.eager_peak, self.compiled_peak

    @property
    def ratio(self) -> float:
        """Compiled peak / eager peak of :attr:`peak`; 0.0 when not measured, or when only
        compiled allocates (no ratio to give); 1.0 when neither does."""
        if self.error:
            return 0.0
        return _ratio(*reversed(self.peak))

    @property
    def growth(self) -> int:
        """Bytes the compiled peak exceeds eager's by (negative: compiled needs less)."""
        eager, compiled = self.peak
        return 0 if self.error else compiled - eager

    def __repr__(self) -> str:
        if self.error:
            return _brief("GraphMemory", f"{self.mode} {self.device}: not measured: {self.error}")
        eager, compiled = self.peak
        what = "fwd+bwd" if self.trains else "forward"
        text = f"{what} peak eager {human_bytes(eager)}, compiled {human_bytes(compiled)}, {self.ratio:.2f}x"
        if self.eager_saved >= 0:
            text += f", saved {human_bytes(self.eager_saved)} -> {human_bytes(self.compiled_saved)}"
        return _brief("GraphMemory", f"{text} ({self.method})")


@dataclass(frozen=True)
class ProgramMemory:
    """The whole callable's peak, eager against torch.compile's program (one call each, after
    a warm call: the first allocations of ``.grad`` and of caches are not in either)."""

    mode: str
    device: str
    method: str  # "profiler" or "cuda"
    eager_peak: int = 0  # bytes above what was allocated before the call
    compiled_peak: int = 0
    error: str = ""

    @property
    def ratio(self) -> float:
        """Compiled peak / eager peak; 0.0 when not measured."""
        return 0.0 if self.error else _ratio(self.compiled_peak, self.eager_peak)

    def __repr__(self) -> str:
        if self.error:
            return _brief("ProgramMemory", f"{self.mode} {self.device}: not measured: {self.error}")
        return _brief(
            "ProgramMemory",
            f"{self.mode} {self.device}: peak eager {human_bytes(self.eager_peak)}, "
            f"compiled {human_bytes(self.compiled_peak)}, {self.ratio:.2f}x ({self.method})",
        )
