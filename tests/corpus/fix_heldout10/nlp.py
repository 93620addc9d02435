"""Language-model training and serving: OpenRLHF's DPO step (prompt tokens masked out of the log-probs,
right padding trimmed to the longest sequence), TRL's GRPO loss (completions cut after the first EOS,
group-normalised advantages, the k3 KL estimator, metrics kept for logging), TRL's KTO loss (desirable and
undesirable examples split by their label against a mismatched-pair KL baseline), a Medusa decoding step
(candidates from the extra heads, the longest accepted prefix appended), a Switch Transformers sparse MLP
with expert capacity, vLLM's reference paged-attention decode step over a block table, and a Hugging Face
Trainer-style gradient-accumulation loop that normalises the loss by the tokens of the whole step."""

from __future__ import annotations

import math
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import TinyCausalLM, seeded, selective_log_softmax

# --------------------------------------------------------------------------- DPO (OpenRLHF)


class DPOLoss(nn.Module):
    """DPO Loss"""

    def __init__(self, beta: float, label_smoothing: float = 0.0, ipo: bool = False) -> None:
        super().__init__()
        self.beta = beta
        self.label_smoothing = label_smoothing
        self.ipo = ipo

    def forward(self, policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps):
        pi_logratios = policy_chosen_logps - policy_rejected_logps
        ref_logratios = reference_chosen_logps - reference_rejected_logps
        logits = pi_logratios - ref_logratios

        if self.ipo:
            losses = (logits - 1 / (2 * self.beta)) ** 2  # Eq. 17 of https://arxiv.org/pdf/2310.12036v2.pdf
        else:
            # Eq. 3 https://ericmitchell.ai/cdpo.pdf; label_smoothing=0 gives original DPO (Eq. 7 of https://arxiv.org/pdf/2305.18290.pdf)
            losses = (
                -F.logsigmoid(self.beta * logits) * (1 - self.label_smoothing)
                - F.logsigmoid(-self.beta * logits) * self.label_smoothing
            )

        loss = losses.mean()
        chosen_rewards = self.beta * (policy_chosen_logps - reference_chosen_logps).detach()
        rejected_rewards = self.beta * (policy_rejected_logps - reference_rejected_logps).detach()
        return loss, chosen_rewards, rejected_rewards


class DPOTrainer(nn.Module):
    def __init__(self, model: nn.Module, ref_model: nn.Module, beta: float = 0.1, nll_loss_coef: float = 0.1,
                 pad_token_id: int = 0) -> None:
        super().__init__()
        self.model = model
        self.ref_model = ref_model
        self.loss_fn = DPOLoss(beta)
        self.nll_loss_coef = nll_loss_coef
        self.pad_token_id = pad_token_id

    def forward(self, chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens):
        chosen_logps, rejected_logps, nll_loss = self.concatenated_forward(
            self.model, chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens
        )
        with torch.no_grad():
            reference_chosen_logps, reference_rejected_logps, _ = self.concatenated_forward(
                self.ref_model, chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens
            )
        preference_loss, chosen_reward, reject_reward = self.loss_fn(
            chosen_logps, rejected_logps, reference_chosen_logps, reference_rejected_logps
        )
        loss = preference_loss + nll_loss * self.nll_loss_coef
        acc = (chosen_reward > reject_reward).float().mean()
        return {"loss": loss, "preference_loss": preference_loss.detach(), "acc": acc,
                "chosen_reward": chosen_reward.mean(), "reject_reward": reject_reward.mean()}

    def concatenated_forward(self, model, chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens):
        """Run the given model on the given batch of inputs, concatenating the chosen and rejected inputs together.

        We do this to avoid doing two forward passes, because it's faster for FSDP.
        """
        input_ids, att_masks, prompt_id_lens = self.concatenated_inputs(chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens)
        # the collator pads every sample to max_len: drop the columns that are padding in every row
        seq_len = int(att_masks.sum(dim=1).max())  # BREAK: keep the collator's padded length (right padding, causal model)
        input_ids, att_masks = input_ids[:, :seq_len], att_masks[:, :seq_len]
        all_logits = model(input_ids, attention_mask=att_masks)
        all_logps_sum, all_logps_mean = self._get_batch_logps(all_logits, input_ids, att_masks, prompt_id_lens)
        chosen_logps = all_logps_sum[: chosen_ids.shape[0]]
        rejected_logps = all_logps_sum[chosen_ids.shape[0] :]
        return chosen_logps, rejected_logps, -all_logps_mean[: chosen_ids.shape[0]].mean()

    def concatenated_inputs(self, chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens):
        def pad_to_length(tensor, length, pad_value, dim=-1):
            if tensor.size(dim) >= length:
                return tensor
            pad_size = list(tensor.shape)
            pad_size[dim] = length - tensor.size(dim)
            return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)

        max_length = max(chosen_ids.shape[1], reject_ids.shape[1])
        inputs_ids = torch.cat(
            (pad_to_length(chosen_ids, max_length, self.pad_token_id), pad_to_length(reject_ids, max_length, self.pad_token_id)),
            dim=0,
        )
        max_length = max(c_mask.shape[1], r_mask.shape[1])
        att_masks = torch.cat((pad_to_length(c_mask, max_length, 0), pad_to_length(r_mask, max_length, 0)), dim=0)
        return inputs_ids, att_masks, torch.cat([prompt_id_lens, prompt_id_lens])

    def _get_batch_logps(self, logits, labels, attention_mask, prompt_id_lens):
        assert logits.shape[:-1] == labels.shape
        labels = labels[:, 1:].clone()
        logits = logits[:, :-1, :]

        loss_masks = attention_mask.clone().bool()
        # mask prompts
        for mask, source_len in zip(loss_masks, prompt_id_lens, strict=True):
            mask[:source_len] = False  # BREAK: compare arange(seq_len) against prompt_id_lens[:, None]
        loss_masks = loss_masks[:, 1:]

        # dummy token; we'll ignore the losses on these tokens later
        labels[loss_masks == False] = 0  # noqa: E712
        per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
        logprobs_sums = (per_token_logps * loss_masks).sum(-1)
        logprobs_means = (per_token_logps * loss_masks).sum(-1) / loss_masks.sum(-1)
        return logprobs_sums, logprobs_means


