"""Programs whose file imports torch under another name (``import torch as th``, as OpenAI's
diffusion code writes it), for ``dynscope.fix``: its rewrites are made with torch read by its
own name and written back as ``th`` (dynscope/_capture/fix/aliases.py).

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break site
carries ``# SITE: <rewrite>``. Imports only torch (as ``th``) and the standard library: fix
imports patched copies of it.
"""

from __future__ import annotations

from typing import Any

import torch as th
from torch import nn


class DenoiseStep(nn.Module):
    """One reverse step of a diffusion sampler (in our words): the schedule read at the 0-dim
    timestep, the previous step's at ``t - 1`` where there is one, noise added only while
    ``t > 0``."""

    def __init__(self, steps: int = 10) -> None:
        super().__init__()
        betas = th.linspace(1e-4, 0.02, steps)
        self.register_buffer("alphas_cumprod", th.cumprod(1 - betas, dim=0))
        self.register_buffer("one", th.tensor(1.0))
        self.eps = nn.Conv1d(2, 2, 3, padding=1)

    def forward(self, x: th.Tensor, t: th.Tensor, noise: th.Tensor) -> th.Tensor:
        prev_t = t - 1
        alpha_t = self.alphas_cumprod[t]  # a 0-dim input indexes without a break
        alpha_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one  # SITE: conditional expression to torch.where, then index by a one-element tensor
        eps = self.eps(x)
        x0 = (x - (1 - alpha_t).sqrt() * eps) / alpha_t.sqrt()
        mean = alpha_prev.sqrt() * x0 + (1 - alpha_prev).sqrt() * eps
        return mean + (t > 0).float() * 0.1 * noise


def denoise_step() -> tuple[nn.Module, tuple[th.Tensor, th.Tensor, th.Tensor]]:
    th.manual_seed(929)
    return DenoiseStep(), (th.randn(2, 2, 8), th.tensor(4), th.randn(2, 2, 8))


PROGRAMS: dict[str, Any] = {"denoise_step": denoise_step}
