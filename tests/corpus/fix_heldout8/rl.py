"""Reinforcement learning: a TRL-style PPO step for RLHF (KL-penalised rewards with the score on the last
response token, whitened GAE, an adaptive KL controller), Rainbow's categorical (C51) projection of the
target distribution, and a policy trained by backpropagating through a batched pendulum rollout with
auto-reset of finished episodes (the torchrl pendulum tutorial's setting)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean, masked_whiten, seeded

# --------------------------------------------------------------------------- RLHF PPO step


class AdaptiveKLController:
    """Adaptive KL controller described in the paper: https://arxiv.org/pdf/1909.08593.pdf"""

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        self.value = init_kl_coef
        self.target = target
        self.horizon = horizon

    def update(self, current: float, n_steps: int) -> None:
        target = self.target
        proportional_error = np.clip(current / target - 1, -0.2, 0.2)
        mult = 1 + proportional_error * n_steps / self.horizon
        self.value *= mult


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=2)
    return torch.gather(logp, 2, labels.unsqueeze(2)).squeeze(-1)


class TinyCausalLM(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 24) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.mix = nn.Conv1d(dim, dim, 3, padding=2)  # causal: trim the right padding
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor):
        h = self.wte(input_ids).transpose(1, 2)
        h = torch.tanh(self.mix(h)[..., : input_ids.size(1)]).transpose(1, 2)
        return self.lm_head(h), h


