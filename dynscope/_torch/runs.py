"""How often each compiled graph ran, for graphs of a backend that is not dynscope's.

Under ``capture()`` the user compiles with their own backend (Inductor, or a per-block
``block.compile()``), so dynscope's recording backend never wraps the compiled graph and
cannot count its runs, and no profiler runs to count Dynamo's "Torch-Compiled Region" ranges.
What every compile does have: Dynamo installs the compiled graph as a global of the frame's
module (``__compiled_fn_<n>_<uuid>``, ``OutputGraph.install_global_unsafe``), and the code it
generates looks that global up at each run. While a capture is open, each such global
installed on the watched thread is a counting wrapper around Dynamo's own value, keyed by
PyTorch's compile id; when the capture ends, Dynamo's own values are put back, so the user's
compiled code afterwards is exactly what it would have been.

The wrapper costs one Python call per graph run (about a microsecond), and is guarded
(:mod:`dynscope._hooks`): counting can never raise into the program.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any

from dynscope._hooks import Hook
from dynscope._torch.logger import current_compile_id

if TYPE_CHECKING:
    from collections.abc import Iterator

_PREFIX = "__compiled_fn"


class RunCounter:
    """Counts the runs of the graphs Dynamo installs on one thread, by PyTorch's compile id."""

    def __init__(self, thread: int) -> None:
        self.thread = thread
        self.runs: Counter[str] = Counter()
        self._installed: list[tuple[dict[str, Any], str, Any, Any]] = []
        self._hook = Hook("graph run counter")

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count in the block; Dynamo's own globals are put back after it."""
        try:
            from torch._dynamo.output_graph import OutputGraph

            original = OutputGraph.install_global_unsafe
        except (ImportError, AttributeError):  # pragma: no cover - another layout: not counted
            yield
            return
        counter = self

        def install_global_unsafe(self: Any, name: str, value: Any) -> None:
            original(self, name, counter._wrapped(self, name, value))

        OutputGraph.install_global_unsafe = install_global_unsafe  # type: ignore[method-assign]
        try:
            yield
        finally:
            if OutputGraph.install_global_unsafe is install_global_unsafe:
                OutputGraph.install_global_unsafe = original  # type: ignore[method-assign]
            for scope, name, wrapper, value in self._installed:
                if scope.get(name) is wrapper:
                    scope[name] = value
            self._installed.clear()

    def _wrapped(self, graph: Any, name: str, value: Any) -> Any:
        """``value`` counted when it is a compiled graph of the watched thread; else itself."""
        if self._hook.off or not name.startswith(_PREFIX) or threading.get_ident() != self.thread:
            return value
        try:
            self._hook.check()
            import torch

            compile_id = current_compile_id()
            runs = self.runs
            hook = self._hook

            def run(*args: Any, **kwargs: Any) -> Any:
                if not hook.off:
                    runs[compile_id] += 1
                return value(*args, **kwargs)

            # Disabled, as Dynamo's own value is: Dynamo must not compile this frame.
            wrapper = torch._dynamo.disable(run)
            self._installed.append((graph.global_scope, name, wrapper, value))
            return wrapper
        except Exception as err:  # noqa: BLE001 - never into the compile
            self._hook.failed(err)
            return value
