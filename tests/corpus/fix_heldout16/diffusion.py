"""Diffusion: openai/improved-diffusion's ``TrainLoop.forward_backward`` up to the backward -- ``UniformSampler.sample``
drawing the timesteps with numpy, ``GaussianDiffusion.training_losses`` for a learned-range variance (the hybrid MSE +
``_vb_terms_bpd`` objective, ``_extract_into_tensor`` indexing the float64 numpy schedules, ``normal_kl`` and
``discretized_gaussian_log_likelihood``) and ``log_loss_dict`` logging the mean of each loss term; and huggingface/diffusers' (0.16) ``DDPMPipeline`` sampling
loop through ``DDPMScheduler.step`` (the schedule indexed by the 0-d timestep tensor, ``prev_t >= 0`` choosing the
previous cumulative alpha, noise added only while ``t > 0``, ``_get_variance``); lucidrains/denoising-diffusion-pytorch's ``GaussianDiffusion.ddim_sample`` (the sampling times
from ``torch.linspace(...).int().tolist()``, ``model_predictions`` for the ``pred_v`` objective)."""

from __future__ import annotations

import enum
import functools
import math
from abc import ABC, abstractmethod
from collections import defaultdict, namedtuple
from functools import partial

import numpy as np
import torch as th
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# ------------------------------------------------------------------ improved_diffusion/logger.py (the kv part)


class Logger:
    def __init__(self):
        self.name2val = defaultdict(float)  # values this iteration
        self.name2cnt = defaultdict(int)

    def logkv_mean(self, key, val):
        oldval, cnt = self.name2val[key], self.name2cnt[key]
        self.name2val[key] = oldval * cnt / (cnt + 1) + val / (cnt + 1)
        self.name2cnt[key] = cnt + 1


logger = Logger()

# ------------------------------------------------------------------ improved_diffusion/nn.py, losses.py


def mean_flat(tensor):
    """Take the mean over all non-batch dimensions."""
    return tensor.mean(dim=list(range(1, len(tensor.shape))))


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = th.exp(-math.log(max_period) * th.arange(start=0, end=half, dtype=th.float32) / half).to(device=timesteps.device)
    args = timesteps[:, None].float() * freqs[None]
    embedding = th.cat([th.cos(args), th.sin(args)], dim=-1)
    if dim % 2:
        embedding = th.cat([embedding, th.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


def normal_kl(mean1, logvar1, mean2, logvar2):
    """Compute the KL divergence between two gaussians."""
    tensor = None
    for obj in (mean1, logvar1, mean2, logvar2):
        if isinstance(obj, th.Tensor):
            tensor = obj
            break
    assert tensor is not None, "at least one argument must be a Tensor"

    # Force variances to be Tensors. Broadcasting helps convert scalars to
    # Tensors, but it does not work for th.exp().
    logvar1, logvar2 = [x if isinstance(x, th.Tensor) else th.tensor(x).to(tensor) for x in (logvar1, logvar2)]

    return 0.5 * (-1.0 + logvar2 - logvar1 + th.exp(logvar1 - logvar2) + ((mean1 - mean2) ** 2) * th.exp(-logvar2))


def approx_standard_normal_cdf(x):
    return 0.5 * (1.0 + th.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * th.pow(x, 3))))


def discretized_gaussian_log_likelihood(x, *, means, log_scales):
    assert x.shape == means.shape == log_scales.shape
    centered_x = x - means
    inv_stdv = th.exp(-log_scales)
    plus_in = inv_stdv * (centered_x + 1.0 / 255.0)
    cdf_plus = approx_standard_normal_cdf(plus_in)
    min_in = inv_stdv * (centered_x - 1.0 / 255.0)
    cdf_min = approx_standard_normal_cdf(min_in)
    log_cdf_plus = th.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = th.log((1.0 - cdf_min).clamp(min=1e-12))
    cdf_delta = cdf_plus - cdf_min
    log_probs = th.where(x < -0.999, log_cdf_plus, th.where(x > 0.999, log_one_minus_cdf_min, th.log(cdf_delta.clamp(min=1e-12))))
    assert log_probs.shape == x.shape
    return log_probs


