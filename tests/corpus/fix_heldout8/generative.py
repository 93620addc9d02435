"""Generative models: Glow (ActNorm with data-dependent initialisation, invertible 1x1 convolutions, affine
coupling; rosinality's glow-pytorch) and NeRF volume rendering with hierarchical sampling (nerf-pytorch's
``render_rays``, ``raw2outputs`` and ``sample_pdf``)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- Glow

logabs = lambda x: torch.log(torch.abs(x))  # noqa: E731


class ActNorm(nn.Module):
    def __init__(self, in_channel: int, logdet: bool = True) -> None:
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, in_channel, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, in_channel, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.logdet = logdet

    def initialize(self, input: torch.Tensor) -> None:
        with torch.no_grad():
            flatten = input.permute(1, 0, 2, 3).contiguous().view(input.shape[1], -1)
            mean = flatten.mean(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            std = flatten.std(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))

    def forward(self, input: torch.Tensor):
        _, _, height, width = input.shape
        if self.initialized.item() == 0:  # BREAK: track init in a Python attribute; fill the buffer too
            self.initialize(input)
            self.initialized.fill_(1)
        log_abs = logabs(self.scale)
        logdet = height * width * torch.sum(log_abs)
        if self.logdet:
            return self.scale * (input + self.loc), logdet
        else:
            return self.scale * (input + self.loc)


class InvConv2d(nn.Module):
    def __init__(self, in_channel: int) -> None:
        super().__init__()
        weight = torch.randn(in_channel, in_channel)
        q, _ = torch.linalg.qr(weight)
        weight = q.unsqueeze(2).unsqueeze(3)
        self.weight = nn.Parameter(weight)

    def forward(self, input: torch.Tensor):
        _, _, height, width = input.shape
        out = F.conv2d(input, self.weight)
        logdet = height * width * torch.slogdet(self.weight.squeeze().double())[1].float()
        return out, logdet


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel: int, out_channel: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        out = F.pad(input, [1, 1, 1, 1], value=1)
        out = self.conv(out)
        out = out * torch.exp(self.scale * 3)
        return out


class AffineCoupling(nn.Module):
    def __init__(self, in_channel: int, filter_size: int = 32) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channel // 2, filter_size, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(filter_size, filter_size, 1),
            nn.ReLU(inplace=True),
            ZeroConv2d(filter_size, in_channel),
        )
        self.net[0].weight.data.normal_(0, 0.05)
        self.net[0].bias.data.zero_()
        self.net[2].weight.data.normal_(0, 0.05)
        self.net[2].bias.data.zero_()

    def forward(self, input: torch.Tensor):
        in_a, in_b = input.chunk(2, 1)
        log_s, t = self.net(in_a).chunk(2, 1)
        s = torch.sigmoid(log_s + 2)
        out_b = (in_b + t) * s
        logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)
        return torch.cat([in_a, out_b], 1), logdet


class Flow(nn.Module):
    def __init__(self, in_channel: int) -> None:
        super().__init__()
        self.actnorm = ActNorm(in_channel)
        self.invconv = InvConv2d(in_channel)
        self.coupling = AffineCoupling(in_channel)

    def forward(self, input: torch.Tensor):
        out, logdet = self.actnorm(input)
        out, det1 = self.invconv(out)
        out, det2 = self.coupling(out)
        logdet = logdet + det1
        if det2 is not None:
            logdet = logdet + det2
        return out, logdet


def gaussian_log_p(x: torch.Tensor, mean: torch.Tensor, log_sd: torch.Tensor) -> torch.Tensor:
    return -0.5 * math.log(2 * math.pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


class GlowBlock(nn.Module):
    def __init__(self, in_channel: int = 3, n_flow: int = 3, n_bins: int = 32) -> None:
        super().__init__()
        squeeze_dim = in_channel * 4
        self.flows = nn.ModuleList([Flow(squeeze_dim) for _ in range(n_flow)])
        self.prior = ZeroConv2d(squeeze_dim, squeeze_dim * 2)
        self.n_bins = n_bins

    def forward(self, image: torch.Tensor):
        b_size, n_channel, height, width = image.shape
        squeezed = image.view(b_size, n_channel, height // 2, 2, width // 2, 2)
        squeezed = squeezed.permute(0, 1, 3, 5, 2, 4)
        out = squeezed.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)

        logdet = 0
        for flow in self.flows:
            out, det = flow(out)
            logdet = logdet + det

        zero = torch.zeros_like(out)
        mean, log_sd = self.prior(zero).chunk(2, 1)
        log_p = gaussian_log_p(out, mean, log_sd).view(b_size, -1).sum(1)

        n_pixel = height * width * n_channel
        loss = -math.log(self.n_bins) * n_pixel + logdet + log_p
        bits_per_dim = (-loss / (math.log(2) * n_pixel)).mean()
        return bits_per_dim, log_p.mean(), logdet.mean()


def build_glow_actnorm():
    torch.manual_seed(1030)
    model = GlowBlock()
    g = seeded(1031)
    image = torch.rand(4, 3, 8, 8, generator=g) - 0.5
    image = image + torch.rand(image.shape, generator=g) / model.n_bins  # dequantisation noise
    return model, (image,)


# --------------------------------------------------------------------------- NeRF

DEBUG = False


class Embedder:
    def __init__(self, multires: int) -> None:
        self.freq_bands = 2.0 ** torch.linspace(0.0, multires - 1, steps=multires)
        self.out_dim = 3 + 3 * 2 * multires

    def embed(self, inputs: torch.Tensor) -> torch.Tensor:
        outs = [inputs]
        for freq in self.freq_bands:
            for p_fn in (torch.sin, torch.cos):
                outs.append(p_fn(inputs * freq))
        return torch.cat(outs, -1)


class NeRF(nn.Module):
    def __init__(self, D: int = 3, W: int = 32, input_ch: int = 27) -> None:
        super().__init__()
        self.pts_linears = nn.ModuleList([nn.Linear(input_ch, W)] + [nn.Linear(W, W) for _ in range(D - 1)])
        self.output_linear = nn.Linear(W, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.pts_linears:
            h = F.relu(layer(h))
        return self.output_linear(h)


def raw2outputs(raw, z_vals, rays_d, raw_noise_std=0, white_bkgd=False):
    """Transforms model's predictions to semantically meaningful values."""
    raw2alpha = lambda raw, dists, act_fn=F.relu: 1.0 - torch.exp(-act_fn(raw) * dists)  # noqa: E731

    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.Tensor([1e10]).expand(dists[..., :1].shape)], -1)  # [N_rays, N_samples]

    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)

    rgb = torch.sigmoid(raw[..., :3])  # [N_rays, N_samples, 3]
    noise = 0.0
    if raw_noise_std > 0.0:
        noise = torch.randn(raw[..., 3].shape) * raw_noise_std

    alpha = raw2alpha(raw[..., 3] + noise, dists)  # [N_rays, N_samples]
    weights = (
        alpha
        * torch.cumprod(torch.cat([torch.ones((alpha.shape[0], 1)), 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
    )
    rgb_map = torch.sum(weights[..., None] * rgb, -2)  # [N_rays, 3]

    depth_map = torch.sum(weights * z_vals, -1)
    disp_map = 1.0 / torch.max(1e-10 * torch.ones_like(depth_map), depth_map / torch.sum(weights, -1))
    acc_map = torch.sum(weights, -1)

    if white_bkgd:
        rgb_map = rgb_map + (1.0 - acc_map[..., None])

    return rgb_map, disp_map, acc_map, weights, depth_map


def sample_pdf(bins, weights, N_samples, det=False):
    # Get pdf
    weights = weights + 1e-5  # prevent nans
    pdf = weights / torch.sum(weights, -1, keepdim=True)
    cdf = torch.cumsum(pdf, -1)
    cdf = torch.cat([torch.zeros_like(cdf[..., :1]), cdf], -1)  # (batch, len(bins))

    # Take uniform samples
    if det:
        u = torch.linspace(0.0, 1.0, steps=N_samples)
        u = u.expand(list(cdf.shape[:-1]) + [N_samples])
    else:
        u = torch.rand(list(cdf.shape[:-1]) + [N_samples])

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


def render_rays(
    ray_batch,
    network_fn,
    network_query_fn,
    N_samples,
    retraw=False,
    lindisp=False,
    perturb=0.0,
    N_importance=0,
    network_fine=None,
    white_bkgd=False,
    raw_noise_std=0.0,
):
    N_rays = ray_batch.shape[0]
    rays_o, rays_d = ray_batch[:, 0:3], ray_batch[:, 3:6]  # [N_rays, 3] each
    bounds = torch.reshape(ray_batch[..., 6:8], [-1, 1, 2])
    near, far = bounds[..., 0], bounds[..., 1]  # [-1,1]

    t_vals = torch.linspace(0.0, 1.0, steps=N_samples)
    if not lindisp:
        z_vals = near * (1.0 - t_vals) + far * (t_vals)
    else:
        z_vals = 1.0 / (1.0 / near * (1.0 - t_vals) + 1.0 / far * (t_vals))

    z_vals = z_vals.expand([N_rays, N_samples])

    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]  # [N_rays, N_samples, 3]

    raw = network_query_fn(pts, network_fn)
    rgb_map, disp_map, acc_map, weights, depth_map = raw2outputs(
        raw, z_vals, rays_d, raw_noise_std, white_bkgd
    )

    if N_importance > 0:
        rgb_map_0, disp_map_0, acc_map_0 = rgb_map, disp_map, acc_map

        z_vals_mid = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        z_samples = sample_pdf(z_vals_mid, weights[..., 1:-1], N_importance, det=(perturb == 0.0))
        z_samples = z_samples.detach()

        z_vals, _ = torch.sort(torch.cat([z_vals, z_samples], -1), -1)
        pts = (
            rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        )  # [N_rays, N_samples + N_importance, 3]

        run_fn = network_fn if network_fine is None else network_fine
        raw = network_query_fn(pts, run_fn)

        rgb_map, disp_map, acc_map, weights, depth_map = raw2outputs(
            raw, z_vals, rays_d, raw_noise_std, white_bkgd
        )

    ret = {"rgb_map": rgb_map, "disp_map": disp_map, "acc_map": acc_map}
    if retraw:
        ret["raw"] = raw
    if N_importance > 0:
        ret["rgb0"] = rgb_map_0
        ret["disp0"] = disp_map_0
        ret["acc0"] = acc_map_0
        ret["z_std"] = torch.std(z_samples, dim=-1, unbiased=False)  # [N_rays]

    for k in ret:
        if (torch.isnan(ret[k]).any() or torch.isinf(ret[k]).any()) and DEBUG:  # BREAK: test DEBUG first
            print(f"! [Numerical Error] {k} contains nan or inf.")

    return ret


class NeRFRenderer(nn.Module):
    def __init__(self, multires: int = 4) -> None:
        super().__init__()
        self.embedder = Embedder(multires)
        self.network_fn = NeRF(input_ch=self.embedder.out_dim)
        self.network_fine = NeRF(input_ch=self.embedder.out_dim)

    def run_network(self, inputs: torch.Tensor, fn: nn.Module) -> torch.Tensor:
        inputs_flat = torch.reshape(inputs, [-1, inputs.shape[-1]])
        outputs_flat = fn(self.embedder.embed(inputs_flat))
        return torch.reshape(outputs_flat, list(inputs.shape[:-1]) + [outputs_flat.shape[-1]])

    def forward(self, ray_batch: torch.Tensor, target_rgb: torch.Tensor):
        ret = render_rays(
            ray_batch,
            self.network_fn,
            self.run_network,
            N_samples=12,
            N_importance=8,
            network_fine=self.network_fine,
        )
        img_loss = F.mse_loss(ret["rgb_map"], target_rgb)
        img_loss0 = F.mse_loss(ret["rgb0"], target_rgb)
        return img_loss + img_loss0, ret


def build_nerf_render():
    torch.manual_seed(1040)
    model = NeRFRenderer()
    with torch.no_grad():  # a scene with some density in it, as after a few hundred iterations
        model.network_fn.output_linear.bias[3] = 1.0
        model.network_fine.output_linear.bias[3] = 1.0
    g = seeded(1041)
    n_rays = 16
    rays_o = torch.randn(n_rays, 3, generator=g) * 0.1
    rays_d = F.normalize(torch.randn(n_rays, 3, generator=g), dim=-1)
    near, far = torch.full((n_rays, 1), 0.5), torch.full((n_rays, 1), 3.0)
    ray_batch = torch.cat([rays_o, rays_d, near, far], -1)
    target_rgb = torch.rand(n_rays, 3, generator=g)
    return model, (ray_batch, target_rgb)
