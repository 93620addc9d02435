"""Graphs: an OGB molecular property training step (AtomEncoder/BondEncoder, GIN with edge features, mean
pooling, the loss over labelled targets only), a GraphGPS layer mixing a local GINE convolution with global
attention over PyG's ``to_dense_batch``, PyG's ``GridSampling`` downsampling of a batch of point clouds before
a PointNet-style classifier, and RotatE's self-adversarial negative-sampling loss."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import global_max_pool, global_mean_pool, scatter, seeded

# --------------------------------------------------------------------------- a minimal torch_geometric.data


class Data:
    """A graph: node features ``x``, ``edge_index``, optional ``edge_attr``, ``pos`` and ``y``."""

    def __init__(self, **kwargs) -> None:
        self.__dict__.update(kwargs)

    @property
    def num_nodes(self) -> int:
        return (self.x if getattr(self, "x", None) is not None else self.pos).size(0)

    def keys(self) -> list[str]:
        return [k for k, v in self.__dict__.items() if v is not None]

    def __iter__(self):
        for key in sorted(self.keys()):
            yield key, self.__dict__[key]

    def __getitem__(self, key: str):
        return self.__dict__[key]

    def __setitem__(self, key: str, value) -> None:
        self.__dict__[key] = value

    def get(self, key: str, default=None):
        return self.__dict__.get(key, default)


class Batch(Data):
    """``Batch.from_data_list``: concatenated node and edge tensors, edge indices offset per graph, ``batch``."""

    @classmethod
    def from_data_list(cls, data_list: list[Data]) -> Batch:
        out: dict[str, list[torch.Tensor]] = {}
        batch, offset = [], 0
        for i, data in enumerate(data_list):
            for key, value in data:
                out.setdefault(key, []).append(value + offset if key == "edge_index" else value)
            batch.append(torch.full((data.num_nodes,), i, dtype=torch.long))
            offset += data.num_nodes
        kwargs = {k: torch.cat(v, dim=-1 if k == "edge_index" else 0) for k, v in out.items()}
        b = cls(**kwargs, batch=torch.cat(batch))
        b.num_graphs = len(data_list)
        return b


# --------------------------------------------------------------------------- OGB molecular property prediction

full_atom_feature_dims = [119, 4, 12, 12, 10, 6, 6, 2, 2]
full_bond_feature_dims = [5, 6, 2]


class AtomEncoder(torch.nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.atom_embedding_list = torch.nn.ModuleList()
        for _i, dim in enumerate(full_atom_feature_dims):
            emb = torch.nn.Embedding(dim, emb_dim)
            torch.nn.init.xavier_uniform_(emb.weight.data)
            self.atom_embedding_list.append(emb)

    def forward(self, x):
        x_embedding = 0
        for i in range(x.shape[1]):
            x_embedding += self.atom_embedding_list[i](x[:, i])
        return x_embedding


class BondEncoder(torch.nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.bond_embedding_list = torch.nn.ModuleList()
        for _i, dim in enumerate(full_bond_feature_dims):
            emb = torch.nn.Embedding(dim, emb_dim)
            torch.nn.init.xavier_uniform_(emb.weight.data)
            self.bond_embedding_list.append(emb)

    def forward(self, edge_attr):
        bond_embedding = 0
        for i in range(edge_attr.shape[1]):
            bond_embedding += self.bond_embedding_list[i](edge_attr[:, i])
        return bond_embedding


class GINConv(torch.nn.Module):
    def __init__(self, emb_dim):
        """
        emb_dim (int): node embedding dimensionality
        """
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(emb_dim, 2 * emb_dim), torch.nn.BatchNorm1d(2 * emb_dim),
                                       torch.nn.ReLU(), torch.nn.Linear(2 * emb_dim, emb_dim))
        self.eps = torch.nn.Parameter(torch.Tensor([0]))
        self.bond_encoder = BondEncoder(emb_dim=emb_dim)

    def forward(self, x, edge_index, edge_attr):
        edge_embedding = self.bond_encoder(edge_attr)
        out = self.mlp((1 + self.eps) * x + self.propagate(edge_index, x=x, edge_attr=edge_embedding))
        return out

    def propagate(self, edge_index, x, edge_attr):
        x_j = x[edge_index[0]]
        return scatter(self.message(x_j, edge_attr), edge_index[1], dim=0, dim_size=x.size(0), reduce="sum")

    def message(self, x_j, edge_attr):
        return F.relu(x_j + edge_attr)


class GNN_node(torch.nn.Module):
    """
    Output:
        node representations
    """

    def __init__(self, num_layer, emb_dim, drop_ratio=0.5, JK="last", residual=False):
        super().__init__()
        self.num_layer = num_layer
        self.drop_ratio = drop_ratio
        self.JK = JK
        # add residual connection or not
        self.residual = residual

        if self.num_layer < 2:
            raise ValueError("Number of GNN layers must be greater than 1.")

        self.atom_encoder = AtomEncoder(emb_dim)

        # List of GNNs
        self.convs = torch.nn.ModuleList()
        self.batch_norms = torch.nn.ModuleList()

        for _layer in range(num_layer):
            self.convs.append(GINConv(emb_dim))
            self.batch_norms.append(torch.nn.BatchNorm1d(emb_dim))

    def forward(self, batched_data):
        x, edge_index, edge_attr = batched_data.x, batched_data.edge_index, batched_data.edge_attr

        # computing input node embedding
        h_list = [self.atom_encoder(x)]
        for layer in range(self.num_layer):
            h = self.convs[layer](h_list[layer], edge_index, edge_attr)
            h = self.batch_norms[layer](h)

            if layer == self.num_layer - 1:
                # remove relu for the last layer
                h = F.dropout(h, self.drop_ratio, training=self.training)
            else:
                h = F.dropout(F.relu(h), self.drop_ratio, training=self.training)

            if self.residual:
                h += h_list[layer]

            h_list.append(h)

        # Different implementations of Jk-concat
        if self.JK == "last":
            node_representation = h_list[-1]
        elif self.JK == "sum":
            node_representation = 0
            for layer in range(self.num_layer + 1):
                node_representation += h_list[layer]

        return node_representation


class GNN(torch.nn.Module):
    def __init__(self, num_tasks, num_layer=2, emb_dim=16, drop_ratio=0.5, JK="last", graph_pooling="mean"):
        super().__init__()
        self.num_layer = num_layer
        self.drop_ratio = drop_ratio
        self.JK = JK
        self.emb_dim = emb_dim
        self.num_tasks = num_tasks
        self.graph_pooling = graph_pooling

        self.gnn_node = GNN_node(num_layer, emb_dim, JK=JK, drop_ratio=drop_ratio)

        # Pooling function to generate whole-graph embeddings
        if self.graph_pooling == "mean":
            self.pool = global_mean_pool
        elif self.graph_pooling == "max":
            self.pool = global_max_pool
        else:
            raise ValueError("Invalid graph pooling type.")

        self.graph_pred_linear = torch.nn.Linear(self.emb_dim, self.num_tasks)

    def forward(self, batched_data):
        h_node = self.gnn_node(batched_data)

        h_graph = self.pool(h_node, batched_data.batch)

        return self.graph_pred_linear(h_graph)


class OGBTrainStep(nn.Module):
    """main_pyg.py's train(): skip degenerate batches, ignore nan targets (unlabeled) in the loss."""

    def __init__(self, num_tasks: int = 3, task_type: str = "binary classification") -> None:
        super().__init__()
        self.model = GNN(num_tasks)
        self.task_type = task_type
        self.cls_criterion = torch.nn.BCEWithLogitsLoss()
        self.reg_criterion = torch.nn.MSELoss()

    def forward(self, batch):
        if batch.x.shape[0] == 1 or batch.batch[-1] == 0:  # BREAK: batch.num_graphs == 1 (known on the host)
            return None
        pred = self.model(batch)
        ## ignore nan targets (unlabeled) when computing training loss.
        is_labeled = batch.y == batch.y
        if "classification" in self.task_type:
            loss = self.cls_criterion(pred.to(torch.float32)[is_labeled], batch.y.to(torch.float32)[is_labeled])  # BREAK: masked mean
        else:
            loss = self.reg_criterion(pred.to(torch.float32)[is_labeled], batch.y.to(torch.float32)[is_labeled])
        return loss, pred