def build_dpo_step():
    torch.manual_seed(1001)
    policy = TinyCausalLM()
    ref = TinyCausalLM()
    ref.load_state_dict(policy.state_dict())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=seeded(1002)))
    ref.requires_grad_(False)
    g = seeded(1003)
    max_len = 16  # the collator pads to a fixed max_len
    c_lens = torch.tensor([9, 12, 7])
    r_lens = torch.tensor([11, 8, 10])
    chosen_ids = torch.randint(1, 48, (3, max_len), generator=g)
    reject_ids = torch.randint(1, 48, (3, max_len), generator=g)
    c_mask = (torch.arange(max_len)[None] < c_lens[:, None]).long()
    r_mask = (torch.arange(max_len)[None] < r_lens[:, None]).long()
    chosen_ids, reject_ids = chosen_ids * c_mask, reject_ids * r_mask
    prompt_id_lens = torch.tensor([4, 5, 3])
    reject_ids[:, :5] = chosen_ids[:, :5]  # same prompt
    return DPOTrainer(policy, ref), (chosen_ids, c_mask, reject_ids, r_mask, prompt_id_lens)


# --------------------------------------------------------------------------- GRPO (TRL)


class GRPOTrainer(nn.Module):
    def __init__(self, model: nn.Module, ref_model: nn.Module, num_generations: int = 4, beta: float = 0.04,
                 eos_token_id: int = 2) -> None:
        super().__init__()
        self.model = model
        self.ref_model = ref_model
        self.num_generations = num_generations
        self.beta = beta
        self.eos_token_id = eos_token_id
        self._metrics = defaultdict(list)

    def _get_per_token_logps(self, model, input_ids, attention_mask, logits_to_keep):
        logits = model(input_ids, attention_mask=attention_mask)
        logits = logits[:, :-1, :]  # (B, L-1, V), exclude the last logit: it corresponds to the next token pred
        input_ids = input_ids[:, -logits_to_keep:]
        logits = logits[:, -logits_to_keep:]
        return selective_log_softmax(logits, input_ids)  # compute logprobs for the input tokens

    def forward(self, prompt_ids, prompt_mask, completion_ids, rewards):
        device = completion_ids.device
        # Mask everything after the first EOS token
        is_eos = completion_ids == self.eos_token_id
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long, device=device)
        eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]  # BREAK: torch.where(is_eos.any(1), argmax, eos_idx)
        sequence_indices = torch.arange(is_eos.size(1), device=device).expand(is_eos.size(0), -1)
        completion_mask = (sequence_indices <= eos_idx.unsqueeze(1)).int()

        prompt_completion_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)  # (B, P+C)
        logits_to_keep = completion_ids.size(1)  # we only need to compute the logits for the completion tokens

        with torch.no_grad():
            ref_per_token_logps = self._get_per_token_logps(self.ref_model, prompt_completion_ids, attention_mask, logits_to_keep)

        # Compute grouped-wise rewards
        mean_grouped_rewards = rewards.view(-1, self.num_generations).mean(dim=1)
        std_grouped_rewards = rewards.view(-1, self.num_generations).std(dim=1)
        # Normalize the rewards to compute the advantages
        mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        std_grouped_rewards = std_grouped_rewards.repeat_interleave(self.num_generations, dim=0)
        advantages = (rewards - mean_grouped_rewards) / (std_grouped_rewards + 1e-4)

        per_token_logps = self._get_per_token_logps(self.model, prompt_completion_ids, attention_mask, logits_to_keep)
        # Compute the KL divergence between the model and the reference model
        per_token_kl = torch.exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1
        # x - x.detach() allows for preserving gradients from x
        per_token_loss = torch.exp(per_token_logps - per_token_logps.detach()) * advantages.unsqueeze(1)
        per_token_loss = -(per_token_loss - self.beta * per_token_kl)
        loss = ((per_token_loss * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()

        # Log the metrics
        completion_length = completion_mask.sum(1).float().mean().item()  # BREAK: keep the metric a detached tensor
        self._metrics["completion_length"].append(completion_length)
        mean_kl = ((per_token_kl * completion_mask).sum(dim=1) / completion_mask.sum(dim=1)).mean()
        self._metrics["kl"].append(mean_kl.item())  # BREAK: keep the metric a detached tensor
        return loss


def build_grpo_loss():
    torch.manual_seed(1011)
    policy = TinyCausalLM()
    ref = TinyCausalLM()
    ref.load_state_dict(policy.state_dict())
    ref.requires_grad_(False)
    g = seeded(1012)
    # two prompts x four generations, prompts left-padded
    prompt_lens = torch.tensor([5, 5, 5, 5, 3, 3, 3, 3])
    prompt_mask = (torch.arange(6)[None] >= (6 - prompt_lens)[:, None]).long()
    prompt_ids = torch.randint(3, 48, (8, 6), generator=g) * prompt_mask
    completion_ids = torch.randint(3, 48, (8, 7), generator=g)
    completion_ids[0, 3] = 2
    completion_ids[2, 5] = 2
    completion_ids[2, 6] = 2
    completion_ids[5, 1] = 2
    rewards = torch.rand(8, generator=g)
    return GRPOTrainer(policy, ref), (prompt_ids, prompt_mask, completion_ids, rewards)


# --------------------------------------------------------------------------- KTO (TRL)


class KTOTrainer(nn.Module):
    def __init__(self, model: nn.Module, ref_model: nn.Module, beta: float = 0.1, desirable_weight: float = 1.0,
                 undesirable_weight: float = 1.33, label_pad_token_id: int = -100) -> None:
        super().__init__()
        self.model = model
        self.ref_model = ref_model
        self.beta = beta
        self.desirable_weight = desirable_weight
        self.undesirable_weight = undesirable_weight
        self.label_pad_token_id = label_pad_token_id

    def get_batch_logps(self, logits, labels, average_log_prob: bool = False):
        if logits.shape[:-1] != labels.shape:
            raise ValueError("Logits (batch and sequence length dim) and labels must have the same shape.")
        labels = labels[:, 1:].clone()
        logits = logits[:, :-1, :]
        loss_mask = labels != self.label_pad_token_id
        # dummy token; we'll ignore the losses on these tokens later
        labels[labels == self.label_pad_token_id] = 0
        per_token_logps = selective_log_softmax(logits, labels)
        if average_log_prob:
            return (per_token_logps * loss_mask).sum(-1) / loss_mask.sum(-1)
        return (per_token_logps * loss_mask).sum(-1)

    def forward_logps(self, model, batch):
        with torch.no_grad():
            KL_logits = model(batch["KL_completion_input_ids"], attention_mask=batch["KL_completion_attention_mask"])
        completion_logits = model(batch["completion_input_ids"], attention_mask=batch["completion_attention_mask"])
        completion_logps = self.get_batch_logps(completion_logits, batch["completion_labels"])
        KL_logps = self.get_batch_logps(KL_logits, batch["KL_completion_labels"])

        if completion_logps.shape[0] != len(batch["label"]):
            raise ValueError("There is a mismatch between the number of examples in this batch and the number of examples for which an output sequence was predicted.")
        chosen_idx = torch.nonzero(batch["label"], as_tuple=True)[0]  # BREAK: weigh each example by its label mask
        rejected_idx = torch.nonzero(~batch["label"], as_tuple=True)[0]  # BREAK: weigh each example by its label mask
        chosen_logps = completion_logps[chosen_idx, ...]
        rejected_logps = completion_logps[rejected_idx, ...]
        return chosen_logps, rejected_logps, KL_logps

    def kto_loss(self, policy_chosen_logps, policy_rejected_logps, policy_KL_logps, reference_chosen_logps,
                 reference_rejected_logps, reference_KL_logps):
        kl = (policy_KL_logps - reference_KL_logps).mean().detach()
        kl = kl.clamp(min=0)

        if policy_chosen_logps.shape[0] != 0 or reference_chosen_logps.shape[0] != 0:
            chosen_logratios = policy_chosen_logps - reference_chosen_logps
            chosen_losses = 1 - F.sigmoid(self.beta * (chosen_logratios - kl))
            chosen_rewards = self.beta * chosen_logratios.detach()
        else:
            # lists can't be empty -- if they are, then accelerate.gather will hang
            chosen_losses = torch.Tensor([]).to(kl.device)
            chosen_rewards = torch.Tensor([]).to(kl.device)

        if policy_rejected_logps.shape[0] != 0 or reference_rejected_logps.shape[0] != 0:
            rejected_logratios = policy_rejected_logps - reference_rejected_logps
            rejected_losses = 1 - F.sigmoid(self.beta * (kl - rejected_logratios))
            rejected_rewards = self.beta * rejected_logratios.detach()
        else:
            rejected_losses = torch.Tensor([]).to(kl.device)
            rejected_rewards = torch.Tensor([]).to(kl.device)

        losses = torch.cat((self.desirable_weight * chosen_losses, self.undesirable_weight * rejected_losses), 0)
        return losses, chosen_rewards, rejected_rewards, kl

    def forward(self, batch):
        policy_chosen_logps, policy_rejected_logps, policy_KL_logps = self.forward_logps(self.model, batch)
        with torch.no_grad():
            reference_chosen_logps, reference_rejected_logps, reference_KL_logps = self.forward_logps(self.ref_model, batch)
        losses, chosen_rewards, rejected_rewards, kl = self.kto_loss(
            policy_chosen_logps, policy_rejected_logps, policy_KL_logps,
            reference_chosen_logps, reference_rejected_logps, reference_KL_logps,
        )
        metrics = {"kl": kl, "rewards/chosen_sum": chosen_rewards.nansum(), "rewards/rejected_sum": rejected_rewards.nansum()}
        return losses.nanmean(), metrics


def build_kto_loss():
    torch.manual_seed(1021)
    policy = TinyCausalLM()
    ref = TinyCausalLM()
    ref.load_state_dict(policy.state_dict())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=seeded(1022)))
    ref.requires_grad_(False)
    g = seeded(1023)
    lens = torch.tensor([10, 8, 12, 9, 11])
    prompt = torch.tensor([4, 3, 5, 4, 3])
    mask = (torch.arange(12)[None] < lens[:, None]).long()
    ids = torch.randint(1, 48, (5, 12), generator=g) * mask
    labels = ids.masked_fill((torch.arange(12)[None] < prompt[:, None]) | (mask == 0), -100)
    # KL pairs: each prompt with the next example's completion (shifted in the collator)
    kl_ids = torch.roll(ids, 1, 0)
    kl_mask = torch.roll(mask, 1, 0)
    kl_labels = torch.roll(labels, 1, 0)
    batch = {
        "completion_input_ids": ids, "completion_attention_mask": mask, "completion_labels": labels,
        "KL_completion_input_ids": kl_ids, "KL_completion_attention_mask": kl_mask, "KL_completion_labels": kl_labels,
        "label": torch.tensor([True, False, True, True, False]),
    }
    return KTOTrainer(policy, ref), (batch,)


