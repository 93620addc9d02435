"""Language models: microsoft/DeepSpeed's ``MoE`` layer (``TopKGate`` with ``top1gating``: the TorchScript
``_capacity`` from the token count, the kept tokens through ``_top_idx``, ``exp_counts`` moved to the host,
``MOELayer``'s einsum dispatch and combine) in a transformer block, BlinkDL/RWKV-LM's RWKV-4 RNN-mode reference
(``RWKV_RNN``'s time-mix and channel-mix over the per-layer state) generating with ``sample_logits``' numpy top-p
sampling, a peft LoRA adapter over bitsandbytes' ``Linear8bitLt`` (``MatMul8bitLt`` with the LLM.int8 outlier
decomposition of ``int8_vectorwise_quant`` / ``int8_mixed_scaled_mm`` in their PyTorch form), and
mit-han-lab/streaming-llm's ``streaming_inference`` (``StartRecentKVCache.evict_for_space`` keeping the attention
sinks, ``greedy_generate`` streaming the decoded words, the position-shifted Llama attention whose rotary cache is
regrown past its length)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .helpers import seeded

# ------------------------------------------------------------------ DeepSpeed: deepspeed/moe/sharded_moe.py

uniform_map: dict[torch.device, object] = {}
exp_selection_uniform_map: dict[torch.device, object] = {}


def multiplicative_jitter(x, device: torch.device, epsilon=1e-2):
    if epsilon == 0:
        return x
    uniform = uniform_map.get(device)
    if uniform is None:
        uniform = torch.distributions.uniform.Uniform(low=torch.tensor(1.0 - epsilon, device=device),
                                                      high=torch.tensor(1.0 + epsilon, device=device)).rsample
        uniform_map[device] = uniform
    return x * uniform(x.shape)


@torch.jit.script
def _capacity(gates: Tensor, capacity_factor: Tensor, min_capacity: Tensor) -> Tensor:
    # gates has shape of SE
    num_tokens = gates.shape[0]
    num_experts = gates.shape[1]
    # to(torch.int64) works around a bug in torch.onnx.export:
    # it should cast k to int64 when converting torch.topk but it doesn't.
    capacity = torch.ceil((num_tokens / num_experts) * capacity_factor).to(torch.int64)
    if capacity < min_capacity:  # BREAK: the capacity depends only on the static token and expert counts: compute it in Python with math.ceil and max
        capacity = min_capacity.to(torch.int64)
    return capacity


@torch.jit.script
def _top_idx(source, k):
    return torch.topk(source, k=k, dim=0)[1]


@torch.jit.script
def _one_hot_to_float(x, num_classes):
    return F.one_hot(x, num_classes=num_classes).float()


def einsum(rule, a, b):
    if rule == "s,se->se":
        return a.reshape(a.shape[0], -1) * b
    elif rule == "se,sc->sec":
        return a.unsqueeze(2) * b.unsqueeze(1)
    elif rule == "se,se->s":
        return torch.bmm(a.unsqueeze(1), b.unsqueeze(2)).reshape(-1)
    elif rule == "sec,sm->ecm":
        s = a.shape[0]
        e = a.shape[1]
        c = a.shape[2]
        m = b.shape[1]
        return torch.matmul(a.reshape(s, -1).t(), b).reshape(e, c, m)
    elif rule == "sec,ecm->sm":
        return torch.matmul(a.reshape(a.shape[0], -1), b.reshape(-1, b.shape[-1]))
    else:
        return torch.einsum(rule, a, b)


def top1gating(logits: Tensor, capacity_factor: float, min_capacity: int, used_token: Tensor = None,
               noisy_gate_policy: str | None = None, drop_tokens: bool = True, use_rts: bool = True):
    """Implements Top1Gating on logits."""
    if noisy_gate_policy == "RSample":
        logits_w_noise = logits + torch.distributions.gumbel.Gumbel(torch.tensor(0.0), torch.tensor(1.0)).rsample(logits.shape)
    # everything is in fp32 in this function
    gates = F.softmax(logits, dim=1)

    capacity = _capacity(gates, torch.tensor(capacity_factor), torch.tensor(min_capacity))

    # Create a mask for 1st's expert per token
    # noisy gating
    indices1_s = torch.argmax(logits_w_noise if noisy_gate_policy == "RSample" else gates, dim=1)
    num_experts = int(gates.shape[1])
    mask1 = F.one_hot(indices1_s, num_classes=num_experts)

    # mask only used tokens
    if used_token is not None:
        mask1 = einsum("s,se->se", used_token, mask1)

    # gating decisions
    exp_counts = torch.sum(mask1, dim=0).detach().to("cpu")

    # if we don't want to drop any tokens
    if not drop_tokens:
        new_capacity = torch.max(exp_counts).to(logits.device)
        capacity = new_capacity

    # Compute l_aux
    me = torch.mean(gates, dim=0)
    ce = torch.mean(mask1.float(), dim=0)
    l_aux = torch.sum(me * ce) * num_experts

    # Random Token Selection
    if use_rts:
        uniform = exp_selection_uniform_map.get(logits.device)
        if uniform is None:
            uniform = torch.distributions.uniform.Uniform(low=torch.tensor(0.0, device=logits.device),
                                                          high=torch.tensor(1.0, device=logits.device)).rsample
            exp_selection_uniform_map[logits.device] = uniform
        mask1_rand = mask1 * uniform(mask1.shape)
    else:
        mask1_rand = mask1

    assert logits.shape[0] >= min_capacity, "No. of tokens (batch-size) should be greater than min_capacity. Either set min_capacity to 0 or increase your batch size."

    top_idx = _top_idx(mask1_rand, capacity)

    new_mask1 = mask1 * torch.zeros_like(mask1).scatter_(0, top_idx, 1)
    mask1 = new_mask1

    # Compute locations in capacity buffer
    locations1 = torch.cumsum(mask1, dim=0) - 1

    # Store the capacity location for each token
    locations1_s = torch.sum(locations1 * mask1, dim=1)

    # Normalize gate probabilities
    mask1_float = mask1.float()
    gates = gates * mask1_float

    locations1_sc = _one_hot_to_float(locations1_s, capacity)
    combine_weights = einsum("se,sc->sec", gates, locations1_sc)

    dispatch_mask = combine_weights.bool()

    return l_aux, combine_weights, dispatch_mask, exp_counts


class TopKGate(nn.Module):
    def __init__(self, model_dim, num_experts, k=1, capacity_factor=1.0, eval_capacity_factor=1.0, min_capacity=4,
                 noisy_gate_policy=None, drop_tokens=True, use_rts=True):
        super().__init__()
        self.wg = nn.Linear(model_dim, num_experts, bias=False).float()
        self.k = k
        self.capacity_factor = capacity_factor
        self.eval_capacity_factor = eval_capacity_factor
        self.min_capacity = min_capacity
        self.noisy_gate_policy = noisy_gate_policy
        self.wall_clock_breakdown = False
        self.gate_time = 0.0
        self.drop_tokens = drop_tokens
        self.use_rts = use_rts

    def forward(self, input, used_token=None, use_tutel=False):
        input_fp32 = input.float()
        # input jittering
        if self.noisy_gate_policy == "Jitter" and self.training:
            input_fp32 = multiplicative_jitter(input_fp32, device=input.device)
        logits = F.linear(input_fp32, weight=self.wg.weight.float(), bias=None)
        if self.k == 1:
            gate_output = top1gating(logits, self.capacity_factor if self.training else self.eval_capacity_factor,
                                     self.min_capacity, used_token, self.noisy_gate_policy if self.training else None,
                                     self.drop_tokens, self.use_rts)
        else:
            raise NotImplementedError
        return gate_output


class Experts(nn.Module):
    def __init__(self, expert, num_local_experts=1):
        super().__init__()
        self.deepspeed_experts = nn.ModuleList([expert() for _ in range(num_local_experts)])
        self.num_local_experts = num_local_experts

    def forward(self, inputs):
        chunks = inputs.chunk(self.num_local_experts, dim=1)
        expert_outputs = []
        for chunk, expert in zip(chunks, self.deepspeed_experts, strict=True):
            out = expert(chunk)
            if isinstance(out, tuple):
                out = out[0]  # Ignore the bias term for now
            expert_outputs += [out]
        return torch.cat(expert_outputs, dim=1)


class MOELayer(nn.Module):
    """The expert-parallel world has one rank here: the two all-to-alls are the identity and are left out."""

    def __init__(self, gate, experts, num_local_experts):
        super().__init__()
        self.gate = gate
        self.experts = experts
        self.num_local_experts = num_local_experts
        self.l_aux = None
        self.exp_counts = None

    def forward(self, *input: Tensor) -> Tensor:
        # Implement Algorithm 2 from GShard paper.
        d_model = input[0].shape[-1]
        # Initial implementation -> Reshape into S tokens by dropping sequence dimension.
        # Reshape into G groups so that each group can distribute tokens equally
        # group_size = kwargs['group_size'] if 'group_size' in kwargs.keys() else 1
        reshaped_input = input[0].reshape(-1, d_model)
        self.l_aux, combine_weights, dispatch_mask, self.exp_counts = self.gate(reshaped_input, input[1])
        dispatched_input = einsum("sec,sm->ecm", dispatch_mask.type_as(input[0]), reshaped_input)
        # Re-shape after all-to-all: ecm -> gecm
        dispatched_input = dispatched_input.reshape(1, self.num_local_experts, -1, d_model)
        expert_output = self.experts(dispatched_input)
        # Re-shape back: gecm -> ecm
        expert_output = expert_output.reshape(self.num_local_experts, -1, d_model)
        combined_output = einsum("sec,ecm->sm", combine_weights.type_as(input[0]), expert_output)
        a = combined_output.reshape(input[0].shape)
        return a


class MoE(nn.Module):
    def __init__(self, hidden_size, expert, num_experts=4, k=1, capacity_factor=1.0, min_capacity=4, use_residual=False,
                 noisy_gate_policy=None, drop_tokens=True, use_rts=True):
        super().__init__()
        self.use_residual = use_residual
        self.num_local_experts = num_experts
        experts = Experts(expert, self.num_local_experts)
        self.deepspeed_moe = MOELayer(TopKGate(hidden_size, num_experts, k, capacity_factor, capacity_factor, min_capacity,
                                               noisy_gate_policy, drop_tokens, use_rts), experts, self.num_local_experts)

    def forward(self, hidden_states, used_token=None):
        output = self.deepspeed_moe(hidden_states, used_token)
        return output, self.deepspeed_moe.l_aux, self.deepspeed_moe.exp_counts


class MoEBlock(nn.Module):
    """A pre-norm transformer block whose MLP is the DeepSpeed MoE, as in Megatron-DeepSpeed's GPT MoE layers."""

    def __init__(self, dim=16, heads=2, num_experts=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.moe = MoE(dim, lambda: nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim)),
                       num_experts=num_experts, capacity_factor=1.0, min_capacity=4, noisy_gate_policy=None, use_rts=False)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        moe_out, l_aux, exp_counts = self.moe(self.ln2(x))
        return x + moe_out, l_aux, exp_counts


