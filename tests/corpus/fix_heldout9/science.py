"""Science: an OpenFold-style structure model whose recycling loop stops early once the predicted CA distances
stop moving (AF2Complex's tolerance), and a pure-PyTorch 3D Gaussian splatting rasteriser (frustum culling,
EWA projection of the covariances, per-tile depth sorting and alpha compositing)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean, seeded

# --------------------------------------------------------------------------- OpenFold recycling with early stop

CA_IDX = 1  # residue_constants.atom_order["CA"] in the (N, CA, C) backbone kept here


def tensor_tree_map(fn, tree):
    if isinstance(tree, dict):
        return {k: tensor_tree_map(fn, v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(tensor_tree_map(fn, v) for v in tree)
    return fn(tree)


def add(m1, m2, inplace):
    # The first operation in a checkpoint can't be in-place, but it's
    # nice to have in-place addition during inference. Thus...
    if not inplace:
        m1 = m1 + m2
    else:
        m1 += m2
    return m1


def pseudo_beta_fn(aatype, all_atom_positions, all_atom_masks):
    """The CA stands in for the CB here (glycine's convention)."""
    return all_atom_positions[..., CA_IDX, :]


def compute_plddt(logits: torch.Tensor) -> torch.Tensor:
    num_bins = logits.shape[-1]
    bin_width = 1.0 / num_bins
    bounds = torch.arange(start=0.5 * bin_width, end=1.0, step=bin_width, device=logits.device)
    probs = torch.nn.functional.softmax(logits, dim=-1)
    pred_lddt_ca = torch.sum(probs * bounds.view(*((1,) * len(probs.shape[:-1])), *bounds.shape), dim=-1)
    return pred_lddt_ca * 100


class InputEmbedder(nn.Module):
    def __init__(self, tf_dim: int, msa_dim: int, c_z: int, c_m: int, relpos_k: int) -> None:
        super().__init__()
        self.linear_tf_z_i = nn.Linear(tf_dim, c_z)
        self.linear_tf_z_j = nn.Linear(tf_dim, c_z)
        self.linear_tf_m = nn.Linear(tf_dim, c_m)
        self.linear_msa_m = nn.Linear(msa_dim, c_m)
        self.relpos_k = relpos_k
        self.no_bins = 2 * relpos_k + 1
        self.linear_relpos = nn.Linear(self.no_bins, c_z)

    def relpos(self, ri: torch.Tensor) -> torch.Tensor:
        d = ri[..., None] - ri[..., None, :]
        boundaries = torch.arange(start=-self.relpos_k, end=self.relpos_k + 1, device=d.device)
        reshaped_bins = boundaries.view(((1,) * len(d.shape)) + (len(boundaries),))
        d = d[..., None] - reshaped_bins
        d = torch.abs(d)
        d = torch.argmin(d, dim=-1)
        d = nn.functional.one_hot(d, num_classes=len(boundaries)).float()
        d = d.to(ri.dtype)
        return self.linear_relpos(d)

    def forward(self, tf, ri, msa, inplace_safe=False):
        # [*, N_res, c_z]
        tf_emb_i = self.linear_tf_z_i(tf)
        tf_emb_j = self.linear_tf_z_j(tf)
        # [*, N_res, N_res, c_z]
        pair_emb = self.relpos(ri.type(tf_emb_i.dtype))
        pair_emb = add(pair_emb, tf_emb_i[..., None, :], inplace=inplace_safe)
        pair_emb = add(pair_emb, tf_emb_j[..., None, :, :], inplace=inplace_safe)
        # [*, N_clust, N_res, c_m]
        n_clust = msa.shape[-3]
        tf_m = self.linear_tf_m(tf).unsqueeze(-3).expand((-1,) * len(tf.shape[:-2]) + (n_clust, -1, -1))
        msa_emb = self.linear_msa_m(msa) + tf_m
        return msa_emb, pair_emb


class RecyclingEmbedder(nn.Module):
    """
    Embeds the output of an iteration of the model for recycling.

    Implements Algorithm 32.
    """

    def __init__(self, c_m: int, c_z: int, min_bin: float, max_bin: float, no_bins: int, inf: float = 1e8):
        super().__init__()
        self.c_m = c_m
        self.c_z = c_z
        self.min_bin = min_bin
        self.max_bin = max_bin
        self.no_bins = no_bins
        self.inf = inf
        self.linear = nn.Linear(self.no_bins, self.c_z)
        self.layer_norm_m = nn.LayerNorm(self.c_m)
        self.layer_norm_z = nn.LayerNorm(self.c_z)

    def forward(self, m, z, x, inplace_safe=False):
        # [*, N, C_m]
        m_update = self.layer_norm_m(m)
        if inplace_safe:
            m.copy_(m_update)
            m_update = m

        # [*, N, N, C_z]
        z_update = self.layer_norm_z(z)
        if inplace_safe:
            z.copy_(z_update)
            z_update = z

        # This squared method might become problematic in FP16 mode.
        bins = torch.linspace(self.min_bin, self.max_bin, self.no_bins, dtype=x.dtype, device=x.device,
                              requires_grad=False)
        squared_bins = bins ** 2
        upper = torch.cat([squared_bins[1:], squared_bins.new_tensor([self.inf])], dim=-1)
        d = torch.sum((x[..., None, :] - x[..., None, :, :]) ** 2, dim=-1, keepdims=True)

        # [*, N, N, no_bins]
        d = ((d > squared_bins) * (d < upper)).type(x.dtype)

        # [*, N, N, C_z]
        d = self.linear(d)
        z_update = add(z_update, d, inplace_safe)

        return m_update, z_update


class EvoformerBlockLite(nn.Module):
    """MSA row attention with pair bias, MSA transition, outer product mean into the pair, pair transition."""

    def __init__(self, c_m: int, c_z: int, c_s: int, no_heads: int = 2) -> None:
        super().__init__()
        self.no_heads = no_heads
        self.layer_norm_m = nn.LayerNorm(c_m)
        self.linear_qkv = nn.Linear(c_m, 3 * c_m, bias=False)
        self.linear_b = nn.Linear(c_z, no_heads, bias=False)
        self.linear_o = nn.Linear(c_m, c_m)
        self.msa_transition = nn.Sequential(nn.LayerNorm(c_m), nn.Linear(c_m, 2 * c_m), nn.ReLU(),
                                            nn.Linear(2 * c_m, c_m))
        self.opm_a = nn.Linear(c_m, 4)
        self.opm_b = nn.Linear(c_m, 4)
        self.opm_out = nn.Linear(16, c_z)
        self.pair_transition = nn.Sequential(nn.LayerNorm(c_z), nn.Linear(c_z, 2 * c_z), nn.ReLU(),
                                             nn.Linear(2 * c_z, c_z))
        self.linear_single = nn.Linear(c_m, c_s)

    def forward(self, m, z, msa_mask, pair_mask):
        s_, n, c = m.shape
        h = self.layer_norm_m(m)
        q, k, v = self.linear_qkv(h).view(s_, n, 3, self.no_heads, c // self.no_heads).unbind(2)
        logits = torch.einsum("sihc,sjhc->shij", q, k) / math.sqrt(c // self.no_heads)
        logits = logits + self.linear_b(z).permute(2, 0, 1)[None] + 1e9 * (msa_mask[:, None, None, :] - 1)
        o = torch.einsum("shij,sjhc->sihc", logits.softmax(-1), v).reshape(s_, n, c)
        m = m + self.linear_o(o)
        m = m + self.msa_transition(m)
        a = self.opm_a(m) * msa_mask[..., None]
        b = self.opm_b(m) * msa_mask[..., None]
        outer = torch.einsum("sia,sjb->ijab", a, b).reshape(n, n, -1)
        norm = torch.einsum("si,sj->ij", msa_mask, msa_mask)[..., None]
        z = z + self.opm_out(outer) / (norm + 1e-3)
        z = z + self.pair_transition(z) * pair_mask[..., None]
        return m, z, self.linear_single(m[0])


class StructureModuleLite(nn.Module):
    """The single representation to backbone atoms: a CA trace from per-residue steps, N and C around it."""

    def __init__(self, c_s: int) -> None:
        super().__init__()
        self.linear_step = nn.Linear(c_s, 3)
        self.linear_offsets = nn.Linear(c_s, 6)

    def forward(self, s, mask):
        ca = torch.cumsum(3.8 * F.normalize(self.linear_step(s), dim=-1), dim=-2)
        offsets = self.linear_offsets(s).view(*s.shape[:-1], 2, 3)
        positions = torch.stack([ca + offsets[..., 0, :], ca, ca + offsets[..., 1, :]], dim=-2)
        return {"positions": (positions * mask[..., None, None])[None]}


class AlphaFoldLite(nn.Module):
    """Alphafold 2 (OpenFold's module layout) with multimer-style early stopping of the recycling."""

    def __init__(self, c_m: int = 16, c_z: int = 8, c_s: int = 16, recycle_early_stop_tolerance: float = 0.5):
        super().__init__()
        self.c_m, self.c_z = c_m, c_z
        self.is_multimer = True
        self.recycle_early_stop_tolerance = recycle_early_stop_tolerance
        self.input_embedder = InputEmbedder(tf_dim=22, msa_dim=25, c_z=c_z, c_m=c_m, relpos_k=4)
        self.recycling_embedder = RecyclingEmbedder(c_m, c_z, min_bin=3.25, max_bin=20.75, no_bins=15)
        self.evoformer = EvoformerBlockLite(c_m, c_z, c_s)
        self.structure_module = StructureModuleLite(c_s)
        self.plddt_head = nn.Sequential(nn.LayerNorm(c_s), nn.Linear(c_s, 16), nn.ReLU(), nn.Linear(16, 50))

    def tolerance_reached(self, prev_pos, next_pos, mask, eps=1e-8) -> bool:
        """
        Early stopping criteria based on criteria used in
        AF2Complex: https://www.nature.com/articles/s41467-022-29394-2
        Args:
          prev_pos: Previous atom positions in atom37/14 representation
          next_pos: Current atom positions in atom37/14 representation
          mask: 1-D sequence mask
          eps: Epsilon used in square root calculation
        Returns:
          Whether to stop recycling early based on the desired tolerance.
        """

        def distances(points):
            """Compute all pairwise distances for a set of points."""
            d = points[..., None, :] - points[..., None, :, :]
            return torch.sqrt(torch.sum(d ** 2, dim=-1))

        if self.recycle_early_stop_tolerance < 0:
            return False

        ca_idx = CA_IDX
        sq_diff = (distances(prev_pos[..., ca_idx, :]) - distances(next_pos[..., ca_idx, :])) ** 2
        mask = mask[..., None] * mask[..., None, :]
        sq_diff = masked_mean(mask=mask, value=sq_diff, dim=list(range(len(mask.shape))))
        diff = torch.sqrt(sq_diff + eps).item()  # BREAK: run every cycle, select the final one with torch.where
        return diff <= self.recycle_early_stop_tolerance

    def iteration(self, feats, prevs, _recycle=True):
        # Primary output dictionary
        outputs = {}

        # Grab some data about the input
        n = feats["target_feat"].shape[-2]
        inplace_safe = not (self.training or torch.is_grad_enabled())

        # Prep some features
        seq_mask = feats["seq_mask"]
        pair_mask = seq_mask[..., None] * seq_mask[..., None, :]
        msa_mask = feats["msa_mask"]

        # Initialize the MSA and pair representations
        m, z = self.input_embedder(feats["target_feat"], feats["residue_index"], feats["msa_feat"],
                                   inplace_safe=inplace_safe)

        # Unpack the recycling embeddings. Removing them from the list allows
        # them to be freed further down in this function, saving memory
        m_1_prev, z_prev, x_prev = reversed([prevs.pop() for _ in range(3)])

        # Initialize the recycling embeddings, if needs be
        if None in [m_1_prev, z_prev, x_prev]:
            # [*, N, C_m]
            m_1_prev = m.new_zeros((n, self.c_m), requires_grad=False)
            # [*, N, N, C_z]
            z_prev = z.new_zeros((n, n, self.c_z), requires_grad=False)
            # [*, N, 3]
            x_prev = z.new_zeros((n, 3, 3), requires_grad=False)

        pseudo_beta_x_prev = pseudo_beta_fn(feats["aatype"], x_prev, None).to(dtype=z.dtype)

        m_1_prev_emb, z_prev_emb = self.recycling_embedder(m_1_prev, z_prev, pseudo_beta_x_prev,
                                                           inplace_safe=inplace_safe)

        # [*, S_c, N, C_m]
        m[..., 0, :, :] += m_1_prev_emb

        # [*, N, N, C_z]
        z = add(z, z_prev_emb, inplace=inplace_safe)

        # Run MSA + pair embeddings through the trunk of the network
        m, z, s = self.evoformer(m, z, msa_mask=msa_mask.to(dtype=m.dtype), pair_mask=pair_mask.to(dtype=z.dtype))

        outputs["msa"] = m
        outputs["pair"] = z
        outputs["single"] = s

        # Predict 3D structure
        outputs["sm"] = self.structure_module(s, mask=feats["seq_mask"].to(dtype=s.dtype))
        outputs["final_atom_positions"] = outputs["sm"]["positions"][-1]
        outputs["plddt"] = compute_plddt(self.plddt_head(s))

        # Save embeddings for use during the next recycling iteration

        # [*, N, C_m]
        m_1_prev = m[..., 0, :, :]

        # [*, N, N, C_z]
        z_prev = outputs["pair"]

        early_stop = False
        if self.is_multimer:
            early_stop = self.tolerance_reached(x_prev, outputs["final_atom_positions"], seq_mask)

        del x_prev

        # [*, N, 3]
        x_prev = outputs["final_atom_positions"]

        return outputs, m_1_prev, z_prev, x_prev, early_stop

    def forward(self, batch):
        """
        Args:
            batch:
                Dictionary of arguments outlined in Algorithm 2. Keys must include the official names of the
                features in the supplement subsection 1.2.9. The final dimension of each input must have length
                equal to the number of recycling iterations.
        """
        # Initialize recycling embeddings
        m_1_prev, z_prev, x_prev = None, None, None
        prevs = [m_1_prev, z_prev, x_prev]

        is_grad_enabled = torch.is_grad_enabled()

        # Main recycling loop
        num_iters = batch["aatype"].shape[-1]
        early_stop = False
        num_recycles = 0
        for cycle_no in range(num_iters):
            # Select the features for the current recycling cycle
            fetch_cur_batch = lambda t: t[..., cycle_no]  # noqa: E731, B023
            feats = tensor_tree_map(fetch_cur_batch, batch)

            # Enable grad iff we're training and it's the final recycling layer
            is_final_iter = cycle_no == (num_iters - 1) or early_stop
            with torch.set_grad_enabled(is_grad_enabled and is_final_iter):
                # Run the next iteration of the model
                outputs, m_1_prev, z_prev, x_prev, early_stop = self.iteration(
                    feats,
                    prevs,
                    _recycle=(num_iters > 1)
                )

                num_recycles += 1

                if not is_final_iter:
                    del outputs
                    prevs = [m_1_prev, z_prev, x_prev]
                    del m_1_prev, z_prev, x_prev
                else:
                    break

        outputs["num_recycles"] = torch.tensor(num_recycles, device=feats["aatype"].device)
        del outputs["sm"], outputs["msa"]
        return outputs


def build_af2_recycling():
    torch.manual_seed(1300)
    model = AlphaFoldLite().eval()
    g = seeded(1301)
    n_res, n_seq, num_iters = 10, 4, 4
    aatype = torch.randint(0, 20, (n_res,), generator=g)
    seq_mask = torch.ones(n_res)
    seq_mask[8:] = 0.0  # padded to the crop size
    msa_mask = torch.ones(n_seq, n_res) * seq_mask
    msa_mask[3, 5:] = 0.0
    batch = {
        "aatype": aatype,
        "target_feat": F.one_hot(aatype + 1, 22).float(),
        "residue_index": torch.arange(n_res),
        "msa_feat": torch.randn(n_seq, n_res, 25, generator=g),
        "seq_mask": seq_mask,
        "msa_mask": msa_mask,
    }
    # every feature carries a trailing recycling dimension (the same features for each cycle here)
    batch = {k: torch.stack([v] * num_iters, dim=-1) for k, v in batch.items()}
    return model, (batch,)


# --------------------------------------------------------------------------- 3D Gaussian splatting (pure PyTorch)

C0 = 0.28209479177387814


def homogeneous(points):
    """
    homogeneous points
    :param points: [..., 3]
    """
    return torch.cat([points, torch.ones_like(points[..., :1])], dim=-1)


def build_rotation(r):
    norm = torch.sqrt(r[:, 0] * r[:, 0] + r[:, 1] * r[:, 1] + r[:, 2] * r[:, 2] + r[:, 3] * r[:, 3])
    q = r / norm[:, None]
    R = torch.zeros((q.size(0), 3, 3), device=r.device)
    r = q[:, 0]
    x = q[:, 1]
    y = q[:, 2]
    z = q[:, 3]
    R[:, 0, 0] = 1 - 2 * (y * y + z * z)
    R[:, 0, 1] = 2 * (x * y - r * z)
    R[:, 0, 2] = 2 * (x * z + r * y)
    R[:, 1, 0] = 2 * (x * y + r * z)
    R[:, 1, 1] = 1 - 2 * (x * x + z * z)
    R[:, 1, 2] = 2 * (y * z - r * x)
    R[:, 2, 0] = 2 * (x * z - r * y)
    R[:, 2, 1] = 2 * (y * z + r * x)
    R[:, 2, 2] = 1 - 2 * (x * x + y * y)
    return R


def build_scaling_rotation(s, r):
    L = torch.zeros((s.shape[0], 3, 3), dtype=torch.float, device=s.device)
    R = build_rotation(r)
    L[:, 0, 0] = s[:, 0]
    L[:, 1, 1] = s[:, 1]
    L[:, 2, 2] = s[:, 2]
    L = R @ L
    return L


def build_covariance_3d(s, r):
    L = build_scaling_rotation(s, r)
    actual_covariance = L @ L.transpose(1, 2)
    return actual_covariance


def build_covariance_2d(mean3d, cov3d, viewmatrix, fov_x, fov_y, focal_x, focal_y):
    # The following models the steps outlined by equations 29
    # and 31 in "EWA Splatting" (Zwicker et al., 2002).
    # Additionally considers aspect / scaling of viewport.
    # Transposes used to account for row-/column-major conventions.
    tan_fovx = math.tan(fov_x * 0.5)
    tan_fovy = math.tan(fov_y * 0.5)
    t = (mean3d @ viewmatrix[:3, :3]) + viewmatrix[-1:, :3]

    # truncate the influences of gaussians far outside the frustum.
    tx = (t[..., 0] / t[..., 2]).clip(min=-tan_fovx * 1.3, max=tan_fovx * 1.3) * t[..., 2]
    ty = (t[..., 1] / t[..., 2]).clip(min=-tan_fovy * 1.3, max=tan_fovy * 1.3) * t[..., 2]
    tz = t[..., 2]

    # Eq.29 locally affine transform
    # perspective transform is not affine so we approximate with first-order taylor expansion
    # notice that we multiply by the intrinsic so that the variance is at the sceen space
    J = torch.zeros(mean3d.shape[0], 3, 3).to(mean3d)
    J[..., 0, 0] = 1 / tz * focal_x
    J[..., 0, 2] = -tx / (tz * tz) * focal_x
    J[..., 1, 1] = 1 / tz * focal_y
    J[..., 1, 2] = -ty / (tz * tz) * focal_y
    W = viewmatrix[:3, :3].T  # transpose to correct viewmatrix
    cov2d = J @ W @ cov3d @ W.T @ J.permute(0, 2, 1)

    # add low pass filter here according to E.q. 32
    filter = torch.eye(2, 2).to(cov2d) * 0.3
    return cov2d[:, :2, :2] + filter[None]


def projection_ndc(points, viewmatrix, projmatrix):
    points_o = homogeneous(points)  # object space
    points_h = points_o @ viewmatrix @ projmatrix  # screen space # RHS
    p_w = 1.0 / (points_h[..., -1:] + 0.000001)
    p_proj = points_h * p_w
    p_view = points_o @ viewmatrix
    in_mask = p_view[..., 2] >= 0.2
    return p_proj, p_view, in_mask


def get_radius(cov2d):
    det = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] * cov2d[:, 1, 0]
    mid = 0.5 * (cov2d[:, 0, 0] + cov2d[:, 1, 1])
    lambda1 = mid + torch.sqrt((mid ** 2 - det).clip(min=0.1))
    lambda2 = mid - torch.sqrt((mid ** 2 - det).clip(min=0.1))
    return 3.0 * torch.sqrt(torch.max(lambda1, lambda2)).ceil()


def get_rect(pix_coord, radii, width, height):
    rect_min = (pix_coord - radii[:, None])
    rect_max = (pix_coord + radii[:, None])
    rect_min[..., 0] = rect_min[..., 0].clip(0, width - 1.0)
    rect_min[..., 1] = rect_min[..., 1].clip(0, height - 1.0)
    rect_max[..., 0] = rect_max[..., 0].clip(0, width - 1.0)
    rect_max[..., 1] = rect_max[..., 1].clip(0, height - 1.0)
    return rect_min, rect_max


def get_projection_matrix(znear, zfar, fovX, fovY):
    tanHalfFovY = math.tan(fovY / 2)
    tanHalfFovX = math.tan(fovX / 2)
    top = tanHalfFovY * znear
    bottom = -top
    right = tanHalfFovX * znear
    left = -right
    P = torch.zeros(4, 4)
    z_sign = 1.0
    P[0, 0] = 2.0 * znear / (right - left)
    P[1, 1] = 2.0 * znear / (top - bottom)
    P[0, 2] = (right + left) / (right - left)
    P[1, 2] = (top + bottom) / (top - bottom)
    P[3, 2] = z_sign
    P[2, 2] = z_sign * zfar / (zfar - znear)
    P[2, 3] = -(zfar * znear) / (zfar - znear)
    return P


class Camera:
    def __init__(self, width: int = 16, height: int = 16, fov: float = 1.2, znear: float = 0.01, zfar: float = 100.0):
        self.image_width, self.image_height = width, height
        self.FoVx = self.FoVy = fov
        self.focal_x = width / (2 * math.tan(fov / 2))
        self.focal_y = height / (2 * math.tan(fov / 2))
        self.world_view_transform = torch.eye(4)  # camera at the origin looking down +z
        self.projection_matrix = get_projection_matrix(znear, zfar, fov, fov).transpose(0, 1)


class GaussianRenderer(nn.Module):
    """
    a gaussian splatting renderer
    """

    def __init__(self, white_bkgd=True, tile_size=4, **kwargs):
        super().__init__()
        self.white_bkgd = white_bkgd
        self.tile_size = tile_size
        self.pix_coord = torch.stack(torch.meshgrid(torch.arange(16), torch.arange(16), indexing="xy"), dim=-1)

    def build_color(self, means3D, shs, camera):
        # degree-0 spherical harmonics: the view direction drops out
        return (C0 * shs[:, 0] + 0.5).clip(min=0.0)

    def render(self, camera, means2D, cov2d, color, opacity, depths, radii):
        rect = get_rect(means2D, radii, width=camera.image_width, height=camera.image_height)

        self.render_color = torch.ones(*self.pix_coord.shape[:2], 3).to(means2D)
        self.render_depth = torch.zeros(*self.pix_coord.shape[:2], 1).to(means2D)
        self.render_alpha = torch.zeros(*self.pix_coord.shape[:2], 1).to(means2D)

        TILE_SIZE = self.tile_size
        for h in range(0, camera.image_height, TILE_SIZE):
            for w in range(0, camera.image_width, TILE_SIZE):
                # check if the rectangle penetrate the tile
                over_tl = rect[0][..., 0].clip(min=w), rect[0][..., 1].clip(min=h)
                over_br = rect[1][..., 0].clip(max=w + TILE_SIZE - 1), rect[1][..., 1].clip(max=h + TILE_SIZE - 1)
                in_mask = (over_br[0] > over_tl[0]) & (over_br[1] > over_tl[1])  # 3D gaussian in the tile

                if not in_mask.sum() > 0:  # BREAK: composite every gaussian, alpha zeroed outside the tile
                    continue

                tile_coord = self.pix_coord[h:h + TILE_SIZE, w:w + TILE_SIZE].flatten(0, -2)
                sorted_depths, index = torch.sort(depths[in_mask])
                sorted_means2D = means2D[in_mask][index]
                sorted_cov2d = cov2d[in_mask][index]  # P 2 2
                sorted_conic = sorted_cov2d.inverse()  # inverse of variance
                sorted_opacity = opacity[in_mask][index]
                sorted_color = color[in_mask][index]
                dx = (tile_coord[:, None, :] - sorted_means2D[None, :])  # B P 2

                gauss_weight = torch.exp(-0.5 * (
                    dx[:, :, 0] ** 2 * sorted_conic[:, 0, 0]
                    + dx[:, :, 1] ** 2 * sorted_conic[:, 1, 1]
                    + dx[:, :, 0] * dx[:, :, 1] * sorted_conic[:, 0, 1]
                    + dx[:, :, 0] * dx[:, :, 1] * sorted_conic[:, 1, 0]))

                alpha = (gauss_weight[..., None] * sorted_opacity[None]).clip(max=0.99)  # B P 1
                T = torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], dim=1).cumprod(dim=1)
                acc_alpha = (alpha * T).sum(dim=1)
                tile_color = (T * alpha * sorted_color[None]).sum(dim=1) + (1 - acc_alpha) * (
                    1 if self.white_bkgd else 0)
                tile_depth = ((T * alpha) * sorted_depths[None, :, None]).sum(dim=1)
                self.render_color[h:h + TILE_SIZE, w:w + TILE_SIZE] = tile_color.reshape(TILE_SIZE, TILE_SIZE, -1)
                self.render_depth[h:h + TILE_SIZE, w:w + TILE_SIZE] = tile_depth.reshape(TILE_SIZE, TILE_SIZE, -1)
                self.render_alpha[h:h + TILE_SIZE, w:w + TILE_SIZE] = acc_alpha.reshape(TILE_SIZE, TILE_SIZE, -1)

        return {
            "render": self.render_color,
            "depth": self.render_depth,
            "alpha": self.render_alpha,
            "visiility_filter": radii > 0,
            "radii": radii,
        }

    def forward(self, camera, pc, **kwargs):
        means3D = pc.get_xyz
        opacity = pc.get_opacity
        scales = pc.get_scaling
        rotations = pc.get_rotation
        shs = pc.get_features

        mean_ndc, mean_view, in_mask = projection_ndc(means3D, viewmatrix=camera.world_view_transform,
                                                      projmatrix=camera.projection_matrix)
        depths = mean_view[:, 2]
        mean_coord_x = ((mean_ndc[..., 0] + 1) * camera.image_width - 1.0) * 0.5
        mean_coord_y = ((mean_ndc[..., 1] + 1) * camera.image_height - 1.0) * 0.5
        means2D = torch.stack([mean_coord_x, mean_coord_y], dim=-1)

        color = self.build_color(means3D=means3D, shs=shs, camera=camera)
        cov3d = build_covariance_3d(scales, rotations)
        cov2d = build_covariance_2d(mean3d=means3D, cov3d=cov3d, viewmatrix=camera.world_view_transform,
                                    fov_x=camera.FoVx, fov_y=camera.FoVy, focal_x=camera.focal_x,
                                    focal_y=camera.focal_y)
        # gaussians behind the near plane get no footprint (the CUDA rasteriser's radii = 0)
        radii = get_radius(cov2d) * in_mask
        return self.render(camera=camera, means2D=means2D, cov2d=cov2d, color=color, opacity=opacity,
                           depths=depths, radii=radii)