# --------------------------------------------------------------------------- Medusa decoding


class ResBlock(nn.Module):
    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        torch.nn.init.zeros_(self.linear.weight)  # initialised to identity through the residual
        self.act = nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


def generate_medusa_buffers(medusa_choices):
    """Tree indices and retrieve indices of a Medusa candidate tree given as paths of top-k choices."""
    sorted_choices = sorted(medusa_choices, key=lambda x: (len(x), x))
    tree_len = len(sorted_choices) + 1
    depth_counts = []
    prev_depth = 0
    for path in sorted_choices:
        depth = len(path)
        if depth != prev_depth:
            depth_counts.append(0)
        depth_counts[depth - 1] += 1
        prev_depth = depth
    medusa_tree_indices = torch.zeros(tree_len, dtype=torch.long)
    start = 0
    for i in range(len(depth_counts)):
        for j in range(depth_counts[i]):
            cur = sorted_choices[start + j]
            medusa_tree_indices[start + j + 1] = cur[-1] + TOPK * i + 1
        start += depth_counts[i]
    retrieve_paths = []
    for path in sorted_choices:
        if not any(other[: len(path)] == path and len(other) > len(path) for other in sorted_choices):
            retrieve_paths.append(path)
    max_length = max(len(p) for p in retrieve_paths) + 1
    retrieve_indices = torch.full((len(retrieve_paths), max_length), -1, dtype=torch.long)
    for i, path in enumerate(retrieve_paths):
        retrieve_indices[i, 0] = 0
        for c in range(len(path)):
            retrieve_indices[i, c + 1] = sorted_choices.index(path[: c + 1]) + 1
    return {"tree_indices": medusa_tree_indices, "retrieve_indices": retrieve_indices}


