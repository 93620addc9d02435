"""Efficient attention: lucidrains/performer-pytorch's ``PerformerLM`` (FAVOR+ ``FastAttention`` with the
``softmax_kernel`` feature map over a ``gaussian_orthogonal_random_matrix`` projection, ``linear_attention``) and the
``ProjectionUpdater`` that redraws every projection matrix once ``calls_since_last_redraw`` (a buffer) reaches
``feature_redraw_interval`` in training (einops' ``rearrange`` / ``repeat`` spelled with torch's views)."""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


def exists(val):
    return val is not None


def default(val, d):
    return val if exists(val) else d


def get_module_device(module):
    return next(module.parameters()).device


def find_modules(nn_module, type):
    return [module for module in nn_module.modules() if isinstance(module, type)]


def softmax_kernel(data, *, projection_matrix, is_query, normalize_data=True, eps=1e-4, device=None):
    b, h, *_ = data.shape

    data_normalizer = (data.shape[-1] ** -0.25) if normalize_data else 1.0

    ratio = projection_matrix.shape[0] ** -0.5

    projection = projection_matrix.expand(b, h, *projection_matrix.shape)  # repeat(projection_matrix, 'j d -> b h j d', b = b, h = h)
    projection = projection.type_as(data)

    data_dash = torch.einsum("...id,...jd->...ij", (data_normalizer * data), projection)

    diag_data = data**2
    diag_data = torch.sum(diag_data, dim=-1)
    diag_data = (diag_data / 2.0) * (data_normalizer**2)
    diag_data = diag_data.unsqueeze(dim=-1)

    if is_query:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=-1, keepdim=True).detach()) + eps)
    else:
        data_dash = ratio * (torch.exp(data_dash - diag_data - torch.amax(data_dash, dim=(-1, -2), keepdim=True).detach()) + eps)

    return data_dash.type_as(data)


def orthogonal_matrix_chunk(cols, device=None):
    unstructured_block = torch.randn((cols, cols), device=device)
    q, r = torch.linalg.qr(unstructured_block.cpu(), mode="reduced")
    q, r = map(lambda t: t.to(device), (q, r))
    return q.t()


def gaussian_orthogonal_random_matrix(nb_rows, nb_columns, scaling=0, device=None):
    nb_full_blocks = int(nb_rows / nb_columns)

    block_list = []

    for _ in range(nb_full_blocks):
        q = orthogonal_matrix_chunk(nb_columns, device=device)
        block_list.append(q)

    remaining_rows = nb_rows - nb_full_blocks * nb_columns
    if remaining_rows > 0:
        q = orthogonal_matrix_chunk(nb_columns, device=device)
        block_list.append(q[:remaining_rows])

    final_matrix = torch.cat(block_list)

    if scaling == 0:
        multiplier = torch.randn((nb_rows, nb_columns), device=device).norm(dim=1)
    elif scaling == 1:
        multiplier = math.sqrt(float(nb_columns)) * torch.ones((nb_rows,), device=device)
    else:
        raise ValueError(f"Invalid scaling {scaling}")

    return torch.diag(multiplier) @ final_matrix


def linear_attention(q, k, v):
    k_cumsum = k.sum(dim=-2)
    D_inv = 1.0 / torch.einsum("...nd,...d->...n", q, k_cumsum.type_as(q))
    context = torch.einsum("...nd,...ne->...de", k, v)
    out = torch.einsum("...de,...nd,...n->...ne", context, q, D_inv)
    return out


class FastAttention(nn.Module):
    def __init__(self, dim_heads, nb_features=None, ortho_scaling=0, causal=False):
        super().__init__()
        nb_features = default(nb_features, int(dim_heads * math.log(dim_heads)))

        self.dim_heads = dim_heads
        self.nb_features = nb_features
        self.ortho_scaling = ortho_scaling

        self.create_projection = partial(gaussian_orthogonal_random_matrix, nb_rows=self.nb_features, nb_columns=dim_heads, scaling=ortho_scaling)
        projection_matrix = self.create_projection()
        self.register_buffer("projection_matrix", projection_matrix)
        self.causal = causal

    @torch.no_grad()
    def redraw_projection_matrix(self, device):
        projections = self.create_projection(device=device)
        self.projection_matrix.copy_(projections)
        del projections

    def forward(self, q, k, v):
        device = q.device
        create_kernel = partial(softmax_kernel, projection_matrix=self.projection_matrix, device=device)
        q = create_kernel(q, is_query=True)
        k = create_kernel(k, is_query=False)
        out = linear_attention(q, k, v)
        return out


