"""Value-based RL learners: R2D2's burn-in, value-rescaled n-step double-Q loss with sequence priorities
written back to the replay (a Python sum-tree), and pymarl's QMIX learner over a padded episode batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import StatsLogger, masked_mean, mlp, seeded

# ------------------------------------------------------------------ R2D2


def value_rescale(x, eps=1e-3):
    return x.sign() * ((x.abs() + 1).sqrt() - 1) + eps * x


def inverse_value_rescale(x, eps=1e-3):
    return x.sign() * ((((1 + 4 * eps * (x.abs() + 1 + eps)).sqrt() - 1) / (2 * eps)).pow(2) - 1)


class RecurrentQ(nn.Module):
    def __init__(self, obs_dim=6, n_actions=4, hidden=16):
        super().__init__()
        self.encoder = nn.Linear(obs_dim, hidden)
        self.lstm = nn.LSTMCell(hidden, hidden)
        self.head = nn.Linear(hidden, n_actions)

    def forward(self, obs, hidden):
        h, c = hidden
        qs = []
        for t in range(obs.shape[0]):
            h, c = self.lstm(F.relu(self.encoder(obs[t])), (h, c))
            qs.append(self.head(h))
        return torch.stack(qs), (h, c)


class PrioritizedReplay:
    def __init__(self, alpha=0.9):
        self.alpha, self.max_priority = alpha, 1.0
        self.priorities: dict[int, float] = {}

    def update_priorities(self, idxs, priorities):
        for i, p in zip(idxs, priorities, strict=True):
            self.priorities[i] = p**self.alpha
            self.max_priority = max(self.max_priority, p)


class R2D2Learner(nn.Module):
    def __init__(self, burn_in=3, n_step=2, gamma=0.99, eta=0.9):
        super().__init__()
        self.online, self.target = RecurrentQ(), RecurrentQ()
        self.target.load_state_dict(self.online.state_dict())
        self.burn_in, self.n_step, self.gamma, self.eta = burn_in, n_step, gamma, eta
        self.replay = PrioritizedReplay()

    def forward(self, obs, actions, rewards, dones, hidden0, lengths, idxs):
        with torch.no_grad():
            _, h_online = self.online(obs[: self.burn_in], hidden0)
            _, h_target = self.target(obs[: self.burn_in], hidden0)
        q, _ = self.online(obs[self.burn_in:], h_online)
        with torch.no_grad():
            q_target, _ = self.target(obs[self.burn_in:], h_target)
        learn = q.shape[0] - self.n_step
        q_sa = q[:learn].gather(-1, actions[self.burn_in:self.burn_in + learn, :, None]).squeeze(-1)
        next_a = q[self.n_step:].argmax(-1, keepdim=True)
        q_next = q_target[self.n_step:].gather(-1, next_a).squeeze(-1)
        r = rewards[self.burn_in:]
        ret = sum(self.gamma**k * r[k:k + learn] for k in range(self.n_step))
        not_done = 1.0 - dones[self.burn_in + self.n_step - 1:self.burn_in + self.n_step - 1 + learn]
        target = value_rescale(ret + self.gamma**self.n_step * not_done * inverse_value_rescale(q_next))
        td = target - q_sa
        mask = torch.arange(learn)[:, None] < (lengths - self.burn_in - self.n_step)[None]
        loss = masked_mean(td.pow(2), mask)
        abs_td = (td.abs() * mask).detach()
        priorities = self.eta * abs_td.max(0).values + (1 - self.eta) * abs_td.sum(0) / mask.sum(0)
        self.replay.update_priorities(idxs.tolist(), priorities.tolist())  # BREAK must-not: the replay's sum-tree is updated from Python now, with Python floats
        return loss, priorities


def build_r2d2_burnin():
    seeded(40)
    model = R2D2Learner()
    T, B = 10, 3
    hidden0 = (torch.zeros(B, 16), torch.zeros(B, 16))
    return model, (torch.randn(T, B, 6), torch.randint(0, 4, (T, B)), torch.randn(T, B), torch.zeros(T, B), hidden0,
                   torch.tensor([10, 8, 7]), torch.tensor([11, 42, 7]))


# ------------------------------------------------------------------ QMIX (oxwhirl/pymarl q_learner.py, qmix.py)


class QMixer(nn.Module):
    def __init__(self, n_agents=3, state_dim=8, embed_dim=8, hypernet_embed=16):
        super().__init__()
        self.n_agents, self.state_dim, self.embed_dim = n_agents, state_dim, embed_dim
        self.hyper_w_1 = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, embed_dim * n_agents))
        self.hyper_w_final = nn.Sequential(nn.Linear(state_dim, hypernet_embed), nn.ReLU(), nn.Linear(hypernet_embed, embed_dim))
        self.hyper_b_1 = nn.Linear(state_dim, embed_dim)
        self.V = nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1))

    def forward(self, agent_qs, states):
        bs = agent_qs.size(0)
        states = states.reshape(-1, self.state_dim)
        agent_qs = agent_qs.view(-1, 1, self.n_agents)
        w1 = torch.abs(self.hyper_w_1(states))
        b1 = self.hyper_b_1(states)
        w1 = w1.view(-1, self.n_agents, self.embed_dim)
        b1 = b1.view(-1, 1, self.embed_dim)
        hidden = F.elu(torch.bmm(agent_qs, w1) + b1)
        w_final = torch.abs(self.hyper_w_final(states)).view(-1, self.embed_dim, 1)
        v = self.V(states).view(-1, 1, 1)
        y = torch.bmm(hidden, w_final) + v
        return y.view(bs, -1, 1)


class QLearner(nn.Module):
    def __init__(self, obs_dim=5, n_actions=4, gamma=0.99, learner_log_interval=100):
        super().__init__()
        self.agent, self.target_agent = mlp([obs_dim, 16, n_actions]), mlp([obs_dim, 16, n_actions])
        self.mixer, self.target_mixer = QMixer(), QMixer()
        self.target_agent.load_state_dict(self.agent.state_dict())
        self.target_mixer.load_state_dict(self.mixer.state_dict())
        self.gamma, self.learner_log_interval = gamma, learner_log_interval
        self.log_stats_t = -learner_log_interval - 1
        self.logger = StatsLogger()

    def forward(self, batch, t_env):
        max_ep_t = int(batch["filled"].sum(1).max())  # BREAK: keep the padded steps: their mask is zero
        batch = {k: v[:, :max_ep_t] for k, v in batch.items()}
        rewards = batch["reward"][:, :-1]
        actions = batch["actions"][:, :-1]
        terminated = batch["terminated"][:, :-1].float()
        mask = batch["filled"][:, :-1].float()
        mask[:, 1:] = mask[:, 1:] * (1 - terminated[:, :-1])
        avail_actions = batch["avail_actions"]

        mac_out = torch.stack([self.agent(batch["obs"][:, t]) for t in range(batch["obs"].shape[1])], dim=1)
        chosen_action_qvals = torch.gather(mac_out[:, :-1], dim=3, index=actions).squeeze(3)
        target_mac_out = torch.stack([self.target_agent(batch["obs"][:, t]) for t in range(batch["obs"].shape[1])], dim=1)[:, 1:]
        target_mac_out[avail_actions[:, 1:] == 0] = -9999999
        mac_out_detach = mac_out.clone().detach()
        mac_out_detach[avail_actions == 0] = -9999999
        cur_max_actions = mac_out_detach[:, 1:].max(dim=3, keepdim=True)[1]
        target_max_qvals = torch.gather(target_mac_out, 3, cur_max_actions).squeeze(3)

        chosen_action_qvals = self.mixer(chosen_action_qvals, batch["state"][:, :-1])
        target_max_qvals = self.target_mixer(target_max_qvals, batch["state"][:, 1:])
        targets = rewards + self.gamma * (1 - terminated) * target_max_qvals
        td_error = chosen_action_qvals - targets.detach()
        mask = mask.expand_as(td_error)
        masked_td_error = td_error * mask
        loss = (masked_td_error**2).sum() / mask.sum()
        if t_env - self.log_stats_t >= self.learner_log_interval:
            self.logger.log_stat("loss", loss.item(), t_env)  # BREAK must-not: the logged stat is a Python float taken each log interval
            self.log_stats_t = t_env
        return loss


def build_qmix_learner():
    seeded(41)
    model = QLearner()
    B, T, n, A = 2, 8, 3, 4
    lengths = [3, 5]
    filled = torch.zeros(B, T, 1, dtype=torch.long)
    terminated = torch.zeros(B, T, 1, dtype=torch.long)
    for b, L in enumerate(lengths):
        filled[b, : L + 1] = 1
        terminated[b, L - 1] = 1
    avail = (torch.rand(B, T, n, A) > 0.3).long()
    avail[..., 0] = 1
    avail = avail * filled[..., None]
    batch = {
        "obs": torch.randn(B, T, n, 5) * filled[..., None], "state": torch.randn(B, T, 8) * filled,
        "actions": torch.zeros(B, T, n, 1, dtype=torch.long), "avail_actions": avail,
        "reward": torch.randn(B, T, 1) * filled, "terminated": terminated, "filled": filled,
    }
    return model, (batch, 500)