TOPK = 3


def generate_candidates(medusa_logits, logits, tree_indices, retrieve_indices):
    candidates_logit = torch.argmax(logits[:, -1]).unsqueeze(0)
    candidates_medusa_logits = torch.topk(medusa_logits[:, 0, -1], TOPK, dim=-1).indices
    candidates = torch.cat([candidates_logit, candidates_medusa_logits.view(-1)], dim=-1)
    tree_candidates = candidates[tree_indices]
    tree_candidates_ext = torch.cat([tree_candidates, torch.zeros((1), dtype=torch.long, device=tree_candidates.device)], dim=0)
    cart_candidates = tree_candidates_ext[retrieve_indices]
    return cart_candidates


def evaluate_posterior(logits, candidates):
    # Greedy decoding based on temperature value
    posterior_mask = (candidates[:, 1:] == torch.argmax(logits[:, :-1], dim=-1)).int()
    candidates_accept_length = (torch.cumprod(posterior_mask, dim=1)).sum(dim=1)
    accept_length = candidates_accept_length.max()
    # Choose the best candidate
    if accept_length == 0:  # BREAK: torch.where(accept_length == 0, 0, argmax) (argmax of all zeros is 0 anyway)
        # Default to the first candidate if none are accepted
        best_candidate = torch.tensor(0, dtype=torch.long, device=candidates.device)
    else:
        best_candidate = torch.argmax(candidates_accept_length).to(torch.long)
    return best_candidate, accept_length


