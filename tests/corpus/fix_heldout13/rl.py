"""Reinforcement learning: stable-baselines3's ``PPO.train`` over its ``RolloutBuffer`` (numpy storage, GAE in
``compute_returns_and_advantage``, minibatches from the ``get`` generator over a numpy permutation, the linear
clip-range schedule, the ``target_kl`` early stop, ``explained_variance`` and the logger's records)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

from .helpers import explained_variance, mlp, seeded

# ------------------------------------------------------------------ stable-baselines3: PPO


class RolloutBufferSamples(NamedTuple):
    observations: th.Tensor
    actions: th.Tensor
    old_values: th.Tensor
    old_log_prob: th.Tensor
    advantages: th.Tensor
    returns: th.Tensor


class RolloutBuffer:
    def __init__(self, buffer_size, obs_dim, action_dim, n_envs=1, gamma=0.99, gae_lambda=0.95):
        self.buffer_size, self.obs_dim, self.action_dim, self.n_envs = buffer_size, obs_dim, action_dim, n_envs
        self.gamma, self.gae_lambda = gamma, gae_lambda
        self.device = th.device("cpu")
        self.reset()

    def reset(self):
        self.observations = np.zeros((self.buffer_size, self.n_envs, self.obs_dim), dtype=np.float32)
        self.actions = np.zeros((self.buffer_size, self.n_envs, self.action_dim), dtype=np.float32)
        self.rewards = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.returns = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.episode_starts = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.values = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.log_probs = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.advantages = np.zeros((self.buffer_size, self.n_envs), dtype=np.float32)
        self.generator_ready = False
        self.pos = 0
        self.full = False

    def add(self, obs, action, reward, episode_start, value, log_prob):
        self.observations[self.pos] = np.array(obs)
        self.actions[self.pos] = np.array(action)
        self.rewards[self.pos] = np.array(reward)
        self.episode_starts[self.pos] = np.array(episode_start)
        self.values[self.pos] = value.clone().cpu().numpy().flatten()
        self.log_probs[self.pos] = log_prob.clone().cpu().numpy()
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full = True

    def compute_returns_and_advantage(self, last_values, dones):
        last_values = last_values.clone().cpu().numpy().flatten()
        last_gae_lam = 0
        for step in reversed(range(self.buffer_size)):
            if step == self.buffer_size - 1:
                next_non_terminal = 1.0 - dones.astype(np.float32)
                next_values = last_values
            else:
                next_non_terminal = 1.0 - self.episode_starts[step + 1]
                next_values = self.values[step + 1]
            delta = self.rewards[step] + self.gamma * next_values * next_non_terminal - self.values[step]
            last_gae_lam = delta + self.gamma * self.gae_lambda * next_non_terminal * last_gae_lam
            self.advantages[step] = last_gae_lam
        self.returns = self.advantages + self.values

    @staticmethod
    def swap_and_flatten(arr):
        shape = arr.shape
        if len(shape) < 3:
            shape = (*shape, 1)
        return arr.swapaxes(0, 1).reshape(shape[0] * shape[1], *shape[2:])

    def get(self, batch_size=None):
        assert self.full, ""
        indices = np.random.permutation(self.buffer_size * self.n_envs)  # BREAK must-not: the minibatch order is numpy's draw; a torch permutation would change the stream and the batches
        # Prepare the data
        if not self.generator_ready:
            for tensor in ["observations", "actions", "values", "log_probs", "advantages", "returns"]:
                self.__dict__[tensor] = self.swap_and_flatten(self.__dict__[tensor])
            self.generator_ready = True
        # Return everything, don't create minibatches
        if batch_size is None:
            batch_size = self.buffer_size * self.n_envs
        start_idx = 0
        while start_idx < self.buffer_size * self.n_envs:
            yield self._get_samples(indices[start_idx : start_idx + batch_size])
            start_idx += batch_size

    def _get_samples(self, batch_inds):
        data = (
            self.observations[batch_inds],
            self.actions[batch_inds],
            self.values[batch_inds].flatten(),
            self.log_probs[batch_inds].flatten(),
            self.advantages[batch_inds].flatten(),
            self.returns[batch_inds].flatten(),
        )
        return RolloutBufferSamples(*tuple(map(self.to_torch, data)))

    def to_torch(self, array, copy=True):
        if copy:
            return th.tensor(array, device=self.device)
        return th.as_tensor(array, device=self.device)


class ActorCriticPolicy(nn.Module):
    """A Gaussian MLP policy with a separate value network (``net_arch=dict(pi=[16], vf=[16])``)."""

    def __init__(self, obs_dim, action_dim, log_std_init=0.0):
        super().__init__()
        self.policy_net = mlp([obs_dim, 16], act=nn.Tanh, last_act=True)
        self.value_net_body = mlp([obs_dim, 16], act=nn.Tanh, last_act=True)
        self.action_net = nn.Linear(16, action_dim)
        self.value_net = nn.Linear(16, 1)
        self.log_std = nn.Parameter(th.ones(action_dim) * log_std_init)

    def _distribution(self, obs):
        mean_actions = self.action_net(self.policy_net(obs))
        return th.distributions.Normal(mean_actions, th.ones_like(mean_actions) * self.log_std.exp())

    def forward(self, obs):
        distribution = self._distribution(obs)
        actions = distribution.sample()
        values = self.value_net(self.value_net_body(obs))
        return actions, values, distribution.log_prob(actions).sum(dim=1)

    def evaluate_actions(self, obs, actions):
        distribution = self._distribution(obs)
        log_prob = distribution.log_prob(actions).sum(dim=1)
        values = self.value_net(self.value_net_body(obs))
        entropy = distribution.entropy().sum(dim=1)
        return values, log_prob, entropy


class Logger:
    def __init__(self):
        self.name_to_value = {}

    def record(self, key, value, exclude=None):
        self.name_to_value[key] = value


def get_linear_fn(start: float, end: float, end_fraction: float):
    def func(progress_remaining: float) -> float:
        if (1 - progress_remaining) > end_fraction:
            return end
        else:
            return start + (1 - progress_remaining) * (end - start) / end_fraction

    return func


class PPO(nn.Module):
    """``PPO.train`` without the optimizer: the minibatch losses are summed instead of stepped."""

    def __init__(self, policy, rollout_buffer, n_epochs=3, batch_size=8, target_kl=0.02, ent_coef=0.01, vf_coef=0.5):
        super().__init__()
        self.policy = policy
        self.rollout_buffer = rollout_buffer
        self.n_epochs, self.batch_size, self.target_kl = n_epochs, batch_size, target_kl
        self.ent_coef, self.vf_coef = ent_coef, vf_coef
        self.normalize_advantage = True
        self.clip_range = get_linear_fn(0.3, 0.1, 0.5)
        self.clip_range_vf = None
        self._current_progress_remaining = 0.6
        self._n_updates = 0
        self.verbose = 1
        self.logger = Logger()

    def forward(self):
        # Compute current clip range
        clip_range = self.clip_range(self._current_progress_remaining)
        entropy_losses = []
        pg_losses, value_losses = [], []
        clip_fractions = []
        total_loss = 0.0
        continue_training = True
        # train for n_epochs epochs
        for epoch in range(self.n_epochs):
            approx_kl_divs = []
            # Do a complete pass on the rollout buffer
            for rollout_data in self.rollout_buffer.get(self.batch_size):
                actions = rollout_data.actions
                values, log_prob, entropy = self.policy.evaluate_actions(rollout_data.observations, actions)
                values = values.flatten()
                # Normalize advantage
                advantages = rollout_data.advantages
                if self.normalize_advantage and len(advantages) > 1:
                    advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

                # ratio between old and new policy, should be one at the first iteration
                ratio = th.exp(log_prob - rollout_data.old_log_prob)

                # clipped surrogate loss
                policy_loss_1 = advantages * ratio
                policy_loss_2 = advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                policy_loss = -th.min(policy_loss_1, policy_loss_2).mean()

                # Logging
                pg_losses.append(policy_loss.item())
                clip_fraction = th.mean((th.abs(ratio - 1) > clip_range).float()).item()
                clip_fractions.append(clip_fraction)

                values_pred = values
                value_loss = F.mse_loss(rollout_data.returns, values_pred)
                value_losses.append(value_loss.item())

                entropy_loss = -th.mean(entropy)
                entropy_losses.append(entropy_loss.item())

                loss = policy_loss + self.ent_coef * entropy_loss + self.vf_coef * value_loss

                # Calculate approximate form of reverse KL Divergence for early stopping
                with th.no_grad():
                    log_ratio = log_prob - rollout_data.old_log_prob
                    approx_kl_div = th.mean((th.exp(log_ratio) - 1) - log_ratio).cpu().numpy()
                    approx_kl_divs.append(approx_kl_div)

                if self.target_kl is not None and approx_kl_div > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(f"Early stopping at step {epoch} due to reaching max kl: {approx_kl_div:.2f}")
                    break

                # Optimization step (here: accumulated)
                total_loss = total_loss + loss

            self._n_updates += 1
            if not continue_training:
                break

        explained_var = explained_variance(self.rollout_buffer.values.flatten(), self.rollout_buffer.returns.flatten())

        # Logs
        self.logger.record("train/entropy_loss", np.mean(entropy_losses))
        self.logger.record("train/policy_gradient_loss", np.mean(pg_losses))
        self.logger.record("train/value_loss", np.mean(value_losses))
        self.logger.record("train/approx_kl", np.mean(approx_kl_divs))
        self.logger.record("train/clip_fraction", np.mean(clip_fractions))
        self.logger.record("train/loss", total_loss)
        self.logger.record("train/explained_variance", explained_var)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        return total_loss, dict(self.logger.name_to_value)


def build_ppo_sb3_train():
    seeded(1301)
    obs_dim, action_dim, n_steps, n_envs = 4, 2, 8, 2
    policy = ActorCriticPolicy(obs_dim, action_dim)
    buffer = RolloutBuffer(n_steps, obs_dim, action_dim, n_envs=n_envs)
    # collect_rollouts against a random linear system
    obs = np.random.randn(n_envs, obs_dim).astype(np.float32)
    episode_starts = np.ones(n_envs, dtype=np.float32)
    with th.no_grad():
        for _ in range(n_steps):
            actions, values, log_probs = policy(th.as_tensor(obs))
            actions = actions.numpy()
            rewards = -np.square(obs).sum(1) - 0.1 * np.square(actions).sum(1)
            dones = np.random.rand(n_envs) < 0.1
            buffer.add(obs, actions, rewards, episode_starts, values, log_probs)
            obs = (0.9 * obs + 0.1 * np.random.randn(n_envs, obs_dim)).astype(np.float32)
            episode_starts = dones.astype(np.float32)
        _, last_values, _ = policy(th.as_tensor(obs))
    buffer.compute_returns_and_advantage(last_values, dones)
    # the policy has moved since the rollout (earlier epochs' steps)
    with th.no_grad():
        for p in policy.parameters():
            p.add_(0.15 * th.randn_like(p))
    return PPO(policy, buffer), ()
