"""Language models: a Mixtral sparse-MoE block (top-2 routing, a loop over the experts) with its
load-balancing loss, LLaVA splicing projected image features into the image-token positions with its
attention-masked shifted loss, a MosaicBERT encoder that unpads the batch (flash-attn's ``bert_padding``),
ColBERT's late-interaction training step with its punctuation skiplist, fairseq's kNN-LM evaluation against
a flat L2 datastore, and a MEGABYTE-style byte-level model sampling bytes and decoding them to text."""

from __future__ import annotations

import math
import string
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- shared decoder pieces


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        bsz, q_len, _ = hidden_states.size()
        shape = (bsz, q_len, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        causal = torch.ones(q_len, q_len, dtype=torch.bool, device=hidden_states.device).tril()
        mask = causal[None, None]
        if attention_mask is not None:
            mask = mask & attention_mask[:, None, None, :].bool()
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(attn.transpose(1, 2).reshape(bsz, q_len, -1))


# --------------------------------------------------------------------------- Mixtral sparse MoE


@dataclass
class MixtralConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    intermediate_size: int = 48
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_local_experts: int = 4
    num_experts_per_tok: int = 2
    router_aux_loss_coef: float = 0.02
    rms_norm_eps: float = 1e-6


def load_balancing_loss_func(gate_logits: tuple[torch.Tensor, ...], num_experts: int, top_k: int = 2):
    r"""
    Computes auxiliary load balancing loss as in Switch Transformer - implemented in Pytorch.

    See Switch Transformer (https://arxiv.org/abs/2101.03961) for more details. This function implements the loss
    function presented in equations (4) - (6) of the paper. It aims at penalizing cases where the routing between
    experts is too unbalanced.
    """
    if gate_logits is None:
        return 0

    if isinstance(gate_logits, tuple):
        compute_device = gate_logits[0].device
        concatenated_gate_logits = torch.cat([layer_gate.to(compute_device) for layer_gate in gate_logits], dim=0)

    routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=-1)

    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)

    # treat `top_k` as tokens (shape is `top_k X [batch_size X sequence_length]`)
    selected_experts = selected_experts.reshape(-1)

    expert_mask = torch.nn.functional.one_hot(selected_experts, num_experts)
    expert_mask = torch.max(expert_mask, dim=-2).values

    # Compute the percentage of tokens routed to each experts
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)

    # Compute the average probability of routing to these experts
    router_prob_per_expert = torch.mean(routing_weights, dim=0)

    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(-1))
    return overall_loss * num_experts


class MixtralBlockSparseTop2MLP(nn.Module):
    def __init__(self, config: MixtralConfig) -> None:
        super().__init__()
        self.ffn_dim = config.intermediate_size
        self.hidden_dim = config.hidden_size

        self.w1 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)
        self.w2 = nn.Linear(self.ffn_dim, self.hidden_dim, bias=False)
        self.w3 = nn.Linear(self.hidden_dim, self.ffn_dim, bias=False)

        self.act_fn = nn.SiLU()

    def forward(self, hidden_states: torch.Tensor, routing_weights: torch.Tensor) -> torch.Tensor:
        current_hidden_states = self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states)
        current_hidden_states = self.w2(current_hidden_states)
        return routing_weights * current_hidden_states


class MixtralSparseMoeBlock(nn.Module):
    """
    This implementation is
    strictly equivalent to standard MoE with full capacity (no
    dropped tokens). It's faster since it formulates MoE operations
    in terms of block-sparse operations to accomodate imbalanced
    assignments of tokens to experts, whereas standard MoE either
    (1) drop tokens at the cost of reduced performance or (2) set
    capacity factor to number of experts and thus waste computation
    and memory on padding.
    """

    def __init__(self, config: MixtralConfig) -> None:
        super().__init__()
        self.hidden_dim = config.hidden_size
        self.ffn_dim = config.intermediate_size
        self.num_experts = config.num_local_experts
        self.top_k = config.num_experts_per_tok

        # gating
        self.gate = nn.Linear(self.hidden_dim, self.num_experts, bias=False)

        self.experts = nn.ModuleList([MixtralBlockSparseTop2MLP(config) for _ in range(self.num_experts)])

    def forward(self, hidden_states: torch.Tensor):
        """ """
        batch_size, sequence_length, hidden_dim = hidden_states.shape
        hidden_states = hidden_states.view(-1, hidden_dim)
        # router_logits: (batch * sequence_length, n_experts)
        router_logits = self.gate(hidden_states)

        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        # we cast back to the input dtype
        routing_weights = routing_weights.to(hidden_states.dtype)

        final_hidden_states = torch.zeros(
            (batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype, device=hidden_states.device
        )

        # One hot encode the selected experts to create an expert mask
        # this will be used to easily index which expert is going to be sollicitated
        expert_mask = torch.nn.functional.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)

        # Loop over all available experts in the model and perform the computation on each expert
        for expert_idx in range(self.num_experts):
            expert_layer = self.experts[expert_idx]
            idx, top_x = torch.where(expert_mask[expert_idx])  # BREAK: every expert on every token, dense weights

            if top_x.shape[0] == 0:
                continue

            # in torch it is faster to index using lists than torch tensors
            top_x_list = top_x.tolist()
            idx_list = idx.tolist()

            # Index the correct hidden states and compute the expert hidden state for
            # the current expert. We need to make sure to multiply the output hidden
            # states by `routing_weights` on the corresponding tokens (top-1 and top-2)
            current_state = hidden_states[None, top_x_list].reshape(-1, hidden_dim)
            current_hidden_states = expert_layer(current_state, routing_weights[top_x_list, idx_list, None])

            # However `index_add_` only support torch tensors for indexing so we'll use
            # the `top_x` tensor here.
            final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
        final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
        return final_hidden_states, router_logits