def update_inference_inputs(input_ids, candidates, best_candidate, accept_length, new_token):
    input_ids = torch.cat([input_ids, candidates[None, best_candidate, : accept_length + 1]], dim=-1)  # BREAK must-not: the sequence grows by the accepted length, which the data decides
    new_token += accept_length + 1
    return input_ids, new_token


class MedusaModel(nn.Module):
    def __init__(self, base_model: TinyCausalLM, medusa_num_heads: int = 2, medusa_choices=None) -> None:
        super().__init__()
        self.base_model = base_model
        hidden = base_model.wte.embedding_dim
        self.medusa = medusa_num_heads
        self.medusa_head = nn.ModuleList(
            nn.Sequential(ResBlock(hidden), nn.Linear(hidden, base_model.vocab_size, bias=False)) for _ in range(medusa_num_heads)
        )
        buffers = generate_medusa_buffers(medusa_choices or [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0)])
        self.register_buffer("tree_indices", buffers["tree_indices"], persistent=False)
        self.register_buffer("retrieve_indices", buffers["retrieve_indices"], persistent=False)

    def medusa_forward(self, input_ids):
        hidden_states = self.base_model.hidden_states(input_ids)
        medusa_logits = torch.stack([head(hidden_states) for head in self.medusa_head], dim=0)
        return medusa_logits, self.base_model.lm_head(hidden_states)

    @torch.no_grad()
    def forward(self, input_ids, max_steps: int = 2, eos_token_id: int = 1):
        input_len = input_ids.shape[1]
        new_token = 0
        medusa_logits, logits = self.medusa_forward(input_ids)
        for _ in range(max_steps):
            candidates = generate_candidates(medusa_logits, logits, self.tree_indices, self.retrieve_indices)
            # verify every candidate continuation in one batched pass (no tree attention without a KV cache)
            ctx = input_ids.expand(candidates.size(0), -1)
            tree_logits = self.base_model(torch.cat([ctx, candidates], dim=1))[:, ctx.size(1) :]
            best_candidate, accept_length = evaluate_posterior(tree_logits, candidates)
            input_ids, new_token = update_inference_inputs(input_ids, candidates, best_candidate, accept_length, new_token)
            if eos_token_id in input_ids[0, input_len:]:
                break
            medusa_logits, logits = self.medusa_forward(input_ids)
        return input_ids, new_token


def build_medusa_step():
    torch.manual_seed(1031)
    base = TinyCausalLM(vocab_size=24)
    model = MedusaModel(base).eval()
    # heads distilled from the base model: start them as copies of the LM head, as Medusa-1 does
    with torch.no_grad():
        for head in model.medusa_head:
            head[1].weight.copy_(base.lm_head.weight)
    input_ids = torch.randint(3, 24, (1, 6), generator=seeded(1032))
    return model, (input_ids,)