def build_deepspeed_moe():
    seeded(1312)
    return MoEBlock(), (torch.randn(2, 6, 16),)


# ------------------------------------------------------------------ RWKV-LM: RWKV-v4 RNN mode (src/model_run.py)


class RWKV_RNN(nn.Module):
    def __init__(self, vocab_size=24, n_embd=16, n_layer=2):
        super().__init__()
        self.n_embd, self.n_layer = n_embd, n_layer
        self.RUN_DEVICE = "cpu"
        self.emb = nn.Embedding(vocab_size, n_embd)
        self.ln0 = nn.LayerNorm(n_embd)
        self.blocks = nn.ModuleList()
        for i in range(n_layer):
            b = nn.Module()
            b.ln1, b.ln2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            ratio = i / max(n_layer - 1, 1)
            b.att_time_mix_k = nn.Parameter(torch.rand(n_embd) * (1 - ratio) + ratio * 0.5)
            b.att_time_mix_v = nn.Parameter(torch.rand(n_embd))
            b.att_time_mix_r = nn.Parameter(torch.rand(n_embd))
            b.att_time_first = nn.Parameter(torch.randn(n_embd) * 0.3)
            b.att_time_decay = nn.Parameter(-torch.exp(torch.randn(n_embd) * 0.5))  # stored as -exp(w), as the loader does
            b.att_key, b.att_value = nn.Linear(n_embd, n_embd, bias=False), nn.Linear(n_embd, n_embd, bias=False)
            b.att_receptance, b.att_output = nn.Linear(n_embd, n_embd, bias=False), nn.Linear(n_embd, n_embd, bias=False)
            b.ffn_time_mix_k = nn.Parameter(torch.rand(n_embd))
            b.ffn_time_mix_r = nn.Parameter(torch.rand(n_embd))
            b.ffn_key = nn.Linear(n_embd, 4 * n_embd, bias=False)
            b.ffn_receptance = nn.Linear(n_embd, n_embd, bias=False)
            b.ffn_value = nn.Linear(4 * n_embd, n_embd, bias=False)
            self.blocks.append(b)
        self.ln_out = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def LN(self, x, w):
        return F.layer_norm(x, (self.n_embd,), weight=w.weight, bias=w.bias)

    def FF(self, x, state, i, time_mix_k, time_mix_r, kw, vw, rw):
        xk = x * time_mix_k + state[5 * i + 0] * (1 - time_mix_k)
        xr = x * time_mix_r + state[5 * i + 0] * (1 - time_mix_r)
        state[5 * i + 0] = x.float()
        r = torch.sigmoid(rw @ xr)
        k = torch.square(torch.relu(kw @ xk))
        kv = vw @ k
        return r * kv

    def SA(self, x, state, i, time_mix_k, time_mix_v, time_mix_r, time_first, time_decay, kw, vw, rw, ow):
        xk = x * time_mix_k + state[5 * i + 1] * (1 - time_mix_k)
        xv = x * time_mix_v + state[5 * i + 1] * (1 - time_mix_v)
        xr = x * time_mix_r + state[5 * i + 1] * (1 - time_mix_r)
        state[5 * i + 1] = x.float()

        r = torch.sigmoid(rw @ xr)
        k = kw @ xk
        v = vw @ xv

        aa = state[5 * i + 2]
        bb = state[5 * i + 3]
        pp = state[5 * i + 4]
        ww = time_first + k
        p = torch.maximum(pp, ww)
        e1 = torch.exp(pp - p)
        e2 = torch.exp(ww - p)
        a = e1 * aa + e2 * v
        b = e1 * bb + e2
        ww = pp + time_decay
        p = torch.maximum(ww, k)
        e1 = torch.exp(ww - p)
        e2 = torch.exp(k - p)
        state[5 * i + 2] = e1 * aa + e2 * v
        state[5 * i + 3] = e1 * bb + e2
        state[5 * i + 4] = p
        wkv = a / b
        return ow @ (r * wkv)

    @torch.no_grad()
    def forward(self, ctx, state, preprocess_only=False):
        x = self.emb.weight[ctx[-1]]
        x = self.LN(x, self.ln0)
        if state is None:
            state = torch.zeros(self.n_layer * 5, self.n_embd)
            for i in range(self.n_layer):
                state[5 * i + 4] -= 1e30
        for i, b in enumerate(self.blocks):
            x = x + self.SA(self.LN(x, b.ln1), state, i, b.att_time_mix_k, b.att_time_mix_v, b.att_time_mix_r,
                            b.att_time_first, b.att_time_decay, b.att_key.weight, b.att_value.weight,
                            b.att_receptance.weight, b.att_output.weight)
            x = x + self.FF(self.LN(x, b.ln2), state, i, b.ffn_time_mix_k, b.ffn_time_mix_r, b.ffn_key.weight,
                            b.ffn_value.weight, b.ffn_receptance.weight)
        if preprocess_only:
            return state
        x = self.LN(x, self.ln_out)
        x = self.head.weight @ x
        return x.float(), state