# ------------------------------------------------------------------ improved_diffusion/gaussian_diffusion.py


class ModelMeanType(enum.Enum):
    PREVIOUS_X = enum.auto()
    START_X = enum.auto()
    EPSILON = enum.auto()


class ModelVarType(enum.Enum):
    LEARNED = enum.auto()
    FIXED_SMALL = enum.auto()
    FIXED_LARGE = enum.auto()
    LEARNED_RANGE = enum.auto()


class LossType(enum.Enum):
    MSE = enum.auto()
    RESCALED_MSE = enum.auto()
    KL = enum.auto()
    RESCALED_KL = enum.auto()


def betas_for_alpha_bar(num_diffusion_timesteps, alpha_bar, max_beta=0.999):
    betas = []
    for i in range(num_diffusion_timesteps):
        t1 = i / num_diffusion_timesteps
        t2 = (i + 1) / num_diffusion_timesteps
        betas.append(min(1 - alpha_bar(t2) / alpha_bar(t1), max_beta))
    return np.array(betas)


def get_named_beta_schedule(schedule_name, num_diffusion_timesteps):
    if schedule_name == "linear":
        scale = 1000 / num_diffusion_timesteps
        return np.linspace(scale * 0.0001, scale * 0.02, num_diffusion_timesteps, dtype=np.float64)
    elif schedule_name == "cosine":
        return betas_for_alpha_bar(num_diffusion_timesteps, lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2)
    raise NotImplementedError(f"unknown beta schedule: {schedule_name}")


def _extract_into_tensor(arr, timesteps, broadcast_shape):
    res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
    while len(res.shape) < len(broadcast_shape):
        res = res[..., None]
    return res.expand(broadcast_shape)


