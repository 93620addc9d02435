"""Scientific models: the E(3)-equivariant diffusion model (EDM) training loss with its EGNN dynamics
(centre-of-gravity-free noise, masked atoms checked to stay zero, NaN velocities reset), ESM-1b's
forward with attention-derived contact prediction (APC-corrected, scored by precision at L / L2 / L5),
and an ODE-Net classifier integrated with an adaptive Bogacki-Shampine solver (torchdiffeq style)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import (
    assert_correctly_masked,
    remove_mean_with_mask,
    sample_center_gravity_zero_gaussian_with_mask,
    sample_gaussian_with_mask,
    seeded,
)

# --------------------------------------------------------------------------- EDM + EGNN


def unsorted_segment_sum(data, segment_ids, num_segments, normalization_factor, aggregation_method: str):
    """Custom PyTorch op to replicate TensorFlow's `unsorted_segment_sum`."""
    result_shape = (num_segments, data.size(1))
    result = data.new_full(result_shape, 0)  # Init empty result tensor.
    segment_ids = segment_ids.unsqueeze(-1).expand(-1, data.size(1))
    result.scatter_add_(0, segment_ids, data)
    if aggregation_method == "sum":
        result = result / normalization_factor
    if aggregation_method == "mean":
        norm = data.new_zeros(result.shape)
        norm.scatter_add_(0, segment_ids, data.new_ones(data.shape))
        norm[norm == 0] = 1
        result = result / norm
    return result


def coord2diff(x, edge_index, norm_constant=1):
    row, col = edge_index
    coord_diff = x[row] - x[col]
    radial = torch.sum((coord_diff) ** 2, 1).unsqueeze(1)
    norm = torch.sqrt(radial + 1e-8)
    coord_diff = coord_diff / (norm + norm_constant)
    return radial, coord_diff


class EquivariantBlock(nn.Module):
    def __init__(self, hidden_nf, normalization_factor=1, aggregation_method="sum"):
        super().__init__()
        self.edge_mlp = nn.Sequential(nn.Linear(2 * hidden_nf + 2, hidden_nf), nn.SiLU(), nn.Linear(hidden_nf, hidden_nf), nn.SiLU())
        self.node_mlp = nn.Sequential(nn.Linear(2 * hidden_nf, hidden_nf), nn.SiLU(), nn.Linear(hidden_nf, hidden_nf))
        layer = nn.Linear(hidden_nf, 1, bias=False)
        torch.nn.init.xavier_uniform_(layer.weight, gain=0.001)
        self.coord_mlp = nn.Sequential(nn.Linear(2 * hidden_nf + 2, hidden_nf), nn.SiLU(), layer)
        self.normalization_factor = normalization_factor
        self.aggregation_method = aggregation_method

    def forward(self, h, x, edge_index, node_mask, edge_mask, edge_attr):
        row, col = edge_index
        distances, coord_diff = coord2diff(x, edge_index)
        edge_in = torch.cat([h[row], h[col], distances, edge_attr], dim=1)
        m = self.edge_mlp(edge_in) * edge_mask
        agg = unsorted_segment_sum(m, row, h.size(0), self.normalization_factor, self.aggregation_method)
        h = (h + self.node_mlp(torch.cat([h, agg], dim=1))) * node_mask
        trans = coord_diff * torch.tanh(self.coord_mlp(edge_in)) * 15.0 * edge_mask
        x = (x + unsorted_segment_sum(trans, row, x.size(0), self.normalization_factor, self.aggregation_method)) * node_mask
        return h, x


class EGNN(nn.Module):
    def __init__(self, in_node_nf, hidden_nf, out_node_nf, n_layers=2):
        super().__init__()
        self.embedding = nn.Linear(in_node_nf, hidden_nf)
        self.embedding_out = nn.Linear(hidden_nf, out_node_nf)
        self.blocks = nn.ModuleList(EquivariantBlock(hidden_nf) for _ in range(n_layers))

    def forward(self, h, x, edge_index, node_mask=None, edge_mask=None):
        distances, _ = coord2diff(x, edge_index)
        h = self.embedding(h)
        for block in self.blocks:
            h, x = block(h, x, edge_index, node_mask, edge_mask, edge_attr=distances)
        h = self.embedding_out(h) * node_mask
        return h, x