class MixtralDecoderLayer(nn.Module):
    def __init__(self, config: MixtralConfig) -> None:
        super().__init__()
        self.self_attn = CausalSelfAttention(config.hidden_size, config.num_attention_heads)
        self.block_sparse_moe = MixtralSparseMoeBlock(config)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor):
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
        hidden_states = residual + self.self_attn(hidden_states)
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(hidden_states)
        hidden_states, router_logits = self.block_sparse_moe(hidden_states)
        return residual + hidden_states, router_logits


class MixtralForCausalLM(nn.Module):
    def __init__(self, config: MixtralConfig) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([MixtralDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None):
        hidden_states = self.embed_tokens(input_ids)
        all_router_logits = ()
        for decoder_layer in self.layers:
            hidden_states, router_logits = decoder_layer(hidden_states)
            all_router_logits += (router_logits,)
        logits = self.lm_head(self.norm(hidden_states)).float()

        loss = None
        if labels is not None:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
            loss = F.cross_entropy(shift_logits.view(-1, self.config.vocab_size), shift_labels.view(-1))

        aux_loss = load_balancing_loss_func(all_router_logits, self.config.num_local_experts,
                                            self.config.num_experts_per_tok)
        if labels is not None:
            loss += self.config.router_aux_loss_coef * aux_loss
        return loss, logits, aux_loss


def build_mixtral_moe():
    torch.manual_seed(930)
    model = MixtralForCausalLM(MixtralConfig())
    input_ids = torch.randint(0, 64, (2, 10), generator=seeded(931))
    return model, (input_ids, input_ids)


# --------------------------------------------------------------------------- LLaVA: image features into the text


@dataclass
class LlavaConfig:
    vocab_size: int = 80
    hidden_size: int = 32
    vision_hidden_size: int = 24
    image_size: int = 8
    patch_size: int = 4
    image_token_index: int = 79
    pad_token_id: int = 0
    ignore_index: int = -100
    vision_feature_layer: int = -2
    vision_feature_select_strategy: str = "default"


class CLIPVisionTowerLite(nn.Module):
    """Patch embedding + class token + two pre-LN encoder layers; returns every layer's hidden states."""

    def __init__(self, config: LlavaConfig) -> None:
        super().__init__()
        d = config.vision_hidden_size
        self.patch_embedding = nn.Conv2d(3, d, kernel_size=config.patch_size, stride=config.patch_size, bias=False)
        num_patches = (config.image_size // config.patch_size) ** 2
        self.class_embedding = nn.Parameter(torch.randn(d))
        self.position_embedding = nn.Embedding(num_patches + 1, d)
        self.pre_layrnorm = nn.LayerNorm(d)
        self.layers = nn.ModuleList(
            [nn.TransformerEncoderLayer(d, 4, 48, dropout=0.0, batch_first=True, norm_first=True) for _ in range(2)]
        )

    def forward(self, pixel_values: torch.Tensor, output_hidden_states: bool = True):
        patch_embeds = self.patch_embedding(pixel_values).flatten(2).transpose(1, 2)
        class_embeds = self.class_embedding.expand(pixel_values.shape[0], 1, -1)
        embeddings = torch.cat([class_embeds, patch_embeds], dim=1) + self.position_embedding.weight
        hidden_states = self.pre_layrnorm(embeddings)
        all_hidden_states = (hidden_states,)
        for layer in self.layers:
            hidden_states = layer(hidden_states)
            all_hidden_states += (hidden_states,)
        return hidden_states, all_hidden_states


class LlavaMultiModalProjector(nn.Module):
    def __init__(self, config: LlavaConfig) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(config.vision_hidden_size, config.hidden_size, bias=True)
        self.act = nn.GELU()
        self.linear_2 = nn.Linear(config.hidden_size, config.hidden_size, bias=True)

    def forward(self, image_features: torch.Tensor) -> torch.Tensor:
        hidden_states = self.linear_1(image_features)
        hidden_states = self.act(hidden_states)
        hidden_states = self.linear_2(hidden_states)
        return hidden_states


class LlamaLite(nn.Module):
    def __init__(self, config: LlavaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        self.input_layernorm = RMSNorm(config.hidden_size)
        self.self_attn = CausalSelfAttention(config.hidden_size, 4)
        self.post_attention_layernorm = RMSNorm(config.hidden_size)
        self.mlp = nn.Sequential(nn.Linear(config.hidden_size, 64), nn.SiLU(), nn.Linear(64, config.hidden_size))
        self.norm = RMSNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = inputs_embeds + self.self_attn(self.input_layernorm(inputs_embeds), attention_mask)
        h = h + self.mlp(self.post_attention_layernorm(h))
        return self.lm_head(self.norm(h))


class LlavaForConditionalGeneration(nn.Module):
    def __init__(self, config: LlavaConfig) -> None:
        super().__init__()
        self.config = config
        self.vision_tower = CLIPVisionTowerLite(config)
        self.multi_modal_projector = LlavaMultiModalProjector(config)
        self.language_model = LlamaLite(config)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.language_model.get_input_embeddings()

    def get_image_features(self, pixel_values, vision_feature_layer, vision_feature_select_strategy):
        image_outputs = self.vision_tower(pixel_values, output_hidden_states=True)
        # this is not memory efficient at all (output_hidden_states=True) will save all the hidden states.
        selected_image_feature = image_outputs[1][vision_feature_layer]
        if vision_feature_select_strategy == "default":
            selected_image_feature = selected_image_feature[:, 1:]
        elif vision_feature_select_strategy == "full":
            selected_image_feature = selected_image_feature
        else:
            raise ValueError(f"Unexpected select feature strategy: {self.config.vision_feature_select_strategy}")
        image_features = self.multi_modal_projector(selected_image_feature)
        return image_features

    def forward(self, input_ids, pixel_values, attention_mask=None, labels=None):
        vision_feature_layer = self.config.vision_feature_layer
        vision_feature_select_strategy = self.config.vision_feature_select_strategy

        inputs_embeds = self.get_input_embeddings()(input_ids)

        if pixel_values is not None:
            image_features = self.get_image_features(
                pixel_values=pixel_values,
                vision_feature_layer=vision_feature_layer,
                vision_feature_select_strategy=vision_feature_select_strategy,
            )

            n_image_tokens = (input_ids == self.config.image_token_index).sum().item()  # BREAK: torch._check on tensors
            n_image_features = image_features.shape[0] * image_features.shape[1]

            if n_image_tokens != n_image_features:
                raise ValueError(
                    f"Image features and image tokens do not match: tokens: {n_image_tokens}, features {n_image_features}"
                )
            special_image_mask = (input_ids == self.config.image_token_index).unsqueeze(-1)
            special_image_mask = special_image_mask.expand_as(inputs_embeds).to(inputs_embeds.device)
            image_features = image_features.to(inputs_embeds.device, inputs_embeds.dtype)
            inputs_embeds = inputs_embeds.masked_scatter(special_image_mask, image_features)

        logits = self.language_model(inputs_embeds=inputs_embeds, attention_mask=attention_mask)

        loss = None
        if labels is not None:
            # Shift so that tokens < n do not predict n
            if attention_mask is not None:
                # we use the input attention mask to shift the logits and labels, because it is 2D.
                # we also crop attn mask in case it is longer, which happens in PrefixTuning with peft
                shift_attention_mask = attention_mask[:, -(logits.shape[1] - 1) :].to(logits.device)
                shift_logits = logits[..., :-1, :][shift_attention_mask.to(logits.device) != 0].contiguous()  # BREAK: ignore_index
                shift_labels = labels[..., 1:][shift_attention_mask.to(labels.device) != 0].contiguous()  # BREAK: same
            else:
                shift_logits = logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
            # Flatten the tokens
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(
                shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1).to(shift_logits.device)
            )
        return loss, logits


def build_llava_merge():
    torch.manual_seed(940)
    config = LlavaConfig()
    model = LlavaForConditionalGeneration(config)
    g = seeded(941)
    img = config.image_token_index
    # the processor expands <image> into one token per patch (4 here); the second prompt is right-padded
    input_ids = torch.tensor(
        [
            [1, img, img, img, img, 12, 33, 41, 7, 22, 19, 2],
            [1, 15, img, img, img, img, 27, 9, 2, 0, 0, 0],
        ]
    )
    attention_mask = (input_ids != 0).long()
    labels = input_ids.masked_fill(input_ids == img, -100).masked_fill(attention_mask == 0, -100)
    labels[:, :1] = -100
    pixel_values = torch.randn(2, 3, 8, 8, generator=g)
    return model, (input_ids, pixel_values, attention_mask, labels)


# --------------------------------------------------------------------------- MosaicBERT: unpadded encoder


class IndexFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, indices):
        ctx.save_for_backward(indices)
        assert input.ndim >= 2
        ctx.first_axis_shape, other_shape = input.shape[0], input.shape[1:]
        second_dim = other_shape.numel()
        # TD [2022-03-04] For some reason torch.gather is a bit faster than indexing.
        # return input[indices]
        return torch.gather(input.reshape(ctx.first_axis_shape, second_dim), 0,
                            indices.unsqueeze(-1).expand(-1, second_dim)).reshape(-1, *other_shape)

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        assert grad_output.ndim >= 2
        other_shape = grad_output.shape[1:]
        grad_output = grad_output.reshape(grad_output.shape[0], -1)
        grad_input = torch.zeros(
            [ctx.first_axis_shape, grad_output.shape[1]], device=grad_output.device, dtype=grad_output.dtype
        )
        # TD [2022-03-04] For some reason torch.scatter is a bit faster than indexing.
        # grad_input[indices] = grad_output
        grad_input.scatter_(0, indices.unsqueeze(-1).expand(-1, grad_output.shape[1]), grad_output)
        return grad_input.reshape(ctx.first_axis_shape, *other_shape), None


index_first_axis = IndexFirstAxis.apply


class IndexPutFirstAxis(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, indices, first_axis_dim):
        ctx.save_for_backward(indices)
        assert indices.ndim == 1
        assert values.ndim >= 2
        output = torch.zeros(first_axis_dim, *values.shape[1:], device=values.device, dtype=values.dtype)
        # TD [2022-03-04] For some reason torch.scatter is a bit faster than indexing.
        output[indices] = values
        # output.scatter_(0, repeat(indices, 'z -> z d', d=values.shape[1]), values)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (indices,) = ctx.saved_tensors
        # TD [2022-03-04] For some reason torch.gather is a bit faster than indexing.
        grad_values = grad_output[indices]
        # grad_values = torch.gather(grad_output, 0, repeat(indices, 'z -> z d', d=grad_output.shape[1]))
        return grad_values, None, None


index_put_first_axis = IndexPutFirstAxis.apply


def unpad_input(hidden_states, attention_mask):
    """
    Arguments:
        hidden_states: (batch, seqlen, ...)
        attention_mask: (batch, seqlen), bool / int, 1 means valid and 0 means not valid.
    Return:
        hidden_states: (total_nnz, ...), where total_nnz = number of tokens in selected in attention_mask.
        indices: (total_nnz), the indices of non-masked tokens from the flattened input sequence.
        cu_seqlens: (batch + 1), the cumulative sequence lengths, used to index into hidden_states.
        max_seqlen_in_batch: int
    """
    seqlens_in_batch = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()  # BREAK: keep every token
    max_seqlen_in_batch = seqlens_in_batch.max().item()  # BREAK: same rewrite (no unpadding)
    cu_seqlens = F.pad(torch.cumsum(seqlens_in_batch, dim=0, dtype=torch.int32), (1, 0))
    # TD [2022-03-04] We don't want to index with a bool mask, because Pytorch will expand the
    # bool mask, then call nonzero to get the indices, then index with those. The indices is @dim
    # times larger than it needs to be, wasting memory. It's faster and more memory-efficient to
    # index with integer indices. Moreover, torch's index is a bit slower than it needs to be,
    # so we write custom forward and backward to make it a bit faster.
    hidden_states = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return (index_first_axis(hidden_states, indices), indices, cu_seqlens, max_seqlen_in_batch)


def unpad_input_only(hidden_states, attention_mask):
    """Like unpad_input, but only return the unpadded first tensor.

    Save a small amount of overhead.
    """
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()  # BREAK: same rewrite
    return index_first_axis(hidden_states.reshape(-1, *hidden_states.shape[2:]), indices)


def pad_input(hidden_states, indices, batch, seqlen):
    """
    Arguments:
        hidden_states: (total_nnz, ...), where total_nnz = number of tokens in selected in attention_mask.
        indices: (total_nnz)
    Return:
        hidden_states: (batch, seqlen, ...)
    """
    output = index_put_first_axis(hidden_states, indices, batch * seqlen)
    return output.reshape(batch, seqlen, *hidden_states.shape[1:])


@dataclass
class MosaicBertConfig:
    vocab_size: int = 50
    hidden_size: int = 32
    num_attention_heads: int = 4
    intermediate_size: int = 48
    num_hidden_layers: int = 2
    alibi_starting_size: int = 8
    num_labels: int = 3
    layer_norm_eps: float = 1e-12
    attention_probs_dropout_prob: float = 0.0
    hidden_dropout_prob: float = 0.0


class BertUnpadSelfAttention(nn.Module):
    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = int(config.hidden_size / config.num_attention_heads)
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.p_dropout = config.attention_probs_dropout_prob
        self.Wqkv = nn.Linear(self.all_head_size, 3 * config.hidden_size)

    def forward(self, hidden_states, cu_seqlens, max_seqlen_in_batch, indices, attn_mask, bias):
        qkv = self.Wqkv(hidden_states)
        qkv = pad_input(qkv, indices, cu_seqlens.shape[0] - 1, max_seqlen_in_batch)  # batch, max_seqlen, thd
        batch, seqlen = qkv.shape[:2]
        qkv = qkv.reshape(batch, seqlen, 3, self.num_attention_heads, self.attention_head_size)
        # if we have nonzero attention dropout (e.g. during fine-tuning) or no Triton, compute attention in PyTorch
        q = qkv[:, :, 0, :, :].permute(0, 2, 1, 3)  # b h s d
        k = qkv[:, :, 1, :, :].permute(0, 2, 3, 1)  # b h d s
        v = qkv[:, :, 2, :, :].permute(0, 2, 1, 3)  # b h s d
        attention_scores = torch.matmul(q, k) / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + bias
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)
        attention = torch.matmul(attention_probs, v).permute(0, 2, 1, 3)  # b s h d

        # attn_mask is 1 for attend and 0 for don't
        attention = unpad_input_only(attention, torch.squeeze(attn_mask) == 1)
        return attention.reshape(attention.shape[0], -1)