class GaussianDiffusion:
    def __init__(self, *, betas, model_mean_type, model_var_type, loss_type, rescale_timesteps=False):
        self.model_mean_type = model_mean_type
        self.model_var_type = model_var_type
        self.loss_type = loss_type
        self.rescale_timesteps = rescale_timesteps

        # Use float64 for accuracy.
        betas = np.array(betas, dtype=np.float64)
        self.betas = betas
        assert len(betas.shape) == 1, "betas must be 1-D"
        assert (betas > 0).all() and (betas <= 1).all()

        self.num_timesteps = int(betas.shape[0])

        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.alphas_cumprod_prev = np.append(1.0, self.alphas_cumprod[:-1])
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)
        self.sqrt_recip_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod)
        self.sqrt_recipm1_alphas_cumprod = np.sqrt(1.0 / self.alphas_cumprod - 1)
        self.posterior_variance = betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_log_variance_clipped = np.log(np.append(self.posterior_variance[1], self.posterior_variance[1:]))
        self.posterior_mean_coef1 = betas * np.sqrt(self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)
        self.posterior_mean_coef2 = (1.0 - self.alphas_cumprod_prev) * np.sqrt(alphas) / (1.0 - self.alphas_cumprod)

    def q_sample(self, x_start, t, noise=None):
        if noise is None:
            noise = th.randn_like(x_start)
        assert noise.shape == x_start.shape
        return (_extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
                + _extract_into_tensor(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape) * noise)

    def q_posterior_mean_variance(self, x_start, x_t, t):
        assert x_start.shape == x_t.shape
        posterior_mean = (_extract_into_tensor(self.posterior_mean_coef1, t, x_t.shape) * x_start
                          + _extract_into_tensor(self.posterior_mean_coef2, t, x_t.shape) * x_t)
        posterior_variance = _extract_into_tensor(self.posterior_variance, t, x_t.shape)
        posterior_log_variance_clipped = _extract_into_tensor(self.posterior_log_variance_clipped, t, x_t.shape)
        return posterior_mean, posterior_variance, posterior_log_variance_clipped

    def p_mean_variance(self, model, x, t, clip_denoised=True, denoised_fn=None, model_kwargs=None):
        if model_kwargs is None:
            model_kwargs = {}

        B, C = x.shape[:2]
        assert t.shape == (B,)
        model_output = model(x, self._scale_timesteps(t), **model_kwargs)

        assert model_output.shape == (B, C * 2, *x.shape[2:])
        model_output, model_var_values = th.split(model_output, C, dim=1)
        min_log = _extract_into_tensor(self.posterior_log_variance_clipped, t, x.shape)
        max_log = _extract_into_tensor(np.log(self.betas), t, x.shape)
        # The model_var_values is [-1, 1] for [min_var, max_var].
        frac = (model_var_values + 1) / 2
        model_log_variance = frac * max_log + (1 - frac) * min_log
        model_variance = th.exp(model_log_variance)

        def process_xstart(x):
            if denoised_fn is not None:
                x = denoised_fn(x)
            if clip_denoised:
                return x.clamp(-1, 1)
            return x

        pred_xstart = process_xstart(self._predict_xstart_from_eps(x_t=x, t=t, eps=model_output))
        model_mean, _, _ = self.q_posterior_mean_variance(x_start=pred_xstart, x_t=x, t=t)
        return {"mean": model_mean, "variance": model_variance, "log_variance": model_log_variance, "pred_xstart": pred_xstart}

    def _predict_xstart_from_eps(self, x_t, t, eps):
        assert x_t.shape == eps.shape
        return (_extract_into_tensor(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t
                - _extract_into_tensor(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape) * eps)

    def _scale_timesteps(self, t):
        if self.rescale_timesteps:
            return t.float() * (1000.0 / self.num_timesteps)
        return t

    def _vb_terms_bpd(self, model, x_start, x_t, t, clip_denoised=True, model_kwargs=None):
        true_mean, _, true_log_variance_clipped = self.q_posterior_mean_variance(x_start=x_start, x_t=x_t, t=t)
        out = self.p_mean_variance(model, x_t, t, clip_denoised=clip_denoised, model_kwargs=model_kwargs)
        kl = normal_kl(true_mean, true_log_variance_clipped, out["mean"], out["log_variance"])
        kl = mean_flat(kl) / np.log(2.0)

        decoder_nll = -discretized_gaussian_log_likelihood(x_start, means=out["mean"], log_scales=0.5 * out["log_variance"])
        assert decoder_nll.shape == x_start.shape
        decoder_nll = mean_flat(decoder_nll) / np.log(2.0)

        # At the first timestep return the decoder NLL,
        # otherwise return KL(q(x_{t-1}|x_t,x_0) || p(x_{t-1}|x_t))
        output = th.where((t == 0), decoder_nll, kl)
        return {"output": output, "pred_xstart": out["pred_xstart"]}

    def training_losses(self, model, x_start, t, model_kwargs=None, noise=None):
        if model_kwargs is None:
            model_kwargs = {}
        if noise is None:
            noise = th.randn_like(x_start)
        x_t = self.q_sample(x_start, t, noise=noise)

        terms = {}
        model_output = model(x_t, self._scale_timesteps(t), **model_kwargs)

        B, C = x_t.shape[:2]
        assert model_output.shape == (B, C * 2, *x_t.shape[2:])
        model_output, model_var_values = th.split(model_output, C, dim=1)
        # Learn the variance using the variational bound, but don't let
        # it affect our mean prediction.
        frozen_out = th.cat([model_output.detach(), model_var_values], dim=1)
        terms["vb"] = self._vb_terms_bpd(model=lambda *args, r=frozen_out: r, x_start=x_start, x_t=x_t, t=t, clip_denoised=False)["output"]
        if self.loss_type == LossType.RESCALED_MSE:
            # Divide by 1000 for equivalence with initial implementation.
            # Without a factor of 1/1000, the VB term hurts the MSE term.
            terms["vb"] *= self.num_timesteps / 1000.0

        target = noise
        assert model_output.shape == target.shape == x_start.shape
        terms["mse"] = mean_flat((target - model_output) ** 2)
        terms["loss"] = terms["mse"] + terms["vb"]
        return terms


# ------------------------------------------------------------------ improved_diffusion/resample.py


class ScheduleSampler(ABC):
    @abstractmethod
    def weights(self):
        """Get a numpy array of weights, one per diffusion step."""

    def sample(self, batch_size, device):
        w = self.weights()
        p = w / np.sum(w)
        indices_np = np.random.choice(len(p), size=(batch_size,), p=p)  # BREAK must-not: the timesteps are drawn from numpy's global generator: its stream cannot be replayed inside a graph
        indices = th.from_numpy(indices_np).long().to(device)
        weights_np = 1 / (len(p) * p[indices_np])
        weights = th.from_numpy(weights_np).float().to(device)
        return indices, weights


class UniformSampler(ScheduleSampler):
    def __init__(self, diffusion):
        self.diffusion = diffusion
        self._weights = np.ones([diffusion.num_timesteps])

    def weights(self):
        return self._weights


# ------------------------------------------------------------------ a tiny UNet stand-in with learned sigma


class TinyUNet(nn.Module):
    def __init__(self, in_channels=3, model_channels=16):
        super().__init__()
        self.model_channels = model_channels
        self.time_embed = nn.Sequential(nn.Linear(model_channels, model_channels * 2), nn.SiLU(), nn.Linear(model_channels * 2, model_channels))
        self.inp = nn.Conv2d(in_channels, model_channels, 3, padding=1)
        self.down = nn.Conv2d(model_channels, model_channels, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(model_channels, model_channels, 4, stride=2, padding=1)
        self.out = nn.Sequential(nn.GroupNorm(4, model_channels * 2), nn.SiLU(), nn.Conv2d(model_channels * 2, in_channels * 2, 3, padding=1))

    def forward(self, x, timesteps, y=None):
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        h0 = self.inp(x) + emb[:, :, None, None]
        h = self.up(th.nn.functional.silu(self.down(h0)))
        return self.out(th.cat([h, h0], 1))


# ------------------------------------------------------------------ improved_diffusion/train_util.py


def log_loss_dict(diffusion, ts, losses):
    for key, values in losses.items():
        logger.logkv_mean(key, values.mean().item())  # BREAK: the running mean can be kept as a 0-d tensor: pass values.mean() (detached) itself


class TrainLoop(nn.Module):
    def __init__(self, model, diffusion, microbatch=2):
        super().__init__()
        self.model = model
        self.ddp_model = model
        self.diffusion = diffusion
        self.microbatch = microbatch
        self.schedule_sampler = UniformSampler(diffusion)
        self.use_ddp = False

    def forward(self, batch, cond):
        # ``forward_backward`` with the default ``--microbatch -1``: the whole batch is the one micro-batch
        micro = batch
        micro_cond = cond
        t, weights = self.schedule_sampler.sample(micro.shape[0], micro.device)

        compute_losses = functools.partial(self.diffusion.training_losses, self.ddp_model, micro, t, model_kwargs=micro_cond)
        losses = compute_losses()

        loss = (losses["loss"] * weights).mean()
        log_loss_dict(self.diffusion, t, {k: v * weights for k, v in losses.items()})
        return loss  # loss.backward() follows: the check's backward of the output stands in for it


def build_improved_diffusion_train():
    seeded(1604)
    logger.name2val.clear()
    logger.name2cnt.clear()
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("cosine", 40), model_mean_type=ModelMeanType.EPSILON,
                                  model_var_type=ModelVarType.LEARNED_RANGE, loss_type=LossType.RESCALED_MSE)
    model = TinyUNet()
    batch = th.rand(4, 3, 8, 8) * 2 - 1
    return TrainLoop(model, diffusion), (batch, {})


# ------------------------------------------------------------------ huggingface/diffusers (0.16) schedulers/scheduling_ddpm.py,
# pipelines/ddpm/pipeline_ddpm.py


class FrozenDict(dict):
    def __getattr__(self, name):
        return self[name]


def randn_tensor(shape, generator=None, device=None, dtype=None, layout=None):
    """A helper function to create random tensors on the desired `device` with the desired `dtype`."""
    layout = layout or th.strided
    device = device or th.device("cpu")
    return th.randn(shape, generator=generator, device=device, dtype=dtype, layout=layout)


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear", variance_type="fixed_small",
                 clip_sample=True, prediction_type="epsilon", clip_sample_range=1.0):
        self.config = FrozenDict(num_train_timesteps=num_train_timesteps, beta_schedule=beta_schedule, variance_type=variance_type,
                                 clip_sample=clip_sample, prediction_type=prediction_type, clip_sample_range=clip_sample_range, thresholding=False)
        if beta_schedule == "linear":
            self.betas = th.linspace(beta_start, beta_end, num_train_timesteps, dtype=th.float32)
        else:
            raise NotImplementedError(f"{beta_schedule} does is not implemented for {self.__class__}")

        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = th.cumprod(self.alphas, dim=0)
        self.one = th.tensor(1.0)

        # standard deviation of the initial noise distribution
        self.init_noise_sigma = 1.0

        # setable values
        self.num_inference_steps = None
        self.timesteps = th.from_numpy(np.arange(0, num_train_timesteps)[::-1].copy())

        self.variance_type = variance_type

    def set_timesteps(self, num_inference_steps, device=None):
        if num_inference_steps > self.config.num_train_timesteps:
            raise ValueError(f"`num_inference_steps`: {num_inference_steps} cannot be larger than `self.config.train_timesteps`")

        self.num_inference_steps = num_inference_steps

        step_ratio = self.config.num_train_timesteps // self.num_inference_steps
        timesteps = (np.arange(0, num_inference_steps) * step_ratio).round()[::-1].copy().astype(np.int64)
        self.timesteps = th.from_numpy(timesteps).to(device)

    def _get_variance(self, t, predicted_variance=None, variance_type=None):
        num_inference_steps = self.num_inference_steps if self.num_inference_steps else self.config.num_train_timesteps
        prev_t = t - self.config.num_train_timesteps // num_inference_steps
        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one  # BREAK: a where between the cumulative product (at the clamped index) and one
        current_beta_t = 1 - alpha_prod_t / alpha_prod_t_prev

        # For t > 0, compute predicted variance βt (see formula (6) and (7) from https://arxiv.org/pdf/2006.11239.pdf)
        # and sample from it to get previous sample
        # x_{t-1} ~ N(pred_prev_sample, variance) == add variance to pred_sample
        variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * current_beta_t

        # we always take the log of variance, so clamp it to ensure it's not 0
        variance = th.clamp(variance, min=1e-20)

        if variance_type is None:
            variance_type = self.config.variance_type

        # hacks - were probably added for training stability
        if variance_type == "fixed_small":
            variance = variance
        elif variance_type == "fixed_large":
            variance = current_beta_t
        return variance

    def step(self, model_output, timestep, sample, generator=None, return_dict=True):
        t = timestep

        num_inference_steps = self.num_inference_steps if self.num_inference_steps else self.config.num_train_timesteps
        prev_t = timestep - self.config.num_train_timesteps // num_inference_steps

        if model_output.shape[1] == sample.shape[1] * 2 and self.variance_type in ["learned", "learned_range"]:
            model_output, predicted_variance = th.split(model_output, sample.shape[1], dim=1)
        else:
            predicted_variance = None

        # 1. compute alphas, betas
        alpha_prod_t = self.alphas_cumprod[t]  # BREAK: indexing by the 0-d timestep reads it back: index by it as a 1-element tensor
        alpha_prod_t_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else self.one  # BREAK: the same where in the step
        beta_prod_t = 1 - alpha_prod_t
        beta_prod_t_prev = 1 - alpha_prod_t_prev
        current_alpha_t = alpha_prod_t / alpha_prod_t_prev
        current_beta_t = 1 - current_alpha_t

        # 2. compute predicted original sample from predicted noise also called
        # "predicted x_0" of formula (15) from https://arxiv.org/pdf/2006.11239.pdf
        if self.config.prediction_type == "epsilon":
            pred_original_sample = (sample - beta_prod_t ** (0.5) * model_output) / alpha_prod_t ** (0.5)
        elif self.config.prediction_type == "sample":
            pred_original_sample = model_output
        else:
            raise ValueError(f"prediction_type given as {self.config.prediction_type} must be one of `epsilon` or `sample`")

        # 3. Clip or threshold "predicted x_0"
        if self.config.clip_sample:
            pred_original_sample = pred_original_sample.clamp(-self.config.clip_sample_range, self.config.clip_sample_range)

        # 4. Compute coefficients for pred_original_sample x_0 and current sample x_t
        # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
        pred_original_sample_coeff = (alpha_prod_t_prev ** (0.5) * current_beta_t) / beta_prod_t
        current_sample_coeff = current_alpha_t ** (0.5) * beta_prod_t_prev / beta_prod_t

        # 5. Compute predicted previous sample µ_t
        # See formula (7) from https://arxiv.org/pdf/2006.11239.pdf
        pred_prev_sample = pred_original_sample_coeff * pred_original_sample + current_sample_coeff * sample

        # 6. Add noise
        variance = 0
        if t > 0:  # BREAK: draw the noise at every step and scale it by (t > 0): the last step adds zero, and nothing random follows
            device = model_output.device
            variance_noise = randn_tensor(model_output.shape, generator=generator, device=device, dtype=model_output.dtype)
            variance = (self._get_variance(t, predicted_variance=predicted_variance) ** 0.5) * variance_noise

        pred_prev_sample = pred_prev_sample + variance

        if not return_dict:
            return (pred_prev_sample, pred_original_sample)

        return FrozenDict(prev_sample=pred_prev_sample, pred_original_sample=pred_original_sample)


