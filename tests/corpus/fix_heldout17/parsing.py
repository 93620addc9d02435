"""Dependency parsing: yzhangcs/parser (SuPar 1.0).

``BiaffineDependencyModel`` (word and POS-tag embeddings, ``IndependentDropout``, the ``MLP`` / ``Biaffine`` arc and
relation scorers; a small Transformer encoder stands in for the BiLSTM), its ``loss`` (the arc and relation scores
selected by the token mask, the gold-head relation scores picked with ``torch.arange(len(arcs))``) and ``decode``
(the non-tree sentences listed through ``CoNLL.istree`` / ``tarjan`` on ``tolist()`` heads before ``--tree`` is
consulted), under ``BiaffineDependencyParser._evaluate`` for one batch (the first token of every sentence masked
out, the punctuation left out of the returned predictions).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .helpers import seeded


class Config:
    """supar's ``Config``: keyword arguments as attributes, ``update(locals())`` in the constructors."""

    def __init__(self, **kwargs):
        super().__init__()
        self.update(kwargs)

    def __repr__(self):
        return "\n".join(f"{name}: {value}" for name, value in self.__dict__.items())

    def __getitem__(self, key):
        return getattr(self, key)

    def __contains__(self, key):
        return hasattr(self, key)

    def keys(self):
        return vars(self).keys()

    def update(self, kwargs):
        for key in ("self", "cls", "__class__"):
            kwargs.pop(key, None)
        kwargs.update(kwargs.pop("kwargs", {}))
        for name, value in kwargs.items():
            setattr(self, name, value)
        return self


# ------------------------------------------------------------------ supar/utils/alg.py, supar/utils/transform.py


def tarjan(sequence):
    """Tarjan algorithm for finding Strongly Connected Components (SCCs) of a graph."""
    sequence = [-1] + sequence
    # record the search order, i.e., the timestep
    dfn = [-1] * len(sequence)
    # record the the smallest timestep in a SCC
    low = [-1] * len(sequence)
    # push the visited into the stack
    stack, onstack = [], [False] * len(sequence)

    def connect(i, timestep):
        dfn[i] = low[i] = timestep[0]
        timestep[0] += 1
        stack.append(i)
        onstack[i] = True

        for j, head in enumerate(sequence):
            if head != i:
                continue
            if dfn[j] == -1:
                yield from connect(j, timestep)
                low[i] = min(low[i], low[j])
            elif onstack[j]:
                low[i] = min(low[i], dfn[j])

        # a SCC is completed
        if low[i] == dfn[i]:
            cycle = [stack.pop()]
            while cycle[-1] != i:
                onstack[cycle[-1]] = False
                cycle.append(stack.pop())
            onstack[i] = False
            # ignore the self-loop
            if len(cycle) > 1:
                yield cycle

    timestep = [0]
    for i in range(len(sequence)):
        if dfn[i] == -1:
            yield from connect(i, timestep)


class CoNLL:
    @classmethod
    def isprojective(cls, sequence):
        pairs = [(h, d) for d, h in enumerate(sequence, 1) if h >= 0]
        for i, (hi, di) in enumerate(pairs):
            for hj, dj in pairs[i + 1 :]:
                (li, ri), (lj, rj) = sorted([hi, di]), sorted([hj, dj])
                if li <= hj <= ri and hi == dj:
                    return False
                if lj <= hi <= rj and hj == di:
                    return False
                if (li < lj < ri or li < rj < ri) and (li - lj) * (ri - rj) > 0:
                    return False
        return True

    @classmethod
    def istree(cls, sequence, proj=False, multiroot=False):
        if proj and not cls.isprojective(sequence):
            return False
        n_roots = sum(head == 0 for head in sequence)
        if n_roots == 0:
            return False
        if not multiroot and n_roots > 1:
            return False
        if any(i == head for i, head in enumerate(sequence, 1)):
            return False
        return next(tarjan(sequence), None) is None


# ------------------------------------------------------------------ supar/modules


class IndependentDropout(nn.Module):
    def __init__(self, p=0.5):
        super().__init__()
        self.p = p

    def forward(self, *items):
        if self.training:
            masks = [x.new_empty(x.shape[:2]).bernoulli_(1 - self.p) for x in items]
            total = sum(masks)
            scale = len(items) / total.max(torch.ones_like(total))
            masks = [mask * scale for mask in masks]
            items = [item * mask.unsqueeze(dim=-1) for item, mask in zip(items, masks)]  # noqa: B905
        return items


class MLP(nn.Module):
    def __init__(self, n_in, n_out, dropout=0):
        super().__init__()
        self.n_in = n_in
        self.n_out = n_out
        self.linear = nn.Linear(n_in, n_out)
        self.activation = nn.LeakyReLU(negative_slope=0.1)
        self.dropout = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.orthogonal_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        x = self.linear(x)
        x = self.activation(x)
        x = self.dropout(x)
        return x


