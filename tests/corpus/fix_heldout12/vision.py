"""Vision: torchvision's FCOS (center-sampling matcher, ``FCOSHead.compute_loss`` normalised by
``max(1, num_foreground)``), Mask2Former's ``SetCriterion`` (facebookresearch/Mask2Former: losses on points
sampled by uncertainty, ``num_masks`` averaged over workers), Segment Anything's prompt encoder and mask
decoder (facebookresearch/segment-anything: padded point prompts, ``SamPredictor.predict_torch``), and the
densification bookkeeping of 3D Gaussian splatting (graphdeco-inria/gaussian-splatting's
``GaussianModel.add_densification_stats`` / ``densify_and_prune``)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from .helpers import (
    generalized_box_iou_loss,
    get_uncertain_point_coords_with_randomness,
    mlp,
    point_sample,
    seeded,
    sigmoid_focal_loss,
)

# ------------------------------------------------------------------ FCOS (torchvision.models.detection.fcos)


class BoxLinearCoder:
    def __init__(self, normalize_by_size: bool = True) -> None:
        self.normalize_by_size = normalize_by_size

    def encode(self, reference_boxes, proposals):
        ctr_x = 0.5 * (reference_boxes[..., 0] + reference_boxes[..., 2])
        ctr_y = 0.5 * (reference_boxes[..., 1] + reference_boxes[..., 3])
        targets = torch.stack((ctr_x - proposals[..., 0], ctr_y - proposals[..., 1],
                               proposals[..., 2] - ctr_x, proposals[..., 3] - ctr_y), dim=-1)
        if self.normalize_by_size:
            w = reference_boxes[..., 2] - reference_boxes[..., 0]
            h = reference_boxes[..., 3] - reference_boxes[..., 1]
            targets = targets / torch.stack((w, h, w, h), dim=-1)
        return targets

    def decode(self, rel_codes, boxes):
        boxes = boxes.to(dtype=rel_codes.dtype)
        ctr_x = 0.5 * (boxes[..., 0] + boxes[..., 2])
        ctr_y = 0.5 * (boxes[..., 1] + boxes[..., 3])
        if self.normalize_by_size:
            w = boxes[..., 2] - boxes[..., 0]
            h = boxes[..., 3] - boxes[..., 1]
            rel_codes = rel_codes * torch.stack((w, h, w, h), dim=-1)
        return torch.stack((ctr_x - rel_codes[..., 0], ctr_y - rel_codes[..., 1],
                            ctr_x + rel_codes[..., 2], ctr_y + rel_codes[..., 3]), dim=-1)


class FCOSHead(nn.Module):
    def __init__(self, in_channels, num_classes, num_convs=1):
        super().__init__()
        self.num_classes = num_classes
        self.box_coder = BoxLinearCoder(normalize_by_size=True)

        def tower():
            layers = []
            for _ in range(num_convs):
                layers += [nn.Conv2d(in_channels, in_channels, 3, padding=1), nn.GroupNorm(4, in_channels), nn.ReLU()]
            return nn.Sequential(*layers)

        self.cls_tower, self.bbox_tower = tower(), tower()
        self.cls_logits = nn.Conv2d(in_channels, num_classes, 3, padding=1)
        nn.init.constant_(self.cls_logits.bias, -math.log((1 - 0.01) / 0.01))
        self.bbox_reg = nn.Conv2d(in_channels, 4, 3, padding=1)
        self.bbox_ctrness = nn.Conv2d(in_channels, 1, 3, padding=1)

    def forward(self, x):
        N = x.shape[0]

        def flat(t):
            return t.view(N, -1, t.shape[1], *t.shape[2:]).permute(0, 3, 4, 1, 2).reshape(N, -1, t.shape[1])

        cls_feat, box_feat = self.cls_tower(x), self.bbox_tower(x)
        return {"cls_logits": flat(self.cls_logits(cls_feat)),
                "bbox_regression": flat(F.relu(self.bbox_reg(box_feat))),
                "bbox_ctrness": flat(self.bbox_ctrness(box_feat))}

    def compute_loss(self, targets, head_outputs, anchors, matched_idxs):
        cls_logits = head_outputs["cls_logits"]  # [N, HWA, C]
        bbox_regression = head_outputs["bbox_regression"]  # [N, HWA, 4]
        bbox_ctrness = head_outputs["bbox_ctrness"]  # [N, HWA, 1]

        all_gt_classes_targets, all_gt_boxes_targets = [], []
        for targets_per_image, matched_idxs_per_image in zip(targets, matched_idxs, strict=True):
            gt_classes_targets = targets_per_image["labels"][matched_idxs_per_image.clip(min=0)]
            gt_boxes_targets = targets_per_image["boxes"][matched_idxs_per_image.clip(min=0)]
            gt_classes_targets[matched_idxs_per_image < 0] = -1  # background
            all_gt_classes_targets.append(gt_classes_targets)
            all_gt_boxes_targets.append(gt_boxes_targets)
        all_gt_boxes_targets = torch.stack(all_gt_boxes_targets)
        all_gt_classes_targets = torch.stack(all_gt_classes_targets)
        anchors = torch.stack(anchors)

        foregroud_mask = all_gt_classes_targets >= 0
        num_foreground = foregroud_mask.sum().item()  # BREAK: keep the count a tensor and clamp it at 1

        gt_classes_targets = torch.zeros_like(cls_logits)
        gt_classes_targets[foregroud_mask, all_gt_classes_targets[foregroud_mask]] = 1.0  # BREAK: a one-hot of the clipped classes times the foreground mask
        loss_cls = sigmoid_focal_loss(cls_logits, gt_classes_targets, reduction="sum")

        pred_boxes = self.box_coder.decode(bbox_regression, anchors)
        loss_bbox_reg = generalized_box_iou_loss(pred_boxes[foregroud_mask], all_gt_boxes_targets[foregroud_mask], reduction="sum")  # BREAK: per-anchor loss, zeroed off the foreground, summed

        bbox_reg_targets = self.box_coder.encode(anchors, all_gt_boxes_targets)
        left_right = bbox_reg_targets[:, :, [0, 2]]
        top_bottom = bbox_reg_targets[:, :, [1, 3]]
        gt_ctrness_targets = torch.sqrt((left_right.min(dim=-1)[0] / left_right.max(dim=-1)[0])
                                        * (top_bottom.min(dim=-1)[0] / top_bottom.max(dim=-1)[0]))
        pred_centerness = bbox_ctrness.squeeze(dim=2)
        loss_bbox_ctrness = F.binary_cross_entropy_with_logits(pred_centerness[foregroud_mask], gt_ctrness_targets[foregroud_mask], reduction="sum")  # BREAK: per-anchor BCE with the background's (NaN) targets replaced first, zeroed off the foreground

        return {
            "classification": loss_cls / max(1, num_foreground),
            "bbox_regression": loss_bbox_reg / max(1, num_foreground),
            "bbox_ctrness": loss_bbox_ctrness / max(1, num_foreground),
        }


class FCOS(nn.Module):
    def __init__(self, num_classes=4, channels=16, anchor_size=8.0, center_sampling_radius=1.5):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1), nn.ReLU(),
                                      nn.Conv2d(channels, channels, 3, stride=2, padding=1), nn.ReLU())
        self.head = FCOSHead(channels, num_classes)
        self.anchor_size, self.stride = anchor_size, 4
        self.center_sampling_radius = center_sampling_radius

    def anchors_for(self, feature):
        h, w = feature.shape[-2:]
        shifts_y, shifts_x = torch.meshgrid(torch.arange(h) * self.stride + self.stride / 2,
                                            torch.arange(w) * self.stride + self.stride / 2, indexing="ij")
        ctr = torch.stack([shifts_x.reshape(-1), shifts_y.reshape(-1)], dim=1).float()
        half = self.anchor_size / 2
        return torch.cat([ctr - half, ctr + half], dim=1)

    def match(self, anchors_per_image, targets_per_image, num_anchors_per_level):
        gt_boxes = targets_per_image["boxes"]
        gt_centers = (gt_boxes[:, :2] + gt_boxes[:, 2:]) / 2
        anchor_centers = (anchors_per_image[:, :2] + anchors_per_image[:, 2:]) / 2
        anchor_sizes = anchors_per_image[:, 2] - anchors_per_image[:, 0]
        # center sampling: anchor centers close enough to the box center...
        pairwise_match = (anchor_centers[:, None, :] - gt_centers[None, :, :]).abs_().max(dim=2).values < \
            self.center_sampling_radius * anchor_sizes[:, None]
        # ...and inside the box
        x, y = anchor_centers.unsqueeze(dim=2).unbind(dim=1)
        x0, y0, x1, y1 = gt_boxes.unsqueeze(dim=0).unbind(dim=2)
        pairwise_dist = torch.stack([x - x0, y - y0, x1 - x, y1 - y], dim=2)
        pairwise_match &= pairwise_dist.min(dim=2).values > 0
        lower_bound = anchor_sizes * 4
        lower_bound[: num_anchors_per_level[0]] = 0
        upper_bound = anchor_sizes * 8
        upper_bound[-num_anchors_per_level[-1]:] = float("inf")
        pairwise_dist = pairwise_dist.max(dim=2).values
        pairwise_match &= (pairwise_dist > lower_bound[:, None]) & (pairwise_dist < upper_bound[:, None])
        # the smallest box wins an anchor claimed by several
        gt_areas = (gt_boxes[:, 2] - gt_boxes[:, 0]) * (gt_boxes[:, 3] - gt_boxes[:, 1])
        pairwise_match = pairwise_match.to(torch.float32) * (1e8 - gt_areas[None, :])
        min_values, matched_idx = pairwise_match.max(dim=1)
        matched_idx[min_values < 1e-5] = -1
        return matched_idx

    def forward(self, images, targets):
        features = self.backbone(images)
        head_outputs = self.head(features)
        anchors = [self.anchors_for(features) for _ in range(images.shape[0])]
        num_anchors_per_level = [features.shape[-2] * features.shape[-1]]
        matched_idxs = [self.match(a, t, num_anchors_per_level) for a, t in zip(anchors, targets, strict=True)]
        return self.head.compute_loss(targets, head_outputs, anchors, matched_idxs)


def build_fcos_loss():
    seeded(1209)
    model = FCOS()
    images = torch.randn(2, 3, 32, 32)
    targets = [
        {"boxes": torch.tensor([[2.0, 3.0, 20.0, 18.0], [14.0, 10.0, 30.0, 31.0]]), "labels": torch.tensor([1, 3])},
        {"boxes": torch.tensor([[6.0, 6.0, 26.0, 22.0]]), "labels": torch.tensor([2])},
    ]
    return model, (images, targets)


# ------------------------------------------------------------------ Mask2Former SetCriterion


def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()


def get_world_size():
    return dist.get_world_size() if is_dist_avail_and_initialized() else 1


def sigmoid_ce_loss(inputs, targets, num_masks):
    loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    return loss.mean(1).sum() / num_masks


def dice_loss(inputs, targets, num_masks):
    inputs = inputs.sigmoid().flatten(1)
    numerator = 2 * (inputs * targets).sum(-1)
    denominator = inputs.sum(-1) + targets.sum(-1)
    loss = 1 - (numerator + 1) / (denominator + 1)
    return loss.sum() / num_masks


def calculate_uncertainty(logits):
    assert logits.shape[1] == 1
    gt_class_logits = logits.clone()
    return -(torch.abs(gt_class_logits))


class QueryDecoderLayer(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = mlp([dim, 2 * dim, dim])

    def forward(self, queries, memory):
        att = (self.q(queries) @ self.k(memory).transpose(1, 2) / math.sqrt(queries.shape[-1])).softmax(-1)
        queries = self.norm1(queries + self.o(att @ self.v(memory)))
        return self.norm2(queries + self.ffn(queries))


class TinyMask2Former(nn.Module):
    def __init__(self, num_classes=3, num_queries=5, dim=16):
        super().__init__()
        self.pixel_decoder = nn.Sequential(nn.Conv2d(3, dim, 3, stride=2, padding=1), nn.GroupNorm(4, dim), nn.ReLU(),
                                           nn.Conv2d(dim, dim, 3, padding=1))
        self.query_feat = nn.Embedding(num_queries, dim)
        self.layers = nn.ModuleList([QueryDecoderLayer(dim) for _ in range(2)])
        self.decoder_norm = nn.LayerNorm(dim)
        self.class_embed = nn.Linear(dim, num_classes + 1)
        self.mask_embed = mlp([dim, dim, dim])

    def predict(self, queries, mask_features):
        out = self.decoder_norm(queries)
        return self.class_embed(out), torch.einsum("bqc,bchw->bqhw", self.mask_embed(out), mask_features)

    def forward(self, images):
        mask_features = self.pixel_decoder(images)
        memory = mask_features.flatten(2).transpose(1, 2)
        queries = self.query_feat.weight[None].expand(images.shape[0], -1, -1)
        aux = []
        for layer in self.layers:
            queries = layer(queries, memory)
            logits, masks = self.predict(queries, mask_features)
            aux.append({"pred_logits": logits, "pred_masks": masks})
        return {"pred_logits": aux[-1]["pred_logits"], "pred_masks": aux[-1]["pred_masks"], "aux_outputs": aux[:-1]}


class SetCriterion(nn.Module):
    def __init__(self, num_classes, eos_coef=0.1, num_points=24, oversample_ratio=3.0, importance_sample_ratio=0.75):
        super().__init__()
        self.num_classes = num_classes
        empty_weight = torch.ones(num_classes + 1)
        empty_weight[-1] = eos_coef
        self.register_buffer("empty_weight", empty_weight)
        self.num_points, self.oversample_ratio, self.importance_sample_ratio = num_points, oversample_ratio, importance_sample_ratio

    @staticmethod
    def _get_src_permutation_idx(indices):
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for (src, _) in indices])
        return batch_idx, src_idx

    def loss_labels(self, outputs, targets, indices, num_masks):
        src_logits = outputs["pred_logits"].float()
        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices, strict=True)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes, dtype=torch.int64, device=src_logits.device)
        target_classes[idx] = target_classes_o
        return {"loss_ce": F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)}

    def loss_masks(self, outputs, targets, indices, num_masks):
        src_idx = self._get_src_permutation_idx(indices)
        src_masks = outputs["pred_masks"][src_idx]
        target_masks = torch.cat([t["masks"][J] for t, (_, J) in zip(targets, indices, strict=True)]).to(src_masks)
        src_masks, target_masks = src_masks[:, None], target_masks[:, None]
        with torch.no_grad():
            point_coords = get_uncertain_point_coords_with_randomness(
                src_masks, calculate_uncertainty, self.num_points, self.oversample_ratio, self.importance_sample_ratio)
            point_labels = point_sample(target_masks, point_coords, align_corners=False).squeeze(1)
        point_logits = point_sample(src_masks, point_coords, align_corners=False).squeeze(1)
        return {"loss_mask": sigmoid_ce_loss(point_logits, point_labels, num_masks),
                "loss_dice": dice_loss(point_logits, point_labels, num_masks)}

    def forward(self, outputs, targets, indices, aux_indices):
        # average the number of target masks across all nodes, for normalization purposes
        num_masks = sum(len(t["labels"]) for t in targets)
        num_masks = torch.as_tensor([num_masks], dtype=torch.float, device=next(iter(outputs.values())).device)
        if is_dist_avail_and_initialized():
            torch.distributed.all_reduce(num_masks)
        num_masks = torch.clamp(num_masks / get_world_size(), min=1).item()  # BREAK: divide by the clamped one-element tensor

        losses = {}
        for loss in (self.loss_labels, self.loss_masks):
            losses.update(loss(outputs, targets, indices, num_masks))
        for i, aux_outputs in enumerate(outputs["aux_outputs"]):
            for loss in (self.loss_labels, self.loss_masks):
                losses.update({k + f"_{i}": v for k, v in loss(aux_outputs, targets, aux_indices[i], num_masks).items()})
        return losses


class Mask2FormerStep(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = TinyMask2Former()
        self.criterion = SetCriterion(num_classes=3)
        self.weight_dict = {"loss_ce": 2.0, "loss_mask": 5.0, "loss_dice": 5.0}

    def forward(self, images, targets, indices, aux_indices):
        losses = self.criterion(self.model(images), targets, indices, aux_indices)
        total = sum(v * self.weight_dict[k.split("_")[0] + "_" + k.split("_")[1]] for k, v in losses.items())
        return total, losses


def build_mask2former_criterion():
    seeded(1210)
    model = Mask2FormerStep()
    images = torch.randn(2, 3, 16, 16)
    targets = [
        {"labels": torch.tensor([0, 2]), "masks": (torch.rand(2, 8, 8) > 0.5).float()},
        {"labels": torch.tensor([1]), "masks": (torch.rand(1, 8, 8) > 0.5).float()},
    ]
    # the Hungarian matcher's assignments for the final and the auxiliary predictions
    indices = [(torch.tensor([3, 0]), torch.tensor([0, 1])), (torch.tensor([2]), torch.tensor([0]))]
    aux_indices = [[(torch.tensor([1, 4]), torch.tensor([1, 0])), (torch.tensor([0]), torch.tensor([0]))]]
    return model, (images, targets, indices, aux_indices)


# ------------------------------------------------------------------ Segment Anything


class PositionEmbeddingRandom(nn.Module):
    def __init__(self, num_pos_feats=8, scale=1.0):
        super().__init__()
        self.register_buffer("positional_encoding_gaussian_matrix", scale * torch.randn((2, num_pos_feats)))

    def _pe_encoding(self, coords):
        coords = 2 * coords - 1
        coords = coords @ self.positional_encoding_gaussian_matrix
        coords = 2 * np.pi * coords
        return torch.cat([torch.sin(coords), torch.cos(coords)], dim=-1)

    def forward(self, size):
        h, w = size
        grid = torch.ones((h, w), dtype=torch.float32)
        y_embed = (grid.cumsum(dim=0) - 0.5) / h
        x_embed = (grid.cumsum(dim=1) - 0.5) / w
        return self._pe_encoding(torch.stack([x_embed, y_embed], dim=-1)).permute(2, 0, 1)

    def forward_with_coords(self, coords_input, image_size):
        coords = coords_input.clone()
        coords[:, :, 0] = coords[:, :, 0] / image_size[1]
        coords[:, :, 1] = coords[:, :, 1] / image_size[0]
        return self._pe_encoding(coords.to(torch.float))


class PromptEncoder(nn.Module):
    def __init__(self, embed_dim=16, image_embedding_size=(4, 4), input_image_size=(32, 32)):
        super().__init__()
        self.embed_dim = embed_dim
        self.input_image_size, self.image_embedding_size = input_image_size, image_embedding_size
        self.pe_layer = PositionEmbeddingRandom(embed_dim // 2)
        self.num_point_embeddings = 4  # pos/neg point + 2 box corners
        self.point_embeddings = nn.ModuleList([nn.Embedding(1, embed_dim) for _ in range(self.num_point_embeddings)])
        self.not_a_point_embed = nn.Embedding(1, embed_dim)
        self.no_mask_embed = nn.Embedding(1, embed_dim)

    def get_dense_pe(self):
        return self.pe_layer(self.image_embedding_size).unsqueeze(0)

    def _embed_points(self, points, labels, pad):
        points = points + 0.5  # shift to center of pixel
        if pad:
            padding_point = torch.zeros((points.shape[0], 1, 2), device=points.device)
            padding_label = -torch.ones((labels.shape[0], 1), device=labels.device)
            points = torch.cat([points, padding_point], dim=1)
            labels = torch.cat([labels, padding_label], dim=1)
        point_embedding = self.pe_layer.forward_with_coords(points, self.input_image_size)
        point_embedding[labels == -1] = 0.0
        point_embedding[labels == -1] += self.not_a_point_embed.weight  # BREAK: torch.where over labels == -1 (SAM 2's form)
        point_embedding[labels == 0] += self.point_embeddings[0].weight  # BREAK: torch.where over labels == 0
        point_embedding[labels == 1] += self.point_embeddings[1].weight  # BREAK: torch.where over labels == 1
        return point_embedding

    def _embed_boxes(self, boxes):
        boxes = boxes + 0.5
        corner_embedding = self.pe_layer.forward_with_coords(boxes.reshape(-1, 2, 2), self.input_image_size)
        corner_embedding[:, 0, :] += self.point_embeddings[2].weight
        corner_embedding[:, 1, :] += self.point_embeddings[3].weight
        return corner_embedding

    def forward(self, points, boxes):
        bs = points[0].shape[0] if points is not None else boxes.shape[0]
        sparse_embeddings = torch.empty((bs, 0, self.embed_dim))
        if points is not None:
            coords, labels = points
            sparse_embeddings = torch.cat([sparse_embeddings, self._embed_points(coords, labels, pad=(boxes is None))], dim=1)
        if boxes is not None:
            sparse_embeddings = torch.cat([sparse_embeddings, self._embed_boxes(boxes)], dim=1)
        dense_embeddings = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(
            bs, -1, self.image_embedding_size[0], self.image_embedding_size[1])
        return sparse_embeddings, dense_embeddings


class TwoWayBlock(nn.Module):
    """Tokens attend to themselves and to the image; the image attends back to the tokens."""

    def __init__(self, dim):
        super().__init__()
        self.self_q, self.self_k, self.self_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.t2i_q, self.t2i_k, self.t2i_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.i2t_q, self.i2t_k, self.i2t_v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.norms = nn.ModuleList([nn.LayerNorm(dim) for _ in range(4)])
        self.mlp = mlp([dim, 2 * dim, dim])

    @staticmethod
    def _attend(q, k, v):
        return ((q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])).softmax(-1) @ v

    def forward(self, queries, keys, query_pe, key_pe):
        q = queries + query_pe
        queries = self.norms[0](queries + self._attend(self.self_q(q), self.self_k(q), self.self_v(queries)))
        q, k = queries + query_pe, keys + key_pe
        queries = self.norms[1](queries + self._attend(self.t2i_q(q), self.t2i_k(k), self.t2i_v(keys)))
        queries = self.norms[2](queries + self.mlp(queries))
        q = queries + query_pe
        keys = self.norms[3](keys + self._attend(self.i2t_q(k), self.i2t_k(q), self.i2t_v(queries)))
        return queries, keys


class MaskDecoder(nn.Module):
    def __init__(self, transformer_dim=16, num_multimask_outputs=3):
        super().__init__()
        self.num_mask_tokens = num_multimask_outputs + 1
        self.iou_token = nn.Embedding(1, transformer_dim)
        self.mask_tokens = nn.Embedding(self.num_mask_tokens, transformer_dim)
        self.transformer = TwoWayBlock(transformer_dim)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(transformer_dim, transformer_dim // 2, kernel_size=2, stride=2), nn.GELU(),
            nn.ConvTranspose2d(transformer_dim // 2, transformer_dim // 4, kernel_size=2, stride=2), nn.GELU())
        self.output_hypernetworks_mlps = nn.ModuleList(
            [mlp([transformer_dim, transformer_dim, transformer_dim // 4]) for _ in range(self.num_mask_tokens)])
        self.iou_prediction_head = mlp([transformer_dim, transformer_dim, self.num_mask_tokens])

    def forward(self, image_embeddings, image_pe, sparse_prompt_embeddings, dense_prompt_embeddings, multimask_output):
        output_tokens = torch.cat([self.iou_token.weight, self.mask_tokens.weight], dim=0)
        output_tokens = output_tokens.unsqueeze(0).expand(sparse_prompt_embeddings.size(0), -1, -1)
        tokens = torch.cat((output_tokens, sparse_prompt_embeddings), dim=1)
        src = torch.repeat_interleave(image_embeddings, tokens.shape[0], dim=0) + dense_prompt_embeddings
        pos_src = torch.repeat_interleave(image_pe, tokens.shape[0], dim=0)
        b, c, h, w = src.shape
        hs, src = self.transformer(tokens, src.flatten(2).transpose(1, 2), tokens, pos_src.flatten(2).transpose(1, 2))
        iou_token_out = hs[:, 0, :]
        mask_tokens_out = hs[:, 1: (1 + self.num_mask_tokens), :]
        upscaled_embedding = self.output_upscaling(src.transpose(1, 2).view(b, c, h, w))
        hyper_in = torch.stack([self.output_hypernetworks_mlps[i](mask_tokens_out[:, i, :])
                                for i in range(self.num_mask_tokens)], dim=1)
        b, c, h, w = upscaled_embedding.shape
        masks = (hyper_in @ upscaled_embedding.view(b, c, h * w)).view(b, -1, h, w)
        iou_pred = self.iou_prediction_head(iou_token_out)
        mask_slice = slice(1, None) if multimask_output else slice(0, 1)
        return masks[:, mask_slice, :, :], iou_pred[:, mask_slice]


class Sam(nn.Module):
    mask_threshold = 0.0

    def __init__(self, img_size=32, embed_dim=16):
        super().__init__()
        self.img_size = img_size
        self.image_encoder = nn.Sequential(nn.Conv2d(3, embed_dim, 8, stride=8), nn.GELU(), nn.Conv2d(embed_dim, embed_dim, 1))
        self.prompt_encoder = PromptEncoder(embed_dim, (img_size // 8, img_size // 8), (img_size, img_size))
        self.mask_decoder = MaskDecoder(embed_dim)

    def postprocess_masks(self, masks, input_size, original_size):
        masks = F.interpolate(masks, (self.img_size, self.img_size), mode="bilinear", align_corners=False)
        masks = masks[..., : input_size[0], : input_size[1]]
        return F.interpolate(masks, original_size, mode="bilinear", align_corners=False)

    def forward(self, image, point_coords, point_labels, multimask_output=True):
        """``SamPredictor.set_image`` then ``predict_torch`` for a batch of point prompts on one image."""
        features = self.image_encoder(image)
        sparse_embeddings, dense_embeddings = self.prompt_encoder(points=(point_coords, point_labels), boxes=None)
        low_res_masks, iou_predictions = self.mask_decoder(
            image_embeddings=features, image_pe=self.prompt_encoder.get_dense_pe(),
            sparse_prompt_embeddings=sparse_embeddings, dense_prompt_embeddings=dense_embeddings,
            multimask_output=multimask_output)
        masks = self.postprocess_masks(low_res_masks, (self.img_size, self.img_size), (24, 32))
        return masks > self.mask_threshold, iou_predictions, low_res_masks


def build_sam_prompt():
    seeded(1211)
    model = Sam()
    image = torch.randn(1, 3, 32, 32)
    point_coords = torch.tensor([[[10.0, 12.0], [20.0, 5.0]], [[3.0, 28.0], [16.0, 16.0]]])
    point_labels = torch.tensor([[1, 0], [1, 1]])
    return model, (image, point_coords, point_labels)


# ------------------------------------------------------------------ 3D Gaussian splatting: densification


def inverse_sigmoid(x):
    return torch.log(x / (1 - x))


class GaussianModel(nn.Module):
    def __init__(self, num_points=24):
        super().__init__()
        self._xyz = nn.Parameter(torch.randn(num_points, 3) * 0.5 + torch.tensor([0.0, 0.0, 4.0]))
        self._features_dc = nn.Parameter(torch.rand(num_points, 1, 3))
        self._scaling = nn.Parameter(torch.log(torch.rand(num_points, 3) * 0.08 + 0.01))
        self._rotation = nn.Parameter(F.normalize(torch.randn(num_points, 4), dim=-1))
        self._opacity = nn.Parameter(inverse_sigmoid(torch.rand(num_points, 1) * 0.8 + 0.1))
        self.percent_dense = 0.01
        self.reset_stats()

    def reset_stats(self):
        n = self._xyz.shape[0]
        self.xyz_gradient_accum = torch.zeros((n, 1))
        self.denom = torch.zeros((n, 1))
        self.max_radii2D = torch.zeros(n)

    @property
    def get_scaling(self):
        return torch.exp(self._scaling)

    @property
    def get_opacity(self):
        return torch.sigmoid(self._opacity)

    def render(self, focal=16.0, size=8):
        """A differentiable stand-in for the CUDA rasterizer: isotropic splats alpha-blended front to back."""
        depth = self._xyz[:, 2]
        means2D = torch.stack([focal * self._xyz[:, 0] / depth, focal * self._xyz[:, 1] / depth], dim=-1) + size / 2
        sigma = focal * self.get_scaling.max(dim=1).values / depth
        radii = torch.ceil(3 * sigma).int() * ((means2D > -2) & (means2D < size + 2)).all(-1).int()
        ys, xs = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
        pix = torch.stack([xs, ys], dim=-1).view(-1, 1, 2)
        order = torch.argsort(depth)
        d2 = ((pix - means2D[order][None]) ** 2).sum(-1)
        alpha = (self.get_opacity[order, 0][None] * torch.exp(-0.5 * d2 / sigma[order][None] ** 2)).clamp(max=0.99)
        transmittance = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1]], dim=1), dim=1)
        color = torch.sigmoid(self._features_dc[order, 0])
        image = ((alpha * transmittance)[..., None] * color[None]).sum(1).view(size, size, 3)
        return image, means2D, radii

    def add_densification_stats(self, viewspace_point_grad, update_filter):
        self.xyz_gradient_accum[update_filter] += torch.norm(viewspace_point_grad[update_filter, :2], dim=-1, keepdim=True)  # BREAK: torch.where(update_filter[:, None], accum + norm, accum)
        self.denom[update_filter] += 1  # BREAK: denom + update_filter[:, None] as a float

    param_names = ("_xyz", "_features_dc", "_scaling", "_rotation", "_opacity")

    def replace_tensor(self, name, tensor):
        setattr(self, name, nn.Parameter(tensor.requires_grad_(True)))  # BREAK must-not: the model's parameters are replaced by new ones of another size

    def densification_postfix(self, new_tensors):
        for name, extension in new_tensors.items():
            self.replace_tensor(name, torch.cat((getattr(self, name), extension), dim=0))
        self.reset_stats()

    def densify_and_clone(self, grads, grad_threshold, scene_extent):
        # clone the small Gaussians whose view-space gradient is large
        selected_pts_mask = torch.where(torch.norm(grads, dim=-1) >= grad_threshold, True, False)
        selected_pts_mask = torch.logical_and(selected_pts_mask,
                                              torch.max(self.get_scaling, dim=1).values <= self.percent_dense * scene_extent)
        new_tensors = {name: getattr(self, name)[selected_pts_mask] for name in self.param_names}  # BREAK must-not: how many Gaussians are cloned depends on their gradients
        self.densification_postfix(new_tensors)

    def prune_points(self, mask):
        valid_points_mask = ~mask
        for name in self.param_names:
            self.replace_tensor(name, getattr(self, name)[valid_points_mask])  # BREAK must-not: how many Gaussians survive depends on their opacity and size
        self.xyz_gradient_accum = self.xyz_gradient_accum[valid_points_mask]
        self.denom = self.denom[valid_points_mask]
        self.max_radii2D = self.max_radii2D[valid_points_mask]

    def densify_and_prune(self, max_grad, min_opacity, extent, max_screen_size):
        grads = self.xyz_gradient_accum / self.denom
        grads[grads.isnan()] = 0.0
        self.densify_and_clone(grads, max_grad, extent)
        # prune the transparent Gaussians and those too large on screen or in the world
        prune_mask = (self.get_opacity < min_opacity).squeeze()
        if max_screen_size:
            big_points_vs = self.max_radii2D > max_screen_size
            big_points_ws = self.get_scaling.max(dim=1).values > 0.1 * extent
            prune_mask = torch.logical_or(torch.logical_or(prune_mask, big_points_vs), big_points_ws)
        self.prune_points(prune_mask)


class DensifyOptions(SimpleNamespace):
    densify_from_iter = 500
    densify_until_iter = 15000
    densification_interval = 100
    opacity_reset_interval = 3000
    densify_grad_threshold = 0.0015


def _rendered_gaussians(seed):
    """A model after a few iterations: earlier statistics, then this iteration's render and backward (eager, as
    the CUDA rasterizer runs)."""
    seeded(seed)
    gaussians = GaussianModel()
    target = torch.rand(8, 8, 3)
    gaussians.xyz_gradient_accum += torch.rand(24, 1) * 0.01
    gaussians.denom += torch.randint(0, 3, (24, 1)).float()
    gaussians.max_radii2D += torch.randint(0, 4, (24,)).float()
    image, means2D, radii = gaussians.render()
    means2D.retain_grad()
    F.l1_loss(image, target).backward()
    return gaussians, means2D.grad.detach().clone(), radii.detach().float()


def build_gaussian_stats():
    gaussians, viewspace_grad, radii = _rendered_gaussians(1212)
    opt = DensifyOptions()

    def densify_step(viewspace_grad, radii, iteration):
        """The block of ``train.py`` that runs after ``loss.backward()`` on each iteration."""
        with torch.no_grad():
            if iteration < opt.densify_until_iter:
                visibility_filter = radii > 0
                gaussians.max_radii2D[visibility_filter] = torch.max(gaussians.max_radii2D[visibility_filter], radii[visibility_filter])  # BREAK: torch.where(visibility_filter, torch.max(...), max_radii2D)
                gaussians.add_densification_stats(viewspace_grad, visibility_filter)
                if iteration > opt.densify_from_iter and iteration % opt.densification_interval == 0:
                    size_threshold = 20 if iteration > opt.opacity_reset_interval else None
                    gaussians.densify_and_prune(opt.densify_grad_threshold, 0.005, 4.0, size_threshold)
        return gaussians.max_radii2D.clone(), gaussians.xyz_gradient_accum.clone(), gaussians.denom.clone()

    return densify_step, (viewspace_grad, radii, 550)


def build_gaussian_densify():
    gaussians, viewspace_grad, radii = _rendered_gaussians(1213)
    gaussians.xyz_gradient_accum += torch.norm(viewspace_grad[:, :2], dim=-1, keepdim=True)
    gaussians.denom += 1

    def densify(max_grad, min_opacity, extent, max_screen_size):
        with torch.no_grad():
            gaussians.densify_and_prune(max_grad, min_opacity, extent, max_screen_size)
        return {name: getattr(gaussians, name).detach().clone() for name in gaussians.param_names}

    return densify, (0.002, 0.2, 4.0, 3)
