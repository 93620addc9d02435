"""Scientific ML: a Lennard-Jones force field with a switched cutoff over periodic boxes (fitted epsilon and
sigma per atom type), exact Gaussian-process regression with GPyTorch's ``psd_safe_cholesky`` and
standardised targets, and PID gains tuned by backpropagating through a closed-loop simulation with
integrator anti-windup and actuator saturation."""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from .helpers import scatter, seeded

# --------------------------------------------------------------------------- Lennard-Jones with cutoff


class LennardJones(nn.Module):
    def __init__(self, num_types: int = 3, cutoff: float = 2.5, switch_on: float = 2.0) -> None:
        super().__init__()
        self.log_epsilon = nn.Parameter(torch.zeros(num_types))
        self.log_sigma = nn.Parameter(torch.full((num_types,), math.log(0.9)))
        self.cutoff = cutoff
        self.switch_on = switch_on

    def switching(self, r: torch.Tensor) -> torch.Tensor:
        """CHARMM-style switch: 1 below switch_on, 0 at the cutoff, smooth in between."""
        rc2, rs2, r2 = self.cutoff**2, self.switch_on**2, r**2
        sw = (rc2 - r2) ** 2 * (rc2 + 2 * r2 - 3 * rs2) / (rc2 - rs2) ** 3
        return torch.where(r < self.switch_on, torch.ones_like(r), sw)

    def forward(self, pos: torch.Tensor, types: torch.Tensor, batch: torch.Tensor, box: torch.Tensor):
        n = pos.size(0)
        pairs = torch.triu_indices(n, n, offset=1)
        vec = pos[pairs[1]] - pos[pairs[0]]
        cell = box[batch[pairs[0]]]
        vec = vec - cell * torch.round(vec / cell)  # minimum image convention
        dist = vec.norm(dim=-1)

        within = (dist < self.cutoff) & (batch[pairs[0]] == batch[pairs[1]])
        pairs, dist = pairs[:, within], dist[within]  # BREAK: keep all pairs, zero the energy outside

        eps = torch.exp(self.log_epsilon)
        sig = torch.exp(self.log_sigma)
        eps_ij = torch.sqrt(eps[types[pairs[0]]] * eps[types[pairs[1]]])  # Lorentz-Berthelot mixing
        sig_ij = 0.5 * (sig[types[pairs[0]]] + sig[types[pairs[1]]])
        sr6 = (sig_ij / dist) ** 6
        e_pair = 4 * eps_ij * (sr6**2 - sr6) * self.switching(dist)

        energy = scatter(e_pair, batch[pairs[0]], dim=0, reduce="sum")
        return energy


def build_lj_cutoff():
    torch.manual_seed(950)
    model = LennardJones()
    g = seeded(951)
    boxes, per_box = 2, 8
    # a jittered 2x2x2 lattice per box so that no two atoms overlap
    lattice = torch.stack(torch.meshgrid(*[torch.arange(2.0)] * 3, indexing="ij"), -1).view(-1, 3) * 1.6
    pos = torch.cat([lattice + 0.2 * torch.randn(per_box, 3, generator=g) for _ in range(boxes)])
    batch = torch.arange(boxes).repeat_interleave(per_box)
    types = torch.randint(0, 3, (boxes * per_box,), generator=g)
    box = torch.tensor([[3.2, 3.2, 3.2], [3.4, 3.2, 3.3]])
    return model, (pos, types, batch, box)


# --------------------------------------------------------------------------- Gaussian process with jitter


class NumericalWarning(RuntimeWarning):
    pass


class NotPSDError(RuntimeError):
    pass


def psd_safe_cholesky(A: torch.Tensor, jitter: float | None = None, max_tries: int = 3) -> torch.Tensor:
    """Compute the Cholesky decomposition of A. If A is only p.s.d, add a small jitter to the diagonal."""
    L, info = torch.linalg.cholesky_ex(A)
    if not torch.any(info):  # BREAK must-not: jitter retries warn or raise NotPSDError on the host
        return L
    if torch.any(torch.isnan(A)):
        raise ValueError(
            f"cholesky_cpu: {torch.isnan(A).sum().item()} of {A.numel()} elements of the {A.shape} tensor are NaN."
        )

    if jitter is None:
        jitter = 1e-6 if A.dtype == torch.float32 else 1e-8
    Aprime = A.clone()
    jitter_prev = 0
    for i in range(max_tries):
        jitter_new = jitter * (10**i)
        Aprime.diagonal(dim1=-2, dim2=-1).add_(jitter_new - jitter_prev)
        jitter_prev = jitter_new
        L, info = torch.linalg.cholesky_ex(Aprime)
        if not torch.any(info):
            warnings.warn(
                f"A not p.d., added jitter of {jitter_new:.1e} to the diagonal",
                NumericalWarning,
                stacklevel=2,
            )
            return L
    raise NotPSDError(f"Matrix not positive definite after repeatedly adding jitter up to {jitter_new:.1e}.")


