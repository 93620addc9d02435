"""Tabular learning: dreamquark-ai/tabnet's ``TabNet`` (categorical ``EmbeddingGenerator``, ghost batch norm,
GLU feature transformers, the attentive transformer with its sparsemax ``autograd.Function``, the mask
sparsity loss) under ``TabModel._train_batch``'s loss and batch logs."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded


def initialize_non_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(4 * input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


def initialize_glu(module, input_dim, output_dim):
    gain_value = np.sqrt((input_dim + output_dim) / np.sqrt(input_dim))
    torch.nn.init.xavier_normal_(module.weight, gain=gain_value)


def _make_ix_like(input, dim=0):
    d = input.size(dim)
    rho = torch.arange(1, d + 1, device=input.device, dtype=input.dtype)
    view = [1] * input.dim()
    view[0] = -1
    return rho.view(view).transpose(0, dim)


class SparsemaxFunction(torch.autograd.Function):
    """Sparsemax (Martins & Astudillo, 2016): the Euclidean projection onto the simplex."""

    @staticmethod
    def forward(ctx, input, dim=-1):
        ctx.dim = dim
        max_val, _ = input.max(dim=dim, keepdim=True)
        input = input - max_val  # same numerical stability trick as for softmax
        tau, supp_size = SparsemaxFunction._threshold_and_support(input, dim=dim)
        output = torch.clamp(input - tau, min=0)
        ctx.save_for_backward(supp_size, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        supp_size, output = ctx.saved_tensors
        dim = ctx.dim
        grad_input = grad_output.clone()
        grad_input[output == 0] = 0
        v_hat = grad_input.sum(dim=dim) / supp_size.to(output.dtype).squeeze()
        v_hat = v_hat.unsqueeze(dim)
        grad_input = torch.where(output != 0, grad_input - v_hat, grad_input)
        return grad_input, None

    @staticmethod
    def _threshold_and_support(input, dim=-1):
        input_srt, _ = torch.sort(input, descending=True, dim=dim)
        input_cumsum = input_srt.cumsum(dim) - 1
        rhos = _make_ix_like(input, dim)
        support = rhos * input_srt > input_cumsum
        support_size = support.sum(dim=dim).unsqueeze(dim)
        tau = input_cumsum.gather(dim, support_size - 1)
        tau /= support_size.to(input.dtype)
        return tau, support_size


class Sparsemax(nn.Module):
    def __init__(self, dim=-1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return SparsemaxFunction.apply(input, self.dim)


class GBN(nn.Module):
    """Ghost batch norm: batch norm over virtual batches."""

    def __init__(self, input_dim, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.virtual_batch_size = virtual_batch_size
        self.bn = nn.BatchNorm1d(input_dim, momentum=momentum)

    def forward(self, x):
        chunks = x.chunk(int(np.ceil(x.shape[0] / self.virtual_batch_size)), 0)
        return torch.cat([self.bn(x_) for x_ in chunks], dim=0)


class GLU_Layer(nn.Module):
    def __init__(self, input_dim, output_dim, fc=None, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.output_dim = output_dim
        self.fc = fc if fc is not None else nn.Linear(input_dim, 2 * output_dim, bias=False)
        initialize_glu(self.fc, input_dim, 2 * output_dim)
        self.bn = GBN(2 * output_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)

    def forward(self, x):
        x = self.bn(self.fc(x))
        return torch.mul(x[:, : self.output_dim], torch.sigmoid(x[:, self.output_dim:]))


class GLU_Block(nn.Module):
    def __init__(self, input_dim, output_dim, n_glu=2, first=False, shared_layers=None, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.first, self.n_glu = first, n_glu
        self.glu_layers = nn.ModuleList()
        for glu_id in range(n_glu):
            fc = shared_layers[glu_id] if shared_layers else None
            in_dim = input_dim if glu_id == 0 else output_dim
            self.glu_layers.append(GLU_Layer(in_dim, output_dim, fc=fc, virtual_batch_size=virtual_batch_size, momentum=momentum))

    def forward(self, x):
        scale = torch.sqrt(torch.FloatTensor([0.5]).to(x.device))
        if self.first:  # the first layer of the block has no scale multiplication
            x = self.glu_layers[0](x)
            layers_left = range(1, self.n_glu)
        else:
            layers_left = range(self.n_glu)
        for glu_id in layers_left:
            x = torch.add(x, self.glu_layers[glu_id](x))
            x = x * scale
        return x


class FeatTransformer(nn.Module):
    def __init__(self, input_dim, output_dim, shared_layers, n_glu_independent=2, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.shared = GLU_Block(input_dim, output_dim, n_glu=len(shared_layers), first=True, shared_layers=shared_layers,
                                virtual_batch_size=virtual_batch_size, momentum=momentum)
        self.specifics = GLU_Block(output_dim, output_dim, n_glu=n_glu_independent, first=False,
                                   virtual_batch_size=virtual_batch_size, momentum=momentum)

    def forward(self, x):
        return self.specifics(self.shared(x))


class AttentiveTransformer(nn.Module):
    def __init__(self, input_dim, group_dim, virtual_batch_size=8, momentum=0.02):
        super().__init__()
        self.fc = nn.Linear(input_dim, group_dim, bias=False)
        initialize_non_glu(self.fc, input_dim, group_dim)
        self.bn = GBN(group_dim, virtual_batch_size=virtual_batch_size, momentum=momentum)
        self.selector = Sparsemax(dim=-1)

    def forward(self, priors, processed_feat):
        x = self.bn(self.fc(processed_feat))
        x = torch.mul(x, priors)
        return self.selector(x)


class TabNetEncoder(nn.Module):
    def __init__(self, input_dim, n_d=8, n_a=8, n_steps=2, gamma=1.3, n_shared=1, n_independent=1, epsilon=1e-15,
                 virtual_batch_size=8):
        super().__init__()
        self.input_dim, self.n_d, self.n_a, self.n_steps, self.gamma, self.epsilon = input_dim, n_d, n_a, n_steps, gamma, epsilon
        self.initial_bn = nn.BatchNorm1d(input_dim, momentum=0.01)
        shared_feat_transform = nn.ModuleList()
        for i in range(n_shared):
            shared_feat_transform.append(nn.Linear(input_dim if i == 0 else n_d + n_a, 2 * (n_d + n_a), bias=False))
        self.initial_splitter = FeatTransformer(input_dim, n_d + n_a, shared_feat_transform, n_glu_independent=n_independent,
                                                virtual_batch_size=virtual_batch_size)
        self.feat_transformers = nn.ModuleList()
        self.att_transformers = nn.ModuleList()
        for _ in range(n_steps):
            self.feat_transformers.append(FeatTransformer(input_dim, n_d + n_a, shared_feat_transform, n_glu_independent=n_independent,
                                                          virtual_batch_size=virtual_batch_size))
            self.att_transformers.append(AttentiveTransformer(n_a, input_dim, virtual_batch_size=virtual_batch_size))

    def forward(self, x, prior=None):
        x = self.initial_bn(x)
        bs = x.shape[0]
        if prior is None:
            prior = torch.ones((bs, self.input_dim)).to(x.device)
        M_loss = 0
        att = self.initial_splitter(x)[:, self.n_d:]
        steps_output = []
        for step in range(self.n_steps):
            M = self.att_transformers[step](prior, att)
            M_loss += torch.mean(torch.sum(torch.mul(M, torch.log(M + self.epsilon)), dim=1))
            prior = torch.mul(self.gamma - M, prior)  # update prior
            masked_x = torch.mul(M, x)
            out = self.feat_transformers[step](masked_x)
            steps_output.append(F.relu(out[:, : self.n_d]))
            att = out[:, self.n_d:]
        return steps_output, M_loss / self.n_steps


class EmbeddingGenerator(nn.Module):
    """Embed the categorical columns, pass the continuous ones through, in column order."""

    def __init__(self, input_dim, cat_dims, cat_idxs, cat_emb_dims):
        super().__init__()
        self.skip_embedding = not cat_dims
        self.post_embed_dim = int(input_dim + np.sum(cat_emb_dims) - len(cat_emb_dims))
        self.embeddings = nn.ModuleList([nn.Embedding(cat_dim, emb_dim) for cat_dim, emb_dim in zip(cat_dims, cat_emb_dims, strict=True)])
        # record continuous indices
        self.continuous_idx = torch.ones(input_dim, dtype=torch.bool)
        self.continuous_idx[cat_idxs] = 0

    def forward(self, x):
        if self.skip_embedding:
            return x
        cols = []
        cat_feat_counter = 0
        for feat_init_idx, is_continuous in enumerate(self.continuous_idx):
            if is_continuous:  # BREAK: keep continuous_idx as a Python list of bools
                cols.append(x[:, feat_init_idx].float().view(-1, 1))
            else:
                cols.append(self.embeddings[cat_feat_counter](x[:, feat_init_idx].long()))
                cat_feat_counter += 1
        return torch.cat(cols, dim=1)


class TabNet(nn.Module):
    def __init__(self, input_dim, output_dim, cat_idxs, cat_dims, cat_emb_dim=3, **kwargs):
        super().__init__()
        self.embedder = EmbeddingGenerator(input_dim, cat_dims, cat_idxs, [cat_emb_dim] * len(cat_idxs))
        self.encoder = TabNetEncoder(self.embedder.post_embed_dim, **kwargs)
        self.final_mapping = nn.Linear(self.encoder.n_d, output_dim, bias=False)
        initialize_non_glu(self.final_mapping, self.encoder.n_d, output_dim)

    def forward(self, x):
        steps_output, M_loss = self.encoder(self.embedder(x))
        res = torch.sum(torch.stack(steps_output, dim=0), dim=0)
        return self.final_mapping(res), M_loss


class TabNetClassifierStep(nn.Module):
    """``TabModel._train_batch`` without the optimizer: the loss it backpropagates and the batch logs it keeps."""

    def __init__(self, lambda_sparse=1e-3):
        super().__init__()
        self.network = TabNet(input_dim=6, output_dim=3, cat_idxs=[1, 4], cat_dims=[5, 4])
        self.lambda_sparse = lambda_sparse

    def forward(self, X, y):
        batch_logs = {"batch_size": X.shape[0]}
        output, M_loss = self.network(X)
        loss = F.cross_entropy(output, y.long())
        loss = loss - self.lambda_sparse * M_loss
        batch_logs["loss"] = loss.cpu().detach().numpy().item()  # BREAK must-not: the batch log holds a Python float
        return loss, output, batch_logs


def build_tabnet_step():
    seeded(1206)
    model = TabNetClassifierStep()
    X = torch.randn(16, 6)
    X[:, 1] = torch.randint(0, 5, (16,)).float()
    X[:, 4] = torch.randint(0, 4, (16,)).float()
    y = torch.randint(0, 3, (16,))
    return model, (X, y)