class TinyUNet2D(nn.Module):
    """``UNet2DModel``'s interface: ``config`` and an output with ``.sample``."""

    def __init__(self, in_channels=3, sample_size=8):
        super().__init__()
        self.config = FrozenDict(in_channels=in_channels, sample_size=sample_size)
        self.inner = TinyUNet(in_channels, 16)

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    def forward(self, sample, timestep):
        timesteps = timestep
        if not th.is_tensor(timesteps):
            timesteps = th.tensor([timesteps], dtype=th.long, device=sample.device)
        elif th.is_tensor(timesteps) and len(timesteps.shape) == 0:
            timesteps = timesteps[None].to(sample.device)
        # broadcast to batch dimension in a way that's compatible with ONNX/Core ML
        timesteps = timesteps * th.ones(sample.shape[0], dtype=timesteps.dtype, device=timesteps.device)
        return FrozenDict(sample=self.inner(sample, timesteps)[:, : sample.shape[1]])


class DDPMPipeline(nn.Module):
    def __init__(self, unet, scheduler):
        super().__init__()
        self.unet = unet
        self.scheduler = scheduler

    @property
    def device(self):
        return next(self.unet.parameters()).device

    def progress_bar(self, iterable):
        return iterable  # tqdm with disable=True

    @th.no_grad()
    def forward(self, batch_size=1, generator=None, num_inference_steps=1000, output_type="np", return_dict=True):
        # Sample gaussian noise to begin loop
        if isinstance(self.unet.config.sample_size, int):
            image_shape = (batch_size, self.unet.config.in_channels, self.unet.config.sample_size, self.unet.config.sample_size)
        else:
            image_shape = (batch_size, self.unet.config.in_channels, *self.unet.config.sample_size)

        image = randn_tensor(image_shape, generator=generator, device=self.device, dtype=self.unet.dtype)

        # set step values
        self.scheduler.set_timesteps(num_inference_steps)

        for t in self.progress_bar(self.scheduler.timesteps):
            # 1. predict noise model_output
            model_output = self.unet(image, t).sample

            # 2. compute previous image: x_t -> x_t-1
            image = self.scheduler.step(model_output, t, image, generator=generator).prev_sample

        image = (image / 2 + 0.5).clamp(0, 1)
        image = image.cpu().permute(0, 2, 3, 1).numpy()

        if not return_dict:
            return (image,)

        return {"images": image}


