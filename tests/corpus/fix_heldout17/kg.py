"""Knowledge-graph link prediction: TimDettmers/ConvE.

``model.py``'s ``ConvE`` (the entity and relation embeddings stacked into a 2-D "image", ``bn0`` / conv / ``bn1`` /
fc / ``bn2``, scores against every entity plus the entity bias, sigmoid) and ``evaluation.py``'s
``ranking_and_hits`` in the filtered setting: for each triple the target's score saved with ``.item()``, every
known answer (the padded ``e2_multi`` lists) zeroed, the saved score written back, then the rank found in the
``argsort`` moved to numpy and the hits@1..10 lists, for the tail and the reversed (head) queries.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn import Parameter
from torch.nn.init import xavier_normal_

from .helpers import seeded


class ConvE(torch.nn.Module):
    def __init__(self, args, num_entities, num_relations):
        super().__init__()
        self.emb_e = torch.nn.Embedding(num_entities, args.embedding_dim, padding_idx=0)
        self.emb_rel = torch.nn.Embedding(num_relations, args.embedding_dim, padding_idx=0)
        self.inp_drop = torch.nn.Dropout(args.input_drop)
        self.hidden_drop = torch.nn.Dropout(args.hidden_drop)
        self.feature_map_drop = torch.nn.Dropout2d(args.feat_drop)
        self.loss = torch.nn.BCELoss()
        self.emb_dim1 = args.embedding_shape1
        self.emb_dim2 = args.embedding_dim // self.emb_dim1

        self.conv1 = torch.nn.Conv2d(1, 8, (3, 3), 1, 0, bias=args.use_bias)
        self.bn0 = torch.nn.BatchNorm2d(1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.bn2 = torch.nn.BatchNorm1d(args.embedding_dim)
        self.register_parameter("b", Parameter(torch.zeros(num_entities)))
        self.fc = torch.nn.Linear(args.hidden_size, args.embedding_dim)
        print(num_entities, num_relations)

    def init(self):
        xavier_normal_(self.emb_e.weight.data)
        xavier_normal_(self.emb_rel.weight.data)

    def forward(self, e1, rel):
        e1_embedded = self.emb_e(e1).view(-1, 1, self.emb_dim1, self.emb_dim2)
        rel_embedded = self.emb_rel(rel).view(-1, 1, self.emb_dim1, self.emb_dim2)

        stacked_inputs = torch.cat([e1_embedded, rel_embedded], 2)

        stacked_inputs = self.bn0(stacked_inputs)
        x = self.inp_drop(stacked_inputs)
        x = self.conv1(x)
        x = self.bn1(x)
        x = F.relu(x)
        x = self.feature_map_drop(x)
        x = x.view(x.shape[0], -1)
        x = self.fc(x)
        x = self.hidden_drop(x)
        x = self.bn2(x)
        x = F.relu(x)
        x = torch.mm(x, self.emb_e.weight.transpose(1, 0))
        x += self.b.expand_as(x)
        pred = torch.sigmoid(x)

        return pred


def ranking_and_hits(model, dev_rank_batcher, vocab, name):
    hits_left = []
    hits_right = []
    hits = []
    ranks = []
    ranks_left = []
    ranks_right = []
    for i in range(10):  # noqa: B007
        hits_left.append([])
        hits_right.append([])
        hits.append([])

    for _, str2var in enumerate(dev_rank_batcher):
        e1 = str2var["e1"]
        e2 = str2var["e2"]
        rel = str2var["rel"]
        rel_reverse = str2var["rel_eval"]
        e2_multi1 = str2var["e2_multi1"].float()
        e2_multi2 = str2var["e2_multi2"].float()
        pred1 = model.forward(e1, rel)
        pred2 = model.forward(e2, rel_reverse)
        pred1, pred2 = pred1.data, pred2.data
        e1, e2 = e1.data, e2.data
        e2_multi1, e2_multi2 = e2_multi1.data, e2_multi2.data
        batch_size = e1.shape[0]
        for i in range(batch_size):
            # these filters contain ALL labels
            filter1 = e2_multi1[i].long()
            filter2 = e2_multi2[i].long()

            # save the prediction that is relevant
            target_value1 = pred1[i, e2[i, 0].item()].item()  # BREAK: gather, scatter, rank by comparison
            target_value2 = pred2[i, e1[i, 0].item()].item()
            # zero all known cases (this are not interesting)
            # this corresponds to the filtered setting
            pred1[i][filter1] = 0.0
            pred2[i][filter2] = 0.0
            # write base the saved values
            pred1[i][e2[i]] = target_value1
            pred2[i][e1[i]] = target_value2

        # sort and rank
        max_values, argsort1 = torch.sort(pred1, 1, descending=True)
        max_values, argsort2 = torch.sort(pred2, 1, descending=True)

        argsort1 = argsort1.cpu().numpy()
        argsort2 = argsort2.cpu().numpy()
        for i in range(batch_size):
            # find the rank of the target entities
            rank1 = np.where(argsort1[i] == e2[i, 0].item())[0][0]
            rank2 = np.where(argsort2[i] == e1[i, 0].item())[0][0]
            # rank+1, since the lowest rank is rank 1 not rank 0
            ranks.append(rank1 + 1)
            ranks_left.append(rank1 + 1)
            ranks.append(rank2 + 1)
            ranks_right.append(rank2 + 1)

            # this could be done more elegantly, but here you go
            for hits_level in range(10):
                if rank1 <= hits_level:
                    hits[hits_level].append(1.0)
                    hits_left[hits_level].append(1.0)
                else:
                    hits[hits_level].append(0.0)
                    hits_left[hits_level].append(0.0)

                if rank2 <= hits_level:
                    hits[hits_level].append(1.0)
                    hits_right[hits_level].append(1.0)
                else:
                    hits[hits_level].append(0.0)
                    hits_right[hits_level].append(0.0)

    return {
        "hits@1": np.mean(hits[0]),
        "hits@3": np.mean(hits[2]),
        "hits@10": np.mean(hits[9]),
        "hits_left@10": np.mean(hits_left[9]),
        "hits_right@10": np.mean(hits_right[9]),
        "mean_rank_left": np.mean(ranks_left),
        "mean_rank_right": np.mean(ranks_right),
        "mean_rank": np.mean(ranks),
        "mrr": np.mean(1.0 / np.array(ranks)),
    }


class Evaluation(torch.nn.Module):
    """``main.py``'s evaluation epoch: the model in eval mode, ``ranking_and_hits`` on the dev rank batcher."""

    def __init__(self, args, num_entities, num_relations):
        super().__init__()
        self.model = ConvE(args, num_entities, num_relations)
        self.model.init()
        self.vocab = {"e1": list(range(num_entities)), "rel": list(range(num_relations))}

    def forward(self, dev_rank_batcher):
        self.model.eval()
        with torch.no_grad():
            return ranking_and_hits(self.model, dev_rank_batcher, self.vocab, "dev_evaluation")


