"""Training-loop code: multi-task learning with Dynamic Weight Average (MTAN) over a few epochs with an epoch
log record, and a T5 stack run in float16 with the inf-clamping that made T5 trainable in fp16."""

from __future__ import annotations

import logging
import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------- Dynamic Weight Average


class DynamicWeightAverage:
    """lambda_k(t) = K * softmax_k(w_k(t-1) / T), w_k(t-1) = L_k(t-1) / L_k(t-2) (Liu et al., MTAN)."""

    def __init__(self, num_tasks: int, temperature: float = 2.0) -> None:
        self.num_tasks = num_tasks
        self.temperature = temperature
        self.history: list[list[float]] = []

    def weights(self) -> torch.Tensor:
        if len(self.history) < 2:
            return torch.ones(self.num_tasks)
        w = torch.tensor(self.history[-1]) / torch.tensor(self.history[-2])
        return self.num_tasks * F.softmax(w / self.temperature, dim=0)

    def update(self, losses: torch.Tensor) -> None:
        self.history.append([loss.item() for loss in losses])  # BREAK: keep detached tensors in the history


class MultiTaskNet(nn.Module):
    def __init__(self, in_dim: int = 12, hidden: int = 32, num_classes: int = 4) -> None:
        super().__init__()
        self.shared = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.cls_head = nn.Linear(hidden, num_classes)
        self.reg_head = nn.Linear(hidden, 1)
        self.aux_head = nn.Linear(hidden, 2)
        self.dwa = DynamicWeightAverage(num_tasks=3)

    def task_losses(self, x, y_cls, y_reg, y_aux) -> torch.Tensor:
        h = self.shared(x)
        return torch.stack(
            [
                F.cross_entropy(self.cls_head(h), y_cls),
                F.smooth_l1_loss(self.reg_head(h).squeeze(-1), y_reg),
                F.mse_loss(self.aux_head(h), y_aux),
            ]
        )

    def log_epoch(self, epoch: int, loss: torch.Tensor, w: torch.Tensor) -> None:
        log.info("epoch %d loss %.4f weights %s", epoch, loss.item(), w.tolist())  # BREAK must-not: logged

    def forward(self, epochs):
        totals = []
        for epoch, (x, y_cls, y_reg, y_aux) in enumerate(epochs):
            losses = self.task_losses(x, y_cls, y_reg, y_aux)
            lambdas = self.dwa.weights()
            total = (lambdas * losses).sum()
            self.dwa.update(losses)
            self.log_epoch(epoch, total, lambdas)
            totals.append(total)
        return torch.stack(totals)


def build_dwa_multitask():
    torch.manual_seed(1010)
    model = MultiTaskNet()
    g = seeded(1011)
    epochs = []
    for _ in range(4):
        x = torch.randn(16, 12, generator=g)
        epochs.append(
            (
                x,
                torch.randint(0, 4, (16,), generator=g),
                x[:, 0] * 2 + 0.1 * torch.randn(16, generator=g),
                torch.randn(16, 2, generator=g),
            )
        )
    return model, (epochs,)


# --------------------------------------------------------------------------- T5 in float16


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        """Construct a layernorm module in the T5 style. No bias and no subtraction of mean."""
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # T5 uses a layer_norm which only scales and doesn't shift, which is also known as Root Mean
        # Square Layer Normalization https://arxiv.org/abs/1910.07467 thus varience is calculated
        # w/o mean and there is no bias. Additionally we want to make sure that the accumulation for
        # half-precision inputs is done in fp32
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

        # convert into half-precision if necessary
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)

        return self.weight * hidden_states


class T5DenseReluDense(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout_rate: float) -> None:
        super().__init__()
        self.wi = nn.Linear(d_model, d_ff, bias=False)
        self.wo = nn.Linear(d_ff, d_model, bias=False)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.wi(hidden_states)
        hidden_states = F.relu(hidden_states)
        hidden_states = self.dropout(hidden_states)
        hidden_states = self.wo(hidden_states)
        return hidden_states


class T5LayerFF(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout_rate: float) -> None:
        super().__init__()
        self.DenseReluDense = T5DenseReluDense(d_model, d_ff, dropout_rate)
        self.layer_norm = T5LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        forwarded_states = self.layer_norm(hidden_states)
        forwarded_states = self.DenseReluDense(forwarded_states)
        hidden_states = hidden_states + self.dropout(forwarded_states)
        return hidden_states