def build_diffusers_ddpm():
    seeded(1619)
    pipe = DDPMPipeline(TinyUNet2D(), DDPMScheduler(num_train_timesteps=100)).eval()
    return pipe, {"batch_size": 2, "num_inference_steps": 5}


# ------------------------------------------------------------------ lucidrains/denoising-diffusion-pytorch denoising_diffusion_pytorch.py


ModelPrediction = namedtuple("ModelPrediction", ["pred_noise", "pred_x_start"])


def exists(x):
    return x is not None


def default(val, d):
    if exists(val):
        return val
    return d() if callable(d) else d


def identity(t, *args, **kwargs):
    return t


def normalize_to_neg_one_to_one(img):
    return img * 2 - 1


def unnormalize_to_zero_to_one(t):
    return (t + 1) * 0.5


def extract(a, t, x_shape):
    b, *_ = t.shape
    out = a.gather(-1, t)
    return out.reshape(b, *((1,) * (len(x_shape) - 1)))


def cosine_beta_schedule(timesteps, s=0.008):
    """cosine schedule as proposed in https://openreview.net/forum?id=-NVgeqqLfZ"""
    steps = timesteps + 1
    t = th.linspace(0, timesteps, steps, dtype=th.float64) / timesteps
    alphas_cumprod = th.cos((t + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - (alphas_cumprod[1:] / alphas_cumprod[:-1])
    return th.clip(betas, 0, 0.999)


class TinyDenoiser(nn.Module):
    """The ``Unet``'s interface (``channels``, ``self_condition``, ``forward(x, time, x_self_cond)``)."""

    def __init__(self, channels=3):
        super().__init__()
        self.channels = channels
        self.self_condition = False
        self.inner = TinyUNet(channels, 16)

    def forward(self, x, time, x_self_cond=None):
        return self.inner(x, time)[:, : self.channels]


class DenoisingDiffusion(nn.Module):
    """``GaussianDiffusion`` with the default ``pred_v`` objective, sampled by ``ddim_sample``."""

    def __init__(self, model, *, image_size, timesteps=1000, sampling_timesteps=None, objective="pred_v", ddim_sampling_eta=0.0, auto_normalize=True):
        super().__init__()
        self.model = model
        self.channels = self.model.channels
        self.self_condition = self.model.self_condition
        self.image_size = image_size
        self.objective = objective

        betas = cosine_beta_schedule(timesteps)
        alphas = 1.0 - betas
        alphas_cumprod = th.cumprod(alphas, dim=0)
        alphas_cumprod_prev = F.pad(alphas_cumprod[:-1], (1, 0), value=1.0)

        (timesteps,) = betas.shape
        self.num_timesteps = int(timesteps)

        # sampling related parameters
        self.sampling_timesteps = default(sampling_timesteps, timesteps)  # default num sampling timesteps to number of timesteps at training
        assert self.sampling_timesteps <= timesteps
        self.is_ddim_sampling = self.sampling_timesteps < timesteps
        self.ddim_sampling_eta = ddim_sampling_eta

        # helper function to register buffer from float64 to float32
        register_buffer = lambda name, val: self.register_buffer(name, val.to(th.float32))  # noqa: E731
        register_buffer("betas", betas)
        register_buffer("alphas_cumprod", alphas_cumprod)
        register_buffer("alphas_cumprod_prev", alphas_cumprod_prev)
        register_buffer("sqrt_alphas_cumprod", th.sqrt(alphas_cumprod))
        register_buffer("sqrt_one_minus_alphas_cumprod", th.sqrt(1.0 - alphas_cumprod))
        register_buffer("sqrt_recip_alphas_cumprod", th.sqrt(1.0 / alphas_cumprod))
        register_buffer("sqrt_recipm1_alphas_cumprod", th.sqrt(1.0 / alphas_cumprod - 1))

        self.normalize = normalize_to_neg_one_to_one if auto_normalize else identity
        self.unnormalize = unnormalize_to_zero_to_one if auto_normalize else identity

    @property
    def device(self):
        return self.betas.device

    def predict_start_from_noise(self, x_t, t, noise):
        return extract(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t - extract(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape) * noise

    def predict_noise_from_start(self, x_t, t, x0):
        return (extract(self.sqrt_recip_alphas_cumprod, t, x_t.shape) * x_t - x0) / extract(self.sqrt_recipm1_alphas_cumprod, t, x_t.shape)

    def predict_start_from_v(self, x_t, t, v):
        return extract(self.sqrt_alphas_cumprod, t, x_t.shape) * x_t - extract(self.sqrt_one_minus_alphas_cumprod, t, x_t.shape) * v

    def model_predictions(self, x, t, x_self_cond=None, clip_x_start=False, rederive_pred_noise=False):
        model_output = self.model(x, t, x_self_cond)
        maybe_clip = partial(th.clamp, min=-1.0, max=1.0) if clip_x_start else identity

        if self.objective == "pred_noise":
            pred_noise = model_output
            x_start = self.predict_start_from_noise(x, t, pred_noise)
            x_start = maybe_clip(x_start)

            if clip_x_start and rederive_pred_noise:
                pred_noise = self.predict_noise_from_start(x, t, x_start)

        elif self.objective == "pred_x0":
            x_start = model_output
            x_start = maybe_clip(x_start)
            pred_noise = self.predict_noise_from_start(x, t, x_start)

        elif self.objective == "pred_v":
            v = model_output
            x_start = self.predict_start_from_v(x, t, v)
            x_start = maybe_clip(x_start)
            pred_noise = self.predict_noise_from_start(x, t, x_start)

        return ModelPrediction(pred_noise, x_start)

    @th.inference_mode()
    def ddim_sample(self, shape, return_all_timesteps=False):
        batch, device, total_timesteps, sampling_timesteps, eta, objective = shape[0], self.device, self.num_timesteps, self.sampling_timesteps, self.ddim_sampling_eta, self.objective  # noqa: F841

        times = th.linspace(-1, total_timesteps - 1, steps=sampling_timesteps + 1)  # [-1, 0, 1, 2, ..., T-1] when sampling_timesteps == total_timesteps
        times = list(reversed(times.int().tolist()))  # BREAK: the times depend on the configuration alone: compute the list once at construction, outside the sampling
        time_pairs = list(zip(times[:-1], times[1:]))  # [(T-1, T-2), (T-2, T-3), ..., (1, 0), (0, -1)]  # noqa: B905

        img = th.randn(shape, device=device)
        imgs = [img]

        x_start = None

        for time, time_next in time_pairs:  # tqdm(time_pairs, desc = 'sampling loop time step')
            time_cond = th.full((batch,), time, device=device, dtype=th.long)
            self_cond = x_start if self.self_condition else None
            pred_noise, x_start, *_ = self.model_predictions(img, time_cond, self_cond, clip_x_start=True, rederive_pred_noise=True)

            if time_next < 0:
                img = x_start
                imgs.append(img)
                continue

            alpha = self.alphas_cumprod[time]
            alpha_next = self.alphas_cumprod[time_next]

            sigma = eta * ((1 - alpha / alpha_next) * (1 - alpha_next) / (1 - alpha)).sqrt()
            c = (1 - alpha_next - sigma**2).sqrt()

            noise = th.randn_like(img)

            img = x_start * alpha_next.sqrt() + c * pred_noise + sigma * noise

            imgs.append(img)

        ret = img if not return_all_timesteps else th.stack(imgs, dim=1)

        ret = self.unnormalize(ret)
        return ret

    def forward(self, batch_size=16, return_all_timesteps=False):
        # ``sample``
        (h, w), channels = self.image_size, self.channels
        sample_fn = self.ddim_sample
        return sample_fn((batch_size, channels, h, w), return_all_timesteps=return_all_timesteps)


def build_lucidrains_ddim():
    seeded(1620)
    diffusion = DenoisingDiffusion(TinyDenoiser(), image_size=(8, 8), timesteps=40, sampling_timesteps=5).eval()
    return diffusion, {"batch_size": 2}
