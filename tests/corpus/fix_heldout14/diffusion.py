"""Diffusion samplers: LuChengTHU/dpm-solver's ``DPM_Solver`` for a discrete-time DDPM (``NoiseScheduleVP`` with
``interpolate_fn``, ``model_wrapper``'s classifier guidance whose ``cond_grad_fn`` takes the classifier's gradient
with ``autograd.grad``, the multistep DPM-Solver++ warm-up and its second-order updates; the adaptive step-size
solver whose ``while`` loop runs until the time reaches t_0) and luosiallen/latent-consistency-model's
``LatentConsistencyModelPipeline`` loop (``LCMScheduler.set_timesteps`` and ``step`` with its boundary-condition
scalings, the guidance-scale embedding ``get_w_embedding``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ small denoisers and a noisy classifier


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TinyUNet(nn.Module):
    def __init__(self, channels=3, width=8, cond_dim=0, context_dim=0):
        super().__init__()
        self.width = width
        self.time_embed = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.cond_proj = nn.Linear(cond_dim, width, bias=False) if cond_dim else None
        self.context_proj = nn.Linear(context_dim, width) if context_dim else None
        self.conv_in = nn.Conv2d(channels, width, 3, padding=1)
        self.down = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(width, width, 2, stride=2)
        self.conv_out = nn.Conv2d(2 * width, channels, 3, padding=1)

    def forward(self, x, timesteps, timestep_cond=None, encoder_hidden_states=None):
        emb = self.time_embed(timestep_embedding(timesteps, self.width))
        if timestep_cond is not None:
            emb = emb + self.cond_proj(timestep_cond)
        h0 = F.silu(self.conv_in(x) + emb[:, :, None, None])
        h = F.silu(self.down(h0))
        if encoder_hidden_states is not None:
            ctx = self.context_proj(encoder_hidden_states)  # [B, L, C]
            q = h.flatten(2).transpose(1, 2)  # [B, HW, C]
            attn = torch.softmax(q @ ctx.transpose(1, 2) / math.sqrt(self.width), dim=-1)
            h = h + (attn @ ctx).transpose(1, 2).reshape(h.shape)
        h = F.silu(self.up(h))
        return self.conv_out(torch.cat([h, h0], dim=1))


class NoisyClassifier(nn.Module):
    def __init__(self, channels=3, width=8, num_classes=4):
        super().__init__()
        self.width = width
        self.time_embed = nn.Linear(width, width)
        self.conv = nn.Conv2d(channels, width, 3, padding=1)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x, timesteps):
        h = F.silu(self.conv(x) + self.time_embed(timestep_embedding(timesteps, self.width))[:, :, None, None])
        return self.fc(h.mean(dim=(2, 3)))


# ------------------------------------------------------------------ dpm_solver_pytorch.py


class NoiseScheduleVP:
    def __init__(self, schedule="discrete", betas=None, dtype=torch.float32):
        if schedule not in ["discrete"]:
            raise ValueError(f"Unsupported noise schedule {schedule}.")
        self.schedule = schedule
        log_alphas = 0.5 * torch.log(1 - betas).cumsum(dim=0)
        self.total_N = len(log_alphas)
        self.T = 1.0
        self.t_array = torch.linspace(0.0, 1.0, self.total_N + 1)[1:].reshape((1, -1)).to(dtype=dtype)
        self.log_alpha_array = log_alphas.reshape((1, -1)).to(dtype=dtype)

    def marginal_log_mean_coeff(self, t):
        """Compute log(alpha_t) of a given continuous-time label t in [0, T]."""
        return interpolate_fn(t.reshape((-1, 1)), self.t_array.to(t.device), self.log_alpha_array.to(t.device)).reshape(-1)

    def marginal_alpha(self, t):
        return torch.exp(self.marginal_log_mean_coeff(t))

    def marginal_std(self, t):
        return torch.sqrt(1.0 - torch.exp(2.0 * self.marginal_log_mean_coeff(t)))

    def marginal_lambda(self, t):
        """Compute lambda_t = log(alpha_t) - log(sigma_t) of a given continuous-time label t in [0, T]."""
        log_mean_coeff = self.marginal_log_mean_coeff(t)
        log_std = 0.5 * torch.log(1.0 - torch.exp(2.0 * log_mean_coeff))
        return log_mean_coeff - log_std

    def inverse_lambda(self, lamb):
        """Compute the continuous-time label t in [0, T] of a given half-logSNR lambda_t."""
        log_alpha = -0.5 * torch.logaddexp(torch.zeros((1,)).to(lamb), -2.0 * lamb)
        t = interpolate_fn(log_alpha.reshape((-1, 1)), torch.flip(self.log_alpha_array.to(lamb.device), [1]), torch.flip(self.t_array.to(lamb.device), [1]))
        return t.reshape((-1,))


def model_wrapper(model, noise_schedule, model_type="noise", model_kwargs=None, guidance_type="uncond", condition=None,
                  guidance_scale=1.0, classifier_fn=None, classifier_kwargs=None):
    """Create a wrapper function for the noise prediction model: a continuous-time noise prediction model."""
    model_kwargs = model_kwargs or {}
    classifier_kwargs = classifier_kwargs or {}

    def get_model_input_time(t_continuous):
        if noise_schedule.schedule == "discrete":
            return (t_continuous - 1.0 / noise_schedule.total_N) * 1000.0
        else:
            return t_continuous

    def noise_pred_fn(x, t_continuous, cond=None):
        t_input = get_model_input_time(t_continuous)
        if cond is None:
            output = model(x, t_input, **model_kwargs)
        else:
            output = model(x, t_input, cond, **model_kwargs)
        if model_type == "noise":
            return output

    def cond_grad_fn(x, t_input):
        """Compute the gradient of the classifier, i.e. nabla_{x} log p_t(cond | x_t)."""
        with torch.enable_grad():
            x_in = x.detach().requires_grad_(True)  # BREAK: no leaf needed: torch.func.grad of the summed log-probability at x gives the same gradient
            log_prob = classifier_fn(x_in, t_input, condition, **classifier_kwargs)
            return torch.autograd.grad(log_prob.sum(), x_in)[0]  # BREAK: torch.func.grad(lambda x_in: classifier_fn(...).sum())(x)

    def model_fn(x, t_continuous):
        """The noise predicition model function that is used for DPM-Solver."""
        if guidance_type == "uncond":
            return noise_pred_fn(x, t_continuous)
        elif guidance_type == "classifier":
            assert classifier_fn is not None
            t_input = get_model_input_time(t_continuous)
            cond_grad = cond_grad_fn(x, t_input)
            sigma_t = noise_schedule.marginal_std(t_continuous)
            noise = noise_pred_fn(x, t_continuous)
            return noise - guidance_scale * expand_dims(sigma_t, x.dim()) * cond_grad

    assert model_type in ["noise", "x_start", "v", "score"]
    assert guidance_type in ["uncond", "classifier", "classifier-free"]
    return model_fn


class DPM_Solver:
    def __init__(self, model_fn, noise_schedule, algorithm_type="dpmsolver++", correcting_x0_fn=None):
        self.model = lambda x, t: model_fn(x, t.expand(x.shape[0]))
        self.noise_schedule = noise_schedule
        assert algorithm_type in ["dpmsolver", "dpmsolver++"]
        self.algorithm_type = algorithm_type
        self.correcting_x0_fn = correcting_x0_fn

    def noise_prediction_fn(self, x, t):
        return self.model(x, t)

    def data_prediction_fn(self, x, t):
        """Return the data prediction model (with corrector)."""
        noise = self.noise_prediction_fn(x, t)
        alpha_t, sigma_t = self.noise_schedule.marginal_alpha(t), self.noise_schedule.marginal_std(t)
        x0 = (x - sigma_t * noise) / alpha_t
        if self.correcting_x0_fn is not None:
            x0 = self.correcting_x0_fn(x0, t)
        return x0

    def model_fn(self, x, t):
        if self.algorithm_type == "dpmsolver++":
            return self.data_prediction_fn(x, t)
        else:
            return self.noise_prediction_fn(x, t)

    def get_time_steps(self, skip_type, t_T, t_0, N, device):
        if skip_type == "time_uniform":
            return torch.linspace(t_T, t_0, N + 1).to(device)
        elif skip_type == "time_quadratic":
            t_order = 2
            return torch.linspace(t_T ** (1.0 / t_order), t_0 ** (1.0 / t_order), N + 1).pow(t_order).to(device)
        raise ValueError(f"Unsupported skip_type {skip_type}")

    def dpm_solver_first_update(self, x, s, t, model_s=None, return_intermediate=False):
        """DPM-Solver-1 (equivalent to DDIM) from time `s` to time `t`."""
        ns = self.noise_schedule
        lambda_s, lambda_t = ns.marginal_lambda(s), ns.marginal_lambda(t)
        h = lambda_t - lambda_s
        log_alpha_t = ns.marginal_log_mean_coeff(t)
        sigma_s, sigma_t = ns.marginal_std(s), ns.marginal_std(t)
        alpha_t = torch.exp(log_alpha_t)
        phi_1 = torch.expm1(-h)
        if model_s is None:
            model_s = self.model_fn(x, s)
        x_t = sigma_t / sigma_s * x - alpha_t * phi_1 * model_s
        if return_intermediate:
            return x_t, {"model_s": model_s}
        else:
            return x_t

    def singlestep_dpm_solver_second_update(self, x, s, t, r1=0.5, model_s=None, solver_type="dpmsolver"):
        """Singlestep solver DPM-Solver-2 from time `s` to time `t`."""
        ns = self.noise_schedule
        lambda_s, lambda_t = ns.marginal_lambda(s), ns.marginal_lambda(t)
        h = lambda_t - lambda_s
        lambda_s1 = lambda_s + r1 * h
        s1 = ns.inverse_lambda(lambda_s1)
        log_alpha_s1, log_alpha_t = ns.marginal_log_mean_coeff(s1), ns.marginal_log_mean_coeff(t)
        sigma_s, sigma_s1, sigma_t = ns.marginal_std(s), ns.marginal_std(s1), ns.marginal_std(t)
        alpha_s1, alpha_t = torch.exp(log_alpha_s1), torch.exp(log_alpha_t)
        phi_11 = torch.expm1(-r1 * h)
        phi_1 = torch.expm1(-h)
        if model_s is None:
            model_s = self.model_fn(x, s)
        x_s1 = (sigma_s1 / sigma_s) * x - (alpha_s1 * phi_11) * model_s
        model_s1 = self.model_fn(x_s1, s1)
        return (sigma_t / sigma_s) * x - (alpha_t * phi_1) * model_s - (0.5 / r1) * (alpha_t * phi_1) * (model_s1 - model_s)

    def multistep_dpm_solver_second_update(self, x, model_prev_list, t_prev_list, t, solver_type="dpmsolver"):
        """Multistep solver DPM-Solver-2 from time `t_prev_list[-1]` to time `t`."""
        ns = self.noise_schedule
        model_prev_1, model_prev_0 = model_prev_list[-2], model_prev_list[-1]
        t_prev_1, t_prev_0 = t_prev_list[-2], t_prev_list[-1]
        lambda_prev_1, lambda_prev_0, lambda_t = ns.marginal_lambda(t_prev_1), ns.marginal_lambda(t_prev_0), ns.marginal_lambda(t)
        log_alpha_t = ns.marginal_log_mean_coeff(t)
        sigma_prev_0, sigma_t = ns.marginal_std(t_prev_0), ns.marginal_std(t)
        alpha_t = torch.exp(log_alpha_t)
        h_0 = lambda_prev_0 - lambda_prev_1
        h = lambda_t - lambda_prev_0
        r0 = h_0 / h
        D1_0 = (1.0 / r0) * (model_prev_0 - model_prev_1)
        phi_1 = torch.expm1(-h)
        # Use the trick in https://github.com/LuChengTHU/dpm-solver/issues/12
        if solver_type == "dpmsolver":
            x_t = (sigma_t / sigma_prev_0) * x - (alpha_t * phi_1) * model_prev_0 - 0.5 * (alpha_t * phi_1) * D1_0
        else:
            x_t = (sigma_t / sigma_prev_0) * x - (alpha_t * phi_1) * model_prev_0 + (alpha_t * (phi_1 / h + 1.0)) * D1_0
        return x_t

    def multistep_dpm_solver_update(self, x, model_prev_list, t_prev_list, t, order, solver_type="dpmsolver"):
        if order == 1:
            return self.dpm_solver_first_update(x, t_prev_list[-1], t, model_s=model_prev_list[-1])
        elif order == 2:
            return self.multistep_dpm_solver_second_update(x, model_prev_list, t_prev_list, t, solver_type=solver_type)
        raise ValueError(f"Solver order must be 1 or 2, got {order}")

    def dpm_solver_adaptive(self, x, order, t_T, t_0, h_init=0.05, atol=0.0078, rtol=0.05, theta=0.9, t_err=1e-5, solver_type="dpmsolver"):
        """The adaptive step size solver based on singlestep DPM-Solver."""
        ns = self.noise_schedule
        s = t_T * torch.ones((1,)).to(x)
        lambda_s = ns.marginal_lambda(s)
        lambda_0 = ns.marginal_lambda(t_0 * torch.ones_like(s).to(x))
        h = h_init * torch.ones_like(s).to(x)
        x_prev = x
        nfe = 0
        if order == 2:
            r1 = 0.5

            def lower_update(x, s, t):
                return self.dpm_solver_first_update(x, s, t, return_intermediate=True)

            def higher_update(x, s, t, **kwargs):
                return self.singlestep_dpm_solver_second_update(x, s, t, r1=r1, solver_type=solver_type, **kwargs)
        else:
            raise ValueError(f"For adaptive step size solver, order must be 2 here, got {order}")
        while torch.abs(s - t_0).mean() > t_err:  # BREAK must-not: the number of solver steps is decided by the error estimates as the loop runs; it is a host loop
            t = ns.inverse_lambda(lambda_s + h)
            x_lower, lower_noise_kwargs = lower_update(x, s, t)
            x_higher = higher_update(x, s, t, **lower_noise_kwargs)
            delta = torch.max(torch.ones_like(x).to(x) * atol, rtol * torch.max(torch.abs(x_lower), torch.abs(x_prev)))

            def norm_fn(v):
                return torch.sqrt(torch.square(v.reshape((v.shape[0], -1))).mean(dim=-1, keepdim=True))

            E = norm_fn((x_higher - x_lower) / delta).max()
            if torch.all(E <= 1.0):  # BREAK must-not: whether the step is accepted (x, s and lambda_s advance) is the solver's host-side control flow
                x = x_higher
                s = t
                x_prev = x_lower
                lambda_s = ns.marginal_lambda(s)
            h = torch.min(theta * h * torch.float_power(E, -1.0 / order).float(), lambda_0 - lambda_s)
            nfe += order
        print("adaptive solver nfe", nfe)
        return x

    def sample(self, x, steps=20, t_start=None, t_end=None, order=2, skip_type="time_uniform", method="multistep",
               lower_order_final=True, solver_type="dpmsolver", atol=0.0078, rtol=0.05):
        t_0 = 1.0 / self.noise_schedule.total_N if t_end is None else t_end
        t_T = self.noise_schedule.T if t_start is None else t_start
        assert t_0 > 0 and t_T > 0, "Time range needs to be greater than 0. For discrete-time DPMs, it needs to be in [1 / N, 1]"
        device = x.device
        with torch.no_grad():
            if method == "adaptive":
                x = self.dpm_solver_adaptive(x, order=order, t_T=t_T, t_0=t_0, atol=atol, rtol=rtol, solver_type=solver_type)
            elif method == "multistep":
                assert steps >= order
                timesteps = self.get_time_steps(skip_type=skip_type, t_T=t_T, t_0=t_0, N=steps, device=device)
                assert timesteps.shape[0] - 1 == steps
                # Init the initial values.
                step = 0
                t = timesteps[step]
                t_prev_list = [t]
                model_prev_list = [self.model_fn(x, t)]
                # Init the first `order` values by lower order multistep DPM-Solver.
                for step in range(1, order):
                    t = timesteps[step]
                    x = self.multistep_dpm_solver_update(x, model_prev_list, t_prev_list, t, step, solver_type=solver_type)
                    t_prev_list.append(t)
                    model_prev_list.append(self.model_fn(x, t))
                # Compute the remaining values by `order`-th order multistep DPM-Solver.
                for step in range(order, steps + 1):
                    t = timesteps[step]
                    # We only use lower order for steps < 10
                    if lower_order_final and steps < 10:
                        step_order = min(order, steps + 1 - step)
                    else:
                        step_order = order
                    x = self.multistep_dpm_solver_update(x, model_prev_list, t_prev_list, t, step_order, solver_type=solver_type)
                    for i in range(order - 1):
                        t_prev_list[i] = t_prev_list[i + 1]
                        model_prev_list[i] = model_prev_list[i + 1]
                    t_prev_list[-1] = t
                    # We do not need to evaluate the final model value.
                    if step < steps:
                        model_prev_list[-1] = self.model_fn(x, t)
        return x


def interpolate_fn(x, xp, yp):
    """A piecewise linear function y = f(x), using xp and yp as keypoints (differentiable, batched)."""
    N, K = x.shape[0], xp.shape[1]
    all_x = torch.cat([x.unsqueeze(2), xp.unsqueeze(0).repeat((N, 1, 1))], dim=2)
    sorted_all_x, x_indices = torch.sort(all_x, dim=2)
    x_idx = torch.argmin(x_indices, dim=2)
    cand_start_idx = x_idx - 1
    start_idx = torch.where(
        torch.eq(x_idx, 0),
        torch.tensor(1, device=x.device),
        torch.where(torch.eq(x_idx, K), torch.tensor(K - 2, device=x.device), cand_start_idx),
    )
    end_idx = torch.where(torch.eq(start_idx, cand_start_idx), start_idx + 2, start_idx + 1)
    start_x = torch.gather(sorted_all_x, dim=2, index=start_idx.unsqueeze(2)).squeeze(2)
    end_x = torch.gather(sorted_all_x, dim=2, index=end_idx.unsqueeze(2)).squeeze(2)
    start_idx2 = torch.where(
        torch.eq(x_idx, 0),
        torch.tensor(0, device=x.device),
        torch.where(torch.eq(x_idx, K), torch.tensor(K - 2, device=x.device), cand_start_idx),
    )
    y_positions_expanded = yp.unsqueeze(0).expand(N, -1, -1)
    start_y = torch.gather(y_positions_expanded, dim=2, index=start_idx2.unsqueeze(2)).squeeze(2)
    end_y = torch.gather(y_positions_expanded, dim=2, index=(start_idx2 + 1).unsqueeze(2)).squeeze(2)
    cand = start_y + (x - start_x) * (end_y - start_y) / (end_x - start_x)
    return cand


def expand_dims(v, dims):
    """Expand the tensor `v` to the dim `dims`."""
    return v[(...,) + (None,) * (dims - 1)]


class GuidedDPMSolver(nn.Module):
    """Classifier-guided sampling of a guided-diffusion style model with multistep DPM-Solver++ (order 2); the
    wrapper is built for the batch's class labels, as in the README's classifier-guidance example."""

    def __init__(self, y, guidance_scale=2.0, steps=6):
        super().__init__()
        self.unet = TinyUNet()
        self.classifier = NoisyClassifier()
        self.noise_schedule = NoiseScheduleVP("discrete", betas=torch.linspace(1e-4, 0.02, 1000))
        self.steps = steps

        def classifier_fn(x, t, y, **kwargs):
            logits = self.classifier(x, t)
            log_probs = F.log_softmax(logits, dim=-1)
            return log_probs[range(len(logits)), y.view(-1)]

        model_fn = model_wrapper(self.unet, self.noise_schedule, model_type="noise", guidance_type="classifier", condition=y,
                                 guidance_scale=guidance_scale, classifier_fn=classifier_fn)
        self.dpm_solver = DPM_Solver(model_fn, self.noise_schedule, algorithm_type="dpmsolver++")

    def forward(self, x_T):
        return self.dpm_solver.sample(x_T, steps=self.steps, order=2, skip_type="time_uniform", method="multistep")


def build_dpm_solver_guided():
    seeded(1412)
    return GuidedDPMSolver(torch.tensor([1, 3])).eval(), (torch.randn(2, 3, 8, 8),)


class AdaptiveDPMSolver(nn.Module):
    """Unconditional sampling with DPM-Solver++'s adaptive step size (order 2)."""

    def __init__(self):
        super().__init__()
        self.unet = TinyUNet()
        self.noise_schedule = NoiseScheduleVP("discrete", betas=torch.linspace(1e-4, 0.02, 1000))
        model_fn = model_wrapper(self.unet, self.noise_schedule, model_type="noise")
        self.dpm_solver = DPM_Solver(model_fn, self.noise_schedule, algorithm_type="dpmsolver++")

    def forward(self, x_T):
        return self.dpm_solver.sample(x_T, order=2, method="adaptive", atol=0.05, rtol=0.2)


