"""Imitation learning: ikostrikov/pytorch-a2c-ppo-acktr-gail's GAIL ``Discriminator`` (``update``'s minibatch with
the expert states normalised by ``VecNormalize._obfilt`` in numpy, the WGAN-style ``compute_grad_pen`` through
``autograd.grad`` at a mixed input whose ``requires_grad`` is set by hand;
``predict_reward`` rescaling the rewards by the running standard deviation of the discounted returns, baselines'
``RunningMeanStd`` in numpy)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import autograd, nn

from .helpers import seeded

# ------------------------------------------------------------------ baselines common/running_mean_std.py


class RunningMeanStd:
    def __init__(self, epsilon=1e-4, shape=()):
        self.mean = np.zeros(shape, "float64")
        self.var = np.ones(shape, "float64")
        self.count = epsilon

    def update(self, x):
        batch_mean = np.mean(x, axis=0)
        batch_var = np.var(x, axis=0)
        batch_count = x.shape[0]
        self.update_from_moments(batch_mean, batch_var, batch_count)

    def update_from_moments(self, batch_mean, batch_var, batch_count):
        delta = batch_mean - self.mean
        tot_count = self.count + batch_count
        new_mean = self.mean + delta * batch_count / tot_count
        m_a = self.var * self.count
        m_b = batch_var * batch_count
        M2 = m_a + m_b + np.square(delta) * self.count * batch_count / tot_count
        self.mean, self.var, self.count = new_mean, M2 / tot_count, tot_count


class ObsFilter:
    """``VecNormalize._obfilt`` of the training envs, read with update=False for the expert states."""

    def __init__(self, obs_rms, clipob=10.0, epsilon=1e-8):
        self.obs_rms = obs_rms
        self.clipob = clipob
        self.epsilon = epsilon
        self.training = True

    def __call__(self, obs, update=True):
        if self.obs_rms:
            if self.training and update:
                self.obs_rms.update(obs)
            obs = np.clip((obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + self.epsilon), -self.clipob, self.clipob)
            return obs
        else:
            return obs


# ------------------------------------------------------------------ a2c_ppo_acktr/algo/gail.py


class Discriminator(nn.Module):
    def __init__(self, input_dim, hidden_dim):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(input_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, hidden_dim), nn.Tanh(), nn.Linear(hidden_dim, 1))
        self.trunk.train()
        self.optimizer = torch.optim.Adam(self.trunk.parameters())
        self.returns = None
        self.ret_rms = RunningMeanStd(shape=())

    def compute_grad_pen(self, expert_state, expert_action, policy_state, policy_action, lambda_=10):
        alpha = torch.rand(expert_state.size(0), 1)
        expert_data = torch.cat([expert_state, expert_action], dim=1)
        policy_data = torch.cat([policy_state, policy_action], dim=1)

        alpha = alpha.expand_as(expert_data).to(expert_data.device)

        mixup_data = alpha * expert_data + (1 - alpha) * policy_data
        mixup_data.requires_grad = True  # BREAK: no leaf needed: take the gradient of the trunk at the mixed data with torch.func.vjp (its pullback stays differentiable, as create_graph=True)

        disc = self.trunk(mixup_data)
        ones = torch.ones(disc.size()).to(disc.device)
        grad = autograd.grad(outputs=disc, inputs=mixup_data, grad_outputs=ones, create_graph=True, retain_graph=True, only_inputs=True)[0]  # BREAK: grad = the vjp's pullback applied to ones

        grad_pen = lambda_ * (grad.norm(2, dim=1) - 1).pow(2).mean()
        return grad_pen

    def predict_reward(self, state, action, gamma, masks, update_rms=True):
        with torch.no_grad():
            self.eval()
            d = self.trunk(torch.cat([state, action], dim=1))
            s = torch.sigmoid(d)
            reward = s.log() - (1 - s).log()
            if self.returns is None:
                self.returns = reward.clone()

            if update_rms:
                self.returns = self.returns * masks * gamma + reward
                self.ret_rms.update(self.returns.cpu().numpy())

            return reward / np.sqrt(self.ret_rms.var[0] + 1e-8)


class GailIteration(nn.Module):
    """``main.py``'s GAIL block on one minibatch pair: the body of ``Discriminator.update`` up to its backward (the
    loss and its gradient penalty), then the rollout's rewards replaced by the discriminator's predictions."""

    def __init__(self, obs_dim=4, act_dim=2, gamma=0.99):
        super().__init__()
        self.discr = Discriminator(obs_dim + act_dim, 16)
        obs_rms = RunningMeanStd(shape=(obs_dim,))
        obs_rms.update(np.random.randn(64, obs_dim) * 2.0 + 0.5)
        self.obsfilt = ObsFilter(obs_rms)
        self.gamma = gamma

    def forward(self, expert_batch, policy_batch, obs, actions, masks):
        discr = self.discr
        discr.train()
        policy_state, policy_action = policy_batch[0], policy_batch[2]
        policy_d = discr.trunk(torch.cat([policy_state, policy_action], dim=1))

        expert_state, expert_action = expert_batch
        expert_state = self.obsfilt(expert_state.numpy(), update=False)
        expert_state = torch.tensor(expert_state, dtype=torch.float32)
        expert_d = discr.trunk(torch.cat([expert_state, expert_action], dim=1))

        expert_loss = F.binary_cross_entropy_with_logits(expert_d, torch.ones(expert_d.size()))
        policy_loss = F.binary_cross_entropy_with_logits(policy_d, torch.zeros(policy_d.size()))

        gail_loss = expert_loss + policy_loss
        grad_pen = discr.compute_grad_pen(expert_state, expert_action, policy_state, policy_action)

        rewards = []
        for step in range(obs.shape[0]):
            rewards.append(discr.predict_reward(obs[step], actions[step], self.gamma, masks[step]))
        return gail_loss + grad_pen, torch.stack(rewards)


def build_gail_update():
    seeded(1411)
    expert = (torch.randn(8, 4) * 2.0 + 0.5, torch.randn(8, 2))
    # (obs, recurrent_hidden_states, actions, ...) as RolloutStorage.feed_forward_generator yields them
    policy = (torch.randn(8, 4), torch.zeros(8, 1), torch.randn(8, 2))
    obs, actions = torch.randn(3, 5, 4), torch.randn(3, 5, 2)
    masks = torch.ones(3, 5, 1)
    masks[1, 2] = 0.0
    return GailIteration(), (expert, policy, obs, actions, masks)
