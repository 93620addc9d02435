"""Generative models: CompVis/taming-transformers' VQGAN training step (``VQModel`` with its ``VectorQuantizer``,
``VQLPIPSWithDiscriminator`` with the adaptive weight from ``calculate_adaptive_weight``'s gradient norms at the
decoder's last layer and ``adopt_weight`` by global step), NVlabs/stylegan2-ada-pytorch's ``StyleGAN2Loss``
lazy-regularization phases (``Greg``: path-length penalty on style-mixed ws with the ``pl_mean`` EMA; ``Dreg``:
R1 on the augmented reals) and the training loop's ADA augment-probability update from the ``training_stats``
``Collector``, and openai/consistency_models' consistency-training loss (``KarrasDenoiser.consistency_losses``
with the dropout RNG state replayed for the target network, the progressive ``N(k)`` schedule from
``create_ema_and_scales_fn``) and the target EMA update."""

from __future__ import annotations

import contextlib
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from . import helpers as training_stats
from .helpers import seeded

# ------------------------------------------------------------------ taming-transformers: VQGAN


class VectorQuantizer(nn.Module):
    def __init__(self, n_e, e_dim, beta):
        super().__init__()
        self.n_e, self.e_dim, self.beta = n_e, e_dim, beta
        self.embedding = nn.Embedding(self.n_e, self.e_dim)
        self.embedding.weight.data.uniform_(-1.0 / self.n_e, 1.0 / self.n_e)

    def forward(self, z):
        # reshape z -> (batch, height, width, channel) and flatten
        z = z.permute(0, 2, 3, 1).contiguous()
        z_flattened = z.view(-1, self.e_dim)
        # distances from z to embeddings e_j (z - e)^2 = z^2 + e^2 - 2 e * z
        d = torch.sum(z_flattened**2, dim=1, keepdim=True) + torch.sum(self.embedding.weight**2, dim=1) - 2 * torch.matmul(z_flattened, self.embedding.weight.t())
        # find closest encodings
        min_encoding_indices = torch.argmin(d, dim=1).unsqueeze(1)
        min_encodings = torch.zeros(min_encoding_indices.shape[0], self.n_e).to(z)
        min_encodings.scatter_(1, min_encoding_indices, 1)
        # get quantized latent vectors
        z_q = torch.matmul(min_encodings, self.embedding.weight).view(z.shape)
        # compute loss for embedding
        loss = torch.mean((z_q.detach() - z) ** 2) + self.beta * torch.mean((z_q - z.detach()) ** 2)
        # preserve gradients
        z_q = z + (z_q - z).detach()
        # perplexity
        e_mean = torch.mean(min_encodings, dim=0)
        perplexity = torch.exp(-torch.sum(e_mean * torch.log(e_mean + 1e-10)))
        # reshape back to match original input shape
        z_q = z_q.permute(0, 3, 1, 2).contiguous()
        return z_q, loss, (perplexity, min_encodings, min_encoding_indices)


class Encoder(nn.Module):
    def __init__(self, ch=8, z_channels=4):
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.down = nn.Sequential(nn.Conv2d(ch, ch * 2, 4, stride=2, padding=1), nn.GroupNorm(4, ch * 2), nn.SiLU())
        self.conv_out = nn.Conv2d(ch * 2, z_channels, 3, padding=1)

    def forward(self, x):
        return self.conv_out(self.down(self.conv_in(x)))


class Decoder(nn.Module):
    def __init__(self, ch=8, z_channels=4):
        super().__init__()
        self.conv_in = nn.Conv2d(z_channels, ch * 2, 3, padding=1)
        self.up = nn.Sequential(nn.GroupNorm(4, ch * 2), nn.SiLU(), nn.Upsample(scale_factor=2.0, mode="nearest"),
                                nn.Conv2d(ch * 2, ch, 3, padding=1), nn.GroupNorm(4, ch), nn.SiLU())
        self.conv_out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, z):
        return self.conv_out(self.up(self.conv_in(z)))


class NetLinLayer(nn.Module):
    """A single linear layer which does a 1x1 conv."""

    def __init__(self, chn_in, chn_out=1, use_dropout=False):
        super().__init__()
        layers = [nn.Dropout()] if (use_dropout) else []
        layers += [nn.Conv2d(chn_in, chn_out, 1, stride=1, padding=0, bias=False)]
        self.model = nn.Sequential(*layers)


class ScalingLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.Tensor([-0.030, -0.088, -0.188])[None, :, None, None])
        self.register_buffer("scale", torch.Tensor([0.458, 0.448, 0.450])[None, :, None, None])

    def forward(self, inp):
        return (inp - self.shift) / self.scale


def normalize_tensor(x, eps=1e-10):
    norm_factor = torch.sqrt(torch.sum(x**2, dim=1, keepdim=True))
    return x / (norm_factor + eps)