def build_dpm_solver_adaptive():
    seeded(1413)
    model = AdaptiveDPMSolver().eval()
    with torch.no_grad():
        for p in model.unet.parameters():
            p.mul_(0.3)  # a smooth denoiser: few adaptive steps
    return model, (torch.randn(1, 3, 4, 4),)


# ------------------------------------------------------------------ latent-consistency-model lcm_scheduler.py + lcm_pipeline.py


class LCMScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012, set_alpha_to_one=True, prediction_type="epsilon"):
        self.config = SimpleNamespace(num_train_timesteps=num_train_timesteps, prediction_type=prediction_type)
        # this schedule is very specific to the latent diffusion model.
        self.betas = torch.linspace(beta_start**0.5, beta_end**0.5, num_train_timesteps, dtype=torch.float32) ** 2
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        # At every step in ddim, we are looking into the previous alphas_cumprod
        # For the final step, there is no previous alphas_cumprod because we are already at 0
        self.final_alpha_cumprod = torch.tensor(1.0) if set_alpha_to_one else self.alphas_cumprod[0]
        # standard deviation of the initial noise distribution
        self.init_noise_sigma = 1.0
        # setable values
        self.num_inference_steps = None
        self.timesteps = torch.from_numpy(np.arange(0, num_train_timesteps)[::-1].copy().astype(np.int64))

    def set_timesteps(self, num_inference_steps, lcm_origin_steps, device=None):
        if num_inference_steps > self.config.num_train_timesteps:
            raise ValueError("`num_inference_steps` cannot be larger than `self.config.train_timesteps`")
        self.num_inference_steps = num_inference_steps
        # LCM Timesteps Setting:  # Linear Spacing
        c = self.config.num_train_timesteps // lcm_origin_steps
        lcm_origin_timesteps = np.asarray(list(range(1, lcm_origin_steps + 1))) * c - 1  # LCM Training  Steps Schedule
        skipping_step = len(lcm_origin_timesteps) // num_inference_steps
        timesteps = lcm_origin_timesteps[::-skipping_step][:num_inference_steps]  # LCM Inference Steps Schedule
        self.timesteps = torch.from_numpy(timesteps.copy()).to(device)

    def get_scalings_for_boundary_condition_discrete(self, t):
        self.sigma_data = 0.5  # Default: 0.5
        # By dividing 0.1: This is almost a delta function at t=0.
        c_skip = self.sigma_data**2 / ((t / 0.1) ** 2 + self.sigma_data**2)
        c_out = (t / 0.1) / ((t / 0.1) ** 2 + self.sigma_data**2) ** 0.5
        return c_skip, c_out

    def step(self, model_output, timeindex, timestep, sample):
        if self.num_inference_steps is None:
            raise ValueError("Number of inference steps is 'None', you need to run 'set_timesteps' after creating the scheduler")
        # 1. get previous step value
        prev_timeindex = timeindex + 1
        if prev_timeindex < len(self.timesteps):
            prev_timestep = self.timesteps[prev_timeindex]
        else:
            prev_timestep = timestep
        # 2. compute alphas, betas
        alpha_prod_t = self.alphas_cumprod[timestep]  # BREAK: a 0-d timestep used as an index is read as an int: gather with it as a one-element index tensor
        alpha_prod_t_prev = self.alphas_cumprod[prev_timestep] if prev_timestep >= 0 else self.final_alpha_cumprod  # BREAK: torch.where(prev_timestep >= 0, gathered alpha at the clamped index, final_alpha_cumprod)
        beta_prod_t = 1 - alpha_prod_t
        beta_prod_t_prev = 1 - alpha_prod_t_prev
        # 3. Get scalings for boundary conditions
        c_skip, c_out = self.get_scalings_for_boundary_condition_discrete(timestep)
        # 4. Different Parameterization:
        parameterization = self.config.prediction_type
        if parameterization == "epsilon":  # noise-prediction
            pred_x0 = (sample - beta_prod_t.sqrt() * model_output) / alpha_prod_t.sqrt()
        elif parameterization == "sample":  # x-prediction
            pred_x0 = model_output
        elif parameterization == "v_prediction":  # v-prediction
            pred_x0 = alpha_prod_t.sqrt() * sample - beta_prod_t.sqrt() * model_output
        # 4. Denoise model output using boundary conditions
        denoised = c_out * pred_x0 + c_skip * sample
        # 5. Sample z ~ N(0, I), For MultiStep Inference
        # Noise is not used for one-step sampling.
        if len(self.timesteps) > 1:
            noise = torch.randn(model_output.shape).to(model_output.device)
            prev_sample = alpha_prod_t_prev.sqrt() * denoised + beta_prod_t_prev.sqrt() * noise
        else:
            prev_sample = denoised
        return (prev_sample, denoised)


