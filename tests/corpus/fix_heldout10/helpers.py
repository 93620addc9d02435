"""Utilities the programs of this set share, the way a project's ``utils.py`` / ``commons.py`` does: a
seeded-generator factory for the builders, a tiny decoder-only LM the preference-tuning and decoding
programs wrap, PyG-style ``scatter`` and dense batching, box IoU helpers (plain and CIoU, as in
ultralytics' ``metrics.py``), VITS' ``commons`` slicing helpers and EDM's masked-centering utilities."""

from __future__ import annotations

import math

import torch
from torch import nn


def seeded(seed: int) -> torch.Generator:
    """A CPU generator for building a program's inputs reproducibly."""
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- a small causal LM


class DecoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.GELU(), nn.Linear(2 * hidden, hidden))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(c // self.heads)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        attn = scores.softmax(-1) @ v
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class TinyCausalLM(nn.Module):
    """GPT-2-shaped: token + position embeddings, pre-LN blocks, a tied-free LM head."""

    def __init__(self, vocab_size: int = 48, hidden: int = 32, heads: int = 4, layers: int = 2, max_pos: int = 64):
        super().__init__()
        self.vocab_size = vocab_size
        self.wte = nn.Embedding(vocab_size, hidden)
        self.wpe = nn.Embedding(max_pos, hidden)
        self.h = nn.ModuleList(DecoderLayer(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab_size, bias=False)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t = input_ids.shape
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        x = self.wte(input_ids) + self.wpe(position_ids)
        causal = torch.ones(t, t, dtype=torch.bool, device=input_ids.device).tril()
        mask = causal[None, None] & attention_mask[:, None, None, :].bool()
        for layer in self.h:
            x = layer(x, mask)
        return self.ln_f(x)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.lm_head(self.hidden_states(input_ids, attention_mask))


def selective_log_softmax(logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """log_softmax(logits).gather(-1, index) without materialising the full log-probs (TRL's helper)."""
    selected_logits = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    # loop to reduce peak mem consumption
    logsumexp_values = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
    return selected_logits - logsumexp_values


# --------------------------------------------------------------------------- graph utilities (PyG style)


def scatter_sum(src: torch.Tensor, index: torch.Tensor, dim_size: int | None = None) -> torch.Tensor:
    """Sum the rows of ``src`` into ``dim_size`` buckets given by ``index`` (dim 0)."""
    if dim_size is None:
        dim_size = int(index.max()) + 1  # BREAK: the caller passes dim_size (the receiver count)
    out = src.new_zeros((dim_size, *src.shape[1:]))
    return out.index_add_(0, index, src)


def cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x.new_zeros(1), x.cumsum(0)])


def to_dense_batch(x: torch.Tensor, batch: torch.Tensor, fill_value: float = 0.0,
                   max_num_nodes: int | None = None, batch_size: int | None = None):
    """Given a sparse batch of node features [N, F], a dense [B, N_max, F] batch and its node mask."""
    if batch_size is None:
        batch_size = int(batch.max()) + 1  # BREAK: the caller passes batch_size=num_graphs
    num_nodes = batch.new_zeros(batch_size).index_add_(0, batch, batch.new_ones(x.size(0)))
    cum_nodes = cumsum(num_nodes)
    if max_num_nodes is None:
        max_num_nodes = int(num_nodes.max())  # BREAK: pad to the dataset's node cap, losses normalised by the real one
    idx = torch.arange(batch.size(0), dtype=torch.long, device=x.device)
    idx = (idx - cum_nodes[batch]) + (batch * max_num_nodes)
    size = [batch_size * max_num_nodes] + list(x.size())[1:]
    out = x.new_full(size, fill_value)
    out[idx] = x
    out = out.view([batch_size, max_num_nodes] + list(x.size())[1:])
    mask = torch.zeros(batch_size * max_num_nodes, dtype=torch.bool, device=x.device)
    mask[idx] = 1
    mask = mask.view(batch_size, max_num_nodes)
    return out, mask


def to_dense_adj(edge_index: torch.Tensor, batch: torch.Tensor, max_num_nodes: int | None = None,
                 batch_size: int | None = None) -> torch.Tensor:
    """The dense [B, N_max, N_max] adjacency of a batch of graphs given by ``edge_index`` and ``batch``."""
    if batch_size is None:
        batch_size = int(batch.max().item()) + 1 if batch.numel() > 0 else 1  # BREAK: the caller passes batch_size
    one = batch.new_ones(batch.size(0))
    num_nodes = batch.new_zeros(batch_size).index_add_(0, batch, one)
    cum_nodes = cumsum(num_nodes)
    idx0 = batch[edge_index[0]]
    idx1 = edge_index[0] - cum_nodes[batch][edge_index[0]]
    idx2 = edge_index[1] - cum_nodes[batch][edge_index[1]]
    if max_num_nodes is None:
        max_num_nodes = int(num_nodes.max())  # BREAK: pad to the dataset's node cap
    edge_attr = torch.ones(idx0.numel(), device=edge_index.device)
    flattened_size = batch_size * max_num_nodes * max_num_nodes
    idx = idx0 * max_num_nodes * max_num_nodes + idx1 * max_num_nodes + idx2
    adj = scatter_sum(edge_attr, idx, dim_size=flattened_size)
    return adj.view(batch_size, max_num_nodes, max_num_nodes)


# --------------------------------------------------------------------------- boxes


def box_iou(boxes1: torch.Tensor, boxes2: torch.Tensor) -> torch.Tensor:
    """Pairwise IoU of two sets of xyxy boxes, [N, M]."""
    area1 = (boxes1[:, 2] - boxes1[:, 0]) * (boxes1[:, 3] - boxes1[:, 1])
    area2 = (boxes2[:, 2] - boxes2[:, 0]) * (boxes2[:, 3] - boxes2[:, 1])
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    inter = wh[..., 0] * wh[..., 1]
    return inter / (area1[:, None] + area2[None, :] - inter + 1e-7)


def bbox_iou(box1: torch.Tensor, box2: torch.Tensor, CIoU: bool = False, eps: float = 1e-7) -> torch.Tensor:
    """Element-wise IoU (or Complete-IoU) of xyxy boxes broadcast along the leading dims, [..., 1]."""
    (b1_x1, b1_y1, b1_x2, b1_y2), (b2_x1, b2_y1, b2_x2, b2_y2) = box1.chunk(4, -1), box2.chunk(4, -1)
    w1, h1 = b1_x2 - b1_x1, b1_y2 - b1_y1 + eps
    w2, h2 = b2_x2 - b2_x1, b2_y2 - b2_y1 + eps
    inter = (b1_x2.minimum(b2_x2) - b1_x1.maximum(b2_x1)).clamp_(0) * (
        b1_y2.minimum(b2_y2) - b1_y1.maximum(b2_y1)
    ).clamp_(0)
    union = w1 * h1 + w2 * h2 - inter + eps
    iou = inter / union
    if CIoU:
        cw = b1_x2.maximum(b2_x2) - b1_x1.minimum(b2_x1)  # convex (smallest enclosing box) width
        ch = b1_y2.maximum(b2_y2) - b1_y1.minimum(b2_y1)  # convex height
        c2 = cw.pow(2) + ch.pow(2) + eps  # convex diagonal squared
        rho2 = ((b2_x1 + b2_x2 - b1_x1 - b1_x2).pow(2) + (b2_y1 + b2_y2 - b1_y1 - b1_y2).pow(2)) / 4
        v = (4 / math.pi**2) * ((w2 / h2).atan() - (w1 / h1).atan()).pow(2)
        with torch.no_grad():
            alpha = v / (v - iou + (1 + eps))
        return iou - (rho2 / c2 + v * alpha)
    return iou


# --------------------------------------------------------------------------- VITS commons


def sequence_mask(length: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
    if max_length is None:
        max_length = length.max()
    x = torch.arange(max_length, dtype=length.dtype, device=length.device)
    return x.unsqueeze(0) < length.unsqueeze(1)


def slice_segments(x: torch.Tensor, ids_str: torch.Tensor, segment_size: int = 4) -> torch.Tensor:
    ret = torch.zeros_like(x[:, :, :segment_size])
    for i in range(x.size(0)):
        idx_str = ids_str[i]
        idx_end = idx_str + segment_size
        ret[i] = x[i, :, idx_str:idx_end]  # BREAK: gather the window with ids_str[:, None] + arange(segment_size)
    return ret


def rand_slice_segments(x: torch.Tensor, x_lengths: torch.Tensor, segment_size: int = 4):
    b, d, t = x.size()
    ids_str_max = x_lengths - segment_size + 1
    ids_str = (torch.rand([b]).to(device=x.device) * ids_str_max).to(dtype=torch.long)
    ret = slice_segments(x, ids_str, segment_size)
    return ret, ids_str


# --------------------------------------------------------------------------- EDM (equivariant diffusion) utils


def remove_mean_with_mask(x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    masked_max_abs_value = (x * (1 - node_mask)).abs().sum().item()  # BREAK: assert on the tensor, no .item()
    assert masked_max_abs_value < 1e-5, f"Error {masked_max_abs_value} too high"
    N = node_mask.sum(1, keepdims=True)
    mean = torch.sum(x, dim=1, keepdim=True) / N
    x = x - mean * node_mask
    return x


def assert_correctly_masked(variable: torch.Tensor, node_mask: torch.Tensor) -> None:
    assert (variable * (1 - node_mask)).abs().max().item() < 1e-4, "Variables not masked properly."  # BREAK: assert on the tensor comparison


def sample_center_gravity_zero_gaussian_with_mask(size, device, node_mask: torch.Tensor) -> torch.Tensor:
    assert len(size) == 3
    x = torch.randn(size, device=device)
    x_masked = x * node_mask
    # This projection only works because Gaussian is rotation invariant around zero and samples are independent!
    return remove_mean_with_mask(x_masked, node_mask)


def sample_gaussian_with_mask(size, device, node_mask: torch.Tensor) -> torch.Tensor:
    x = torch.randn(size, device=device)
    return x * node_mask