class BertSelfOutput(nn.Module):
    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor, input_tensor: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dense(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.LayerNorm(hidden_states + input_tensor)
        return hidden_states


class BertUnpadAttention(nn.Module):
    """Chains attention, Dropout, and LayerNorm for Mosaic BERT."""

    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.self = BertUnpadSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, input_tensor, cu_seqlens, max_s, subset_idx=None, indices=None, attn_mask=None, bias=None):
        self_output = self.self(input_tensor, cu_seqlens, max_s, indices, attn_mask, bias)
        if subset_idx is not None:
            return self.output(index_first_axis(self_output, subset_idx), index_first_axis(input_tensor, subset_idx))
        else:
            return self.output(self_output, input_tensor)


class BertGatedLinearUnitMLP(nn.Module):
    """Applies the FFN at the end of each Mosaic BERT layer (a GLU)."""

    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.config = config
        self.gated_layers = nn.Linear(config.hidden_size, config.intermediate_size * 2, bias=False)
        self.act = nn.GELU(approximate="none")
        self.wo = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        residual_connection = hidden_states
        # compute the activation
        hidden_states = self.gated_layers(hidden_states)
        gated = hidden_states[:, : self.config.intermediate_size]
        non_gated = hidden_states[:, self.config.intermediate_size :]
        hidden_states = self.act(gated) * non_gated
        hidden_states = self.dropout(hidden_states)
        # multiply by the second matrix
        hidden_states = self.wo(hidden_states)
        # add the residual connection and post-LN
        hidden_states = self.layernorm(hidden_states + residual_connection)
        return hidden_states