class PPOStep(nn.Module):
    def __init__(self, gamma: float = 1.0, lam: float = 0.95, cliprange_value: float = 0.2) -> None:
        super().__init__()
        self.policy = TinyCausalLM()
        self.ref_policy = TinyCausalLM()
        self.ref_policy.requires_grad_(False)
        self.v_head = nn.Linear(24, 1)
        self.kl_ctl = AdaptiveKLController(0.2, target=6.0, horizon=10000)
        self.gamma = gamma
        self.lam = lam
        self.cliprange_value = cliprange_value
        self.whiten_rewards = True

    def _kl_penalty(self, logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
        return logprob - ref_logprob

    def compute_rewards(self, scores, logprobs, ref_logprobs, masks):
        rewards, non_score_rewards, kls = [], [], []
        for score, logprob, ref_logprob, mask in zip(scores, logprobs, ref_logprobs, masks, strict=True):
            # compute KL penalty (from difference in logprobs)
            kl = self._kl_penalty(logprob, ref_logprob)
            kls.append(kl)
            non_score_reward = -self.kl_ctl.value * kl
            non_score_rewards.append(non_score_reward)
            reward = non_score_reward.clone()
            last_non_masked_index = mask.nonzero()[-1]  # BREAK: argmax of mask * arange

            # reward is preference model score + KL penalty
            reward[last_non_masked_index] += score
            rewards.append(reward)
        return torch.stack(rewards), torch.stack(non_score_rewards), torch.stack(kls)

    def compute_advantages(self, values, rewards, mask):
        lastgaelam = 0
        advantages_reversed = []
        gen_len = rewards.shape[-1]

        values = values * mask
        rewards = rewards * mask

        if self.whiten_rewards:
            rewards = masked_whiten(rewards, mask, shift_mean=False)

        for t in reversed(range(gen_len)):
            nextvalues = values[:, t + 1] if t < gen_len - 1 else 0.0
            delta = rewards[:, t] + self.gamma * nextvalues - values[:, t]
            lastgaelam = delta + self.gamma * self.lam * lastgaelam
            advantages_reversed.append(lastgaelam)
        advantages = torch.stack(advantages_reversed[::-1]).transpose(0, 1)

        returns = advantages + values
        advantages = masked_whiten(advantages, mask)
        advantages = advantages.detach()
        return values, advantages, returns

    def forward(self, query_response: torch.Tensor, response_mask: torch.Tensor, scores: torch.Tensor):
        logits, hidden = self.policy(query_response)
        logprobs = logprobs_from_logits(logits[:, :-1], query_response[:, 1:])
        with torch.no_grad():
            ref_logits, _ = self.ref_policy(query_response)
            ref_logprobs = logprobs_from_logits(ref_logits[:, :-1], query_response[:, 1:])
        vpred = self.v_head(hidden).squeeze(-1)[:, :-1]
        masks = response_mask[:, 1:].float()

        rewards, non_score_reward, kls = self.compute_rewards(scores, logprobs.detach(), ref_logprobs, masks)
        values, advantages, returns = self.compute_advantages(vpred.detach(), rewards, masks)

        # first optimisation epoch of the step: the old policy is the current one
        ratio = torch.exp(logprobs - logprobs.detach())
        pg_losses = -advantages * ratio
        pg_losses2 = -advantages * torch.clamp(ratio, 0.8, 1.2)
        pg_loss = masked_mean(torch.max(pg_losses, pg_losses2), masks)
        vpredclipped = torch.clamp(vpred, values - self.cliprange_value, values + self.cliprange_value)
        vf_losses = torch.max((vpred - returns) ** 2, (vpredclipped - returns) ** 2)
        vf_loss = 0.5 * masked_mean(vf_losses, masks)

        mean_kl = kls.sum(1).mean()
        self.kl_ctl.update(mean_kl.item(), query_response.shape[0])  # BREAK: keep the KL coef a tensor
        return pg_loss + 0.1 * vf_loss, mean_kl, non_score_reward.sum(1)


def build_rlhf_rewards():
    torch.manual_seed(910)
    model = PPOStep()
    g = seeded(911)
    query_response = torch.randint(0, 32, (3, 12), generator=g)
    response_mask = torch.zeros(3, 12, dtype=torch.long)
    for i, (start, end) in enumerate([(4, 12), (5, 10), (4, 8)]):
        response_mask[i, start:end] = 1
    scores = torch.randn(3, generator=g)
    return model, (query_response, response_mask, scores)


# --------------------------------------------------------------------------- Rainbow C51 projection


class DistributionalDQN(nn.Module):
    def __init__(self, obs_dim: int, action_space: int, atoms: int) -> None:
        super().__init__()
        self.atoms = atoms
        self.action_space = action_space
        self.fc_h = nn.Linear(obs_dim, 32)
        self.fc_z = nn.Linear(32, action_space * atoms)

    def forward(self, x: torch.Tensor, log: bool = False) -> torch.Tensor:
        q = self.fc_z(F.relu(self.fc_h(x))).view(-1, self.action_space, self.atoms)
        if log:  # Use log softmax for numerical stability
            return F.log_softmax(q, dim=2)
        return F.softmax(q, dim=2)


class RainbowLoss(nn.Module):
    def __init__(
        self,
        obs_dim: int = 6,
        action_space: int = 3,
        atoms: int = 11,
        V_min: float = -5.0,
        V_max: float = 5.0,
        discount: float = 0.99,
        multi_step: int = 3,
    ) -> None:
        super().__init__()
        self.atoms = atoms
        self.Vmin = V_min
        self.Vmax = V_max
        self.register_buffer("support", torch.linspace(V_min, V_max, atoms))
        self.delta_z = (V_max - V_min) / (atoms - 1)
        self.discount = discount
        self.n = multi_step
        self.online_net = DistributionalDQN(obs_dim, action_space, atoms)
        self.target_net = DistributionalDQN(obs_dim, action_space, atoms)
        self.target_net.load_state_dict(self.online_net.state_dict())
        for param in self.target_net.parameters():
            param.requires_grad = False

    def forward(self, states, actions, returns, next_states, nonterminals, weights):
        batch_size = states.size(0)
        # Calculate current state probabilities (online network noise already sampled)
        log_ps = self.online_net(states, log=True)  # Log probabilities log p(s_t, ·; θonline)
        log_ps_a = log_ps[range(batch_size), actions]  # log p(s_t, a_t; θonline)

        with torch.no_grad():
            # Calculate nth next state probabilities
            pns = self.online_net(next_states)  # Probabilities p(s_t+n, ·; θonline)
            dns = self.support.expand_as(pns) * pns  # Distribution d_t+n = (z, p(s_t+n, ·; θonline))
            argmax_indices_ns = dns.sum(2).argmax(
                1
            )  # Perform argmax action selection using online network: argmax_a[(z, p(s_t+n, a; θonline))]
            pns = self.target_net(next_states)  # Probabilities p(s_t+n, ·; θtarget)
            pns_a = pns[
                range(batch_size), argmax_indices_ns
            ]  # Double-Q probabilities p(s_t+n, argmax_a[(z, p(s_t+n, a; θonline))]; θtarget)

            # Compute Tz (Bellman operator T applied to z)
            Tz = returns.unsqueeze(1) + nonterminals * (self.discount**self.n) * self.support.unsqueeze(
                0
            )  # Tz = R^n + (γ^n)z (accounting for terminal states)
            Tz = Tz.clamp(min=self.Vmin, max=self.Vmax)  # Clamp between supported values
            # Compute L2 projection of Tz onto fixed support z
            b = (Tz - self.Vmin) / self.delta_z  # b = (Tz - Vmin) / Δz
            l, u = b.floor().to(torch.int64), b.ceil().to(torch.int64)  # noqa: E741
            # Fix disappearing probability mass when l = b = u (b is int)
            l[(u > 0) * (l == u)] -= 1  # BREAK: l = torch.where(cond, l - 1, l)
            u[(l < (self.atoms - 1)) * (l == u)] += 1  # BREAK: u = torch.where(cond, u + 1, u)

            # Distribute probability of Tz
            m = states.new_zeros(batch_size, self.atoms)
            offset = (
                torch.linspace(0, ((batch_size - 1) * self.atoms), batch_size)
                .unsqueeze(1)
                .expand(batch_size, self.atoms)
                .to(actions)
            )
            m.view(-1).index_add_(
                0, (l + offset).view(-1), (pns_a * (u.float() - b)).view(-1)
            )  # m_l = m_l + p(s_t+n, a*)(u - b)
            m.view(-1).index_add_(
                0, (u + offset).view(-1), (pns_a * (b - l.float())).view(-1)
            )  # m_u = m_u + p(s_t+n, a*)(b - l)

        loss = -torch.sum(m * log_ps_a, 1)  # Cross-entropy loss (minimises DKL(m||p(s_t, a_t)))
        return (weights * loss).mean(), loss.detach()


def build_c51_projection():
    torch.manual_seed(920)
    model = RainbowLoss()
    g = seeded(921)
    B = 8
    states = torch.randn(B, 6, generator=g)
    next_states = torch.randn(B, 6, generator=g)
    actions = torch.randint(0, 3, (B,), generator=g)
    # integer n-step returns land exactly on support atoms (b is an integer): the case the fix-up lines handle
    returns = torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0, -0.7, 2.0, 1.3])
    nonterminals = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]).unsqueeze(1)
    weights = torch.rand(B, generator=g)
    return model, (states, actions, returns, next_states, nonterminals, weights)


