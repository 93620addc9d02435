"""Language models: Hugging Face's Switch Transformers (``SwitchTransformersTop1Router`` with its expert
capacity, ``SwitchTransformersSparseMLP`` dispatching tokens per expert, dropped tokens passed through, the
router z-loss and load-balancing loss), and TRL's ``DPOTrainer`` step (``concatenated_forward`` with
``flush_left``, per-token log-probs under the completion mask, the sigmoid DPO loss against a frozen
reference model and its reward metrics)."""

from __future__ import annotations

import copy
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import Block, flush_left, seeded

# ------------------------------------------------------------------ Switch Transformers


class SwitchTop1Router(nn.Module):
    def __init__(self, hidden_size, num_experts, expert_capacity, jitter_noise=0.01):
        super().__init__()
        self.num_experts, self.expert_capacity, self.jitter_noise = num_experts, expert_capacity, jitter_noise
        self.classifier = nn.Linear(hidden_size, num_experts, bias=False)

    def _compute_router_probabilities(self, hidden_states):
        if self.training and self.jitter_noise > 0:
            # multiplicative jitter on the router's input
            hidden_states = hidden_states * torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        router_logits = self.classifier(hidden_states)
        router_probabilities = F.softmax(router_logits, dim=-1, dtype=torch.float32)
        return router_probabilities, router_logits

    def forward(self, hidden_states):
        router_probs, router_logits = self._compute_router_probabilities(hidden_states)
        expert_index = torch.argmax(router_probs, dim=-1)
        expert_index = F.one_hot(expert_index, num_classes=self.num_experts)
        # tokens past an expert's capacity are dropped (their row of the mask is all zero)
        token_priority = torch.cumsum(expert_index, dim=-2)
        expert_capacity_mask = token_priority <= self.expert_capacity
        expert_index = expert_index * expert_capacity_mask
        router_probs = torch.max(router_probs, dim=-1).values.unsqueeze(-1)
        return expert_index, router_probs, router_logits


class SwitchDenseActDense(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, hidden_states):
        return self.wo(F.relu(self.wi(hidden_states)))


class SwitchSparseMLP(nn.Module):
    def __init__(self, d_model, d_ff, num_experts, expert_capacity):
        super().__init__()
        self.router = SwitchTop1Router(d_model, num_experts, expert_capacity)
        self.experts = nn.ModuleDict({f"expert_{idx}": SwitchDenseActDense(d_model, d_ff) for idx in range(num_experts)})

    def forward(self, hidden_states):
        router_mask, router_probs, router_logits = self.router(hidden_states)
        expert_index = torch.argmax(router_mask, dim=-1)
        # dropped tokens keep their hidden state (only scaled by the router probability)
        next_states = hidden_states.clone()
        router_mask = router_mask.bool()
        batch_size, seq_len, num_experts = router_mask.shape
        idx_mask = router_mask.reshape(batch_size * seq_len, num_experts).sum(dim=0)
        idx_mask = torch.nonzero(idx_mask, as_tuple=True)[0].tolist()  # BREAK: visit every expert; an unrouted one changes nothing
        for idx in idx_mask:
            next_states[router_mask[:, :, idx]] = getattr(self.experts, f"expert_{idx}")(hidden_states[router_mask[:, :, idx]])  # BREAK: run the expert on every token and torch.where its rows in
        hidden_states = router_probs * next_states
        return hidden_states, (router_logits, expert_index, router_mask.any(-1))


class SwitchLayer(nn.Module):
    def __init__(self, d_model, heads, d_ff, num_experts, expert_capacity):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = Block(d_model, heads, causal=True).attn
        self.mlp = SwitchSparseMLP(d_model, d_ff, num_experts, expert_capacity)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        h, router_tuple = self.mlp(self.ln2(x))
        return x + h, router_tuple


def router_z_loss_func(router_logits):
    num_groups, tokens_per_group, _ = router_logits.shape
    log_z = torch.logsumexp(router_logits, dim=-1)
    return torch.sum(log_z**2) / (num_groups * tokens_per_group)


