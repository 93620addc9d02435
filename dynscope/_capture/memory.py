"""Measure what compiling did to memory: one graph, and the whole program, eager against
the build torch.compile made.

Per graph (on the inputs recorded at capture, in the grad mode it was captured in):

- the peak of one forward run, eager (the captured FX graph run op by op) and compiled;
- for a training graph, the peak of one forward+backward step (gradients taken for its
  inputs with ``torch.autograd.grad``, so no ``.grad`` changes), after one warm step each
  (a backward compiles at its first run: that compile is not the step's memory);
- what the forward saves for the backward, eager and compiled, counted by the same
  ``saved_tensors_hooks`` on both sides.

The whole program: one call eager and one compiled, each after a warm call.

Each run is measured alone (:mod:`dynscope._torch.memory`): CPU peaks from the profiler's
allocation events, CUDA peaks from the allocator's high-water mark. Inside a profiler of the
user's, CPU memory is not measured (the user's profile is left intact) and the result says why.
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._capture.graph_timing import Builds, Written, fresh_inputs, own_build
from dynscope._capture.lowering_recorder import LoweringRecorder
from dynscope._capture.raised import what_raised
from dynscope._capture.sampling import tensors
from dynscope._capture.timing_options import device_of
from dynscope._model import Graph, GraphMemory, Lowering, ProgramMemory
from dynscope._torch.memory import peak_of, saved_for_backward

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dynscope._capture.backend import RecordedGraph
    from dynscope._capture.builds import Build
    from dynscope._read.lowering import CompileEvents

__all__ = ["graph_memory", "measure_graph", "program_memory"]

_PROFILER_BUSY = "not measured: a torch.profiler session of yours was running (CPU memory is read from the profiler)"


def _method(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "profiler"


def _busy(device: str) -> bool:
    return _method(device) == "profiler" and _torch.profiler_running()


def graph_memory(
    eager: Callable[..., Any],
    compiled: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    mode: str,
    grad: bool,
    trains: bool,
    first_backward: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> GraphMemory:
    """One graph's memory, ``eager`` against ``compiled``, both called as ``fn(*inputs)``.

    Args:
        grad: the grad mode the graph runs in (its capture's).
        trains: a training graph: also measure forward+backward and the saved tensors.
        first_backward: entered around the compiled side's first step (its backward may
            compile there: an extra build of dynscope's, counted by the caller).
    """
    device = device_of(list(inputs))
    method = _method(device)
    if _busy(device):
        return GraphMemory(mode, device, method, error=_PROFILER_BUSY)
    try:
        with torch.set_grad_enabled(grad):
            eager_peak = peak_of(lambda: eager(*inputs), device).bytes
            compiled_peak = peak_of(lambda: compiled(*inputs), device).bytes
        if not (trains and grad):
            return GraphMemory(mode, device, method, eager_peak=eager_peak, compiled_peak=compiled_peak)
        wrt = [v for v in inputs if isinstance(v, torch.Tensor) and v.requires_grad]
        with torch.enable_grad():
            outs = [t for t in tensors(eager(*inputs)) if t.requires_grad]
            cots = [torch.ones_like(t) for t in outs]
            del outs

            def step(fn: Callable[..., Any]) -> Callable[[], Any]:
                def go() -> Any:
                    got = [t for t in tensors(fn(*inputs)) if t.requires_grad]
                    return torch.autograd.grad(got, wrt, cots, allow_unused=True)

                return go

            # Warm: the compiled backward may compile at its first run.
            step(eager)()
            with first_backward():
                step(compiled)()
            eager_train = peak_of(step(eager), device).bytes
            compiled_train = peak_of(step(compiled), device).bytes
            eager_saved, out = saved_for_backward(lambda: eager(*inputs), inputs)
            del out
            compiled_saved, out = saved_for_backward(lambda: compiled(*inputs), inputs)
            del out
    except Exception as err:  # noqa: BLE001 - the report goes on; the graph says why
        return GraphMemory(mode, device, method, error=what_raised(err))
    return GraphMemory(
        mode,
        device,
        method,
        eager_peak=eager_peak,
        compiled_peak=compiled_peak,
        eager_train_peak=eager_train,
        compiled_train_peak=compiled_train,
        eager_saved=eager_saved.bytes,
        eager_saved_count=eager_saved.count,
        eager_saved_inputs=eager_saved.input_bytes,
        compiled_saved=compiled_saved.bytes,
        compiled_saved_count=compiled_saved.count,
        compiled_saved_inputs=compiled_saved.input_bytes,
    )


def measure_graph(
    rec: RecordedGraph,
    mode: str,
    graph: Graph | None,
    *,
    build: Build | None,
    events: Callable[[], CompileEvents | None] | None,
    builds: Builds,
    backward_compiled: bool = False,
) -> tuple[GraphMemory, Lowering | None]:
    """One captured graph's memory on torch.compile's ``build`` of it (dynscope builds it
    when None, counted in ``builds``), and with ``graph`` its lowering (AOT graphs,
    saved tensors; kernels untimed). ``backward_compiled``: timing already ran a step
    through ``build`` (its backward is compiled). The inputs a graph writes are put back
    afterwards."""
    inputs = fresh_inputs(rec.example_inputs)
    written = Written(rec.module, inputs)
    recorder = LoweringRecorder() if graph is not None and build is None else None
    record = recorder.recording if recorder is not None else contextlib.nullcontext
    trains = rec.grad_enabled and rec.trains and any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs)
    try:
        if build is not None:
            compiled = build.compiled
        else:
            try:
                with builds.timed(), record():
                    compiled = own_build(rec, inputs, mode, rec.module if rec.dynamic else None, grad=rec.grad_enabled)
                    with torch.set_grad_enabled(rec.grad_enabled):
                        compiled(*inputs)
            except Exception as err:  # noqa: BLE001
                device = device_of(inputs)
                return GraphMemory(mode, device, _method(device), error=what_raised(err)), None
        # The compiled backward compiles at the first step unless the program's own run
        # already ran backward through torch.compile's build: then an extra build of dynscope's.
        backward_built = build is not None and (rec.backward_runs > 0 or backward_compiled)
        with record():
            memory = graph_memory(
                copy.deepcopy(rec.module), compiled, inputs, mode=mode, grad=rec.grad_enabled, trains=trains,
                first_backward=contextlib.nullcontext if backward_built else builds.timed,
            )
    finally:
        written.restore()
    lowering = None
    if graph is not None:
        logged = recorder.compiled() if recorder is not None else (events() if events is not None else None)
        if logged is not None:
            lowering = logged.lowering(graph, mode=mode, source="timing", times=None, measured_ms=None, notes=[])
    return memory, lowering


def program_memory(
    eager: Callable[[], Any], compiled: Callable[[], Any], *, mode: str, device: str, warm: bool
) -> ProgramMemory:
    """The whole program's peak, one call of each side; ``warm``: call each once first
    (when nothing has run them since the compile)."""
    method = _method(device)
    if _busy(device):
        return ProgramMemory(mode, device, method, error=_PROFILER_BUSY)
    try:
        if warm:
            eager()
            compiled()
        return ProgramMemory(
            mode, device, method, eager_peak=peak_of(eager, device).bytes, compiled_peak=peak_of(compiled, device).bytes
        )
    except Exception as err:  # noqa: BLE001
        return ProgramMemory(mode, device, method, error=what_raised(err))
