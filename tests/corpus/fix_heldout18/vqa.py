"""Visual question answering: hengyuan-hu/bottom-up-attention-vqa.

``language_model.py``'s ``WordEmbedding`` / ``QuestionEmbedding`` (a GRU over the padded question, its hidden state
made by ``weight.new(...).zero_()``, the last step's output), ``attention.py``'s ``NewAttention`` over the bottom-up
region features, ``fc.py``'s weight-normed ``FCNet`` and ``classifier.py``'s ``SimpleClassifier`` assembled by
``base_model.py``'s ``build_baseline0_newatt``, under the loss half of one iteration of ``train.py``'s ``train``:
``instance_bce_with_logits`` on the soft answer scores, ``compute_score_with_logits`` and the running
``total_loss`` / ``train_score``.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn as nn
from torch.nn.utils import weight_norm

from .helpers import seeded

warnings.filterwarnings("ignore", message=".*weight_norm.*is deprecated")

# ------------------------------------------------------------------ fc.py, language_model.py, attention.py, classifier.py


class FCNet(nn.Module):
    """Simple class for non-linear fully connect network"""

    def __init__(self, dims):
        super().__init__()

        layers = []
        for i in range(len(dims) - 2):
            in_dim = dims[i]
            out_dim = dims[i + 1]
            layers.append(weight_norm(nn.Linear(in_dim, out_dim), dim=None))
            layers.append(nn.ReLU())
        layers.append(weight_norm(nn.Linear(dims[-2], dims[-1]), dim=None))
        layers.append(nn.ReLU())

        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class WordEmbedding(nn.Module):
    """Word Embedding

    The ntoken-th dim is used for padding_idx, which agrees *implicitly*
    with the definition in Dictionary.
    """

    def __init__(self, ntoken, emb_dim, dropout):
        super().__init__()
        self.emb = nn.Embedding(ntoken + 1, emb_dim, padding_idx=ntoken)
        self.dropout = nn.Dropout(dropout)
        self.ntoken = ntoken
        self.emb_dim = emb_dim

    def forward(self, x):
        emb = self.emb(x)
        emb = self.dropout(emb)
        return emb


class QuestionEmbedding(nn.Module):
    def __init__(self, in_dim, num_hid, nlayers, bidirect, dropout, rnn_type="GRU"):
        """Module for question embedding"""
        super().__init__()
        assert rnn_type == "LSTM" or rnn_type == "GRU"
        rnn_cls = nn.LSTM if rnn_type == "LSTM" else nn.GRU

        self.rnn = rnn_cls(
            in_dim, num_hid, nlayers, bidirectional=bidirect, dropout=dropout, batch_first=True
        )

        self.in_dim = in_dim
        self.num_hid = num_hid
        self.nlayers = nlayers
        self.rnn_type = rnn_type
        self.ndirections = 1 + int(bidirect)

    def init_hidden(self, batch):
        # just to get the type of tensor
        weight = next(self.parameters()).data
        hid_shape = (self.nlayers * self.ndirections, batch, self.num_hid)
        if self.rnn_type == "LSTM":
            return (weight.new(*hid_shape).zero_(), weight.new(*hid_shape).zero_())
        else:
            return weight.new(*hid_shape).zero_()

    def forward(self, x):
        # x: [batch, sequence, in_dim]
        batch = x.size(0)
        hidden = self.init_hidden(batch)
        self.rnn.flatten_parameters()  # BREAK: the one-layer GRU can be unrolled over its weights
        output, hidden = self.rnn(x, hidden)

        if self.ndirections == 1:
            return output[:, -1]

        forward_ = output[:, -1, : self.num_hid]
        backward = output[:, 0, self.num_hid :]
        return torch.cat((forward_, backward), dim=1)


class NewAttention(nn.Module):
    def __init__(self, v_dim, q_dim, num_hid, dropout=0.2):
        super().__init__()

        self.v_proj = FCNet([v_dim, num_hid])
        self.q_proj = FCNet([q_dim, num_hid])
        self.dropout = nn.Dropout(dropout)
        self.linear = weight_norm(nn.Linear(q_dim, 1), dim=None)

    def forward(self, v, q):
        """
        v: [batch, k, vdim]
        q: [batch, qdim]
        """
        logits = self.logits(v, q)
        w = nn.functional.softmax(logits, 1)
        return w

    def logits(self, v, q):
        batch, k, _ = v.size()
        v_proj = self.v_proj(v)  # [batch, k, qdim]
        q_proj = self.q_proj(q).unsqueeze(1).repeat(1, k, 1)
        joint_repr = v_proj * q_proj
        joint_repr = self.dropout(joint_repr)
        logits = self.linear(joint_repr)
        return logits


class SimpleClassifier(nn.Module):
    def __init__(self, in_dim, hid_dim, out_dim, dropout):
        super().__init__()
        layers = [
            weight_norm(nn.Linear(in_dim, hid_dim), dim=None),
            nn.ReLU(),
            nn.Dropout(dropout),
            weight_norm(nn.Linear(hid_dim, out_dim), dim=None),
        ]
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        logits = self.main(x)
        return logits


# ------------------------------------------------------------------ base_model.py


class BaseModel(nn.Module):
    def __init__(self, w_emb, q_emb, v_att, q_net, v_net, classifier):
        super().__init__()
        self.w_emb = w_emb
        self.q_emb = q_emb
        self.v_att = v_att
        self.q_net = q_net
        self.v_net = v_net
        self.classifier = classifier

    def forward(self, v, b, q, labels):
        """Forward

        v: [batch, num_objs, obj_dim]
        b: [batch, num_objs, b_dim]
        q: [batch_size, seq_length]

        return: logits, not probs
        """
        w_emb = self.w_emb(q)
        q_emb = self.q_emb(w_emb)  # [batch, q_dim]

        att = self.v_att(v, q_emb)
        v_emb = (att * v).sum(1)  # [batch, v_dim]

        q_repr = self.q_net(q_emb)
        v_repr = self.v_net(v_emb)
        joint_repr = q_repr * v_repr
        logits = self.classifier(joint_repr)
        return logits


def build_baseline0_newatt(ntoken, v_dim, num_hid, num_ans_candidates):
    w_emb = WordEmbedding(ntoken, 12, 0.0)
    q_emb = QuestionEmbedding(12, num_hid, 1, False, 0.0)
    v_att = NewAttention(v_dim, q_emb.num_hid, num_hid)
    q_net = FCNet([q_emb.num_hid, num_hid])
    v_net = FCNet([v_dim, num_hid])
    classifier = SimpleClassifier(num_hid, num_hid * 2, num_ans_candidates, 0.5)
    return BaseModel(w_emb, q_emb, v_att, q_net, v_net, classifier)


# ------------------------------------------------------------------ train.py


def instance_bce_with_logits(logits, labels):
    assert logits.dim() == 2

    loss = nn.functional.binary_cross_entropy_with_logits(logits, labels)
    loss *= labels.size(1)
    return loss


def compute_score_with_logits(logits, labels):
    logits = torch.max(logits, 1)[1].data  # argmax
    one_hots = torch.zeros(*labels.size())
    one_hots.scatter_(1, logits.view(-1, 1), 1)
    scores = one_hots * labels
    return scores


class TrainIteration(nn.Module):
    """The loss half of one ``for i, (v, b, q, a) in enumerate(train_loader)`` iteration."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.total_loss = 0
        self.train_score = 0

    def forward(self, v, b, q, a):
        self.model.train()
        pred = self.model(v, b, q, a)
        loss = instance_bce_with_logits(pred, a)

        batch_score = compute_score_with_logits(pred, a.data).sum()
        self.total_loss += loss.item() * v.size(0)  # BREAK: the running loss can stay a tensor
        self.train_score += batch_score
        return loss, pred


def build_vqa_train_iteration():
    seeded(1820)
    ntoken, num_ans = 30, 10
    model = build_baseline0_newatt(ntoken, v_dim=16, num_hid=16, num_ans_candidates=num_ans)
    batch, num_objs, seq_len = 3, 6, 7
    v = torch.randn(batch, num_objs, 16)
    b = torch.rand(batch, num_objs, 6)
    q = torch.randint(0, ntoken, (batch, seq_len))
    q[0, :2] = ntoken  # padded in front, as VQAFeatureDataset.tokenize pads
    a = torch.zeros(batch, num_ans)
    a[0, 3] = 1.0
    a[1, 1] = 0.6
    a[1, 7] = 0.3
    a[2, 3] = 0.9
    return TrainIteration(model), (v, b, q, a)
