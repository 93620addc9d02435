"""Latent-variable and density models: a VAE with KL annealing and free bits, a mixture density network."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn


class VAE(nn.Module):
    def __init__(self, x_dim: int = 12, z_dim: int = 4, hidden: int = 32, anneal_steps: int = 1000,
                 free_bits: float = 2.0) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(x_dim, hidden), nn.ReLU())
        self.fc_mu = nn.Linear(hidden, z_dim)
        self.fc_logvar = nn.Linear(hidden, z_dim)
        self.decoder = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, x_dim))
        self.anneal_steps, self.free_bits = anneal_steps, free_bits
        self.register_buffer("global_step", torch.tensor(250))

    def forward(self, x: torch.Tensor):
        h = self.encoder(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        recon = self.decoder(z)

        recon_loss = F.mse_loss(recon, x, reduction="sum") / x.shape[0]
        kl = -0.5 * torch.mean(torch.sum(1 + logvar - mu.pow(2) - logvar.exp(), dim=1))
        kl_term = kl
        if kl < self.free_bits:  # BREAK: torch.clamp(kl, min=free_bits) has the same value and the same (zero) gradient below the floor
            kl_term = kl.new_tensor(self.free_bits)
        beta = min(1.0, self.global_step.item() / self.anneal_steps)  # BREAK: clamp(global_step / anneal_steps, max=1) as a tensor gives the same weight
        loss = recon_loss + beta * kl_term
        if self.training:
            self.global_step += 1

        active_units = int((mu.detach().var(dim=0) > 0.01).sum())  # BREAK must-not: the count of active latent units is returned as a Python int for the logs
        return loss, recon, kl.detach(), active_units


def build_vae_kl_anneal():
    torch.manual_seed(11)
    model = VAE()
    return model, torch.randn(16, 12)


class MixtureDensityNetwork(nn.Module):
    """p(y | x) as a mixture of K diagonal Gaussians (Bishop 1994)."""

    def __init__(self, in_dim: int = 6, hidden: int = 32, n_components: int = 5, out_dim: int = 2) -> None:
        super().__init__()
        self.k, self.d = n_components, out_dim
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, n_components)
        self.mu = nn.Linear(hidden, n_components * out_dim)
        self.log_sigma = nn.Linear(hidden, n_components * out_dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        h = self.body(x)
        log_pi = F.log_softmax(self.pi(h), dim=-1)
        mu = self.mu(h).view(-1, self.k, self.d)
        log_sigma = self.log_sigma(h).view(-1, self.k, self.d).clamp(-7.0, 7.0)
        sigma = log_sigma.exp()
        if (sigma < 1e-3).any():  # BREAK: the branch only warns; the loss and the returned means do not depend on it
            warnings.warn("MDN: a mixture component is collapsing", stacklevel=2)

        z = (y[:, None, :] - mu) / sigma
        log_prob = (-0.5 * z.pow(2) - log_sigma - 0.5 * math.log(2 * math.pi)).sum(dim=-1)
        nll = -torch.logsumexp(log_pi + log_prob, dim=-1).mean()

        used = torch.unique(log_pi.argmax(dim=-1))  # BREAK must-not: returned; its length is the number of components the batch uses
        return nll, mu, used


def build_mdn_head():
    torch.manual_seed(12)
    model = MixtureDensityNetwork()
    return model, (torch.randn(10, 6), torch.randn(10, 2))
