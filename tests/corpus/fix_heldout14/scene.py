"""3-D: facebookresearch/pytorch3d's ``iterative_closest_point`` (``corresponding_points_alignment``'s weighted
Umeyama/Kabsch step with its consistency check, its padded-cloud mask and its degenerate-cloud warning, the
heterogeneous-input mask, the relative-RMSE convergence test; ``knn_points`` in plain torch) and Totoro97/NeuS'
training iteration (``NeuSRenderer.render``: ``up_sample`` by the SDF's logistic density with ``sample_pdf`` and
``cat_z_vals``, ``render_core`` taking the SDF's gradient with ``autograd.grad`` for the colour network and the
Eikonal loss; the runner's colour, Eikonal and mask losses and its periodic report printed)."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ pytorch3d/ops/utils.py, knn.py, points_alignment.py


class KNN(NamedTuple):
    dists: torch.Tensor
    idx: torch.Tensor
    knn: torch.Tensor


class SimilarityTransform(NamedTuple):
    R: torch.Tensor
    T: torch.Tensor
    s: torch.Tensor


class ICPSolution(NamedTuple):
    converged: bool
    rmse: torch.Tensor | None
    Xt: torch.Tensor
    RTs: SimilarityTransform
    t_history: list


def is_pointclouds(pcl):
    """Checks whether the input `pcl` is an instance of `Pointclouds` by checking the existence of `points_padded`
    and `num_points_per_cloud` functions."""
    return hasattr(pcl, "points_padded") and hasattr(pcl, "num_points_per_cloud")


def convert_pointclouds_to_tensor(pcl):
    if is_pointclouds(pcl):
        X = pcl.points_padded()
        num_points = pcl.num_points_per_cloud()
    elif torch.is_tensor(pcl):
        X = pcl
        num_points = X.shape[1] * torch.ones(X.shape[0], device=X.device, dtype=torch.int64)
    else:
        raise ValueError("The inputs X, Y should be either Pointclouds objects or tensors.")
    return X, num_points


def eyes(dim, N, device=None, dtype=torch.float32):
    identities = torch.eye(dim, device=device, dtype=dtype)
    return identities[None].repeat(N, 1, 1)


def wmean(x, weight=None, dim=-2, keepdim=True, eps=1e-9):
    """Finds the mean of the input tensor across the specified dimension. If the `weight` argument is provided,
    computes weighted mean."""
    args = {"dim": dim, "keepdim": keepdim}
    if weight is None:
        return x.mean(**args)
    if any(xd != wd and xd != 1 and wd != 1 for xd, wd in zip(x.shape[-2::-1], weight.shape[::-1], strict=False)):
        raise ValueError("wmean: weights are not compatible with the tensor")
    return (x * weight[..., None]).sum(**args) / weight[..., None].sum(**args).clamp(eps)


def knn_points(p1, p2, lengths1=None, lengths2=None, K=1, return_nn=False):
    """The K nearest neighbours in p2 of each point of p1 (the CUDA/C++ kernel, in torch; full clouds)."""
    dists = torch.cdist(p1, p2) ** 2
    p1_dists, p1_idx = dists.topk(K, dim=2, largest=False)
    p2_nn = None
    if return_nn:
        p2_nn = torch.gather(p2[:, None].expand(-1, p1.shape[1], -1, -1), 2, p1_idx[..., None].expand(-1, -1, -1, p2.shape[2]))
    return KNN(dists=p1_dists, idx=p1_idx, knn=p2_nn)


def _apply_similarity_transform(X, R, T, s):
    """Applies a similarity transformation parametrized with a batch of orthonormal matrices `R`, a batch of
    translations `T` and a batch of scaling factors `s` to a batch of point clouds `X`."""
    X = s[:, None, None] * torch.bmm(X, R) + T[:, None, :]
    return X


def corresponding_points_alignment(X, Y, weights=None, estimate_scale=False, allow_reflection=False, eps=1e-9):
    """Finds a similarity transformation (rotation `R`, translation `T` and optionally scale `s`) between two given
    sets of corresponding `d`-dimensional points `X` and `Y` such that `s[i] X[i] R[i] + T[i] = Y[i]`."""
    # make sure we convert input Pointclouds structures to tensors
    Xt, num_points = convert_pointclouds_to_tensor(X)
    Yt, num_points_Y = convert_pointclouds_to_tensor(Y)

    if (Xt.shape != Yt.shape) or (num_points != num_points_Y).any():  # BREAK must-not: mismatched clouds raise ValueError; the check has to read the point counts on the host
        raise ValueError("Point sets X and Y have to have the same number of batches, points and dimensions.")
    if weights is not None:
        if Xt.shape[:2] != weights.shape:
            raise ValueError("weights should have the same first two dimensions as X.")

    b, n, dim = Xt.shape

    if (num_points < Xt.shape[1]).any() or (num_points < Yt.shape[1]).any():  # BREAK: build the padding mask every time (all ones for full clouds) and multiply it into the weights
        # in case we got Pointclouds as input, mask the unused entries in Xc, Yc
        mask = (torch.arange(n, dtype=torch.int64, device=Xt.device)[None] < num_points[:, None]).type_as(Xt)
        weights = mask if weights is None else mask * weights.type_as(Xt)

    # compute the centroids of the point sets
    Xmu = wmean(Xt, weight=weights, eps=eps)
    Ymu = wmean(Yt, weight=weights, eps=eps)

    # mean-center the point sets
    Xc = Xt - Xmu
    Yc = Yt - Ymu

    total_weight = torch.clamp(num_points, 1)
    # special handling for heterogeneous point clouds and/or input weights
    if weights is not None:
        Xc *= weights[:, :, None]
        Yc *= weights[:, :, None]
        total_weight = torch.clamp(weights.sum(1), eps)

    if (num_points < (dim + 1)).any():  # BREAK must-not: the warning about degenerate clouds is the user's diagnostic, issued on the host
        warnings.warn("The size of one of the point clouds is <= dim+1. corresponding_points_alignment cannot return a unique rotation.", stacklevel=2)

    # compute the covariance XYcov between the point sets Xc, Yc
    XYcov = torch.bmm(Xc.transpose(2, 1), Yc)
    XYcov = XYcov / total_weight[:, None, None]

    # decompose the covariance matrix XYcov
    U, S, V = torch.svd(XYcov)

    # identity matrix used for fixing reflections
    E = torch.eye(dim, dtype=XYcov.dtype, device=XYcov.device)[None].repeat(b, 1, 1)

    if not allow_reflection:
        # reflection test:
        #   checks whether the estimated rotation has det==1,
        #   if not, finds the nearest rotation s.t. det==1 by
        #   flipping the sign of the last singular vector U
        R_test = torch.bmm(U, V.transpose(2, 1))
        E[:, -1, -1] = torch.det(R_test)

    # find the rotation matrix by composing U and V again
    R = torch.bmm(torch.bmm(U, E), V.transpose(2, 1))

    if estimate_scale:
        # estimate the scaling component of the transformation
        trace_ES = (torch.diagonal(E, dim1=1, dim2=2) * S).sum(1)
        Xcov = (Xc * Xc).sum((1, 2)) / total_weight
        # the scaling component
        s = trace_ES / torch.clamp(Xcov, eps)
        # translation component
        T = Ymu[:, 0, :] - s[:, None] * torch.bmm(Xmu, R)[:, 0, :]
    else:
        # translation component
        T = Ymu[:, 0, :] - torch.bmm(Xmu, R)[:, 0, :]
        # unit scaling since we do not estimate scale
        s = T.new_ones(b)

    return SimilarityTransform(R, T, s)


def iterative_closest_point(X, Y, init_transform=None, max_iterations=100, relative_rmse_thr=1e-6, estimate_scale=False,
                            allow_reflection=False, verbose=False):
    """Executes the iterative closest point (ICP) algorithm [1, 2] in order to find a similarity transformation
    (rotation `R`, translation `T`, and optionally scale `s`) between two given differently-sized sets of
    `d`-dimensional points `X` and `Y`."""
    # make sure we convert input Pointclouds structures to
    # padded tensors of shape (N, P, 3)
    Xt, num_points_X = convert_pointclouds_to_tensor(X)
    Yt, num_points_Y = convert_pointclouds_to_tensor(Y)

    b, size_X, dim = Xt.shape

    if (Xt.shape[2] != Yt.shape[2]) or (Xt.shape[0] != Yt.shape[0]):
        raise ValueError("Point sets X and Y have to have the same number of batches and data dimensions.")

    if ((num_points_Y < Yt.shape[1]).any() or (num_points_X < Xt.shape[1]).any()) and (num_points_Y != num_points_X).any():  # BREAK: compute both masks and pick with torch.where on the (tensor) heterogeneity condition
        # we have a heterogeneous input (e.g. because X/Y is
        # an instance of Pointclouds)
        mask_X = (torch.arange(size_X, dtype=torch.int64, device=Xt.device)[None] < num_points_X[:, None]).type_as(Xt)
    else:
        mask_X = Xt.new_ones(b, size_X)

    # clone the initial point cloud
    Xt_init = Xt.clone()

    if init_transform is not None:
        R, T, s = init_transform
        Xt = _apply_similarity_transform(Xt, R, T, s)
    else:
        # initialize the transformation with identity
        R = eyes(dim, b, device=Xt.device, dtype=Xt.dtype)
        T = Xt.new_zeros((b, dim))
        s = Xt.new_ones(b)

    prev_rmse = None
    rmse = None
    iteration = -1
    converged = False

    # initialize the transformation history
    t_history = []

    # the main loop over ICP iterations
    for iteration in range(max_iterations):
        Xt_nn_points = knn_points(Xt, Yt, lengths1=num_points_X, lengths2=num_points_Y, K=1, return_nn=True).knn[:, :, 0, :]

        # get the alignment of the nearest neighbors from Yt with Xt_init
        R, T, s = corresponding_points_alignment(Xt_init, Xt_nn_points, weights=mask_X, estimate_scale=estimate_scale,
                                                 allow_reflection=allow_reflection)

        # apply the estimated similarity transform to Xt_init
        Xt = _apply_similarity_transform(Xt_init, R, T, s)

        # add the current transformation to the history
        t_history.append(SimilarityTransform(R, T, s))

        # compute the root mean squared error
        Xt_sq_diff = ((Xt - Xt_nn_points) ** 2).sum(2)
        rmse = wmean(Xt_sq_diff[:, :, None], mask_X).sqrt()[:, 0, 0]

        # compute the relative rmse
        if prev_rmse is None:
            relative_rmse = rmse.new_ones(b)
        else:
            relative_rmse = (prev_rmse - rmse) / prev_rmse

        if verbose:
            rmse_msg = f"ICP iteration {iteration}: mean/max rmse = {rmse.mean():1.2e}/{rmse.max():1.2e} ; mean relative rmse = {relative_rmse.mean():1.2e}"
            print(rmse_msg)

        # check for convergence
        if (relative_rmse <= relative_rmse_thr).all():
            converged = True
            break

        # update the previous rmse
        prev_rmse = rmse

    if verbose:
        if converged:
            print(f"ICP has converged in {iteration + 1} iterations.")
        else:
            print(f"ICP has not converged in {max_iterations} iterations.")

    if is_pointclouds(X):
        Xt = X.update_padded(Xt)

    return ICPSolution(converged, rmse, Xt, SimilarityTransform(R, T, s), t_history)


def align_scans(X, Y):
    """Register two scans; the solution as plain tensors (converged, rmse, aligned X, R, T, s, iterations)."""
    solution = iterative_closest_point(X, Y, max_iterations=15, relative_rmse_thr=1e-5, estimate_scale=True)
    R, T, s = solution.RTs
    return solution.converged, solution.rmse, solution.Xt, R, T, s, len(solution.t_history)


def build_pytorch3d_icp():
    seeded(1420)
    X = torch.randn(2, 24, 3)
    angle = torch.tensor([0.3, -0.2])
    c, s = torch.cos(angle), torch.sin(angle)
    R = torch.zeros(2, 3, 3)
    R[:, 0, 0], R[:, 0, 1], R[:, 1, 0], R[:, 1, 1], R[:, 2, 2] = c, -s, s, c, 1.0
    Y = 1.2 * torch.bmm(X, R) + torch.tensor([[0.3, -0.1, 0.2], [0.0, 0.25, -0.15]])[:, None] + 0.01 * torch.randn(2, 24, 3)
    return align_scans, {"X": X, "Y": Y}


# ------------------------------------------------------------------ NeuS models/embedder.py, fields.py, renderer.py


def get_embedder(multires, input_dims=3):
    freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, multires)

    def embed(inputs):
        return torch.cat([inputs] + [fn(inputs * freq) for freq in freq_bands for fn in (torch.sin, torch.cos)], -1)

    return embed, input_dims * (1 + 2 * multires)


class SDFNetwork(nn.Module):
    def __init__(self, d_in=3, d_out=5, d_hidden=16, n_layers=3, skip_in=(2,), multires=2, bias=0.5, scale=1.0):
        super().__init__()
        dims = [d_in] + [d_hidden for _ in range(n_layers)] + [d_out]
        embed_fn, input_ch = get_embedder(multires, input_dims=d_in)
        self.embed_fn_fine = embed_fn
        dims[0] = input_ch
        self.num_layers = len(dims)
        self.skip_in = skip_in
        self.scale = scale
        for li in range(0, self.num_layers - 1):
            out_dim = dims[li + 1] - dims[0] if li + 1 in self.skip_in else dims[li + 1]
            lin = nn.Linear(dims[li], out_dim)
            # geometric initialisation: the SDF of a sphere of radius `bias`
            if li == self.num_layers - 2:
                torch.nn.init.normal_(lin.weight, mean=np.sqrt(np.pi) / np.sqrt(dims[li]), std=0.0001)
                torch.nn.init.constant_(lin.bias, -bias)
            elif li == 0:
                torch.nn.init.constant_(lin.bias, 0.0)
                torch.nn.init.constant_(lin.weight[:, 3:], 0.0)
                torch.nn.init.normal_(lin.weight[:, :3], 0.0, np.sqrt(2) / np.sqrt(out_dim))
            else:
                torch.nn.init.constant_(lin.bias, 0.0)
                torch.nn.init.normal_(lin.weight, 0.0, np.sqrt(2) / np.sqrt(out_dim))
            setattr(self, "lin" + str(li), lin)
        self.activation = nn.Softplus(beta=100)

    def forward(self, inputs):
        inputs = inputs * self.scale
        inputs = self.embed_fn_fine(inputs)
        x = inputs
        for li in range(0, self.num_layers - 1):
            lin = getattr(self, "lin" + str(li))
            if li in self.skip_in:
                x = torch.cat([x, inputs], 1) / np.sqrt(2)
            x = lin(x)
            if li < self.num_layers - 2:
                x = self.activation(x)
        return torch.cat([x[:, :1] / self.scale, x[:, 1:]], dim=-1)

    def sdf(self, x):
        return self.forward(x)[:, :1]

    def gradient(self, x):
        x.requires_grad_(True)  # BREAK: no leaf needed: evaluate the SDF under torch.func.vjp at x (a differentiable pullback, as create_graph=True)
        y = self.sdf(x)
        d_output = torch.ones_like(y, requires_grad=False, device=y.device)
        gradients = torch.autograd.grad(outputs=y, inputs=x, grad_outputs=d_output, create_graph=True, retain_graph=True, only_inputs=True)[0]  # BREAK: the gradients are the vjp's pullback of d_output
        return gradients.unsqueeze(1)


class RenderingNetwork(nn.Module):
    """mode 'idr': points, view directions, normals and the SDF's feature vector to a colour."""

    def __init__(self, d_feature=4, d_hidden=16, n_layers=2):
        super().__init__()
        dims = [9 + d_feature] + [d_hidden for _ in range(n_layers)] + [3]
        self.num_layers = len(dims)
        for li in range(0, self.num_layers - 1):
            setattr(self, "lin" + str(li), nn.Linear(dims[li], dims[li + 1]))
        self.relu = nn.ReLU()

    def forward(self, points, normals, view_dirs, feature_vectors):
        rendering_input = torch.cat([points, view_dirs, normals, feature_vectors], dim=-1)
        x = rendering_input
        for li in range(0, self.num_layers - 1):
            lin = getattr(self, "lin" + str(li))
            x = lin(x)
            if li < self.num_layers - 2:
                x = self.relu(x)
        return torch.sigmoid(x)