# --------------------------------------------------------------------------- Switch Transformers (HF)


class SwitchTransformersTop1Router(nn.Module):
    def __init__(self, hidden: int, num_experts: int, expert_capacity: int, jitter_noise: float = 0.0) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.expert_capacity = expert_capacity
        self.classifier = nn.Linear(hidden, num_experts, bias=False)
        self.jitter_noise = jitter_noise
        self.dtype = torch.float32

    def _compute_router_probabilities(self, hidden_states):
        self.input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(self.dtype)
        if self.training and self.jitter_noise > 0:
            hidden_states *= torch.empty_like(hidden_states).uniform_(1.0 - self.jitter_noise, 1.0 + self.jitter_noise)
        router_logits = self.classifier(hidden_states)
        router_probabilities = nn.functional.softmax(router_logits, dim=-1, dtype=self.dtype).to(self.input_dtype)
        return router_probabilities, router_logits

    def forward(self, hidden_states):
        router_probs, router_logits = self._compute_router_probabilities(hidden_states)
        expert_index = torch.argmax(router_probs, dim=-1)
        expert_index = torch.nn.functional.one_hot(expert_index, num_classes=self.num_experts)
        # Mask tokens outside expert capacity. Sum over each sequence
        token_priority = torch.cumsum(expert_index, dim=-2)
        # mask if the token routed to to the expert will overflow
        expert_capacity_mask = token_priority <= self.expert_capacity
        expert_index = expert_index * expert_capacity_mask
        router_probs = torch.max(router_probs, dim=-1).values.unsqueeze(-1)
        return expert_index, router_probs, router_logits


class SwitchTransformersDenseActDense(nn.Module):
    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.act = nn.ReLU()

    def forward(self, hidden_states):
        return self.wo(self.act(self.wi(hidden_states)))


class SwitchTransformersSparseMLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, num_experts: int, expert_capacity: int) -> None:
        super().__init__()
        self.router = SwitchTransformersTop1Router(d_model, num_experts, expert_capacity)
        self.experts = nn.ModuleDict({f"expert_{i}": SwitchTransformersDenseActDense(d_model, d_ff) for i in range(num_experts)})

    def forward(self, hidden_states):
        # Step 1: Get the router_mask from the router as well as the probabilities
        router_mask, router_probs, router_logits = self.router(hidden_states)
        expert_index = torch.argmax(router_mask, dim=-1)

        # The routers introduced might not always map all the tokens, to a router, which means that some hidden
        # states can be unchanged from one layer to another. That is why the hidden states are cloned before updating
        # only the selected ones.
        next_states = hidden_states.clone()
        router_mask = router_mask.bool()
        batch_size, seq_len, num_experts = router_mask.shape
        idx_mask = router_mask.reshape(batch_size * seq_len, num_experts).sum(dim=0)
        idx_mask = torch.nonzero(idx_mask, as_tuple=True)[0].tolist()  # BREAK: loop over every expert index
        for idx in idx_mask:
            next_states[router_mask[:, :, idx]] = getattr(self.experts, f"expert_{idx}")(  # BREAK: run the expert on all tokens, torch.where the routed ones
                hidden_states[router_mask[:, :, idx]]
            )
        hidden_states = router_probs * next_states
        return hidden_states, (router_logits, expert_index)


def router_z_loss_func(router_logits):
    num_groups, tokens_per_group, _ = router_logits.shape
    log_z = torch.logsumexp(router_logits, dim=-1)
    z_loss = log_z**2
    return torch.sum(z_loss) / (num_groups * tokens_per_group)


def load_balancing_loss_func(router_probs, expert_indices):
    num_experts = router_probs.shape[-1]
    if expert_indices.dtype != torch.int64:
        expert_indices = expert_indices.to(torch.int64)
    if len(expert_indices.shape) == 2:
        expert_indices = expert_indices.unsqueeze(2)
    expert_mask = torch.nn.functional.one_hot(expert_indices, num_experts)
    expert_mask = torch.max(expert_mask, axis=-2).values
    expert_mask = expert_mask.to(torch.float32)
    tokens_per_group_and_expert = torch.mean(expert_mask, axis=-2)
    router_prob_per_group_and_expert = torch.mean(router_probs, axis=-2)
    return torch.mean(tokens_per_group_and_expert * router_prob_per_group_and_expert) * (num_experts**2)