class RWKVGenerator:
    """The sampling loop of ``run.py`` / ``src/utils.py``' ``TOKENIZER.sample_logits`` over a character vocabulary."""

    def __init__(self, model, itos):
        self.model = model
        self.itos = itos

    def sample_logits(self, out, x, ctx_len, temperature=1.0, top_p_usual=None, top_p_newline=None):
        lastChar = int(x[-1])
        probs = F.softmax(out, dim=-1)
        if self.itos[lastChar] == "\n":
            top_p = top_p_newline
        else:
            top_p = top_p_usual
        # RWKV_RUN_DEVICE == "cpu"
        probs = probs.numpy()
        sorted_probs = np.sort(probs)[::-1]
        cumulative_probs = np.cumsum(sorted_probs)
        cutoff = float(sorted_probs[np.argmax(cumulative_probs > top_p)])  # BREAK: gather the cutoff with np.take_along_axis and keep it an array; the comparison below needs no Python float
        probs[probs < cutoff] = 0
        if temperature != 1.0:
            probs = probs.pow(1.0 / temperature)
        probs = probs / np.sum(probs)
        out = np.random.choice(a=len(probs), p=probs)  # BREAK must-not: the next token is numpy's draw from the probabilities, fed back into the Python context list
        return out

    def __call__(self, ctx, length=6, temperature=1.0, top_p=0.8, top_p_newline=0.9):
        ctx = list(ctx)
        init_state = None
        for tok in ctx[:-1]:
            init_state = self.model(ctx[: ctx.index(tok) + 1], init_state, preprocess_only=True)
        out, state = self.model(ctx, init_state)
        for _ in range(length):
            char = self.sample_logits(out, ctx, len(ctx), temperature=temperature, top_p_usual=top_p, top_p_newline=top_p_newline)
            ctx += [char]
            out, state = self.model(ctx, state)
        return ctx, out