class BertLayer(nn.Module):
    """Composes the Mosaic BERT attention and FFN blocks into a single layer."""

    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.attention = BertUnpadAttention(config)
        self.mlp = BertGatedLinearUnitMLP(config)

    def forward(self, hidden_states, cu_seqlens, seqlen, subset_idx=None, indices=None, attn_mask=None, bias=None):
        attention_output = self.attention(hidden_states, cu_seqlens, seqlen, subset_idx, indices, attn_mask, bias)
        layer_output = self.mlp(attention_output)
        return layer_output


class BertEncoder(nn.Module):
    """A stack of BERT layers providing the backbone of Mosaic BERT, with ALiBi instead of position embeddings."""

    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.num_attention_heads = config.num_attention_heads
        # The alibi mask will be dynamically expanded if it is too small for
        # the input the model receives. But it generally helps to initialize it
        # to a reasonably large size to help pre-allocate CUDA memory.
        # The default `alibi_starting_size` is 512.
        self._current_alibi_size = int(config.alibi_starting_size)
        self.alibi = torch.zeros((1, self.num_attention_heads, self._current_alibi_size, self._current_alibi_size))
        self.rebuild_alibi_tensor(size=config.alibi_starting_size)

    def rebuild_alibi_tensor(self, size: int, device: torch.device | str | None = None) -> None:
        # Alibi
        # Following https://github.com/ofirpress/attention_with_linear_biases/issues/5 (Implementation 1)
        # In the causal case, you can exploit the fact that softmax is invariant to a uniform translation
        # of the logits, which makes the math work out *after* applying causal masking. If no causal masking
        # will be applied, it is necessary to construct the diagonal mask.
        n_heads = self.num_attention_heads

        def _get_alibi_head_slopes(n_heads: int) -> list[float]:
            def get_slopes_power_of_2(n_heads: int) -> list[float]:
                start = 2 ** (-(2 ** -(math.log2(n_heads) - 3)))
                ratio = start
                return [start * ratio**i for i in range(n_heads)]

            # In the paper, they only train models that have 2^a heads for some a. This function
            # has some good properties that only occur when the input is a power of 2. To
            # maintain that even when the number of heads is not a power of 2, we use a
            # workaround.
            if math.log2(n_heads).is_integer():
                return get_slopes_power_of_2(n_heads)

            closest_power_of_2 = 2 ** math.floor(math.log2(n_heads))
            slopes_a = get_slopes_power_of_2(closest_power_of_2)
            slopes_b = _get_alibi_head_slopes(2 * closest_power_of_2)
            slopes_b = slopes_b[0::2][: n_heads - closest_power_of_2]
            return slopes_a + slopes_b

        context_position = torch.arange(size, device=device)[:, None]
        memory_position = torch.arange(size, device=device)[None, :]
        relative_position = torch.abs(memory_position - context_position)
        # [n_heads, max_token, max_token]
        relative_position = relative_position.unsqueeze(0).expand(n_heads, -1, -1)
        slopes = torch.Tensor(_get_alibi_head_slopes(n_heads)).to(device)
        alibi = slopes.unsqueeze(1).unsqueeze(1) * -relative_position
        # [1, n_heads, max_token, max_token]
        alibi = alibi.unsqueeze(0)
        assert alibi.shape == torch.Size([1, n_heads, size, size])

        self._current_alibi_size = size
        self.alibi = alibi

    def forward(self, hidden_states, attention_mask, output_all_encoded_layers=True, subset_mask=None):
        extended_attention_mask = attention_mask.unsqueeze(1).unsqueeze(2)
        extended_attention_mask = extended_attention_mask.to(dtype=next(self.parameters()).dtype)  # fp16 compatibility
        extended_attention_mask = (1.0 - extended_attention_mask) * -10000.0

        attention_mask_bool = attention_mask.bool()
        batch, seqlen = hidden_states.shape[:2]
        # Unpad inputs and mask. It will remove tokens that are padded.
        # Assume ntokens is total number of tokens (padded and non-padded)
        # and ntokens_unpad is total number of non-padded tokens.
        # Then unpadding performs the following compression of the inputs:
        # hidden_states[ntokens,hidden] -> hidden_states[ntokens_unpad,hidden]
        hidden_states, indices, cu_seqlens, _ = unpad_input(hidden_states, attention_mask_bool)

        # Add alibi matrix to extended_attention_mask
        if self._current_alibi_size < seqlen:
            # Rebuild the alibi tensor when needed
            warnings.warn(f"Increasing alibi size from {self._current_alibi_size} to {seqlen}", stacklevel=2)
            self.rebuild_alibi_tensor(size=seqlen, device=hidden_states.device)
        elif self.alibi.device != hidden_states.device:
            # Device catch-up
            self.alibi = self.alibi.to(hidden_states.device)
        alibi_bias = self.alibi[:, :, :seqlen, :seqlen]
        attn_bias = extended_attention_mask[:, :, :seqlen, :seqlen]
        alibi_attn_mask = attn_bias + alibi_bias

        all_encoder_layers = []
        if subset_mask is None:
            for layer_module in self.layer:
                hidden_states = layer_module(
                    hidden_states, cu_seqlens, seqlen, None, indices, attn_mask=attention_mask, bias=alibi_attn_mask
                )
                if output_all_encoded_layers:
                    all_encoder_layers.append(hidden_states)
            # Pad inputs and mask. It will insert back zero-padded tokens.
            # Assume ntokens is total number of tokens (padded and non-padded)
            # and ntokens_unpad is total number of non-padded tokens.
            # Then padding performs the following de-compression:
            #     hidden_states[ntokens_unpad,hidden] -> hidden_states[ntokens,hidden]
            hidden_states = pad_input(hidden_states, indices, batch, seqlen)
        else:
            raise NotImplementedError("subset_mask is only used for masked-LM pretraining")

        if not output_all_encoded_layers:
            all_encoder_layers.append(hidden_states)
        return all_encoder_layers


