"""Quickstart: a small model with three kinds of graph breaks and a recompile.

Run it:  python examples/quickstart.py [OUT_DIR]
It prints dynscope's report and writes it (report.json, summary.txt, and the HTML page
with pictures when Graphviz is installed) to OUT_DIR (default: dynscope-report/).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

import dynscope


class Attention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        if scores.max() > 50:  # data-dependent branch: Dynamo cannot trace this `if`
            scores = scores.clamp(max=50)
        return x + self.out(scores.softmax(-1) @ v)


class TinyTransformer(nn.Module):
    def __init__(self, dim: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(Attention(dim) for _ in range(depth)))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.blocks(x))
        print(f"features ready: {tuple(x.shape)}")  # print: a logging side effect
        logits = self.head(x)
        temperature = logits.abs().mean().item()  # .item(): a tensor value leaves the graph
        return logits / max(temperature, 1e-3)


def build() -> tuple[nn.Module, dict[str, list[torch.Tensor]]]:
    """The model and its calls; the second batch has another length, so it recompiles.

    ``dynscope report examples/quickstart.py:build`` uses this too.
    """
    torch.manual_seed(0)
    return TinyTransformer(), {"calls": [torch.randn(2, 8, 32), torch.randn(2, 12, 32)]}


def main(out_dir: str = "dynscope-report") -> dynscope.Report:
    model, calls = build()
    rep = dynscope.report(model, **calls)
    print(rep)
    folder = rep.render(out_dir)
    print(f"report written to {folder.resolve()}/")
    return rep


if __name__ == "__main__":
    main(*sys.argv[1:2])
