"""Generative-model steps: CycleGAN's discriminator update through its history ``ImagePool``
(junyanz/pytorch-CycleGAN-and-pix2pix), audiocraft's residual vector quantizer with quantizer dropout (a
learned codebook, as in SoundStream), MaskGIT's masked-token training step (dome272/MaskGIT-pytorch)."""

from __future__ import annotations

import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import masked_mean, seeded

# ------------------------------------------------------------------ CycleGAN (util/image_pool.py, cycle_gan_model.py)


class ImagePool:
    def __init__(self, pool_size):
        self.pool_size = pool_size
        if self.pool_size > 0:
            self.num_imgs = 0
            self.images = []

    def query(self, images):
        if self.pool_size == 0:
            return images
        return_images = []
        for image in images:
            image = torch.unsqueeze(image.data, 0)
            if self.num_imgs < self.pool_size:
                self.num_imgs = self.num_imgs + 1
                self.images.append(image)
                return_images.append(image)
            else:
                p = random.uniform(0, 1)
                if p > 0.5:  # BREAK must-not: Dynamo traces the draw from Python's random stream into the graph, so the swap is a branch on a graph value; the stream must be kept
                    random_id = random.randint(0, self.pool_size - 1)
                    tmp = self.images[random_id].clone()
                    self.images[random_id] = image
                    return_images.append(tmp)
                else:
                    return_images.append(image)
        return_images = torch.cat(return_images, 0)
        return return_images


class GANLoss(nn.Module):
    def __init__(self, target_real_label=1.0, target_fake_label=0.0):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(target_real_label))
        self.register_buffer("fake_label", torch.tensor(target_fake_label))
        self.loss = nn.MSELoss()

    def __call__(self, prediction, target_is_real):
        target_tensor = self.real_label if target_is_real else self.fake_label
        return self.loss(prediction, target_tensor.expand_as(prediction))


class CycleGANStep(nn.Module):
    def __init__(self, pool_size=4):
        super().__init__()
        self.netG_A = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1), nn.InstanceNorm2d(8), nn.ReLU(True), nn.Conv2d(8, 3, 3, 1, 1), nn.Tanh())
        self.netD_A = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1), nn.LeakyReLU(0.2, True), nn.Conv2d(8, 1, 4, 1, 1))
        self.criterionGAN = GANLoss()
        self.fake_B_pool = ImagePool(pool_size)

    def backward_D_basic(self, netD, real, fake):
        pred_real = netD(real)
        loss_D_real = self.criterionGAN(pred_real, True)
        pred_fake = netD(fake.detach())
        loss_D_fake = self.criterionGAN(pred_fake, False)
        return (loss_D_real + loss_D_fake) * 0.5

    def forward(self, real_A, real_B):
        fake_B = self.netG_A(real_A)
        loss_G_A = self.criterionGAN(self.netD_A(fake_B), True)
        fake_B_hist = self.fake_B_pool.query(fake_B)
        loss_D_A = self.backward_D_basic(self.netD_A, real_B, fake_B_hist)
        return loss_G_A, loss_D_A


def build_cyclegan_pool():
    seeded(20)
    model = CycleGANStep()
    model.fake_B_pool.query(torch.randn(4, 3, 8, 8))  # the history is already full mid-training
    return model, (torch.randn(3, 3, 8, 8), torch.randn(3, 3, 8, 8))


# ------------------------------------------------------------------ audiocraft ResidualVectorQuantizer


class VectorQuantization(nn.Module):
    def __init__(self, dim, codebook_size, commitment_weight=1.0):
        super().__init__()
        self.codebook = nn.Parameter(torch.randn(codebook_size, dim))
        self.commitment_weight = commitment_weight

    def forward(self, x):
        x = x.transpose(1, 2)  # b d n -> b n d
        flat = x.reshape(-1, x.shape[-1])
        dist = -(flat.pow(2).sum(1, keepdim=True) - 2 * flat @ self.codebook.t() + self.codebook.pow(2).sum(1)[None])
        embed_ind = dist.max(dim=-1).indices.view(*x.shape[:-1])
        quantize = F.embedding(embed_ind, self.codebook)
        loss = F.mse_loss(quantize, x.detach())
        if self.training:
            loss = loss + self.commitment_weight * F.mse_loss(quantize.detach(), x)
            quantize = x + (quantize - x).detach()
        return quantize.transpose(1, 2), embed_ind, loss


