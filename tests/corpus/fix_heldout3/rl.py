"""Double DQN on a prioritized replay sample: importance weights, done flags, priorities for the sum tree."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


class DQNAgent(nn.Module):
    def __init__(self, obs_dim: int = 4, n_actions: int = 3, gamma: float = 0.99, alpha: float = 0.6) -> None:
        super().__init__()
        self.gamma, self.alpha = gamma, alpha
        self.online = nn.Sequential(nn.Linear(obs_dim, 16), nn.ReLU(), nn.Linear(16, n_actions))
        self.target = copy.deepcopy(self.online)
        for p in self.target.parameters():
            p.requires_grad_(False)

    def td_target(self, rewards: torch.Tensor, next_obs: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            next_actions = self.online(next_obs).argmax(1, keepdim=True)
            next_q = self.target(next_obs).gather(1, next_actions).squeeze(1)
            for i in range(dones.shape[0]):
                if dones[i]:  # BREAK: torch.where(dones, 0.0, next_q) zeroes the same entries
                    next_q[i] = 0.0
        return rewards + self.gamma * next_q

    def forward(self, obs, actions, rewards, next_obs, dones, priorities, beta: float, batch_size: int = 8):
        N = priorities.shape[0]
        probs = priorities**self.alpha
        probs = probs / probs.sum()
        idx = torch.multinomial(probs, batch_size, replacement=True)
        weights = (N * probs[idx]) ** (-beta)
        weights = weights / weights.max()
        q = self.online(obs[idx]).gather(1, actions[idx, None]).squeeze(1)
        target = self.td_target(rewards[idx], next_obs[idx], dones[idx])
        td_error = target - q
        loss = (weights * F.smooth_l1_loss(q, target, reduction="none")).mean()
        return loss, idx.tolist(), (td_error.abs().detach() + 1e-6).tolist()  # BREAK must-not: the sum tree is updated from Python lists


def build_per_dqn():
    torch.manual_seed(17)
    N = 20
    obs, next_obs = torch.randn(N, 4), torch.randn(N, 4)
    actions = torch.randint(0, 3, (N,))
    rewards = torch.randn(N)
    dones = torch.rand(N) < 0.3
    priorities = torch.rand(N) + 0.1
    return DQNAgent(), (obs, actions, rewards, next_obs, dones, priorities, 0.4)