class ProjectionUpdater(nn.Module):
    def __init__(self, instance, feature_redraw_interval):
        super().__init__()
        self.instance = instance
        self.feature_redraw_interval = feature_redraw_interval
        self.register_buffer("calls_since_last_redraw", torch.tensor(0))

    def fix_projections_(self):
        self.feature_redraw_interval = None

    def redraw_projections(self):
        model = self.instance

        if not self.training:
            return

        if exists(self.feature_redraw_interval) and self.calls_since_last_redraw >= self.feature_redraw_interval:  # BREAK: a Python-int call counter (or a where between the redrawn and the kept matrices) decides without reading the buffer back
            device = get_module_device(model)

            fast_attentions = find_modules(model, FastAttention)
            for fast_attention in fast_attentions:
                fast_attention.redraw_projection_matrix(device)

            self.calls_since_last_redraw.zero_()
            return

        self.calls_since_last_redraw += 1


class SelfAttention(nn.Module):
    def __init__(self, dim, heads=2, dim_head=8, nb_features=None):
        super().__init__()
        inner_dim = dim_head * heads
        self.fast_attention = FastAttention(dim_head, nb_features)
        self.heads = heads
        self.to_q = nn.Linear(dim, inner_dim)
        self.to_k = nn.Linear(dim, inner_dim)
        self.to_v = nn.Linear(dim, inner_dim)
        self.to_out = nn.Linear(inner_dim, dim)

    def forward(self, x):
        b, n, _, h = *x.shape, self.heads
        q, k, v = self.to_q(x), self.to_k(x), self.to_v(x)
        q, k, v = (t.view(b, n, h, -1).transpose(1, 2) for t in (q, k, v))  # rearrange(t, 'b n (h d) -> b h n d', h = h)
        out = self.fast_attention(q, k, v)
        out = out.transpose(1, 2).reshape(b, n, -1)  # rearrange(out, 'b h n d -> b n (h d)')
        return self.to_out(out)


class Performer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, feature_redraw_interval=1000, auto_check_redraw=True):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([nn.LayerNorm(dim), SelfAttention(dim, heads, dim_head), nn.LayerNorm(dim),
                                              nn.Sequential(nn.Linear(dim, dim * 4), nn.GELU(), nn.Linear(dim * 4, dim))]))
        self.auto_check_redraw = auto_check_redraw
        self.proj_updater = ProjectionUpdater(self.layers, feature_redraw_interval)

    def fix_projection_matrices_(self):
        self.proj_updater.feature_redraw_interval = None

    def forward(self, x):
        if self.auto_check_redraw:
            self.proj_updater.redraw_projections()
        for norm1, attn, norm2, ff in self.layers:
            x = x + attn(norm1(x))
            x = x + ff(norm2(x))
        return x


class PerformerLM(nn.Module):
    def __init__(self, *, num_tokens, max_seq_len, dim, depth, heads, dim_head=8, feature_redraw_interval=4):
        super().__init__()
        self.max_seq_len = max_seq_len
        self.token_emb = nn.Embedding(num_tokens, dim)
        self.pos_emb = nn.Embedding(max_seq_len, dim)
        self.dropout = nn.Dropout(0.0)
        self.performer = Performer(dim, depth, heads, dim_head, feature_redraw_interval=feature_redraw_interval)
        self.norm = nn.LayerNorm(dim)
        self.to_out = nn.Linear(dim, num_tokens)

    def forward(self, x, labels=None):
        b, n, device = *x.shape, x.device  # noqa: F841
        assert n <= self.max_seq_len, f"sequence length {n} must be less than the max sequence length {self.max_seq_len}"

        # token and positional embeddings
        t = torch.arange(n, device=device)
        x = self.token_emb(x)
        x += self.pos_emb(t)
        x = self.dropout(x)

        # performer layers
        x = self.performer(x)

        # norm and to logits
        x = self.norm(x)
        logits = self.to_out(x)
        if labels is None:
            return logits
        return F.cross_entropy(logits.transpose(1, 2), labels)


def build_performer_lm():
    seeded(1615)
    model = PerformerLM(num_tokens=24, max_seq_len=16, dim=16, depth=2, heads=2).train()
    model.performer.proj_updater.calls_since_last_redraw.fill_(4)  # the interval is reached on this step
    x = torch.randint(0, 24, (2, 12))
    return model, (x[:, :-1], x[:, 1:])