def random_molecule(g: torch.Generator, num_atoms: int, num_tasks: int, missing: list[int]) -> Data:
    x = torch.stack([torch.randint(0, d, (num_atoms,), generator=g) for d in full_atom_feature_dims], dim=1)
    src = torch.arange(num_atoms - 1)
    edge_index = torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])])  # a chain, both directions
    bonds = torch.stack([torch.randint(0, d, (num_atoms - 1,), generator=g) for d in full_bond_feature_dims], dim=1)
    y = torch.randint(0, 2, (1, num_tasks), generator=g).float()
    y[0, missing] = float("nan")
    return Data(x=x, edge_index=edge_index, edge_attr=torch.cat([bonds, bonds]), y=y)


def build_ogb_molhiv():
    torch.manual_seed(1200)
    model = OGBTrainStep()
    g = seeded(1201)
    batch = Batch.from_data_list(
        [random_molecule(g, 5, 3, []), random_molecule(g, 7, 3, [1]), random_molecule(g, 4, 3, [0, 2]),
         random_molecule(g, 6, 3, [])]
    )
    return model, (batch,)


# --------------------------------------------------------------------------- GraphGPS: local MPNN + global attention


def to_dense_batch(x, batch=None, fill_value=0.0, max_num_nodes=None, batch_size=None):
    r"""Given a sparse batch of node features :math:`\mathbf{X} \in \mathbb{R}^{(N_1 + \ldots + N_B) \times F}`
    (with :math:`N_i` indicating the number of nodes in graph :math:`i`), creates a dense node feature tensor
    :math:`\mathbf{X} \in \mathbb{R}^{B \times N_{\max} \times F}` (with :math:`N_{\max} = \max_i^B N_i`).
    In addition, a mask of shape :math:`\mathbf{M} \in \{ 0, 1 \}^{B \times N_{\max}}` is returned, holding
    information about the existence of fake-nodes in the dense representation."""
    if batch is None and max_num_nodes is None:
        mask = torch.ones(1, x.size(0), dtype=torch.bool, device=x.device)
        return x.unsqueeze(0), mask

    if batch is None:
        batch = x.new_zeros(x.size(0), dtype=torch.long)

    if batch_size is None:
        batch_size = int(batch.max()) + 1  # BREAK: the caller passes batch_size=num_graphs

    num_nodes = scatter(batch.new_ones(x.size(0)), batch, dim=0, dim_size=batch_size, reduce="sum")
    cum_nodes = torch.cat([batch.new_zeros(1), num_nodes.cumsum(dim=0)])

    if max_num_nodes is None:
        max_num_nodes = int(num_nodes.max())  # BREAK: pad to x.size(0), an upper bound from the shapes

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


