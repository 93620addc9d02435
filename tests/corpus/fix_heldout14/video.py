"""Video recognition: open-mmlab/mmaction2's TSM recognizer (``ResNetTSM``'s ``TemporalShift`` around each block's
first conv, ``TSMHead`` with its average consensus, ``Recognizer2D.forward_train`` and ``train_step``),
facebookresearch/SlowFast's multi-view testing (a two-pathway ``SlowFast`` with ``FuseFastToSlow`` and the
``ResNetBasicHead``'s fully-convolutional inference, the ``TestMeter`` summing each video's clip predictions and
``finalize_metrics``), facebookresearch/TimeSformer's divided space-time ``VisionTransformer`` under SlowFast's
``train_epoch`` step (``check_nan_losses``, top-1 / top-5 errors copied to the ``TrainMeter``)."""

from __future__ import annotations

import logging
from collections import deque

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .helpers import BaseHead, check_nan_losses, parse_losses, seeded, topks_correct

logger = logging.getLogger(__name__)

# ------------------------------------------------------------------ mmaction2 ResNetTSM + TSMHead + Recognizer2D


class TemporalShift(nn.Module):
    """Shift part of the channels one segment forward and part one segment back before ``net``."""

    def __init__(self, net, num_segments=3, shift_div=8):
        super().__init__()
        self.net = net
        self.num_segments = num_segments
        self.shift_div = shift_div

    def forward(self, x):
        x = self.shift(x, self.num_segments, shift_div=self.shift_div)
        return self.net(x)

    @staticmethod
    def shift(x, num_segments, shift_div=3):
        # [N, C, H, W]
        n, c, h, w = x.size()
        # [N // num_segments, num_segments, C, H*W]
        x = x.view(-1, num_segments, c, h * w)
        fold = c // shift_div
        left_split = x[:, :, :fold, :]
        mid_split = x[:, :, fold : 2 * fold, :]
        right_split = x[:, :, 2 * fold :, :]
        # shift left on num_segments channel in `left_split`
        zeros = left_split - left_split
        blank = zeros[:, :1, :, :]
        left_split = left_split[:, 1:, :, :]
        left_split = torch.cat((left_split, blank), 1)
        # shift right on num_segments channel in `mid_split`
        zeros = mid_split - mid_split
        blank = zeros[:, :1, :, :]
        mid_split = mid_split[:, :-1, :, :]
        mid_split = torch.cat((blank, mid_split), 1)
        out = torch.cat((left_split, mid_split, right_split), 2)
        return out.view(n, c, h, w)


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNetTSM(nn.Module):
    def __init__(self, num_segments=4, shift_div=8, widths=(8, 16)):
        super().__init__()
        self.num_segments = num_segments
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks = []
        inplanes = widths[0]
        for i, planes in enumerate(widths):
            blocks.append(BasicBlock(inplanes, planes, stride=1 if i == 0 else 2))
            inplanes = planes
        self.layers = nn.Sequential(*blocks)
        self.make_temporal_shift(shift_div)

    def make_temporal_shift(self, shift_div):
        """'blockres' shift: wrap the first conv of every residual block."""
        for block in self.layers:
            block.conv1 = TemporalShift(block.conv1, num_segments=self.num_segments, shift_div=shift_div)

    def forward(self, x):
        return self.layers(self.stem(x))


class TSMHead(BaseHead):
    def __init__(self, num_classes, in_channels, num_segments=4, dropout_ratio=0.5, **kwargs):
        super().__init__(num_classes, in_channels, **kwargs)
        self.num_segments = num_segments
        self.avg_pool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(p=dropout_ratio)
        self.fc_cls = nn.Linear(self.in_channels, self.num_classes)

    def forward(self, x, num_segs):
        # [N * num_segs, in_channels, 7, 7]
        x = self.avg_pool(x)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        # [N * num_segs, num_classes]
        cls_score = self.fc_cls(x)
        # [N, num_segs, num_classes]
        cls_score = cls_score.view((-1, self.num_segments) + cls_score.size()[1:])
        # AvgConsensus: [N, 1, num_classes]
        cls_score = cls_score.mean(dim=1, keepdim=True)
        return cls_score.squeeze(1)


