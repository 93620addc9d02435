"""``compilation_metrics`` trace events read into a typed record, once.

Keys as torch 2.11 .. 2.14 emit them (``torch._dynamo.utils.CompilationMetrics``). Every
field is optional in the event; a missing or null one reads as empty. ``num_graph_breaks``
is not read: it was always null in our recordings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompileMetrics:
    """What PyTorch says about one frame compile."""

    co_name: str = ""  # the code object's name ("forward", "torch_dynamo_resume_in_...")
    co_filename: str = ""
    co_firstlineno: int = 0
    total_s: float = 0.0  # entire_frame_compile_time_s
    backend_s: float = 0.0  # backend_compile_time_s
    inductor_s: float = 0.0  # inductor_compile_time_s
    guard_count: int = 0
    op_count: int = 0  # graph_op_count
    node_count: int = 0  # graph_node_count
    fail_type: str = ""  # e.g. "Unsupported"; "" when the compile succeeded
    fail_reason: str = ""
    restarts: int = 0  # len(restart_reasons)
    recompile_reason: str = ""  # older torch: the reason text when no artifact was logged
    pytorch_version: str = ""  # the torch release that compiled


def read_metrics(m: dict[str, Any]) -> CompileMetrics:
    """The typed record of one ``compilation_metrics`` event's metadata."""
    return CompileMetrics(
        co_name=str(m.get("co_name") or ""),
        co_filename=str(m.get("co_filename") or ""),
        co_firstlineno=int(m.get("co_firstlineno") or 0),
        total_s=float(m.get("entire_frame_compile_time_s") or 0.0),
        backend_s=float(m.get("backend_compile_time_s") or 0.0),
        inductor_s=float(m.get("inductor_compile_time_s") or 0.0),
        guard_count=int(m.get("guard_count") or 0),
        op_count=int(m.get("graph_op_count") or 0),
        node_count=int(m.get("graph_node_count") or 0),
        fail_type=str(m.get("fail_type") or ""),
        fail_reason=str(m.get("fail_reason") or ""),
        restarts=len(m.get("restart_reasons") or ()),
        recompile_reason=str(m.get("recompile_reason") or ""),
        pytorch_version=str(m.get("pytorch_version") or ""),
    )
