"""Reinforcement learning: a PPO update with single-environment GAE, an actor-critic rollout against a
pure-Python CartPole, and a SAC actor update with automatic entropy tuning."""

from __future__ import annotations

import math

import torch
from torch import nn

from .helpers import seeded


def mlp(i: int, o: int, hidden: int = 32) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, hidden), nn.Tanh(), nn.Linear(hidden, o))


# --------------------------------------------------------------------------- PPO with GAE


def compute_gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor, last_value: torch.Tensor,
                gamma: float = 0.99, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over one environment's trajectory (dones[t]: episode ended after t)."""
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0.0
    next_value = last_value
    for t in reversed(range(rewards.shape[0])):
        if dones[t].item():  # BREAK: multiply the bootstrap and the carried advantage by (1 - dones[t]) instead of branching
            next_value = 0.0
            lastgaelam = 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        lastgaelam = delta + gamma * lam * lastgaelam
        advantages[t] = lastgaelam
        next_value = values[t]
    return advantages, advantages + values


class PPOLearner(nn.Module):
    def __init__(self, obs_dim: int = 4, n_actions: int = 3, clip: float = 0.2) -> None:
        super().__init__()
        self.pi = mlp(obs_dim, n_actions)
        self.v = mlp(obs_dim, 1)
        self.clip = clip

    def forward(self, obs, actions, old_logp, rewards, dones, last_obs) -> dict[str, object]:
        values = self.v(obs).squeeze(-1)
        with torch.no_grad():
            last_value = self.v(last_obs).squeeze(-1)
        adv, returns = compute_gae(rewards, values.detach(), dones, last_value)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        logp = torch.log_softmax(self.pi(obs), -1).gather(1, actions[:, None]).squeeze(1)
        ratio = (logp - old_logp).exp()
        pg_loss = -torch.min(ratio * adv, ratio.clamp(1 - self.clip, 1 + self.clip) * adv).mean()
        v_loss = 0.5 * (returns - values).pow(2).mean()
        var_y = returns.var()
        explained_var = 1.0 - ((returns - values.detach()).var() / var_y).item()  # BREAK must-not: the trainer logs explained variance as a Python float
        return {"loss": pg_loss + 0.5 * v_loss, "explained_variance": explained_var}


def build_ppo_gae() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(110)
    model = PPOLearner()
    g = seeded(111)
    t = 16
    obs = torch.randn(t, 4, generator=g)
    actions = torch.randint(0, 3, (t,), generator=g)
    old_logp = torch.log(torch.full((t,), 1 / 3)) + 0.05 * torch.randn(t, generator=g)
    rewards = torch.randn(t, generator=g)
    dones = torch.zeros(t, dtype=torch.bool)
    dones[[5, 11]] = True
    last_obs = torch.randn(1, 4, generator=g)
    return model, (obs, actions, old_logp, rewards, dones, last_obs)


# --------------------------------------------------------------------------- actor-critic rollout


class CartPole:
    """CartPole-v1 dynamics (Barto et al. 1983), as gym writes them, with deterministic resets."""

    def __init__(self, starts: list[tuple[float, float, float, float]]) -> None:
        self.starts = starts
        self.episode = 0
        self.state = starts[0]

    def reset(self) -> tuple[float, float, float, float]:
        self.state = self.starts[self.episode % len(self.starts)]
        self.episode += 1
        return self.state

    def step(self, action: int) -> tuple[tuple[float, float, float, float], float, bool]:
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (0.5 * (4.0 / 3.0 - 0.1 * costheta**2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * xacc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc
        self.state = (x, x_dot, theta, theta_dot)
        done = abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360
        return self.state, 1.0, done


class ActorCriticAgent(nn.Module):
    def __init__(self, gamma: float = 0.97) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 32), nn.Tanh())
        self.policy = nn.Linear(32, 2)
        self.value = nn.Linear(32, 1)
        self.gamma = gamma

    def forward(self, env: CartPole, n_steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        obs = env.reset()
        log_probs, values, rewards, dones = [], [], [], []
        for _ in range(n_steps):
            h = self.body(torch.tensor(obs, dtype=torch.float32))
            logits = self.policy(h)
            action = int(torch.argmax(logits))  # BREAK must-not: the simulator is plain Python and steps on a Python int action
            obs, reward, done = env.step(action)
            log_probs.append(torch.log_softmax(logits, -1)[action])
            values.append(self.value(h).squeeze(-1))
            rewards.append(reward)
            dones.append(done)
            if done:
                obs = env.reset()
        returns, running = [], 0.0
        for r, d in zip(reversed(rewards), reversed(dones), strict=True):
            running = r + self.gamma * running * (0.0 if d else 1.0)
            returns.append(running)
        return torch.stack(log_probs), torch.stack(values), torch.tensor(returns[::-1])


def build_cartpole_rollout() -> tuple[nn.Module, dict[str, object]]:
    torch.manual_seed(112)
    model = ActorCriticAgent()
    g = seeded(113)
    starts = [tuple(v) for v in (torch.rand(3, 4, generator=g) * 0.1 - 0.05).tolist()]
    return model, {"env": CartPole(starts), "n_steps": 40}


# --------------------------------------------------------------------------- SAC actor + temperature


class SACActorUpdate(nn.Module):
    """The actor and temperature losses of soft actor-critic (Haarnoja et al. 2018b)."""

    def __init__(self, obs_dim: int = 6, act_dim: int = 2) -> None:
        super().__init__()
        self.actor = mlp(obs_dim, 2 * act_dim)
        self.q1 = mlp(obs_dim + act_dim, 1)
        self.q2 = mlp(obs_dim + act_dim, 1)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(0.2)))
        self.target_entropy = -float(act_dim)
        self.alpha = 0.2  # kept for the logger

    def forward(self, obs: torch.Tensor, eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu, log_std = self.actor(obs).chunk(2, -1)
        log_std = log_std.clamp(-5.0, 2.0)
        u = mu + log_std.exp() * eps
        a = torch.tanh(u)
        logp = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log(1 - a.pow(2) + 1e-6).sum(-1)
        alpha_loss = -(self.log_alpha * (logp + self.target_entropy).detach()).mean()
        self.alpha = self.log_alpha.exp().item()  # BREAK: keep alpha a detached tensor (self.log_alpha.exp().detach()); it multiplies a tensor and gets no gradient either way
        sa = torch.cat([obs, a], -1)
        q = torch.min(self.q1(sa), self.q2(sa)).squeeze(-1)
        actor_loss = (self.alpha * logp - q).mean()
        return actor_loss, alpha_loss


def build_sac_alpha() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(114)
    model = SACActorUpdate()
    g = seeded(115)
    return model, (torch.randn(8, 6, generator=g), torch.randn(8, 2, generator=g))

