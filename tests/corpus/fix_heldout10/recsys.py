"""Recommender systems: a DCN-v2 ranking model over TorchRec-style jagged sparse features (one
concatenated ``values`` tensor with per-feature, per-sample ``lengths``), a two-tower retrieval step with
in-batch negatives, the sampling-bias (logQ) correction from streaming frequency estimation (Yi et al.,
RecSys 2019) and removal of accidental hits, and LightGCN's full-ranking evaluation that excludes each user's
training items before taking recall / NDCG at k."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- DCN-v2 over jagged features


class EmbeddingBagCollection(nn.Module):
    """One sum-pooled table per sparse feature, fed from a KeyedJaggedTensor's ``values`` / ``lengths``."""

    def __init__(self, tables: dict[str, int], dim: int) -> None:
        super().__init__()
        self.embedding_bags = nn.ModuleDict({name: nn.EmbeddingBag(n, dim, mode="sum") for name, n in tables.items()})

    def forward(self, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # lengths: [num_features, batch]; values: every feature's ids one after the other
        length_per_key = lengths.sum(dim=1).tolist()  # BREAK: bag every feature from global offsets instead of splitting
        per_key = values.split(length_per_key)
        pooled = []
        for f, (_name, ebc) in enumerate(self.embedding_bags.items()):
            offsets = torch.cat([lengths.new_zeros(1), lengths[f].cumsum(0)[:-1]])
            pooled.append(ebc(per_key[f], offsets))
        return torch.cat(pooled, dim=1)


class CrossNetV2(nn.Module):
    """DCN-v2's low-rank mixture-of-experts cross layers: x_{l+1} = x_0 * sum_i g_i(x_l) E_i(x_l) + x_l."""

    def __init__(self, in_features: int, num_layers: int = 2, num_experts: int = 2, low_rank: int = 8) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.U = nn.ParameterList(nn.Parameter(torch.randn(num_experts, in_features, low_rank) * 0.05) for _ in range(num_layers))
        self.V = nn.ParameterList(nn.Parameter(torch.randn(num_experts, in_features, low_rank) * 0.05) for _ in range(num_layers))
        self.C = nn.ParameterList(nn.Parameter(torch.randn(num_experts, low_rank, low_rank) * 0.05) for _ in range(num_layers))
        self.bias = nn.ParameterList(nn.Parameter(torch.zeros(in_features, 1)) for _ in range(num_layers))
        self.gates = nn.ModuleList(nn.Linear(in_features, 1, bias=False) for _ in range(num_experts))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x_0 = x0.unsqueeze(2)  # (bs, in_features, 1)
        x_l = x_0
        for i in range(self.num_layers):
            output_of_experts = []
            gating_score_of_experts = []
            for expert_id in range(len(self.gates)):
                gating_score_of_experts.append(self.gates[expert_id](x_l.squeeze(2)))
                v_x = torch.matmul(self.V[i][expert_id].t(), x_l)  # (bs, low_rank, 1)
                v_x = torch.tanh(v_x)
                v_x = torch.matmul(self.C[i][expert_id], v_x)
                v_x = torch.tanh(v_x)
                uv_x = torch.matmul(self.U[i][expert_id], v_x)  # (bs, in_features, 1)
                dot_ = uv_x + self.bias[i]
                dot_ = x_0 * dot_  # Hadamard-product
                output_of_experts.append(dot_.squeeze(2))
            output_of_experts = torch.stack(output_of_experts, 2)  # (bs, in_features, num_experts)
            gating_score_of_experts = torch.stack(gating_score_of_experts, 1)  # (bs, num_experts, 1)
            moe_out = torch.matmul(output_of_experts, gating_score_of_experts.softmax(1))
            x_l = moe_out + x_l  # (bs, in_features, 1)
        return x_l.squeeze(-1)


class DCNv2(nn.Module):
    def __init__(self, dense_in: int = 5, tables: dict[str, int] | None = None, dim: int = 8) -> None:
        super().__init__()
        tables = tables or {"user_id": 30, "item_id": 40, "category": 12}
        self.sparse_arch = EmbeddingBagCollection(tables, dim)
        self.dense_arch = nn.Sequential(nn.Linear(dense_in, dim), nn.ReLU())
        in_features = dim * (len(tables) + 1)
        self.crossnet = CrossNetV2(in_features)
        self.deep = nn.Sequential(nn.Linear(in_features, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU())
        self.over = nn.Linear(in_features + 8, 1)

    def forward(self, dense_features, values, lengths, labels):
        x0 = torch.cat([self.dense_arch(dense_features), self.sparse_arch(values, lengths)], dim=1)
        stacked = torch.cat([self.crossnet(x0), self.deep(x0)], dim=1)
        logits = self.over(stacked).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(logits, labels.float())
        return loss, logits.sigmoid()


def build_dcnv2_jagged():
    torch.manual_seed(1101)
    model = DCNv2()
    g = seeded(1102)
    batch = 4
    lengths = torch.tensor([[1, 1, 1, 1], [3, 0, 2, 4], [1, 2, 0, 1]])  # user_id, item_id (history), category
    sizes = [30, 40, 12]
    values = torch.cat([torch.randint(0, n, (int(lengths[f].sum()),), generator=g) for f, n in enumerate(sizes)])
    dense = torch.randn(batch, 5, generator=g)
    labels = torch.tensor([1, 0, 0, 1])
    return model, (dense, values, lengths, labels)


# --------------------------------------------------------------------------- two-tower retrieval with logQ


class StreamingFrequencyEstimator(nn.Module):
    """Estimates each item's sampling probability from the gap between the steps it is seen at."""

    def __init__(self, num_buckets: int = 97, alpha: float = 0.05) -> None:
        super().__init__()
        self.num_buckets = num_buckets
        self.alpha = alpha
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.register_buffer("A", torch.zeros(num_buckets))  # last step each bucket was seen
        self.register_buffer("B", torch.full((num_buckets,), 20.0))  # estimated steps between two sightings

    @torch.no_grad()
    def forward(self, item_ids: torch.Tensor) -> torch.Tensor:
        self.step += 1
        t = int(self.step)  # BREAK: keep the step a tensor
        h = item_ids % self.num_buckets
        self.B[h] = (1 - self.alpha) * self.B[h] + self.alpha * (t - self.A[h])
        self.A[h] = float(t)
        return 1.0 / self.B[h]


class Tower(nn.Module):
    def __init__(self, vocab: int, feat_dim: int, dim: int) -> None:
        super().__init__()
        self.id_emb = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(nn.Linear(dim + feat_dim, 32), nn.ReLU(), nn.Linear(32, dim))

    def forward(self, ids: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.mlp(torch.cat([self.id_emb(ids), feats], dim=-1)), dim=-1)


class TwoTowerRetrieval(nn.Module):
    def __init__(self, num_users: int = 50, num_items: int = 60, feat_dim: int = 4, dim: int = 16,
                 temperature: float = 0.05) -> None:
        super().__init__()
        self.query_tower = Tower(num_users, feat_dim, dim)
        self.candidate_tower = Tower(num_items, feat_dim, dim)
        self.item_features = nn.Parameter(torch.randn(num_items, feat_dim) * 0.1, requires_grad=False)
        self.frequency = StreamingFrequencyEstimator()
        self.temperature = temperature

    def forward(self, user_ids, user_feats, item_ids):
        query = self.query_tower(user_ids, user_feats)
        # popular items appear several times in a batch: embed each distinct item once
        unique_items, inverse = torch.unique(item_ids, return_inverse=True)  # BREAK: embed item_ids directly
        candidates = self.candidate_tower(unique_items, self.item_features[unique_items])[inverse]
        scores = query @ candidates.t() / self.temperature
        # sampling-bias correction: in-batch negatives are sampled proportionally to their frequency
        candidate_sampling_probability = self.frequency(item_ids)
        scores = scores - torch.log(candidate_sampling_probability).unsqueeze(0)
        # remove accidental hits: the same item elsewhere in the batch is not a negative
        duplicates = (item_ids.unsqueeze(0) == item_ids.unsqueeze(1)) & ~torch.eye(len(item_ids), dtype=torch.bool)
        scores = scores.masked_fill(duplicates, -1e9)
        labels = torch.arange(scores.size(0), device=scores.device)
        loss = F.cross_entropy(scores, labels)
        return loss, scores.detach()


def build_two_tower_logq():
    torch.manual_seed(1111)
    model = TwoTowerRetrieval()
    g = seeded(1112)
    user_ids = torch.randint(0, 50, (8,), generator=g)
    user_feats = torch.randn(8, 4, generator=g)
    item_ids = torch.tensor([3, 17, 3, 42, 8, 17, 59, 3])
    return model, (user_ids, user_feats, item_ids)


# --------------------------------------------------------------------------- LightGCN full-ranking evaluation


class LightGCN(nn.Module):
    def __init__(self, num_users: int, num_items: int, dim: int = 16, n_layers: int = 2) -> None:
        super().__init__()
        self.num_users = num_users
        self.num_items = num_items
        self.n_layers = n_layers
        self.embedding_user = nn.Embedding(num_users, dim)
        self.embedding_item = nn.Embedding(num_items, dim)
        nn.init.normal_(self.embedding_user.weight, std=0.1)
        nn.init.normal_(self.embedding_item.weight, std=0.1)
        self.register_buffer("Graph", torch.zeros(num_users + num_items, num_users + num_items))

    def set_graph(self, interactions: torch.Tensor) -> None:
        n = self.num_users + self.num_items
        adj = torch.zeros(n, n)
        adj[: self.num_users, self.num_users :] = interactions
        adj[self.num_users :, : self.num_users] = interactions.t()
        deg = adj.sum(1).clamp(min=1)
        d_inv_sqrt = deg.pow(-0.5)
        self.Graph.copy_(d_inv_sqrt[:, None] * adj * d_inv_sqrt[None, :])

    def computer(self):
        users_emb = self.embedding_user.weight
        items_emb = self.embedding_item.weight
        all_emb = torch.cat([users_emb, items_emb])
        embs = [all_emb]
        for _ in range(self.n_layers):
            all_emb = self.Graph @ all_emb
            embs.append(all_emb)
        light_out = torch.stack(embs, dim=1).mean(dim=1)
        return torch.split(light_out, [self.num_users, self.num_items])

    def getUsersRating(self, users):
        all_users, all_items = self.computer()
        users_emb = all_users[users.long()]
        return torch.sigmoid(torch.matmul(users_emb, all_items.t()))


class FullRankingEvaluator(nn.Module):
    def __init__(self, model: LightGCN, topks=(5, 10)) -> None:
        super().__init__()
        self.model = model
        self.topks = topks

    @torch.no_grad()
    def forward(self, users, train_pos, test_pos):
        # train_pos / test_pos: each user's items, padded with -1
        max_K = max(self.topks)
        rating = self.model.getUsersRating(users)
        # exclude the items the user trained on
        exclude_index, exclude_slot = (train_pos >= 0).nonzero(as_tuple=True)  # BREAK: scatter -inf through a padded column instead
        rating[exclude_index, train_pos[exclude_index, exclude_slot]] = -(1 << 10)
        _, rating_K = torch.topk(rating, k=max_K)
        hits = (rating_K.unsqueeze(-1) == test_pos.unsqueeze(1)).any(-1).float()  # [users, max_K]
        n_test = (test_pos >= 0).sum(1)
        results = {}
        for k in self.topks:
            right_pred = hits[:, :k].sum(1)
            recall = (right_pred / n_test.clamp(min=1)).sum()
            precision = right_pred.sum() / k
            # ideal DCG: the first min(k, n_test) ranks are all hits
            test_matrix = torch.zeros(len(users), k)
            for i, n in enumerate(n_test):
                test_matrix[i, : min(k, n)] = 1  # BREAK: compare arange(k) against n_test[:, None]
            idcg = (test_matrix / torch.log2(torch.arange(2, k + 2).float())).sum(1)
            dcg = (hits[:, :k] / torch.log2(torch.arange(2, k + 2).float())).sum(1)
            idcg[idcg == 0.0] = 1.0
            ndcg = (dcg / idcg).sum()
            results[f"recall@{k}"] = recall
            results[f"precision@{k}"] = precision
            results[f"ndcg@{k}"] = ndcg
        return results


def build_lightgcn_eval():
    torch.manual_seed(1121)
    num_users, num_items = 6, 20
    model = LightGCN(num_users, num_items)
    g = seeded(1122)
    interactions = (torch.rand(num_users, num_items, generator=g) < 0.2).float()
    model.set_graph(interactions)
    train_pos = torch.full((num_users, 6), -1)
    test_pos = torch.full((num_users, 4), -1)
    for u in range(num_users):
        items = interactions[u].nonzero().flatten()[:6]
        train_pos[u, : len(items)] = items
        test = torch.randperm(num_items, generator=g)[: 1 + u % 4]
        test_pos[u, : len(test)] = test
    users = torch.arange(num_users)
    return FullRankingEvaluator(model), (users, train_pos, test_pos)
