"""Reinforcement learning: a Decision Transformer training step on a batch sampled the way its gym experiment
samples one (returns-to-go from ``discount_cumsum``, left padding with an attention mask, the masked action
loss, the trainer's diagnostics)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

# --------------------------------------------------------------------------- Decision Transformer


class GPT2Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        bsz, T, C = hidden_states.shape
        q, k, v = self.c_attn(self.ln_1(hidden_states)).split(C, dim=2)
        q, k, v = (t.view(bsz, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        attn_weights = q @ k.transpose(-1, -2) / math.sqrt(C // self.n_head)
        causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=hidden_states.device))
        attn_weights = torch.where(causal_mask, attn_weights, torch.finfo(attn_weights.dtype).min)
        attn_weights = attn_weights + attention_mask
        attn_output = (attn_weights.softmax(-1) @ v).transpose(1, 2).reshape(bsz, T, C)
        hidden_states = hidden_states + self.c_proj(attn_output)
        return hidden_states + self.mlp(self.ln_2(hidden_states))


class GPT2Model(nn.Module):
    """transformers' GPT2Model fed ``inputs_embeds`` (the DT version drops the position embeddings)."""

    def __init__(self, n_embd: int = 32, n_layer: int = 2, n_head: int = 2) -> None:
        super().__init__()
        self.h = nn.ModuleList([GPT2Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None):
        batch_size = inputs_embeds.shape[0]
        if attention_mask is not None:
            attention_mask = attention_mask.view(batch_size, -1)
            attention_mask = attention_mask[:, None, None, :]
            attention_mask = attention_mask.to(dtype=inputs_embeds.dtype)  # fp16 compatibility
            attention_mask = (1.0 - attention_mask) * -10000.0
        hidden_states = inputs_embeds
        for block in self.h:
            hidden_states = block(hidden_states, attention_mask)
        return {"last_hidden_state": self.ln_f(hidden_states)}


class DecisionTransformer(nn.Module):
    """
    This model uses GPT to model (Return_1, state_1, action_1, Return_2, state_2, ...)
    """

    def __init__(self, state_dim, act_dim, hidden_size, max_length=None, max_ep_len=4096, action_tanh=True):
        super().__init__()
        self.state_dim = state_dim
        self.act_dim = act_dim
        self.max_length = max_length
        self.hidden_size = hidden_size

        # note: the only difference between this GPT2Model and the default Huggingface version
        # is that the positional embeddings are removed (since we'll add those ourselves)
        self.transformer = GPT2Model(n_embd=hidden_size)

        self.embed_timestep = nn.Embedding(max_ep_len, hidden_size)
        self.embed_return = torch.nn.Linear(1, hidden_size)
        self.embed_state = torch.nn.Linear(self.state_dim, hidden_size)
        self.embed_action = torch.nn.Linear(self.act_dim, hidden_size)

        self.embed_ln = nn.LayerNorm(hidden_size)

        # note: we don't predict states or returns for the paper
        self.predict_state = torch.nn.Linear(hidden_size, self.state_dim)
        self.predict_action = nn.Sequential(
            *([nn.Linear(hidden_size, self.act_dim)] + ([nn.Tanh()] if action_tanh else []))
        )
        self.predict_return = torch.nn.Linear(hidden_size, 1)

    def forward(self, states, actions, rewards, returns_to_go, timesteps, attention_mask=None):
        batch_size, seq_length = states.shape[0], states.shape[1]

        if attention_mask is None:
            # attention mask for GPT: 1 if can be attended to, 0 if not
            attention_mask = torch.ones((batch_size, seq_length), dtype=torch.long)

        # embed each modality with a different head
        state_embeddings = self.embed_state(states)
        action_embeddings = self.embed_action(actions)
        returns_embeddings = self.embed_return(returns_to_go)
        time_embeddings = self.embed_timestep(timesteps)

        # time embeddings are treated similar to positional embeddings
        state_embeddings = state_embeddings + time_embeddings
        action_embeddings = action_embeddings + time_embeddings
        returns_embeddings = returns_embeddings + time_embeddings

        # this makes the sequence look like (R_1, s_1, a_1, R_2, s_2, a_2, ...)
        # which works nice in an autoregressive sense since states predict actions
        stacked_inputs = torch.stack(
            (returns_embeddings, state_embeddings, action_embeddings), dim=1
        ).permute(0, 2, 1, 3).reshape(batch_size, 3 * seq_length, self.hidden_size)
        stacked_inputs = self.embed_ln(stacked_inputs)

        # to make the attention mask fit the stacked inputs, have to stack it as well
        stacked_attention_mask = torch.stack(
            (attention_mask, attention_mask, attention_mask), dim=1
        ).permute(0, 2, 1).reshape(batch_size, 3 * seq_length)

        # we feed in the input embeddings (not word indices as in NLP) to the model
        transformer_outputs = self.transformer(
            inputs_embeds=stacked_inputs,
            attention_mask=stacked_attention_mask,
        )
        x = transformer_outputs["last_hidden_state"]

        # reshape x so that the second dimension corresponds to the original
        # returns (0), states (1), or actions (2); i.e. x[:,1,t] is the token for s_t
        x = x.reshape(batch_size, seq_length, 3, self.hidden_size).permute(0, 2, 1, 3)

        # get predictions
        return_preds = self.predict_return(x[:, 2])  # predict next return given state and action
        state_preds = self.predict_state(x[:, 2])  # predict next state given state and action
        action_preds = self.predict_action(x[:, 1])  # predict next action given state

        return state_preds, action_preds, return_preds


class SequenceTrainer(nn.Module):
    """The loss half of decision_transformer.training.SequenceTrainer.train_step (backward/step stay outside)."""

    def __init__(self, model: DecisionTransformer) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = lambda s_hat, a_hat, r_hat, s, a, r: torch.mean((a_hat - a) ** 2)
        self.diagnostics = {}

    def forward(self, states, actions, rewards, dones, rtg, timesteps, attention_mask):
        action_target = torch.clone(actions)

        state_preds, action_preds, reward_preds = self.model.forward(
            states, actions, rewards, rtg[:, :-1], timesteps, attention_mask=attention_mask,
        )

        act_dim = action_preds.shape[2]
        action_preds = action_preds.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]  # BREAK: masked mean of the error
        action_target = action_target.reshape(-1, act_dim)[attention_mask.reshape(-1) > 0]  # BREAK: same rewrite

        loss = self.loss_fn(
            None, action_preds, None,
            None, action_target, None,
        )

        with torch.no_grad():
            self.diagnostics["training/action_error"] = torch.mean((action_preds - action_target) ** 2).detach().cpu().item()  # BREAK: keep the detached tensor

        return loss


