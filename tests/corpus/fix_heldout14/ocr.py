"""Scene text: MhLiao/DB's ``SegDetectorModel`` training forward (an FPN ``SegDetector`` with the adaptive
threshold branch and its differentiable binarization, ``L1BalanceCELoss``: ``BalanceCrossEntropyLoss`` with its
3:1 hard negatives counted on the host, ``MaskL1Loss`` returning the mask sum when the threshold mask is empty,
``DiceLoss``) and baudm/parseq's ``PARSeq.training_step`` (the ``Tokenizer`` encoding the label strings, permutation
language modelling: ``gen_tgt_perms`` drawing permutations with numpy's generator, ``generate_attn_masks``, the loss
weighted by the non-pad token count read back with ``.item()`` and recounted after the [EOS] tokens are dropped)."""

from __future__ import annotations

import math
from collections import OrderedDict
from itertools import permutations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from .helpers import seeded

# ------------------------------------------------------------------ DB decoders/seg_detector.py + losses


class SegDetector(nn.Module):
    def __init__(self, in_channels=(8, 16, 24, 32), inner_channels=16, k=50, bias=False, adaptive=True):
        super().__init__()
        self.k = k
        self.up5 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up4 = nn.Upsample(scale_factor=2, mode="nearest")
        self.up3 = nn.Upsample(scale_factor=2, mode="nearest")
        self.in5 = nn.Conv2d(in_channels[-1], inner_channels, 1, bias=bias)
        self.in4 = nn.Conv2d(in_channels[-2], inner_channels, 1, bias=bias)
        self.in3 = nn.Conv2d(in_channels[-3], inner_channels, 1, bias=bias)
        self.in2 = nn.Conv2d(in_channels[-4], inner_channels, 1, bias=bias)
        self.out5 = nn.Sequential(nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=bias), nn.Upsample(scale_factor=8, mode="nearest"))
        self.out4 = nn.Sequential(nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=bias), nn.Upsample(scale_factor=4, mode="nearest"))
        self.out3 = nn.Sequential(nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=bias), nn.Upsample(scale_factor=2, mode="nearest"))
        self.out2 = nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=bias)
        self.binarize = self._head(inner_channels, bias)
        self.adaptive = adaptive
        if adaptive:
            self.thresh = self._head(inner_channels, bias)

    @staticmethod
    def _head(inner_channels, bias):
        return nn.Sequential(
            nn.Conv2d(inner_channels, inner_channels // 4, 3, padding=1, bias=bias),
            nn.BatchNorm2d(inner_channels // 4),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(inner_channels // 4, inner_channels // 4, 2, 2),
            nn.BatchNorm2d(inner_channels // 4),
            nn.ReLU(inplace=True),
            nn.ConvTranspose2d(inner_channels // 4, 1, 2, 2),
            nn.Sigmoid(),
        )

    def forward(self, features):
        c2, c3, c4, c5 = features
        in5 = self.in5(c5)
        in4 = self.in4(c4)
        in3 = self.in3(c3)
        in2 = self.in2(c2)
        out4 = self.up5(in5) + in4  # 1/16
        out3 = self.up4(out4) + in3  # 1/8
        out2 = self.up3(out3) + in2  # 1/4
        fuse = torch.cat((self.out5(in5), self.out4(out4), self.out3(out3), self.out2(out2)), 1)
        # this is the pred module, not binarization module;
        # We do not correct the name due to the trained model.
        binary = self.binarize(fuse)
        if self.training:
            result = OrderedDict(binary=binary)
        else:
            return binary
        if self.adaptive and self.training:
            thresh = self.thresh(fuse)
            thresh_binary = self.step_function(binary, thresh)
            result.update(thresh=thresh, thresh_binary=thresh_binary)
        return result

    def step_function(self, x, y):
        return torch.reciprocal(1 + torch.exp(-self.k * (x - y)))


class BalanceCrossEntropyLoss(nn.Module):
    """Balanced cross entropy: all the positives and at most negative_ratio times as many of the hardest negatives."""

    def __init__(self, negative_ratio=3.0, eps=1e-6):
        super().__init__()
        self.negative_ratio = negative_ratio
        self.eps = eps

    def forward(self, pred, gt, mask):
        positive = (gt[:, 0, :, :] * mask).byte()
        negative = ((1 - gt[:, 0, :, :]) * mask).byte()
        positive_count = int(positive.float().sum())  # BREAK: keep the counts as tensors: the hardest negatives are a prefix of the descending sort, kept by arange < negative_count
        negative_count = min(int(negative.float().sum()), int(positive_count * self.negative_ratio))  # BREAK: torch.minimum of the negative count and floor(positive_count * ratio), as tensors
        loss = nn.functional.binary_cross_entropy(pred, gt, reduction="none")[:, 0, :, :]
        positive_loss = loss * positive.float()
        negative_loss = loss * negative.float()
        negative_loss, _ = torch.topk(negative_loss.view(-1), negative_count)
        balance_loss = (positive_loss.sum() + negative_loss.sum()) / (positive_count + negative_count + self.eps)
        return balance_loss


class DiceLoss(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, pred, gt, mask, weights=None):
        if pred.dim() == 4:
            pred = pred[:, 0, :, :]
            gt = gt[:, 0, :, :]
        assert pred.shape == gt.shape
        assert pred.shape == mask.shape
        if weights is not None:
            assert weights.shape == mask.shape
            mask = weights * mask
        intersection = (pred * gt * mask).sum()
        union = (pred * mask).sum() + (gt * mask).sum() + self.eps
        loss = 1 - 2.0 * intersection / union
        assert loss <= 1
        return loss


class MaskL1Loss(nn.Module):
    def forward(self, pred, gt, mask):
        mask_sum = mask.sum()
        if mask_sum.item() == 0:  # BREAK: torch.where(mask_sum == 0, mask_sum, l1 / denominator) with the denominator 1 where the mask is empty
            return mask_sum, dict(l1_loss=mask_sum)
        else:
            loss = (torch.abs(pred[:, 0] - gt) * mask).sum() / mask_sum
            return loss, dict(l1_loss=loss)


class L1BalanceCELoss(nn.Module):
    def __init__(self, eps=1e-6, l1_scale=10, bce_scale=5):
        super().__init__()
        self.dice_loss = DiceLoss(eps=eps)
        self.l1_loss = MaskL1Loss()
        self.bce_loss = BalanceCrossEntropyLoss()
        self.l1_scale = l1_scale
        self.bce_scale = bce_scale

    def forward(self, pred, batch):
        bce_loss = self.bce_loss(pred["binary"], batch["gt"], batch["mask"])
        metrics = dict(bce_loss=bce_loss)
        if "thresh" in pred:
            l1_loss, l1_metric = self.l1_loss(pred["thresh"], batch["thresh_map"], batch["thresh_mask"])
            dice_loss = self.dice_loss(pred["thresh_binary"], batch["gt"], batch["mask"])
            metrics["thresh_loss"] = dice_loss
            loss = dice_loss + self.l1_scale * l1_loss + bce_loss * self.bce_scale
            metrics.update(**l1_metric)
        else:
            loss = bce_loss
        return loss, metrics


class SegDetectorModel(nn.Module):
    def __init__(self, widths=(8, 16, 24, 32)):
        super().__init__()
        stages, c = [], 3
        for i, w in enumerate(widths):
            stride = 4 if i == 0 else 2
            stages.append(nn.Sequential(nn.Conv2d(c, w, 3, stride, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU()))
            c = w
        self.backbone = nn.ModuleList(stages)
        self.decoder = SegDetector(in_channels=widths)
        self.criterion = L1BalanceCELoss()

    def forward(self, batch):
        data = batch["image"].float()
        features, x = [], data
        for stage in self.backbone:
            x = stage(x)
            features.append(x)
        pred = self.decoder(features)
        loss, metrics = self.criterion(pred, batch)
        return loss, pred, metrics


def build_dbnet_loss():
    seeded(1406)
    gt = torch.zeros(2, 1, 32, 32)
    gt[0, :, 4:10, 3:20] = 1.0
    gt[1, :, 18:24, 6:28] = 1.0
    mask = torch.ones(2, 32, 32)
    mask[1, 26:, :8] = 0.0  # an ignored (### ) text box
    thresh_mask = torch.zeros(2, 32, 32)
    thresh_mask[0, 2:12, 1:22] = 1.0
    thresh_mask[1, 16:26, 4:30] = 1.0
    batch = {"image": torch.randn(2, 3, 32, 32), "gt": gt, "mask": mask,
             "thresh_map": torch.rand(2, 32, 32) * 0.4 + 0.3, "thresh_mask": thresh_mask}
    return SegDetectorModel().train(), (batch,)


# ------------------------------------------------------------------ parseq strhub/data/utils.py + models/parseq


class Tokenizer:
    BOS = "[B]"
    EOS = "[E]"
    PAD = "[P]"

    def __init__(self, charset: str) -> None:
        specials_first = (self.EOS,)
        specials_last = (self.BOS, self.PAD)
        self._itos = specials_first + tuple(charset) + specials_last
        self._stoi = {s: i for i, s in enumerate(self._itos)}
        self.eos_id, self.bos_id, self.pad_id = [self._stoi[s] for s in specials_first + specials_last]

    def __len__(self):
        return len(self._itos)

    def _tok2ids(self, tokens: str) -> list[int]:
        return [self._stoi[s] for s in tokens]

    def encode(self, labels: list[str], device=None) -> torch.Tensor:
        batch = [torch.as_tensor([self.bos_id] + self._tok2ids(y) + [self.eos_id], dtype=torch.long, device=device) for y in labels]
        return pad_sequence(batch, batch_first=True, padding_value=self.pad_id)


class DecoderLayer(nn.Module):
    """A pre-LN Transformer decoder layer supporting two-stream attention (XLNet)."""

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm_q = nn.LayerNorm(d_model)
        self.norm_c = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward_stream(self, tgt, tgt_norm, tgt_kv, memory, tgt_mask, tgt_key_padding_mask):
        tgt2, sa_weights = self.self_attn(tgt_norm, tgt_kv, tgt_kv, attn_mask=tgt_mask, key_padding_mask=tgt_key_padding_mask)
        tgt = tgt + self.dropout1(tgt2)
        tgt2, ca_weights = self.cross_attn(self.norm1(tgt), memory, memory)
        tgt = tgt + self.dropout2(tgt2)
        tgt2 = self.linear2(self.dropout(F.gelu(self.linear1(self.norm2(tgt)))))
        tgt = tgt + self.dropout3(tgt2)
        return tgt, sa_weights, ca_weights

    def forward(self, query, content, memory, query_mask=None, content_mask=None, content_key_padding_mask=None, update_content=True):
        query_norm = self.norm_q(query)
        content_norm = self.norm_c(content)
        query = self.forward_stream(query, query_norm, content_norm, memory, query_mask, content_key_padding_mask)[0]
        if update_content:
            content = self.forward_stream(content, content_norm, content_norm, memory, content_mask, content_key_padding_mask)[0]
        return query, content


class PARSeq(nn.Module):
    def __init__(self, charset="0123456789abcdef", max_label_length=4, embed_dim=16, perm_num=6, perm_forward=True, perm_mirrored=True, seed=0):
        super().__init__()
        self.tokenizer = Tokenizer(charset)
        self.bos_id, self.eos_id, self.pad_id = self.tokenizer.bos_id, self.tokenizer.eos_id, self.tokenizer.pad_id
        self.max_label_length = max_label_length
        # Perm/attn mask stuff
        self.rng = np.random.default_rng(seed)
        self.max_gen_perms = perm_num // 2 if perm_mirrored else perm_num
        self.perm_forward = perm_forward
        self.perm_mirrored = perm_mirrored
        # a one-block ViT encoder on 4x4 patches
        self.patch_embed = nn.Conv2d(3, embed_dim, 4, 4)
        self.enc_pos = nn.Parameter(torch.randn(1, 16, embed_dim) * 0.02)
        self.enc_norm = nn.LayerNorm(embed_dim)
        self.decoder = DecoderLayer(embed_dim, 2, 4 * embed_dim)
        self.dec_norm = nn.LayerNorm(embed_dim)
        # We don't predict <bos> nor <pad>
        self.head = nn.Linear(embed_dim, len(self.tokenizer) - 2)
        self.text_embed = nn.Embedding(len(self.tokenizer), embed_dim)
        # +1 for <eos>
        self.pos_queries = nn.Parameter(torch.randn(1, max_label_length + 1, embed_dim) * 0.02)
        self.dropout = nn.Dropout(p=0.1)
        self.logged = {}

    def encode(self, img):
        x = self.patch_embed(img).flatten(2).transpose(1, 2)
        return self.enc_norm(x + self.enc_pos)

    def decode(self, tgt, memory, tgt_mask=None, tgt_padding_mask=None, tgt_query_mask=None):
        N, L = tgt.shape
        # <bos> stands for the null context. We only supply position information for characters after <bos>.
        null_ctx = math.sqrt(self.text_embed.embedding_dim) * self.text_embed(tgt[:, :1])
        tgt_emb = self.pos_queries[:, : L - 1] + math.sqrt(self.text_embed.embedding_dim) * self.text_embed(tgt[:, 1:])
        tgt_emb = self.dropout(torch.cat([null_ctx, tgt_emb], dim=1))
        tgt_query = self.dropout(self.pos_queries[:, :L].expand(N, -1, -1))
        query, _ = self.decoder(tgt_query, tgt_emb, memory, tgt_query_mask, tgt_mask, tgt_padding_mask, update_content=False)
        return self.dec_norm(query)

    def gen_tgt_perms(self, tgt):
        """Generate shared permutations for the whole batch. This works because the same attention mask can be used
        for the shorter sequences because of the padding mask."""
        # We don't permute the position of BOS, we permute EOS separately
        max_num_chars = tgt.shape[1] - 2
        # Special handling for 1-character sequences
        if max_num_chars == 1:
            return torch.arange(3, device=tgt.device).unsqueeze(0)
        perms = [torch.arange(max_num_chars, device=tgt.device)] if self.perm_forward else []
        # Additional permutations if needed
        max_perms = math.factorial(max_num_chars)
        if self.perm_mirrored:
            max_perms //= 2
        num_gen_perms = min(self.max_gen_perms, max_perms)
        # For 4-char sequences and shorter, we generate all permutations and sample from the pool to avoid collisions
        if max_num_chars == 4 and self.perm_mirrored:
            selector = [0, 3, 4, 6, 9, 10, 12, 16, 17, 18, 19, 21]
        else:
            selector = list(range(max_perms))
        perm_pool = torch.as_tensor(list(permutations(range(max_num_chars), max_num_chars)), device=tgt.device)[selector]
        # If the forward permutation is always selected, no need to add it to the pool for sampling
        if self.perm_forward:
            perm_pool = perm_pool[1:]
        perms = torch.stack(perms)
        if len(perm_pool):
            i = self.rng.choice(len(perm_pool), size=num_gen_perms - len(perms), replace=False)  # BREAK must-not: the permutations come from the model's numpy Generator; a torch draw would change which are trained
            perms = torch.cat([perms, perm_pool[i]])
        # We add the reverse of each permutation
        if self.perm_mirrored:
            # Reverse the permutation, then interleave
            comp = perms.flip(-1)
            perms = torch.stack([perms, comp]).transpose(0, 1).reshape(-1, max_num_chars)
        # NOTE: Add BOS and EOS positions
        bos_idx = perms.new_zeros((len(perms), 1))
        eos_idx = perms.new_full((len(perms), 1), max_num_chars + 1)
        perms = torch.cat([bos_idx, perms + 1, eos_idx], dim=1)
        # Special handling for the reverse direction. This does two things:
        # 1. Reverse context for the characters
        # 2. Null context for [EOS] (required for learning to predict [EOS] in NAR mode)
        if len(perms) > 1:
            perms[1, 1:] = max_num_chars + 1 - torch.arange(max_num_chars + 1, device=tgt.device)
        return perms

    def generate_attn_masks(self, perm):
        """Generate attention masks given a sequence permutation (includes pos. for bos and eos tokens)."""
        sz = perm.shape[0]
        mask = torch.zeros((sz, sz), device=perm.device)
        for i in range(sz):
            query_idx = perm[i]
            masked_keys = perm[i + 1 :]
            mask[query_idx, masked_keys] = float("-inf")  # BREAK: a 0-d index tensor is read as an int: mask every key the permutation ranks after the query at once (rank[k] > rank[q])
        content_mask = mask[:-1, :-1].clone()
        mask[torch.eye(sz, dtype=torch.bool, device=perm.device)] = float("-inf")  # mask "self"
        query_mask = mask[1:, :-1]
        return content_mask, query_mask

    def forward(self, images, labels):
        """``training_step``."""
        tgt = self.tokenizer.encode(labels, images.device)
        # Encode the source sequence (i.e. the image codes)
        memory = self.encode(images)
        # Prepare the target sequences (input and output)
        tgt_perms = self.gen_tgt_perms(tgt)
        tgt_in = tgt[:, :-1]
        tgt_out = tgt[:, 1:]
        # The [EOS] token is not depended upon by any other token in any permutation ordering
        tgt_padding_mask = (tgt_in == self.pad_id) | (tgt_in == self.eos_id)

        loss = 0
        loss_numel = 0
        n = (tgt_out != self.pad_id).sum().item()  # BREAK: keep the token count a tensor: the weighted mean is the same sum over the same count
        for i, perm in enumerate(tgt_perms):
            tgt_mask, query_mask = self.generate_attn_masks(perm)
            out = self.decode(tgt_in, memory, tgt_mask, tgt_padding_mask, tgt_query_mask=query_mask)
            logits = self.head(out).flatten(end_dim=1)
            loss += n * F.cross_entropy(logits, tgt_out.flatten(), ignore_index=self.pad_id)
            loss_numel += n
            # After the second iteration (i.e. done with canonical and reverse orderings),
            # remove the [EOS] tokens for the succeeding perms
            if i == 1:
                tgt_out = torch.where(tgt_out == self.eos_id, self.pad_id, tgt_out)
                n = (tgt_out != self.pad_id).sum().item()
        loss /= loss_numel

        self.logged["loss"] = loss.detach()
        return loss


def build_parseq_train():
    seeded(1407)
    labels = ["3a7f", "b2", "e90", "1c4d"]
    return PARSeq(seed=7).train(), (torch.randn(4, 3, 16, 16), labels)
