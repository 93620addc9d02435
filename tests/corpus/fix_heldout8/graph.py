"""Graph learning: GraphSAGE (mean aggregation) evaluated for a few seed nodes on their k-hop subgraph, the way
PyG's ``k_hop_subgraph`` extracts it (node masks grown hop by hop, ``unique`` over the visited nodes,
relabelled edges)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import maybe_num_nodes, scatter, seeded


def k_hop_subgraph(
    node_idx,
    num_hops,
    edge_index,
    relabel_nodes=False,
    num_nodes=None,
    flow="source_to_target",
    directed=False,
):
    r"""Computes the induced subgraph of :obj:`edge_index` around all nodes in :attr:`node_idx` reachable
    within :math:`k` hops."""
    num_nodes = maybe_num_nodes(edge_index, num_nodes)

    assert flow in ["source_to_target", "target_to_source"]
    if flow == "target_to_source":
        row, col = edge_index
    else:
        col, row = edge_index

    node_mask = row.new_empty(num_nodes, dtype=torch.bool)
    edge_mask = row.new_empty(row.size(0), dtype=torch.bool)

    if isinstance(node_idx, int | list | tuple):
        node_idx = torch.tensor([node_idx], device=row.device).flatten()
    else:
        node_idx = node_idx.to(row.device)

    subsets = [node_idx]

    for _ in range(num_hops):
        node_mask.fill_(False)
        node_mask[subsets[-1]] = True
        torch.index_select(node_mask, 0, row, out=edge_mask)
        subsets.append(col[edge_mask])  # BREAK: run the layers on the full graph, index the seeds

    subset, inv = torch.cat(subsets).unique(return_inverse=True)
    inv = inv[: node_idx.numel()]

    node_mask.fill_(False)
    node_mask[subset] = True

    if not directed:
        edge_mask = node_mask[row] & node_mask[col]

    edge_index = edge_index[:, edge_mask]

    if relabel_nodes:
        mapping = row.new_full((num_nodes,), -1)
        mapping[subset] = torch.arange(subset.size(0), device=row.device)
        edge_index = mapping[edge_index]

    return subset, edge_index, inv, edge_mask


class SAGEConv(nn.Module):
    """x_i' = W_1 x_i + W_2 mean_{j in N(i)} x_j"""

    def __init__(self, in_channels: int, out_channels: int, normalize: bool = False) -> None:
        super().__init__()
        self.lin_l = nn.Linear(in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)
        self.normalize = normalize

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        aggr = scatter(x[src], dst, dim=0, dim_size=x.size(0), reduce="mean")
        out = self.lin_l(aggr) + self.lin_r(x)
        if self.normalize:
            out = F.normalize(out, p=2.0, dim=-1)
        return out


class GraphSAGE(nn.Module):
    def __init__(
        self, in_channels: int = 8, hidden: int = 16, out_channels: int = 4, num_layers: int = 2
    ) -> None:
        super().__init__()
        self.convs = nn.ModuleList()
        for i in range(num_layers):
            self.convs.append(
                SAGEConv(in_channels if i == 0 else hidden, hidden if i < num_layers - 1 else out_channels)
            )

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, seeds: torch.Tensor) -> torch.Tensor:
        subset, sub_edge_index, mapping, _ = k_hop_subgraph(
            seeds, len(self.convs), edge_index, relabel_nodes=True
        )
        h = x[subset]
        for i, conv in enumerate(self.convs):
            h = conv(h, sub_edge_index)
            if i < len(self.convs) - 1:
                h = F.relu(h)
        return F.log_softmax(h[mapping], dim=-1)


def build_khop_sage():
    torch.manual_seed(940)
    model = GraphSAGE()
    g = seeded(941)
    num_nodes = 30
    src = torch.randint(0, num_nodes, (45,), generator=g)
    dst = torch.randint(0, num_nodes, (45,), generator=g)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    edge_index = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])  # undirected
    x = torch.randn(num_nodes, 8, generator=g)
    seeds = torch.tensor([3, 17, 25])
    return model, (x, edge_index, seeds)