def rank_batch(num_entities, num_relations, batch_size, max_known):
    """A batch as spodernet's ``StreamToBatch`` gives it: ids as [B, 1], the known answers padded with 0."""
    e1 = torch.randint(1, num_entities, (batch_size, 1))
    e2 = torch.randint(1, num_entities, (batch_size, 1))
    rel = torch.randint(1, num_relations // 2, (batch_size, 1))
    e2_multi1 = torch.randint(1, num_entities, (batch_size, max_known))
    e2_multi1[:, 0] = e2[:, 0]
    e2_multi1[:, max_known // 2 :] = 0
    e2_multi2 = torch.randint(1, num_entities, (batch_size, max_known))
    e2_multi2[:, 0] = e1[:, 0]
    e2_multi2[1:, max_known - 1 :] = 0
    return {
        "e1": e1,
        "e2": e2,
        "rel": rel,
        "rel_eval": rel + num_relations // 2,
        "e2_multi1": e2_multi1,
        "e2_multi2": e2_multi2,
    }


def build_conve_ranking():
    seeded(1705)
    args = argparse.Namespace(
        embedding_dim=32,
        embedding_shape1=4,
        input_drop=0.2,
        hidden_drop=0.3,
        feat_drop=0.2,
        use_bias=True,
        hidden_size=8 * 6 * 6,
        label_smoothing=0.1,
    )
    num_entities, num_relations = 60, 10
    m = Evaluation(args, num_entities, num_relations)
    batcher = [rank_batch(num_entities, num_relations, 4, 6), rank_batch(num_entities, num_relations, 4, 6)]
    return m, (batcher,)