def discount_cumsum(x, gamma):
    discount_cumsum = np.zeros_like(x)
    discount_cumsum[-1] = x[-1]
    for t in reversed(range(x.shape[0] - 1)):
        discount_cumsum[t] = x[t] + gamma * discount_cumsum[t + 1]
    return discount_cumsum


def get_batch(trajectories, state_dim, act_dim, state_mean, state_std, p_sample, batch_size=4, max_len=6,
              max_ep_len=1000, scale=100.0):
    """experiment.py's get_batch: sample trajectories by length, cut a window, left-pad, normalise."""
    batch_inds = np.random.choice(np.arange(len(trajectories)), size=batch_size, replace=True, p=p_sample)

    s, a, r, d, rtg, timesteps, mask = [], [], [], [], [], [], []
    for i in range(batch_size):
        traj = trajectories[int(batch_inds[i])]
        si = np.random.randint(0, traj["rewards"].shape[0] - 1)

        # get sequences from dataset
        s.append(traj["observations"][si:si + max_len].reshape(1, -1, state_dim))
        a.append(traj["actions"][si:si + max_len].reshape(1, -1, act_dim))
        r.append(traj["rewards"][si:si + max_len].reshape(1, -1, 1))
        d.append(traj["dones"][si:si + max_len].reshape(1, -1))
        timesteps.append(np.arange(si, si + s[-1].shape[1]).reshape(1, -1))
        timesteps[-1][timesteps[-1] >= max_ep_len] = max_ep_len - 1  # padding cutoff
        rtg.append(discount_cumsum(traj["rewards"][si:], gamma=1.)[:s[-1].shape[1] + 1].reshape(1, -1, 1))
        if rtg[-1].shape[1] <= s[-1].shape[1]:
            rtg[-1] = np.concatenate([rtg[-1], np.zeros((1, 1, 1))], axis=1)

        # padding and state + reward normalization
        tlen = s[-1].shape[1]
        s[-1] = np.concatenate([np.zeros((1, max_len - tlen, state_dim)), s[-1]], axis=1)
        s[-1] = (s[-1] - state_mean) / state_std
        a[-1] = np.concatenate([np.ones((1, max_len - tlen, act_dim)) * -10., a[-1]], axis=1)
        r[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), r[-1]], axis=1)
        d[-1] = np.concatenate([np.ones((1, max_len - tlen)) * 2, d[-1]], axis=1)
        rtg[-1] = np.concatenate([np.zeros((1, max_len - tlen, 1)), rtg[-1]], axis=1) / scale
        timesteps[-1] = np.concatenate([np.zeros((1, max_len - tlen)), timesteps[-1]], axis=1)
        mask.append(np.concatenate([np.zeros((1, max_len - tlen)), np.ones((1, tlen))], axis=1))

    s = torch.from_numpy(np.concatenate(s, axis=0)).to(dtype=torch.float32)
    a = torch.from_numpy(np.concatenate(a, axis=0)).to(dtype=torch.float32)
    r = torch.from_numpy(np.concatenate(r, axis=0)).to(dtype=torch.float32)
    d = torch.from_numpy(np.concatenate(d, axis=0)).to(dtype=torch.long)
    rtg = torch.from_numpy(np.concatenate(rtg, axis=0)).to(dtype=torch.float32)
    timesteps = torch.from_numpy(np.concatenate(timesteps, axis=0)).to(dtype=torch.long)
    mask = torch.from_numpy(np.concatenate(mask, axis=0))
    return s, a, r, d, rtg, timesteps, mask


def build_decision_transformer():
    torch.manual_seed(1100)
    rng = np.random.RandomState(1101)
    state_dim, act_dim = 5, 2
    trajectories = []
    for length in (3, 9, 14, 5):  # short episodes force left padding in the sampled windows
        trajectories.append({
            "observations": rng.randn(length, state_dim),
            "actions": np.tanh(rng.randn(length, act_dim)),
            "rewards": rng.rand(length),
            "dones": np.eye(1, length, length - 1, dtype=bool)[0],
        })
    states = np.concatenate([t["observations"] for t in trajectories], axis=0)
    state_mean, state_std = np.mean(states, axis=0), np.std(states, axis=0) + 1e-6
    traj_lens = np.array([len(t["observations"]) for t in trajectories])
    p_sample = traj_lens / sum(traj_lens)
    np.random.seed(1102)
    batch = get_batch(trajectories, state_dim, act_dim, state_mean, state_std, p_sample)
    model = DecisionTransformer(state_dim, act_dim, hidden_size=32, max_length=6, max_ep_len=20)
    return SequenceTrainer(model), batch