def spatial_average(x, keepdim=True):
    return x.mean([2, 3], keepdim=keepdim)


class LPIPS(nn.Module):
    """Learned perceptual metric over a (here two-slice, untrained) VGG; frozen, in eval mode."""

    def __init__(self, use_dropout=True):
        super().__init__()
        self.scaling_layer = ScalingLayer()
        self.chns = [8, 16]
        self.net = nn.ModuleList([nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU()),
                                  nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())])
        self.lin0 = NetLinLayer(self.chns[0], use_dropout=use_dropout)
        self.lin1 = NetLinLayer(self.chns[1], use_dropout=use_dropout)
        for param in self.parameters():
            param.requires_grad = False

    def vgg(self, x):
        outs = []
        for slice_ in self.net:
            x = slice_(x)
            outs.append(x)
        return outs

    def forward(self, input, target):
        in0_input, in1_input = (self.scaling_layer(input), self.scaling_layer(target))
        outs0, outs1 = self.vgg(in0_input), self.vgg(in1_input)
        feats0, feats1, diffs = {}, {}, {}
        lins = [self.lin0, self.lin1]
        for kk in range(len(self.chns)):
            feats0[kk], feats1[kk] = normalize_tensor(outs0[kk]), normalize_tensor(outs1[kk])
            diffs[kk] = (feats0[kk] - feats1[kk]) ** 2
        res = [spatial_average(lins[kk].model(diffs[kk]), keepdim=True) for kk in range(len(self.chns))]
        val = res[0]
        for ll in range(1, len(self.chns)):
            val += res[ll]
        return val


class NLayerDiscriminator(nn.Module):
    """PatchGAN discriminator as in Pix2Pix."""

    def __init__(self, input_nc=3, ndf=8, n_layers=2):
        super().__init__()
        kw, padw = 4, 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        for n in range(1, n_layers):  # gradually increase the number of filters
            nf_mult_prev = nf_mult
            nf_mult = min(2**n, 8)
            sequence += [nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=False),
                         nn.BatchNorm2d(ndf * nf_mult), nn.LeakyReLU(0.2, True)]
        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]  # output 1 channel prediction map
        self.main = nn.Sequential(*sequence)

    def forward(self, input):
        return self.main(input)


def adopt_weight(weight, global_step, threshold=0, value=0.0):
    if global_step < threshold:
        weight = value
    return weight


def hinge_d_loss(logits_real, logits_fake):
    loss_real = torch.mean(F.relu(1.0 - logits_real))
    loss_fake = torch.mean(F.relu(1.0 + logits_fake))
    d_loss = 0.5 * (loss_real + loss_fake)
    return d_loss


class VQLPIPSWithDiscriminator(nn.Module):
    def __init__(self, disc_start, codebook_weight=1.0, pixelloss_weight=1.0, disc_factor=1.0, disc_weight=0.8,
                 perceptual_weight=1.0, disc_conditional=False):
        super().__init__()
        self.codebook_weight = codebook_weight
        self.pixel_weight = pixelloss_weight
        self.perceptual_loss = LPIPS().eval()
        self.perceptual_weight = perceptual_weight
        self.discriminator = NLayerDiscriminator()
        self.discriminator_iter_start = disc_start
        self.disc_loss = hinge_d_loss
        self.disc_factor = disc_factor
        self.discriminator_weight = disc_weight
        self.disc_conditional = disc_conditional

    def calculate_adaptive_weight(self, nll_loss, g_loss, last_layer=None):
        nll_grads = torch.autograd.grad(nll_loss, last_layer, retain_graph=True)[0]  # BREAK must-not: the gradient of a loss already built through the decoder, LPIPS and the BatchNorm discriminator w.r.t. the last layer; recomputing it functionally would run the discriminator again and update its running statistics twice
        g_grads = torch.autograd.grad(g_loss, last_layer, retain_graph=True)[0]  # BREAK must-not: as above, for the generator's adversarial loss
        d_weight = torch.norm(nll_grads) / (torch.norm(g_grads) + 1e-4)
        d_weight = torch.clamp(d_weight, 0.0, 1e4).detach()
        d_weight = d_weight * self.discriminator_weight
        return d_weight

    def forward(self, codebook_loss, inputs, reconstructions, optimizer_idx, global_step, last_layer=None, cond=None, split="train"):
        rec_loss = torch.abs(inputs.contiguous() - reconstructions.contiguous())
        if self.perceptual_weight > 0:
            p_loss = self.perceptual_loss(inputs.contiguous(), reconstructions.contiguous())
            rec_loss = rec_loss + self.perceptual_weight * p_loss
        else:
            p_loss = torch.tensor([0.0])

        nll_loss = rec_loss
        nll_loss = torch.mean(nll_loss)

        # now the GAN part
        if optimizer_idx == 0:
            # generator update
            assert cond is None and not self.disc_conditional
            logits_fake = self.discriminator(reconstructions.contiguous())
            g_loss = -torch.mean(logits_fake)

            try:
                d_weight = self.calculate_adaptive_weight(nll_loss, g_loss, last_layer=last_layer)
            except RuntimeError:
                assert not self.training
                d_weight = torch.tensor(0.0)

            disc_factor = adopt_weight(self.disc_factor, global_step, threshold=self.discriminator_iter_start)
            loss = nll_loss + d_weight * disc_factor * g_loss + self.codebook_weight * codebook_loss.mean()

            log = {f"{split}/total_loss": loss.clone().detach().mean(),
                   f"{split}/quant_loss": codebook_loss.detach().mean(),
                   f"{split}/nll_loss": nll_loss.detach().mean(),
                   f"{split}/rec_loss": rec_loss.detach().mean(),
                   f"{split}/p_loss": p_loss.detach().mean(),
                   f"{split}/d_weight": d_weight.detach(),
                   f"{split}/disc_factor": torch.tensor(disc_factor),
                   f"{split}/g_loss": g_loss.detach().mean(),
                   }
            return loss, log

        if optimizer_idx == 1:
            # second pass for discriminator update
            logits_real = self.discriminator(inputs.contiguous().detach())
            logits_fake = self.discriminator(reconstructions.contiguous().detach())
            disc_factor = adopt_weight(self.disc_factor, global_step, threshold=self.discriminator_iter_start)
            d_loss = disc_factor * self.disc_loss(logits_real, logits_fake)
            log = {f"{split}/disc_loss": d_loss.clone().detach().mean(),
                   f"{split}/logits_real": logits_real.detach().mean(),
                   f"{split}/logits_fake": logits_fake.detach().mean()}
            return d_loss, log