class BertForSequenceClassification(nn.Module):
    def __init__(self, config: MosaicBertConfig) -> None:
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=0)
        self.token_type_embeddings = nn.Embedding(2, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.encoder = BertEncoder(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(self, input_ids, attention_mask, labels=None):
        token_type_ids = torch.zeros_like(input_ids)
        embedding_output = self.LayerNorm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids))
        encoder_outputs = self.encoder(embedding_output, attention_mask, output_all_encoded_layers=False)
        sequence_output = encoder_outputs[-1]
        pooled_output = torch.tanh(self.pooler(sequence_output[:, 0]))
        logits = self.classifier(pooled_output)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.num_labels), labels.view(-1))
        return loss, logits, sequence_output


def build_mosaic_unpad():
    torch.manual_seed(950)
    model = BertForSequenceClassification(MosaicBertConfig())
    g = seeded(951)
    lengths = torch.tensor([8, 5, 7, 3])
    attention_mask = (torch.arange(8)[None, :] < lengths[:, None]).long()
    input_ids = torch.randint(1, 50, (4, 8), generator=g) * attention_mask
    labels = torch.tensor([0, 2, 1, 1])
    return model, (input_ids, attention_mask, labels)


# --------------------------------------------------------------------------- ColBERT late interaction


@dataclass
class ColBERTConfig:
    dim: int = 16
    nway: int = 2
    similarity: str = "cosine"
    interaction: str = "colbert"
    mask_punctuation: bool = True
    use_ib_negatives: bool = False
    total_visible_gpus: int = 0