class T5Attention(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        has_relative_attention_bias: bool = False,
        relative_attention_num_buckets: int = 8,
    ) -> None:
        super().__init__()
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.n_heads = n_heads
        self.key_value_proj_dim = d_model // n_heads
        self.inner_dim = d_model
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.o = nn.Linear(d_model, d_model, bias=False)
        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        # now relative_position is in the range [0, inf)

        # half of the buckets are for exact increments in positions
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact

        # The other half of the buckets are for logarithmically bigger bins in positions up to max_distance
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )

        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length: int, key_length: int) -> torch.Tensor:
        context_position = torch.arange(query_length, dtype=torch.long)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position  # shape (query_length, key_length)
        relative_position_bucket = self._relative_position_bucket(
            relative_position,
            bidirectional=True,
            num_buckets=self.relative_attention_num_buckets,
            max_distance=32,
        )
        values = self.relative_attention_bias(
            relative_position_bucket
        )  # shape (query_length, key_length, num_heads)
        values = values.permute([2, 0, 1]).unsqueeze(0)  # shape (1, num_heads, query_length, key_length)
        return values

    def forward(self, hidden_states, mask=None, position_bias=None):
        batch_size, seq_length = hidden_states.shape[:2]

        def shape(states):
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        def unshape(states):
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        query_states = shape(self.q(hidden_states))
        key_states = shape(self.k(hidden_states))
        value_states = shape(self.v(hidden_states))

        scores = torch.matmul(query_states, key_states.transpose(3, 2))

        if position_bias is None:
            position_bias = self.compute_bias(seq_length, seq_length).to(scores.dtype)
            if mask is not None:
                position_bias = position_bias + mask  # (batch_size, n_heads, seq_length, key_length)

        scores += position_bias
        attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
        attn_output = unshape(torch.matmul(attn_weights, value_states))
        attn_output = self.o(attn_output)
        return attn_output, position_bias


class T5LayerSelfAttention(nn.Module):
    def __init__(
        self, d_model: int, n_heads: int, has_relative_attention_bias: bool, dropout_rate: float
    ) -> None:
        super().__init__()
        self.SelfAttention = T5Attention(
            d_model, n_heads, has_relative_attention_bias=has_relative_attention_bias
        )
        self.layer_norm = T5LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout_rate)

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output, position_bias = self.SelfAttention(
            normed_hidden_states, mask=attention_mask, position_bias=position_bias
        )
        hidden_states = hidden_states + self.dropout(attention_output)
        return hidden_states, position_bias


class T5Block(nn.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_heads: int,
        has_relative_attention_bias: bool = False,
        dropout_rate: float = 0.0,
    ) -> None:
        super().__init__()
        self.layer = nn.ModuleList()
        self.layer.append(T5LayerSelfAttention(d_model, n_heads, has_relative_attention_bias, dropout_rate))
        self.layer.append(T5LayerFF(d_model, d_ff, dropout_rate))

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        hidden_states, position_bias = self.layer[0](
            hidden_states, attention_mask=attention_mask, position_bias=position_bias
        )

        # clamp inf values to enable fp16 training
        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():  # BREAK: where + clamp
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

        # Apply Feed Forward layer
        hidden_states = self.layer[-1](hidden_states)

        # clamp inf values to enable fp16 training
        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():  # BREAK: where + clamp
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

        return hidden_states, position_bias


class T5Stack(nn.Module):
    def __init__(
        self, vocab_size: int = 64, d_model: int = 32, d_ff: int = 64, n_heads: int = 4, num_layers: int = 2
    ):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, d_model)
        self.block = nn.ModuleList(
            [
                T5Block(d_model, d_ff, n_heads, has_relative_attention_bias=bool(i == 0))
                for i in range(num_layers)
            ]
        )
        self.final_layer_norm = T5LayerNorm(d_model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden_states = self.embed_tokens(input_ids)
        extended_attention_mask = attention_mask[:, None, None, :].to(hidden_states.dtype)
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(hidden_states.dtype).min
        position_bias = None
        for layer_module in self.block:
            hidden_states, position_bias = layer_module(hidden_states, extended_attention_mask, position_bias)
        return self.final_layer_norm(hidden_states)


def build_t5_fp16():
    torch.manual_seed(1020)
    model = T5Stack().half()
    g = seeded(1021)
    input_ids = torch.randint(0, 64, (2, 10), generator=g)
    attention_mask = (torch.arange(10)[None, :] < torch.tensor([10, 7])[:, None]).long()
    return model, (input_ids, attention_mask)
