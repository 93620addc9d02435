"""Neural fields: nerfstudio-project/nerfacc's ``OccGridEstimator.update_every_n_steps`` (Instant-NGP's occupancy
grid: all cells during warm-up, then uniform plus a random subset of the occupied cells, the EMA of the density
times the step size, the binarised grid thresholded at the mean occupancy) driven by a small density field, as
``examples/train_mlp_nerf.py`` calls it each step."""

from __future__ import annotations

import torch
from torch import nn

from .helpers import seeded


def _meshgrid3d(res: torch.Tensor, device="cpu") -> torch.Tensor:
    """Create 3D grid coordinates."""
    assert len(res) == 3
    res = res.tolist()
    return torch.stack(torch.meshgrid([torch.arange(res[0], dtype=torch.long), torch.arange(res[1], dtype=torch.long),
                                       torch.arange(res[2], dtype=torch.long)], indexing="ij"), dim=-1).to(device)


class OccGridEstimator(nn.Module):
    def __init__(self, roi_aabb, resolution=8, levels=1):
        super().__init__()
        if isinstance(resolution, int):
            resolution = [resolution] * 3
        resolution = torch.tensor(resolution, dtype=torch.int32)
        roi_aabb = torch.tensor(roi_aabb, dtype=torch.float32)
        # Assert valid inputs.
        assert isinstance(resolution, torch.Tensor), f"Invalid type: {resolution}!"
        assert resolution.shape[0] == 3, f"Invalid shape: {resolution}!"
        assert roi_aabb.shape[0] == 6, f"Invalid shape: {roi_aabb}!"
        # Create grid coordinates and indices.
        self.cells_per_lvl = int(resolution.prod().item())
        self.levels = levels
        # Init aabbs (each level doubles the roi).
        mid = (roi_aabb[:3] + roi_aabb[3:]) / 2.0
        half = (roi_aabb[3:] - roi_aabb[:3]) / 2.0
        aabbs = torch.stack([torch.cat([mid - half * 2**i, mid + half * 2**i]) for i in range(levels)], dim=0)
        self.register_buffer("resolution", resolution)  # [3]
        self.register_buffer("aabbs", aabbs)  # [n_aabbs, 6]
        self.register_buffer("occs", torch.zeros(self.levels * self.cells_per_lvl))
        self.register_buffer("binaries", torch.zeros([levels] + resolution.tolist(), dtype=torch.bool))
        grid_coords = _meshgrid3d(resolution).reshape(self.cells_per_lvl, 3)
        self.register_buffer("grid_coords", grid_coords, persistent=False)
        grid_indices = torch.arange(self.cells_per_lvl)
        self.register_buffer("grid_indices", grid_indices, persistent=False)

    @property
    def device(self):
        return self.occs.device

    @torch.no_grad()
    def update_every_n_steps(self, step, occ_eval_fn, occ_thre=1e-2, ema_decay=0.95, warmup_steps=256, n=16):
        if not self.training:
            raise RuntimeError("You should only call this function only during training. Please call _update() directly if "
                               "you want to update the field during inference.")
        if step % n == 0 and self.training:
            self._update(step=step, occ_eval_fn=occ_eval_fn, occ_thre=occ_thre, ema_decay=ema_decay, warmup_steps=warmup_steps)

    @torch.no_grad()
    def _get_all_cells(self):
        """Returns all cells of the grid."""
        return [self.grid_indices] * self.levels

    @torch.no_grad()
    def _sample_uniform_and_occupied_cells(self, n):
        """Samples both n uniform and occupied cells."""
        lvl_indices = []
        for lvl in range(self.levels):
            uniform_indices = torch.randint(self.cells_per_lvl, (n,), device=self.device)
            occupied_indices = torch.nonzero(self.binaries[lvl].flatten())[:, 0]  # BREAK must-not: a random subset of the occupied cells is evaluated; how many and the draws depend on the grid
            if n < len(occupied_indices):
                selector = torch.randint(len(occupied_indices), (n,), device=self.device)
                occupied_indices = occupied_indices[selector]
            indices = torch.cat([uniform_indices, occupied_indices], dim=0)
            lvl_indices.append(indices)
        return lvl_indices

    @torch.no_grad()
    def _update(self, step, occ_eval_fn, occ_thre=0.01, ema_decay=0.95, warmup_steps=256):
        """Update the occ field in the EMA way."""
        # sample cells
        if step < warmup_steps:
            lvl_indices = self._get_all_cells()
        else:
            N = self.cells_per_lvl // 4
            lvl_indices = self._sample_uniform_and_occupied_cells(N)

        for lvl, indices in enumerate(lvl_indices):
            # infer occupancy: density * step_size
            grid_coords = self.grid_coords[indices]
            x = (grid_coords + torch.rand_like(grid_coords, dtype=torch.float32)) / self.resolution
            # voxel coordinates [0, 1]^3 -> world
            x = self.aabbs[lvl, :3] + x * (self.aabbs[lvl, 3:] - self.aabbs[lvl, :3])
            occ = occ_eval_fn(x).squeeze(-1)
            # ema update
            cell_ids = lvl * self.cells_per_lvl + indices
            self.occs[cell_ids] = torch.maximum(self.occs[cell_ids] * ema_decay, occ)
            # suppose to use scatter max but emperically it is almost the same.
        thre = torch.clamp(self.occs[self.occs >= 0].mean(), max=occ_thre)  # BREAK: a masked mean, sum(occs * mask) / mask.sum()
        self.binaries = (self.occs > thre).view(self.binaries.shape)


class DensityField(nn.Module):
    """The density branch of a VanillaNeRF-style radiance field (positional encoding, MLP, softplus)."""

    def __init__(self, n_freqs=3, width=32):
        super().__init__()
        self.register_buffer("freqs", 2.0 ** torch.arange(n_freqs))
        self.mlp = nn.Sequential(nn.Linear(3 + 6 * n_freqs, width), nn.ReLU(), nn.Linear(width, 1))

    def query_density(self, x):
        xb = x[..., None, :] * self.freqs[:, None]
        enc = torch.cat([x, torch.sin(xb).flatten(-2), torch.cos(xb).flatten(-2)], dim=-1)
        return nn.functional.softplus(self.mlp(enc) - 1.0)


class OccupancyStep(nn.Module):
    """The occupancy-grid part of one training step of ``train_mlp_nerf.py``."""

    def __init__(self, step):
        super().__init__()
        self.estimator = OccGridEstimator(roi_aabb=[-1.0, -1.0, -1.0, 1.0, 1.0, 1.0], resolution=8, levels=1)
        self.radiance_field = DensityField()
        self.render_step_size = 0.05
        self.step = step

    def forward(self):
        def occ_eval_fn(x):
            density = self.radiance_field.query_density(x)
            return density * self.render_step_size

        # update occupancy grid
        self.estimator.update_every_n_steps(step=self.step, occ_eval_fn=occ_eval_fn, occ_thre=1e-2, warmup_steps=64)
        return self.estimator.occs.clone(), self.estimator.binaries.clone()


def build_ngp_occupancy():
    seeded(1321)
    model = OccupancyStep(step=320)  # past warm-up: uniform and occupied cells are sampled
    # the grid as the earlier updates left it
    model.estimator.occs.copy_(torch.rand(model.estimator.occs.shape) * 0.03)
    model.estimator.binaries = (model.estimator.occs > 0.01).view(model.estimator.binaries.shape)
    return model, ()
