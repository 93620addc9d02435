"""LLM pre-training: NVIDIA/Megatron-LM's GPT ``forward_step`` on one rank of every parallel group: ``get_batch``
with ``get_ltor_masks_and_position_ids`` for packed documents (the attention mask and the position ids reset after
every EOD token, EODs masked out of the loss), a small ``GPTModel`` whose logits come from the tied word embeddings
(``parallel_lm_logits``), the ``_VocabParallelCrossEntropy`` autograd function with its hand-written backward, and
``loss_func`` with the NaN check that precedes the data-parallel reduction."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ megatron/core/parallel_state.py on one rank


def get_tensor_model_parallel_rank():
    return 0


def get_tensor_model_parallel_world_size():
    return 1


def all_reduce(tensor, op=None, group=None):
    """``torch.distributed.all_reduce`` over a group of one: the tensor is already reduced."""
    if get_tensor_model_parallel_world_size() > 1:
        torch.distributed.all_reduce(tensor, op=op, group=group)
    return tensor


# ------------------------------------------------------------------ megatron/training/utils.py


def get_ltor_masks_and_position_ids(data, eod_token, reset_position_ids, reset_attention_mask, eod_mask_loss):
    """Build masks and position id for left to right model."""
    # Extract batch size and sequence length.
    micro_batch_size, seq_length = data.size()

    # Attention mask (lower triangular).
    if reset_attention_mask:
        att_mask_batch = micro_batch_size
    else:
        att_mask_batch = 1
    attention_mask = torch.tril(torch.ones((att_mask_batch, seq_length, seq_length), device=data.device)).view(att_mask_batch, 1, seq_length, seq_length)

    # Loss mask.
    loss_mask = torch.ones(data.size(), dtype=torch.float, device=data.device)
    if eod_mask_loss:
        loss_mask[data == eod_token] = 0.0

    # Position ids.
    position_ids = torch.arange(seq_length, dtype=torch.long, device=data.device)
    position_ids = position_ids.unsqueeze(0).expand_as(data)
    # We need to clone as the ids will be modifed based on batch index.
    if reset_position_ids:
        position_ids = position_ids.clone()

    if reset_position_ids or reset_attention_mask:
        # Loop through the batches:
        for b in range(micro_batch_size):
            # Find indecies where EOD token is.
            eod_index = position_ids[b, data[b] == eod_token]  # BREAK: no per-row EOD list: a token's document is the count of EODs before it (cumsum); the mask keeps same-document pairs, the position is the index minus its document's start (cummax of eod index + 1)
            # Detach indecies from positions if going to modify positions.
            if reset_position_ids:
                eod_index = eod_index.clone()

            # Loop through EOD indecies:
            prev_index = 0
            for j in range(eod_index.size()[0]):
                i = eod_index[j]
                # Mask attention loss.
                if reset_attention_mask:
                    attention_mask[b, 0, (i + 1) :, : (i + 1)] = 0
                # Reset positions.
                if reset_position_ids:
                    position_ids[b, (i + 1) :] -= i + 1 - prev_index
                    prev_index = i + 1

    # Convert attention mask to binary:
    attention_mask = attention_mask < 0.5

    return attention_mask, loss_mask, position_ids


# ------------------------------------------------------------------ megatron/core/tensor_parallel/cross_entropy.py


class VocabUtility:
    """Split the vocabulary into `world_size` chunks and return the first and last index of the vocabulary belonging
    to the `rank` partition: Note that indices in [fist, last)"""

    @staticmethod
    def vocab_range_from_per_partition_vocab_size(per_partition_vocab_size, rank, world_size):
        index_f = rank * per_partition_vocab_size
        index_l = index_f + per_partition_vocab_size
        return index_f, index_l


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vocab_parallel_logits, target):
        # Maximum value along vocab dimension across all GPUs.
        logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
        all_reduce(logits_max, op=torch.distributed.ReduceOp.MAX)
        # Subtract the maximum value.
        vocab_parallel_logits = vocab_parallel_logits - logits_max.unsqueeze(dim=-1)

        # Get the partition's vocab indecies
        get_vocab_range = VocabUtility.vocab_range_from_per_partition_vocab_size
        partition_vocab_size = vocab_parallel_logits.size()[-1]
        rank = get_tensor_model_parallel_rank()
        world_size = get_tensor_model_parallel_world_size()
        vocab_start_index, vocab_end_index = get_vocab_range(partition_vocab_size, rank, world_size)

        # Create a mask of valid vocab ids (1 means it needs to be masked).
        target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
        masked_target = target.clone() - vocab_start_index
        masked_target[target_mask] = 0

        # Get predicted-logits = logits[target].
        # For Simplicity, we convert logits to a 2-D tensor with size
        # [*, partition-vocab-size] and target to a 1-D tensor of size [*].
        logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
        masked_target_1d = masked_target.view(-1)
        arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
        predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
        predicted_logits_1d = predicted_logits_1d.clone().contiguous()
        predicted_logits = predicted_logits_1d.view_as(target)
        predicted_logits[target_mask] = 0.0
        # All reduce is needed to get the chunks from other GPUs.
        all_reduce(predicted_logits, op=torch.distributed.ReduceOp.SUM)

        # Sum of exponential of logits along vocab dimension across all GPUs.
        exp_logits = vocab_parallel_logits
        torch.exp(vocab_parallel_logits, out=exp_logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        all_reduce(sum_exp_logits, op=torch.distributed.ReduceOp.SUM)

        # Loss = log(sum(exp(logits))) - predicted-logit.
        loss = torch.log(sum_exp_logits) - predicted_logits

        # Normalize and optionally smooth logits
        exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))

        # Store softmax, target-mask and masked-target for backward pass.
        ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)

        return loss

    @staticmethod
    def backward(ctx, grad_output):
        # Retreive tensors from the forward path.
        softmax, target_mask, masked_target_1d = ctx.saved_tensors

        # All the inputs have softmax as thier gradient.
        grad_input = softmax
        # For simplicity, work with the 2D gradient.
        partition_vocab_size = softmax.size()[-1]
        grad_2d = grad_input.view(-1, partition_vocab_size)

        # Add the gradient from matching classes.
        arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
        softmax_update = 1.0 - target_mask.view(-1).float()
        grad_2d[arange_1d, masked_target_1d] -= softmax_update

        # Finally elementwise multiplication with the output gradients.
        grad_input.mul_(grad_output.unsqueeze(dim=-1))

        return grad_input, None


def vocab_parallel_cross_entropy(vocab_parallel_logits, target):
    return _VocabParallelCrossEntropy.apply(vocab_parallel_logits, target)


# ------------------------------------------------------------------ a small GPTModel (legacy ParallelTransformer)


class ParallelTransformerLayer(nn.Module):
    def __init__(self, hidden, heads, attention_dropout=0.1, hidden_dropout=0.1):
        super().__init__()
        self.heads = heads
        self.input_layernorm = nn.LayerNorm(hidden)
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.post_attention_layernorm = nn.LayerNorm(hidden)
        self.dense_h_to_4h = nn.Linear(hidden, 4 * hidden)
        self.dense_4h_to_h = nn.Linear(4 * hidden, hidden)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.hidden_dropout = hidden_dropout

    def forward(self, hidden_states, attention_mask):
        b, s, h = hidden_states.shape
        x = self.input_layernorm(hidden_states)
        q, k, v = self.query_key_value(x).view(b, s, self.heads, 3 * h // self.heads).transpose(1, 2).chunk(3, dim=-1)
        attention_scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads)
        # attention_mask_func: masked positions get -10000 before the softmax
        attention_scores = attention_scores.masked_fill(attention_mask, -10000.0)
        attention_probs = self.attention_dropout(torch.softmax(attention_scores, dim=-1))
        context = (attention_probs @ v).transpose(1, 2).reshape(b, s, h)
        hidden_states = hidden_states + F.dropout(self.dense(context), p=self.hidden_dropout, training=self.training)
        x = self.post_attention_layernorm(hidden_states)
        mlp = self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))
        return hidden_states + F.dropout(mlp, p=self.hidden_dropout, training=self.training)


class GPTModel(nn.Module):
    def __init__(self, vocab_size=32, hidden=16, heads=2, layers=2, max_position_embeddings=32):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_position_embeddings, hidden)
        self.embedding_dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList([ParallelTransformerLayer(hidden, heads) for _ in range(layers)])
        self.final_layernorm = nn.LayerNorm(hidden)

    def forward(self, input_ids, position_ids, attention_mask, labels=None):
        hidden = self.embedding_dropout(self.word_embeddings(input_ids) + self.position_embeddings(position_ids))
        for layer in self.layers:
            hidden = layer(hidden, attention_mask)
        hidden = self.final_layernorm(hidden)
        # parallel_lm_logits: the output layer shares the word embeddings
        output = F.linear(hidden, self.word_embeddings.weight)
        if labels is None:
            return output
        return vocab_parallel_cross_entropy(output.float(), labels)


# ------------------------------------------------------------------ pretrain_gpt.py


class GPTForwardStep(nn.Module):
    """``forward_step`` followed by its ``loss_func``, as the pipeline schedule calls them."""

    def __init__(self, eod=0):
        super().__init__()
        self.model = GPTModel()
        self.eod = eod
        self.args = SimpleNamespace(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True,
                                    context_parallel_size=1, check_for_nan_in_loss_and_grad=True)

    def get_batch(self, text):
        # Unpack.
        tokens_ = text.long()
        labels = tokens_[:, 1:].contiguous()
        tokens = tokens_[:, :-1].contiguous()
        # Get the masks and postition ids.
        attention_mask, loss_mask, position_ids = get_ltor_masks_and_position_ids(
            tokens, self.eod, self.args.reset_position_ids, self.args.reset_attention_mask, self.args.eod_mask_loss)
        return tokens, labels, loss_mask, attention_mask, position_ids

    def loss_func(self, loss_mask, output_tensor):
        args = self.args
        losses = output_tensor.float()
        loss_mask = loss_mask.view(-1).float()
        total_tokens = loss_mask.sum()
        loss = torch.cat([torch.sum(losses.view(-1) * loss_mask).view(1), total_tokens.view(1)])
        # Check individual rank losses are not NaN prior to DP all-reduce.
        if args.check_for_nan_in_loss_and_grad:
            global_rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
            assert not loss[0].isnan(), f"Rank {global_rank}: found NaN in local forward loss calculation. Node: {os.uname()[1]}"  # BREAK must-not: a NaN loss on this rank must stop the run with its rank and node before the reduction
        # Reduce loss for logging.
        reporting_loss = loss.clone().detach()
        all_reduce(reporting_loss)
        local_num_tokens = loss[1].clone().detach().to(torch.int)
        return (loss[0] * args.context_parallel_size, local_num_tokens, {"lm loss": (reporting_loss[0], reporting_loss[1])})

    def forward(self, text):
        tokens, labels, loss_mask, attention_mask, position_ids = self.get_batch(text)
        output_tensor = self.model(tokens, position_ids, attention_mask, labels=labels)
        return self.loss_func(loss_mask, output_tensor)


def build_megatron_gpt_step():
    seeded(1415)
    text = torch.randint(1, 32, (2, 17))
    text[0, 4] = text[0, 11] = 0  # three packed documents in the first row
    text[1, 7] = 0
    return GPTForwardStep().train(), (text,)
