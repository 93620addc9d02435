"""How much does dynscope.report cost next to torch._dynamo.explain and a plain compile?

Each model, in one run, side by side, each measurement after torch._dynamo.reset(), the
three run in turn each round (REPEATS rounds) so machine noise hits them alike:
  - dynscope.report(model, x)
  - torch._dynamo.explain(model)(x)
  - torch.compile(model, backend="eager")(x)  (first call: compile + run)
Prints medians over REPEATS and the ratios. Target: report / explain <= 1.25 on models
of 50+ ops.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from typing import TYPE_CHECKING

import dynscope
from examples.quickstart import TinyTransformer

if TYPE_CHECKING:
    from collections.abc import Callable

REPEATS = 7


class DeepMLP(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()) for _ in range(depth)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class BrokenMLP(DeepMLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = len(self.layers) // 2
        x = self.layers[:half](x)
        print("", end="")  # one graph break in the middle
        return self.layers[half:](x)


def _interleaved(fns: list[Callable[[], object]]) -> list[float]:
    """Median seconds of each function, run in turn each round so drift hits all alike."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(REPEATS):
        for i, fn in enumerate(fns):
            torch._dynamo.reset()
            start = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - start)
    return [statistics.median(s) for s in samples]


def main() -> None:
    models = [
        ("mlp x20 (60 ops)", DeepMLP(20), torch.randn(8, 64)),
        ("mlp x40, 1 break (120 ops)", BrokenMLP(40), torch.randn(8, 64)),
        ("tiny transformer (breaks)", TinyTransformer(), torch.randn(2, 8, 32)),
    ]
    rows = []
    for name, model, x in models:
        ops = dynscope.report(model, x)
        n_ops = sum(g.op_count for g in ops.graphs)
        t_report, t_explain, t_eager = _interleaved([
            lambda m=model, x=x: dynscope.report(m, x),
            lambda m=model, x=x: torch._dynamo.explain(m)(x),
            lambda m=model, x=x: torch.compile(m, backend="eager")(x),
        ])
        rows.append((name, n_ops, t_report, t_explain, t_eager))
    print(f"{'model':28s} {'ops':>5s} {'report s':>9s} {'explain s':>9s} {'compile s':>9s} {'rep/expl':>9s} {'rep/comp':>9s}")
    for name, n_ops, r, e, c in rows:
        print(f"{name:28s} {n_ops:5d} {r:9.3f} {e:9.3f} {c:9.3f} {r / e:9.2f} {r / c:9.2f}")
    worst = max(r / e for _, n, r, e, _ in rows if n >= 50)
    print(f"worst report/explain on 50+ op models: {worst:.2f}x (target <= 1.25x)")


if __name__ == "__main__":
    main()