class EGNN_dynamics_QM9(nn.Module):
    def __init__(self, in_node_nf, hidden_nf=16, n_dims=3, condition_time=True):
        super().__init__()
        self.egnn = EGNN(in_node_nf + 1, hidden_nf, in_node_nf + 1)
        self.n_dims = n_dims
        self._edges_dict = {}
        self.condition_time = condition_time

    def get_adj_matrix(self, n_nodes, batch_size, device):
        if n_nodes in self._edges_dict:
            edges_dic_b = self._edges_dict[n_nodes]
            if batch_size in edges_dic_b:
                return edges_dic_b[batch_size]
            # get edges for a single sample
            rows, cols = [], []
            for batch_idx in range(batch_size):
                for i in range(n_nodes):
                    for j in range(n_nodes):
                        rows.append(i + batch_idx * n_nodes)
                        cols.append(j + batch_idx * n_nodes)
            edges = [torch.tensor(rows, dtype=torch.long, device=device), torch.tensor(cols, dtype=torch.long, device=device)]
            edges_dic_b[batch_size] = edges
            return edges
        self._edges_dict[n_nodes] = {}
        return self.get_adj_matrix(n_nodes, batch_size, device)

    def forward(self, t, xh, node_mask, edge_mask):
        bs, n_nodes, dims = xh.shape
        h_dims = dims - self.n_dims
        edges = self.get_adj_matrix(n_nodes, bs, xh.device)
        node_mask = node_mask.view(bs * n_nodes, 1)
        edge_mask = edge_mask.view(bs * n_nodes * n_nodes, 1)
        xh = xh.view(bs * n_nodes, -1).clone() * node_mask
        x = xh[:, 0 : self.n_dims].clone()
        if h_dims == 0:
            h = torch.ones(bs * n_nodes, 1).to(xh.device)
        else:
            h = xh[:, self.n_dims :].clone()
        if self.condition_time:
            # t is different over the batch dimension.
            h_time = t.view(bs, 1).repeat(1, n_nodes)
            h_time = h_time.view(bs * n_nodes, 1)
            h = torch.cat([h, h_time], dim=1)
        h_final, x_final = self.egnn(h, x, edges, node_mask=node_mask, edge_mask=edge_mask)
        vel = (x_final - x) * node_mask  # This masking operation is redundant but just in case
        if self.condition_time:
            # Slice off last dimension which represented time.
            h_final = h_final[:, :-1]
        vel = vel.view(bs, n_nodes, -1)
        if torch.any(torch.isnan(vel)):  # BREAK: torch.where(isnan(vel).any(), zeros, vel); the warning is a diagnostic
            print("Warning: detected nan, resetting EGNN output to zero.")
            vel = torch.zeros_like(vel)
        vel = remove_mean_with_mask(vel, node_mask.view(bs, n_nodes, 1))
        h_final = h_final * node_mask
        h_final = h_final.view(bs, n_nodes, -1)
        return torch.cat([vel, h_final], dim=2)


def polynomial_schedule(timesteps: int, s=1e-4, power=3.0):
    steps = timesteps + 1
    x = np.linspace(0, steps, steps)
    alphas2 = (1 - np.power(x / steps, power)) ** 2
    alphas2 = np.concatenate([np.ones(1), alphas2])
    alphas_step = np.clip(alphas2[1:] / alphas2[:-1], a_min=0.001, a_max=1.0)
    alphas2 = np.cumprod(alphas_step, axis=0)[1:]
    precision = 1 - 2 * s
    return precision * alphas2 + s


