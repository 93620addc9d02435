"""Everything that knows a private PyTorch API or one of PyTorch's text formats.

Outside this package dynscope never imports a private torch name nor matches a torch text
format. Modules, one job each (every shim names the torch release it follows):

- ``logger``: the trace logger, compile ids and callbacks around compiles;
- ``sandbox``: Dynamo's process state read and put back (``DynamoSandbox``: code caches,
  skip marks, cached backends, counters, stance, config, code state), backends;
- ``inductor``: the Inductor calls (``compile_fx``, mode options, ``lowering_config``);
- ``user_model``: what a compiled model wraps, and its state put back after the calls;
- ``runtime``: the timing runtime (clock, samples, seeding, numerics) dynscope samples
  with and every standalone script carries verbatim (standard library and torch only);
- ``records``: the one registry of PyTorch's trace record kinds (kept or not, what of
  them, the parser of each); no other module names a kind;
- ``trace``: the trace collector, records read into ``TraceEvent``;
- ``metrics``: ``compilation_metrics`` read into ``CompileMetrics``;
- ``break_report``, ``guard_text``: the graph-break report and guard/recompile grammars;
- ``fx``: FX node metadata and the printed graph code;
- ``profiler``: the profiler's event names, the coverage recorder, kernel times, and
  whether the user's profiler is running;
- ``remedies``: applying a remedy for one isolated re-run (advise) and the code lines shown;
- ``lowering_text``: what AOTAutograd and Inductor log (printed graphs, output code,
  provenance, compile steps);
- ``registry``: PyTorch's graph-break registry and which files are the user's.

The plain-text rules about PyTorch's names and messages live in ``dynscope._lexicon``.

Callers use ``from dynscope import _torch`` and the names re-exported here.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule. Loaded on first use, so importing dynscope never imports torch.
_HOME = {
    "doc_url_for": "registry",
    "gb_id_for_type": "registry",
    "graph_break_registry": "registry",
    "is_user_file": "registry",
    "DynamoSandbox": "sandbox",
    "around_compiles": "logger",
    "attached": "logger",
    "interned_strings": "logger",
    "compile_kwargs": "sandbox",
    "compiled_parts": "user_model",
    "current_compile_id": "logger",
    "inductor_cache_dir": "inductor",
    "inductor_compile": "inductor",
    "kernel_count": "inductor",
    "kernel_times": "profiler",
    "lowering_config": "inductor",
    "lookup_backend": "sandbox",
    "mode_options": "inductor",
    "recording_inductor": "inductor",
    "profiler_running": "profiler",
    "restored_model_state": "user_model",
    "snapshot_state": "sandbox",
    "trace_logger": "logger",
    "unwrap_compiled": "user_model",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'dynscope._torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dynscope._torch.{home}"), name)
    globals()[name] = value
    return value
