"""Video and medical imaging: VideoMAE pre-training (tube masking, the encoder sees only the visible
tubelets, the decoder reconstructs the masked ones against per-patch normalised pixels) and nnU-Net's deep
supervision loss (Dice + cross-entropy with an ignore label, summed over downsampled outputs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import seeded

# --------------------------------------------------------------------------- VideoMAE


class Block(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def get_sinusoid_encoding_table(n_position, d_hid):
    """Sinusoid position encoding table"""
    position = torch.arange(n_position, dtype=torch.float)[:, None]
    div = torch.pow(10000, 2 * (torch.arange(d_hid) // 2).float() / d_hid)
    table = position / div
    table[:, 0::2] = torch.sin(table[:, 0::2])
    table[:, 1::2] = torch.cos(table[:, 1::2])
    return table.unsqueeze(0)


class PatchEmbed(nn.Module):
    """Video to tubelet embedding."""

    def __init__(self, img_size=8, patch_size=4, in_chans=3, embed_dim=24, num_frames=4, tubelet_size=2):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2 * (num_frames // tubelet_size)
        self.proj = nn.Conv3d(in_chans, embed_dim, kernel_size=(tubelet_size, patch_size, patch_size),
                              stride=(tubelet_size, patch_size, patch_size))

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class PretrainVisionTransformerEncoder(nn.Module):
    def __init__(self, embed_dim=24, depth=2, num_heads=4):
        super().__init__()
        self.patch_embed = PatchEmbed(embed_dim=embed_dim)
        self.pos_embed = get_sinusoid_encoding_table(self.patch_embed.num_patches, embed_dim)
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, x, mask):
        x = self.patch_embed(x)
        x = x + self.pos_embed.type_as(x).to(x.device).clone().detach()
        B, _, C = x.shape
        x_vis = x[~mask].reshape(B, -1, C)  # BREAK: gather the visible tubelets with a stable argsort of the mask (fixed count)
        for blk in self.blocks:
            x_vis = blk(x_vis)
        return self.norm(x_vis)


class PretrainVisionTransformerDecoder(nn.Module):
    def __init__(self, embed_dim=16, depth=1, num_heads=2, num_classes=96):
        super().__init__()
        self.blocks = nn.ModuleList(Block(embed_dim, num_heads) for _ in range(depth))
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x, return_token_num):
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, -return_token_num:]))


class PretrainVisionTransformer(nn.Module):
    def __init__(self, encoder_embed_dim=24, decoder_embed_dim=16):
        super().__init__()
        self.encoder = PretrainVisionTransformerEncoder(embed_dim=encoder_embed_dim)
        self.decoder = PretrainVisionTransformerDecoder(embed_dim=decoder_embed_dim)
        self.encoder_to_decoder = nn.Linear(encoder_embed_dim, decoder_embed_dim, bias=False)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.pos_embed = get_sinusoid_encoding_table(self.encoder.patch_embed.num_patches, decoder_embed_dim)

    def forward(self, x, mask):
        x_vis = self.encoder(x, mask)  # [B, N_vis, C_e]
        x_vis = self.encoder_to_decoder(x_vis)  # [B, N_vis, C_d]
        B, N, C = x_vis.shape
        # we don't unshuffle the correct visible token order,
        # but shuffle the pos embedding accorddingly.
        expand_pos_embed = self.pos_embed.expand(B, -1, -1).type_as(x).to(x.device).clone().detach()
        pos_emd_vis = expand_pos_embed[~mask].reshape(B, -1, C)  # BREAK: gather with the same argsort of the mask
        pos_emd_mask = expand_pos_embed[mask].reshape(B, -1, C)  # BREAK: gather with the same argsort of the mask
        x_full = torch.cat([x_vis + pos_emd_vis, self.mask_token + pos_emd_mask], dim=1)  # [B, N, C_d]
        return self.decoder(x_full, pos_emd_mask.shape[1])  # [B, N_mask, 3 * 16 * 16]


class VideoMAEPretrainStep(nn.Module):
    IMAGENET_DEFAULT_MEAN = (0.485, 0.456, 0.406)
    IMAGENET_DEFAULT_STD = (0.229, 0.224, 0.225)

    def __init__(self, patch_size=4, tubelet_size=2):
        super().__init__()
        self.model = PretrainVisionTransformer()
        self.patch_size = patch_size
        self.tubelet_size = tubelet_size

    def forward(self, videos, bool_masked_pos):
        with torch.no_grad():
            # calculate the predict label
            mean = torch.as_tensor(self.IMAGENET_DEFAULT_MEAN).to(videos.device)[None, :, None, None, None]
            std = torch.as_tensor(self.IMAGENET_DEFAULT_STD).to(videos.device)[None, :, None, None, None]
            unnorm_videos = videos * std + mean  # in [0, 1]
            # rearrange 'b c (t p0) (h p1) (w p2) -> b (t h w) (p0 p1 p2) c'
            b, c, t, h, w = unnorm_videos.shape
            p0, p = self.tubelet_size, self.patch_size
            videos_squeeze = (
                unnorm_videos.view(b, c, t // p0, p0, h // p, p, w // p, p)
                .permute(0, 2, 4, 6, 3, 5, 7, 1)
                .reshape(b, (t // p0) * (h // p) * (w // p), p0 * p * p, c)
            )
            videos_norm = (videos_squeeze - videos_squeeze.mean(dim=-2, keepdim=True)) / (
                videos_squeeze.var(dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6
            )
            videos_patch = videos_norm.flatten(2)  # 'b n p c -> b n (p c)'
            B, _, C = videos_patch.shape
            labels = videos_patch[bool_masked_pos].reshape(B, -1, C)  # BREAK: gather with the argsort of the mask
        outputs = self.model(videos, bool_masked_pos)
        loss = F.mse_loss(outputs, labels)
        return loss, outputs


class TubeMaskingGenerator:
    def __init__(self, input_size, mask_ratio):
        self.frames, self.height, self.width = input_size
        self.num_patches_per_frame = self.height * self.width
        self.num_masks_per_frame = int(mask_ratio * self.num_patches_per_frame)

    def __call__(self, g):
        mask_per_frame = torch.zeros(self.num_patches_per_frame, dtype=torch.bool)
        mask_per_frame[torch.randperm(self.num_patches_per_frame, generator=g)[: self.num_masks_per_frame]] = True
        return mask_per_frame.repeat(self.frames)


def build_videomae_tube():
    torch.manual_seed(1301)
    g = seeded(1302)
    videos = torch.randn(2, 3, 4, 8, 8, generator=g)
    gen = TubeMaskingGenerator((2, 2, 2), 0.75)
    bool_masked_pos = torch.stack([gen(g), gen(g)])
    return VideoMAEPretrainStep(), (videos, bool_masked_pos)


# --------------------------------------------------------------------------- nnU-Net deep supervision


def softmax_helper_dim1(x):
    return torch.softmax(x, 1)


class MemoryEfficientSoftDiceLoss(nn.Module):
    def __init__(self, apply_nonlin=None, batch_dice=False, do_bg=True, smooth=1.0):
        super().__init__()
        self.do_bg = do_bg
        self.batch_dice = batch_dice
        self.apply_nonlin = apply_nonlin
        self.smooth = smooth

    def forward(self, x, y, loss_mask=None):
        if self.apply_nonlin is not None:
            x = self.apply_nonlin(x)
        # make everything shape (b, c)
        axes = tuple(range(2, x.ndim))
        with torch.no_grad():
            if x.ndim != y.ndim:
                y = y.view((y.shape[0], 1, *y.shape[1:]))
            if x.shape == y.shape:
                # if this is the case then gt is probably already a one hot encoding
                y_onehot = y
            else:
                y_onehot = torch.zeros(x.shape, device=x.device, dtype=torch.bool)
                y_onehot.scatter_(1, y.long(), 1)
            if not self.do_bg:
                y_onehot = y_onehot[:, 1:]
            sum_gt = y_onehot.sum(axes) if loss_mask is None else (y_onehot * loss_mask).sum(axes)
        # this one MUST be outside the with torch.no_grad(): context. Otherwise no gradients for you
        if not self.do_bg:
            x = x[:, 1:]
        if loss_mask is None:
            intersect = (x * y_onehot).sum(axes)
            sum_pred = x.sum(axes)
        else:
            intersect = (x * y_onehot * loss_mask).sum(axes)
            sum_pred = (x * loss_mask).sum(axes)
        if self.batch_dice:
            intersect = intersect.sum(0)
            sum_pred = sum_pred.sum(0)
            sum_gt = sum_gt.sum(0)
        dc = (2 * intersect + self.smooth) / (torch.clip(sum_gt + sum_pred + self.smooth, 1e-8))
        dc = dc.mean()
        return -dc


class RobustCrossEntropyLoss(nn.CrossEntropyLoss):
    """this is just a compatibility layer because my target tensor is float and has an extra dimension"""

    def forward(self, input, target):
        if target.ndim == input.ndim:
            assert target.shape[1] == 1
            target = target[:, 0]
        return super().forward(input, target.long())


class DC_and_CE_loss(nn.Module):
    def __init__(self, soft_dice_kwargs, ce_kwargs, weight_ce=1, weight_dice=1, ignore_label=None):
        super().__init__()
        if ignore_label is not None:
            ce_kwargs["ignore_index"] = ignore_label
        self.weight_dice = weight_dice
        self.weight_ce = weight_ce
        self.ignore_label = ignore_label
        self.ce = RobustCrossEntropyLoss(**ce_kwargs)
        self.dc = MemoryEfficientSoftDiceLoss(apply_nonlin=softmax_helper_dim1, **soft_dice_kwargs)

    def forward(self, net_output, target):
        if self.ignore_label is not None:
            assert target.shape[1] == 1, "ignore label is not implemented for one hot encoded target variables (DC_and_CE_loss)"
            mask = target != self.ignore_label
            # remove ignore label from target, replace with one of the known labels. It doesn't matter because we
            # ignore gradients in those areas anyway
            target_dice = torch.where(mask, target, 0)
            num_fg = mask.sum()
        else:
            target_dice = target
            mask = None
        dc_loss = self.dc(net_output, target_dice, loss_mask=mask) if self.weight_dice != 0 else 0
        ce_loss = (
            self.ce(net_output, target[:, 0])
            if self.weight_ce != 0 and (self.ignore_label is None or num_fg > 0)  # BREAK: torch.where(num_fg > 0, ce, 0)
            else 0
        )
        return self.weight_ce * ce_loss + self.weight_dice * dc_loss


class DeepSupervisionWrapper(nn.Module):
    def __init__(self, loss, weight_factors=None):
        super().__init__()
        assert any(x != 0 for x in weight_factors), "At least one weight factor should be != 0.0"
        self.weight_factors = tuple(weight_factors)
        self.loss = loss

    def forward(self, *args):
        assert all(isinstance(i, (tuple, list)) for i in args), f"all args must be either tuple or list, got {[type(i) for i in args]}"
        weights = self.weight_factors if self.weight_factors is not None else (1,) * len(args[0])
        return sum(weights[i] * self.loss(*inputs) for i, inputs in enumerate(zip(*args, strict=True)) if weights[i] != 0.0)


class PlainConvUNet(nn.Module):
    def __init__(self, in_ch=1, num_classes=3, f=(8, 16, 24)):
        super().__init__()
        self.enc = nn.ModuleList()
        c = in_ch
        for i, fi in enumerate(f):
            self.enc.append(nn.Sequential(nn.Conv2d(c, fi, 3, stride=1 if i == 0 else 2, padding=1), nn.InstanceNorm2d(fi, affine=True), nn.LeakyReLU(0.01)))
            c = fi
        self.up = nn.ModuleList(nn.ConvTranspose2d(f[i + 1], f[i], 2, stride=2) for i in reversed(range(len(f) - 1)))
        self.dec = nn.ModuleList(nn.Sequential(nn.Conv2d(2 * f[i], f[i], 3, padding=1), nn.LeakyReLU(0.01)) for i in reversed(range(len(f) - 1)))
        self.seg = nn.ModuleList(nn.Conv2d(f[i], num_classes, 1) for i in reversed(range(len(f) - 1)))

    def forward(self, x):
        skips = []
        for stage in self.enc:
            x = stage(x)
            skips.append(x)
        seg_outputs = []
        x = skips[-1]
        for i, (up, dec, seg) in enumerate(zip(self.up, self.dec, self.seg, strict=True)):
            x = dec(torch.cat([up(x), skips[-(i + 2)]], 1))
            seg_outputs.append(seg(x))
        return seg_outputs[::-1]  # full resolution first


class NNUNetTrainStep(nn.Module):
    def __init__(self, ignore_label=3):
        super().__init__()
        self.network = PlainConvUNet()
        weights = torch.tensor([1 / (2**i) for i in range(2)])
        weights = weights / weights.sum()
        self.loss = DeepSupervisionWrapper(
            DC_and_CE_loss({"batch_dice": True, "smooth": 1e-5, "do_bg": False}, {}, weight_ce=1, weight_dice=1,
                           ignore_label=ignore_label),
            weights.tolist(),
        )

    def forward(self, data, target):
        output = self.network(data)
        # the data loader's DownsampleSegForDSTransform: nearest-neighbour targets for every output scale
        targets = [target] + [F.interpolate(target.float(), size=o.shape[-2:], mode="nearest") for o in output[1:]]
        return self.loss(output, targets)


def build_nnunet_deep_supervision():
    torch.manual_seed(1311)
    g = seeded(1312)
    data = torch.randn(2, 1, 16, 16, generator=g)
    target = torch.randint(0, 3, (2, 1, 16, 16), generator=g).float()
    target[:, :, :3] = 3  # a sparsely annotated band: the ignore label
    return NNUNetTrainStep(), (data, target)
