"""How long do pictures take as graphs grow? DOT generation and dot layout, separately.

Tiny MLP stacks of growing depth (Linear + ReLU per layer, so about 2 nodes per layer plus
parameter inputs); each graph is captured for real with dynscope.report.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dynscope
from dynscope._render.svg import dot_to_svg


def stack(depth: int) -> nn.Module:
    return nn.Sequential(*[m for _ in range(depth) for m in (nn.Linear(8, 8), nn.ReLU())])


def main() -> None:
    print(f"{'target nodes':>12s} {'nodes':>6s} {'dot s':>7s} {'layout s':>9s} {'svg KB':>7s} {'collapsed':>9s}")
    for target in (100, 1000, 2000, 5000):
        depth = max(1, target // 4)  # linear + relu + weight + bias placeholders per layer
        rep = dynscope.report(stack(depth), torch.randn(2, 8), coverage=False)
        graph = rep.graphs[0]
        start = time.perf_counter()
        dot = graph.to_dot()
        t_dot = time.perf_counter() - start
        start = time.perf_counter()
        svg = dot_to_svg(dot)
        t_layout = time.perf_counter() - start
        collapsed = "yes" if "drawn at module level" in dot else "no"
        print(f"{target:12d} {graph.node_count:6d} {t_dot:7.3f} {t_layout:9.2f} {len(svg) / 1024:7.0f} {collapsed:>9s}")


if __name__ == "__main__":
    main()