class LatentConsistencyModelPipeline(nn.Module):
    def __init__(self):
        super().__init__()
        self.unet = TinyUNet(channels=4, width=8, cond_dim=32, context_dim=12)
        self.scheduler = LCMScheduler()

    def get_w_embedding(self, w, embedding_dim=512, dtype=torch.float32):
        """see https://github.com/google-research/vdm/blob/dc27b98a554f65cdc654b800da5aa1846545d41b/model_vdm.py#L298"""
        assert len(w.shape) == 1
        w = w * 1000.0
        half_dim = embedding_dim // 2
        emb = torch.log(torch.tensor(10000.0)) / (half_dim - 1)
        emb = torch.exp(torch.arange(half_dim, dtype=dtype) * -emb)
        emb = w.to(dtype)[:, None] * emb[None, :]
        emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1)
        if embedding_dim % 2 == 1:  # zero pad
            emb = torch.nn.functional.pad(emb, (0, 1))
        assert emb.shape == (w.shape[0], embedding_dim)
        return emb

    @torch.no_grad()
    def forward(self, prompt_embeds, latents, guidance_scale=8.0, num_inference_steps=4, lcm_origin_steps=50):
        # 4. Prepare timesteps
        self.scheduler.set_timesteps(num_inference_steps, lcm_origin_steps)
        timesteps = self.scheduler.timesteps
        # 5. Prepare latent variable
        latents = latents * self.scheduler.init_noise_sigma
        bs = latents.shape[0]
        # 6. Get Guidance Scale Embedding
        w = torch.tensor(guidance_scale).repeat(bs)
        w_embedding = self.get_w_embedding(w, embedding_dim=32).to(dtype=latents.dtype)
        # 7. LCM MultiStep Sampling Loop:
        for i, t in enumerate(timesteps):
            ts = torch.full((bs,), t, dtype=torch.long)
            latents = latents.to(prompt_embeds.dtype)
            # model prediction (v-prediction, eps, x)
            model_pred = self.unet(latents, ts, timestep_cond=w_embedding, encoder_hidden_states=prompt_embeds)
            # compute the previous noisy sample x_t -> x_t-1
            latents, denoised = self.scheduler.step(model_pred, i, t, latents)
        denoised = denoised.to(prompt_embeds.dtype)
        return denoised


def build_lcm_sample():
    seeded(1414)
    return LatentConsistencyModelPipeline().eval(), (torch.randn(2, 5, 12), torch.randn(2, 4, 8, 8))
