"""Below Dynamo: a training step's forward and backward kernels, timed.

Run it:  python examples/lowering_training.py [OUT_FOLDER]   (default ./lowering-report)

dynscope.report(timing=True) builds each captured graph with Inductor, profiles the build,
and fills ``Graph.lowering``: AOTAutograd's forward and backward graphs, what the forward
saves for the backward, and each kernel with its time, the ATen ops fused into it and the
lines of this file they came from. The report folder shows the same as a page.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

import dynscope


class Mlp(nn.Module):
    """Two layers with a LayerNorm between them."""

    def __init__(self, dim: int = 128, hidden: int = 256) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


def main(out: str = "lowering-report") -> dynscope.Report:
    torch.manual_seed(0)
    model = Mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()  # a graph break: the compiled graph above trains
        opt.step()
        opt.zero_grad()
        return loss

    fast = dynscope.TimingOptions(end_to_end=False, warmup=1, repeats=5, min_time_s=0.05, min_sample_ms=2.0)
    rep = dynscope.report(step, torch.randn(256, 128), timing=True, timing_options=fast)
    for g in rep.graphs:
        low = g.lowering
        if low is None:
            continue
        fwd = sum(1 for k in low.kernels if k.graph != "backward")
        bwd = sum(1 for k in low.kernels if k.graph == "backward")
        print(f"graph {g.id}: {fwd} forward kernels, {bwd} backward kernels, mapped {low.mapped_share:.0%}")
        saved = low.saved_for_backward
        if saved is not None:
            print(f"  saved for backward: {saved.count} tensors, {saved.bytes} bytes")
        for k in low.kernels_by_time()[:3]:
            ms = f"{k.time_ms:.3f} ms" if k.time_ms is not None else "untimed"
            print(f"  {k.name} ({k.kind}, {k.graph}): {ms}")
            lines = ", ".join(f"{Path(f).name}:{n}" for f, n in k.source_lines)
            print(f"    fuses {', '.join(k.aten_ops) or '-'}; from {lines or '-'}")
    folder = rep.render(out)
    print(f"report written to {folder}")
    return rep


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "lowering-report")
