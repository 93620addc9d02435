"""Record what AOTAutograd and Inductor log for three tiny programs, as test data.

    CUDA_VISIBLE_DEVICES="" PYTHONPATH=. /work/venv-2.14/bin/python scripts/record_lowering.py

writes ``tests/traces/torch-<major.minor>/lowering/<program>.json`` for each program below,
compiled with the default Inductor backend while a ``TraceCollector`` watching lowering is
attached and Inductor's provenance tracking is on (``lowering_config(kernel_profile=False)``,
as ``dynscope.capture()`` sets it). Inductor's caches live in a fresh temporary folder, so
every compile is a miss and logs everything.

Each file is ``{"command", "torch", "program", "records"}``; ``records`` holds the kept trace
records in arrival order, each ``{"metadata": ..., "payload": ...}`` as PyTorch logged it
(the layout of the other stored traces; cache-key payloads are dropped, as the collector
drops them). tests/read/test_lowering.py rebuilds events from them with
``event_from(..., lowering=True)`` and builds reports without compiling anything.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

# A fresh cache before torch reads its config: every compile is a miss, the events complete.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="dynscope-lowering-")

import torch
import torch._dynamo
from torch import nn

from dynscope import _torch
from dynscope._torch.trace import TraceCollector, event_from

if TYPE_CHECKING:
    import logging
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
COMMAND = 'CUDA_VISIBLE_DEVICES="" PYTHONPATH=. <venv>/bin/python scripts/record_lowering.py'


class _RawCollector(TraceCollector):
    """A lowering collector that also keeps each kept record as logged (metadata, payload)."""

    def __init__(self) -> None:
        super().__init__()
        self.lowering = True
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        metadata = getattr(record, "metadata", None)
        event = event_from(metadata, getattr(record, "payload", None), lowering=True)
        if event is None:
            return
        self.events.append(event)
        self.records.append({"metadata": metadata, "payload": event.payload or None})


# --- programs ---------------------------------------------------------------------------


def prog_mlp_infer() -> None:
    """An inference MLP with LayerNorm (no autograd: one inference graph)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 8))
    with torch.no_grad():
        torch.compile(model)(torch.randn(4, 16))


def prog_train_step() -> None:
    """A training step: forward and loss in the compiled function, backward() after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(model(x), y)

    loss = torch.compile(step)(torch.randn(8, 16), torch.randn(8, 4))
    loss.backward()  # AOTAutograd compiles the backward here


def prog_sort_conv() -> None:
    """A Conv2d (an extern kernel) and torch.sort (an op Inductor leaves to ATen on CPU)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3)

    def f(x: torch.Tensor) -> torch.Tensor:
        y = conv(x).relu().flatten(1)
        values, _ = torch.sort(y, dim=1)
        return values[:, :5] * 2

    with torch.no_grad():
        torch.compile(f)(torch.randn(2, 3, 8, 8))


def prog_dynamic() -> None:
    """A dynamic-shape graph: its AOT graph takes a SymInt (the batch size) as an input."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * x.shape[0]).sum(dim=1)

    with torch.no_grad():
        torch.compile(f, dynamic=True)(torch.randn(6, 4))


PROGRAMS: dict[str, Callable[[], None]] = {
    "mlp_infer": prog_mlp_infer,
    "train_step": prog_train_step,
    "sort_conv": prog_sort_conv,
    "dynamic": prog_dynamic,
}


def main(argv: list[str]) -> int:
    names = argv[1:] or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        print(f"unknown program(s) {unknown}; choose from {sorted(PROGRAMS)}", file=sys.stderr)
        return 2
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    folder = ROOT / "tests" / "traces" / f"torch-{version}" / "lowering"
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        torch._dynamo.reset()
        collector = _RawCollector()
        with _torch.attached(collector), _torch.lowering_config(kernel_profile=False) as missing:
            PROGRAMS[name]()
        if missing:
            print(f"{name}: this torch lacks Inductor setting(s) {missing}", file=sys.stderr)
        out = {
            "command": COMMAND,
            "torch": str(torch.__version__),
            "program": name,
            "records": collector.records,
        }
        path = folder / f"{name}.json"
        path.write_text(json.dumps(out, sort_keys=True) + "\n", encoding="utf-8")
        print(f"{name}: {len(collector.records)} records -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