class ToyWordPiece:
    """The few tokenizer calls ColBERT makes: ids of punctuation symbols, and the pad id."""

    pad_token_id = 0
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[Q]": 3, "[D]": 4, **{p: 5 + i for i, p in enumerate(".,!?;:")}}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.vocab.get(text, 11 + (sum(map(ord, text)) % 29))]


class TinyBert(nn.Module):
    def __init__(self, vocab: int = 40, hidden: int = 32) -> None:
        super().__init__()
        self.embeddings = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position_embeddings = nn.Embedding(16, hidden)
        self.layer = nn.TransformerEncoderLayer(hidden, 4, 48, dropout=0.0, batch_first=True)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        h = self.embeddings(input_ids) + self.position_embeddings.weight[: input_ids.shape[1]]
        return (self.layer(h, src_key_padding_mask=attention_mask == 0),)


class ColBERT(nn.Module):
    """
    This class handles the basic encoding and scoring operations in ColBERT. It is used for training.
    """

    def __init__(self, colbert_config: ColBERTConfig) -> None:
        super().__init__()
        self.colbert_config = colbert_config
        self.raw_tokenizer = ToyWordPiece()
        self.bert = TinyBert()
        self.linear = nn.Linear(32, colbert_config.dim, bias=False)
        self.use_gpu = colbert_config.total_visible_gpus > 0
        self.device = torch.device("cpu")

        if self.colbert_config.mask_punctuation:
            self.skiplist = {
                w: True
                for symbol in string.punctuation
                for w in [symbol, self.raw_tokenizer.encode(symbol, add_special_tokens=False)[0]]
            }
        self.pad_token = self.raw_tokenizer.pad_token_id

    def forward(self, Q, D):
        Q = self.query(*Q)
        D, D_mask = self.doc(*D, keep_dims="return_mask")

        # Repeat each query encoding for every corresponding document.
        Q_duplicated = Q.repeat_interleave(self.colbert_config.nway, dim=0).contiguous()
        scores = self.score(Q_duplicated, D, D_mask)

        return scores

    def query(self, input_ids, attention_mask):
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        Q = self.bert(input_ids, attention_mask=attention_mask)[0]
        Q = self.linear(Q)

        mask = torch.tensor(self.mask(input_ids, skiplist=[]), device=self.device).unsqueeze(2).float()
        Q = Q * mask

        return torch.nn.functional.normalize(Q, p=2, dim=2)

    def doc(self, input_ids, attention_mask, keep_dims=True):
        assert keep_dims in [True, False, "return_mask"]

        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        D = self.bert(input_ids, attention_mask=attention_mask)[0]
        D = self.linear(D)
        mask = torch.tensor(self.mask(input_ids, skiplist=self.skiplist), device=self.device).unsqueeze(2).float()
        D = D * mask

        D = torch.nn.functional.normalize(D, p=2, dim=2)
        if self.use_gpu:
            D = D.half()

        if keep_dims is False:
            D, mask = D.cpu(), mask.bool().cpu().squeeze(-1)
            D = [d[mask[idx]] for idx, d in enumerate(D)]

        elif keep_dims == "return_mask":
            return D, mask.bool()

        return D

    def score(self, Q, D_padded, D_mask):
        if self.colbert_config.similarity == "l2":
            assert self.colbert_config.interaction == "colbert"
            return (-1.0 * ((Q.unsqueeze(2) - D_padded.unsqueeze(1)) ** 2).sum(-1)).max(-1).values.sum(-1)
        return colbert_score(Q, D_padded, D_mask, config=self.colbert_config)

    def mask(self, input_ids, skiplist):
        mask = [[(x not in skiplist) and (x != self.pad_token) for x in d] for d in input_ids.cpu().tolist()]  # BREAK: torch.isin
        return mask


def colbert_score_reduce(scores_padded, D_mask, config: ColBERTConfig):
    D_padding = ~D_mask.view(scores_padded.size(0), scores_padded.size(1)).bool()
    scores_padded[D_padding] = -9999
    scores = scores_padded.max(1).values

    return scores.sum(-1)


def colbert_score(Q, D_padded, D_mask, config=None):
    """
    Supply sizes Q = (1 | num_docs, *, dim) and D = (num_docs, *, dim).
    If Q.size(0) is 1, the matrix will be compared with all passages.
    Otherwise, each query matrix will be compared against the *aligned* passage.

    EVENTUALLY: Consider masking with -inf for the maxsim (or enforcing a ReLU).
    """
    assert Q.dim() == 3, Q.size()
    assert D_padded.dim() == 3, D_padded.size()
    assert Q.size(0) in [1, D_padded.size(0)]

    scores = D_padded @ Q.to(dtype=D_padded.dtype).permute(0, 2, 1)

    return colbert_score_reduce(scores, D_mask, config)


class ColBERTTrainStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = ColBERTConfig()
        self.colbert = ColBERT(self.config)

    def forward(self, queries, passages, labels):
        scores = self.colbert(queries, passages).view(-1, self.config.nway)
        loss = nn.CrossEntropyLoss()(scores, labels[: scores.size(0)])
        return loss, scores


