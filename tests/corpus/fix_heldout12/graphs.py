"""Graph transformers: graphdeeplearning/graphtransformer's ``GraphTransformerNet`` for SBM node classification
(sparse attention over the edges, Laplacian eigenvector positional encodings with a random sign flip in
training, benchmarking-gnns' class-balanced cross-entropy), over a PyG-style edge index with the eigenvectors
computed as its data pipeline does."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import class_balanced_weight, seeded


def laplacian_positional_encoding(edge_index, num_nodes, pos_enc_dim):
    """Eigenvectors of the symmetric normalised Laplacian (the smallest non-trivial ones), numpy as in the repo."""
    A = np.zeros((num_nodes, num_nodes))
    A[edge_index[0].numpy(), edge_index[1].numpy()] = 1.0
    N = np.diag(A.sum(1).clip(1) ** -0.5)
    L = np.eye(num_nodes) - N @ A @ N
    EigVal, EigVec = np.linalg.eigh(L)
    idx = EigVal.argsort()
    EigVec = np.real(EigVec[:, idx])
    return torch.from_numpy(EigVec[:, 1: pos_enc_dim + 1]).float()


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads):
        super().__init__()
        self.out_dim, self.num_heads = out_dim, num_heads
        self.Q = nn.Linear(in_dim, out_dim * num_heads)
        self.K = nn.Linear(in_dim, out_dim * num_heads)
        self.V = nn.Linear(in_dim, out_dim * num_heads)

    def forward(self, h, edge_index):
        n = h.shape[0]
        Q_h = self.Q(h).view(-1, self.num_heads, self.out_dim)
        K_h = self.K(h).view(-1, self.num_heads, self.out_dim)
        V_h = self.V(h).view(-1, self.num_heads, self.out_dim)
        src, dst = edge_index
        # src_dot_dst, scaled, exp of the clamped score (the repo's edge UDFs)
        score = (K_h[src] * Q_h[dst]).sum(-1, keepdim=True) / np.sqrt(self.out_dim)
        score = torch.exp(score.clamp(-5, 5))
        wV = torch.zeros_like(V_h).index_add_(0, dst, V_h[src] * score)
        z = torch.zeros(n, self.num_heads, 1).index_add_(0, dst, score)
        return wV / (z + 1e-6)


class GraphTransformerLayer(nn.Module):
    def __init__(self, in_dim, out_dim, num_heads, dropout=0.0, residual=True):
        super().__init__()
        self.residual, self.dropout = residual, dropout
        self.attention = MultiHeadAttentionLayer(in_dim, out_dim // num_heads, num_heads)
        self.O = nn.Linear(out_dim, out_dim)
        self.layer_norm1 = nn.LayerNorm(out_dim)
        self.FFN_layer1 = nn.Linear(out_dim, out_dim * 2)
        self.FFN_layer2 = nn.Linear(out_dim * 2, out_dim)
        self.layer_norm2 = nn.LayerNorm(out_dim)

    def forward(self, h, edge_index):
        h_in1 = h
        attn_out = self.attention(h, edge_index)
        h = F.dropout(attn_out.view(-1, self.O.in_features), self.dropout, training=self.training)
        h = self.O(h)
        if self.residual:
            h = h_in1 + h
        h = self.layer_norm1(h)
        h_in2 = h
        h = self.FFN_layer2(F.dropout(F.relu(self.FFN_layer1(h)), self.dropout, training=self.training))
        if self.residual:
            h = h_in2 + h
        return self.layer_norm2(h)


class GraphTransformerNet(nn.Module):
    def __init__(self, in_dim_node=4, hidden_dim=16, n_heads=2, n_classes=3, L=2, pos_enc_dim=4):
        super().__init__()
        self.n_classes = n_classes
        self.embedding_lap_pos_enc = nn.Linear(pos_enc_dim, hidden_dim)
        self.embedding_h = nn.Embedding(in_dim_node, hidden_dim)
        self.layers = nn.ModuleList([GraphTransformerLayer(hidden_dim, hidden_dim, n_heads) for _ in range(L)])
        self.MLP_layer = nn.Sequential(nn.Linear(hidden_dim, hidden_dim // 2), nn.ReLU(), nn.Linear(hidden_dim // 2, n_classes))

    def forward(self, h, edge_index, h_lap_pos_enc):
        h = self.embedding_h(h)
        h = h + self.embedding_lap_pos_enc(h_lap_pos_enc.float())
        for conv in self.layers:
            h = conv(h, edge_index)
        return self.MLP_layer(h)

    def loss(self, pred, label):
        weight = class_balanced_weight(label, self.n_classes)
        criterion = nn.CrossEntropyLoss(weight=weight)
        return criterion(pred, label)


class SBMTrainStep(nn.Module):
    """``train_epoch`` of the SBM node-classification pipeline for one batched graph, without the optimizer."""

    def __init__(self):
        super().__init__()
        self.model = GraphTransformerNet()

    def forward(self, batch_x, edge_index, batch_lap_pos_enc, batch_labels):
        sign_flip = torch.rand(batch_lap_pos_enc.size(1))
        sign_flip[sign_flip >= 0.5] = 1.0
        sign_flip[sign_flip < 0.5] = -1.0
        batch_lap_pos_enc = batch_lap_pos_enc * sign_flip.unsqueeze(0)
        batch_scores = self.model(batch_x, edge_index, batch_lap_pos_enc)
        loss = self.model.loss(batch_scores, batch_labels)
        accuracy = (batch_scores.argmax(-1) == batch_labels).float().mean()
        return loss, accuracy


def build_graph_transformer_sbm():
    seeded(1218)
    model = SBMTrainStep()
    # a two-community stochastic block model graph, 14 nodes
    n = 14
    community = torch.tensor([0] * 7 + [1] * 7)
    probs = torch.where(community[:, None] == community[None, :], 0.5, 0.08)
    upper = torch.triu(torch.rand(n, n) < probs, diagonal=1)
    adj = upper | upper.T
    edge_index = adj.nonzero().T.contiguous()
    lap_pe = laplacian_positional_encoding(edge_index, n, 4)
    x = torch.randint(0, 4, (n,))
    labels = torch.randint(0, 2, (n,))  # class 2 of 3 is absent from this graph
    return model, (x, edge_index, lap_pe, labels)