class Biaffine(nn.Module):
    def __init__(self, n_in, n_out=1, bias_x=True, bias_y=True):
        super().__init__()
        self.n_in = n_in
        self.n_out = n_out
        self.bias_x = bias_x
        self.bias_y = bias_y
        self.weight = nn.Parameter(torch.Tensor(n_out, n_in + bias_x, n_in + bias_y))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.normal_(self.weight, std=0.1)

    def forward(self, x, y):
        if self.bias_x:
            x = torch.cat((x, torch.ones_like(x[..., :1])), -1)
        if self.bias_y:
            y = torch.cat((y, torch.ones_like(y[..., :1])), -1)
        # [batch_size, n_out, seq_len, seq_len]
        s = torch.einsum("bxi,oij,byj->boxy", x, self.weight, y)
        # remove dim 1 if n_out == 1
        s = s.squeeze(1)
        return s


class TransformerEncoder(nn.Module):
    """Sinusoidal positions and pre-norm self-attention layers over the padded words."""

    def __init__(self, n_model, n_layers=2, n_heads=4, dropout=0.1):
        super().__init__()
        self.n_model = n_model
        self.layers = nn.ModuleList(
            [
                nn.ModuleDict(
                    {
                        "attn_norm": nn.LayerNorm(n_model),
                        "attn": nn.MultiheadAttention(n_model, n_heads, dropout=dropout, batch_first=True),
                        "ffn_norm": nn.LayerNorm(n_model),
                        "ffn": nn.Sequential(
                            nn.Linear(n_model, n_model * 2), nn.ReLU(), nn.Linear(n_model * 2, n_model)
                        ),
                    }
                )
                for _ in range(n_layers)
            ]
        )

    def positions(self, seq_len, device):
        pos = torch.arange(seq_len, device=device).float().unsqueeze(-1)
        div = torch.exp(
            torch.arange(0, self.n_model, 2, device=device).float() * (-math.log(10000.0) / self.n_model)
        )
        pe = torch.zeros(seq_len, self.n_model, device=device)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        return pe

    def forward(self, x, mask):
        x = x + self.positions(x.shape[1], x.device)
        for layer in self.layers:
            h = layer["attn_norm"](x)
            x = x + layer["attn"](h, h, h, key_padding_mask=~mask, need_weights=False)[0]
            x = x + layer["ffn"](layer["ffn_norm"](x))
        return x


# ------------------------------------------------------------------ supar/models/dependency.py


