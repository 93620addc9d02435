"""Tabular: somepago/saint's supervised training step (``embed_data_mask``: categorical ids offset into one
embedding table, one small MLP per continuous column, missing entries replaced by their column's mask embedding
through boolean indexing; the column-attention ``Transformer`` with GEGLU feed-forwards; the CLS token's
representation through ``mlpfory``)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ saint models/model.py + augmentations.py


class simple_MLP(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(dims[0], dims[1]), nn.ReLU(), nn.Linear(dims[1], dims[2]))

    def forward(self, x):
        if len(x.shape) == 1:
            x = x.view(x.size(0), -1)
        x = self.layers(x)
        return x


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, dim * mult * 2), GEGLU(), nn.Dropout(dropout), nn.Linear(dim * mult, dim))

    def forward(self, x, **kwargs):
        return self.net(x, **kwargs)


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=16, dropout=0.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim_head**-0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Linear(inner_dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        h = self.heads
        b, n, _ = x.shape
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        # rearrange 'b n (h d) -> b h n d'
        q, k, v = (t.reshape(b, n, h, -1).transpose(1, 2) for t in (q, k, v))
        sim = torch.einsum("b h i d, b h j d -> b h i j", q, k) * self.scale
        attn = sim.softmax(dim=-1)
        out = torch.einsum("b h i j, b h j d -> b h i d", attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, num_tokens, dim, depth, heads, dim_head, attn_dropout, ff_dropout):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual(PreNorm(dim, Attention(dim, heads=heads, dim_head=dim_head, dropout=attn_dropout))),
                Residual(PreNorm(dim, FeedForward(dim, dropout=ff_dropout))),
            ]))

    def forward(self, x, x_cont=None):
        if x_cont is not None:
            x = torch.cat((x, x_cont), dim=1)
        for attn, ff in self.layers:
            x = attn(x)
            x = ff(x)
        return x


class SAINT(nn.Module):
    def __init__(self, *, categories, num_continuous, dim, depth, heads, dim_head=16, num_special_tokens=0,
                 attn_dropout=0.0, ff_dropout=0.0, cont_embeddings="MLP", y_dim=2):
        super().__init__()
        assert all(map(lambda n: n > 0, categories)), "number of each category must be positive"
        # categories related calculations
        self.num_categories = len(categories)
        self.num_unique_categories = sum(categories)
        # create category embeddings table
        self.num_special_tokens = num_special_tokens
        self.total_tokens = self.num_unique_categories + num_special_tokens
        # for automatically offsetting unique category ids to the correct position in the categories embedding table
        categories_offset = F.pad(torch.tensor(list(categories)), (1, 0), value=num_special_tokens)
        categories_offset = categories_offset.cumsum(dim=-1)[:-1]
        self.register_buffer("categories_offset", categories_offset)

        self.num_continuous = num_continuous
        self.dim = dim
        self.cont_embeddings = cont_embeddings
        self.simple_MLP = nn.ModuleList([simple_MLP([1, 100, self.dim]) for _ in range(self.num_continuous)])
        self.transformer = Transformer(num_tokens=self.total_tokens, dim=dim, depth=depth, heads=heads, dim_head=dim_head,
                                       attn_dropout=attn_dropout, ff_dropout=ff_dropout)
        self.embeds = nn.Embedding(self.total_tokens, self.dim)

        cat_mask_offset = F.pad(torch.Tensor(self.num_categories).fill_(2).type(torch.int8), (1, 0), value=0)
        cat_mask_offset = cat_mask_offset.cumsum(dim=-1)[:-1]
        con_mask_offset = F.pad(torch.Tensor(self.num_continuous).fill_(2).type(torch.int8), (1, 0), value=0)
        con_mask_offset = con_mask_offset.cumsum(dim=-1)[:-1]
        self.register_buffer("cat_mask_offset", cat_mask_offset)
        self.register_buffer("con_mask_offset", con_mask_offset)
        self.mask_embeds_cat = nn.Embedding(self.num_categories * 2, self.dim)
        self.mask_embeds_cont = nn.Embedding(self.num_continuous * 2, self.dim)
        self.mlpfory = simple_MLP([dim, 1000, y_dim])


def embed_data_mask(x_categ, x_cont, cat_mask, con_mask, model):
    device = x_cont.device
    x_categ = x_categ + model.categories_offset.type_as(x_categ)
    x_categ_enc = model.embeds(x_categ)
    n1, n2 = x_cont.shape
    _, n3 = x_categ.shape
    if model.cont_embeddings == "MLP":
        x_cont_enc = torch.empty(n1, n2, model.dim)
        for i in range(model.num_continuous):
            x_cont_enc[:, i, :] = model.simple_MLP[i](x_cont[:, i])
    else:
        raise Exception("This case should not work!")

    x_cont_enc = x_cont_enc.to(device)
    cat_mask_temp = cat_mask + model.cat_mask_offset.type_as(cat_mask)
    con_mask_temp = con_mask + model.con_mask_offset.type_as(con_mask)

    cat_mask_temp = model.mask_embeds_cat(cat_mask_temp)
    con_mask_temp = model.mask_embeds_cont(con_mask_temp)
    x_categ_enc[cat_mask == 0] = cat_mask_temp[cat_mask == 0]  # BREAK: write the mask embeddings in with torch.where(cat_mask == 0 broadcast over the embedding dim, ...) instead of boolean indexing
    x_cont_enc[con_mask == 0] = con_mask_temp[con_mask == 0]  # BREAK: the same torch.where for the continuous columns

    return x_categ, x_categ_enc, x_cont_enc


class SaintTrainStep(nn.Module):
    """One batch of ``train.py``'s supervised loop (classification), up to the backward."""

    def __init__(self, categories, num_continuous):
        super().__init__()
        self.model = SAINT(categories=categories, num_continuous=num_continuous, dim=8, depth=1, heads=2, dim_head=4,
                           attn_dropout=0.1, ff_dropout=0.1, y_dim=2)
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, x_categ, x_cont, y_gts, cat_mask, con_mask):
        # We are converting the data to embeddings in the next step
        _, x_categ_enc, x_cont_enc = embed_data_mask(x_categ, x_cont, cat_mask, con_mask, self.model)
        reps = self.model.transformer(x_categ_enc, x_cont_enc)
        # select only the representations corresponding to CLS token and apply mlp on it in the next step to get the predictions.
        y_reps = reps[:, 0, :]
        y_outs = self.model.mlpfory(y_reps)
        loss = self.criterion(y_outs, y_gts.squeeze())
        return loss, y_outs


def build_saint_train():
    seeded(1410)
    categories = [1, 3, 5, 4]  # the CLS column first, then three categorical columns
    n = 6
    x_categ = torch.stack([torch.zeros(n, dtype=torch.long)] + [torch.randint(c, (n,)) for c in categories[1:]], 1)
    x_cont = torch.randn(n, 3)
    cat_mask = torch.ones(n, 4, dtype=torch.long)
    con_mask = torch.ones(n, 3, dtype=torch.long)
    cat_mask[1, 2] = cat_mask[4, 3] = 0  # missing categorical entries (NaN in the csv)
    con_mask[0, 1] = con_mask[3, 0] = con_mask[5, 2] = 0
    x_cont = x_cont * con_mask  # the data loader fills the missing continuous values with 0
    y = torch.randint(2, (n, 1))
    return SaintTrainStep(categories, 3).train(), (x_categ, x_cont, y, cat_mask, con_mask)
