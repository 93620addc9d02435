"""Self-supervised pre-training: facebookresearch/swav's training iteration (``main_swav.train``: the prototypes
re-normalized, the multi-crop ``ResNet.forward`` grouping equal-resolution crops with ``unique_consecutive``,
``distributed_sinkhorn`` codes, the swapped prediction over ``np.delete(np.arange(...), crop_id)``) and
microsoft/unilm's BEiT (``MaskingGenerator`` blocks drawn by the data loader, the DALL-E tokenizer's codebook
indices, ``VisionTransformerForMaskedImageModeling`` returning the masked tokens only, ``engine_for_pretraining``'s
loss read back with ``.item()`` and checked with ``math.isfinite`` before the ``MetricLogger`` takes it)."""

from __future__ import annotations

import math
import random
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .helpers import MetricLogger, seeded

# ------------------------------------------------------------------ swav src/resnet50.py (multi-crop forward)


class ResNet(nn.Module):
    """A small residual trunk with SwAV's projection head and prototypes."""

    def __init__(self, width=8, output_dim=8, hidden_mlp=16, nmb_prototypes=6, normalize=True):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(nn.Conv2d(width, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.l2norm = normalize
        self.projection_head = nn.Sequential(nn.Linear(width, hidden_mlp), nn.BatchNorm1d(hidden_mlp), nn.ReLU(inplace=True),
                                             nn.Linear(hidden_mlp, output_dim))
        self.prototypes = nn.Linear(output_dim, nmb_prototypes, bias=False)
        self.eval_mode = False

    def forward_backbone(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.layer1(x)
        if self.eval_mode:
            return x
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return x

    def forward_head(self, x):
        if self.projection_head is not None:
            x = self.projection_head(x)
        if self.l2norm:
            x = nn.functional.normalize(x, dim=1, p=2)
        if self.prototypes is not None:
            return x, self.prototypes(x)
        return x

    def forward(self, inputs):
        if not isinstance(inputs, list):
            inputs = [inputs]
        idx_crops = torch.cumsum(torch.unique_consecutive(torch.tensor([inp.shape[-1] for inp in inputs]), return_counts=True)[1], 0)  # BREAK: the crop sizes are Python ints: group equal consecutive sizes on the host and keep the end indices a list
        start_idx = 0
        for end_idx in idx_crops:
            _out = self.forward_backbone(torch.cat(inputs[start_idx:end_idx]))  # BREAK: with the end indices Python ints the list slices are static (the same rewrite)
            if start_idx == 0:
                output = _out
            else:
                output = torch.cat((output, _out))
            start_idx = end_idx
        return self.forward_head(output)


def all_reduce(tensor):
    """``dist.all_reduce`` in place (nothing to reduce with one process)."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(tensor)
    return tensor


class SwAVArgs:
    crops_for_assign = [0, 1]
    nmb_crops = [2, 2]
    temperature = 0.1
    epsilon = 0.05
    sinkhorn_iterations = 3
    world_size = 1


@torch.no_grad()
def distributed_sinkhorn(out, args):
    Q = torch.exp(out / args.epsilon).t()  # Q is K-by-B for consistency with notations from our paper
    B = Q.shape[1] * args.world_size  # number of samples to assign
    K = Q.shape[0]  # how many prototypes

    # make the matrix sums to 1
    sum_Q = torch.sum(Q)
    all_reduce(sum_Q)
    Q /= sum_Q

    for _ in range(args.sinkhorn_iterations):
        # normalize each row: total weight per prototype must be 1/K
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        all_reduce(sum_of_rows)
        Q /= sum_of_rows
        Q /= K

        # normalize each column: total weight per sample must be 1/B
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B

    Q *= B  # the colomns must sum to 1 so that Q is an assignment
    return Q.t()


class SwAVTrainStep(nn.Module):
    """One iteration of ``main_swav.train`` before ``loss.backward()`` (no feature queue yet)."""

    def __init__(self):
        super().__init__()
        self.model = ResNet()
        self.args = SwAVArgs()

    def forward(self, inputs):
        args = self.args
        # normalize the prototypes
        with torch.no_grad():
            w = self.model.prototypes.weight.data.clone()
            w = nn.functional.normalize(w, dim=1, p=2)
            self.model.prototypes.weight.copy_(w)

        # ============ multi-res forward passes ... ============
        embedding, output = self.model(inputs)
        embedding = embedding.detach()
        bs = inputs[0].size(0)

        # ============ swav loss ... ============
        loss = 0
        for i, crop_id in enumerate(args.crops_for_assign):  # noqa: B007 (i indexes the queue once it exists)
            with torch.no_grad():
                out = output[bs * crop_id : bs * (crop_id + 1)].detach()
                # get assignments
                q = distributed_sinkhorn(out, args)[-bs:]

            # cluster assignment prediction
            subloss = 0
            for v in np.delete(np.arange(np.sum(args.nmb_crops)), crop_id):  # BREAK: np.delete on the traced array has a data-dependent size: iterate the other crops as Python ints (range with crop_id skipped)
                x = output[bs * v : bs * (v + 1)] / args.temperature
                subloss -= torch.mean(torch.sum(q * F.log_softmax(x, dim=1), dim=1))
            loss += subloss / (np.sum(args.nmb_crops) - 1)
        loss /= len(args.crops_for_assign)
        return loss, embedding


def build_swav_train_step():
    seeded(1514)
    inputs = [torch.randn(2, 3, 16, 16), torch.randn(2, 3, 16, 16), torch.randn(2, 3, 8, 8), torch.randn(2, 3, 8, 8)]
    return SwAVTrainStep().train(), (inputs,)


# ------------------------------------------------------------------ BEiT masking_generator.py, modeling_pretrain.py


class MaskingGenerator:
    def __init__(self, input_size, num_masking_patches, min_num_patches=4, max_num_patches=None, min_aspect=0.3, max_aspect=None):
        if not isinstance(input_size, tuple):
            input_size = (input_size,) * 2
        self.height, self.width = input_size

        self.num_patches = self.height * self.width
        self.num_masking_patches = num_masking_patches

        self.min_num_patches = min_num_patches
        self.max_num_patches = num_masking_patches if max_num_patches is None else max_num_patches

        max_aspect = max_aspect or 1 / min_aspect
        self.log_aspect_ratio = (math.log(min_aspect), math.log(max_aspect))

    def get_shape(self):
        return self.height, self.width

    def _mask(self, mask, max_mask_patches):
        delta = 0
        for _attempt in range(10):
            target_area = random.uniform(self.min_num_patches, max_mask_patches)
            aspect_ratio = math.exp(random.uniform(*self.log_aspect_ratio))
            h = int(round(math.sqrt(target_area * aspect_ratio)))
            w = int(round(math.sqrt(target_area / aspect_ratio)))
            if w < self.width and h < self.height:
                top = random.randint(0, self.height - h)
                left = random.randint(0, self.width - w)

                num_masked = mask[top : top + h, left : left + w].sum()
                # Overlap
                if 0 < h * w - num_masked <= max_mask_patches:
                    for i in range(top, top + h):
                        for j in range(left, left + w):
                            if mask[i, j] == 0:
                                mask[i, j] = 1
                                delta += 1

                if delta > 0:
                    break
        return delta

    def __call__(self):
        mask = np.zeros(shape=self.get_shape(), dtype=np.int64)
        mask_count = 0
        while mask_count < self.num_masking_patches:
            max_mask_patches = self.num_masking_patches - mask_count
            max_mask_patches = min(max_mask_patches, self.max_num_patches)

            delta = self._mask(mask, max_mask_patches)
            if delta == 0:
                break
            else:
                mask_count += delta

        return mask


class DiscreteVAETokenizer(nn.Module):
    """The DALL-E encoder's role: logits over the visual vocabulary per 4x4 patch, ``get_codebook_indices`` by arg-max."""

    def __init__(self, vocab_size=16, patch_size=4):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 8, patch_size, patch_size), nn.ReLU(), nn.Conv2d(8, vocab_size, 1))

    @torch.no_grad()
    def get_codebook_indices(self, images):
        z_logits = self.encoder(images)
        return torch.argmax(z_logits, axis=1)


class Block(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, rel_pos_bias=None):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformerForMaskedImageModeling(nn.Module):
    def __init__(self, img_size=16, patch_size=4, embed_dim=16, depth=1, vocab_size=16):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, patch_size, patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.mask_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.pos_drop = nn.Dropout(p=0.0)
        self.rel_pos_bias = None
        self.blocks = nn.ModuleList([Block(embed_dim) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.lm_head = nn.Linear(embed_dim, vocab_size)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.mask_token, std=0.02)

    def forward_features(self, x, bool_masked_pos):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        batch_size, seq_len, _ = x.size()

        cls_tokens = self.cls_token.expand(batch_size, -1, -1)  # stole cls_tokens impl from Phil Wang, thanks
        mask_token = self.mask_token.expand(batch_size, seq_len, -1)

        # replace the masked visual tokens by mask_token
        w = bool_masked_pos.unsqueeze(-1).type_as(mask_token)
        x = x * (1 - w) + mask_token * w

        x = torch.cat((cls_tokens, x), dim=1)
        if self.pos_embed is not None:
            x = x + self.pos_embed
        x = self.pos_drop(x)

        rel_pos_bias = self.rel_pos_bias() if self.rel_pos_bias is not None else None
        for blk in self.blocks:
            x = blk(x, rel_pos_bias=rel_pos_bias)

        return self.norm(x)

    def forward(self, x, bool_masked_pos, return_all_tokens=False):
        x = self.forward_features(x, bool_masked_pos=bool_masked_pos)
        x = x[:, 1:]
        if return_all_tokens:
            return self.lm_head(x)
        else:
            # return the masked tokens
            return self.lm_head(x[bool_masked_pos])  # BREAK: predict every token (return_all_tokens=True) and weigh the cross-entropy by the mask: the mean over the masked tokens, the same sum over the same count


class BEiTPretrainStep(nn.Module):
    """``engine_for_pretraining.train_one_epoch``'s batch up to ``loss_scaler``."""

    def __init__(self):
        super().__init__()
        self.model = VisionTransformerForMaskedImageModeling()
        self.d_vae = DiscreteVAETokenizer()
        self.metric_logger = MetricLogger(delimiter="  ")

    def forward(self, samples, images, bool_masked_pos):
        with torch.no_grad():
            input_ids = self.d_vae.get_codebook_indices(images).flatten(1)
            bool_masked_pos = bool_masked_pos.flatten(1).to(torch.bool)
            labels = input_ids[bool_masked_pos]  # BREAK: keep the ids of every token and ignore the unmasked ones in the loss (the same rewrite)

        outputs = self.model(samples, bool_masked_pos=bool_masked_pos, return_all_tokens=False)
        loss = nn.CrossEntropyLoss()(input=outputs.float(), target=labels)

        loss_value = loss.item()  # BREAK must-not: a non-finite loss prints the value and exits the process: the check needs the number on the host

        if not math.isfinite(loss_value):
            print(f"Loss is {loss_value}, stopping training")
            sys.exit(1)

        self.metric_logger.update(loss=loss_value)
        return loss, self.metric_logger.meters["loss"].global_avg


def build_beit_mim_step():
    seeded(1515)
    generator = MaskingGenerator(input_size=4, num_masking_patches=6, min_num_patches=2)
    bool_masked_pos = torch.from_numpy(np.stack([generator() for _ in range(2)]))
    return BEiTPretrainStep().train(), (torch.randn(2, 3, 16, 16), torch.rand(2, 3, 16, 16), bool_masked_pos)