def build_rwkv_generate():
    seeded(1314)
    itos = {i: c for i, c in enumerate("abcdefghij klmnopqrstu\n.")}
    model = RWKV_RNN(vocab_size=len(itos))
    return RWKVGenerator(model, itos), ([3, 7, 10, 1],)


# ------------------------------------------------------------------ bitsandbytes LLM.int8 + peft LoRA


class MatmulLtState:
    def __init__(self):
        self.CB = None
        self.SCB = None
        self.threshold = 0.0
        self.has_fp16_weights = True
        self.idx = None


def int8_vectorwise_quant(A: torch.Tensor, threshold=0.0):
    rows = math.prod(A.shape[:-1])
    outlier_cols = None
    outlier_restore = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold
        if outliers.any():  # BREAK: work with the outlier-column mask for every input: zero the outliers by masked_fill, no branch
            # Determine which columns contain outliers, and zero out the
            # outliers ahead of quantization. We need to keep a backup of these
            # outliers to restore them after quantization.
            outlier_cols = torch.argwhere(outliers.any(dim=0)).view(-1)  # BREAK: a boolean column mask replaces the indices; the outlier matmul runs over all columns with the others zeroed
            outlier_restore = A[outliers].clone()  # BREAK: quantize from A.masked_fill(outliers, 0) and leave A untouched instead of zeroing and restoring in place
            A[outliers] = 0
        else:
            # Needed for torch.compile support.
            outlier_cols = torch.empty(0, device=A.device, dtype=torch.int64)
    # Get absmax for each row.
    row_stats = torch.max(A.abs(), dim=1).values.float()
    # Quantize row-wise to int8.
    out_row = torch.round(A * (127.0 / row_stats.unsqueeze(-1))).to(torch.int8)
    # Zero out values from outlier columns across all rows.
    if rows > 1 and outlier_cols is not None:
        out_row[:, outlier_cols] = 0
    # Restore outliers.
    if outlier_restore is not None:
        A[outliers] = outlier_restore
    return out_row, row_stats, outlier_cols


