"""Diffusion samplers: a diffusers-style DDIM scheduler with Imagen dynamic thresholding driven by a
classifier-free-guided noise model, and a k-diffusion-style Heun sampler over Karras sigmas with EDM
preconditioning."""

from __future__ import annotations

import torch
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- DDIM + CFG + dynamic thresholding


class DDIMScheduler:
    def __init__(self, num_train_timesteps: int = 100, num_inference_steps: int = 5,
                 dynamic_thresholding_ratio: float = 0.9, sample_max_value: float = 1.5) -> None:
        betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
        self.final_alpha_cumprod = torch.tensor(1.0)
        self.step_ratio = num_train_timesteps // num_inference_steps
        self.timesteps = (torch.arange(0, num_inference_steps) * self.step_ratio).flip(0)
        self.dynamic_thresholding_ratio = dynamic_thresholding_ratio
        self.sample_max_value = sample_max_value

    def _threshold_sample(self, sample: torch.Tensor) -> torch.Tensor:
        """Per sample: s = the ratio-quantile of |x0|, clamped to [1, max]; clip x0 to [-s, s] and divide by s."""
        b = sample.shape[0]
        s = torch.quantile(sample.abs().reshape(b, -1), self.dynamic_thresholding_ratio, dim=1)
        out = []
        for i in range(b):
            s_i = min(max(float(s[i]), 1.0), self.sample_max_value)  # BREAK: s.clamp(1, max).detach() as a (B, 1) tensor and torch.clamp(sample, -s, s) / s for the whole batch
            out.append(sample[i].clamp(-s_i, s_i) / s_i)
        return torch.stack(out)

    def step(self, model_output: torch.Tensor, timestep: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
        prev_timestep = timestep - self.step_ratio
        alpha_prod_t = self.alphas_cumprod[timestep]  # BREAK: a 0-d tensor index is read on the host; index with a 1-element tensor (index_select) instead
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod  # BREAK: torch.where(prev_timestep >= 0, <alphas_cumprod at prev_timestep.clamp(min=0) via index_select>, final_alpha_cumprod)
        beta_prod_t = 1 - alpha_prod_t
        pred_x0 = (sample - beta_prod_t**0.5 * model_output) / alpha_prod_t**0.5
        pred_x0 = self._threshold_sample(pred_x0)
        pred_eps = (sample - alpha_prod_t**0.5 * pred_x0) / beta_prod_t**0.5
        return alpha_prod_t_prev**0.5 * pred_x0 + (1 - alpha_prod_t_prev) ** 0.5 * pred_eps


class EpsNet(nn.Module):
    def __init__(self, dim: int = 8, n_classes: int = 4, d: int = 32) -> None:
        super().__init__()
        self.class_emb = nn.Embedding(n_classes + 1, d)  # the last row is the null (unconditional) class
        self.inp = nn.Linear(dim + 1, d)
        self.out = nn.Sequential(nn.SiLU(), nn.Linear(d, d), nn.SiLU(), nn.Linear(d, dim))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        t_feat = (t.float() / 100.0).expand(x.shape[0], 1)
        return self.out(self.inp(torch.cat([x, t_feat], -1)) + self.class_emb(cls))


class CFGSampler(nn.Module):
    def __init__(self, guidance_scale: float = 3.0) -> None:
        super().__init__()
        self.eps_net = EpsNet()
        self.scheduler = DDIMScheduler()
        self.guidance_scale = guidance_scale
        self.null_class = 4

    def forward(self, noise: torch.Tensor, cls: torch.Tensor) -> torch.Tensor:
        x = noise
        null = torch.full_like(cls, self.null_class)
        for t in self.scheduler.timesteps:
            eps_c = self.eps_net(x, t, cls)
            eps_u = self.eps_net(x, t, null)
            eps = eps_u + self.guidance_scale * (eps_c - eps_u)
            x = self.scheduler.step(eps, t, x)
        return x


def build_ddim_cfg() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(150)
    model = CFGSampler()
    g = seeded(151)
    return model, (torch.randn(3, 8, generator=g), torch.tensor([0, 2, 3]))


# --------------------------------------------------------------------------- Heun over Karras sigmas


def karras_sigmas(n: int, sigma_min: float = 0.02, sigma_max: float = 20.0, rho: float = 7.0) -> torch.Tensor:
    ramp = torch.linspace(0, 1, n)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    sigmas = (hi + ramp * (lo - hi)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros(1)])


class EDMDenoiser(nn.Module):
    """D(x; sigma) with Karras et al. (2022) preconditioning around a small MLP."""

    def __init__(self, dim: int = 2, sigma_data: float = 0.5) -> None:
        super().__init__()
        self.sigma_data = sigma_data
        self.net = nn.Sequential(nn.Linear(dim + 1, 32), nn.SiLU(), nn.Linear(32, 32), nn.SiLU(), nn.Linear(32, dim))

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        sd2 = self.sigma_data**2
        c_skip = sd2 / (sigma**2 + sd2)
        c_out = sigma * self.sigma_data / (sigma**2 + sd2).sqrt()
        c_in = 1 / (sigma**2 + sd2).sqrt()
        c_noise = (sigma.log() / 4).expand(x.shape[0], 1)
        return c_skip * x + c_out * self.net(torch.cat([c_in * x, c_noise], -1))


class HeunSampler(nn.Module):
    def __init__(self, steps: int = 6) -> None:
        super().__init__()
        self.denoiser = EDMDenoiser()
        self.register_buffer("sigmas", karras_sigmas(steps))

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        x = noise * self.sigmas[0]
        for i in range(len(self.sigmas) - 1):
            s_cur, s_next = self.sigmas[i], self.sigmas[i + 1]
            denoised = self.denoiser(x, s_cur)
            d = (x - denoised) / s_cur
            dt = s_next - s_cur
            if s_next == 0:  # BREAK: compute the Heun correction at a safe sigma (s_cur where s_next is 0) and pick Euler or Heun with torch.where
                x = x + d * dt  # Euler on the last step
            else:
                x_2 = x + d * dt
                d_2 = (x_2 - self.denoiser(x_2, s_next)) / s_next
                x = x + (d + d_2) / 2 * dt
        return x


def build_karras_heun() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(152)
    model = HeunSampler()
    return model, torch.randn(16, 2, generator=seeded(153))