class Recognizer2D(nn.Module):
    def __init__(self, num_classes=6, num_segments=4):
        super().__init__()
        self.backbone = ResNetTSM(num_segments=num_segments)
        self.cls_head = TSMHead(num_classes, 16, num_segments=num_segments)

    def forward_train(self, imgs, labels):
        batches = imgs.shape[0]
        imgs = imgs.reshape((-1,) + imgs.shape[2:])
        num_segs = imgs.shape[0] // batches
        losses = dict()
        x = self.backbone(imgs)
        cls_score = self.cls_head(x, num_segs)
        gt_labels = labels.squeeze()
        loss_cls = self.cls_head.loss(cls_score, gt_labels)
        losses.update(loss_cls)
        return losses

    def forward(self, data_batch):
        """``train_step``: the losses, parsed for the optimizer hook and the log buffer."""
        losses = self.forward_train(data_batch["imgs"], data_batch["label"])
        loss, log_vars = parse_losses(losses)
        return dict(loss=loss, log_vars=log_vars, num_samples=len(next(iter(data_batch.values()))))


def build_tsm_train():
    seeded(1401)
    model = Recognizer2D().train()
    batch = {"imgs": torch.randn(3, 4, 3, 16, 16), "label": torch.tensor([[2], [0], [5]])}
    return model, (batch,)


# ------------------------------------------------------------------ SlowFast: SlowFast model + TestMeter