class ResidualVectorQuantization(nn.Module):
    def __init__(self, *, num_quantizers, **kwargs):
        super().__init__()
        self.layers = nn.ModuleList([VectorQuantization(**kwargs) for _ in range(num_quantizers)])

    def forward(self, x, n_q=None):
        quantized_out = 0.0
        residual = x
        all_losses = []
        all_indices = []
        n_q = n_q or len(self.layers)
        for layer in self.layers[:n_q]:
            quantized, indices, loss = layer(residual)
            residual = residual - quantized.detach()
            quantized_out = quantized_out + quantized
            all_indices.append(indices)
            all_losses.append(loss)
        out_losses, out_indices = map(torch.stack, (all_losses, all_indices))
        return quantized_out, out_indices, out_losses


class ResidualVectorQuantizer(nn.Module):
    def __init__(self, dimension=8, n_q=6, q_dropout=True, bins=16):
        super().__init__()
        self.n_q, self.q_dropout, self.bins = n_q, q_dropout, bins
        self.encoder = nn.Conv1d(1, dimension, 4, 2, 1)
        self.decoder = nn.ConvTranspose1d(dimension, 1, 4, 2, 1)
        self.vq = ResidualVectorQuantization(dim=dimension, codebook_size=bins, num_quantizers=n_q)

    def forward(self, wav, frame_rate=50):
        x = self.encoder(wav)
        n_q = self.n_q
        if self.training and self.q_dropout:
            n_q = int(torch.randint(1, self.n_q + 1, (1,)).item())  # BREAK must-not: the dropped quantizers must get no gradient at all (a mask would give them zero grads that Adam and weight decay still act on)
        bw_per_q = math.log2(self.bins) * frame_rate / 1000
        quantized, codes, commit_loss = self.vq(x, n_q=n_q)
        codes = codes.transpose(0, 1)
        bw = torch.tensor(n_q * bw_per_q).to(x)
        # usage of the first codebook, logged as its perplexity
        avg_probs = torch.bincount(codes[:, 0].flatten(), minlength=self.bins).float() / codes[:, 0].numel()  # BREAK: count the codes with one_hot(codes, bins).sum(0)
        perplexity = torch.exp(-torch.sum(avg_probs * torch.log(avg_probs + 1e-10)))
        recon = self.decoder(quantized)
        return F.l1_loss(recon, wav), bw, torch.mean(commit_loss), perplexity


def build_encodec_rvq():
    seeded(21)
    model = ResidualVectorQuantizer()
    return model, (torch.randn(2, 1, 16),)


# ------------------------------------------------------------------ MaskGIT (dome272/MaskGIT-pytorch transformer.py)


class VQGANTransformer(nn.Module):
    def __init__(self, num_image_tokens=16, num_codebook_vectors=32, dim=16):
        super().__init__()
        self.mask_token_id = num_codebook_vectors
        self.tok_emb = nn.Embedding(num_codebook_vectors + 1, dim)
        self.pos_emb = nn.Parameter(torch.randn(1, num_image_tokens, dim) * 0.02)
        self.transformer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(dim, num_codebook_vectors)
        self.gamma = self.gamma_func("cosine")

    @staticmethod
    def gamma_func(mode="cosine"):
        if mode == "linear":
            return lambda r: 1 - r
        elif mode == "cosine":
            return lambda r: np.cos(r * np.pi / 2)
        elif mode == "square":
            return lambda r: 1 - r**2
        raise NotImplementedError

    def tokens_to_logits(self, idx):
        return self.head(self.transformer(self.tok_emb(idx) + self.pos_emb))

    def forward(self, z_indices):
        r = math.floor(self.gamma(np.random.uniform()) * z_indices.shape[1])  # BREAK must-not: the mask ratio is numpy's draw; the run has to keep consuming numpy's stream
        sample = torch.rand(z_indices.shape, device=z_indices.device).topk(r, dim=1).indices
        mask = torch.zeros(z_indices.shape, dtype=torch.bool, device=z_indices.device)
        mask.scatter_(dim=1, index=sample, value=True)
        masked_indices = self.mask_token_id * torch.ones_like(z_indices, device=z_indices.device)
        a_indices = mask * z_indices + (~mask) * masked_indices
        logits = self.tokens_to_logits(a_indices)
        target = z_indices
        # only the masked-out tokens are predicted
        loss = masked_mean(F.cross_entropy(logits.transpose(1, 2), target, reduction="none"), ~mask)
        return logits, loss


def build_maskgit_train():
    seeded(22)
    model = VQGANTransformer()
    return model, (torch.randint(0, 32, (2, 16)),)
