"""RL: an A2C episode on a torch-simulated cart-pole, PPO's loss, per-episode returns."""

from __future__ import annotations

import logging

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import discount_cumsum

logger = logging.getLogger(__name__)


class CartPole:
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02

    def step(self, state, action):
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(action == 1, self.force_mag, -self.force_mag)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        temp = (force + polemass_length * theta_dot**2 * torch.sin(theta)) / total_mass
        thetaacc = (self.gravity * torch.sin(theta) - torch.cos(theta) * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * torch.cos(theta) ** 2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * torch.cos(theta) / total_mass
        return torch.stack([x + self.tau * x_dot, x_dot + self.tau * xacc,
                            theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc])


class A2CEpisode(nn.Module):
    def __init__(self, gamma: float = 0.99, max_steps: int = 30, theta_threshold: float = 0.21):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
        self.critic = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.env = CartPole()
        self.gamma = gamma
        self.max_steps = max_steps
        self.theta_threshold = theta_threshold

    def forward(self, state, exploration_noise):
        log_probs, values, rewards = [], [], []
        for t in range(self.max_steps):
            logits = self.actor(state)
            action = (logits + exploration_noise[t]).argmax(-1)
            log_probs.append(torch.distributions.Categorical(logits=logits).log_prob(action))
            values.append(self.critic(state).squeeze(-1))
            state = self.env.step(state, action)
            rewards.append(torch.ones(()))
            if state[2].abs() > self.theta_threshold:  # BREAK must-not: episode termination decides how many steps are returned
                break
        returns = discount_cumsum(torch.stack(rewards), self.gamma)
        values = torch.stack(values)
        advantages = returns - values.detach()
        actor_loss = -(torch.stack(log_probs) * advantages).mean()
        critic_loss = F.smooth_l1_loss(values, returns)
        return actor_loss + 0.5 * critic_loss, len(rewards)


def build_a2c_episode():
    torch.manual_seed(0)
    model = A2CEpisode()
    g = torch.Generator().manual_seed(14)
    return model, (torch.tensor([0.0, 0.0, 0.05, 0.0]), 0.5 * torch.randn(30, 2, generator=g))


class PPOLoss(nn.Module):
    """cleanrl's ppo.py update, one minibatch, with its GAE and explained variance."""

    def __init__(self, obs_dim: int = 6, n_actions: int = 3, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip_coef: float = 0.2, vf_coef: float = 0.5, ent_coef: float = 0.01, target_kl: float = 0.5):
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh(), nn.Linear(32, n_actions))
        self.critic = nn.Sequential(nn.Linear(obs_dim, 32), nn.Tanh(), nn.Linear(32, 1))
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.clip_coef, self.vf_coef, self.ent_coef = clip_coef, vf_coef, ent_coef
        self.target_kl = target_kl

    def forward(self, obs, actions, old_logprobs, rewards, dones, next_value):
        num_steps = rewards.shape[0]
        with torch.no_grad():
            values = self.critic(obs).squeeze(-1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(num_steps)):
                if t == num_steps - 1:
                    nextvalues = next_value
                else:
                    nextvalues = values[t + 1]
                nextnonterminal = 1.0 - dones[t]
                delta = rewards[t] + self.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + self.gamma * self.gae_lambda * nextnonterminal * lastgaelam
            returns = advantages + values
        print(f"finished episodes in batch: {int(dones.sum())}")  # BREAK: a progress print of a count

        logits = self.actor(obs)
        dist = torch.distributions.Categorical(logits=logits)
        newlogprob = dist.log_prob(actions)
        logratio = newlogprob - old_logprobs
        ratio = logratio.exp()
        with torch.no_grad():
            approx_kl = ((ratio - 1) - logratio).mean()
        if approx_kl > 1.5 * self.target_kl:  # BREAK: a data-dependent test whose body only warns
            logger.warning("approx_kl %.4f over target, stopping early", approx_kl)
        mb_advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss = torch.max(-mb_advantages * ratio, -mb_advantages * torch.clamp(ratio, 1 - self.clip_coef, 1 + self.clip_coef)).mean()
        newvalue = self.critic(obs).squeeze(-1)
        v_loss = 0.5 * ((newvalue - returns) ** 2).mean()
        loss = pg_loss - self.ent_coef * dist.entropy().mean() + v_loss * self.vf_coef

        y_pred, y_true = values.numpy(), returns.numpy()
        var_y = np.var(y_true)
        explained_var = np.nan if var_y == 0 else 1 - np.var(y_true - y_pred) / var_y  # BREAK: numpy branch that np.where can express
        return loss, torch.as_tensor(explained_var)


def build_ppo_loss():
    torch.manual_seed(0)
    model = PPOLoss()
    g = torch.Generator().manual_seed(15)
    T = 16
    obs = torch.randn(T, 6, generator=g)
    actions = torch.randint(0, 3, (T,), generator=g)
    old_logprobs = torch.log(torch.full((T,), 1 / 3)) + 0.05 * torch.randn(T, generator=g)
    rewards = torch.rand(T, generator=g)
    dones = (torch.rand(T, generator=g) < 0.15).float()
    return model, (obs, actions, old_logprobs, rewards, dones, torch.tensor(0.3))


class EpisodeStats(nn.Module):
    """Split a flat rollout buffer into its episodes (by the done flags) and sum each one's reward."""

    def __init__(self, reward_scale: float = 1.0):
        super().__init__()
        self.reward_scale = reward_scale

    def forward(self, rewards, dones):
        ends = (dones.nonzero().flatten() + 1).tolist()  # BREAK must-not: episode boundaries set how many returns come back
        starts = [0, *ends[:-1]]
        episode_returns = torch.stack([rewards[s:e].sum() for s, e in zip(starts, ends, strict=True)]) * self.reward_scale
        lengths = torch.tensor([e - s for s, e in zip(starts, ends, strict=True)])
        mean_length = lengths.float().mean().item()  # BREAK: read only for the log line
        logger.info("episodes: %d, mean length %.1f", len(ends), mean_length)  # BREAK: a logging call
        return episode_returns, lengths


def build_episode_stats():
    g = torch.Generator().manual_seed(16)
    rewards = torch.rand(20, generator=g)
    dones = torch.zeros(20)
    dones[[4, 9, 10, 16, 19]] = 1.0
    return EpisodeStats(), (rewards, dones)