class FuseFastToSlow(nn.Module):
    """Fuse the information from the Fast pathway to the Slow pathway by a time-strided conv."""

    def __init__(self, dim_in, fusion_conv_channel_ratio, fusion_kernel, alpha, eps=1e-5, bn_mmt=0.1):
        super().__init__()
        self.conv_f2s = nn.Conv3d(dim_in, dim_in * fusion_conv_channel_ratio, kernel_size=[fusion_kernel, 1, 1],
                                  stride=[alpha, 1, 1], padding=[fusion_kernel // 2, 0, 0], bias=False)
        self.bn = nn.BatchNorm3d(num_features=dim_in * fusion_conv_channel_ratio, eps=eps, momentum=bn_mmt)
        self.relu = nn.ReLU(True)

    def forward(self, x):
        x_s = x[0]
        x_f = x[1]
        fuse = self.conv_f2s(x_f)
        fuse = self.bn(fuse)
        fuse = self.relu(fuse)
        x_s_fuse = torch.cat([x_s, fuse], 1)
        return [x_s_fuse, x_f]


class SlowFast(nn.Module):
    def __init__(self, num_classes=5, alpha=4, beta_inv=4, width=8):
        super().__init__()
        self.alpha = alpha
        self.s1_slow = nn.Sequential(nn.Conv3d(3, width, (1, 3, 3), (1, 2, 2), (0, 1, 1), bias=False), nn.BatchNorm3d(width), nn.ReLU())
        self.s1_fast = nn.Sequential(nn.Conv3d(3, width // beta_inv, (5, 3, 3), (1, 2, 2), (2, 1, 1), bias=False),
                                     nn.BatchNorm3d(width // beta_inv), nn.ReLU())
        self.s1_fuse = FuseFastToSlow(width // beta_inv, 2, 5, alpha)
        dim_slow = width + 2 * width // beta_inv
        self.s2_slow = nn.Sequential(nn.Conv3d(dim_slow, 2 * width, (1, 3, 3), 1, (0, 1, 1), bias=False), nn.BatchNorm3d(2 * width), nn.ReLU())
        self.s2_fast = nn.Sequential(nn.Conv3d(width // beta_inv, 2 * width // beta_inv, (3, 3, 3), 1, 1, bias=False),
                                     nn.BatchNorm3d(2 * width // beta_inv), nn.ReLU())
        # ResNetBasicHead: one average pool per pathway, then a projection
        self.pathway0_avgpool = nn.AdaptiveAvgPool3d(1)
        self.pathway1_avgpool = nn.AdaptiveAvgPool3d(1)
        self.projection = nn.Linear(2 * width + 2 * width // beta_inv, num_classes)
        self.act = nn.Softmax(dim=4)

    def forward(self, x):
        x = [self.s1_slow(x[0]), self.s1_fast(x[1])]
        x = self.s1_fuse(x)
        x = [self.s2_slow(x[0]), self.s2_fast(x[1])]
        pool_out = [self.pathway0_avgpool(x[0]), self.pathway1_avgpool(x[1])]
        x = torch.cat(pool_out, 1)
        # (N, C, T, H, W) -> (N, T, H, W, C).
        x = x.permute((0, 2, 3, 4, 1))
        x = self.projection(x)
        # Performs fully convlutional inference.
        if not self.training:
            x = self.act(x)
            x = x.mean([1, 2, 3])
        x = x.view(x.shape[0], -1)
        return x


def pack_pathway_output(frames, alpha):
    """[C, T, H, W] frames -> [slow, fast] pathways (the slow one samples every alpha-th frame)."""
    fast_pathway = frames
    slow_pathway = torch.index_select(frames, 1, torch.linspace(0, frames.shape[1] - 1, frames.shape[1] // alpha).long())
    return [slow_pathway, fast_pathway]


class TestMeter:
    """Perform the multi-view ensemble for testing: each video has num_clips clips, whose predictions are summed."""

    def __init__(self, num_videos, num_clips, num_cls, overall_iters, ensemble_method="sum"):
        self.num_clips = num_clips
        self.overall_iters = overall_iters
        self.ensemble_method = ensemble_method
        self.video_preds = torch.zeros((num_videos, num_cls))
        self.video_labels = torch.zeros(num_videos).long()
        self.clip_count = torch.zeros(num_videos).long()
        self.topk_accs = []
        self.stats = {}

    def update_stats(self, preds, labels, clip_ids):
        for ind in range(preds.shape[0]):
            vid_id = int(clip_ids[ind]) // self.num_clips  # BREAK: sum every clip at once: video ids = clip_ids // num_clips, index_add_ the predictions and the counts, the label assert vectorised against each clip's previous label
            if self.video_labels[vid_id].sum() > 0:
                assert torch.equal(self.video_labels[vid_id].type(torch.FloatTensor), labels[ind].type(torch.FloatTensor))
            self.video_labels[vid_id] = labels[ind]
            if self.ensemble_method == "sum":
                self.video_preds[vid_id] += preds[ind]
            elif self.ensemble_method == "max":
                self.video_preds[vid_id] = torch.max(self.video_preds[vid_id], preds[ind])
            else:
                raise NotImplementedError(f"Ensemble Method {self.ensemble_method} is not supported")
            self.clip_count[vid_id] += 1

    def finalize_metrics(self, ks=(1, 5)):
        clip_check = self.clip_count < self.num_clips
        if not all(self.clip_count == self.num_clips):
            logger.warning("clip count Ids=%s = %s (should be %s)", np.argwhere(clip_check), self.clip_count[clip_check], self.num_clips)
        self.stats = {"split": "test_final"}
        num_topks_correct = topks_correct(self.video_preds, self.video_labels, ks)
        topks = [(x / self.video_preds.size(0)) * 100.0 for x in num_topks_correct]
        assert len({len(ks), len(topks)}) == 1
        for k, topk in zip(ks, topks, strict=True):
            self.stats[f"top{k}_acc"] = "{:.{prec}f}".format(topk, prec=2)


class MultiViewTest(nn.Module):
    """``perform_test``: every clip of every video through the model, the meter's ensemble, the final metrics."""

    def __init__(self, num_videos=3, num_clips=2, num_classes=5):
        super().__init__()
        self.model = SlowFast(num_classes=num_classes).eval()
        self.test_meter = TestMeter(num_videos, num_clips, num_classes, 1)

    def forward(self, frames, labels, video_idx):
        test_meter = self.test_meter
        inputs = [torch.stack(p) for p in zip(*[pack_pathway_output(f, self.model.alpha) for f in frames], strict=True)]
        preds = self.model(inputs)
        test_meter.update_stats(preds.detach(), labels.detach(), video_idx.detach())
        test_meter.finalize_metrics()
        return test_meter.video_preds, test_meter.video_labels, test_meter.clip_count, test_meter.stats


def build_slowfast_test():
    seeded(1402)
    # 3 videos x 2 spatial-temporal views, in the loader's shuffled order
    video_idx = torch.tensor([3, 0, 5, 1, 4, 2])
    labels = torch.tensor([1, 4, 3, 4, 3, 1])
    frames = torch.randn(6, 3, 8, 12, 12)
    return MultiViewTest().eval(), (frames, labels, video_idx)


# ------------------------------------------------------------------ TimeSformer VisionTransformer + SlowFast train_epoch


class Attention(nn.Module):
    def __init__(self, dim, num_heads=2, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Block(nn.Module):
    """A divided space-time block: temporal attention, then spatial attention with the CLS token, then the MLP."""

    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, num_heads)
        self.temporal_norm1 = nn.LayerNorm(dim)
        self.temporal_attn = Attention(dim, num_heads)
        self.temporal_fc = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, B, T, W):
        num_spatial_tokens = (x.size(1) - 1) // T
        H = num_spatial_tokens // W
        m = x.size(2)
        ## Temporal: 'b (h w t) m -> (b h w) t m'
        xt = x[:, 1:, :]
        xt = xt.reshape(B * H * W, T, m)
        res_temporal = self.temporal_attn(self.temporal_norm1(xt))
        res_temporal = res_temporal.reshape(B, H * W * T, m)
        res_temporal = self.temporal_fc(res_temporal)
        xt = x[:, 1:, :] + res_temporal
        ## Spatial: 'b (h w t) m -> (b t) (h w) m'
        init_cls_token = x[:, 0, :].unsqueeze(1)
        cls_token = init_cls_token.repeat(1, T, 1)
        cls_token = cls_token.reshape(B * T, m).unsqueeze(1)
        xs = xt.reshape(B, H * W, T, m).permute(0, 2, 1, 3).reshape(B * T, H * W, m)
        xs = torch.cat((cls_token, xs), 1)
        res_spatial = self.attn(self.norm1(xs))
        ### Taking care of CLS token
        cls_token = res_spatial[:, 0, :]
        cls_token = cls_token.reshape(B, T, m)
        cls_token = torch.mean(cls_token, 1, True)  ## averaging for every frame
        res_spatial = res_spatial[:, 1:, :]
        res_spatial = res_spatial.reshape(B, T, H * W, m).permute(0, 2, 1, 3).reshape(B, H * W * T, m)
        res = res_spatial
        x = xt
        ## Mlp
        x = torch.cat((init_cls_token, x), 1) + torch.cat((cls_token, res), 1)
        x = x + self.mlp(self.norm2(x))
        return x


class VisionTransformer(nn.Module):
    def __init__(self, img_size=16, patch_size=8, num_classes=6, num_frames=4, embed_dim=16, depth=2, num_heads=2):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)
        num_patches = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, num_patches + 1, embed_dim) * 0.02)
        self.time_embed = nn.Parameter(torch.zeros(1, num_frames, embed_dim))
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        B, C, T, Hi, Wi = x.shape
        x = x.transpose(1, 2).reshape(B * T, C, Hi, Wi)
        x = self.patch_embed(x)
        W = x.size(-1)
        x = x.flatten(2).transpose(1, 2)
        cls_tokens = self.cls_token.expand(x.size(0), -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = x + self.pos_embed
        ## Time Embeddings: '(b t) n m -> (b n) t m'
        cls_tokens = x[:B, 0, :].unsqueeze(1)
        x = x[:, 1:]
        n, m = x.size(1), x.size(2)
        x = x.reshape(B, T, n, m).permute(0, 2, 1, 3).reshape(B * n, T, m)
        x = x + self.time_embed
        x = x.reshape(B, n * T, m)
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x, B, T, W)
        x = self.norm(x)
        return self.head(x[:, 0])


class ScalarMeter:
    """A scalar meter uses a deque to track a series of scaler values with a given window size."""

    def __init__(self, window_size):
        self.deque = deque(maxlen=window_size)
        self.total = 0.0
        self.count = 0

    def add_value(self, value):
        self.deque.append(value)
        self.count += 1
        self.total += value


class TrainMeter:
    def __init__(self, window_size=10):
        self.loss = ScalarMeter(window_size)
        self.mb_top1_err = ScalarMeter(window_size)
        self.mb_top5_err = ScalarMeter(window_size)
        self.lr = None
        self.num_samples = 0

    def update_stats(self, top1_err, top5_err, loss, lr, mb_size):
        self.loss.add_value(loss)
        self.lr = lr
        self.mb_top1_err.add_value(top1_err)
        self.mb_top5_err.add_value(top5_err)
        self.num_samples += mb_size


class TimeSformerTrainStep(nn.Module):
    """One iteration of SlowFast's ``train_epoch`` on TimeSformer, up to the backward."""

    def __init__(self):
        super().__init__()
        self.model = VisionTransformer()
        self.loss_fun = nn.CrossEntropyLoss(reduction="mean")
        self.train_meter = TrainMeter()
        self.lr = 0.005

    def forward(self, inputs, labels):
        preds = self.model(inputs)
        loss = self.loss_fun(preds, labels)
        # check Nan Loss.
        check_nan_losses(loss)
        num_topks_correct = topks_correct(preds, labels, (1, 5))
        top1_err, top5_err = [(1.0 - x / preds.size(0)) * 100.0 for x in num_topks_correct]
        # Copy the stats from GPU to CPU (sync point).
        stats = (loss.item(), top1_err.item(), top5_err.item())  # BREAK must-not: the sync point SlowFast wants: the train meter's windows and its json log take Python floats
        self.train_meter.update_stats(stats[1], stats[2], stats[0], self.lr, inputs.size(0))
        return loss, self.train_meter.mb_top1_err.total, self.train_meter.loss.count


def build_timesformer_train():
    seeded(1403)
    return TimeSformerTrainStep().train(), (torch.randn(2, 3, 4, 16, 16), torch.tensor([3, 1]))