def int8_vectorwise_dequant(A: torch.Tensor, stats: torch.Tensor):
    return A * (stats.view(-1, 1) * 7.874015718698502e-3)


def int8_scaled_mm(A, B, row_stats, col_stats, bias=None, dtype=torch.float32):
    out_i32 = torch.matmul(A.float(), B.float().t())
    out = out_i32 * (row_stats.view(-1, 1) * col_stats.view(1, -1)) * 6.200124e-05  # 1 / (127 * 127)
    if bias is not None:
        out = out + bias
    return out.to(dtype)


def int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, outlier_cols=None, bias=None):
    subB = None
    subA = None
    if outlier_cols is not None and outlier_cols.numel():
        # Extract the inputs with outliers in original precision
        subA = A[:, outlier_cols].contiguous()
        # Dequantize the corresponding weight columns
        subB = int8_vectorwise_dequant(CB[:, outlier_cols].contiguous(), SCB).to(A.dtype).t()
    output = int8_scaled_mm(CA, CB, SCA, SCB, bias=bias, dtype=A.dtype)
    if subB is not None:
        # Add the outlier columns back to the output
        output = output.addmm(subA, subB)
    return output, subA


class MatMul8bitLt(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, state=None):
        input_shape = A.shape
        if len(A.shape) == 3:
            A = A.reshape(-1, A.shape[-1])
        # 1. Quantize A. Note that as a side-effect, outliers are suppressed in CA.
        CA, SCA, outlier_cols = int8_vectorwise_quant(A, threshold=state.threshold)
        if state.threshold > 0.0:
            state.idx = outlier_cols
        # 2. Mixed Int8 Matmul + Dequant + Bias
        output, subA = int8_mixed_scaled_mm(A, CA, state.CB, SCA, state.SCB, outlier_cols, bias)
        ctx.state = state
        ctx.grad_shape = input_shape
        ctx.dtype_A = A.dtype
        return output.reshape(*input_shape[:-1], -1)

    @staticmethod
    def backward(ctx, grad_output):
        state = ctx.state
        CB = state.CB.to(ctx.dtype_A, copy=True).mul_(state.SCB.unsqueeze(1).mul(1.0 / 127.0))
        grad_A = torch.matmul(grad_output.to(ctx.dtype_A), CB).view(ctx.grad_shape)
        return grad_A, None, None, None, None