def build_colbert():
    torch.manual_seed(960)
    model = ColBERTTrainStep()
    g = seeded(961)
    q_ids = torch.randint(11, 40, (2, 6), generator=g)
    q_ids[:, 0], q_ids[:, 1] = 1, 3  # [CLS] [Q]
    d_len = torch.tensor([10, 7, 9, 10])
    d_mask = (torch.arange(10)[None, :] < d_len[:, None]).long()
    d_ids = torch.randint(5, 40, (4, 10), generator=g) * d_mask  # punctuation ids 5..10 appear in passages
    d_ids[:, 0], d_ids[:, 1] = 1, 4  # [CLS] [D]
    queries = (q_ids, torch.ones_like(q_ids))
    passages = (d_ids, d_mask)
    labels = torch.zeros(2, dtype=torch.long)
    return model, (queries, passages, labels)


# --------------------------------------------------------------------------- kNN-LM (fairseq knnlm)


class IndexFlatL2:
    """Exact L2 search over stored keys: the faiss.IndexFlatL2 calls the kNN-LM makes (add / search on numpy)."""

    def __init__(self, d: int) -> None:
        self.d = d
        self.xb = np.zeros((0, d), dtype=np.float32)

    @property
    def ntotal(self) -> int:
        return self.xb.shape[0]

    def add(self, x: np.ndarray) -> None:
        self.xb = np.concatenate([self.xb, x.astype(np.float32)])

    def search(self, x: np.ndarray, k: int):
        dist = (x**2).sum(1)[:, None] - 2 * x @ self.xb.T + (self.xb**2).sum(1)[None, :]
        knns = np.argsort(dist, axis=1)[:, :k]
        return np.take_along_axis(dist, knns, axis=1), knns


class KNN_Dstore:
    def __init__(self, keys: np.ndarray, vals: np.ndarray, k: int = 8, metric_type: str = "l2") -> None:
        self.half = False
        self.dimension = keys.shape[1]
        self.k = k
        self.metric_type = metric_type
        self.sim_func = "do_not_recomp_l2" if metric_type != "l2" else None
        self.keys = keys
        self.vals = vals
        self.index = IndexFlatL2(self.dimension)
        self.index.add(keys)

    def get_knns(self, queries):
        dists, knns = self.index.search(queries.detach().cpu().float().numpy(), self.k)
        return dists, knns

    def get_knn_log_prob(self, queries, tgt, pad_idx):
        def dist_func(d, k, q, function=None):
            if not function:
                # Default behavior for L2 metric is to recompute distances.
                # Default behavior for IP metric is to return faiss distances.
                qsize = q.shape
                if self.metric_type == "l2":
                    knns_vecs = torch.from_numpy(self.keys[k]).to(q.device).view(qsize[0], self.k, -1)
                    if self.half:
                        knns_vecs = knns_vecs.half()
                    query_vecs = q.view(qsize[0], 1, qsize[1]).repeat(1, self.k, 1)
                    l2 = torch.sum((query_vecs - knns_vecs.detach()) ** 2, dim=2)
                    return -1 * l2
                return d

            if function == "dot":
                qsize = q.shape
                return (torch.from_numpy(self.keys[k]).to(q.device) * q.view(qsize[0], 1, qsize[1])).sum(dim=-1)

            if function == "do_not_recomp_l2":
                return -1 * d

            raise ValueError("Invalid knn similarity function!")

        # queries  are TxBxC
        # reshape: (TxB)xC
        qshape = queries.shape
        queries = queries.view(-1, qshape[-1])
        tgt = tgt.contiguous().view(-1)
        dists, knns = self.get_knns(queries[tgt != pad_idx])  # BREAK: search every position, where on pads
        # (T_reducedxB)xK
        dists = torch.from_numpy(dists).to(queries.device)
        dists = dist_func(dists, knns, queries[tgt != pad_idx, :], function=self.sim_func)  # BREAK: same
        probs = F.log_softmax(dists, dim=-1)

        index_mask = torch.eq(
            torch.from_numpy(self.vals[knns]).long().to(queries.device).squeeze(-1),
            tgt[tgt != pad_idx].unsqueeze(-1),  # BREAK: same rewrite
        ).float()
        index_mask[index_mask == 0] = -10000  # for stability
        index_mask[index_mask == 1] = 0

        # (T_reducedxB)
        yhat_knn_prob = torch.logsumexp(probs + index_mask, dim=-1).clone()
        full_yhat_knn_prob = torch.full([qshape[0] * qshape[1]], -10000.0).to(queries.device)
        full_yhat_knn_prob[tgt != pad_idx] = yhat_knn_prob

        # TxBx1
        return full_yhat_knn_prob.view(qshape[0], qshape[1], 1)


def combine_knn_and_vocab_probs(knn_p, vocab_p, coeff):
    combine_probs = torch.stack([vocab_p, knn_p], dim=0)
    coeffs = torch.ones_like(combine_probs)
    coeffs[0] = np.log(1 - coeff)
    coeffs[1] = np.log(coeff)
    curr_prob = torch.logsumexp(combine_probs + coeffs, dim=0)

    return curr_prob


class TransformerLMLite(nn.Module):
    def __init__(self, vocab: int = 40, dim: int = 16) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim, padding_idx=1)
        self.embed_positions = nn.Embedding(16, dim)
        self.self_attn = CausalSelfAttention(dim, 2)
        self.fc = nn.Sequential(nn.Linear(dim, 32), nn.ReLU(), nn.Linear(32, dim))
        self.layer_norm = nn.LayerNorm(dim)
        self.output_projection = nn.Linear(dim, vocab, bias=False)

    def forward(self, src_tokens: torch.Tensor):
        x = self.embed_tokens(src_tokens) + self.embed_positions.weight[: src_tokens.shape[1]]
        x = x + self.self_attn(x)
        x = x + self.fc(x)
        x = self.layer_norm(x)
        # the kNN-LM keys are the inputs to the final projection ("knn_keytype == 'last_ffn_input'")
        return self.output_projection(x), {"inner_states": [x.transpose(0, 1).contiguous()]}


