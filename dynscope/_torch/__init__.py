"""Everything that knows a private PyTorch API or one of PyTorch's text formats.

Outside this package dynscope never imports a private torch name nor matches a torch text
format. Modules, one job each (every shim names the torch release it follows):

- ``runtime``: the trace logger, compile ids, backends, Dynamo's caches and process state
  (``DynamoSandbox``), Inductor calls, the user's profiler and model state;
- ``trace``: the trace collector, records read into ``TraceEvent``;
- ``metrics``: ``compilation_metrics`` read into ``CompileMetrics``;
- ``break_text``, ``guard_text``: the graph-break report and guard/recompile grammars;
- ``fx``: FX node metadata and the printed graph code;
- ``profiler``: the profiler's event names, the coverage recorder and kernel times;
- ``remedies``: applying a remedy for one isolated re-run (advise) and the code lines shown;
- ``lowering_text``: what AOTAutograd and Inductor log (printed graphs, output code,
  provenance, compile steps);
- ``registry``: PyTorch's graph-break registry and which files are the user's;
- ``wording``: rules about Dynamo's wording and generated names.

Callers use ``from dynscope import _torch`` and the names re-exported here.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule. Loaded on first use, so importing a torch-free part of this package
# (wording, break_kinds) or dynscope itself never imports torch.
_HOME = {
    "doc_url_for": "registry",
    "gb_id_for_type": "registry",
    "graph_break_registry": "registry",
    "is_user_file": "registry",
    "DynamoSandbox": "runtime",
    "around_compiles": "runtime",
    "attached": "runtime",
    "compile_kwargs": "runtime",
    "current_compile_id": "runtime",
    "inductor_cache_dir": "runtime",
    "inductor_compile": "runtime",
    "kernel_count": "runtime",
    "kernel_times": "profiler",
    "lowering_config": "runtime",
    "lookup_backend": "runtime",
    "mode_options": "runtime",
    "profiler_running": "runtime",
    "restored_model_state": "runtime",
    "snapshot_state": "runtime",
    "trace_logger": "runtime",
    "unwrap_compiled": "runtime",
    "is_recompile_limit": "wording",
    "is_secondary_break": "wording",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'dynscope._torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dynscope._torch.{home}"), name)
    globals()[name] = value
    return value
