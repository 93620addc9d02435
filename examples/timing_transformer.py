"""Time a small transformer block: each captured graph and the whole block, eager vs Inductor.

Run it:  python examples/timing_transformer.py
On CPU, Inductor's gains differ from those on a GPU (see docs/timing.md).
"""

from __future__ import annotations

import torch
from torch import nn

import dynscope


class Block(nn.Module):
    """Pre-norm transformer block: attention + MLP, with one graph break in between."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        torch._dynamo.graph_break()  # split on purpose: two graphs to compare
        return x + self.mlp(self.norm2(x))


def main() -> dynscope.Report:
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(4, 32, 64)
    rep = dynscope.report(model, x, timing=True)
    print(rep)
    for g in rep.graphs:
        t = g.timing
        status = t.error if t.failed else f"{t.speedup:.2f}x, compile {t.compile_s:.1f} s, {t.kernels} kernels"
        print(f"graph {g.id} ({g.op_count} ops): {status}")
    return rep


if __name__ == "__main__":
    main()
