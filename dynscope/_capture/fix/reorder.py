"""Whether the installed PyTorch reorders a ``logging.Logger`` method when it is in
``torch._dynamo.config.reorderable_logging_functions`` (Dynamo then calls it after the graph
instead of breaking there), found by trying it: a tiny function that calls a logger's method
is compiled with the method's function in the set, and the break must be gone. Torch 2.13 and
2.14 route Logger methods through their own logger handling, which honours the set for plain
functions only; newer releases reorder the methods too. Asked once per method per process.
"""

from __future__ import annotations

import logging
from functools import lru_cache

__all__ = ["logger_call_method", "logger_reorder_note"]

_METHODS = ("debug", "info", "warning", "warn", "error", "critical", "exception", "log", "fatal")


def logger_call_method(source: str) -> str:
    """The ``logging.Logger`` method a statement calls (``logger.warning(...)`` -> "warning"),
    "" when it calls none (a module function such as ``logging.info`` is not a method)."""
    import ast

    try:
        tree = ast.parse(source.strip())
    except SyntaxError:
        return ""
    body = tree.body[0] if len(tree.body) == 1 else None
    if not isinstance(body, ast.Expr) or not isinstance(body.value, ast.Call):
        return ""
    f = body.value.func
    if (isinstance(f, ast.Attribute) and f.attr in _METHODS
            and not (isinstance(f.value, ast.Name) and f.value.id == "logging")):
        return f.attr
    return ""


@lru_cache(maxsize=16)
def reorders_logger_method(method: str) -> bool:
    """Whether this PyTorch, with ``logging.Logger.<method>`` in
    reorderable_logging_functions, compiles a call of a logger's ``method`` without a break
    (a live compile of a two-line function, in dynscope's sandbox)."""
    import torch

    from dynscope._torch.remedies import dynamo_config, has_dynamo_option
    from dynscope._torch.sandbox import DynamoSandbox
    from dynscope._torch.trace import own_work

    if not has_dynamo_option("reorderable_logging_functions"):
        return False
    probe = logging.getLogger("dynscope.reorder_probe")
    probe.addHandler(logging.NullHandler())
    probe.propagate = False
    fn = getattr(logging.Logger, method)

    def call(x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        getattr(probe, method)("probe %s", "x") if method != "log" else probe.log(logging.INFO, "probe")
        return y * 2

    graphs: list[int] = []

    def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> object:
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    try:
        with DynamoSandbox(call) as sandbox, own_work(), dynamo_config(reorderable_logging_functions={fn}):
            sandbox.own(counting)
            compiled = torch.compile(call, backend=counting)
            sandbox.own(compiled)
            compiled(torch.ones(2))
    except Exception:  # noqa: BLE001 - the probe failed: say "not supported", never raise into fix
        return False
    return len(graphs) == 1  # one graph: no break at the logger call


def logger_reorder_note(source: str) -> str:
    """What fix says beside a guarded logger call: whether this PyTorch would reorder it
    instead (tried live), and the line that does; "" for a statement that calls no Logger
    method."""
    import torch

    method = logger_call_method(source)
    if not method:
        return ""
    version = torch.__version__.split("+")[0]
    if reorders_logger_method(method):
        return (f"PyTorch {version} reorders logging.Logger.{method} (tried): instead of the guard, "
                f"`torch._dynamo.config.reorderable_logging_functions.add(logging.Logger.{method})` "
                "keeps the message under torch.compile (Dynamo logs it after the graph)")
    return (f"PyTorch {version} does not reorder logging.Logger.{method} (tried with it in "
            "reorderable_logging_functions: the break stays), so the call is guarded; newer PyTorch "
            "releases reorder Logger methods")
