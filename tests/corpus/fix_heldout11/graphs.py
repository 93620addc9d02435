"""Graph property prediction: OGB's GIN with a virtual node (ogb/examples/graphproppred/mol, conv.py's
``GNN_node_Virtualnode``) over a PyG-style batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import scatter_sum, seeded


class Batch:
    """The attributes of a ``torch_geometric.data.Batch`` the model reads."""

    def __init__(self, x, edge_index, batch, y):
        self.x, self.edge_index, self.batch, self.y = x, edge_index, batch, y
        self.num_graphs = int(batch.max()) + 1


def global_add_pool(x, batch, size=None):
    return scatter_sum(x, batch, dim=0, dim_size=size)


class GINConv(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(emb_dim, 2 * emb_dim), nn.BatchNorm1d(2 * emb_dim), nn.ReLU(), nn.Linear(2 * emb_dim, emb_dim))
        self.eps = nn.Parameter(torch.Tensor([0]))

    def forward(self, x, edge_index):
        row, col = edge_index
        aggr = scatter_sum(F.relu(x[row]), col, dim=0, dim_size=x.size(0))
        return self.mlp((1 + self.eps) * x + aggr)


class GNNVirtualnode(nn.Module):
    def __init__(self, num_layer=3, emb_dim=16, in_dim=6, num_tasks=2, drop_ratio=0.0, residual=True):
        super().__init__()
        self.num_layer, self.drop_ratio, self.residual = num_layer, drop_ratio, residual
        self.atom_encoder = nn.Linear(in_dim, emb_dim)
        self.virtualnode_embedding = nn.Embedding(1, emb_dim)
        nn.init.constant_(self.virtualnode_embedding.weight.data, 0)
        self.convs = nn.ModuleList([GINConv(emb_dim) for _ in range(num_layer)])
        self.batch_norms = nn.ModuleList([nn.BatchNorm1d(emb_dim) for _ in range(num_layer)])
        self.mlp_virtualnode_list = nn.ModuleList([
            nn.Sequential(nn.Linear(emb_dim, 2 * emb_dim), nn.BatchNorm1d(2 * emb_dim), nn.ReLU(),
                          nn.Linear(2 * emb_dim, emb_dim), nn.BatchNorm1d(emb_dim), nn.ReLU())
            for _ in range(num_layer - 1)
        ])
        self.graph_pred_linear = nn.Linear(emb_dim, num_tasks)

    def forward(self, batched_data):
        x, edge_index, batch = batched_data.x, batched_data.edge_index, batched_data.batch
        virtualnode_embedding = self.virtualnode_embedding(torch.zeros(batch[-1].item() + 1).to(edge_index.dtype).to(edge_index.device))  # BREAK: size it by batched_data.num_graphs
        h_list = [self.atom_encoder(x)]
        for layer in range(self.num_layer):
            h_list[layer] = h_list[layer] + virtualnode_embedding[batch]
            h = self.batch_norms[layer](self.convs[layer](h_list[layer], edge_index))
            if layer == self.num_layer - 1:
                h = F.dropout(h, self.drop_ratio, training=self.training)
            else:
                h = F.dropout(F.relu(h), self.drop_ratio, training=self.training)
            if self.residual:
                h = h + h_list[layer]
            h_list.append(h)
            if layer < self.num_layer - 1:
                virtualnode_embedding_temp = global_add_pool(h_list[layer], batch) + virtualnode_embedding
                virtualnode_embedding = F.dropout(self.mlp_virtualnode_list[layer](virtualnode_embedding_temp),
                                                  self.drop_ratio, training=self.training)
        h_graph = global_add_pool(h_list[-1], batch) / torch.bincount(batch).clamp(min=1)[:, None].float()
        pred = self.graph_pred_linear(h_graph)
        is_labeled = batched_data.y == batched_data.y
        loss = F.binary_cross_entropy_with_logits(pred.float()[is_labeled], batched_data.y.float()[is_labeled])
        return loss, pred


def build_gin_virtualnode():
    seeded(50)
    model = GNNVirtualnode()
    sizes = [4, 6, 5]
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    edges, start = [], 0
    for n in sizes:
        src = torch.arange(start, start + n - 1)
        edges.append(torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])]))
        start += n
    y = torch.randint(0, 2, (3, 2)).float()
    y[1, 0] = float("nan")
    return model, (Batch(torch.randn(15, 6), torch.cat(edges, 1), batch, y),)
