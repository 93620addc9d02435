"""Offline RL: kzl/decision-transformer's ``DecisionTransformer`` (returns-to-go, state and action tokens
interleaved under one causal transformer, left-padded context windows) trained by its ``SequenceTrainer``
step, with the batch built as ``experiment.py``'s ``get_batch`` does (numpy ``discount_cumsum``)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .helpers import Block, seeded


def discount_cumsum(x, gamma):
    out = np.zeros_like(x)
    out[-1] = x[-1]
    for t in reversed(range(x.shape[0] - 1)):
        out[t] = x[t] + gamma * out[t + 1]
    return out


class DecisionTransformer(nn.Module):
    def __init__(self, state_dim, act_dim, hidden_size=16, max_ep_len=64, n_layer=2, n_head=2):
        super().__init__()
        self.state_dim, self.act_dim, self.hidden_size = state_dim, act_dim, hidden_size
        self.embed_timestep = nn.Embedding(max_ep_len, hidden_size)
        self.embed_return = nn.Linear(1, hidden_size)
        self.embed_state = nn.Linear(state_dim, hidden_size)
        self.embed_action = nn.Linear(act_dim, hidden_size)
        self.embed_ln = nn.LayerNorm(hidden_size)
        self.wpe = nn.Embedding(3 * 20, hidden_size)
        self.blocks = nn.ModuleList([Block(hidden_size, n_head, causal=True) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(hidden_size)
        self.predict_state = nn.Linear(hidden_size, state_dim)
        self.predict_action = nn.Sequential(nn.Linear(hidden_size, act_dim), nn.Tanh())
        self.predict_return = nn.Linear(hidden_size, 1)

    def forward(self, states, actions, rewards, returns_to_go, timesteps, attention_mask=None):
        batch_size, seq_length = states.shape[0], states.shape[1]
        if attention_mask is None:
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)
        time_embeddings = self.embed_timestep(timesteps)
        state_embeddings = self.embed_state(states) + time_embeddings
        action_embeddings = self.embed_action(actions) + time_embeddings
        returns_embeddings = self.embed_return(returns_to_go) + time_embeddings
        # (R_1, s_1, a_1, R_2, s_2, a_2, ...)
        stacked_inputs = torch.stack((returns_embeddings, state_embeddings, action_embeddings), dim=1)
        stacked_inputs = stacked_inputs.permute(0, 2, 1, 3).reshape(batch_size, 3 * seq_length, self.hidden_size)
        stacked_inputs = self.embed_ln(stacked_inputs)
        stacked_attention_mask = torch.stack((attention_mask, attention_mask, attention_mask), dim=1)
        stacked_attention_mask = stacked_attention_mask.permute(0, 2, 1).reshape(batch_size, 3 * seq_length)
        x = stacked_inputs + self.wpe(torch.arange(3 * seq_length))
        for block in self.blocks:
            x = block(x, stacked_attention_mask)
        x = self.ln_f(x)
        x = x.reshape(batch_size, seq_length, 3, self.hidden_size).permute(0, 2, 1, 3)
        return_preds = self.predict_return(x[:, 2])
        state_preds = self.predict_state(x[:, 2])
        action_preds = self.predict_action(x[:, 1])
        return state_preds, action_preds, return_preds


class SequenceTrainStep(nn.Module):
    """``SequenceTrainer.train_step`` without the optimizer: the action MSE over the unpadded steps."""

    def __init__(self, state_dim=5, act_dim=2):
        super().__init__()
        self.model = DecisionTransformer(state_dim, act_dim)
        self.loss_fn = lambda s_hat, a_hat, r_hat, s, a, r: torch.mean((a_hat - a) ** 2)
        self.diagnostics = {}

    def forward(self, states, actions, rewards, dones, rtg, timesteps, attention_mask):
        action_target = torch.clone(actions)
        state_preds, action_preds, reward_preds = self.model.forward(
            states, actions, rewards, rtg[:, :-1], timesteps, attention_mask=attention_mask)
        act_dim = action_preds.shape[2]
        action_preds = action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]  # BREAK: a mean of the squared error weighted by the mask
        action_target = action_target.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]  # BREAK: a mean of the squared error weighted by the mask
        loss = self.loss_fn(None, action_preds, None, None, action_target, None)
        with torch.no_grad():
            action_error = torch.mean((action_preds - action_target) ** 2).detach().cpu()
        self.diagnostics["training/action_error"] = action_error.item()  # BREAK must-not: the trainer's diagnostics keep a Python float
        return loss, dict(self.diagnostics)


def get_batch(trajectories, batch_size, max_len, state_dim, act_dim, max_ep_len=64, scale=10.0, state_mean=0.0, state_std=1.0):
    """experiment.py's ``get_batch``: random windows, left-padded to ``max_len``."""
    batch_inds = np.random.choice(np.arange(len(trajectories)), size=batch_size, replace=True)
    s, a, r, d, rtg, timesteps, mask = [], [], [], [], [], [], []
    for i in range(batch_size):
        traj = trajectories[int(batch_inds[i])]
        si = np.random.randint(0, traj["rewards"].shape[0] - 1)
        s.append(traj["observations"][si:si + max_len].reshape(1, -1, state_dim))
        a.append(traj["actions"][si:si + max_len].reshape(1, -1, act_dim))
        r.append(traj["rewards"][si:si + max_len].reshape(1, -1, 1))
        d.append(traj["terminals"][si:si + max_len].reshape(1, -1))
        timesteps.append(np.arange(si, si + s[-1].shape[1]).reshape(1, -1))
        timesteps[-1][timesteps[-1] >= max_ep_len] = max_ep_len - 1
        rtg.append(discount_cumsum(traj["rewards"][si:], gamma=1.0)[: s[-1].shape[1] + 1].reshape(1, -1, 1))
        if rtg[-1].shape[1] <= s[-1].shape[1]:
            rtg[-1] = np.concatenate([rtg[-1], np.zeros((1, 1, 1))], axis=1)
        tlen = s[-1].shape[1]
        s[-1] = (np.concatenate([np.zeros((1, max_len - tlen, state_dim)), s[-1]], axis=1) - state_mean) / state_std
        a[-1] = np.concatenate([np.ones((1, max_len - tlen, act_dim)) * -10.0, a[-1]], axis=1)
        r[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), r[-1]], axis=1)
        d[-1] = np.concatenate([np.ones((1, max_len - tlen)) * 2, d[-1]], axis=1)
        rtg[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), rtg[-1]], axis=1) / scale
        timesteps[-1] = np.concatenate([np.zeros((1, max_len - tlen)), timesteps[-1]], axis=1)
        mask.append(np.concatenate([np.zeros((1, max_len - tlen)), np.ones((1, tlen))], axis=1))
    return (torch.from_numpy(np.concatenate(s, axis=0)).float(), torch.from_numpy(np.concatenate(a, axis=0)).float(),
            torch.from_numpy(np.concatenate(r, axis=0)).float(), torch.from_numpy(np.concatenate(d, axis=0)).long(),
            torch.from_numpy(np.concatenate(rtg, axis=0)).float(), torch.from_numpy(np.concatenate(timesteps, axis=0)).long(),
            torch.from_numpy(np.concatenate(mask, axis=0)))


def build_decision_transformer():
    seeded(1214)
    model = SequenceTrainStep()
    trajectories = []
    for length in (12, 7, 15):
        trajectories.append({
            "observations": np.random.randn(length, 5), "actions": np.tanh(np.random.randn(length, 2)),
            "rewards": np.random.rand(length), "terminals": np.zeros(length, dtype=bool),
        })
    batch = get_batch(trajectories, batch_size=4, max_len=10, state_dim=5, act_dim=2)
    return model, batch