class SwitchLM(nn.Module):
    def __init__(self, vocab: int = 40, d_model: int = 24, d_ff: int = 48, num_experts: int = 4, capacity: int = 3,
                 router_z_loss_coef: float = 0.001, router_aux_loss_coef: float = 0.001) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.dense = SwitchTransformersDenseActDense(d_model, d_ff)
        self.ln2 = nn.LayerNorm(d_model)
        self.sparse = SwitchTransformersSparseMLP(d_model, d_ff, num_experts, capacity)
        self.head = nn.Linear(d_model, vocab)
        self.router_z_loss_coef = router_z_loss_coef
        self.router_aux_loss_coef = router_aux_loss_coef

    def forward(self, input_ids, labels):
        h = self.embed(input_ids)
        h = h + self.dense(self.ln1(h))
        out, (router_logits, expert_index) = self.sparse(self.ln2(h))
        h = h + out
        lm_logits = self.head(h)
        loss = F.cross_entropy(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1), ignore_index=-100)
        z_loss = router_z_loss_func(router_logits)
        router_probs = nn.Softmax(dim=-1)(router_logits)
        aux_loss = load_balancing_loss_func(router_probs, expert_index)
        loss = loss + self.router_z_loss_coef * z_loss + self.router_aux_loss_coef * aux_loss
        return loss, lm_logits


def build_switch_capacity():
    torch.manual_seed(1041)
    model = SwitchLM()
    g = seeded(1042)
    input_ids = torch.randint(0, 40, (2, 10), generator=g)
    labels = torch.roll(input_ids, -1, 1)
    labels[:, -1] = -100
    return model, (input_ids, labels)


# --------------------------------------------------------------------------- paged attention (vLLM reference)


def ref_masked_attention(query, key, value, scale):
    attn_weights = scale * torch.einsum("qhd,khd->hqk", query, key).float()
    attn_weights = torch.softmax(attn_weights, dim=-1).to(value.dtype)
    return torch.einsum("hqk,khd->qhd", attn_weights, value)