class GINEConv(nn.Module):
    r"""The modified :class:`GINConv` operator from the `"Strategies for Pre-training Graph Neural Networks"
    <https://arxiv.org/abs/1905.12265>`_ paper."""

    def __init__(self, nn_: nn.Module, eps: float = 0.0, train_eps: bool = False) -> None:
        super().__init__()
        self.nn = nn_
        self.initial_eps = eps
        if train_eps:
            self.eps = torch.nn.Parameter(torch.Tensor([eps]))
        else:
            self.register_buffer("eps", torch.Tensor([eps]))

    def forward(self, x, edge_index, edge_attr):
        x = (x, x)
        # propagate_type: (x: OptPairTensor, edge_attr: OptTensor)
        out = scatter(self.message(x[0][edge_index[0]], edge_attr), edge_index[1], dim=0,
                      dim_size=x[1].size(0), reduce="sum")
        x_r = x[1]
        if x_r is not None:
            out = out + (1 + self.eps) * x_r
        return self.nn(out)

    def message(self, x_j, edge_attr):
        return F.relu(x_j + edge_attr)


class GPSLayer(nn.Module):
    """Local MPNN with global attention (GraphGPS)."""

    def __init__(self, dim_h, num_heads, dropout=0.0, attn_dropout=0.0, batch_norm=True):
        super().__init__()
        self.dim_h = dim_h
        self.num_heads = num_heads
        self.attn_dropout = attn_dropout
        self.batch_norm = batch_norm
        self.activation = nn.ReLU

        gin_nn = nn.Sequential(nn.Linear(dim_h, dim_h), self.activation(), nn.Linear(dim_h, dim_h))
        self.local_model = GINEConv(gin_nn)
        self.self_attn = torch.nn.MultiheadAttention(dim_h, num_heads, dropout=self.attn_dropout, batch_first=True)

        if self.batch_norm:
            self.norm1_local = nn.BatchNorm1d(dim_h)
            self.norm1_attn = nn.BatchNorm1d(dim_h)
        self.dropout_local = nn.Dropout(dropout)
        self.dropout_attn = nn.Dropout(dropout)

        # Feed Forward block.
        self.ff_linear1 = nn.Linear(dim_h, dim_h * 2)
        self.ff_linear2 = nn.Linear(dim_h * 2, dim_h)
        self.act_fn_ff = self.activation()
        if self.batch_norm:
            self.norm2 = nn.BatchNorm1d(dim_h)
        self.ff_dropout1 = nn.Dropout(dropout)
        self.ff_dropout2 = nn.Dropout(dropout)

    def forward(self, batch):
        h = batch.x
        h_in1 = h  # for first residual connection

        h_out_list = []
        # Local MPNN with edge attributes.
        h_local = self.local_model(h, batch.edge_index, batch.edge_attr)
        h_local = self.dropout_local(h_local)
        h_local = h_in1 + h_local  # Residual connection.
        if self.batch_norm:
            h_local = self.norm1_local(h_local)
        h_out_list.append(h_local)

        # Multi-head attention.
        h_dense, mask = to_dense_batch(h, batch.batch)
        h_attn = self._sa_block(h_dense, None, ~mask)[mask]  # BREAK: gather the nodes' dense positions

        h_attn = self.dropout_attn(h_attn)
        h_attn = h_in1 + h_attn  # Residual connection.
        if self.batch_norm:
            h_attn = self.norm1_attn(h_attn)
        h_out_list.append(h_attn)

        # Combine local and global outputs.
        h = sum(h_out_list)

        # Feed Forward block.
        h = h + self._ff_block(h)
        if self.batch_norm:
            h = self.norm2(h)

        batch.x = h
        return batch

    def _sa_block(self, x, attn_mask, key_padding_mask):
        """Self-attention block."""
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False)[0]
        return x

    def _ff_block(self, x):
        """Feed Forward block."""
        x = self.ff_dropout1(self.act_fn_ff(self.ff_linear1(x)))
        return self.ff_dropout2(self.ff_linear2(x))