# --------------------------------------------------------------------------- pendulum rollout


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return ((x + math.pi) % (2 * math.pi)) - math.pi


class BatchedPendulum:
    """Gym's Pendulum-v1 dynamics on a batch of environments, each with its own step counter."""

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    g = 10.0
    m = 1.0
    length = 1.0

    def __init__(self, init_th: torch.Tensor, init_thdot: torch.Tensor, max_episode_steps: int) -> None:
        self.init_th = init_th
        self.init_thdot = init_thdot
        self.max_episode_steps = max_episode_steps

    def step(self, th, thdot, steps, u):
        u = u.clamp(-self.max_torque, self.max_torque)
        costs = angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * (u**2)
        new_thdot = (
            thdot
            + (3 * self.g / (2 * self.length) * torch.sin(th) + 3.0 / (self.m * self.length**2) * u) * self.dt
        )
        new_thdot = new_thdot.clamp(-self.max_speed, self.max_speed)
        new_th = th + new_thdot * self.dt
        steps = steps + 1
        done = steps >= self.max_episode_steps
        return new_th, new_thdot, steps, -costs, done

    def reset_done(self, th, thdot, steps, done):
        th = torch.where(done, self.init_th, th)
        thdot = torch.where(done, self.init_thdot, thdot)
        steps = torch.where(done, torch.zeros_like(steps), steps)
        return th, thdot, steps


class PendulumPolicy(nn.Module):
    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(3, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1)
        )

    def forward(self, th: torch.Tensor, thdot: torch.Tensor) -> torch.Tensor:
        obs = torch.stack([torch.cos(th), torch.sin(th), thdot], dim=-1)
        return 2.0 * torch.tanh(self.net(obs).squeeze(-1))


class RolloutObjective(nn.Module):
    def __init__(self, env: BatchedPendulum, horizon: int = 30, gamma: float = 0.99) -> None:
        super().__init__()
        self.policy = PendulumPolicy()
        self.env = env
        self.horizon = horizon
        self.gamma = gamma

    def forward(self, th: torch.Tensor, thdot: torch.Tensor, steps: torch.Tensor):
        traj_return = torch.zeros_like(th)
        discount = 1.0
        for _ in range(self.horizon):
            action = self.policy(th, thdot)
            th, thdot, steps, reward, done = self.env.step(th, thdot, steps, action)
            traj_return = traj_return + discount * reward
            discount *= self.gamma
            if done.any():  # BREAK: reset_done is a per-env torch.where: call it every step
                th, thdot, steps = self.env.reset_done(th, thdot, steps, done)
        return -traj_return.mean(), traj_return


def build_pendulum_rollout():
    torch.manual_seed(930)
    g = seeded(931)
    n_envs = 6
    init_th = (torch.rand(n_envs, generator=g) * 2 - 1) * math.pi
    init_thdot = torch.rand(n_envs, generator=g) * 2 - 1
    env = BatchedPendulum(init_th, init_thdot, max_episode_steps=12)
    model = RolloutObjective(env)
    steps = torch.tensor([0, 3, 5, 8, 10, 11])  # environments part-way through their episodes
    return model, (init_th.clone(), init_thdot.clone(), steps)