class SingleVarianceNetwork(nn.Module):
    def __init__(self, init_val):
        super().__init__()
        self.register_parameter("variance", nn.Parameter(torch.tensor(init_val)))

    def forward(self, x):
        return torch.ones([len(x), 1]) * torch.exp(self.variance * 10.0)


def sample_pdf(bins, weights, n_samples, det=False):
    # This implementation is from NeRF
    # Get pdf
    weights = weights + 1e-5  # prevent nans
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)
    # Take uniform samples
    if det:
        u = torch.linspace(0.0 + 0.5 / n_samples, 1.0 - 0.5 / n_samples, steps=n_samples)
        u = u.expand(list(cdf.shape[:-1]) + [n_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [n_samples])
    # Invert CDF
    u = u.contiguous()
    inds = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(inds - 1), inds - 1)
    above = torch.min((cdf.shape[-1] - 1) * torch.ones_like(inds), inds)
    inds_g = torch.stack([below, above], -1)  # (batch, N_samples, 2)
    matched_shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(matched_shape), 2, inds_g)
    bins_g = torch.gather(bins.unsqueeze(1).expand(matched_shape), 2, inds_g)
    denom = cdf_g[..., 1] - cdf_g[..., 0]
    denom = torch.where(denom < 1e-5, torch.ones_like(denom), denom)
    t = (u - cdf_g[..., 0]) / denom
    samples = bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])
    return samples


