"""PyTorch's own answers to questions a test needs settled on the installed torch, asked
without dynscope (a counting backend), so a test can hold dynscope to what PyTorch does."""

from __future__ import annotations

from typing import Any

from tests.corpus.programs import log, logger_fn


def logger_methods_reorder() -> bool:
    """PyTorch's own answer, asked without dynscope: with ``log.info`` in
    reorderable_logging_functions, does torch.compile of :func:`logger_fn` make one graph
    (no break)? Newer releases (2.15) reorder Logger methods; 2.14 and older do not."""
    import torch._dynamo

    graphs = 0

    def counting(gm: torch.fx.GraphModule, _inputs: list[torch.Tensor]) -> Any:
        nonlocal graphs
        graphs += 1
        return gm.forward

    torch.compiler.reset()
    try:
        with torch._dynamo.config.patch(reorderable_logging_functions={log.info}):
            torch.compile(logger_fn, backend=counting)(torch.randn(4, 8))
    finally:
        torch.compiler.reset()
    return graphs == 1
