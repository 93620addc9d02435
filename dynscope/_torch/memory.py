"""Memory one run takes, as PyTorch's allocators saw it, and what autograd saves for backward.

Two ways to measure a run's peak, each said in the result ("profiler" or "cuda"):

- CPU: ``torch.profiler`` with ``profile_memory=True`` records every allocation and free of
  the CPU allocator as an event with its size (negative for a free). Summed in time order
  they are the bytes the run holds at each moment; their maximum is the peak above what was
  allocated before the run (its inputs, the parameters). The events are read from the
  profiler's event tree, the same stream its memory timeline is built from.
- CUDA: ``torch.cuda.max_memory_allocated`` around the run, less what was allocated before.

What the forward keeps for the backward is counted with ``saved_tensors_hooks``: autograd
calls the pack hook once per tensor it saves, in eager as in AOTAutograd's compiled
function (which saves through ``ctx.save_for_backward``). Tensors are counted once per
storage, so a view saved beside its base costs its storage once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


@dataclass(frozen=True)
class Peak:
    """One run's peak: bytes above what was allocated before it, and how it was measured."""

    bytes: int
    method: str  # "profiler" or "cuda"
    held: int = 0  # bytes still held when the run returned (its outputs, saved tensors)


def _allocations(prof: Any, device: torch.device) -> list[tuple[int, int]]:
    """(time ns, bytes) of every allocation (+) and free (-) on ``device``, in time order."""
    from torch._C._profiler import _EventType

    out: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        kind, fields = event.typed
        if kind != _EventType.Allocation:
            continue
        if fields.device.type != device.type:
            continue
        out.append((event.start_time_ns, int(fields.alloc_size)))
    out.sort(key=lambda a: a[0])
    return out


def profiled_peak(run: Callable[[], Any]) -> Peak:
    """The CPU peak of one call of ``run`` from the profiler's allocation events.

    What ``run`` returns is dropped inside the measurement: outputs count at the peak
    while they live, as in the program.
    """
    from torch.profiler import ProfilerActivity, profile

    from dynscope._torch.profiler import quiet_native_output

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    # The profiler's C++ code prints a line on each start and stop: kept off the user's output.
    with quiet_native_output():
        prof.start()
    try:
        out = run()
        del out
    finally:
        with quiet_native_output():
            prof.stop()
    now = peak = 0
    for _, size in _allocations(prof, torch.device("cpu")):
        now += size
        peak = max(peak, now)
    return Peak(bytes=peak, method="profiler", held=max(now, 0))


def cuda_peak(run: Callable[[], Any], device: torch.device) -> Peak:
    """The CUDA peak of one call of ``run``: the allocator's high-water mark above the
    bytes allocated before it."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = run()
    del out
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    return Peak(bytes=max(peak, 0), method="cuda", held=max(torch.cuda.memory_allocated(device) - before, 0))


def peak_of(run: Callable[[], Any], device: str) -> Peak:
    """One call's peak on ``device`` ("cpu", "cuda:0"), measured the way that device allows."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return cuda_peak(run, dev)
    return profiled_peak(run)


@dataclass(frozen=True)
class Saved:
    """What autograd saved for the backward during one forward, by storage."""

    count: int = 0  # distinct storages saved, apart from the inputs'
    bytes: int = 0  # their bytes
    input_count: int = 0  # inputs (parameters, the graph's inputs) saved as they are
    input_bytes: int = 0


def saved_for_backward(run: Callable[[], Any], inputs: Iterable[Any]) -> tuple[Saved, Any]:
    """What autograd saves while ``run`` runs (``saved_tensors_hooks``), the storages of
    ``inputs`` told apart (saving a parameter costs no new memory); and ``run``'s result,
    which the caller keeps alive or drops."""
    own: set[int] = set()
    for v in inputs:
        if isinstance(v, torch.Tensor) and v.layout == torch.strided:
            own.add(v.untyped_storage().data_ptr())
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.layout == torch.strided and t.device.type != "meta":
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    act = {p: n for p, n in seen.items() if p not in own and p != 0}
    inp = {p: n for p, n in seen.items() if p in own}
    return Saved(count=len(act), bytes=sum(act.values()), input_count=len(inp), input_bytes=sum(inp.values())), out