@torch.no_grad()
def score_with_knnlm(model, knn_dstore, src_tokens, target, pad_idx=1, lmbda=0.25):
    """fairseq's SequenceScorer with --knnlm: interpolate the LM's target log-probs with the kNN's."""
    logits, extra = model(src_tokens)
    lprobs = F.log_softmax(logits, dim=-1)
    probs = lprobs.gather(dim=2, index=target.unsqueeze(-1)).squeeze(-1)  # B x T
    queries = extra["inner_states"][-1]  # T x B x C
    yhat_knn_prob = knn_dstore.get_knn_log_prob(queries, target.permute(1, 0), pad_idx=pad_idx)
    yhat_knn_prob = yhat_knn_prob.permute(1, 0, 2).squeeze(-1)
    probs = combine_knn_and_vocab_probs(yhat_knn_prob, probs, lmbda)
    probs = probs.masked_fill(target == pad_idx, 0.0)
    return probs, probs.sum() / (target != pad_idx).sum()


def build_knn_lm():
    torch.manual_seed(970)
    model = TransformerLMLite().eval()
    g = seeded(971)
    # a datastore built from the same model over a small corpus: keys are contexts, vals the next tokens
    corpus = torch.randint(2, 40, (6, 12), generator=g)
    with torch.no_grad():
        _, extra = model(corpus[:, :-1])
    keys = extra["inner_states"][-1].transpose(0, 1).reshape(-1, 16).numpy().astype(np.float32)
    vals = corpus[:, 1:].reshape(-1, 1).numpy().astype(np.int64)
    dstore = KNN_Dstore(keys, vals, k=8)
    src_tokens = torch.randint(2, 40, (3, 9), generator=g)
    src_tokens[1, 6:] = 1
    src_tokens[2, 8:] = 1
    target = torch.cat([src_tokens[:, 1:], torch.full((3, 1), 1)], dim=1)
    return score_with_knnlm, (model, dstore, src_tokens, target)


# --------------------------------------------------------------------------- MEGABYTE byte-level sampling


def exists(val):
    return val is not None


def top_k(logits: torch.Tensor, thres: float = 0.5) -> torch.Tensor:
    num_logits = logits.shape[-1]
    k = max(int((1 - thres) * num_logits), 1)
    val, ind = torch.topk(logits, k)
    probs = torch.full_like(logits, float("-inf"))
    probs.scatter_(1, ind, val)
    return probs


def log(t: torch.Tensor, eps: float = 1e-20) -> torch.Tensor:
    return torch.log(t.clamp(min=eps))


def gumbel_noise(t: torch.Tensor) -> torch.Tensor:
    noise = torch.zeros_like(t).uniform_(0, 1)
    return -log(-log(noise))


def gumbel_sample(t: torch.Tensor, temperature: float = 1.0, dim: int = -1) -> torch.Tensor:
    return ((t / max(temperature, 1e-10)) + gumbel_noise(t)).argmax(dim=dim)


def decode_token(token) -> str:
    return str(chr(max(32, token)))  # BREAK must-not: the sampled bytes become the returned str


def decode_tokens(tokens) -> str:
    return "".join(list(map(decode_token, tokens)))


class MEGABYTE(nn.Module):
    """Two stages: a global model over patches of bytes and a local model over the bytes of each patch."""

    def __init__(self, num_tokens: int = 256, dim: int = 32, max_seq_len: tuple[int, int] = (4, 4)) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.patch_size = max_seq_len[1]
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.start_token = nn.Parameter(torch.randn(dim))
        self.patch_proj = nn.Linear(dim * self.patch_size, dim)
        self.global_transformer = CausalSelfAttention(dim, 4)
        self.local_transformer = CausalSelfAttention(dim, 4)
        self.norm = RMSNorm(dim)
        self.to_logits = nn.Linear(dim, num_tokens)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, n = ids.shape
        p = self.patch_size
        padding = (-n) % p
        ids_padded = F.pad(ids, (0, padding), value=0)
        tokens = self.token_emb(ids_padded)  # b, n', d
        patches = tokens.reshape(b, -1, p * tokens.shape[-1])
        patch_emb = self.patch_proj(patches)
        start = self.start_token.expand(b, 1, -1)
        global_in = torch.cat([start, patch_emb[:, :-1]], dim=1)
        global_out = global_in + self.global_transformer(global_in)  # a context per patch, from earlier patches
        local_in = tokens.reshape(b * global_out.shape[1], p, -1)
        local_in = torch.cat([global_out.reshape(-1, 1, global_out.shape[-1]), local_in[:, :-1]], dim=1)
        local_out = local_in + self.local_transformer(local_in)
        logits = self.to_logits(self.norm(local_out)).reshape(b, -1, self.to_logits.out_features)
        return logits[:, :n]

    @torch.no_grad()
    def generate(self, prime=None, filter_thres=0.9, temperature=1.0, default_batch_size=1):
        total_seq_len = self.max_seq_len[0] * self.max_seq_len[1]
        if not exists(prime):
            prime = torch.empty((default_batch_size, 0), dtype=torch.long)
        seq = prime
        batch = seq.shape[0]

        for _ in range(total_seq_len - seq.shape[-1]):
            logits = self.forward(F.pad(seq, (0, 1), value=0))[:, -1]  # the next byte's logits
            logits = top_k(logits, thres=filter_thres)
            sampled = gumbel_sample(logits, dim=-1, temperature=temperature)
            seq = torch.cat((seq, sampled.reshape(batch, 1)), dim=-1)

        return seq.reshape(batch, *self.max_seq_len)


def sample_text(model, prime_text: str):
    """The training script's periodic sample: prime with a validation string, generate, decode to text."""
    prime = torch.tensor([list(prime_text.encode("utf-8"))], dtype=torch.long)
    sample = model.generate(prime)
    sample = sample.flatten(1)
    output_str = decode_tokens(sample[0][len(prime_text):])
    return prime_text + output_str


def build_megabyte():
    torch.manual_seed(980)
    model = MEGABYTE().eval()
    return sample_text, (model, "byte lm ")
