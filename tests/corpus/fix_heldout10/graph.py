"""Graph models: a GraphCast-style encode-process-decode weather step (grid to mesh to grid interaction
networks over normalised inputs, residual prediction in normalised-difference units, a latitude-weighted
MSE that skips the missing values of an ocean-only variable) and DiffPool's hierarchical pooling of a
batch of sparse graphs densified with PyG's ``to_dense_batch`` / ``to_dense_adj``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import scatter_sum, seeded, to_dense_adj, to_dense_batch

# --------------------------------------------------------------------------- GraphCast-style step


def mlp(d_in, d_hidden, d_out):
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.SiLU(), nn.Linear(d_hidden, d_out), nn.LayerNorm(d_out))


class InteractionNetwork(nn.Module):
    """Typed-graph interaction network: edges updated from their endpoints, receivers from the summed edges."""

    def __init__(self, d_sender, d_receiver, d_edge, d_hidden, d_out):
        super().__init__()
        self.edge_mlp = mlp(d_sender + d_receiver + d_edge, d_hidden, d_hidden)
        self.node_mlp = mlp(d_receiver + d_hidden, d_hidden, d_out)

    def forward(self, sender_feats, receiver_feats, edge_feats, senders, receivers):
        e = self.edge_mlp(torch.cat([sender_feats[senders], receiver_feats[receivers], edge_feats], dim=-1))
        agg = scatter_sum(e, receivers)
        return self.node_mlp(torch.cat([receiver_feats, agg], dim=-1)), e


def normalized_latitude_weights(lat):
    """Weights proportional to the area of each latitude band, normalised to mean 1 (graphcast/losses.py)."""
    delta = (lat[1] - lat[0]).abs()
    if torch.isclose(lat.abs(), torch.tensor(90.0)).any():  # BREAK: compute both weightings, torch.where on the pole test
        # the first and last latitude bands are the polar caps
        weights = torch.cos(torch.deg2rad(lat)) * torch.sin(torch.deg2rad(delta / 2))
        weights[[0, -1]] = torch.sin(torch.deg2rad(delta / 4)) ** 2
    else:
        weights = torch.cos(torch.deg2rad(lat))
    return weights / weights.mean()


def weighted_mse(prediction, targets, scale, lat_weights):
    """Latitude-weighted MSE on normalised variables; an ocean-only variable is NaN over land."""
    valid = ~torch.isnan(targets)
    err = ((prediction - targets.nan_to_num()) / scale) ** 2 * lat_weights[:, None]
    return err[valid].mean()  # BREAK: nan_to_num the error and divide the masked sum by the valid count


class GraphCastStep(nn.Module):
    def __init__(self, n_vars=3, d=16, mesh_edge_dim=3, grid2mesh_edge_dim=3):
        super().__init__()
        self.grid_embed = mlp(n_vars * 2 + 2, d, d)
        self.mesh_embed = mlp(3, d, d)
        self.g2m_edge_embed = mlp(grid2mesh_edge_dim, d, d)
        self.mesh_edge_embed = mlp(mesh_edge_dim, d, d)
        self.m2g_edge_embed = mlp(grid2mesh_edge_dim, d, d)
        self.encoder = InteractionNetwork(d, d, d, d, d)
        self.processor = nn.ModuleList(InteractionNetwork(d, d, d, d, d) for _ in range(2))
        self.decoder = InteractionNetwork(d, d, d, d, d)
        self.out = nn.Linear(d, n_vars)

    def forward(self, inputs, forcings, targets, stats, graph, lat):
        # inputs: [2 steps, grid, vars]; normalise by the climatology's mean / std
        x = (inputs - stats["mean"]) / stats["std"]
        grid_feats = self.grid_embed(torch.cat([x[0], x[1], forcings], dim=-1))
        mesh_feats = self.mesh_embed(graph["mesh_pos"])
        # grid -> mesh
        g2m_e = self.g2m_edge_embed(graph["g2m_attr"])
        upd, _ = self.encoder(grid_feats, mesh_feats, g2m_e, graph["g2m_senders"], graph["g2m_receivers"])
        mesh_feats = mesh_feats + upd
        # process on the mesh
        mesh_e = self.mesh_edge_embed(graph["mesh_attr"])
        for layer in self.processor:
            upd, e_upd = layer(mesh_feats, mesh_feats, mesh_e, graph["mesh_senders"], graph["mesh_receivers"])
            mesh_feats = mesh_feats + upd
            mesh_e = mesh_e + e_upd
        # mesh -> grid
        m2g_e = self.m2g_edge_embed(graph["m2g_attr"])
        upd, _ = self.decoder(mesh_feats, grid_feats, m2g_e, graph["m2g_senders"], graph["m2g_receivers"])
        grid_feats = grid_feats + upd
        # residual prediction in units of the normalised one-step difference
        prediction = inputs[1] + self.out(grid_feats) * stats["diff_std"]
        lat_w = normalized_latitude_weights(lat)[graph["grid_lat_index"]]
        return weighted_mse(prediction, targets, stats["diff_std"], lat_w), prediction


def build_graphcast_step():
    torch.manual_seed(1701)
    g = seeded(1702)
    n_lat, n_lon, n_vars = 5, 6, 3
    lat = torch.linspace(-90.0, 90.0, n_lat)
    lon = torch.arange(n_lon) * (360.0 / n_lon)
    n_grid = n_lat * n_lon
    grid_lat_index = torch.arange(n_grid) // n_lon
    n_mesh = 8
    mesh_pos = torch.randn(n_mesh, 3, generator=g)
    mesh_pos = mesh_pos / mesh_pos.norm(dim=-1, keepdim=True)
    # every grid node sends to its two nearest mesh nodes; every grid node receives from its three nearest
    grid_xyz = torch.stack([
        torch.cos(torch.deg2rad(lat[grid_lat_index])) * torch.cos(torch.deg2rad(lon.repeat(n_lat))),
        torch.cos(torch.deg2rad(lat[grid_lat_index])) * torch.sin(torch.deg2rad(lon.repeat(n_lat))),
        torch.sin(torch.deg2rad(lat[grid_lat_index])),
    ], dim=-1)
    d = torch.cdist(grid_xyz, mesh_pos)
    near2 = d.topk(2, largest=False).indices
    near3 = d.topk(3, largest=False).indices
    g2m_senders = torch.arange(n_grid).repeat_interleave(2)
    g2m_receivers = near2.flatten()
    # make sure every mesh node receives (the real grid2mesh radius guarantees it)
    g2m_senders = torch.cat([g2m_senders, d.argmin(0)])
    g2m_receivers = torch.cat([g2m_receivers, torch.arange(n_mesh)])
    m2g_senders = near3.flatten()
    m2g_receivers = torch.arange(n_grid).repeat_interleave(3)
    mesh_senders = torch.arange(n_mesh).repeat_interleave(3)
    mesh_receivers = (mesh_senders + torch.tensor([1, 2, 5]).repeat(n_mesh)) % n_mesh
    graph = {
        "mesh_pos": mesh_pos, "grid_lat_index": grid_lat_index,
        "g2m_senders": g2m_senders, "g2m_receivers": g2m_receivers,
        "g2m_attr": grid_xyz[g2m_senders] - mesh_pos[g2m_receivers],
        "m2g_senders": m2g_senders, "m2g_receivers": m2g_receivers,
        "m2g_attr": grid_xyz[m2g_receivers] - mesh_pos[m2g_senders],
        "mesh_senders": mesh_senders, "mesh_receivers": mesh_receivers,
        "mesh_attr": mesh_pos[mesh_senders] - mesh_pos[mesh_receivers],
    }
    stats = {"mean": torch.tensor([280.0, 0.0, 290.0]), "std": torch.tensor([15.0, 5.0, 3.0]),
             "diff_std": torch.tensor([1.5, 2.0, 0.3])}
    base = stats["mean"] + stats["std"] * torch.randn(n_grid, n_vars, generator=g)
    inputs = torch.stack([base, base + stats["diff_std"] * torch.randn(n_grid, n_vars, generator=g)])
    forcings = torch.randn(n_grid, 2, generator=g)
    targets = inputs[1] + stats["diff_std"] * torch.randn(n_grid, n_vars, generator=g)
    land = torch.rand(n_grid, generator=g) < 0.3
    inputs[:, land, 2] = stats["mean"][2]  # sea-surface temperature: climatology fill over land in the inputs
    targets[land, 2] = float("nan")  # and missing in the targets
    return GraphCastStep(), (inputs, forcings, targets, stats, graph, lat)


# --------------------------------------------------------------------------- DiffPool

EPS = 1e-15


def dense_diff_pool(x, adj, s, mask=None, normalize=True):
    x = x.unsqueeze(0) if x.dim() == 2 else x
    adj = adj.unsqueeze(0) if adj.dim() == 2 else adj
    s = s.unsqueeze(0) if s.dim() == 2 else s
    batch_size, num_nodes, _ = x.size()
    s = torch.softmax(s, dim=-1)
    if mask is not None:
        mask = mask.view(batch_size, num_nodes, 1).to(x.dtype)
        x, s = x * mask, s * mask
    out = torch.matmul(s.transpose(1, 2), x)
    out_adj = torch.matmul(torch.matmul(s.transpose(1, 2), adj), s)
    link_loss = adj - torch.matmul(s, s.transpose(1, 2))
    link_loss = torch.norm(link_loss, p=2)
    if normalize is True:
        link_loss = link_loss / adj.numel()
    ent_loss = (-s * torch.log(s + EPS)).sum(dim=-1).mean()
    return out, out_adj, link_loss, ent_loss


class DenseSAGEConv(nn.Module):
    def __init__(self, in_channels, out_channels, normalize=False):
        super().__init__()
        self.lin_rel = nn.Linear(in_channels, out_channels, bias=False)
        self.lin_root = nn.Linear(in_channels, out_channels)
        self.normalize = normalize

    def forward(self, x, adj, mask=None):
        x = x.unsqueeze(0) if x.dim() == 2 else x
        adj = adj.unsqueeze(0) if adj.dim() == 2 else adj
        B, N, _ = adj.size()
        out = torch.matmul(adj, x)
        out = out / adj.sum(dim=-1, keepdim=True).clamp(min=1)
        out = self.lin_rel(out) + self.lin_root(x)
        if self.normalize:
            out = F.normalize(out, p=2, dim=-1)
        if mask is not None:
            out = out * mask.view(B, N, 1).to(x.dtype)
        return out


class GNN(nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super().__init__()
        self.conv1 = DenseSAGEConv(in_channels, hidden_channels)
        self.conv2 = DenseSAGEConv(hidden_channels, out_channels)

    def forward(self, x, adj, mask=None):
        x = F.relu(self.conv1(x, adj, mask))
        return F.relu(self.conv2(x, adj, mask))


class DiffPool(nn.Module):
    def __init__(self, num_features=4, num_classes=3, hidden=16, clusters=(4, 2)):
        super().__init__()
        self.gnn1_pool = GNN(num_features, hidden, clusters[0])
        self.gnn1_embed = GNN(num_features, hidden, hidden)
        self.gnn2_pool = GNN(hidden, hidden, clusters[1])
        self.gnn2_embed = GNN(hidden, hidden, hidden)
        self.gnn3_embed = GNN(hidden, hidden, hidden)
        self.lin1 = nn.Linear(hidden, hidden)
        self.lin2 = nn.Linear(hidden, num_classes)

    def forward(self, x, edge_index, batch, y):
        x, mask = to_dense_batch(x, batch)
        adj = to_dense_adj(edge_index, batch)
        s = self.gnn1_pool(x, adj, mask)
        x = self.gnn1_embed(x, adj, mask)
        x, adj, l1, e1 = dense_diff_pool(x, adj, s, mask)
        s = self.gnn2_pool(x, adj)
        x = self.gnn2_embed(x, adj)
        x, adj, l2, e2 = dense_diff_pool(x, adj, s)
        x = self.gnn3_embed(x, adj)
        x = x.mean(dim=1)
        x = F.relu(self.lin1(x))
        out = F.log_softmax(self.lin2(x), dim=-1)
        loss = F.nll_loss(out, y) + l1 + l2 + e1 + e2
        return loss, out


def build_diffpool():
    torch.manual_seed(1711)
    g = seeded(1712)
    sizes = [5, 7, 4]
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    x = torch.randn(len(batch), 4, generator=g)
    edges = []
    start = 0
    for n in sizes:
        # a ring plus a chord per graph, both directions
        for i in range(n):
            edges += [(start + i, start + (i + 1) % n), (start + (i + 1) % n, start + i)]
        edges += [(start, start + n // 2), (start + n // 2, start)]
        start += n
    edge_index = torch.tensor(edges).t()
    y = torch.tensor([0, 2, 1])
    return DiffPool(), (x, edge_index, batch, y)
