"""The recording torch.compile backend: record each graph, then delegate."""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from dynscope import _torch
from dynscope._errors import InputError
from dynscope._hooks import Hook
from dynscope._torch.distributed import ddp_split_active
from dynscope._torch.fx import concrete, extract, has_symbolic_inputs, outputs_need_grad

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass
class RecordedGraph:
    """One graph as the backend saw it (live objects allowed: this is not the model)."""

    compile_id: str  # "" when Dynamo gave no compile context
    module: torch.fx.GraphModule
    # The real tensors Dynamo passed, SymInts replaced by their concrete values in the call
    # that compiled the graph (report() keeps them for timing).
    example_inputs: list[Any]
    data: dict[str, Any]  # plain data from fxgraph.extract
    runs: int = 0  # times the compiled graph ran (counted when the backend counts)
    backward_runs: int = 0  # of those runs, how many had their backward run too
    dynamic: bool = False  # Dynamo compiled it with symbolic sizes (timing compiles it dynamic too)
    trains: bool = False  # its outputs needed gradients at capture (timing also times backward)
    # Handed over by DDP's optimizer, one piece of a graph split at bucket boundaries
    # ("ddp_bucket"); "" otherwise. The assembler keeps the label only when a compile made
    # several pieces.
    split_by: str = ""
    # Grad mode when Dynamo compiled it: torch.compile builds an inference graph under
    # no_grad and a training graph (saving activations) otherwise; timing builds the same.
    grad_enabled: bool = True


def resolve_inner(inner: str | Callable[..., Any]) -> Callable[..., Any]:
    """The backend to delegate to: a registered name or a backend callable."""
    if callable(inner):
        return inner
    if isinstance(inner, str):
        try:
            return _torch.lookup_backend(inner)
        except KeyError as err:
            raise InputError(f"inner={inner!r}: {err.args[0]}") from err
    raise InputError(
        f"inner must be a backend name such as 'eager' or 'inductor', or a backend callable; "
        f"got {type(inner).__name__}"
    )


def _seen(record: RecordedGraph, grad_inputs: Any, grad_outputs: Any) -> None:
    record.backward_runs += 1  # an int's increment: nothing here can raise into backward()


# Autograd calls the hook while the user's compiled frame is still running (a backward()
# that broke the graph runs under Dynamo's frame callback), so Dynamo would compile the hook
# as if it were the user's code: a frame PyTorch does not compile without dynscope. Disabled
# once here (not per graph run: this is on every run's path), Dynamo never sees it.
_SEEN = torch.compiler.disable(_seen)


def _count_backward(outputs: Any, record: RecordedGraph) -> None:
    """Count one backward run of this graph run, if autograd ever goes back through it.

    A hook on the autograd node of the first output that has one fires when backward
    reaches it: the graph's backward ran (a training step), not only its forward with
    gradients on. A hook on the node (not the tensor) runs after the node's backward and
    leaves the gradients and the recorded backward ops untouched.
    """
    items = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    for out in items:
        node = getattr(out, "grad_fn", None) if isinstance(out, torch.Tensor) else None
        if node is None:
            continue
        try:
            node.register_hook(functools.partial(_SEEN, record))
        except RuntimeError:  # a node that takes no hooks
            continue
        return


def _wrapped(compiled: Callable[..., Any], record: RecordedGraph, *, mark: bool,
             runs: Hook, backward: Hook) -> Callable[..., Any]:
    """Count the graph's runs and backward runs; with ``mark``, put each run in a profiler range.

    Only the compiled graph's own call may raise: what dynscope adds around it is guarded
    (:mod:`dynscope._hooks`) and turns itself off on error.
    """
    from dynscope._torch.profiler import GRAPH_MARK

    def run(*args: Any) -> Any:
        if runs.off:
            return compiled(*args)
        rf = None
        try:
            runs.check()
            record.runs += 1
            if mark:
                rf = torch.profiler.record_function(GRAPH_MARK)
                rf.__enter__()
        except Exception as err:  # noqa: BLE001 - never into the user's program
            runs.failed(err)
            rf = None
        try:
            out = compiled(*args)
        finally:
            if rf is not None:
                try:
                    rf.__exit__(None, None, None)
                except Exception as err:  # noqa: BLE001
                    runs.failed(err)
        if not backward.off and torch.is_grad_enabled():
            try:
                backward.check()
                _count_backward(out, record)
            except Exception as err:  # noqa: BLE001
                backward.failed(err)
        return out

    return run


class RecordingBackend:
    """A torch.compile backend that records every graph it is given.

    Usable directly: ``torch.compile(model, backend=cap.backend)``. Each call records the
    GraphModule, its example inputs and node metadata, then returns the inner backend's
    result unchanged (eager by default).

    Args:
        inner: the backend to delegate to: "eager" (default), "inductor", "aot_eager", or
            any backend callable.
    """

    def __init__(
        self,
        inner: str | Callable[..., Any] = "eager",
        *,
        count_runs: bool = False,
        mark_runs: bool = False,
        keep_inputs: bool = False,
    ) -> None:
        self.inner_name = inner if isinstance(inner, str) else getattr(inner, "__name__", "custom")
        self._inner = resolve_inner(inner)
        self.graphs: list[RecordedGraph] = []
        # With mark_runs, each graph run is wrapped in a profiler range so coverage can
        # tell ops inside graphs from ops run eagerly between them (report() only).
        self.mark_runs = mark_runs
        # With count_runs, each graph's runs are counted (report(): timing needs them).
        self.count_runs = count_runs
        # Example inputs are real tensors (activations included): keep them only when
        # timing may need them, so watching a long training loop holds no extra memory.
        self.keep_inputs = keep_inputs
        # When set, only graphs compiled by this thread (threading.get_ident()) are
        # recorded; other threads' compiles are delegated untouched.
        self.thread: int | None = None
        # torch.compile names backends by __name__ in its logs and cache keys.
        self.__name__ = "dynscope"
        self._hook, self._runs_hook = Hook("recording backend"), Hook("graph run counter")
        self._backward_hook = Hook("backward counter")

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        if self._hook.off or (self.thread is not None and threading.get_ident() != self.thread):
            return self._inner(gm, example_inputs)
        # Recording is guarded (dynscope._hooks): on error the graph goes to the inner backend
        # unrecorded, as it would without dynscope. The inner backend's own errors are its own.
        try:
            self._hook.check()
            record = self._record(gm, example_inputs)
        except Exception as err:  # noqa: BLE001 - never into the compile
            self._hook.failed(err)
            return self._inner(gm, example_inputs)
        compiled = self._inner(gm, example_inputs)
        if not (self.mark_runs or self.count_runs):
            return compiled
        return _wrapped(compiled, record, mark=self.mark_runs, runs=self._runs_hook, backward=self._backward_hook)

    def _record(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> RecordedGraph:
        """Record the graph (before the inner backend: Inductor's passes rewrite ``gm``)."""
        record = RecordedGraph(
            compile_id=_torch.current_compile_id(),
            module=gm,
            # SymInts are only meaningful inside this compile: keep the sizes they stand for.
            example_inputs=[concrete(v) for v in example_inputs] if self.keep_inputs else [],
            data=extract(gm, example_inputs),
            dynamic=has_symbolic_inputs(gm),
            trains=outputs_need_grad(gm),
            split_by="ddp_bucket" if ddp_split_active() else "",
            grad_enabled=torch.is_grad_enabled(),
        )
        self.graphs.append(record)
        return record

    def __repr__(self) -> str:
        return f"RecordingBackend(inner={self.inner_name!r}, graphs={len(self.graphs)})"
