"""Retrieval and ranking: a two-tower retrieval model with in-batch negatives, duplicate candidates scored once
and a log-Q sampling correction; DIN's target attention over a user's behaviour sequence (DeepCTR style);
and SimCLR's NT-Xent loss over two augmented views with false negatives from repeated images removed."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import make_pad_mask, seeded

# --------------------------------------------------------------------------- two-tower retrieval


class UserTower(nn.Module):
    def __init__(self, num_users: int, num_items: int, dim: int) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(num_users, dim)
        self.history = nn.EmbeddingBag(num_items, dim, mode="mean")
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 32), nn.ReLU(), nn.Linear(32, dim))

    def forward(self, user_ids, hist_items, hist_offsets):
        return self.mlp(torch.cat([self.user_emb(user_ids), self.history(hist_items, hist_offsets)], dim=-1))


class ItemTower(nn.Module):
    def __init__(self, num_items: int, num_categories: int, dim: int) -> None:
        super().__init__()
        self.item_emb = nn.Embedding(num_items, dim)
        self.cat_emb = nn.Embedding(num_categories, dim)
        self.mlp = nn.Sequential(nn.Linear(2 * dim, 32), nn.ReLU(), nn.Linear(32, dim))

    def forward(self, item_ids, item_categories):
        return self.mlp(torch.cat([self.item_emb(item_ids), self.cat_emb(item_categories[item_ids])], dim=-1))


class TwoTowerRetrieval(nn.Module):
    def __init__(
        self,
        num_users: int = 30,
        num_items: int = 40,
        num_categories: int = 5,
        dim: int = 16,
        temperature: float = 0.1,
    ) -> None:
        super().__init__()
        self.query_tower = UserTower(num_users, num_items, dim)
        self.candidate_tower = ItemTower(num_items, num_categories, dim)
        self.temperature = temperature
        g = seeded(12)
        counts = torch.randint(1, 100, (num_items,), generator=g).float()
        self.register_buffer("item_log_q", torch.log(counts / counts.sum()))
        self.register_buffer("item_categories", torch.randint(0, num_categories, (num_items,), generator=g))

    def forward(self, user_ids, hist_items, hist_offsets, item_ids):
        q = F.normalize(self.query_tower(user_ids, hist_items, hist_offsets), dim=-1)
        # popular items show up several times in a batch: score each candidate once, so that a row's
        # positive is not also one of its in-batch negatives
        candidates, target = torch.unique(item_ids, return_inverse=True)  # BREAK: mask duplicate columns
        c = F.normalize(self.candidate_tower(candidates, self.item_categories), dim=-1)
        logits = q @ c.t() / self.temperature
        logits = logits - self.item_log_q[candidates]  # sampling-bias correction (Yi et al., 2019)
        loss = F.cross_entropy(logits, target)
        recall_at_1 = (logits.argmax(dim=1) == target).float().mean()
        return loss, recall_at_1


def build_two_tower():
    torch.manual_seed(980)
    model = TwoTowerRetrieval()
    g = seeded(981)
    B = 10
    user_ids = torch.randint(0, 30, (B,), generator=g)
    hist_lens = torch.randint(1, 5, (B,), generator=g)
    hist_items = torch.randint(0, 40, (int(hist_lens.sum()),), generator=g)
    hist_offsets = torch.cat([torch.zeros(1, dtype=torch.long), hist_lens.cumsum(0)[:-1]])
    item_ids = torch.tensor([3, 17, 3, 8, 21, 17, 3, 30, 11, 8])
    return model, (user_ids, hist_items, hist_offsets, item_ids)


# --------------------------------------------------------------------------- DIN


class LocalActivationUnit(nn.Module):
    def __init__(self, hidden_units: tuple[int, ...] = (16, 8), embedding_dim: int = 8) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_dim = 4 * embedding_dim
        for h in hidden_units:
            layers += [nn.Linear(in_dim, h), nn.PReLU()]
            in_dim = h
        self.dnn = nn.Sequential(*layers)
        self.dense = nn.Linear(hidden_units[-1], 1)

    def forward(self, query: torch.Tensor, user_behavior: torch.Tensor) -> torch.Tensor:
        # query ad            : size -> batch_size * 1 * embedding_size
        # user behavior       : size -> batch_size * time_seq_len * embedding_size
        user_behavior_len = user_behavior.size(1)
        queries = query.expand(-1, user_behavior_len, -1)
        attention_input = torch.cat(
            [queries, user_behavior, queries - user_behavior, queries * user_behavior], dim=-1
        )
        attention_output = self.dnn(attention_input)
        attention_score = self.dense(attention_output)  # [B, T, 1]
        return attention_score


class AttentionSequencePoolingLayer(nn.Module):
    def __init__(self, embedding_dim: int = 8) -> None:
        super().__init__()
        self.local_att = LocalActivationUnit(embedding_dim=embedding_dim)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, keys_length: torch.Tensor) -> torch.Tensor:
        keys_masks = make_pad_mask(keys_length)  # [B, T], True on padding
        attention_score = self.local_att(query, keys)  # [B, T, 1]
        outputs = torch.transpose(attention_score, 1, 2)  # [B, 1, T]
        outputs = outputs.masked_fill(keys_masks.unsqueeze(1), 0.0)
        outputs = torch.matmul(outputs, keys)  # [B, 1, E]
        return outputs


class DIN(nn.Module):
    def __init__(self, num_users: int = 20, num_items: int = 50, embedding_dim: int = 8) -> None:
        super().__init__()
        self.user_emb = nn.Embedding(num_users, embedding_dim)
        self.item_emb = nn.Embedding(num_items, embedding_dim, padding_idx=0)
        self.attention = AttentionSequencePoolingLayer(embedding_dim)
        self.dnn = nn.Sequential(nn.Linear(3 * embedding_dim, 32), nn.PReLU(), nn.Linear(32, 1))

    def forward(self, user_ids, target_items, hist_items, hist_len, labels):
        # the loader pads every history to the same maximum length: drop the columns no row of this batch uses
        max_len = int(hist_len.max())  # BREAK: don't trim; mask with maxlen=hist_items.size(1)
        hist_items = hist_items[:, :max_len]

        query = self.item_emb(target_items).unsqueeze(1)
        keys = self.item_emb(hist_items)
        interest = self.attention(query, keys, hist_len).squeeze(1)
        x = torch.cat([self.user_emb(user_ids), query.squeeze(1), interest], dim=-1)
        logits = self.dnn(x).squeeze(-1)
        loss = F.binary_cross_entropy_with_logits(logits, labels)
        return loss, torch.sigmoid(logits)


def build_din_history():
    torch.manual_seed(990)
    model = DIN()
    g = seeded(991)
    B, T = 6, 12
    hist_len = torch.tensor([3, 9, 5, 1, 7, 4])
    hist_items = torch.randint(1, 50, (B, T), generator=g) * (torch.arange(T)[None] < hist_len[:, None])
    user_ids = torch.randint(0, 20, (B,), generator=g)
    target_items = torch.randint(1, 50, (B,), generator=g)
    labels = torch.randint(0, 2, (B,), generator=g).float()
    return model, (user_ids, target_items, hist_items, hist_len, labels)


# --------------------------------------------------------------------------- SimCLR NT-Xent


class NT_Xent(nn.Module):
    def __init__(self, batch_size: int, temperature: float, world_size: int = 1) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.world_size = world_size

        self.mask = self.mask_correlated_samples(batch_size, world_size)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")
        self.similarity_f = nn.CosineSimilarity(dim=2)

    def mask_correlated_samples(self, batch_size: int, world_size: int) -> torch.Tensor:
        N = 2 * batch_size * world_size
        mask = torch.ones((N, N), dtype=bool)
        mask = mask.fill_diagonal_(0)
        for i in range(batch_size * world_size):
            mask[i, batch_size * world_size + i] = 0
            mask[batch_size * world_size + i, i] = 0
        return mask

    def forward(self, z_i: torch.Tensor, z_j: torch.Tensor, image_ids: torch.Tensor) -> torch.Tensor:
        """
        We do not sample negative examples explicitly.
        Instead, given a positive pair, similar to (Chen et al., 2017), we treat the other 2(N - 1) augmented examples within a minibatch as negative examples.
        """
        N = 2 * self.batch_size * self.world_size

        z = torch.cat((z_i, z_j), dim=0)

        sim = self.similarity_f(z.unsqueeze(1), z.unsqueeze(0)) / self.temperature

        sim_i_j = torch.diag(sim, self.batch_size * self.world_size)
        sim_j_i = torch.diag(sim, -self.batch_size * self.world_size)

        # the sampler draws with replacement: another view of the same image is not a negative
        ids = torch.cat((image_ids, image_ids))
        false_negatives = (ids[:, None] == ids[None, :]) & self.mask
        sim = sim.masked_fill(false_negatives, float("-inf"))

        # We have 2N samples, but with Distributed training every GPU gets N examples too, resulting in: 2xNxN
        positive_samples = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)
        negative_samples = sim[self.mask].reshape(N, -1)  # BREAK: CE over the row, diagonal at -inf

        labels = torch.zeros(N).to(positive_samples.device).long()
        logits = torch.cat((positive_samples, negative_samples), dim=1)
        loss = self.criterion(logits, labels)
        loss /= N
        return loss


class SimCLR(nn.Module):
    def __init__(self, in_dim: int = 24, projection_dim: int = 8, batch_size: int = 6) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, 32))
        self.projector = nn.Sequential(
            nn.Linear(32, 32, bias=False), nn.ReLU(), nn.Linear(32, projection_dim, bias=False)
        )
        self.criterion = NT_Xent(batch_size, temperature=0.5)

    def forward(self, x_i, x_j, image_ids):
        h_i, h_j = self.encoder(x_i), self.encoder(x_j)
        z_i, z_j = self.projector(h_i), self.projector(h_j)
        return self.criterion(z_i, z_j, image_ids)


def build_simclr_ntxent():
    torch.manual_seed(1000)
    model = SimCLR()
    g = seeded(1001)
    images = torch.randn(6, 24, generator=g)
    image_ids = torch.tensor([0, 1, 2, 3, 1, 4])
    images[4] = images[1]
    x_i = images + 0.1 * torch.randn(6, 24, generator=g)
    x_j = images + 0.1 * torch.randn(6, 24, generator=g)
    return model, (x_i, x_j, image_ids)