class GaussianModel(nn.Module):
    def __init__(self, num_points: int, g: torch.Generator) -> None:
        super().__init__()
        xyz = torch.rand(num_points, 3, generator=g) * torch.tensor([4.0, 4.0, 4.0]) - torch.tensor([2.0, 2.0, 0.5])
        self._xyz = nn.Parameter(xyz)
        self._features_dc = nn.Parameter(torch.randn(num_points, 1, 3, generator=g))
        self._scaling = nn.Parameter(torch.log(torch.rand(num_points, 3, generator=g) * 0.08 + 0.02))
        self._rotation = nn.Parameter(torch.randn(num_points, 4, generator=g))
        self._opacity = nn.Parameter(torch.randn(num_points, 1, generator=g))
        self.register_buffer("max_radii2D", torch.zeros(num_points))

    @property
    def get_xyz(self):
        return self._xyz

    @property
    def get_features(self):
        return self._features_dc

    @property
    def get_scaling(self):
        return torch.exp(self._scaling)

    @property
    def get_rotation(self):
        return F.normalize(self._rotation)

    @property
    def get_opacity(self):
        return torch.sigmoid(self._opacity)


class GaussianSplattingStep(nn.Module):
    """train.py's iteration: render the view, the L1 photometric loss, the densification bookkeeping."""

    def __init__(self, num_points: int, g: torch.Generator) -> None:
        super().__init__()
        self.gaussians = GaussianModel(num_points, g)
        self.renderer = GaussianRenderer(white_bkgd=True)

    def forward(self, viewpoint_cam: Camera, gt_image: torch.Tensor):
        render_pkg = self.renderer(viewpoint_cam, self.gaussians)
        image, visibility_filter, radii = render_pkg["render"], render_pkg["visiility_filter"], render_pkg["radii"]

        Ll1 = torch.abs(image - gt_image).mean()

        # Densification: keep track of max radii in image-space for pruning
        gaussians = self.gaussians
        gaussians.max_radii2D[visibility_filter] = torch.max(gaussians.max_radii2D[visibility_filter],  # BREAK: where
                                                             radii[visibility_filter])  # BREAK: same rewrite
        return image, Ll1, gaussians.max_radii2D.clone()


def build_gsplat_render():
    torch.manual_seed(1310)
    g = seeded(1311)
    model = GaussianSplattingStep(num_points=24, g=g)
    gt_image = torch.rand(16, 16, 3, generator=g)
    return model, (Camera(), gt_image)