class Linear8bitLt(nn.Linear):
    """An inference-quantized linear layer (``has_fp16_weights=False``): int8 weights with per-row scales."""

    def __init__(self, input_features, output_features, bias=True, threshold=6.0):
        super().__init__(input_features, output_features, bias)
        self.state = MatmulLtState()
        self.state.threshold = threshold
        self.state.has_fp16_weights = False
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)

    def quantize_(self):
        CB, SCB, _ = int8_vectorwise_quant(self.weight.data.clone())
        self.state.CB, self.state.SCB = CB, SCB

    def forward(self, x):
        self.state.is_training = self.training
        return MatMul8bitLt.apply(x, self.weight, None, self.bias, self.state)


class LoraLinear8bitLt(nn.Module):
    """peft's ``lora.Linear8bitLt``: the frozen int8 base plus the scaled ``lora_B(lora_A(dropout(x)))``."""

    def __init__(self, base_layer, r=4, lora_alpha=8):
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.Linear(base_layer.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base_layer.out_features, bias=False)
        nn.init.normal_(self.lora_B.weight, std=0.02)  # trained for a few steps already
        self.lora_dropout = nn.Identity()
        self.scaling = lora_alpha / r

    def forward(self, x):
        result = self.base_layer(x)
        requires_conversion = not torch.is_autocast_enabled()
        if requires_conversion:
            expected_dtype = result.dtype
            x = x.to(self.lora_A.weight.dtype)
        output = self.lora_B(self.lora_A(self.lora_dropout(x)))
        if requires_conversion:
            output = output.to(expected_dtype)
        return result + output * self.scaling


class Int8LoraMLP(nn.Module):
    def __init__(self, dim=12, hidden=24, n_classes=5):
        super().__init__()
        self.fc1 = LoraLinear8bitLt(Linear8bitLt(dim, hidden))
        self.fc2 = LoraLinear8bitLt(Linear8bitLt(hidden, dim))
        self.head = nn.Linear(dim, n_classes)
        self.fc1.base_layer.quantize_()
        self.fc2.base_layer.quantize_()

    def forward(self, x, labels):
        h = F.gelu(self.fc1(x))
        h = x + self.fc2(h)
        logits = self.head(h)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1)), logits


def build_llm_int8_lora():
    seeded(1315)
    model = Int8LoraMLP()
    x = torch.randn(2, 5, 12)
    x[:, :, 3] *= 9.0  # an outlier feature dimension, as LLM.int8 observes in large models
    return model, (x, torch.randint(0, 5, (2, 5)))


# ------------------------------------------------------------------ mit-han-lab/streaming-llm


class LlamaRotaryEmbedding(nn.Module):
    """transformers' (4.3x) rotary embedding whose cos / sin cache is regrown when a longer sequence comes."""

    def __init__(self, dim, max_position_embeddings=8, base=10000, device=None):
        super().__init__()
        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.base = base
        inv_freq = 1.0 / (self.base ** (torch.arange(0, self.dim, 2).float().to(device) / self.dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(seq_len=max_position_embeddings, device=self.inv_freq.device, dtype=torch.get_default_dtype())

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        self.max_seq_len_cached = seq_len
        t = torch.arange(self.max_seq_len_cached, device=device, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos()[None, None, :, :].to(dtype), persistent=False)
        self.register_buffer("sin_cached", emb.sin()[None, None, :, :].to(dtype), persistent=False)

    def forward(self, x, seq_len=None):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len=seq_len, device=x.device, dtype=x.dtype)
        return (self.cos_cached[:, :, :seq_len, ...].to(dtype=x.dtype), self.sin_cached[:, :, :seq_len, ...].to(dtype=x.dtype))


def apply_rotary_pos_emb_single(x, cos, sin, position_ids):
    # The first two dimensions of cos and sin are always 1, so we can `squeeze` them.
    cos = cos.squeeze(1).squeeze(0)  # [seq_len, dim]
    sin = sin.squeeze(1).squeeze(0)  # [seq_len, dim]
    cos = cos[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]
    sin = sin[position_ids].unsqueeze(1)  # [bs, 1, seq_len, dim]
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos) + (rotated * sin)