class FeatureEncoder(nn.Module):
    def __init__(self, dim_in: int, dim_edge_in: int, dim_h: int) -> None:
        super().__init__()
        self.node_encoder = nn.Linear(dim_in, dim_h)
        self.edge_encoder = nn.Linear(dim_edge_in, dim_h)

    def forward(self, batch):
        batch.x = self.node_encoder(batch.x)
        batch.edge_attr = self.edge_encoder(batch.edge_attr)
        return batch


class GNNGraphHead(nn.Module):
    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.layer_post_mp = nn.Sequential(nn.Linear(dim_in, dim_in), nn.ReLU(), nn.Linear(dim_in, dim_out))
        self.pooling_fun = global_mean_pool

    def _apply_index(self, batch):
        return batch.graph_feature, batch.y

    def forward(self, batch):
        graph_emb = self.pooling_fun(batch.x, batch.batch)
        graph_emb = self.layer_post_mp(graph_emb)
        batch.graph_feature = graph_emb
        pred, label = self._apply_index(batch)
        return pred, label


class GPSModel(torch.nn.Module):
    """Multi-scale graph transformer: encoder, a stack of GPS layers, a graph-level head."""

    def __init__(self, dim_in: int = 6, dim_edge_in: int = 3, dim_out: int = 2, dim_h: int = 16, layers: int = 2):
        super().__init__()
        self.encoder = FeatureEncoder(dim_in, dim_edge_in, dim_h)
        self.layers = torch.nn.Sequential(*[GPSLayer(dim_h, num_heads=4) for _ in range(layers)])
        self.post_mp = GNNGraphHead(dim_in=dim_h, dim_out=dim_out)

    def forward(self, batch):
        for module in self.children():
            batch = module(batch)
        return batch


def build_graphgps_dense():
    torch.manual_seed(1210)
    model = GPSModel()
    g = seeded(1211)
    graphs = []
    for n in (5, 8, 3):
        src = torch.randint(0, n, (2 * n,), generator=g)
        dst = (src + torch.randint(1, n, (2 * n,), generator=g)) % n
        graphs.append(Data(x=torch.randn(n, 6, generator=g), edge_index=torch.stack([src, dst]),
                           edge_attr=torch.randn(2 * n, 3, generator=g), y=torch.randint(0, 2, (1,), generator=g)))
    return model, (Batch.from_data_list(graphs),)


