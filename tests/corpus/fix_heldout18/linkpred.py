"""Graph link prediction: zfjsail/gae-pytorch (the PyTorch port of tkipf/gae).

``gae/model.py``'s ``GCNModelVAE`` (``GraphConvolution`` layers through ``torch.spmm`` on the normalised
adjacency, kept dense here, the reparameterisation, ``InnerProductDecoder``), ``gae/optimizer.py``'s ``loss_function`` (the
``pos_weight``-ed reconstruction scaled by ``norm`` plus the KL term) and ``gae/utils.py``'s ``get_roc_score`` on the
held-out positive and sampled negative edges, under one epoch of ``gae/train.py``'s ``gae_for`` (the printed line,
``mu.data.numpy()`` kept as the embedding).  ``mask_test_edges`` / ``preprocess_graph`` run in the builder, in numpy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.nn.parameter import Parameter

from .helpers import average_precision_score, roc_auc_score, seeded

# ------------------------------------------------------------------ gae/layers.py


class GraphConvolution(nn.Module):
    """
    Simple GCN layer, similar to https://arxiv.org/abs/1609.02907
    """

    def __init__(self, in_features, out_features, dropout=0.0, act=F.relu):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.dropout = dropout
        self.act = act
        self.weight = Parameter(torch.FloatTensor(in_features, out_features))
        self.reset_parameters()

    def reset_parameters(self):
        torch.nn.init.xavier_uniform_(self.weight)

    def forward(self, input, adj):
        input = F.dropout(input, self.dropout, self.training)
        support = torch.mm(input, self.weight)
        output = torch.spmm(adj, support)
        output = self.act(output)
        return output

    def __repr__(self):
        return self.__class__.__name__ + " (" + str(self.in_features) + " -> " + str(self.out_features) + ")"


# ------------------------------------------------------------------ gae/model.py


class GCNModelVAE(nn.Module):
    def __init__(self, input_feat_dim, hidden_dim1, hidden_dim2, dropout):
        super().__init__()
        self.gc1 = GraphConvolution(input_feat_dim, hidden_dim1, dropout, act=F.relu)
        self.gc2 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.gc3 = GraphConvolution(hidden_dim1, hidden_dim2, dropout, act=lambda x: x)
        self.dc = InnerProductDecoder(dropout, act=lambda x: x)

    def encode(self, x, adj):
        hidden1 = self.gc1(x, adj)
        return self.gc2(hidden1, adj), self.gc3(hidden1, adj)

    def reparameterize(self, mu, logvar):
        if self.training:
            std = torch.exp(logvar)
            eps = torch.randn_like(std)
            return eps.mul(std).add_(mu)
        else:
            return mu

    def forward(self, x, adj):
        mu, logvar = self.encode(x, adj)
        z = self.reparameterize(mu, logvar)
        return self.dc(z), mu, logvar


class InnerProductDecoder(nn.Module):
    """Decoder for using inner product for prediction."""

    def __init__(self, dropout, act=torch.sigmoid):
        super().__init__()
        self.dropout = dropout
        self.act = act

    def forward(self, z):
        z = F.dropout(z, self.dropout, training=self.training)
        adj = self.act(torch.mm(z, z.t()))
        return adj


# ------------------------------------------------------------------ gae/optimizer.py


def loss_function(preds, labels, mu, logvar, n_nodes, norm, pos_weight):
    cost = norm * F.binary_cross_entropy_with_logits(preds, labels, pos_weight=pos_weight)

    # see Appendix B from VAE paper:
    # Kingma and Welling. Auto-Encoding Variational Bayes. ICLR, 2014
    # https://arxiv.org/abs/1312.6114
    # 0.5 * sum(1 + log(sigma^2) - mu^2 - sigma^2)
    KLD = -0.5 / n_nodes * torch.mean(torch.sum(1 + 2 * logvar - mu.pow(2) - logvar.exp().pow(2), 1))
    return cost + KLD


# ------------------------------------------------------------------ gae/utils.py


def get_roc_score(emb, adj_orig, edges_pos, edges_neg):
    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    # Predict on test set of edges
    adj_rec = np.dot(emb, emb.T)
    preds = []
    pos = []
    for e in edges_pos:
        preds.append(sigmoid(adj_rec[e[0], e[1]]))  # BREAK: gather all the edges' scores at once
        pos.append(adj_orig[e[0], e[1]])

    preds_neg = []
    neg = []
    for e in edges_neg:
        preds_neg.append(sigmoid(adj_rec[e[0], e[1]]))
        neg.append(adj_orig[e[0], e[1]])

    preds_all = np.hstack([preds, preds_neg])
    labels_all = np.hstack([np.ones(len(preds)), np.zeros(len(preds_neg))])
    roc_score = roc_auc_score(labels_all, preds_all)
    ap_score = average_precision_score(labels_all, preds_all)

    return roc_score, ap_score


def mask_test_edges(adj, rng):
    """The train / validation / test split of the upper-triangle edges, with as many sampled non-edges."""
    edges = np.stack(np.nonzero(np.triu(adj, 1)), axis=1)
    num_test = int(np.floor(edges.shape[0] / 10.0))
    num_val = int(np.floor(edges.shape[0] / 20.0))
    all_edge_idx = rng.permutation(edges.shape[0])
    val_edges = edges[all_edge_idx[:num_val]]
    test_edges = edges[all_edge_idx[num_val : num_val + num_test]]
    train_edges = edges[all_edge_idx[num_val + num_test :]]

    def sample_false(n):
        false = []
        while len(false) < n:
            i, j = rng.randint(0, adj.shape[0], size=2)
            if i == j or adj[i, j] or [i, j] in false or [j, i] in false:
                continue
            false.append([i, j])
        return np.array(false)

    adj_train = np.zeros_like(adj)
    adj_train[train_edges[:, 0], train_edges[:, 1]] = 1
    adj_train = adj_train + adj_train.T
    return adj_train, train_edges, val_edges, sample_false(num_val), test_edges, sample_false(num_test)


def preprocess_graph(adj):
    adj_ = adj + np.eye(adj.shape[0])
    rowsum = adj_.sum(1)
    degree_mat_inv_sqrt = np.diag(np.power(rowsum, -0.5))
    adj_normalized = adj_.dot(degree_mat_inv_sqrt).transpose().dot(degree_mat_inv_sqrt)
    return torch.from_numpy(adj_normalized.astype(np.float32))


# ------------------------------------------------------------------ gae/train.py


class GAEEpoch(nn.Module):
    """One pass of ``gae_for``'s ``for epoch in range(args.epochs)`` loop."""

    def __init__(self, args, feat_dim, n_nodes):
        super().__init__()
        self.model = GCNModelVAE(feat_dim, args.hidden1, args.hidden2, args.dropout)
        self.optimizer = optim.Adam(self.model.parameters(), lr=args.lr)
        self.n_nodes = n_nodes

    def forward(
        self, epoch, features, adj_norm, adj_label, norm, pos_weight, adj_orig, val_edges, val_edges_false
    ):
        model, optimizer = self.model, self.optimizer
        model.train()
        optimizer.zero_grad()  # BREAK: the optimizer holds exactly the model's parameters
        recovered, mu, logvar = model(features, adj_norm)
        loss = loss_function(
            preds=recovered,
            labels=adj_label,
            mu=mu,
            logvar=logvar,
            n_nodes=self.n_nodes,
            norm=norm,
            pos_weight=pos_weight,
        )
        loss.backward()  # BREAK must-not: the backward pass cannot be traced
        optimizer.step()

        hidden_emb = mu.data.numpy()
        roc_curr, ap_curr = get_roc_score(hidden_emb, adj_orig, val_edges, val_edges_false)

        print("Epoch:", f"{epoch + 1:04d}", "train_loss=", f"{loss.item():.5f}")  # BREAK must-not: printed
        return hidden_emb, roc_curr, ap_curr


def build_gae_epoch():
    seeded(1805)
    rng = np.random.RandomState(1805)

    class Args:
        hidden1 = 16
        hidden2 = 8
        lr = 0.01
        dropout = 0.0

    n_nodes = 30
    # two communities, denser inside
    block = (np.arange(n_nodes) < 15).astype(np.int64)
    p = np.where(block[:, None] == block[None, :], 0.35, 0.05)
    adj = np.triu((rng.rand(n_nodes, n_nodes) < p).astype(np.float64), 1)
    adj = adj + adj.T
    adj_orig = adj.copy()
    adj_train, _, val_edges, val_edges_false, _, _ = mask_test_edges(adj, rng)
    adj_norm = preprocess_graph(adj_train)
    adj_label = torch.FloatTensor(adj_train + np.eye(n_nodes))
    pos_weight = torch.tensor(float(n_nodes * n_nodes - adj_train.sum()) / adj_train.sum())
    norm = n_nodes * n_nodes / float((n_nodes * n_nodes - adj_train.sum()) * 2)
    features = torch.eye(n_nodes)
    m = GAEEpoch(Args, n_nodes, n_nodes)
    return m, (0, features, adj_norm, adj_label, norm, pos_weight, adj_orig, val_edges, val_edges_false)