class LlamaPosShiftAttention(nn.Module):
    """``llama_pos_shift_attention_forward``: queries at their position in the cache, keys re-rotated by cache slot."""

    def __init__(self, hidden_size=16, num_heads=2):
        super().__init__()
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self.head_dim = hidden_size // num_heads
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.rotary_emb = LlamaRotaryEmbedding(self.head_dim)

    def forward(self, hidden_states, attention_mask=None, position_ids=None, past_key_value=None, use_cache=False):
        bsz, q_len, _ = hidden_states.size()
        query_states = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        key_states = self.k_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        value_states = self.v_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)

        kv_seq_len = key_states.shape[-2]
        if past_key_value is not None:
            kv_seq_len += past_key_value[0].shape[-2]
        cos, sin = self.rotary_emb(value_states, seq_len=kv_seq_len)
        ### Shift Pos: query pos is min(cache_size, idx)
        query_states = apply_rotary_pos_emb_single(query_states, cos, sin, position_ids)

        if past_key_value is not None:
            # reuse k, v, self_attention
            key_states = torch.cat([past_key_value[0], key_states], dim=2)
            value_states = torch.cat([past_key_value[1], value_states], dim=2)
        past_key_value = (key_states, value_states) if use_cache else None

        ### Shift Pos: key pos is the pos in cache
        key_position_ids = torch.arange(kv_seq_len, device=position_ids.device).unsqueeze(0)
        key_states = apply_rotary_pos_emb_single(key_states, cos, sin, key_position_ids)

        attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(self.head_dim)
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).reshape(bsz, q_len, self.hidden_size)
        return self.o_proj(attn_output), past_key_value


@dataclass
class CausalLMOutputWithPast:
    logits: torch.Tensor
    past_key_values: list | None = None


@dataclass
class BatchEncoding:
    input_ids: torch.Tensor


class LlamaForCausalLM(nn.Module):
    def __init__(self, vocab_size=32, hidden_size=16, num_layers=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            layer = nn.Module()
            layer.input_layernorm = nn.LayerNorm(hidden_size)
            layer.self_attn = LlamaPosShiftAttention(hidden_size)
            layer.post_attention_layernorm = nn.LayerNorm(hidden_size)
            layer.mlp = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.SiLU(), nn.Linear(2 * hidden_size, hidden_size))
            self.layers.append(layer)
        self.norm = nn.LayerNorm(hidden_size)
        self.lm_head = nn.Linear(hidden_size, vocab_size, bias=False)

    @property
    def device(self):
        return self.lm_head.weight.device

    def forward(self, input_ids, past_key_values=None, use_cache=True):
        batch_size, seq_length = input_ids.shape
        past_key_values_length = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        position_ids = torch.arange(past_key_values_length, seq_length + past_key_values_length, dtype=torch.long).unsqueeze(0)
        attention_mask = None
        if seq_length > 1:
            causal = torch.full((seq_length, seq_length), torch.finfo(torch.float32).min).triu(1)
            attention_mask = torch.cat([torch.zeros(seq_length, past_key_values_length), causal], dim=-1)[None, None]
        hidden_states = self.embed_tokens(input_ids)
        next_cache = []
        for idx, layer in enumerate(self.layers):
            past_key_value = past_key_values[idx] if past_key_values is not None else None
            attn_out, present = layer.self_attn(layer.input_layernorm(hidden_states), attention_mask, position_ids, past_key_value, use_cache)
            hidden_states = hidden_states + attn_out
            hidden_states = hidden_states + layer.mlp(layer.post_attention_layernorm(hidden_states))
            next_cache.append(present)
        logits = self.lm_head(self.norm(hidden_states))
        return CausalLMOutputWithPast(logits=logits, past_key_values=next_cache)


def slice2d(x, start, end):
    return x[:, :, start:end, ...]