# --------------------------------------------------------------------------- PyG GridSampling + a PointNet classifier


def grid_cluster(pos, size, start=None, end=None):
    r"""A clustering algorithm, which overlays a regular grid of user-defined size over a point cloud and
    clusters all points within a voxel (torch_cluster.grid_cluster)."""
    pos = pos.unsqueeze(-1) if pos.dim() == 1 else pos
    start = pos.min(dim=0)[0] if start is None else start
    end = pos.max(dim=0)[0] if end is None else end
    pos = pos - start.unsqueeze(0)
    num_voxels = ((end - start) / size).to(torch.long) + 1
    num_voxels = torch.cat([num_voxels.new_ones(1), num_voxels.cumprod(0)[:-1]])
    cluster = (pos / size.view(1, -1)).to(torch.long)
    return (cluster * num_voxels.view(1, -1)).sum(dim=1)


def voxel_grid(pos, size, batch=None, start=None, end=None):
    r"""Voxel grid pooling from the, *e.g.*, `Dynamic Edge-Conditioned Filters in Convolutional Networks on
    Graphs <https://arxiv.org/abs/1704.02901>`_ paper, which overlays a regular grid of user-defined size over a
    point cloud and clusters all points within the same voxel."""
    pos = pos.unsqueeze(-1) if pos.dim() == 1 else pos
    dim = pos.size(1)

    if batch is None:
        batch = pos.new_zeros(pos.size(0), dtype=torch.long)

    pos = torch.cat([pos, batch.view(-1, 1).to(pos.dtype)], dim=-1)

    if not isinstance(size, torch.Tensor):
        size = torch.tensor(size, dtype=pos.dtype, device=pos.device)
    size = size.repeat(dim) if size.numel() == 1 else size
    size = torch.cat([size, size.new_ones(1)])  # Add additional batch dim.

    return grid_cluster(pos, size, start, end)


def consecutive_cluster(src):
    unique, inv = torch.unique(src, sorted=True, return_inverse=True)  # BREAK must-not: the voxel count sizes the returned cloud
    perm = torch.arange(inv.size(0), dtype=inv.dtype, device=inv.device)
    perm = inv.new_empty(unique.size(0)).scatter_(0, inv, perm)
    return inv, perm


class GridSampling:
    r"""Clusters points into fixed-sized voxels (functional name: :obj:`grid_sampling`).
    Each cluster returned is a new point based on the mean of all points inside the given cluster."""

    def __init__(self, size, start=None, end=None) -> None:
        self.size = size
        self.start = start
        self.end = end

    def __call__(self, data: Data) -> Data:
        num_nodes = data.num_nodes

        batch = data.get("batch", None)

        c = voxel_grid(data.pos, self.size, batch, self.start, self.end)
        c, perm = consecutive_cluster(c)

        for key, item in data:
            if "edge" in key:
                raise ValueError(f"'{self.__class__.__name__}' does not support coarsening of edges")

            if torch.is_tensor(item) and item.size(0) == num_nodes:
                if key == "y":
                    item = F.one_hot(item)
                    item = scatter(item, c, dim=0, reduce="sum")
                    data[key] = item.argmax(dim=-1)
                elif key == "batch":
                    data[key] = item[perm]
                else:
                    data[key] = scatter(item, c, dim=0, reduce="mean")

        return data


class PointNetClassifier(nn.Module):
    """Transform (as a dataset's ``pre_transform`` would), shared point MLP, global max pool, classifier."""

    def __init__(self, in_channels: int = 3, num_classes: int = 4, voxel_size: float = 0.5) -> None:
        super().__init__()
        self.transform = GridSampling(voxel_size)
        self.point_mlp = nn.Sequential(nn.Linear(in_channels + 3, 32), nn.ReLU(), nn.Linear(32, 64), nn.ReLU())
        self.classifier = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))

    def forward(self, data: Data):
        data = self.transform(data)
        h = self.point_mlp(torch.cat([data.x, data.pos], dim=-1))
        h = global_max_pool(h, data.batch)
        return self.classifier(h), data.pos, data.batch


def build_grid_sampling():
    torch.manual_seed(1220)
    model = PointNetClassifier()
    g = seeded(1221)
    clouds = [Data(pos=torch.rand(n, 3, generator=g) * 1.5, x=torch.randn(n, 3, generator=g)) for n in (40, 25)]
    batch = Batch.from_data_list(clouds)
    return model, (batch,)


