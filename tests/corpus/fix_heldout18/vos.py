"""Semi-supervised video object segmentation: hkchengrex/STCN.

``inference_core.py``'s ``InferenceCore`` (``pad_divide_by`` to a multiple of 16, the per-object probability volume,
``interact`` on the first frame's mask, ``do_pass`` propagating frame by frame and writing a memory frame every
``mem_every`` frames, the last frame kept as a temporary one), ``inference_memory_bank.py``'s ``MemoryBank``
(``_global_matching`` with ``softmax_w_top``'s top-k affinity, ``add_memory`` / temporary memory) and
``model/aggregate.py``'s soft aggregation, under the body of ``eval_davis.py``'s per-video loop (the timing,
``unpad``, the upsampling to the original size and the ``argmax`` masks moved to numpy); and the training side:
``model/network.py``'s ``STCN`` with its ``MemoryReader`` (full softmax affinity) and two-object ``segment`` under
``model/model.py``'s ``STCNModel.do_pass`` for three frames, in its loss half: ``model/losses.py``'s ``LossComputer``
(``BootstrappedCE`` warmed up to the top-p pixels, the per-sample ``selector`` test for the second object,
``compute_tensor_iu``) and ``util/log_integrator.py``'s ``Integrator.add_dict``.  The ResNet encoders of ``network.py`` are
replaced by small strided convolutions with the same interfaces (``encode_key``, ``encode_value``,
``segment_with_query``).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .helpers import seeded

# ------------------------------------------------------------------ util/tensor_util.py


def pad_divide_by(in_img, d, in_size=None):
    if in_size is None:
        h, w = in_img.shape[-2:]
    else:
        h, w = in_size

    if h % d > 0:
        new_h = h + d - h % d
    else:
        new_h = h
    if w % d > 0:
        new_w = w + d - w % d
    else:
        new_w = w
    lh, uh = int((new_h - h) / 2), int(new_h - h) - int((new_h - h) / 2)
    lw, uw = int((new_w - w) / 2), int(new_w - w) - int((new_w - w) / 2)
    pad_array = (int(lw), int(uw), int(lh), int(uh))
    out = F.pad(in_img, pad_array)
    return out, pad_array


def unpad(img, pad):
    if pad[2] + pad[3] > 0:
        img = img[:, :, pad[2] : -pad[3], :]
    if pad[0] + pad[1] > 0:
        img = img[:, :, :, pad[0] : -pad[1]]
    return img


# ------------------------------------------------------------------ model/aggregate.py


def aggregate(prob, keep_bg=False):
    k = prob.shape
    new_prob = torch.cat([torch.prod(1 - prob, dim=0, keepdim=True), prob], 0).clamp(1e-7, 1 - 1e-7)
    logits = torch.log((new_prob / (1 - new_prob)))  # noqa: UP034

    if keep_bg:
        return F.softmax(logits, dim=0)
    else:
        return F.softmax(logits, dim=0)[1 : k[0] + 1]


# ------------------------------------------------------------------ model/eval_network.py (reduced encoders)


class KeyEncoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3, dim, 3, stride=4, padding=1)
        self.layer2 = nn.Conv2d(dim, dim, 3, stride=2, padding=1)
        self.layer3 = nn.Conv2d(dim, 2 * dim, 3, stride=2, padding=1)

    def forward(self, f):
        f4 = F.relu(self.conv1(f))  # 1/4
        f8 = F.relu(self.layer2(f4))  # 1/8
        f16 = F.relu(self.layer3(f8))  # 1/16
        return f16, f8, f4


class ValueEncoder(nn.Module):
    def __init__(self, dim, value_dim):
        super().__init__()
        self.conv1 = nn.Conv2d(3 + 2, dim, 3, stride=4, padding=1)
        self.layer2 = nn.Conv2d(dim, dim, 3, stride=4, padding=1)
        self.fuser = nn.Conv2d(dim + 2 * dim, value_dim, 3, padding=1)

    def forward(self, image, key_f16, mask, other_masks):
        # key_f16 is the feature from the key encoder
        f = torch.cat([image, mask, other_masks], 1)
        x = F.relu(self.conv1(f))
        x = F.relu(self.layer2(x))
        x = self.fuser(torch.cat([x, key_f16], 1))
        return x


class KeyProjection(nn.Module):
    def __init__(self, indim, keydim):
        super().__init__()
        self.key_proj = nn.Conv2d(indim, keydim, kernel_size=3, padding=1)

    def forward(self, x):
        return self.key_proj(x)


class Decoder(nn.Module):
    def __init__(self, value_dim, dim):
        super().__init__()
        self.compress = nn.Conv2d(2 * value_dim, dim, 3, padding=1)
        self.up_16_8 = nn.Conv2d(dim, dim, 3, padding=1)
        self.up_8_4 = nn.Conv2d(dim, dim, 3, padding=1)
        self.pred = nn.Conv2d(dim, 1, kernel_size=3, padding=1, stride=1)

    def forward(self, f16, f8, f4):
        x = F.relu(self.compress(f16))
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = F.relu(self.up_16_8(x) + f8[:, : x.shape[1]])
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        x = F.relu(self.up_8_4(x) + f4[:, : x.shape[1]])
        x = self.pred(x)
        x = F.interpolate(x, scale_factor=4, mode="bilinear", align_corners=False)
        return x


class PropagationNetwork(nn.Module):
    def __init__(self, dim=8, key_dim=8, value_dim=16):
        super().__init__()
        self.key_encoder = KeyEncoder(dim)
        self.value_encoder = ValueEncoder(dim, value_dim)

        # Projection from f16 feature space to key space
        self.key_proj = KeyProjection(2 * dim, keydim=key_dim)

        # Compress f16 a bit to use in decoding later on
        self.key_comp = nn.Conv2d(2 * dim, value_dim, kernel_size=3, padding=1)

        self.decoder = Decoder(value_dim, dim)

    def encode_value(self, frame, kf16, masks):
        k, _, h, w = masks.shape

        # Extract memory key/value for a frame with multiple masks
        frame = frame.view(1, 3, h, w).repeat(k, 1, 1, 1)
        # Compute the "others" mask
        if k != 1:
            others = torch.cat(
                [torch.sum(masks[[j for j in range(k) if i != j]], dim=0, keepdim=True) for i in range(k)], 0
            )
        else:
            others = torch.zeros_like(masks)

        f16 = self.value_encoder(frame, kf16.repeat(k, 1, 1, 1), masks, others)

        return f16.unsqueeze(2)

    def encode_key(self, frame):
        f16, f8, f4 = self.key_encoder(frame)
        k16 = self.key_proj(f16)
        f16_thin = self.key_comp(f16)

        return k16, f16_thin, f16, f8, f4

    def segment_with_query(self, mem_bank, qf8, qf4, qk16, qv16):
        k = mem_bank.num_objects

        readout_mem = mem_bank.match_memory(qk16)
        qv16 = qv16.expand(k, -1, -1, -1)
        qv16 = torch.cat([readout_mem, qv16], 1)

        return torch.sigmoid(self.decoder(qv16, qf8, qf4))


# ------------------------------------------------------------------ inference_memory_bank.py


def softmax_w_top(x, top):
    values, indices = torch.topk(x, k=top, dim=1)
    x_exp = values.exp_()

    x_exp /= torch.sum(x_exp, dim=1, keepdim=True)
    # The types should be the same already
    # some people report an error here so an additional guard is added
    x.zero_().scatter_(1, indices, x_exp.type(x.dtype))  # B * THW * HW

    return x


class MemoryBank:
    def __init__(self, k, top_k=20):
        self.top_k = top_k

        self.CK = None
        self.CV = None

        self.mem_k = None
        self.mem_v = None

        self.num_objects = k

    def _global_matching(self, mk, qk):
        # NE means number of elements -- typically T*H*W
        B, CK, NE = mk.shape

        # See supplementary material
        a_sq = mk.pow(2).sum(1).unsqueeze(2)
        ab = mk.transpose(1, 2) @ qk

        affinity = (2 * ab - a_sq) / math.sqrt(CK)  # B, NE, HW
        affinity = softmax_w_top(affinity, top=self.top_k)  # B, NE, HW

        return affinity

    def _readout(self, affinity, mv):
        return torch.bmm(mv, affinity)

    def match_memory(self, qk):
        k = self.num_objects
        _, _, h, w = qk.shape

        qk = qk.flatten(start_dim=2)

        if self.temp_k is not None:
            mk = torch.cat([self.mem_k, self.temp_k], 2)
            mv = torch.cat([self.mem_v, self.temp_v], 2)
        else:
            mk = self.mem_k
            mv = self.mem_v

        affinity = self._global_matching(mk, qk)

        # One affinity for all
        readout_mem = self._readout(affinity.expand(k, -1, -1), mv)

        return readout_mem.view(k, self.CV, h, w)

    def add_memory(self, key, value, is_temp=False):
        # Temp is for "last frame"
        # Not always used
        # But can always be flushed
        self.temp_k = None
        self.temp_v = None
        key = key.flatten(start_dim=2)
        value = value.flatten(start_dim=2)

        if self.mem_k is None:
            # First frame, just shove it in
            self.mem_k = key
            self.mem_v = value
            self.CK = key.shape[1]
            self.CV = value.shape[1]
        else:
            if is_temp:
                self.temp_k = key
                self.temp_v = value
            else:
                self.mem_k = torch.cat([self.mem_k, key], 2)
                self.mem_v = torch.cat([self.mem_v, value], 2)


# ------------------------------------------------------------------ inference_core.py


class InferenceCore:
    def __init__(self, prop_net, images, num_objects, top_k=20, mem_every=5, include_last=False):
        self.prop_net = prop_net
        self.mem_every = mem_every
        self.include_last = include_last

        # True dimensions
        t = images.shape[1]
        h, w = images.shape[-2:]

        # Pad each side to multiple of 16
        images, self.pad = pad_divide_by(images, 16)
        # Padded dimensions
        nh, nw = images.shape[-2:]

        self.images = images
        self.device = images.device

        self.k = num_objects
        self.top_k = top_k

        # Background included, not always consistent (i.e. sum up to 1)
        self.prob = torch.zeros((self.k + 1, t, 1, nh, nw), dtype=torch.float32, device=self.device)
        self.prob[0] = 1e-7

        self.t, self.h, self.w = t, h, w
        self.nh, self.nw = nh, nw
        self.kh = self.nh // 16
        self.kw = self.nw // 16

        self.mem_bank = MemoryBank(k=self.k, top_k=self.top_k)

    def encode_key(self, idx):
        k16, f16_thin, f16, f8, f4 = self.prop_net.encode_key(self.images[:, idx])
        return k16, f16_thin, f16, f8, f4

    def do_pass(self, key_k, key_v, idx, end_idx):
        self.mem_bank.add_memory(key_k, key_v)
        closest_ti = end_idx

        # Note that we never reach closest_ti, just the frame before it
        this_range = range(idx + 1, closest_ti)
        end = closest_ti - 1

        for ti in this_range:
            k16, qv16, qf16, qf8, qf4 = self.encode_key(ti)
            out_mask = self.prop_net.segment_with_query(self.mem_bank, qf8, qf4, k16, qv16)

            out_mask = aggregate(out_mask, keep_bg=True)
            self.prob[:, ti] = out_mask

            if ti != end:
                is_mem_frame = abs(ti - idx) % self.mem_every == 0
                if self.include_last or is_mem_frame:
                    prev_value = self.prop_net.encode_value(self.images[:, ti], qf16, out_mask[1:])
                    prev_key = k16.unsqueeze(2)
                    self.mem_bank.add_memory(prev_key, prev_value, is_temp=not is_mem_frame)

        return closest_ti

    def interact(self, mask, frame_idx, end_idx):
        mask, _ = pad_divide_by(mask, 16)

        self.prob[:, frame_idx] = aggregate(mask, keep_bg=True)

        # KV pair for the interacting frame
        key_k, _, qf16, _, _ = self.encode_key(frame_idx)
        key_v = self.prop_net.encode_value(self.images[:, frame_idx], qf16, self.prob[1:, frame_idx])
        key_k = key_k.unsqueeze(2)

        # Propagate
        self.do_pass(key_k, key_v, frame_idx, end_idx)


# ------------------------------------------------------------------ eval_davis.py


class EvalDavis(nn.Module):
    """The body of ``eval_davis.py``'s loop over the test loader, for one video; the masks are returned instead of
    saved as palette PNGs, the processing time and the frame count are kept for the FPS report."""

    def __init__(self, top_k=20, mem_every=5, include_last=False):
        super().__init__()
        self.prop_model = PropagationNetwork()
        self.top_k = top_k
        self.mem_every = mem_every
        self.include_last = include_last
        self.total_process_time = 0
        self.total_frames = 0

    def forward(self, data):
        self.prop_model.eval()
        with torch.no_grad():
            rgb = data["rgb"]
            msk = data["gt"][0]
            info = data["info"]
            name = info["name"][0]
            k = len(info["labels"][0])
            size = info["size_480p"]

            process_begin = time.time()  # BREAK must-not: host clock for the FPS

            processor = InferenceCore(
                self.prop_model,
                rgb,
                k,
                top_k=self.top_k,
                mem_every=self.mem_every,
                include_last=self.include_last,
            )
            processor.interact(msk[:, 0], 0, rgb.shape[1])

            # Do unpad -> upsample to original size
            out_masks = torch.zeros((processor.t, 1, *size), dtype=torch.uint8)
            for ti in range(processor.t):
                prob = unpad(processor.prob[:, ti], processor.pad)
                prob = F.interpolate(prob, size, mode="bilinear", align_corners=False)
                out_masks[ti] = torch.argmax(prob, dim=0)

            out_masks = (out_masks.detach().cpu().numpy()[:, 0]).astype(np.uint8)

            self.total_process_time += time.time() - process_begin  # BREAK must-not: host clock for the FPS
            self.total_frames += out_masks.shape[0]

        return name, out_masks


def davis_video(name, t, h, w, k):
    """A test-loader item: frames [1, T, 3, H, W], the one-hot first-frame mask per object [K, T, 1, H, W]."""
    rgb = torch.randn(1, t, 3, h, w)
    gt = torch.zeros(1, k, t, 1, h, w)
    for obj in range(k):
        y0, x0 = 4 + 10 * obj, 6 + 12 * obj
        gt[0, obj, 0, 0, y0 : y0 + 10, x0 : x0 + 14] = 1.0
    labels = np.arange(1, k + 1)
    return {"rgb": rgb, "gt": gt, "info": {"name": [name], "labels": [labels], "size_480p": (h, w)}}


def build_stcn_eval_davis():
    seeded(1804)
    m = EvalDavis(top_k=4, mem_every=2)
    return m, (davis_video("bear", 5, 30, 40, 2),)


# ------------------------------------------------------------------ model/network.py (training), model/model.py, model/losses.py, util/log_integrator.py


class MemoryReader(nn.Module):
    def __init__(self):
        super().__init__()

    def get_affinity(self, mk, qk):
        B, CK, T, H, W = mk.shape
        mk = mk.flatten(start_dim=2)
        qk = qk.flatten(start_dim=2)

        # See supplementary material
        a_sq = mk.pow(2).sum(1).unsqueeze(2)
        ab = mk.transpose(1, 2) @ qk

        affinity = (2 * ab - a_sq) / math.sqrt(CK)  # B, THW, HW

        # softmax operation; aligned the evaluation style
        maxes = torch.max(affinity, dim=1, keepdim=True)[0]
        x_exp = torch.exp(affinity - maxes)
        x_exp_sum = torch.sum(x_exp, dim=1, keepdim=True)
        affinity = x_exp / x_exp_sum

        return affinity

    def readout(self, affinity, mv, qv):
        B, CV, T, H, W = mv.shape

        mo = mv.view(B, CV, T * H * W)
        mem = torch.bmm(mo, affinity)  # Weighted-sum B, CV, HW
        mem = mem.view(B, CV, H, W)

        mem_out = torch.cat([mem, qv], dim=1)

        return mem_out


class STCN(nn.Module):
    def __init__(self, single_object, dim=8, key_dim=8, value_dim=16):
        super().__init__()
        self.single_object = single_object

        self.key_encoder = KeyEncoder(dim)
        self.value_encoder = ValueEncoder(dim, value_dim)

        # Projection from f16 feature space to key space
        self.key_proj = KeyProjection(2 * dim, keydim=key_dim)

        # Compress f16 a bit to use in decoding later on
        self.key_comp = nn.Conv2d(2 * dim, value_dim, kernel_size=3, padding=1)

        self.memory = MemoryReader()
        self.decoder = Decoder(value_dim, dim)

    def aggregate(self, prob):
        new_prob = torch.cat([torch.prod(1 - prob, dim=1, keepdim=True), prob], 1).clamp(1e-7, 1 - 1e-7)
        logits = torch.log(new_prob / (1 - new_prob))
        return logits

    def encode_key(self, frame):
        # input: b*t*c*h*w
        b, t = frame.shape[:2]

        f16, f8, f4 = self.key_encoder(frame.flatten(start_dim=0, end_dim=1))
        k16 = self.key_proj(f16)
        f16_thin = self.key_comp(f16)

        # B*C*T*H*W
        k16 = k16.view(b, t, *k16.shape[-3:]).transpose(1, 2).contiguous()

        # B*T*C*H*W
        f16_thin = f16_thin.view(b, t, *f16_thin.shape[-3:])
        f16 = f16.view(b, t, *f16.shape[-3:])
        f8 = f8.view(b, t, *f8.shape[-3:])
        f4 = f4.view(b, t, *f4.shape[-3:])

        return k16, f16_thin, f16, f8, f4

    def encode_value(self, frame, kf16, mask, other_mask=None):
        # Extract memory key/value for a frame
        f16 = self.value_encoder(frame, kf16, mask, other_mask)
        return f16.unsqueeze(2)  # B*512*T*H*W

    def segment(self, qk16, qv16, qf8, qf4, mk16, mv16, selector=None):
        # q - query, m - memory
        # qv16 is f16_thin above
        affinity = self.memory.get_affinity(mk16, qk16)

        logits = torch.cat(
            [
                self.decoder(self.memory.readout(affinity, mv16[:, 0], qv16), qf8, qf4),
                self.decoder(self.memory.readout(affinity, mv16[:, 1], qv16), qf8, qf4),
            ],
            1,
        )

        prob = torch.sigmoid(logits)
        prob = prob * selector.unsqueeze(2).unsqueeze(2)

        logits = self.aggregate(prob)
        prob = F.softmax(logits, dim=1)[:, 1:]

        return logits, prob

    def forward(self, mode, *args, **kwargs):
        if mode == "encode_key":
            return self.encode_key(*args, **kwargs)
        elif mode == "encode_value":
            return self.encode_value(*args, **kwargs)
        elif mode == "segment":
            return self.segment(*args, **kwargs)
        else:
            raise NotImplementedError


def compute_tensor_iu(seg, gt):
    intersection = (seg & gt).float().sum()
    union = (seg | gt).float().sum()

    return intersection, union


class BootstrappedCE(nn.Module):
    def __init__(self, start_warm=20000, end_warm=70000, top_p=0.15):
        super().__init__()

        self.start_warm = start_warm
        self.end_warm = end_warm
        self.top_p = top_p

    def forward(self, input, target, it):
        if it < self.start_warm:
            return F.cross_entropy(input, target), 1.0

        raw_loss = F.cross_entropy(input, target, reduction="none").view(-1)
        num_pixels = raw_loss.numel()

        if it > self.end_warm:
            this_p = self.top_p
        else:
            this_p = self.top_p + (1 - self.top_p) * (
                (self.end_warm - it) / (self.end_warm - self.start_warm)
            )
        loss, _ = torch.topk(raw_loss, int(num_pixels * this_p), sorted=False)
        return loss.mean(), this_p


class LossComputer:
    def __init__(self, para):
        super().__init__()
        self.para = para
        self.bce = BootstrappedCE(para["start_warm"], para["end_warm"])

    def compute(self, data, it):
        losses = defaultdict(int)

        b, s, _, _, _ = data["gt"].shape
        selector = data.get("selector", None)

        for i in range(1, s):
            # Have to do it in a for-loop like this since not every entry has the second object
            # Well it's not a lot of iterations anyway
            for j in range(b):
                if selector is not None and selector[j][1] > 0.5:  # BREAK: both losses, select by it
                    loss, p = self.bce(data["logits_%d" % i][j : j + 1], data["cls_gt"][j : j + 1, i], it)  # noqa: UP031
                else:
                    loss, p = self.bce(data["logits_%d" % i][j : j + 1, :2], data["cls_gt"][j : j + 1, i], it)  # noqa: UP031

                losses["loss_%d" % i] += loss / b  # noqa: UP031
                losses["p"] += p / b / (s - 1)

            losses["total_loss"] += losses["loss_%d" % i]  # noqa: UP031

            new_total_i, new_total_u = compute_tensor_iu(data["mask_%d" % i] > 0.5, data["gt"][:, i] > 0.5)  # noqa: UP031
            losses["hide_iou/i"] += new_total_i
            losses["hide_iou/u"] += new_total_u

            if selector is not None:
                new_total_i, new_total_u = compute_tensor_iu(
                    data["sec_mask_%d" % i] > 0.5,  # noqa: UP031
                    data["sec_gt"][:, i] > 0.5,
                )
                losses["hide_iou/sec_i"] += new_total_i
                losses["hide_iou/sec_u"] += new_total_u

        return losses


class Integrator:
    def __init__(self, logger, distributed=True, local_rank=0, world_size=1):
        self.values = {}
        self.counts = {}
        self.hooks = []  # List is used here to maintain insertion order

        self.logger = logger

        self.distributed = distributed
        self.local_rank = local_rank
        self.world_size = world_size

    def add_tensor(self, key, tensor):
        if key not in self.values:
            self.counts[key] = 1
            if type(tensor) == float or type(tensor) == int:  # noqa: E721
                self.values[key] = tensor
            else:
                self.values[key] = tensor.mean().item()  # BREAK: the integrator can sum tensors
        else:
            self.counts[key] += 1
            if type(tensor) == float or type(tensor) == int:  # noqa: E721
                self.values[key] += tensor
            else:
                self.values[key] += tensor.mean().item()

    def add_dict(self, tensor_dict):
        for k, v in tensor_dict.items():
            self.add_tensor(k, v)


class STCNModelPass(nn.Module):
    """The loss half of ``STCNModel.do_pass`` in training, for the multi-object (main training) stage."""

    def __init__(self, para):
        super().__init__()
        self.para = para
        self.STCN = STCN(single_object=False)
        self.loss_computer = LossComputer(para)
        self.train_integrator = Integrator(None, distributed=False)
        self._do_log = True
        self._is_train = True

    def do_pass(self, data, it=0):
        # No need to store the gradient outside training
        torch.set_grad_enabled(self._is_train)

        out = {}
        Fs = data["rgb"]
        Ms = data["gt"]

        # key features never change, compute once
        k16, kf16_thin, kf16, kf8, kf4 = self.STCN("encode_key", Fs)

        sec_Ms = data["sec_gt"]
        selector = data["selector"]

        ref_v1 = self.STCN("encode_value", Fs[:, 0], kf16[:, 0], Ms[:, 0], sec_Ms[:, 0])
        ref_v2 = self.STCN("encode_value", Fs[:, 0], kf16[:, 0], sec_Ms[:, 0], Ms[:, 0])
        ref_v = torch.stack([ref_v1, ref_v2], 1)

        # Segment frame 1 with frame 0
        prev_logits, prev_mask = self.STCN(
            "segment", k16[:, :, 1], kf16_thin[:, 1], kf8[:, 1], kf4[:, 1], k16[:, :, 0:1], ref_v, selector
        )

        prev_v1 = self.STCN("encode_value", Fs[:, 1], kf16[:, 1], prev_mask[:, 0:1], prev_mask[:, 1:2])
        prev_v2 = self.STCN("encode_value", Fs[:, 1], kf16[:, 1], prev_mask[:, 1:2], prev_mask[:, 0:1])
        prev_v = torch.stack([prev_v1, prev_v2], 1)
        values = torch.cat([ref_v, prev_v], 3)

        del ref_v

        # Segment frame 2 with frame 0 and 1
        this_logits, this_mask = self.STCN(
            "segment", k16[:, :, 2], kf16_thin[:, 2], kf8[:, 2], kf4[:, 2], k16[:, :, 0:2], values, selector
        )

        out["mask_1"] = prev_mask[:, 0:1]
        out["mask_2"] = this_mask[:, 0:1]
        out["sec_mask_1"] = prev_mask[:, 1:2]
        out["sec_mask_2"] = this_mask[:, 1:2]

        out["logits_1"] = prev_logits
        out["logits_2"] = this_logits

        if self._do_log or self._is_train:
            losses = self.loss_computer.compute({**data, **out}, it)

            # Logging
            if self._do_log:
                self.train_integrator.add_dict(losses)

        return losses["total_loss"], out["mask_2"]

    def forward(self, data, it):
        self.STCN.train()
        return self.do_pass(data, it)


def static_clip(b, t, h, w):
    """A ``StaticTransformDataset``-like batch: frames, the target / second object masks, ``cls_gt`` and ``selector``."""
    rgb = torch.randn(b, t, 3, h, w)
    gt = torch.zeros(b, t, 1, h, w)
    sec_gt = torch.zeros(b, t, 1, h, w)
    for j in range(b):
        for ti in range(t):
            gt[j, ti, 0, 4 + ti : 16 + ti, 6:20] = 1.0
            if j == 0:
                sec_gt[j, ti, 0, 18:28, 24 + ti : 38 + ti] = 1.0
    cls_gt = torch.zeros(b, t, h, w, dtype=torch.long)
    cls_gt[gt[:, :, 0] > 0.5] = 1
    cls_gt[sec_gt[:, :, 0] > 0.5] = 2
    selector = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    return {"rgb": rgb, "gt": gt, "sec_gt": sec_gt, "cls_gt": cls_gt, "selector": selector}


def build_stcn_train_pass():
    seeded(1819)
    m = STCNModelPass({"start_warm": 20, "end_warm": 70})
    return m, (static_clip(2, 3, 32, 48), 50)
