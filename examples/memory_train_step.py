"""What compile did to memory on a small transformer's train step (docs/memory.md).

Run: python examples/memory_train_step.py
Prints each graph's peak memory eager against compiled (forward+backward for the training
graph), what the forward saves for the backward, the ops AOTAutograd recomputes instead of
saving, and the whole step's peak. One Inductor compile of the step.
"""

from __future__ import annotations

import torch

import dynscope


class Block(torch.nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> dynscope.Report:
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, 128, (8, 32))

    def train_step(tokens: torch.Tensor) -> torch.Tensor:
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    rep = dynscope.report(train_step, tokens, memory=True)
    for g in rep.graphs:
        m = g.memory
        if m is None or m.error:
            continue
        eager, compiled = m.peak
        line = f"graph {g.id} ({'fwd+bwd' if m.trains else 'forward'}): eager {eager} B, compiled {compiled} B, {m.ratio:.2f}x"
        if m.trains and g.lowering is not None:
            line += f"; saved {m.eager_saved} B eager, {m.compiled_saved} B compiled; {len(g.lowering.recomputed)} ops recomputed"
        print(line)
    if rep.memory is not None:
        print(f"whole step: eager {rep.memory.eager_peak} B, compiled {rep.memory.compiled_peak} B ({rep.memory.method})")
    return rep


if __name__ == "__main__":
    main()
