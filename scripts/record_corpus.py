"""Record the structured trace of every corpus program as test data, for one torch release.

Standalone (torch, numpy and the repo's tests/corpus modules; no dynscope import) so it runs
in a side venv with another torch:

    /work/venv-2.14/bin/python scripts/record_corpus.py            # every corpus program
    /work/venv-2.14/bin/python scripts/record_corpus.py item_break # only these

Writes ``tests/traces/torch-<major.minor>/corpus-<program>.jsonl``: one
``{"metadata": ..., "payload": ...}`` line (sorted keys) per ``torch.__trace`` record that
dynscope keeps, in emission order. Each program is compiled as ``dynscope.report(model,
calls=calls)`` compiles it in tests/capture/test_corpus.py: ``torch.compile(model)`` with the default
``dynamic=None``, after ``torch._dynamo.reset()``. report() compiles with a recording
backend that delegates to "eager" (and ``isolate_recompiles=True`` where torch has it); the
trace events are the same as plain ``backend="eager"``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch._dynamo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

from record_payloads import collecting, json_safe  # noqa: E402 - the one trace collector

from tests.corpus.programs import PROGRAMS  # noqa: E402 - needs ROOT on sys.path

# Copied from dynscope/_torch/records.py (KEPT_EVENTS, KEPT_ARTIFACTS): this script cannot
# import dynscope, which may not be installed in the side venv. Keep the two in step.
KEPT_EVENTS = frozenset(
    {"dynamo_start", "dynamo_output_graph", "dynamo_cpp_guards_str", "compilation_metrics",
     "create_symbol",  # a dynamic size's symbol and the value it ran at (inputs of trace-only graphs)
     "optimize_ddp_split_child",  # a piece of a graph DDP's optimizer split (none in the corpus)
     "symbolic_shape_specialization", "guard_added_fast"}  # where sizes came from
)
KEPT_ARTIFACTS = frozenset({"dynamo_graph_break_reason", "recompile_reasons"})


def kept(metadata: Any) -> bool:
    """Whether dynscope's trace filter (dynscope._torch.trace.event_from) keeps a record."""
    if not isinstance(metadata, dict):
        return False
    if any(key in metadata for key in KEPT_EVENTS):
        return True
    artifact = metadata.get("artifact")
    return isinstance(artifact, dict) and artifact.get("name") in KEPT_ARTIFACTS


def _call(value: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) for one entry of ``calls``, by report()'s rule (capture._call_shape)."""
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    if isinstance(value, Mapping):
        return (), dict(value)
    raise TypeError(f"a corpus call must be a Tensor, tuple, list or dict; got {type(value).__name__}")


def main(argv: list[str]) -> int:
    """Record the chosen corpus programs (all when none are named)."""
    names = {p.name for p in PROGRAMS}
    unknown = sorted(set(argv[1:]) - names)
    if unknown:
        print(
            f"unknown corpus programs: {', '.join(unknown)}; known: {', '.join(sorted(names))}",
            file=sys.stderr,
        )
        return 2
    chosen = [p for p in PROGRAMS if not argv[1:] or p.name in argv[1:]]
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    folder = ROOT / "tests" / "traces" / f"torch-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    with collecting() as handler:
        for prog in chosen:
            torch._dynamo.reset()
            model, calls = prog.make()
            handler.records.clear()
            compiled = torch.compile(model, backend="eager")
            for value in calls:
                args, kwargs = _call(value)
                compiled(*args, **kwargs)
            lines = [
                json.dumps(
                    {"metadata": json_safe(metadata), "payload": getattr(rec, "payload", None)},
                    sort_keys=True,
                )
                for rec in handler.records
                if kept(metadata := getattr(rec, "metadata", None))
            ]
            path = folder / f"corpus-{prog.name}.jsonl"
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
            print(f"{prog.name}: {len(lines)} of {len(handler.records)} records -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
