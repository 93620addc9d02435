"""Graph learning: pyg-team/pytorch_geometric's ``GPSConv`` graph transformer for graph classification (the
``examples/graph_gps.py`` shape): a local ``GCNConv`` message pass and global multi-head attention over
``to_dense_batch`` (the batch size and the widest graph read with ``int()``, the dense rows gathered back with
``h[mask]``), then ``global_mean_pool`` over the batch vector (the number of graphs from ``int(batch.max()) + 1``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


@dataclass
class Batch:
    """``torch_geometric.data.Batch``: the nodes of several graphs stacked, ``batch`` naming each node's graph."""

    x: torch.Tensor
    edge_index: torch.Tensor
    batch: torch.Tensor
    num_graphs: int


def scatter(src, index, dim=0, dim_size=None, reduce="sum"):
    """torch_geometric.utils.scatter (sum / mean over dim 0)."""
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    size = list(src.size())
    size[dim] = dim_size
    index = index.view(-1, *([1] * (src.dim() - 1))).expand_as(src)
    out = src.new_zeros(size).scatter_add_(dim, index, src)
    if reduce == "mean":
        count = src.new_zeros(dim_size).scatter_add_(0, index[:, 0] if src.dim() > 1 else index, src.new_ones(src.size(0)))
        out = out / count.clamp(min=1).view(-1, *([1] * (src.dim() - 1)))
    return out


def cumsum(x, dim=0):
    """Returns the cumulative sum of elements of x, with a leading zero."""
    size = x.size()[:dim] + (x.size(dim) + 1,) + x.size()[dim + 1 :]
    out = x.new_empty(size)
    out.narrow(dim, 0, 1).zero_()
    torch.cumsum(x, dim=dim, out=out.narrow(dim, 1, x.size(dim)))
    return out


def to_dense_batch(x, batch=None, fill_value=0.0, max_num_nodes=None, batch_size=None):
    """Given a sparse batch of node features, creates a dense node feature tensor (B x N_max x F) and a mask of the
    nodes that exist."""
    if batch is None and max_num_nodes is None:
        mask = torch.ones(1, x.size(0), dtype=torch.bool, device=x.device)
        return x.unsqueeze(0), mask

    if batch is None:
        batch = x.new_zeros(x.size(0), dtype=torch.long)

    if batch_size is None:
        batch_size = int(batch.max()) + 1  # BREAK: the batch knows its graph count: pass batch_size=data.num_graphs

    num_nodes = scatter(batch.new_ones(x.size(0)), batch, dim=0, dim_size=batch_size, reduce="sum")
    cum_nodes = cumsum(num_nodes)

    if max_num_nodes is None:
        max_num_nodes = int(num_nodes.max())  # BREAK: pad every graph to the node count of the whole batch: the attention masks the padding keys and the padded rows are never read back

    idx = torch.arange(batch.size(0), dtype=torch.long, device=x.device)
    idx = (idx - cum_nodes[batch]) + (batch * max_num_nodes)

    size = [batch_size * max_num_nodes] + list(x.size())[1:]
    out = torch.as_tensor(fill_value, device=x.device)
    out = out.to(x.dtype).repeat(size)
    out[idx] = x
    out = out.view([batch_size, max_num_nodes] + list(x.size())[1:])

    mask = torch.zeros(batch_size * max_num_nodes, dtype=torch.bool, device=x.device)
    mask[idx] = 1
    mask = mask.view(batch_size, max_num_nodes)

    return out, mask


def global_mean_pool(x, batch, size=None):
    """Returns batch-wise graph-level-outputs by averaging node features across the node dimension."""
    dim = -1 if isinstance(x, torch.Tensor) and x.dim() == 1 else -2
    if batch is None:
        return x.mean(dim=dim, keepdim=x.dim() <= 2)
    if size is None:
        size = int(batch.max().item() + 1)  # BREAK: the caller has the graph count: pass size=data.num_graphs
    return scatter(x, batch, dim=0, dim_size=size, reduce="mean")


class GCNConv(nn.Module):
    """``GCNConv`` with self loops and symmetric normalization (``gcn_norm``), messages summed by ``scatter``."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        num_nodes = x.size(0)
        loop = torch.arange(num_nodes, device=x.device)
        row = torch.cat([edge_index[0], loop])
        col = torch.cat([edge_index[1], loop])
        deg = scatter(torch.ones_like(col, dtype=x.dtype), col, dim=0, dim_size=num_nodes)
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt.masked_fill_(deg_inv_sqrt == float("inf"), 0)
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
        x = self.lin(x)
        out = scatter(norm.view(-1, 1) * x[row], col, dim=0, dim_size=num_nodes)
        return out + self.bias


class GPSConv(nn.Module):
    """The general, powerful, scalable graph transformer layer: local MPNN + global attention, then an MLP."""

    def __init__(self, channels, conv, heads=2, dropout=0.0):
        super().__init__()
        self.channels = channels
        self.conv = conv
        self.heads = heads
        self.dropout = dropout
        self.attn = nn.MultiheadAttention(channels, heads, dropout=0.0, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(channels, channels * 2), nn.ReLU(), nn.Linear(channels * 2, channels))
        self.norm1 = nn.BatchNorm1d(channels)
        self.norm2 = nn.BatchNorm1d(channels)
        self.norm3 = nn.BatchNorm1d(channels)

    def forward(self, x, edge_index, batch=None):
        hs = []
        if self.conv is not None:  # Local MPNN.
            h = self.conv(x, edge_index)
            h = F.dropout(h, p=self.dropout, training=self.training)
            h = h + x
            h = self.norm1(h)
            hs.append(h)

        # Global attention transformer-style model.
        h, mask = to_dense_batch(x, batch)
        h, _ = self.attn(h, h, h, key_padding_mask=~mask, need_weights=False)
        h = h[mask]  # BREAK: the mask's True cells in row-major order are the nodes in order: index the flattened rows by a stable argsort of ~mask cut at x.size(0)
        h = F.dropout(h, p=self.dropout, training=self.training)
        h = h + x  # Residual connection.
        h = self.norm2(h)
        hs.append(h)

        out = sum(hs)  # Combine local and global outputs.
        out = out + self.mlp(out)
        out = self.norm3(out)
        return out


class GPS(nn.Module):
    def __init__(self, in_channels=5, channels=16, num_layers=2, num_classes=3):
        super().__init__()
        self.node_emb = nn.Linear(in_channels, channels)
        self.convs = nn.ModuleList([GPSConv(channels, GCNConv(channels, channels), heads=2) for _ in range(num_layers)])
        self.mlp = nn.Sequential(nn.Linear(channels, channels // 2), nn.ReLU(), nn.Linear(channels // 2, num_classes))

    def forward(self, data, y):
        x = self.node_emb(data.x)
        for conv in self.convs:
            x = conv(x, data.edge_index, data.batch)
        x = global_mean_pool(x, data.batch)
        out = self.mlp(x)
        loss = F.cross_entropy(out, y)
        return loss, out


def ring_graph(n, offset):
    src = torch.arange(n) + offset
    dst = (torch.arange(n) + 1) % n + offset
    return torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)


def build_pyg_gps_graph_clf():
    seeded(1513)
    sizes = [5, 3, 6]
    edge_index = torch.cat([ring_graph(n, sum(sizes[:i])) for i, n in enumerate(sizes)], dim=1)
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    data = Batch(x=torch.randn(sum(sizes), 5), edge_index=edge_index, batch=batch, num_graphs=len(sizes))
    return GPS().train(), (data, torch.tensor([0, 2, 1]))