class NeuSRenderer:
    def __init__(self, sdf_network, deviation_network, color_network, n_samples, n_importance, up_sample_steps, perturb):
        self.sdf_network = sdf_network
        self.deviation_network = deviation_network
        self.color_network = color_network
        self.n_samples = n_samples
        self.n_importance = n_importance
        self.up_sample_steps = up_sample_steps
        self.perturb = perturb

    def up_sample(self, rays_o, rays_d, z_vals, sdf, n_importance, inv_s):
        """Up sampling give a fixed inv_s."""
        batch_size, n_samples = z_vals.shape
        pts = rays_o[:, None, :] + rays_d[:, None, :] * z_vals[..., :, None]  # n_rays, n_samples, 3
        radius = torch.linalg.norm(pts, ord=2, dim=-1, keepdim=False)
        inside_sphere = (radius[:, :-1] < 1.0) | (radius[:, 1:] < 1.0)
        sdf = sdf.reshape(batch_size, n_samples)
        prev_sdf, next_sdf = sdf[:, :-1], sdf[:, 1:]
        prev_z_vals, next_z_vals = z_vals[:, :-1], z_vals[:, 1:]
        mid_sdf = (prev_sdf + next_sdf) * 0.5
        cos_val = (next_sdf - prev_sdf) / (next_z_vals - prev_z_vals + 1e-5)
        # ----------------------------------------------------------------------------------------------------------
        # Use min value of [ cos, prev_cos ]
        prev_cos_val = torch.cat([torch.zeros([batch_size, 1]), cos_val[:, :-1]], dim=-1)
        cos_val = torch.stack([prev_cos_val, cos_val], dim=-1)
        cos_val, _ = torch.min(cos_val, dim=-1, keepdim=False)
        cos_val = cos_val.clip(-1e3, 0.0) * inside_sphere
        dist = next_z_vals - prev_z_vals
        prev_esti_sdf = mid_sdf - cos_val * dist * 0.5
        next_esti_sdf = mid_sdf + cos_val * dist * 0.5
        prev_cdf = torch.sigmoid(prev_esti_sdf * inv_s)
        next_cdf = torch.sigmoid(next_esti_sdf * inv_s)
        alpha = (prev_cdf - next_cdf + 1e-5) / (prev_cdf + 1e-5)
        weights = alpha * torch.cumprod(torch.cat([torch.ones([batch_size, 1]), 1.0 - alpha + 1e-7], -1), -1)[:, :-1]
        z_samples = sample_pdf(z_vals, weights, n_importance, det=True).detach()
        return z_samples

    def cat_z_vals(self, rays_o, rays_d, z_vals, new_z_vals, sdf, last=False):
        batch_size, n_samples = z_vals.shape
        _, n_importance = new_z_vals.shape
        pts = rays_o[:, None, :] + rays_d[:, None, :] * new_z_vals[..., :, None]
        z_vals = torch.cat([z_vals, new_z_vals], dim=-1)
        z_vals, index = torch.sort(z_vals, dim=-1)
        if not last:
            new_sdf = self.sdf_network.sdf(pts.reshape(-1, 3)).reshape(batch_size, n_importance)
            sdf = torch.cat([sdf, new_sdf], dim=-1)
            xx = torch.arange(batch_size)[:, None].expand(batch_size, n_samples + n_importance).reshape(-1)
            index = index.reshape(-1)
            sdf = sdf[(xx, index)].reshape(batch_size, n_samples + n_importance)
        return z_vals, sdf

    def render_core(self, rays_o, rays_d, z_vals, sample_dist, sdf_network, deviation_network, color_network, background_rgb=None, cos_anneal_ratio=0.0):
        batch_size, n_samples = z_vals.shape
        # Section length
        dists = z_vals[..., 1:] - z_vals[..., :-1]
        dists = torch.cat([dists, torch.Tensor([sample_dist]).expand(dists[..., :1].shape)], -1)
        mid_z_vals = z_vals + dists * 0.5
        # Section midpoints
        pts = rays_o[:, None, :] + rays_d[:, None, :] * mid_z_vals[..., :, None]  # n_rays, n_samples, 3
        dirs = rays_d[:, None, :].expand(pts.shape)
        pts = pts.reshape(-1, 3)
        dirs = dirs.reshape(-1, 3)
        sdf_nn_output = sdf_network(pts)
        sdf = sdf_nn_output[:, :1]
        feature_vector = sdf_nn_output[:, 1:]
        gradients = sdf_network.gradient(pts).squeeze()
        sampled_color = color_network(pts, gradients, dirs, feature_vector).reshape(batch_size, n_samples, 3)
        inv_s = deviation_network(torch.zeros([1, 3]))[:, :1].clip(1e-6, 1e6)  # Single parameter
        inv_s = inv_s.expand(batch_size * n_samples, 1)
        true_cos = (dirs * gradients).sum(-1, keepdim=True)
        # "cos_anneal_ratio" grows from 0 to 1 in the beginning training iterations. The anneal strategy below makes
        # the cos value "not dead" at the beginning training iterations, for better convergence.
        iter_cos = -(F.relu(-true_cos * 0.5 + 0.5) * (1.0 - cos_anneal_ratio) + F.relu(-true_cos) * cos_anneal_ratio)  # always non-positive
        # Estimate signed distances at section points
        estimated_next_sdf = sdf + iter_cos * dists.reshape(-1, 1) * 0.5
        estimated_prev_sdf = sdf - iter_cos * dists.reshape(-1, 1) * 0.5
        prev_cdf = torch.sigmoid(estimated_prev_sdf * inv_s)
        next_cdf = torch.sigmoid(estimated_next_sdf * inv_s)
        p = prev_cdf - next_cdf
        c = prev_cdf
        alpha = ((p + 1e-5) / (c + 1e-5)).reshape(batch_size, n_samples).clip(0.0, 1.0)
        pts_norm = torch.linalg.norm(pts, ord=2, dim=-1, keepdim=True).reshape(batch_size, n_samples)
        inside_sphere = (pts_norm < 1.0).float().detach()
        relax_inside_sphere = (pts_norm < 1.2).float().detach()
        weights = alpha * torch.cumprod(torch.cat([torch.ones([batch_size, 1]), 1.0 - alpha + 1e-7], -1), -1)[:, :-1]
        weights_sum = weights.sum(dim=-1, keepdim=True)
        color = (sampled_color * weights[:, :, None]).sum(dim=1)
        if background_rgb is not None:  # Fixed background, usually black
            color = color + background_rgb * (1.0 - weights_sum)
        # Eikonal loss
        gradient_error = (torch.linalg.norm(gradients.reshape(batch_size, n_samples, 3), ord=2, dim=-1) - 1.0) ** 2
        gradient_error = (relax_inside_sphere * gradient_error).sum() / (relax_inside_sphere.sum() + 1e-5)
        return {"color": color, "sdf": sdf, "dists": dists, "gradients": gradients.reshape(batch_size, n_samples, 3),
                "s_val": 1.0 / inv_s, "mid_z_vals": mid_z_vals, "weights": weights, "cdf": c.reshape(batch_size, n_samples),
                "gradient_error": gradient_error, "inside_sphere": inside_sphere}

    def render(self, rays_o, rays_d, near, far, perturb_overwrite=-1, background_rgb=None, cos_anneal_ratio=0.0):
        batch_size = len(rays_o)
        sample_dist = 2.0 / self.n_samples  # Assuming the region of interest is a unit sphere
        z_vals = torch.linspace(0.0, 1.0, self.n_samples)
        z_vals = near + (far - near) * z_vals[None, :]
        n_samples = self.n_samples
        perturb = self.perturb
        if perturb_overwrite >= 0:
            perturb = perturb_overwrite
        if perturb > 0:
            t_rand = torch.rand([batch_size, 1]) - 0.5
            z_vals = z_vals + t_rand * 2.0 / self.n_samples
        # Up sample
        if self.n_importance > 0:
            with torch.no_grad():
                pts = rays_o[:, None, :] + rays_d[:, None, :] * z_vals[..., :, None]
                sdf = self.sdf_network.sdf(pts.reshape(-1, 3)).reshape(batch_size, self.n_samples)
                for i in range(self.up_sample_steps):
                    new_z_vals = self.up_sample(rays_o, rays_d, z_vals, sdf, self.n_importance // self.up_sample_steps, 64 * 2**i)
                    z_vals, sdf = self.cat_z_vals(rays_o, rays_d, z_vals, new_z_vals, sdf, last=(i + 1 == self.up_sample_steps))
            n_samples = self.n_samples + self.n_importance
        # Render core
        ret_fine = self.render_core(rays_o, rays_d, z_vals, sample_dist, self.sdf_network, self.deviation_network, self.color_network,
                                    background_rgb=background_rgb, cos_anneal_ratio=cos_anneal_ratio)
        weights = ret_fine["weights"]
        weights_sum = weights.sum(dim=-1, keepdim=True)
        s_val = ret_fine["s_val"].reshape(batch_size, n_samples).mean(dim=-1, keepdim=True)
        return {"color_fine": ret_fine["color"], "s_val": s_val, "cdf_fine": ret_fine["cdf"], "weight_sum": weights_sum,
                "weight_max": torch.max(weights, dim=-1, keepdim=True)[0], "gradients": ret_fine["gradients"],
                "weights": weights, "gradient_error": ret_fine["gradient_error"], "inside_sphere": ret_fine["inside_sphere"]}


class NeuSRunner(nn.Module):
    """One iteration of ``Runner.train`` (mask supervision), up to the backward, with its periodic report."""

    def __init__(self):
        super().__init__()
        self.sdf_network = SDFNetwork()
        self.deviation_network = SingleVarianceNetwork(0.3)
        self.color_network = RenderingNetwork()
        self.renderer = NeuSRenderer(self.sdf_network, self.deviation_network, self.color_network, n_samples=8, n_importance=8,
                                     up_sample_steps=2, perturb=1.0)
        self.base_exp_dir = "./exp/dtu_scan24/wmask"
        self.iter_step, self.report_freq, self.anneal_end = 99, 100, 500
        self.igr_weight, self.mask_weight = 0.1, 0.1
        self.lr = 5e-4

    def get_cos_anneal_ratio(self):
        return np.min([1.0, self.iter_step / self.anneal_end])

    @staticmethod
    def near_far_from_sphere(rays_o, rays_d):
        a = torch.sum(rays_d**2, dim=-1, keepdim=True)
        b = 2.0 * torch.sum(rays_o * rays_d, dim=-1, keepdim=True)
        mid = 0.5 * (-b) / a
        near = mid - 1.0
        far = mid + 1.0
        return near, far

    def forward(self, data):
        rays_o, rays_d, true_rgb, mask = data[:, :3], data[:, 3:6], data[:, 6:9], data[:, 9:10]
        near, far = self.near_far_from_sphere(rays_o, rays_d)
        mask = (mask > 0.5).float()
        mask_sum = mask.sum() + 1e-5
        render_out = self.renderer.render(rays_o, rays_d, near, far, background_rgb=None, cos_anneal_ratio=self.get_cos_anneal_ratio())
        color_fine = render_out["color_fine"]
        gradient_error = render_out["gradient_error"]
        weight_sum = render_out["weight_sum"]
        # Loss
        color_error = (color_fine - true_rgb) * mask
        color_fine_loss = F.l1_loss(color_error, torch.zeros_like(color_error), reduction="sum") / mask_sum
        psnr = 20.0 * torch.log10(1.0 / (((color_fine - true_rgb) ** 2 * mask).sum() / (mask_sum * 3.0)).sqrt())
        eikonal_loss = gradient_error
        mask_loss = F.binary_cross_entropy(weight_sum.clip(1e-3, 1.0 - 1e-3), mask)
        loss = color_fine_loss + eikonal_loss * self.igr_weight + mask_loss * self.mask_weight
        self.iter_step += 1
        if self.iter_step % self.report_freq == 0:
            print(self.base_exp_dir)  # BREAK must-not: the runner's report names the experiment directory on stdout
            print(f"iter:{self.iter_step:8>d} loss = {loss} lr={self.lr}")  # BREAK must-not: the report line prints the loss for the user
        return loss, psnr


def build_neus_train():
    seeded(1421)
    rays_d = F.normalize(torch.randn(6, 3), dim=-1)
    rays_o = -1.5 * rays_d + 0.1 * torch.randn(6, 3)
    rgb = torch.rand(6, 3)
    mask = (torch.rand(6, 1) > 0.3).float()
    return NeuSRunner().train(), (torch.cat([rays_o, rays_d, rgb, mask], dim=-1),)