class PredefinedNoiseSchedule(nn.Module):
    def __init__(self, timesteps, precision):
        super().__init__()
        self.timesteps = timesteps
        alphas2 = polynomial_schedule(timesteps, s=precision, power=2)
        sigmas2 = 1 - alphas2
        log_alphas2_to_sigmas2 = np.log(alphas2) - np.log(sigmas2)
        self.gamma = nn.Parameter(torch.from_numpy(-log_alphas2_to_sigmas2).float(), requires_grad=False)

    def forward(self, t):
        t_int = torch.round(t * self.timesteps).long()
        return self.gamma[t_int]


class EnVariationalDiffusion(nn.Module):
    def __init__(self, in_node_nf=5, n_dims=3, timesteps=50, noise_precision=1e-4):
        super().__init__()
        self.dynamics = EGNN_dynamics_QM9(in_node_nf)
        self.gamma = PredefinedNoiseSchedule(timesteps, noise_precision)
        self.in_node_nf = in_node_nf
        self.n_dims = n_dims
        self.T = timesteps

    def inflate_batch_array(self, array, target):
        target_shape = (array.size(0),) + (1,) * (len(target.size()) - 1)
        return array.view(target_shape)

    def sigma(self, gamma, target_tensor):
        return self.inflate_batch_array(torch.sqrt(torch.sigmoid(gamma)), target_tensor)

    def alpha(self, gamma, target_tensor):
        return self.inflate_batch_array(torch.sqrt(torch.sigmoid(-gamma)), target_tensor)

    def sample_combined_position_feature_noise(self, n_samples, n_nodes, node_mask):
        z_x = sample_center_gravity_zero_gaussian_with_mask(size=(n_samples, n_nodes, self.n_dims), device=node_mask.device, node_mask=node_mask)
        z_h = sample_gaussian_with_mask(size=(n_samples, n_nodes, self.in_node_nf), device=node_mask.device, node_mask=node_mask)
        return torch.cat([z_x, z_h], dim=2)

    def log_constants_p_x_given_z0(self, x, node_mask):
        batch_size = x.size(0)
        n_nodes = node_mask.squeeze(2).sum(1)  # N has shape [B]
        degrees_of_freedom_x = (n_nodes - 1) * self.n_dims
        zeros = torch.zeros((x.size(0), 1), device=x.device)
        gamma_0 = self.gamma(zeros)
        # Recall that sigma_x = sqrt(sigma_0^2 / alpha_0^2) = SNR(-0.5 gamma_0).
        log_sigma_x = 0.5 * gamma_0.view(batch_size)
        return degrees_of_freedom_x * (-log_sigma_x - 0.5 * math.log(2 * math.pi))

    def forward(self, x, h, node_mask, edge_mask):
        # Sample a timestep t.
        t_int = torch.randint(0, self.T + 1, size=(x.size(0), 1), device=x.device).float()
        t = t_int / self.T
        gamma_t = self.inflate_batch_array(self.gamma(t), x)
        alpha_t = self.alpha(gamma_t, x)
        sigma_t = self.sigma(gamma_t, x)
        # Sample zt ~ Normal(alpha_t x, sigma_t)
        eps = self.sample_combined_position_feature_noise(n_samples=x.size(0), n_nodes=x.size(1), node_mask=node_mask)
        xh = torch.cat([x, h], dim=2)
        z_t = alpha_t * xh + sigma_t * eps
        net_out = self.dynamics(t, z_t, node_mask, edge_mask)
        # the l2 training objective: SNR weights are 1
        error = ((eps - net_out) ** 2).sum(dim=(1, 2))
        loss_t = 0.5 * error
        neg_log_constants = -self.log_constants_p_x_given_z0(x, node_mask)
        return (loss_t + neg_log_constants).mean(), net_out


def check_mask_correct(variables, node_mask):
    for variable in variables:
        if len(variable) > 0:
            assert_correctly_masked(variable, node_mask)


class EDMTrainStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.generative_model = EnVariationalDiffusion()

    def forward(self, x, one_hot, node_mask, edge_mask):
        x = remove_mean_with_mask(x, node_mask)
        check_mask_correct([x, one_hot], node_mask)
        return self.generative_model(x, one_hot, node_mask, edge_mask)