def standardize(y: torch.Tensor) -> torch.Tensor:
    std = y.std()
    if std < 1e-8:  # BREAK: torch.where(std < 1e-8, 1, std)
        std = torch.ones_like(std)
    return (y - y.mean()) / std


class ExactGP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.tensor(0.3))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.5))
        self.raw_noise = nn.Parameter(torch.tensor(-2.0))

    def kernel(self, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
        lengthscale = nn.functional.softplus(self.raw_lengthscale)
        outputscale = nn.functional.softplus(self.raw_outputscale)
        sq = torch.cdist(x1 / lengthscale, x2 / lengthscale).pow(2)
        return outputscale * torch.exp(-0.5 * sq)

    def forward(self, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor):
        y = standardize(train_y)
        n = y.numel()
        noise = nn.functional.softplus(self.raw_noise) + 1e-4
        K = self.kernel(train_x, train_x) + noise * torch.eye(n)
        L = psd_safe_cholesky(K)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), L)
        mll = (
            -0.5 * (y.unsqueeze(0) @ alpha).squeeze()
            - L.diagonal().log().sum()
            - 0.5 * n * math.log(2 * math.pi)
        )
        mean = (self.kernel(test_x, train_x) @ alpha).squeeze(-1)
        return -mll / n, mean


def build_gp_jitter():
    torch.manual_seed(960)
    model = ExactGP()
    g = seeded(961)
    train_x = torch.rand(20, 2, generator=g)
    train_y = (
        torch.sin(6 * train_x[:, 0])
        + 0.5 * torch.cos(4 * train_x[:, 1])
        + 0.05 * torch.randn(20, generator=g)
    )
    test_x = torch.rand(5, 2, generator=g)
    return model, (train_x, train_y, test_x)


# --------------------------------------------------------------------------- PID autotuning


class PID(nn.Module):
    def __init__(self, kp: float, ki: float, kd: float, integral_limit: float, u_max: float) -> None:
        super().__init__()
        self.kp = nn.Parameter(torch.tensor(kp))
        self.ki = nn.Parameter(torch.tensor(ki))
        self.kd = nn.Parameter(torch.tensor(kd))
        self.integral_limit = integral_limit
        self.u_max = u_max
        self.reset()

    def reset(self) -> None:
        self.integral = torch.zeros(())
        self.prev_error = None

    def forward(self, setpoint: torch.Tensor, measurement: torch.Tensor, dt: float) -> torch.Tensor:
        error = setpoint - measurement
        self.integral = self.integral + error * dt
        # anti-windup: clamp the integrator
        if abs(self.integral.item()) > self.integral_limit:  # BREAK: clamp the integrator unconditionally
            self.integral = self.integral.clamp(-self.integral_limit, self.integral_limit)
        derivative = (
            (error - self.prev_error) / dt if self.prev_error is not None else torch.zeros_like(error)
        )
        self.prev_error = error
        u = self.kp * error + self.ki * self.integral + self.kd * derivative
        return max(min(u, self.u_max), -self.u_max)


class ClosedLoop(nn.Module):
    """A mass-spring-damper driven by the PID; the loss is the integrated squared tracking error."""

    def __init__(
        self, mass: float = 1.0, damping: float = 0.4, stiffness: float = 2.0, dt: float = 0.05
    ) -> None:
        super().__init__()
        self.controller = PID(kp=3.0, ki=1.5, kd=0.4, integral_limit=0.6, u_max=4.0)
        self.mass, self.damping, self.stiffness, self.dt = mass, damping, stiffness, dt

    def forward(self, setpoints: torch.Tensor):
        self.controller.reset()
        x = torch.zeros(())
        v = torch.zeros(())
        trajectory = []
        for sp in setpoints:
            u = self.controller(sp, x, self.dt)
            a = (u - self.damping * v - self.stiffness * x) / self.mass
            v = v + a * self.dt
            x = x + v * self.dt
            trajectory.append(x)
        trajectory = torch.stack(trajectory)
        ise = ((setpoints - trajectory) ** 2).sum() * self.dt
        return ise, trajectory


def build_pid_autotune():
    torch.manual_seed(970)
    model = ClosedLoop()
    setpoints = torch.cat([torch.full((15,), 1.5), torch.full((15,), -0.5)])
    return model, (setpoints,)