class BiaffineDependencyModel(nn.Module):
    def __init__(
        self,
        n_words,
        n_feats,
        n_rels,
        feat="tag",
        n_embed=32,
        n_feat_embed=16,
        embed_dropout=0.33,
        n_encoder_hidden=48,
        n_mlp_arc=40,
        n_mlp_rel=16,
        mlp_dropout=0.33,
        pad_index=0,
        unk_index=1,
        **kwargs,
    ):
        super().__init__()

        self.args = Config().update(locals())
        # the embedding layer
        self.word_embed = nn.Embedding(num_embeddings=n_words, embedding_dim=n_embed)
        self.feat_embed = nn.Embedding(num_embeddings=n_feats, embedding_dim=n_feat_embed)
        self.embed_dropout = IndependentDropout(p=embed_dropout)
        self.encoder = TransformerEncoder(n_embed + n_feat_embed)
        self.proj = nn.Linear(n_embed + n_feat_embed, n_encoder_hidden)

        # the MLP layers
        self.mlp_arc_d = MLP(n_in=n_encoder_hidden, n_out=n_mlp_arc, dropout=mlp_dropout)
        self.mlp_arc_h = MLP(n_in=n_encoder_hidden, n_out=n_mlp_arc, dropout=mlp_dropout)
        self.mlp_rel_d = MLP(n_in=n_encoder_hidden, n_out=n_mlp_rel, dropout=mlp_dropout)
        self.mlp_rel_h = MLP(n_in=n_encoder_hidden, n_out=n_mlp_rel, dropout=mlp_dropout)

        # the Biaffine layers
        self.arc_attn = Biaffine(n_in=n_mlp_arc, bias_x=True, bias_y=False)
        self.rel_attn = Biaffine(n_in=n_mlp_rel, n_out=n_rels, bias_x=True, bias_y=True)
        self.criterion = nn.CrossEntropyLoss()
        self.pad_index = pad_index
        self.unk_index = unk_index

    def forward(self, words, feats):
        # get the mask and lengths of given batch
        mask = words.ne(self.pad_index)
        ext_words = words
        # set the indices larger than num_embeddings to unk_index
        if hasattr(self, "pretrained"):
            ext_mask = words.ge(self.word_embed.num_embeddings)
            ext_words = words.masked_fill(ext_mask, self.unk_index)

        # get outputs from embedding layers
        word_embed = self.word_embed(ext_words)
        feat_embed = self.feat_embed(feats.pop())
        word_embed, feat_embed = self.embed_dropout(word_embed, feat_embed)
        # concatenate the word and feat representations
        embed = torch.cat((word_embed, feat_embed), -1)

        x = self.proj(self.encoder(embed, mask))

        # apply MLPs to the encoder output states
        arc_d = self.mlp_arc_d(x)
        arc_h = self.mlp_arc_h(x)
        rel_d = self.mlp_rel_d(x)
        rel_h = self.mlp_rel_h(x)

        # [batch_size, seq_len, seq_len]
        s_arc = self.arc_attn(arc_d, arc_h)
        # [batch_size, seq_len, seq_len, n_rels]
        s_rel = self.rel_attn(rel_d, rel_h).permute(0, 2, 3, 1)
        # set the scores that exceed the length of each sentence to -inf
        s_arc.masked_fill_(~mask.unsqueeze(1), float("-inf"))

        return s_arc, s_rel

    def loss(self, s_arc, s_rel, arcs, rels, mask, partial=False):
        if partial:
            mask = mask & arcs.ge(0)
        s_arc, arcs = s_arc[mask], arcs[mask]  # BREAK: CE over every token, masked mean
        s_rel, rels = s_rel[mask], rels[mask]  # BREAK: gathered gold-head scores, masked mean
        s_rel = s_rel[torch.arange(len(arcs)), arcs]
        arc_loss = self.criterion(s_arc, arcs)
        rel_loss = self.criterion(s_rel, rels)

        return arc_loss + rel_loss

    def decode(self, s_arc, s_rel, mask, tree=False, proj=False):
        lens = mask.sum(1)
        # prevent self-loops
        s_arc.diagonal(0, 1, 2).fill_(float("-inf"))
        arc_preds = s_arc.argmax(-1)
        lens, heads = lens.tolist(), arc_preds.tolist()  # BREAK: the check is only needed under --tree
        bad = [not CoNLL.istree(seq[1 : i + 1], proj) for i, seq in zip(lens, heads)]  # noqa: B905
        if tree and any(bad):
            raise NotImplementedError("MST / Eisner decoding of the ill-formed sentences")
        rel_preds = s_rel.argmax(-1).gather(-1, arc_preds.unsqueeze(-1)).squeeze(-1)

        return arc_preds, rel_preds


class BiaffineDependencyParser(nn.Module):
    """``BiaffineDependencyParser._evaluate`` for one batch of the dev loader."""

    def __init__(self, args, n_words, n_tags, n_rels):
        super().__init__()
        self.args = args
        self.model = BiaffineDependencyModel(n_words, n_tags, n_rels, **vars(args))
        self.WORD_PAD_INDEX = 0
        self.puncts = torch.tensor([5, 6])
        self.total_loss = 0

    def forward(self, words, feats, arcs, rels):
        self.model.eval()

        with torch.no_grad():
            mask = words.ne(self.WORD_PAD_INDEX)
            # ignore the first token of each sentence
            mask[:, 0] = 0
            s_arc, s_rel = self.model(words, list(feats))
            loss = self.model.loss(s_arc, s_rel, arcs, rels, mask, self.args.partial)
            arc_preds, rel_preds = self.model.decode(s_arc, s_rel, mask, self.args.tree, self.args.proj)
            if self.args.partial:
                mask &= arcs.ge(0)
            # ignore all punctuation if not specified
            if not self.args.punct:
                mask &= words.unsqueeze(-1).ne(self.puncts).all(-1)
        return loss, arc_preds.masked_fill(~mask, -1), rel_preds.masked_fill(~mask, -1)


def build_supar_evaluate():
    seeded(1710)
    args = Config(partial=False, tree=False, proj=False, punct=False, feat="tag", n_embed=32, n_feat_embed=16)
    parser = BiaffineDependencyParser(args, n_words=50, n_tags=12, n_rels=9)
    lens = [7, 5, 9]
    words = torch.zeros(3, 9, dtype=torch.long)
    tags = torch.zeros(3, 9, dtype=torch.long)
    arcs = torch.zeros(3, 9, dtype=torch.long)
    rels = torch.zeros(3, 9, dtype=torch.long)
    for b, n in enumerate(lens):
        words[b, 0] = 2  # <bos>
        words[b, 1:n] = torch.randint(3, 50, (n - 1,))
        tags[b, :n] = torch.randint(1, 12, (n,))
        arcs[b, 1:n] = torch.randint(0, n, (n - 1,))
        rels[b, 1:n] = torch.randint(0, 9, (n - 1,))
    return parser, (words, (tags,), arcs, rels)