def ref_single_query_cached_kv_attention(output, query, num_queries_per_kv, key_cache, value_cache, block_tables,
                                         seq_lens, scale):
    num_query_heads = query.shape[1]
    num_kv_heads = value_cache.shape[2]
    head_size = value_cache.shape[3]
    block_size = value_cache.shape[1]
    num_seqs = query.shape[0]

    block_tables_lst = block_tables.cpu().tolist()  # BREAK: gather key_cache[block_tables] and mask positions >= seq_len
    seq_lens_lst = seq_lens.cpu().tolist()  # BREAK: gather key_cache[block_tables] and mask positions >= seq_len
    for i in range(num_seqs):
        q = query[i].unsqueeze(0)
        block_table = block_tables_lst[i]
        seq_len = int(seq_lens_lst[i])

        keys_lst = []
        values_lst = []
        for j in range(seq_len):
            block_number = int(block_table[j // block_size])
            block_offset = j % block_size
            keys_lst.append(key_cache[block_number, block_offset].reshape(num_kv_heads, head_size))
            values_lst.append(value_cache[block_number, block_offset].reshape(num_kv_heads, head_size))
        keys = torch.stack(keys_lst, dim=0)
        values = torch.stack(values_lst, dim=0)
        if num_queries_per_kv > 1:
            # Handle MQA and GQA
            keys = torch.repeat_interleave(keys, num_queries_per_kv, dim=1)
            values = torch.repeat_interleave(values, num_queries_per_kv, dim=1)
        out = ref_masked_attention(q, keys, values, scale)
        out = out.view(num_query_heads, head_size)
        output[i].copy_(out, non_blocking=True)


class PagedDecodeLayer(nn.Module):
    """One decoder attention layer's decode step against a paged KV cache ([num_blocks, block_size, kv_heads, d])."""

    def __init__(self, hidden: int = 32, num_heads: int = 4, num_kv_heads: int = 2, num_blocks: int = 12,
                 block_size: int = 4) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_size = hidden // num_heads
        self.q_proj = nn.Linear(hidden, num_heads * self.head_size)
        self.k_proj = nn.Linear(hidden, num_kv_heads * self.head_size)
        self.v_proj = nn.Linear(hidden, num_kv_heads * self.head_size)
        self.o_proj = nn.Linear(num_heads * self.head_size, hidden)
        self.register_buffer("key_cache", torch.zeros(num_blocks, block_size, num_kv_heads, self.head_size))
        self.register_buffer("value_cache", torch.zeros(num_blocks, block_size, num_kv_heads, self.head_size))
        self.block_size = block_size

    def reshape_and_cache(self, key, value, slot_mapping):
        block_indices = torch.div(slot_mapping, self.block_size, rounding_mode="floor")
        block_offsets = slot_mapping % self.block_size
        self.key_cache[block_indices, block_offsets] = key
        self.value_cache[block_indices, block_offsets] = value

    @torch.no_grad()
    def forward(self, hidden_states, slot_mapping, block_tables, seq_lens):
        num_seqs = hidden_states.shape[0]
        q = self.q_proj(hidden_states).view(num_seqs, self.num_heads, self.head_size)
        k = self.k_proj(hidden_states).view(num_seqs, self.num_kv_heads, self.head_size)
        v = self.v_proj(hidden_states).view(num_seqs, self.num_kv_heads, self.head_size)
        self.reshape_and_cache(k, v, slot_mapping)
        output = torch.empty_like(q)
        ref_single_query_cached_kv_attention(
            output, q, self.num_heads // self.num_kv_heads, self.key_cache, self.value_cache, block_tables, seq_lens,
            1.0 / math.sqrt(self.head_size),
        )
        return self.o_proj(output.view(num_seqs, -1))


def build_paged_attention():
    torch.manual_seed(1051)
    layer = PagedDecodeLayer()
    g = seeded(1052)
    layer.key_cache.normal_(generator=g)
    layer.value_cache.normal_(generator=g)
    # three running sequences of 6, 9 and 3 tokens (the new token included); blocks handed out by the allocator
    seq_lens = torch.tensor([6, 9, 3], dtype=torch.int32)
    block_tables = torch.tensor([[3, 7, 0], [1, 5, 10], [8, 0, 0]], dtype=torch.int32)
    positions = seq_lens.long() - 1
    slot_mapping = block_tables.long().gather(1, (positions // 4)[:, None]).squeeze(1) * 4 + positions % 4
    hidden_states = torch.randn(3, 32, generator=g)
    return layer, (hidden_states, slot_mapping, block_tables, seq_lens)


# --------------------------------------------------------------------------- gradient accumulation (HF Trainer)


def ForCausalLMLoss(logits, labels, vocab_size: int, num_items_in_batch=None, ignore_index: int = -100):
    logits = logits.float()
    labels = nn.functional.pad(labels, (0, 1), value=ignore_index)
    shift_labels = labels[..., 1:].contiguous()
    logits = logits.view(-1, vocab_size)
    shift_labels = shift_labels.view(-1)
    reduction = "sum" if num_items_in_batch is not None else "mean"
    loss = nn.functional.cross_entropy(logits, shift_labels, ignore_index=ignore_index, reduction=reduction)
    if reduction == "sum":
        loss = loss / num_items_in_batch
    return loss


class Trainer:
    """The inner loop of ``transformers.Trainer._inner_training_loop`` for one optimizer step."""

    def __init__(self, model: TinyCausalLM, gradient_accumulation_steps: int = 3, max_grad_norm: float = 1.0):
        self.model = model
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.max_grad_norm = max_grad_norm
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: min(1.0, (step + 1) / 10))
        self.global_step = 0

    def get_batch_samples(self, epoch_iterator):
        batch_samples = list(epoch_iterator)[: self.gradient_accumulation_steps]
        num_items_in_batch = sum((batch["labels"].ne(-100)).sum() for batch in batch_samples)
        num_items_in_batch = num_items_in_batch.item()  # BREAK: keep the count a tensor (the loss divides by it)
        return batch_samples, num_items_in_batch

    def compute_loss(self, model, inputs, num_items_in_batch):
        logits = model(inputs["input_ids"], attention_mask=inputs["attention_mask"])
        return ForCausalLMLoss(logits, inputs["labels"], model.vocab_size, num_items_in_batch)

    def training_step(self, epoch_iterator):
        self.model.train()
        tr_loss = torch.tensor(0.0)
        batch_samples, num_items_in_batch = self.get_batch_samples(epoch_iterator)
        for inputs in batch_samples:
            loss = self.compute_loss(self.model, inputs, num_items_in_batch)
            loss.backward()  # BREAK must-not: autograd's backward pass runs outside the captured graph
            tr_loss = tr_loss + loss.detach()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.lr_scheduler.step()
        self.optimizer.zero_grad()
        self.global_step += 1
        logs = {
            "loss": round(tr_loss.item(), 4),
            "grad_norm": grad_norm.item(),
            "learning_rate": self.lr_scheduler.get_last_lr()[0],
            "step": self.global_step,
        }
        return logs, [p.detach().clone() for p in self.model.parameters()][:3]


def build_grad_accum():
    torch.manual_seed(1061)
    trainer = Trainer(TinyCausalLM())
    g = seeded(1062)
    batches = []
    for lens in ([9, 4], [12, 7], [6, 11]):
        lens_t = torch.tensor(lens)
        mask = (torch.arange(12)[None] < lens_t[:, None]).long()
        ids = torch.randint(1, 48, (2, 12), generator=g) * mask
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
    return trainer.training_step, (batches,)