class StartRecentKVCache:
    """Attention sinks: the first ``start_size`` cache entries and the ``recent_size`` latest ones are kept."""

    def __init__(self, start_size=4, recent_size=512, k_seq_dim=2, v_seq_dim=2):
        print(f"StartRecentKVCache: {start_size}, {recent_size}")
        self.start_size = start_size
        self.recent_size = recent_size
        self.cache_size = start_size + recent_size
        self.k_seq_dim = k_seq_dim
        self.v_seq_dim = v_seq_dim
        self.k_slice = slice2d
        self.v_slice = slice2d

    def evict_for_space(self, past_key_values, num_coming):
        if past_key_values is None:
            return None
        seq_len = past_key_values[0][0].size(self.k_seq_dim)
        if seq_len + num_coming <= self.cache_size:
            return past_key_values
        return [  # BREAK: the first call (no cache yet) holds no tensor, so Dynamo skips evict_for_space's code and runs this comprehension as its own frame over a list iterator it cannot step; build the list in an explicit loop
            [
                torch.cat([self.k_slice(k, 0, self.start_size), self.k_slice(k, seq_len - self.recent_size + num_coming, seq_len)], dim=self.k_seq_dim),
                torch.cat([self.v_slice(v, 0, self.start_size), self.v_slice(v, seq_len - self.recent_size + num_coming, seq_len)], dim=self.v_seq_dim),
            ]
            for k, v in past_key_values
        ]


class CharTokenizer:
    eos_token_id = 1

    def __init__(self, alphabet=" abcdefghijklmnopqrstuvwxyz:.\n"):
        self.stoi = {c: i + 2 for i, c in enumerate(alphabet)}
        self.itos = {i: c for c, i in self.stoi.items()}

    def __call__(self, text, return_tensors="pt"):
        return BatchEncoding(input_ids=torch.tensor([[self.stoi[c] for c in text.lower() if c in self.stoi]]))

    def decode(self, ids, skip_special_tokens=True, **kwargs):
        return "".join(self.itos.get(i, "") for i in ids)


@torch.no_grad()
def greedy_generate(model, tokenizer, input_ids, past_key_values, max_gen_len):
    outputs = model(input_ids=input_ids, past_key_values=past_key_values, use_cache=True)
    past_key_values = outputs.past_key_values
    pred_token_idx = outputs.logits[:, -1, :].argmax(dim=-1).unsqueeze(1)
    generated_ids = [pred_token_idx.item()]  # BREAK must-not: the ids go to the tokenizer's decode on the host as the answer streams
    pos = 0
    for _ in range(max_gen_len - 1):
        outputs = model(input_ids=pred_token_idx, past_key_values=past_key_values, use_cache=True)
        past_key_values = outputs.past_key_values
        pred_token_idx = outputs.logits[:, -1, :].argmax(dim=-1).unsqueeze(1)
        generated_ids.append(pred_token_idx.item())  # BREAK must-not: each new id is decoded and the finished words printed before the next step
        generated_text = (tokenizer.decode(generated_ids, skip_special_tokens=True, clean_up_tokenization_spaces=True,
                                           spaces_between_special_tokens=False).strip().split(" "))
        now = len(generated_text) - 1
        if now > pos:
            print(" ".join(generated_text[pos:now]), end=" ", flush=True)
            pos = now
        if pred_token_idx == tokenizer.eos_token_id:
            break
    print(" ".join(generated_text[pos:]), flush=True)
    return past_key_values, generated_ids


@torch.no_grad()
def streaming_inference(model, tokenizer, prompts, kv_cache=None, max_gen_len=1000):
    past_key_values = None
    generations = []
    for prompt in prompts:
        prompt = "USER: " + prompt + "\n\nASSISTANT: "
        print("\n" + prompt, end="")  # BREAK must-not: the prompt is printed before its answer streams; output that must happen then
        input_ids = tokenizer(prompt, return_tensors="pt").input_ids
        input_ids = input_ids.to(model.device)
        seq_len = input_ids.shape[1]
        if kv_cache is not None:
            space_needed = seq_len + max_gen_len
            past_key_values = kv_cache.evict_for_space(past_key_values, space_needed)

        past_key_values, generated_ids = greedy_generate(model, tokenizer, input_ids, past_key_values, max_gen_len=max_gen_len)
        generations.append(generated_ids)
    return generations, [k.shape[2] for k, _ in past_key_values]


def build_streaming_llm():
    seeded(1323)
    model = LlamaForCausalLM()
    kv_cache = StartRecentKVCache(start_size=2, recent_size=30)
    prompts = ["hi there", "what is a sink"]
    return streaming_inference, (model, CharTokenizer(), prompts, kv_cache, 6)