class VQModel(nn.Module):
    """``VQModel.training_step`` for both of its optimizers (Lightning calls it once per optimizer)."""

    def __init__(self, n_embed=16, embed_dim=4, disc_start=2, image_key="image"):
        super().__init__()
        self.image_key = image_key
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.loss = VQLPIPSWithDiscriminator(disc_start=disc_start)
        self.quantize = VectorQuantizer(n_embed, embed_dim, beta=0.25)
        self.quant_conv = nn.Conv2d(4, embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(embed_dim, 4, 1)
        self.global_step = 0

    def encode(self, x):
        h = self.encoder(x)
        h = self.quant_conv(h)
        quant, emb_loss, info = self.quantize(h)
        return quant, emb_loss, info

    def decode(self, quant):
        quant = self.post_quant_conv(quant)
        return self.decoder(quant)

    def get_input(self, batch, k):
        x = batch[k]
        if len(x.shape) == 3:
            x = x[..., None]
        x = x.permute(0, 3, 1, 2).to(memory_format=torch.contiguous_format)
        return x.float()

    def get_last_layer(self):
        return self.decoder.conv_out.weight

    def training_step(self, batch, batch_idx, optimizer_idx):
        x = self.get_input(batch, self.image_key)
        quant, qloss, _ = self.encode(x)
        xrec = self.decode(quant)
        if optimizer_idx == 0:
            # autoencode
            aeloss, log_dict_ae = self.loss(qloss, x, xrec, optimizer_idx, self.global_step, last_layer=self.get_last_layer(), split="train")
            return aeloss, log_dict_ae
        if optimizer_idx == 1:
            # discriminator
            discloss, log_dict_disc = self.loss(qloss, x, xrec, optimizer_idx, self.global_step, last_layer=self.get_last_layer(), split="train")
            return discloss, log_dict_disc

    def forward(self, batch, batch_idx):
        aeloss, log_dict_ae = self.training_step(batch, batch_idx, 0)
        discloss, log_dict_disc = self.training_step(batch, batch_idx, 1)
        return aeloss, discloss, {**log_dict_ae, **log_dict_disc}


def build_vqgan_adaptive_weight():
    seeded(1307)
    model = VQModel()
    model.global_step = 5  # past disc_start: the GAN term is on
    return model, ({"image": torch.rand(2, 8, 8, 3) * 2 - 1}, 0)


# ------------------------------------------------------------------ stylegan2-ada-pytorch (small G, D and augment pipe)

weight_gradients_disabled = False


@contextlib.contextmanager
def no_weight_gradients():
    """torch_utils/ops/conv2d_gradfix.py: only the custom CUDA conv op looks at the flag."""
    global weight_gradients_disabled
    old = weight_gradients_disabled
    weight_gradients_disabled = True
    yield
    weight_gradients_disabled = old


def normalize_2nd_moment(x, dim=1, eps=1e-8):
    return x * (x.square().mean(dim=dim, keepdim=True) + eps).rsqrt()


class FullyConnectedLayer(nn.Module):
    def __init__(self, in_features, out_features, bias=True, activation="linear", lr_multiplier=1.0, bias_init=0.0):
        super().__init__()
        self.activation = activation
        self.weight = nn.Parameter(torch.randn([out_features, in_features]) / lr_multiplier)
        self.bias = nn.Parameter(torch.full([out_features], np.float32(bias_init))) if bias else None
        self.weight_gain = float(lr_multiplier / np.sqrt(in_features))
        self.bias_gain = lr_multiplier

    def forward(self, x):
        w = self.weight * self.weight_gain
        b = self.bias * self.bias_gain if self.bias is not None else None
        x = F.linear(x, w, b)
        if self.activation == "lrelu":
            x = F.leaky_relu(x, 0.2) * np.sqrt(2)
        return x


class MappingNetwork(nn.Module):
    def __init__(self, z_dim=8, w_dim=8, num_ws=4, num_layers=2, lr_multiplier=0.01, w_avg_beta=0.995):
        super().__init__()
        self.z_dim, self.w_dim, self.num_ws, self.w_avg_beta = z_dim, w_dim, num_ws, w_avg_beta
        self.fcs = nn.ModuleList([FullyConnectedLayer(z_dim if i == 0 else w_dim, w_dim, activation="lrelu", lr_multiplier=lr_multiplier)
                                  for i in range(num_layers)])
        self.register_buffer("w_avg", torch.zeros([w_dim]))

    def forward(self, z, c, truncation_psi=1, update_emas=False):
        x = normalize_2nd_moment(z.to(torch.float32))
        for fc in self.fcs:
            x = fc(x)
        # Update moving average of W.
        if update_emas and self.w_avg_beta is not None:
            self.w_avg.copy_(x.detach().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        # Broadcast.
        return x.unsqueeze(1).repeat([1, self.num_ws, 1])


def modulated_conv2d(x, weight, styles, noise=None, padding=0, demodulate=True):
    batch_size = x.shape[0]
    out_channels, in_channels, kh, kw = weight.shape
    w = weight.unsqueeze(0) * styles.reshape(batch_size, 1, -1, 1, 1)  # [NOIkk]
    if demodulate:
        dcoefs = (w.square().sum(dim=[2, 3, 4]) + 1e-8).rsqrt()  # [NO]
        w = w * dcoefs.reshape(batch_size, -1, 1, 1, 1)
    x = x.reshape(1, -1, *x.shape[2:])
    w = w.reshape(-1, in_channels, kh, kw)
    x = F.conv2d(x, w, padding=padding, groups=batch_size)
    x = x.reshape(batch_size, -1, *x.shape[2:])
    if noise is not None:
        x = x.add_(noise)
    return x


class SynthesisLayer(nn.Module):
    def __init__(self, in_channels, out_channels, w_dim, resolution, up=1):
        super().__init__()
        self.resolution, self.up = resolution, up
        self.affine = FullyConnectedLayer(w_dim, in_channels, bias_init=1)
        self.weight = nn.Parameter(torch.randn([out_channels, in_channels, 3, 3]))
        self.noise_strength = nn.Parameter(torch.zeros([]))
        self.bias = nn.Parameter(torch.zeros([out_channels]))

    def forward(self, x, w, noise_mode="random"):
        if self.up > 1:
            x = F.interpolate(x, scale_factor=self.up, mode="nearest")
        styles = self.affine(w)
        noise = None
        if noise_mode == "random":
            noise = torch.randn([x.shape[0], 1, self.resolution, self.resolution], device=x.device) * self.noise_strength
        x = modulated_conv2d(x=x, weight=self.weight, styles=styles, noise=noise, padding=1)
        return F.leaky_relu(x + self.bias.reshape(1, -1, 1, 1), 0.2) * np.sqrt(2)


class SynthesisNetwork(nn.Module):
    def __init__(self, w_dim=8, img_channels=3, ch=8):
        super().__init__()
        self.const = nn.Parameter(torch.randn([ch, 4, 4]))
        self.conv0 = SynthesisLayer(ch, ch, w_dim, 4)
        self.conv1 = SynthesisLayer(ch, ch, w_dim, 8, up=2)
        self.conv2 = SynthesisLayer(ch, ch, w_dim, 8)
        self.torgb = FullyConnectedLayer(w_dim, ch, bias_init=1)
        self.rgb_weight = nn.Parameter(torch.randn([img_channels, ch, 1, 1]))

    def forward(self, ws, update_emas=False):
        x = self.const.unsqueeze(0).repeat([ws.shape[0], 1, 1, 1])
        x = self.conv0(x, ws[:, 0])
        x = self.conv1(x, ws[:, 1])
        x = self.conv2(x, ws[:, 2])
        styles = self.torgb(ws[:, 3]) / np.sqrt(self.rgb_weight.shape[1])
        return modulated_conv2d(x=x, weight=self.rgb_weight, styles=styles, demodulate=False)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.mapping = MappingNetwork()
        self.synthesis = SynthesisNetwork()


class MinibatchStdLayer(nn.Module):
    def __init__(self, group_size, num_channels=1):
        super().__init__()
        self.group_size, self.num_channels = group_size, num_channels

    def forward(self, x):
        N, C, H, W = x.shape
        G = min(self.group_size, N)
        F_ = self.num_channels
        c = C // F_
        y = x.reshape(G, -1, F_, c, H, W)
        y = y - y.mean(dim=0)
        y = y.square().mean(dim=0)
        y = (y + 1e-8).sqrt()
        y = y.mean(dim=[2, 3, 4])
        y = y.reshape(-1, F_, 1, 1)
        y = y.repeat(G, 1, H, W)
        return torch.cat([x, y], dim=1)


class Discriminator(nn.Module):
    def __init__(self, img_channels=3, ch=8):
        super().__init__()
        self.fromrgb = nn.Conv2d(img_channels, ch, 1)
        self.conv0 = nn.Conv2d(ch, ch, 3, padding=1)
        self.conv1 = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mbstd = MinibatchStdLayer(group_size=2)
        self.conv = nn.Conv2d(ch + 1, ch, 3, padding=1)
        self.fc = FullyConnectedLayer(ch * 16, ch, activation="lrelu")
        self.out = FullyConnectedLayer(ch, 1)

    def forward(self, img, c):
        x = F.leaky_relu(self.fromrgb(img), 0.2)
        x = F.leaky_relu(self.conv0(x), 0.2)
        x = F.leaky_relu(self.conv1(x), 0.2)
        x = F.leaky_relu(self.conv(self.mbstd(x)), 0.2)
        return self.out(self.fc(x.flatten(1)))


class AugmentPipe(nn.Module):
    """ADA's pipeline reduced to x-flips and brightness, each applied with probability ``p`` times its strength."""

    def __init__(self, xflip=1, brightness=1, brightness_std=0.2):
        super().__init__()
        self.register_buffer("p", torch.ones([]))
        self.xflip, self.brightness, self.brightness_std = float(xflip), float(brightness), float(brightness_std)

    def forward(self, images):
        batch_size = images.shape[0]
        device = images.device
        if self.xflip > 0:
            i = torch.floor(torch.rand([batch_size, 1, 1, 1], device=device) * 2)
            i = torch.where(torch.rand([batch_size, 1, 1, 1], device=device) < self.xflip * self.p, i, torch.zeros_like(i))
            images = torch.where(i > 0, images.flip(3), images)
        if self.brightness > 0:
            b = torch.randn([batch_size, 1, 1, 1], device=device) * self.brightness_std
            b = torch.where(torch.rand([batch_size, 1, 1, 1], device=device) < self.brightness * self.p, b, torch.zeros_like(b))
            images = images + b
        return images


class StyleGAN2Loss(nn.Module):
    """``StyleGAN2Loss.accumulate_gradients`` without its ``.backward()`` calls: each phase returns the quantity the
    original backpropagates (already multiplied by the phase's ``gain``)."""

    def __init__(self, G, D, augment_pipe=None, style_mixing_prob=0.9, r1_gamma=1.0, pl_batch_shrink=2,
                 pl_decay=0.01, pl_weight=2.0):
        super().__init__()
        self.G, self.D, self.augment_pipe = G, D, augment_pipe
        self.style_mixing_prob = style_mixing_prob
        self.r1_gamma = r1_gamma
        self.pl_batch_shrink = pl_batch_shrink
        self.pl_decay = pl_decay
        self.pl_weight = pl_weight
        self.register_buffer("pl_mean", torch.zeros([]))

    def run_G(self, z, c, sync):
        ws = self.G.mapping(z, c)
        if self.style_mixing_prob > 0:
            with torch.autograd.profiler.record_function("style_mixing"):
                cutoff = torch.empty([], dtype=torch.int64, device=ws.device).random_(1, ws.shape[1])  # BREAK: torch.randint(1, ws.shape[1], []) draws the same cutoff from the same generator
                cutoff = torch.where(torch.rand([], device=ws.device) < self.style_mixing_prob, cutoff, torch.full_like(cutoff, ws.shape[1]))
                ws[:, cutoff:] = self.G.mapping(torch.randn_like(z), c, update_emas=False)[:, cutoff:]  # BREAK: select the mixed ws with torch.where(arange(num_ws) >= cutoff, ...) instead of slicing at a tensor index
        img = self.G.synthesis(ws)
        return img, ws

    def run_D(self, img, c, sync):
        if self.augment_pipe is not None:
            img = self.augment_pipe(img)
        logits = self.D(img, c)
        return logits

    def accumulate_gradients(self, phase, real_img, real_c, gen_z, gen_c, sync, gain):
        assert phase in ["Gmain", "Greg", "Gboth", "Dmain", "Dreg", "Dboth"]
        do_Gpl = (phase in ["Greg", "Gboth"]) and (self.pl_weight != 0)
        do_Dmain = phase in ["Dmain", "Dboth"]
        do_Dr1 = (phase in ["Dreg", "Dboth"]) and (self.r1_gamma != 0)
        backward = {}

        # Gpl: Apply path length regularization.
        if do_Gpl:
            with torch.autograd.profiler.record_function("Gpl_forward"):
                batch_size = gen_z.shape[0] // self.pl_batch_shrink
                gen_img, gen_ws = self.run_G(gen_z[:batch_size], gen_c[:batch_size], sync=sync)
                pl_noise = torch.randn_like(gen_img) / np.sqrt(gen_img.shape[2] * gen_img.shape[3])
                with torch.autograd.profiler.record_function("pl_grads"), no_weight_gradients():
                    pl_grads = torch.autograd.grad(outputs=[(gen_img * pl_noise).sum()], inputs=[gen_ws], create_graph=True, only_inputs=True)[0]  # BREAK: run the synthesis under torch.func.vjp from the ws and pull pl_noise back through it (differentiable, as create_graph=True)
                pl_lengths = pl_grads.square().sum(2).mean(1).sqrt()
                pl_mean = self.pl_mean.lerp(pl_lengths.mean(), self.pl_decay)
                self.pl_mean.copy_(pl_mean.detach())
                pl_penalty = (pl_lengths - pl_mean).square()
                training_stats.report("Loss/pl_penalty", pl_penalty)
                loss_Gpl = pl_penalty * self.pl_weight
                training_stats.report("Loss/G/reg", loss_Gpl)
            backward["Gpl"] = (gen_img[:, 0, 0, 0] * 0 + loss_Gpl).mean().mul(gain)

        # Dmain: Maximize logits for real images.
        # Dr1: Apply R1 regularization.
        if do_Dmain or do_Dr1:
            name = "Dreal_Dr1" if do_Dmain and do_Dr1 else "Dreal" if do_Dmain else "Dr1"
            with torch.autograd.profiler.record_function(name + "_forward"):
                real_img_tmp = real_img.detach().requires_grad_(do_Dr1)
                real_logits = self.run_D(real_img_tmp, real_c, sync=sync)
                training_stats.report("Loss/scores/real", real_logits)
                training_stats.report("Loss/signs/real", real_logits.sign())

                loss_Dreal = 0
                if do_Dmain:
                    loss_Dreal = F.softplus(-real_logits)  # -log(sigmoid(real_logits))
                    training_stats.report("Loss/D/loss", loss_Dreal)

                loss_Dr1 = 0
                if do_Dr1:
                    with torch.autograd.profiler.record_function("r1_grads"), no_weight_gradients():
                        r1_grads = torch.autograd.grad(outputs=[real_logits.sum()], inputs=[real_img_tmp], create_graph=True, only_inputs=True)[0]  # BREAK: run D under torch.func.vjp from the detached reals and pull ones back through it, instead of requires_grad_ and autograd.grad
                    r1_penalty = r1_grads.square().sum([1, 2, 3])
                    loss_Dr1 = r1_penalty * (self.r1_gamma / 2)
                    training_stats.report("Loss/r1_penalty", r1_penalty)
                    training_stats.report("Loss/D/reg", loss_Dr1)
            backward[name] = (real_logits * 0 + loss_Dreal + loss_Dr1).mean().mul(gain)
        return backward


class StyleGAN2RegStep(nn.Module):
    """One iteration of ``training_loop``'s phase loop at a ``batch_idx`` where the lazy regularizer of ``phase`` runs."""

    def __init__(self, phase, style_mixing_prob):
        super().__init__()
        self.G, self.D, self.augment_pipe = Generator(), Discriminator(), AugmentPipe()
        self.augment_pipe.p.fill_(0.3)
        self.loss = StyleGAN2Loss(self.G, self.D, self.augment_pipe, style_mixing_prob=style_mixing_prob)
        self.phase = phase
        self.interval = 4 if phase == "Greg" else 16

    def forward(self, real_img, real_c, gen_z, gen_c):
        losses = self.loss.accumulate_gradients(phase=self.phase, real_img=real_img, real_c=real_c, gen_z=gen_z, gen_c=gen_c,
                                                sync=True, gain=self.interval)
        return losses, self.loss.pl_mean.clone()


def _stylegan_inputs():
    real_img = torch.randn(4, 3, 8, 8)
    c = torch.zeros(4, 0)
    return real_img, c, torch.randn(4, 8), c


def build_stylegan2_greg():
    seeded(1308)
    training_stats.reset_stats()
    model = StyleGAN2RegStep("Greg", style_mixing_prob=0.9)
    model.loss.pl_mean.fill_(0.4)
    return model, _stylegan_inputs()


def build_stylegan2_dreg():
    seeded(1309)
    training_stats.reset_stats()
    model = StyleGAN2RegStep("Dreg", style_mixing_prob=0.9)
    return model, _stylegan_inputs()


def ada_update(augment_pipe, ada_stats, ada_target=0.6, batch_size=4, ada_interval=4, ada_kimg=1):
    """``training_loop``'s augment-probability update, run every ``ada_interval`` ticks."""
    ada_stats.update()
    adjust = np.sign(ada_stats["Loss/signs/real"] - ada_target) * (batch_size * ada_interval) / (ada_kimg * 1000)
    augment_pipe.p.copy_((augment_pipe.p + adjust).max(torch.as_tensor(0, dtype=torch.float32)))
    return augment_pipe.p.clone()


def build_stylegan2_ada():
    seeded(1310)
    training_stats.reset_stats()
    augment_pipe = AugmentPipe()
    augment_pipe.p.fill_(0.2)
    D = Discriminator()
    ada_stats = training_stats.Collector(regex="Loss/signs/real")
    # the Dmain phases of the last ada_interval iterations reported the signs of the real logits
    with torch.no_grad():
        for _ in range(4):
            training_stats.report("Loss/signs/real", D(augment_pipe(torch.randn(4, 3, 8, 8) + 0.5), None).sign())
    return ada_update, (augment_pipe, ada_stats)


# ------------------------------------------------------------------ openai/consistency_models


def create_ema_and_scales_fn(target_ema_mode, start_ema, scale_mode, start_scales, end_scales, total_steps, distill_steps_per_iter):
    def ema_and_scales_fn(step):
        if target_ema_mode == "fixed" and scale_mode == "fixed":
            target_ema = start_ema
            scales = start_scales
        elif target_ema_mode == "adaptive" and scale_mode == "progressive":
            scales = np.ceil(np.sqrt((step / total_steps) * ((end_scales + 1) ** 2 - start_scales**2) + start_scales**2) - 1).astype(np.int32)
            scales = np.maximum(scales, 1)
            c = -np.log(start_ema) * start_scales
            target_ema = np.exp(-c / scales)
            scales = scales + 1
        else:
            raise NotImplementedError

        return float(target_ema), int(scales)  # BREAK: the schedule depends only on Python numbers: compute it with math.ceil / math.sqrt / math.exp instead of numpy (traced as tensors)

    return ema_and_scales_fn


def append_dims(x, target_dims):
    """Appends dimensions to the end of a tensor until it has target_dims dimensions."""
    dims_to_append = target_dims - x.ndim
    if dims_to_append < 0:
        raise ValueError(f"input has {x.ndim} dims but target_dims is {target_dims}, which is less")
    return x[(...,) + (None,) * dims_to_append]


def mean_flat(tensor):
    return tensor.mean(dim=list(range(1, len(tensor.shape))))


def get_weightings(weight_schedule, snrs, sigma_data):
    if weight_schedule == "snr":
        weightings = snrs
    elif weight_schedule == "snr+1":
        weightings = snrs + 1
    elif weight_schedule == "karras":
        weightings = snrs + 1.0 / sigma_data**2
    elif weight_schedule == "uniform":
        weightings = torch.ones_like(snrs)
    else:
        raise NotImplementedError()
    return weightings


class KarrasDenoiser:
    def __init__(self, sigma_data=0.5, sigma_max=80.0, sigma_min=0.002, rho=7.0, weight_schedule="uniform", loss_norm="l2"):
        self.sigma_data, self.sigma_max, self.sigma_min, self.rho = sigma_data, sigma_max, sigma_min, rho
        self.weight_schedule, self.loss_norm = weight_schedule, loss_norm

    def get_snr(self, sigmas):
        return sigmas**-2

    def get_scalings_for_boundary_condition(self, sigma):
        c_skip = self.sigma_data**2 / ((sigma - self.sigma_min) ** 2 + self.sigma_data**2)
        c_out = (sigma - self.sigma_min) * self.sigma_data / (sigma**2 + self.sigma_data**2) ** 0.5
        c_in = 1 / (sigma**2 + self.sigma_data**2) ** 0.5
        return c_skip, c_out, c_in

    def denoise(self, model, x_t, sigmas, **model_kwargs):
        c_skip, c_out, c_in = [append_dims(x, x_t.ndim) for x in self.get_scalings_for_boundary_condition(sigmas)]
        rescaled_t = 1000 * 0.25 * torch.log(sigmas + 1e-44)
        model_output = model(c_in * x_t, rescaled_t, **model_kwargs)
        denoised = c_out * model_output + c_skip * x_t
        return model_output, denoised

    def consistency_losses(self, model, x_start, num_scales, model_kwargs=None, target_model=None, noise=None):
        if model_kwargs is None:
            model_kwargs = {}
        if noise is None:
            noise = torch.randn_like(x_start)

        dims = x_start.ndim

        def denoise_fn(x, t):
            return self.denoise(model, x, t, **model_kwargs)[1]

        @torch.no_grad()
        def target_denoise_fn(x, t):
            return self.denoise(target_model, x, t, **model_kwargs)[1]

        @torch.no_grad()
        def euler_solver(samples, t, next_t, x0):
            x = samples
            denoiser = x0
            d = (x - denoiser) / append_dims(t, dims)
            samples = x + d * append_dims(next_t - t, dims)
            return samples

        indices = torch.randint(0, num_scales - 1, (x_start.shape[0],), device=x_start.device)

        t = self.sigma_max ** (1 / self.rho) + indices / (num_scales - 1) * (self.sigma_min ** (1 / self.rho) - self.sigma_max ** (1 / self.rho))
        t = t**self.rho

        t2 = self.sigma_max ** (1 / self.rho) + (indices + 1) / (num_scales - 1) * (self.sigma_min ** (1 / self.rho) - self.sigma_max ** (1 / self.rho))
        t2 = t2**self.rho

        x_t = x_start + noise * append_dims(t, dims)

        dropout_state = torch.get_rng_state()  # BREAK must-not: the target network must replay the online network's dropout masks; the generator state is saved on the host
        distiller = denoise_fn(x_t, t)

        x_t2 = euler_solver(x_t, t, t2, x_start).detach()

        torch.set_rng_state(dropout_state)  # BREAK must-not: restores the saved generator state before the target's forward, a host-side RNG side effect
        distiller_target = target_denoise_fn(x_t2, t2)
        distiller_target = distiller_target.detach()

        snrs = self.get_snr(t)
        weights = get_weightings(self.weight_schedule, snrs, self.sigma_data)
        if self.loss_norm == "l1":
            diffs = torch.abs(distiller - distiller_target)
            loss = mean_flat(diffs) * weights
        elif self.loss_norm == "l2":
            diffs = (distiller - distiller_target) ** 2
            loss = mean_flat(diffs) * weights
        else:
            raise ValueError(f"Unknown loss norm {self.loss_norm}")

        terms = {}
        terms["loss"] = loss
        return terms


class TinyUNet(nn.Module):
    """A two-level conv net with a sinusoidal time embedding and dropout (the reason the RNG state is replayed)."""

    def __init__(self, ch=8, dropout=0.2):
        super().__init__()
        self.ch = ch
        self.time_embed = nn.Sequential(nn.Linear(ch, ch * 2), nn.SiLU(), nn.Linear(ch * 2, ch))
        self.inp = nn.Conv2d(3, ch, 3, padding=1)
        self.down = nn.Conv2d(ch, ch, 3, stride=2, padding=1)
        self.mid = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Dropout(dropout), nn.Conv2d(ch, ch, 3, padding=1))
        self.up = nn.ConvTranspose2d(ch, ch, 4, stride=2, padding=1)
        self.out = nn.Sequential(nn.GroupNorm(4, ch), nn.SiLU(), nn.Dropout(dropout), nn.Conv2d(ch, 3, 3, padding=1))

    def timestep_embedding(self, timesteps, dim, max_period=10000):
        half = dim // 2
        freqs = torch.exp(-math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half)
        args = timesteps[:, None].float() * freqs[None]
        return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)

    def forward(self, x, timesteps):
        emb = self.time_embed(self.timestep_embedding(timesteps, self.ch))
        h = self.inp(x) + emb[:, :, None, None]
        h1 = self.down(h)
        h1 = h1 + self.mid(h1)
        return self.out(self.up(h1) + h)


