"""Graph and tree models: a GCN layer with symmetric degree normalisation (PyG's recipe by hand),
a GraphSAGE layer over Python neighbour lists, a child-sum tree RNN over a parent array."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import build_adjacency


class GCNConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_channels))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        num_nodes = x.size(0)
        # remove_self_loops + add_self_loops, so every node has exactly one
        row, col = edge_index
        edge_index = edge_index[:, row != col]  # BREAK: weighting the self-loop edges by 0 instead of dropping them leaves every sum and degree unchanged
        loop_index = torch.arange(num_nodes)
        edge_index = torch.cat([edge_index, torch.stack([loop_index, loop_index])], dim=1)

        row, col = edge_index
        deg = torch.bincount(col, minlength=num_nodes).to(x.dtype)  # BREAK: index_add_ of ones into num_nodes zeros counts the same degrees at a static size
        deg_inv_sqrt = deg.pow(-0.5)
        deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
        norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]

        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, h[row] * norm[:, None])
        return out + self.bias


class GCN(nn.Module):
    def __init__(self, in_channels: int = 6, hidden: int = 16, num_classes: int = 3) -> None:
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = GCNConv(hidden, num_classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv1(x, edge_index))
        return F.log_softmax(self.conv2(h, edge_index), dim=-1)


def _ring_graph(num_nodes: int, extra: list[tuple[int, int]]) -> torch.Tensor:
    src = list(range(num_nodes)) + [(i + 1) % num_nodes for i in range(num_nodes)]
    dst = [(i + 1) % num_nodes for i in range(num_nodes)] + list(range(num_nodes))
    for s, d in extra:
        src.append(s)
        dst.append(d)
    return torch.tensor([src, dst])


def build_gcn_layer():
    torch.manual_seed(7)
    model = GCN()
    edge_index = _ring_graph(7, [(0, 3), (3, 0), (2, 2), (5, 5), (1, 4)])  # two self loops already present
    return model, (torch.randn(7, 6), edge_index)


class SAGEConv(nn.Module):
    """Mean aggregation over in-neighbours, written the textbook way."""

    def __init__(self, in_channels: int = 6, out_channels: int = 12) -> None:
        super().__init__()
        self.lin_self = nn.Linear(in_channels, out_channels)
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor):
        num_nodes = x.size(0)
        in_degree = torch.zeros(num_nodes, dtype=torch.long).index_add_(0, edge_index[1], torch.ones_like(edge_index[1]))
        neighbors = build_adjacency(edge_index, num_nodes)
        aggregated = []
        for i in range(num_nodes):
            nbrs = neighbors[i]
            aggregated.append(x[nbrs].mean(dim=0) if nbrs else x.new_zeros(x.size(1)))
        h = self.lin_self(x) + self.lin_neigh(torch.stack(aggregated))
        isolated = torch.nonzero(in_degree == 0).flatten()  # BREAK must-not: returned, and its length is the number of nodes without in-edges
        return F.normalize(h, dim=-1), isolated


def build_graphsage_neighbors():
    torch.manual_seed(8)
    model = SAGEConv()
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 4, 0, 5], [1, 2, 0, 3, 1, 1, 4, 4]])  # node 5 has no in-edges
    return model, (torch.randn(6, 6), edge_index)


class ChildSumTreeRNN(nn.Module):
    """h_j = tanh(W x_j + U sum_{k in children(j)} h_k), classified at the root (Tai et al. 2015, simplified)."""

    def __init__(self, in_dim: int = 8, hidden: int = 16, num_classes: int = 3) -> None:
        super().__init__()
        self.hidden = hidden
        self.W = nn.Linear(in_dim, hidden)
        self.U = nn.Linear(hidden, hidden, bias=False)
        self.classifier = nn.Linear(hidden, num_classes)

    def encode(self, node: int, x: torch.Tensor, children: list[list[int]]) -> torch.Tensor:
        states = [self.encode(c, x, children) for c in children[node]]
        child_sum = torch.stack(states).sum(dim=0) if states else x.new_zeros(self.hidden)
        return torch.tanh(self.W(x[node]) + self.U(child_sum))

    def forward(self, x: torch.Tensor, parents: torch.Tensor) -> torch.Tensor:
        children: list[list[int]] = [[] for _ in range(x.size(0))]
        root = 0
        for node, parent in enumerate(parents.tolist()):  # BREAK: the tree as a dense child matrix and num_nodes sweeps of h = tanh(Wx + U(A h)) reach the same root state
            if parent < 0:
                root = node
            else:
                children[parent].append(node)
        return self.classifier(self.encode(root, x, children))


def build_tree_rnn():
    torch.manual_seed(9)
    model = ChildSumTreeRNN()
    parents = torch.tensor([2, 2, -1, 2, 3, 3, 5])  # root 2; depth 3
    return model, (torch.randn(7, 8), parents)
