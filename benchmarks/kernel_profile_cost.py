"""What does Inductor's C++ kernel profile cost the code dynscope times?

    .venv/bin/python benchmarks/kernel_profile_cost.py

dynscope builds the graphs it times with ``cpp.enable_kernel_profile`` (so the profiler
sees each C++ kernel by name, for Graph.lowering). Outside a profiler that adds one
``RECORD_FUNCTION`` check per kernel call. Here the same captured graphs are built twice,
with and without it, and timed interleaved by dynscope's own timer, side by side in one run.
Prints each graph's medians and the ratio (with / without); 1.00 means no cost.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dynscope import TimingOptions
from dynscope._capture.backend import RecordingBackend
from dynscope._capture.sampling import Clock as _Clock
from dynscope._capture.sampling import interleaved

if TYPE_CHECKING:
    from collections.abc import Callable


def graphs() -> list[tuple[str, torch.fx.GraphModule, list[torch.Tensor]]]:
    torch.manual_seed(0)
    models = [
        ("mlp 4x8 (tiny: overhead-bound)", nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)), torch.randn(4, 8)),
        ("mlp 512x256", nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 256)), torch.randn(512, 256)),
        ("layernorm+softmax 64x512", nn.Sequential(nn.LayerNorm(512), nn.Softmax(-1)), torch.randn(64, 512)),
        ("elementwise chain 1M", nn.Sequential(nn.Tanh(), nn.Sigmoid(), nn.SiLU()), torch.randn(1024, 1024)),
    ]
    out = []
    for name, model, x in models:
        rec = RecordingBackend("eager")
        rec.keep_inputs = True
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model.eval(), backend=rec)(x)
        g = rec.graphs[0]
        out.append((name, g.module, list(g.example_inputs)))
    return out


def _call(fn: Callable[..., object], inputs: list[torch.Tensor]) -> Callable[[], object]:
    return lambda: fn(*inputs)


def main() -> int:
    from torch._inductor.compile_fx import compile_fx

    opts = TimingOptions(repeats=30, min_time_s=0.5)
    clock = _Clock("cpu")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'graph':34} {'without ms':>10} {'with ms':>10} {'ratio':>6}")
    for name, gm, inputs in graphs():
        with torch.no_grad():
            plain = compile_fx(copy.deepcopy(gm), inputs)
            with torch._inductor.config.patch({"cpp.enable_kernel_profile": True}):
                profiled = compile_fx(copy.deepcopy(gm), inputs)
            a, b = interleaved(_call(plain, inputs), _call(profiled, inputs), clock, opts)
        print(f"{name:34} {a.median:>10.4f} {b.median:>10.4f} {b.median / a.median:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