def update_ema(target_params, source_params, rate=0.99):
    for targ, src in zip(target_params, source_params, strict=True):
        targ.detach().mul_(rate).add_(src, alpha=1 - rate)


class CMTrainStep(nn.Module):
    """``CMTrainLoop``'s consistency-training loss for one microbatch (uniform weights), then the target EMA update
    at the rate the schedule gives for the step (``_update_target_ema``), without the optimizer in between."""

    def __init__(self, global_step=3000):
        super().__init__()
        self.model = TinyUNet()
        self.target_model = copy.deepcopy(self.model)
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self.diffusion = KarrasDenoiser()
        self.ema_scale_fn = create_ema_and_scales_fn(target_ema_mode="adaptive", start_ema=0.95, scale_mode="progressive",
                                                     start_scales=2, end_scales=150, total_steps=20000, distill_steps_per_iter=50000)
        self.global_step = global_step

    def forward(self, micro):
        ema, num_scales = self.ema_scale_fn(self.global_step)
        losses = self.diffusion.consistency_losses(self.model, micro, num_scales, target_model=self.target_model)
        loss = losses["loss"].mean()
        target_ema, scales = self.ema_scale_fn(self.global_step)
        with torch.no_grad():
            update_ema(list(self.target_model.parameters()), list(self.model.parameters()), rate=target_ema)
        return loss, num_scales, [p.clone() for p in self.target_model.parameters()]


def build_consistency_training():
    seeded(1311)
    return CMTrainStep(), (torch.randn(3, 3, 8, 8),)