# --------------------------------------------------------------------------- RotatE (KnowledgeGraphEmbedding)


class KGEModel(nn.Module):
    def __init__(self, model_name, nentity, nrelation, hidden_dim, gamma,
                 double_entity_embedding=False, double_relation_embedding=False):
        super().__init__()
        self.model_name = model_name
        self.nentity = nentity
        self.nrelation = nrelation
        self.hidden_dim = hidden_dim
        self.epsilon = 2.0

        self.gamma = nn.Parameter(
            torch.Tensor([gamma]),
            requires_grad=False
        )

        self.embedding_range = nn.Parameter(
            torch.Tensor([(self.gamma.item() + self.epsilon) / hidden_dim]),
            requires_grad=False
        )

        self.entity_dim = hidden_dim * 2 if double_entity_embedding else hidden_dim
        self.relation_dim = hidden_dim * 2 if double_relation_embedding else hidden_dim

        self.entity_embedding = nn.Parameter(torch.zeros(nentity, self.entity_dim))
        nn.init.uniform_(
            tensor=self.entity_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        self.relation_embedding = nn.Parameter(torch.zeros(nrelation, self.relation_dim))
        nn.init.uniform_(
            tensor=self.relation_embedding,
            a=-self.embedding_range.item(),
            b=self.embedding_range.item()
        )

        if model_name == "RotatE" and (not double_entity_embedding or double_relation_embedding):
            raise ValueError("RotatE should use --double_entity_embedding")

    def forward(self, sample, mode="single"):
        """
        Forward function that calculate the score of a batch of triples.
        In the 'single' mode, sample is a batch of triple.
        In the 'head-batch' or 'tail-batch' mode, sample consists two part.
        The first part is usually the positive sample.
        And the second part is the entities in the negative samples.
        Because negative samples and positive samples usually share two elements
        in their triple ((head, relation) or (relation, tail)).
        """
        if mode == "single":
            batch_size, negative_sample_size = sample.size(0), 1

            head = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=sample[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=sample[:, 2]).unsqueeze(1)

        elif mode == "head-batch":
            tail_part, head_part = sample
            batch_size, negative_sample_size = head_part.size(0), head_part.size(1)

            head = torch.index_select(
                self.entity_embedding, dim=0, index=head_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=tail_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(self.entity_embedding, dim=0, index=tail_part[:, 2]).unsqueeze(1)

        elif mode == "tail-batch":
            head_part, tail_part = sample
            batch_size, negative_sample_size = tail_part.size(0), tail_part.size(1)

            head = torch.index_select(self.entity_embedding, dim=0, index=head_part[:, 0]).unsqueeze(1)
            relation = torch.index_select(self.relation_embedding, dim=0, index=head_part[:, 1]).unsqueeze(1)
            tail = torch.index_select(
                self.entity_embedding, dim=0, index=tail_part.view(-1)
            ).view(batch_size, negative_sample_size, -1)

        else:
            raise ValueError(f"mode {mode} not supported")

        model_func = {
            "DistMult": self.DistMult,
            "RotatE": self.RotatE,
        }

        if self.model_name in model_func:
            score = model_func[self.model_name](head, relation, tail, mode)
        else:
            raise ValueError(f"model {self.model_name} not supported")

        return score

    def DistMult(self, head, relation, tail, mode):
        if mode == "head-batch":
            score = head * (relation * tail)
        else:
            score = (head * relation) * tail

        score = score.sum(dim=2)
        return score

    def RotatE(self, head, relation, tail, mode):
        pi = 3.14159265358979323846

        re_head, im_head = torch.chunk(head, 2, dim=2)
        re_tail, im_tail = torch.chunk(tail, 2, dim=2)

        # Make phases of relations uniformly distributed in [-pi, pi]

        phase_relation = relation / (self.embedding_range.item() / pi)  # BREAK: divide by the (1,) tensor itself

        re_relation = torch.cos(phase_relation)
        im_relation = torch.sin(phase_relation)

        if mode == "head-batch":
            re_score = re_relation * re_tail + im_relation * im_tail
            im_score = re_relation * im_tail - im_relation * re_tail
            re_score = re_score - re_head
            im_score = im_score - im_head
        else:
            re_score = re_head * re_relation - im_head * im_relation
            im_score = re_head * im_relation + im_head * re_relation
            re_score = re_score - re_tail
            im_score = im_score - im_tail

        score = torch.stack([re_score, im_score], dim=0)
        score = score.norm(dim=0)

        score = self.gamma.item() - score.sum(dim=2)  # BREAK: self.gamma - score.sum(dim=2)
        return score


@dataclass
class KGEArgs:
    negative_adversarial_sampling: bool = True
    adversarial_temperature: float = 1.0
    uni_weight: bool = False
    regularization: float = 0.0


class KGETrainStep(nn.Module):
    """KGEModel.train_step's loss (self-adversarial negative sampling, subsampling weights)."""

    def __init__(self, model: KGEModel, args: KGEArgs) -> None:
        super().__init__()
        self.model = model
        self.args = args

    def forward(self, positive_sample, negative_sample, subsampling_weight, mode):
        model, args = self.model, self.args
        negative_score = model((positive_sample, negative_sample), mode=mode)

        if args.negative_adversarial_sampling:
            # In self-adversarial sampling, we do not apply back-propagation on the sampling weight
            negative_score = (F.softmax(negative_score * args.adversarial_temperature, dim=1).detach()
                              * F.logsigmoid(-negative_score)).sum(dim=1)
        else:
            negative_score = F.logsigmoid(-negative_score).mean(dim=1)

        positive_score = model(positive_sample)

        positive_score = F.logsigmoid(positive_score).squeeze(dim=1)

        if args.uni_weight:
            positive_sample_loss = - positive_score.mean()
            negative_sample_loss = - negative_score.mean()
        else:
            positive_sample_loss = - (subsampling_weight * positive_score).sum() / subsampling_weight.sum()
            negative_sample_loss = - (subsampling_weight * negative_score).sum() / subsampling_weight.sum()

        loss = (positive_sample_loss + negative_sample_loss) / 2

        if args.regularization != 0.0:
            # Use L3 regularization for ComplEx and DistMult
            regularization = args.regularization * (
                model.entity_embedding.norm(p=3) ** 3
                + model.relation_embedding.norm(p=3).norm(p=3) ** 3
            )
            loss = loss + regularization

        return loss, positive_sample_loss, negative_sample_loss


def sample_negatives(triples, nentity, negative_sample_size, mode, rng):
    """TrainDataset.__getitem__ for a batch: corrupt heads or tails, filtering out known true triples, and the
    subsampling weight from the (head, relation) / (tail, -relation-1) counts."""
    count, true_head, true_tail = {}, {}, {}
    for head, relation, tail in triples:
        count[(head, relation)] = count.get((head, relation), 3) + 1
        count[(tail, -relation - 1)] = count.get((tail, -relation - 1), 3) + 1
        true_tail.setdefault((head, relation), []).append(tail)
        true_head.setdefault((relation, tail), []).append(head)
    negatives, weights = [], []
    for head, relation, tail in triples:
        subsampling_weight = count[(head, relation)] + count[(tail, -relation - 1)]
        weights.append(math.sqrt(1 / subsampling_weight))
        negative_sample_list, size = [], 0
        while size < negative_sample_size:
            negative_sample = rng.randint(nentity, size=negative_sample_size * 2)
            known = true_head[(relation, tail)] if mode == "head-batch" else true_tail[(head, relation)]
            mask = np.isin(negative_sample, known, assume_unique=True, invert=True)
            negative_sample_list.append(negative_sample[mask])
            size += int(mask.sum())
        negatives.append(torch.from_numpy(np.concatenate(negative_sample_list)[:negative_sample_size]))
    return torch.tensor(triples), torch.stack(negatives).long(), torch.tensor(weights)


def build_rotate_kge():
    torch.manual_seed(1230)
    nentity, nrelation = 30, 4
    model = KGEModel("RotatE", nentity, nrelation, hidden_dim=8, gamma=6.0, double_entity_embedding=True)
    rng = np.random.RandomState(1231)
    triples = [(int(h), int(r), int(t)) for h, r, t in zip(rng.randint(nentity, size=6), rng.randint(nrelation, size=6),
                                                            rng.randint(nentity, size=6), strict=True)]
    positive_sample, negative_sample, subsampling_weight = sample_negatives(triples, nentity, 8, "tail-batch", rng)
    return KGETrainStep(model, KGEArgs()), (positive_sample, negative_sample, subsampling_weight, "tail-batch")
