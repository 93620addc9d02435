"""Reinforcement learning: muzero-general's training batch (n-step value targets bootstrapped from the
MCTS root values, oriented to the player to move, past-the-end positions as absorbing states) and its
unrolled loss with the dynamics gradient scaled by 1/2, and torchbeast's IMPALA learner (V-trace targets
from behaviour and target policy logits, the baseline / policy-gradient / entropy losses, episode stats)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- MuZero (muzero-general)


def support_to_scalar(logits, support_size):
    """Transform a categorical representation to a scalar. See paper appendix Network Architecture"""
    # Decode to a scalar
    probabilities = torch.softmax(logits, dim=1)
    support = (
        torch.tensor([x for x in range(-support_size, support_size + 1)])
        .expand(probabilities.shape)
        .float()
        .to(device=probabilities.device)
    )
    x = torch.sum(support * probabilities, dim=1, keepdim=True)
    # Invert the scaling (defined in https://arxiv.org/abs/1805.11593)
    x = torch.sign(x) * (((torch.sqrt(1 + 4 * 0.001 * (torch.abs(x) + 1 + 0.001)) - 1) / (2 * 0.001)) ** 2 - 1)
    return x


def scalar_to_support(x, support_size):
    """Transform a scalar to a categorical representation with (2 * support_size + 1) categories."""
    # Reduce the scale (defined in https://arxiv.org/abs/1805.11593)
    x = torch.sign(x) * (torch.sqrt(torch.abs(x) + 1) - 1) + 0.001 * x
    # Encode on a vector
    x = torch.clamp(x, -support_size, support_size)
    floor = x.floor()
    prob = x - floor
    logits = torch.zeros(x.shape[0], x.shape[1], 2 * support_size + 1).to(x.device)
    logits.scatter_(2, (floor + support_size).long().unsqueeze(-1), (1 - prob).unsqueeze(-1))
    indexes = floor + support_size + 1
    prob = prob.masked_fill_(2 * support_size < indexes, 0.0)
    indexes = indexes.masked_fill_(2 * support_size < indexes, 0.0)
    logits.scatter_(2, indexes.long().unsqueeze(-1), prob.unsqueeze(-1))
    return logits


def mlp(input_size, layer_sizes, output_size, activation=nn.ELU):
    sizes = [input_size] + layer_sizes + [output_size]
    layers = []
    for i in range(len(sizes) - 1):
        act = activation if i < len(sizes) - 2 else nn.Identity
        layers += [nn.Linear(sizes[i], sizes[i + 1]), act()]
    return nn.Sequential(*layers)


def scale_encoded_state(encoded_state):
    # Scale encoded state between [0, 1] (See appendix paper Training)
    min_encoded_state = encoded_state.min(1, keepdim=True)[0]
    max_encoded_state = encoded_state.max(1, keepdim=True)[0]
    scale_encoded_state = max_encoded_state - min_encoded_state
    scale_encoded_state[scale_encoded_state < 1e-5] += 1e-5  # BREAK: torch.where(scale < 1e-5, scale + 1e-5, scale)
    return (encoded_state - min_encoded_state) / scale_encoded_state


class MuZeroFullyConnectedNetwork(nn.Module):
    def __init__(self, observation_size=6, action_space_size=3, encoding_size=8, support_size=5):
        super().__init__()
        self.action_space_size = action_space_size
        self.full_support_size = 2 * support_size + 1
        self.representation_network = mlp(observation_size, [16], encoding_size)
        self.dynamics_encoded_state_network = mlp(encoding_size + action_space_size, [16], encoding_size)
        self.dynamics_reward_network = mlp(encoding_size, [16], self.full_support_size)
        self.prediction_policy_network = mlp(encoding_size, [16], action_space_size)
        self.prediction_value_network = mlp(encoding_size, [16], self.full_support_size)

    def prediction(self, encoded_state):
        return self.prediction_policy_network(encoded_state), self.prediction_value_network(encoded_state)

    def representation(self, observation):
        encoded_state = self.representation_network(observation.view(observation.shape[0], -1))
        return scale_encoded_state(encoded_state)

    def dynamics(self, encoded_state, action):
        # Stack encoded_state with a game specific one hot encoded action (See paper appendix Network Architecture)
        action_one_hot = torch.zeros((action.shape[0], self.action_space_size)).to(action.device).float()
        action_one_hot.scatter_(1, action.long(), 1.0)
        x = torch.cat((encoded_state, action_one_hot), dim=1)
        next_encoded_state = self.dynamics_encoded_state_network(x)
        reward = self.dynamics_reward_network(next_encoded_state)
        return scale_encoded_state(next_encoded_state), reward

    def initial_inference(self, observation):
        encoded_state = self.representation(observation)
        policy_logits, value = self.prediction(encoded_state)
        # reward equal to 0 for consistency
        reward = torch.log(torch.zeros(1, self.full_support_size).scatter(1, torch.tensor([[self.full_support_size // 2]]).long(), 1.0).repeat(len(observation), 1).to(observation.device))
        return value, reward, policy_logits, encoded_state

    def recurrent_inference(self, encoded_state, action):
        next_encoded_state, reward = self.dynamics(encoded_state, action)
        policy_logits, value = self.prediction(next_encoded_state)
        return value, reward, policy_logits, next_encoded_state


class GameHistory:
    """Store only useful information of a self-play game."""

    def __init__(self, observation_history, action_history, reward_history, to_play_history, child_visits, root_values):
        self.observation_history = observation_history
        self.action_history = action_history
        self.reward_history = reward_history
        self.to_play_history = to_play_history
        self.child_visits = child_visits
        self.root_values = root_values
        self.reanalysed_predicted_root_values = None


class ReplayBuffer:
    def __init__(self, td_steps=3, discount=0.997, num_unroll_steps=3, action_space=3):
        self.td_steps = td_steps
        self.discount = discount
        self.num_unroll_steps = num_unroll_steps
        self.action_space = action_space

    def compute_target_value(self, game_history, index):
        # The value target is the discounted root value of the search tree td_steps into the
        # future, plus the discounted sum of all rewards until then.
        bootstrap_index = index + self.td_steps
        if bootstrap_index < len(game_history.root_values):
            root_values = (
                game_history.root_values
                if game_history.reanalysed_predicted_root_values is None
                else game_history.reanalysed_predicted_root_values
            )
            last_step_value = (
                root_values[bootstrap_index]
                if game_history.to_play_history[bootstrap_index] == game_history.to_play_history[index]  # BREAK: torch.where on the to_play match
                else -root_values[bootstrap_index]
            )
            value = last_step_value * self.discount**self.td_steps
        else:
            value = 0

        for i, reward in enumerate(game_history.reward_history[index + 1 : bootstrap_index + 1]):
            # The value is oriented from the perspective of the current player
            value += (
                reward
                if game_history.to_play_history[index] == game_history.to_play_history[index + i]
                else -reward
            ) * self.discount**i
        return value

    def make_target(self, game_history, state_index):
        """Generate targets for every unroll steps."""
        target_values, target_rewards, target_policies, actions = [], [], [], []
        for current_index in range(state_index, state_index + self.num_unroll_steps + 1):
            value = self.compute_target_value(game_history, current_index)
            if current_index < len(game_history.root_values):
                target_values.append(torch.as_tensor(value, dtype=torch.float32))
                target_rewards.append(game_history.reward_history[current_index])
                target_policies.append(game_history.child_visits[current_index])
                actions.append(game_history.action_history[current_index])
            elif current_index == len(game_history.root_values):
                target_values.append(torch.zeros(()))
                target_rewards.append(game_history.reward_history[current_index])
                # Uniform policy
                target_policies.append(torch.full((self.action_space,), 1 / self.action_space))
                actions.append(game_history.action_history[current_index])
            else:
                # States past the end of games are treated as absorbing states
                target_values.append(torch.zeros(()))
                target_rewards.append(torch.zeros(()))
                # Uniform policy
                target_policies.append(torch.full((self.action_space,), 1 / self.action_space))
                actions.append(torch.zeros((), dtype=torch.long))
        return torch.stack(target_values), torch.stack(target_rewards), torch.stack(target_policies), torch.stack(actions)

    def get_batch(self, games, positions):
        observation_batch, action_batch, reward_batch, value_batch, policy_batch = [], [], [], [], []
        for game_history, game_pos in zip(games, positions, strict=True):
            values, rewards, policies, actions = self.make_target(game_history, game_pos)
            observation_batch.append(game_history.observation_history[game_pos])
            action_batch.append(actions)
            value_batch.append(values)
            reward_batch.append(rewards)
            policy_batch.append(policies)
        return (torch.stack(observation_batch), torch.stack(action_batch), torch.stack(value_batch),
                torch.stack(reward_batch), torch.stack(policy_batch))


class MuZeroTrainer(nn.Module):
    def __init__(self, support_size=5, value_loss_weight=0.25):
        super().__init__()
        self.model = MuZeroFullyConnectedNetwork(support_size=support_size)
        self.replay_buffer = ReplayBuffer()
        self.support_size = support_size
        self.value_loss_weight = value_loss_weight

    @staticmethod
    def loss_function(value, reward, policy_logits, target_value, target_reward, target_policy):
        # Cross-entropy seems to have a better convergence than MSE
        value_loss = (-target_value * torch.nn.LogSoftmax(dim=1)(value)).sum(1)
        reward_loss = (-target_reward * torch.nn.LogSoftmax(dim=1)(reward)).sum(1)
        policy_loss = (-target_policy * torch.nn.LogSoftmax(dim=1)(policy_logits)).sum(1)
        return value_loss, reward_loss, policy_loss

    def forward(self, games, positions):
        observation_batch, action_batch, target_value, target_reward, target_policy = self.replay_buffer.get_batch(games, positions)
        target_value_scalar = target_value.clone()
        # [batch, num_unroll_steps+1]
        action_batch = action_batch.unsqueeze(-1)
        target_value = scalar_to_support(target_value, self.support_size)
        target_reward = scalar_to_support(target_reward, self.support_size)

        ## Generate predictions
        value, reward, policy_logits, hidden_state = self.model.initial_inference(observation_batch)
        predictions = [(value, reward, policy_logits)]
        for i in range(1, action_batch.shape[1]):
            value, reward, policy_logits, hidden_state = self.model.recurrent_inference(hidden_state, action_batch[:, i])
            # Scale the gradient at the start of the dynamics function (See paper appendix Training)
            hidden_state.register_hook(lambda grad: grad * 0.5)
            predictions.append((value, reward, policy_logits))

        ## Compute losses
        value_loss, reward_loss, policy_loss = (0, 0, 0)
        value, reward, policy_logits = predictions[0]
        # Ignore reward loss for the first batch step
        current_value_loss, _, current_policy_loss = self.loss_function(
            value.squeeze(-1), reward.squeeze(-1), policy_logits, target_value[:, 0], target_reward[:, 0], target_policy[:, 0]
        )
        value_loss += current_value_loss
        policy_loss += current_policy_loss
        # Compute priorities for the prioritized replay (See paper appendix Training)
        pred_value_scalar = support_to_scalar(value, self.support_size).detach().squeeze(-1)
        priorities = torch.abs(pred_value_scalar - target_value_scalar[:, 0])
        for i in range(1, len(predictions)):
            value, reward, policy_logits = predictions[i]
            current_value_loss, current_reward_loss, current_policy_loss = self.loss_function(
                value.squeeze(-1), reward.squeeze(-1), policy_logits, target_value[:, i], target_reward[:, i], target_policy[:, i]
            )
            value_loss += current_value_loss
            reward_loss += current_reward_loss
            policy_loss += current_policy_loss
        # Scale the value loss, paper recommends by 0.25 (See paper appendix Reanalyze)
        loss = value_loss * self.value_loss_weight + reward_loss + policy_loss
        return loss.mean(), priorities


def build_muzero_targets():
    torch.manual_seed(1501)
    g = seeded(1502)
    games = []
    for length in (7, 5):
        games.append(
            GameHistory(
                observation_history=torch.randn(length + 1, 6, generator=g),
                action_history=torch.randint(0, 3, (length + 1,), generator=g),
                reward_history=torch.randn(length + 1, generator=g).clamp(-1, 1),
                to_play_history=torch.arange(length + 1) % 2,  # a two-player board game
                child_visits=torch.softmax(torch.randn(length, 3, generator=g), -1),
                root_values=torch.randn(length, generator=g),
            )
        )
    return MuZeroTrainer(), (games, [2, 3])


# --------------------------------------------------------------------------- IMPALA learner (torchbeast)


def action_log_probs(policy_logits, actions):
    return -F.nll_loss(
        F.log_softmax(torch.flatten(policy_logits, 0, -2), dim=-1), torch.flatten(actions), reduction="none"
    ).view_as(actions)


def from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value, clip_rho_threshold=1.0,
                            clip_pg_rho_threshold=1.0):
    """V-trace from log importance weights."""
    with torch.no_grad():
        rhos = torch.exp(log_rhos)
        if clip_rho_threshold is not None:
            clipped_rhos = torch.clamp(rhos, max=clip_rho_threshold)
        else:
            clipped_rhos = rhos
        cs = torch.clamp(rhos, max=1.0)
        # Append bootstrapped value to get [v1, ..., v_t+1]
        values_t_plus_1 = torch.cat([values[1:], torch.unsqueeze(bootstrap_value, 0)], dim=0)
        deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
        acc = torch.zeros_like(bootstrap_value)
        result = []
        for t in range(discounts.shape[0] - 1, -1, -1):
            acc = deltas[t] + discounts[t] * cs[t] * acc
            result.append(acc)
        result.reverse()
        vs_minus_v_xs = torch.stack(result)
        # Add V(x_s) to get v_s.
        vs = torch.add(vs_minus_v_xs, values)
        # Advantage for policy gradient.
        broadcasted_bootstrap_values = torch.ones_like(vs[0]) * bootstrap_value
        vs_t_plus_1 = torch.cat([vs[1:], broadcasted_bootstrap_values.unsqueeze(0)])
        if clip_pg_rho_threshold is not None:
            clipped_pg_rhos = torch.clamp(rhos, max=clip_pg_rho_threshold)
        else:
            clipped_pg_rhos = rhos
        pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    # Make sure no gradients backpropagated through the returned values.
    return vs, pg_advantages


def from_logits(behavior_policy_logits, target_policy_logits, actions, discounts, rewards, values, bootstrap_value):
    """V-trace for softmax policies."""
    target_action_log_probs = action_log_probs(target_policy_logits, actions)
    behavior_action_log_probs = action_log_probs(behavior_policy_logits, actions)
    log_rhos = target_action_log_probs - behavior_action_log_probs
    return from_importance_weights(log_rhos, discounts, rewards, values, bootstrap_value)


def compute_baseline_loss(advantages):
    return 0.5 * torch.sum(advantages**2)


def compute_entropy_loss(logits):
    """Return the entropy loss, i.e., the negative entropy of the policy."""
    policy = F.softmax(logits, dim=-1)
    log_policy = F.log_softmax(logits, dim=-1)
    return torch.sum(policy * log_policy)


def compute_policy_gradient_loss(logits, actions, advantages):
    cross_entropy = F.nll_loss(F.log_softmax(torch.flatten(logits, 0, 1), dim=-1), target=torch.flatten(actions, 0, 1), reduction="none")
    cross_entropy = cross_entropy.view_as(advantages)
    return torch.sum(cross_entropy * advantages.detach())


class AtariNet(nn.Module):
    def __init__(self, observation_size=10, num_actions=4):
        super().__init__()
        self.num_actions = num_actions
        self.fc = nn.Sequential(nn.Linear(observation_size, 32), nn.ReLU())
        core_output_size = 32 + num_actions + 1
        self.policy = nn.Linear(core_output_size, num_actions)
        self.baseline = nn.Linear(core_output_size, 1)

    def forward(self, inputs):
        x = inputs["frame"]  # [T, B, F]
        T, B, *_ = x.shape
        x = torch.flatten(x, 0, 1)  # Merge time and batch.
        x = self.fc(x)
        one_hot_last_action = F.one_hot(inputs["last_action"].view(T * B), self.num_actions).float()
        clipped_reward = torch.clamp(inputs["reward"], -1, 1).view(T * B, 1)
        core_output = torch.cat([x, clipped_reward, one_hot_last_action], dim=-1)
        policy_logits = self.policy(core_output)
        baseline = self.baseline(core_output)
        if self.training:
            action = torch.multinomial(F.softmax(policy_logits, dim=1), num_samples=1)
        else:
            # Don't sample when testing.
            action = torch.argmax(policy_logits, dim=1)
        policy_logits = policy_logits.view(T, B, self.num_actions)
        baseline = baseline.view(T, B)
        action = action.view(T, B)
        return dict(policy_logits=policy_logits, baseline=baseline, action=action)


class ImpalaLearner(nn.Module):
    def __init__(self, discounting=0.99, baseline_cost=0.5, entropy_cost=0.0006, reward_clipping="abs_one"):
        super().__init__()
        self.model = AtariNet()
        self.discounting = discounting
        self.baseline_cost = baseline_cost
        self.entropy_cost = entropy_cost
        self.reward_clipping = reward_clipping

    def forward(self, batch):
        learner_outputs = self.model(batch)
        # Take final value function slice for bootstrapping.
        bootstrap_value = learner_outputs["baseline"][-1]
        # Move from obs[t] -> action[t] to action[t] -> obs[t].
        batch = {key: tensor[1:] for key, tensor in batch.items()}
        learner_outputs = {key: tensor[:-1] for key, tensor in learner_outputs.items()}
        rewards = batch["reward"]
        if self.reward_clipping == "abs_one":
            clipped_rewards = torch.clamp(rewards, -1, 1)
        elif self.reward_clipping == "none":
            clipped_rewards = rewards
        discounts = (~batch["done"]).float() * self.discounting
        vs, pg_advantages = from_logits(
            behavior_policy_logits=batch["policy_logits"], target_policy_logits=learner_outputs["policy_logits"],
            actions=batch["action"], discounts=discounts, rewards=clipped_rewards, values=learner_outputs["baseline"],
            bootstrap_value=bootstrap_value,
        )
        pg_loss = compute_policy_gradient_loss(learner_outputs["policy_logits"], batch["action"], pg_advantages)
        baseline_loss = self.baseline_cost * compute_baseline_loss(vs - learner_outputs["baseline"])
        entropy_loss = self.entropy_cost * compute_entropy_loss(learner_outputs["policy_logits"])
        total_loss = pg_loss + baseline_loss + entropy_loss
        episode_returns = batch["episode_return"][batch["done"]]  # BREAK must-not: the stats report one return per finished episode, however many finished
        stats = {
            "episode_returns": episode_returns,
            "mean_episode_return": torch.mean(episode_returns),
            "total_loss": total_loss.detach(),
            "pg_loss": pg_loss.detach(),
            "baseline_loss": baseline_loss.detach(),
            "entropy_loss": entropy_loss.detach(),
        }
        return total_loss, stats


def build_impala_learner():
    torch.manual_seed(1511)
    g = seeded(1512)
    T, B = 6, 3
    done = torch.zeros(T + 1, B, dtype=torch.bool)
    done[3, 0] = True
    done[5, 2] = True
    batch = {
        "frame": torch.randn(T + 1, B, 10, generator=g),
        "reward": torch.randn(T + 1, B, generator=g),
        "done": done,
        "episode_return": torch.randn(T + 1, B, generator=g).cumsum(0),
        "last_action": torch.randint(0, 4, (T + 1, B), generator=g),
        "action": torch.randint(0, 4, (T + 1, B), generator=g),
        "policy_logits": torch.randn(T + 1, B, 4, generator=g),
    }
    return ImpalaLearner(), (batch,)