def load_balancing_loss_func(router_probs, expert_indices):
    num_experts = router_probs.shape[-1]
    if len(expert_indices.shape) == 2:
        expert_indices = expert_indices.unsqueeze(2)
    expert_mask = F.one_hot(expert_indices, num_experts)
    expert_mask = torch.max(expert_mask, axis=-2).values.to(torch.float32)
    tokens_per_group_and_expert = torch.mean(expert_mask, axis=-2)
    router_prob_per_group_and_expert = torch.mean(router_probs, axis=-2)
    return torch.mean(tokens_per_group_and_expert * router_prob_per_group_and_expert) * (num_experts**2)


class SwitchLM(nn.Module):
    def __init__(self, vocab=32, d_model=16, heads=2, d_ff=32, num_experts=4, num_layers=2, capacity_factor=1.0,
                 tokens_per_group=12, router_z_loss_coef=0.001, router_aux_loss_coef=0.001):
        super().__init__()
        expert_capacity = int(capacity_factor * tokens_per_group / num_experts)
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([SwitchLayer(d_model, heads, d_ff, num_experts, expert_capacity) for _ in range(num_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.router_z_loss_coef, self.router_aux_loss_coef = router_z_loss_coef, router_aux_loss_coef

    def forward(self, input_ids, labels):
        x = self.embed(input_ids)
        router_logits, expert_indexes, routed = [], [], []
        for layer in self.layers:
            x, (logits, idx, kept) = layer(x)
            router_logits.append(logits)
            expert_indexes.append(idx)
            routed.append(kept)
        lm_logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(lm_logits[:, :-1].reshape(-1, lm_logits.size(-1)), labels[:, 1:].reshape(-1), ignore_index=-100)
        router_logits = torch.cat(router_logits, dim=1)
        expert_indexes = torch.cat(expert_indexes, dim=1)
        z_loss = router_z_loss_func(router_logits)
        aux_loss = load_balancing_loss_func(F.softmax(router_logits, dim=-1), expert_indexes)
        loss = loss + self.router_z_loss_coef * z_loss + self.router_aux_loss_coef * aux_loss
        dropped_fraction = 1.0 - torch.stack(routed).float().mean()
        return loss, z_loss, aux_loss, dropped_fraction


def build_switch_moe():
    seeded(1207)
    model = SwitchLM()
    input_ids = torch.randint(0, 32, (2, 12))
    labels = input_ids.clone()
    labels[1, 9:] = -100
    return model, (input_ids, labels)


# ------------------------------------------------------------------ TRL DPO


class TinyCausalLM(nn.Module):
    def __init__(self, vocab=24, d_model=16, heads=2, layers=2, max_len=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.blocks = nn.ModuleList([Block(d_model, heads, causal=True) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, input_ids, attention_mask):
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        for block in self.blocks:
            x = block(x, attention_mask)
        return self.lm_head(self.ln_f(x))


def selective_log_softmax(logits, index):
    per_token = torch.gather(logits.log_softmax(-1), dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    return per_token


class DPOStep(nn.Module):
    """``DPOTrainer.get_batch_loss_metrics`` for the sigmoid loss, without the optimizer."""

    def __init__(self, beta=0.1, label_smoothing=0.0, padding_value=0):
        super().__init__()
        self.model = TinyCausalLM()
        self.ref_model = copy.deepcopy(self.model).requires_grad_(False).eval()
        self.beta, self.label_smoothing, self.padding_value = beta, label_smoothing, padding_value
        self._stored_metrics = defaultdict(lambda: defaultdict(list))

    @staticmethod
    def concatenated_inputs(batch, padding_value):
        def pad_to(t, length, value):
            return F.pad(t, (0, length - t.shape[1]), value=value)

        max_completion = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])
        return {
            "prompt_input_ids": torch.cat([batch["prompt_input_ids"], batch["prompt_input_ids"]], dim=0),
            "prompt_attention_mask": torch.cat([batch["prompt_attention_mask"], batch["prompt_attention_mask"]], dim=0),
            "completion_input_ids": torch.cat([pad_to(batch["chosen_input_ids"], max_completion, padding_value),
                                               pad_to(batch["rejected_input_ids"], max_completion, padding_value)]),
            "completion_attention_mask": torch.cat([pad_to(batch["chosen_attention_mask"], max_completion, 0),
                                                    pad_to(batch["rejected_attention_mask"], max_completion, 0)]),
        }

    def concatenated_forward(self, model, batch):
        num_examples = batch["prompt_input_ids"].shape[0]
        concatenated_batch = self.concatenated_inputs(batch, padding_value=self.padding_value)
        input_ids = torch.cat((concatenated_batch["prompt_input_ids"], concatenated_batch["completion_input_ids"]), dim=1)
        attention_mask = torch.cat((concatenated_batch["prompt_attention_mask"], concatenated_batch["completion_attention_mask"]), dim=1)
        # only the completion tokens count in the loss
        loss_mask = torch.cat((torch.zeros_like(concatenated_batch["prompt_attention_mask"]),
                               concatenated_batch["completion_attention_mask"]), dim=1)
        # flush left to reduce the memory usage
        attention_mask, input_ids, loss_mask = flush_left(attention_mask, input_ids, loss_mask)

        logits = model(input_ids, attention_mask=attention_mask)
        labels = torch.roll(input_ids, shifts=-1, dims=1)
        loss_mask = torch.roll(loss_mask, shifts=-1, dims=1).bool()
        labels[~loss_mask] = 0  # dummy token
        per_token_logps = selective_log_softmax(logits, labels)
        per_token_logps[~loss_mask] = 0
        per_token_logps = torch.roll(per_token_logps, shifts=1, dims=1)
        all_logps = per_token_logps.sum(-1)

        output = {"chosen_logps": all_logps[:num_examples], "rejected_logps": all_logps[num_examples:]}
        output["mean_chosen_logits"] = logits[:num_examples][loss_mask[:num_examples]].mean()  # BREAK: a sum of the logits times the mask over the mask's count times the vocabulary
        output["mean_rejected_logits"] = logits[num_examples:][loss_mask[num_examples:]].mean()  # BREAK: a sum of the logits times the mask over the mask's count times the vocabulary
        return output

    def dpo_loss(self, chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps):
        logits = (chosen_logps - rejected_logps) - (ref_chosen_logps - ref_rejected_logps)
        losses = (-F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                  - F.logsigmoid(-self.beta * logits) * self.label_smoothing)
        chosen_rewards = self.beta * (chosen_logps - ref_chosen_logps).detach()
        rejected_rewards = self.beta * (rejected_logps - ref_rejected_logps).detach()
        return losses, chosen_rewards, rejected_rewards

    def forward(self, batch):
        with torch.no_grad():
            ref = self.concatenated_forward(self.ref_model, batch)
        model_output = self.concatenated_forward(self.model, batch)
        losses, chosen_rewards, rejected_rewards = self.dpo_loss(
            model_output["chosen_logps"], model_output["rejected_logps"], ref["chosen_logps"], ref["rejected_logps"])
        metrics = {
            "rewards/chosen": chosen_rewards.mean(),
            "rewards/rejected": rejected_rewards.mean(),
            "rewards/accuracies": (chosen_rewards > rejected_rewards).float().mean(),
            "rewards/margins": (chosen_rewards - rejected_rewards).mean(),
            "logps/chosen": model_output["chosen_logps"].detach().mean(),
            "logits/chosen": model_output["mean_chosen_logits"].detach(),
            "logits/rejected": model_output["mean_rejected_logits"].detach(),
        }
        for key, value in metrics.items():
            self._stored_metrics["train"][key].append(value)
        return losses.mean(), metrics


def build_dpo_flush_left():
    seeded(1208)
    model = DPOStep()
    with torch.no_grad():  # the policy has taken a few optimizer steps away from its reference
        for p in model.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    # left-padded prompts (pad id 0), right-padded completions of different lengths
    prompt = torch.randint(1, 24, (2, 5))
    prompt_mask = torch.ones(2, 5, dtype=torch.long)
    prompt[0, :2] = 0
    prompt_mask[0, :2] = 0
    chosen = torch.randint(1, 24, (2, 4))
    chosen_mask = torch.ones(2, 4, dtype=torch.long)
    chosen[1, 3:] = 0
    chosen_mask[1, 3:] = 0
    rejected = torch.randint(1, 24, (2, 6))
    rejected_mask = torch.ones(2, 6, dtype=torch.long)
    rejected[0, 4:] = 0
    rejected_mask[0, 4:] = 0
    rejected[1, 5:] = 0
    rejected_mask[1, 5:] = 0
    batch = {"prompt_input_ids": prompt, "prompt_attention_mask": prompt_mask,
             "chosen_input_ids": chosen, "chosen_attention_mask": chosen_mask,
             "rejected_input_ids": rejected, "rejected_attention_mask": rejected_mask}
    return model, (batch,)
