"""Diffusion sampling in the shape of diffusers' schedulers: one DDPM step, a DDIM loop."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import timestep_embedding


class TinyEpsModel(nn.Module):
    """Predicts the noise in x_t; a stand-in for a UNet."""

    def __init__(self, dim: int = 8, hidden: int = 32, temb_dim: int = 16) -> None:
        super().__init__()
        self.temb_dim = temb_dim
        self.time_mlp = nn.Sequential(nn.Linear(temb_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.inp = nn.Linear(dim, hidden)
        self.mid = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) + self.time_mlp(timestep_embedding(t, self.temb_dim))
        h = self.mid(F.silu(h))
        return self.out(F.silu(h))


class DDPMScheduler:
    def __init__(self, num_train_timesteps: int = 50, beta_start: float = 1e-4, beta_end: float = 0.02,
                 clip_sample: bool = True) -> None:
        self.num_train_timesteps = num_train_timesteps
        self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps)
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        self.one = torch.tensor(1.0)
        self.clip_sample = clip_sample

    def step(self, model_output: torch.Tensor, timestep: torch.Tensor, sample: torch.Tensor,
             noise: torch.Tensor) -> torch.Tensor:
        t = int(timestep)  # BREAK: index the schedule with the 0-d tensor and choose the t == 0 cases with torch.where
        prev_t = t - 1

        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one
        beta_prod_t = 1 - alpha_prod_t
        beta_prod_t_prev = 1 - alpha_prod_t_prev
        current_alpha_t = alpha_prod_t / alpha_prod_t_prev
        current_beta_t = 1 - current_alpha_t

        pred_original_sample = (sample - beta_prod_t ** 0.5 * model_output) / alpha_prod_t ** 0.5
        if self.clip_sample:
            pred_original_sample = pred_original_sample.clamp(-1.0, 1.0)

        pred_original_sample_coeff = (alpha_prod_t_prev ** 0.5 * current_beta_t) / beta_prod_t
        current_sample_coeff = current_alpha_t ** 0.5 * beta_prod_t_prev / beta_prod_t
        pred_prev_sample = pred_original_sample_coeff * pred_original_sample + current_sample_coeff * sample

        if t > 0:
            variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * current_beta_t
            variance = torch.clamp(variance, min=1e-20)
            pred_prev_sample = pred_prev_sample + variance ** 0.5 * noise
        return pred_prev_sample


class DDPMStep(nn.Module):
    """One reverse step, as a sampling loop calls it (the loop feeds it fresh noise)."""

    def __init__(self) -> None:
        super().__init__()
        self.unet = TinyEpsModel()
        self.scheduler = DDPMScheduler()

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        eps = self.unet(sample, timestep.expand(sample.shape[0]))
        if torch.isnan(eps).any():  # BREAK: the check only raises; an assert on the tensor (or _assert_async) keeps it inside the graph
            raise FloatingPointError(f"NaN in the model output at timestep {timestep}")
        return self.scheduler.step(eps, timestep, sample, noise)


def build_ddpm_step():
    torch.manual_seed(0)
    model = DDPMStep()
    sample = torch.randn(4, 8)
    noise = torch.randn(4, 8)
    return model, (sample, torch.tensor(17), noise)


class DDIMSampler(nn.Module):
    """Deterministic DDIM (eta = 0) over a handful of inference steps."""

    def __init__(self, num_train_timesteps: int = 50, num_inference_steps: int = 5) -> None:
        super().__init__()
        self.unet = TinyEpsModel()
        betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.register_buffer("alphas_cumprod", torch.cumprod(1.0 - betas, dim=0))
        self.register_buffer("final_alpha_cumprod", torch.tensor(1.0))
        self.step_ratio = num_train_timesteps // num_inference_steps
        self.register_buffer("timesteps", (torch.arange(num_inference_steps) * self.step_ratio).flip(0) + 1)

    def step(self, model_output: torch.Tensor, timestep: torch.Tensor, sample: torch.Tensor):
        prev_timestep = timestep - self.step_ratio
        alpha_prod_t = self.alphas_cumprod[timestep]  # BREAK: indexing with a 0-d tensor reads it; index_select with timestep.view(1) gathers the same alpha
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod  # BREAK: torch.where on prev_timestep >= 0 (indexing at the clamped step) picks the same alpha
        beta_prod_t = 1 - alpha_prod_t
        pred_original_sample = (sample - beta_prod_t ** 0.5 * model_output) / alpha_prod_t ** 0.5
        pred_sample_direction = (1 - alpha_prod_t_prev) ** 0.5 * model_output
        prev_sample = alpha_prod_t_prev ** 0.5 * pred_original_sample + pred_sample_direction
        return prev_sample, pred_original_sample

    def progress(self, i: int, pred_original_sample: torch.Tensor) -> dict:
        return {"step": i, "x0_norm": pred_original_sample.norm().item()}  # BREAK must-not: the progress bar gets a Python float per step, and it is returned

    def forward(self, latents: torch.Tensor):
        history = []
        for i, t in enumerate(self.timesteps):
            eps = self.unet(latents, t.expand(latents.shape[0]))
            latents, x0 = self.step(eps, t, latents)
            history.append(self.progress(i, x0))
        return latents, history


def build_ddim_sample():
    torch.manual_seed(1)
    model = DDIMSampler()
    return model, torch.randn(3, 8)