def build_edm_egnn():
    torch.manual_seed(1601)
    g = seeded(1602)
    bs, n_nodes = 2, 5
    node_mask = torch.ones(bs, n_nodes, 1)
    node_mask[1, 3:] = 0  # the second molecule has 3 atoms
    edge_mask = node_mask.view(bs, 1, n_nodes) * node_mask.view(bs, n_nodes, 1)
    edge_mask = edge_mask * (1 - torch.eye(n_nodes)).unsqueeze(0)
    x = torch.randn(bs, n_nodes, 3, generator=g) * node_mask
    one_hot = F.one_hot(torch.randint(0, 5, (bs, n_nodes), generator=g), 5).float() * node_mask
    return EDMTrainStep(), (x, one_hot, node_mask, edge_mask)


# --------------------------------------------------------------------------- ESM contact prediction


def symmetrize(x):
    "Make layer symmetric in final two dimensions, used for contact prediction."
    return x + x.transpose(-1, -2)


def apc(x):
    "Perform average product correct, used for contact prediction."
    a1 = x.sum(-1, keepdims=True)
    a2 = x.sum(-2, keepdims=True)
    a12 = x.sum((-1, -2), keepdims=True)
    avg = a1 * a2
    avg.div_(a12)  # in-place to reduce memory
    return x - avg


class ContactPredictionHead(nn.Module):
    """Performs symmetrization, apc, and computes a logistic regression on the output features"""

    def __init__(self, in_features, prepend_bos=True, append_eos=True, eos_idx=2):
        super().__init__()
        self.prepend_bos = prepend_bos
        self.append_eos = append_eos
        self.eos_idx = eos_idx
        self.regression = nn.Linear(in_features, 1, bias=True)
        self.activation = nn.Sigmoid()

    def forward(self, tokens, attentions):
        # remove eos token attentions
        if self.append_eos:
            eos_mask = tokens.ne(self.eos_idx).to(attentions)
            eos_mask = eos_mask.unsqueeze(1) * eos_mask.unsqueeze(2)
            attentions = attentions * eos_mask[:, None, None, :, :]
            attentions = attentions[..., :-1, :-1]
        # remove cls token attentions
        if self.prepend_bos:
            attentions = attentions[..., 1:, 1:]
        batch_size, layers, heads, seqlen, _ = attentions.size()
        attentions = attentions.view(batch_size, layers * heads, seqlen, seqlen)
        # features: B x C x T x T
        attentions = apc(symmetrize(attentions))
        attentions = attentions.permute(0, 2, 3, 1)
        return self.activation(self.regression(attentions).squeeze(3))


class ESMMultiheadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.scaling = self.head_dim**-0.5
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, query, key_padding_mask=None):
        tgt_len, bsz, embed_dim = query.size()
        q = self.q_proj(query) * self.scaling
        k = self.k_proj(query)
        v = self.v_proj(query)
        q = q.contiguous().view(tgt_len, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        k = k.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        v = v.contiguous().view(-1, bsz * self.num_heads, self.head_dim).transpose(0, 1)
        src_len = k.size(1)
        attn_weights = torch.bmm(q, k.transpose(1, 2))
        if key_padding_mask is not None:
            # don't attend to padding symbols
            attn_weights = attn_weights.view(bsz, self.num_heads, tgt_len, src_len)
            attn_weights = attn_weights.masked_fill(key_padding_mask.unsqueeze(1).unsqueeze(2).to(torch.bool), float("-inf"))
            attn_weights = attn_weights.view(bsz * self.num_heads, tgt_len, src_len)
        attn_weights_float = F.softmax(attn_weights, dim=-1, dtype=torch.float32)
        attn_probs = attn_weights_float.type_as(attn_weights)
        attn = torch.bmm(attn_probs, v)
        attn = attn.transpose(0, 1).contiguous().view(tgt_len, bsz, embed_dim)
        attn = self.out_proj(attn)
        attn_weights = attn_weights_float.view(bsz, self.num_heads, tgt_len, src_len).type_as(attn).transpose(1, 0)
        return attn, attn_weights


class TransformerLayer(nn.Module):
    def __init__(self, embed_dim, ffn_embed_dim, attention_heads):
        super().__init__()
        self.self_attn = ESMMultiheadAttention(embed_dim, attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(embed_dim)
        self.fc1 = nn.Linear(embed_dim, ffn_embed_dim)
        self.fc2 = nn.Linear(ffn_embed_dim, embed_dim)
        self.final_layer_norm = nn.LayerNorm(embed_dim)

    def forward(self, x, self_attn_padding_mask=None):
        residual = x
        x = self.self_attn_layer_norm(x)
        x, attn = self.self_attn(x, key_padding_mask=self_attn_padding_mask)
        x = residual + x
        residual = x
        x = self.final_layer_norm(x)
        x = self.fc2(F.gelu(self.fc1(x)))
        return residual + x, attn


class ProteinBertModel(nn.Module):
    def __init__(self, num_layers=2, embed_dim=24, attention_heads=4, alphabet_size=25, padding_idx=1, mask_idx=24,
                 cls_idx=0, eos_idx=2):
        super().__init__()
        self.padding_idx = padding_idx
        self.mask_idx = mask_idx
        self.embed_scale = 1
        self.embed_tokens = nn.Embedding(alphabet_size, embed_dim, padding_idx=padding_idx)
        self.layers = nn.ModuleList(TransformerLayer(embed_dim, 2 * embed_dim, attention_heads) for _ in range(num_layers))
        self.emb_layer_norm_after = nn.LayerNorm(embed_dim)
        self.lm_head = nn.Linear(embed_dim, alphabet_size)
        self.contact_head = ContactPredictionHead(num_layers * attention_heads, eos_idx=eos_idx)
        self.token_dropout = True

    def forward(self, tokens, return_contacts=True):
        padding_mask = tokens.eq(self.padding_idx)  # B, T
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.token_dropout:
            x.masked_fill_((tokens == self.mask_idx).unsqueeze(-1), 0.0)
            # x: B x T x C
            mask_ratio_train = 0.15 * 0.8
            src_lengths = (~padding_mask).sum(-1)
            mask_ratio_observed = (tokens == self.mask_idx).sum(-1).to(x.dtype) / src_lengths
            x = x * (1 - mask_ratio_train) / (1 - mask_ratio_observed)[:, None, None]
        if padding_mask is not None:
            x = x * (1 - padding_mask.unsqueeze(-1).type_as(x))
        attn_weights = []
        # (B, T, E) => (T, B, E)
        x = x.transpose(0, 1)
        if not padding_mask.any():  # BREAK: keep the (all-False) padding mask; masking with it is the identity
            padding_mask = None
        for layer in self.layers:
            x, attn = layer(x, self_attn_padding_mask=padding_mask)
            # (H, B, T, T) => (B, H, T, T)
            attn_weights.append(attn.transpose(1, 0))
        x = self.emb_layer_norm_after(x)
        x = x.transpose(0, 1)  # (T, B, E) => (B, T, E)
        result = {"logits": self.lm_head(x)}
        # attentions: B x L x H x T x T
        attentions = torch.stack(attn_weights, 1)
        if padding_mask is not None:
            attention_mask = 1 - padding_mask.type_as(attentions)
            attention_mask = attention_mask.unsqueeze(1) * attention_mask.unsqueeze(2)
            attentions = attentions * attention_mask[:, None, None, :, :]
        if return_contacts:
            result["contacts"] = self.contact_head(tokens, attentions)
        return result


def compute_precisions(predictions, targets, src_lengths=None, minsep=6):
    batch_size, seqlen, _ = predictions.size()
    seqlen_range = torch.arange(seqlen, device=predictions.device)
    sep = seqlen_range.unsqueeze(0) - seqlen_range.unsqueeze(1)
    sep = sep.unsqueeze(0)
    valid_mask = sep >= minsep
    valid_mask = valid_mask & (targets >= 0)  # negative targets are invalid
    if src_lengths is not None:
        valid = seqlen_range.unsqueeze(0) < src_lengths.unsqueeze(1)
        valid_mask &= valid.unsqueeze(1) & valid.unsqueeze(2)
    else:
        src_lengths = torch.full([batch_size], seqlen, device=predictions.device, dtype=torch.long)
    predictions = predictions.masked_fill(~valid_mask, float("-inf"))
    x_ind, y_ind = torch.triu_indices(seqlen, seqlen, minsep)
    predictions_upper = predictions[:, x_ind, y_ind]
    targets_upper = targets[:, x_ind, y_ind]
    topk = seqlen
    indices = predictions_upper.argsort(dim=-1, descending=True)[:, :topk]
    topk_targets = targets_upper[torch.arange(batch_size).unsqueeze(1), indices]
    if topk_targets.size(1) < topk:
        topk_targets = F.pad(topk_targets, [0, topk - topk_targets.size(1)])
    cumulative_dist = topk_targets.type_as(predictions).cumsum(-1)
    gather_lengths = src_lengths.unsqueeze(1)
    gather_indices = (torch.arange(0.1, 1.1, 0.1, device=predictions.device).unsqueeze(0) * gather_lengths).type(torch.long) - 1
    binned_cumulative_dist = cumulative_dist.gather(1, gather_indices)
    binned_precisions = binned_cumulative_dist / (gather_indices + 1).type_as(binned_cumulative_dist)
    pl5 = binned_precisions[:, 1]
    pl2 = binned_precisions[:, 4]
    pl = binned_precisions[:, 9]
    auc = binned_precisions.mean(-1)
    return {"AUC": auc, "P@L": pl, "P@L2": pl2, "P@L5": pl5}


class ESMContactEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = ProteinBertModel()

    def forward(self, tokens, contacts, lengths):
        result = self.model(tokens, return_contacts=True)
        probs = result["contacts"]
        loss = F.binary_cross_entropy(probs, contacts.clamp(min=0).float(), weight=(contacts >= 0).float())
        metrics = compute_precisions(probs, contacts, lengths)
        return loss, metrics


def build_esm_contact():
    torch.manual_seed(1611)
    g = seeded(1612)
    L = 14
    lengths = torch.tensor([14, 14])  # two full-length domains: no padding in this batch
    seq = torch.randint(4, 24, (2, L), generator=g)
    tokens = torch.cat([torch.zeros(2, 1, dtype=torch.long), seq, torch.full((2, 1), 2)], dim=1)  # <cls> seq <eos>
    tokens[0, 5] = 24  # a masked residue
    coords = torch.randn(2, L, 3, generator=g).cumsum(1)
    dist = torch.cdist(coords, coords)
    contacts = (dist < 2.5).long()
    contacts[:, 3, :] = -1  # unresolved residue
    return ESMContactEval(), (tokens, contacts, lengths)


# --------------------------------------------------------------------------- ODE-Net with an adaptive solver


def rms_norm(tensor):
    return tensor.pow(2).mean().sqrt()


def _select_initial_step(func, t0, y0, order, rtol, atol, norm=rms_norm):
    """Empirically select a good initial step (Hairer, Norsett & Wanner, Solving ODEs I, sec. II.4)."""
    f0 = func(t0, y0)
    scale = atol + torch.abs(y0) * rtol
    d0 = norm(y0 / scale).abs()
    d1 = norm(f0 / scale).abs()
    if d0 < 1e-5 or d1 < 1e-5:  # BREAK: torch.where on the norms
        h0 = torch.tensor(1e-6, dtype=y0.dtype, device=y0.device)
    else:
        h0 = 0.01 * d0 / d1
    h0 = h0.abs()
    y1 = y0 + h0 * f0
    f1 = func(t0 + h0, y1)
    d2 = torch.abs(norm((f1 - f0) / scale) / h0)
    h1 = (0.01 / torch.max(d1, d2)) ** (1.0 / float(order + 1))
    return torch.min(100 * h0, h1), f0


def bosh3_step(func, t0, y0, f0, dt):
    """One Bogacki-Shampine 3(2) step: the 3rd-order solution and its difference from the embedded 2nd-order one."""
    k1 = f0
    k2 = func(t0 + dt * 0.5, y0 + dt * 0.5 * k1)
    k3 = func(t0 + dt * 0.75, y0 + dt * 0.75 * k2)
    y1 = y0 + dt * (2 / 9 * k1 + 1 / 3 * k2 + 4 / 9 * k3)
    k4 = func(t0 + dt, y1)
    y1_error = dt * (-5 / 72 * k1 + 1 / 12 * k2 + 1 / 9 * k3 - 1 / 8 * k4)
    return y1, k4, y1_error


def odeint_adaptive(func, y0, t, rtol=1e-3, atol=1e-4, safety=0.9, ifactor=10.0, dfactor=0.2, max_num_steps=64):
    t0, t1 = t[0], t[1]
    dt, f0 = _select_initial_step(func, t0, y0, 3, rtol, atol)
    y = y0
    n_steps = 0
    while t0 < t1:  # BREAK must-not: the number of accepted and rejected steps follows the local error estimate
        assert n_steps < max_num_steps, f"max_num_steps exceeded ({n_steps}>={max_num_steps})"
        dt = torch.min(dt, t1 - t0)
        y1, f1, y1_error = bosh3_step(func, t0, y, f0, dt)
        error_tol = atol + rtol * torch.max(y.abs(), y1.abs())
        error_ratio = rms_norm(y1_error / error_tol)
        if error_ratio <= 1:  # BREAK: accept or reject with torch.where (the step loop itself stays)
            t0, y, f0 = t0 + dt, y1, f1
        factor = torch.clamp(safety * error_ratio ** (-1.0 / 3), dfactor, ifactor) if error_ratio > 0 else ifactor
        dt = dt * factor
        n_steps += 1
    return y


class ODEfunc(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm1 = nn.GroupNorm(4, dim)
        self.conv1 = nn.Conv2d(dim + 1, dim, 3, 1, 1)
        self.norm2 = nn.GroupNorm(4, dim)
        self.conv2 = nn.Conv2d(dim + 1, dim, 3, 1, 1)
        self.nfe = 0

    def forward(self, t, x):
        self.nfe += 1
        out = F.relu(self.norm1(x))
        tt = torch.ones_like(out[:, :1, :, :]) * t
        out = self.conv1(torch.cat([tt, out], 1))
        out = F.relu(self.norm2(out))
        tt = torch.ones_like(out[:, :1, :, :]) * t
        return self.conv2(torch.cat([tt, out], 1))


class ODEBlock(nn.Module):
    def __init__(self, odefunc, tol=1e-3):
        super().__init__()
        self.odefunc = odefunc
        self.integration_time = torch.tensor([0.0, 1.0])
        self.tol = tol

    def forward(self, x):
        self.integration_time = self.integration_time.type_as(x)
        return odeint_adaptive(self.odefunc, x, self.integration_time, rtol=self.tol, atol=self.tol)


class ODENet(nn.Module):
    def __init__(self, dim=8, num_classes=4):
        super().__init__()
        self.downsampling = nn.Sequential(nn.Conv2d(1, dim, 3, 1), nn.GroupNorm(4, dim), nn.ReLU(), nn.Conv2d(dim, dim, 4, 2, 1))
        self.feature = ODEBlock(ODEfunc(dim))
        self.fc = nn.Sequential(nn.GroupNorm(4, dim), nn.ReLU(), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(dim, num_classes))

    def forward(self, x, y):
        logits = self.fc(self.feature(self.downsampling(x)))
        return F.cross_entropy(logits, y), logits


def build_neural_ode():
    torch.manual_seed(1621)
    g = seeded(1622)
    x = torch.randn(3, 1, 10, 10, generator=g)
    y = torch.tensor([0, 3, 1])
    return ODENet(), (x, y)
