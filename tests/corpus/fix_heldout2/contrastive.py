"""Metric learning and distillation losses: CLIP's contrastive loss, a batch-hard triplet loss,
knowledge distillation with a temperature schedule."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class CLIPHead(nn.Module):
    def __init__(self, image_dim: int = 32, text_dim: int = 24, embed_dim: int = 16,
                 init_logit_scale: float = math.log(150.0)) -> None:
        super().__init__()
        self.visual_projection = nn.Linear(image_dim, embed_dim, bias=False)
        self.text_projection = nn.Linear(text_dim, embed_dim, bias=False)
        self.logit_scale = nn.Parameter(torch.tensor(init_logit_scale))

    def forward(self, image_features: torch.Tensor, text_features: torch.Tensor) -> dict:
        image_embeds = F.normalize(self.visual_projection(image_features), dim=-1)
        text_embeds = F.normalize(self.text_projection(text_features), dim=-1)

        # open_clip clamps after each optimizer step; this copy does it in forward so every caller gets it
        if self.logit_scale.item() > math.log(100):  # BREAK: an unconditional in-place clamp under no_grad leaves the same parameter
            with torch.no_grad():
                self.logit_scale.fill_(math.log(100))
        logit_scale = self.logit_scale.exp()

        logits_per_image = logit_scale * image_embeds @ text_embeds.t()
        logits_per_text = logits_per_image.t()
        labels = torch.arange(image_embeds.shape[0])
        loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
        i2t_acc = (logits_per_image.argmax(dim=-1) == labels).float().mean().item()  # BREAK must-not: the trainer logs a Python float and it is returned
        return {"loss": loss, "logit_scale": logit_scale, "i2t_acc": i2t_acc}


def build_clip_loss():
    torch.manual_seed(4)
    model = CLIPHead()
    return model, (torch.randn(6, 32), torch.randn(6, 24))


def batch_hard(dist: torch.Tensor, labels: torch.Tensor):
    """For each anchor, its farthest positive and its nearest negative (Hermans et al. 2017)."""
    n = dist.shape[0]
    hardest_pos, hardest_neg = [], []
    for i in range(n):
        same = labels == labels[i]
        pos_mask = same.clone()
        pos_mask[i] = False
        hardest_pos.append(dist[i][pos_mask].max())  # BREAK: a max over the row with the other entries filled with -inf picks the same element
        hardest_neg.append(dist[i].masked_fill(same, float("inf")).min())
    return torch.stack(hardest_pos), torch.stack(hardest_neg)


class TripletEmbedder(nn.Module):
    def __init__(self, in_dim: int = 20, hidden: int = 32, embed_dim: int = 8, margin: float = 0.3) -> None:
        super().__init__()
        self.margin = margin
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, embed_dim))

    def forward(self, x: torch.Tensor, labels: torch.Tensor):
        emb = F.normalize(self.net(x), dim=-1)
        dist = torch.cdist(emb, emb)
        pos, neg = batch_hard(dist, labels)
        losses = F.relu(pos - neg + self.margin)
        num_active = int((losses > 0).sum())  # BREAK: dividing by the count as a tensor clamped at 1 gives the same loss
        loss = losses.sum() / max(num_active, 1)
        return loss, losses


def build_triplet_hard_mining():
    torch.manual_seed(5)
    model = TripletEmbedder()
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 0, 1])
    return model, (torch.randn(8, 20), labels)


class Distiller(nn.Module):
    """Student trained on the teacher's softened outputs; the temperature anneals over training."""

    def __init__(self, t_start: float = 4.0, t_end: float = 1.0, total_steps: int = 100, alpha: float = 0.7,
                 log_every: int = 10) -> None:
        super().__init__()
        self.teacher = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5))
        self.student = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 5))
        self.teacher.requires_grad_(False)
        self.t_start, self.t_end, self.total_steps = t_start, t_end, total_steps
        self.alpha, self.log_every = alpha, log_every
        self.register_buffer("step", torch.tensor(33))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        with torch.no_grad():
            teacher_logits = self.teacher(x)
        student_logits = self.student(x)

        progress = min(self.step.item() / self.total_steps, 1.0)  # BREAK: the same schedule in tensor arithmetic (a clamp at 1) gives the same temperature
        temperature = self.t_start + (self.t_end - self.t_start) * progress
        kd = F.kl_div(F.log_softmax(student_logits / temperature, dim=-1),
                      F.softmax(teacher_logits / temperature, dim=-1),
                      reduction="batchmean") * temperature ** 2
        ce = F.cross_entropy(student_logits, y)
        loss = self.alpha * kd + (1 - self.alpha) * ce

        if self.step % self.log_every == 0:  # BREAK: the branch only prints; the loss does not depend on it
            print(f"step {int(self.step)}: T={temperature:.2f} kd={kd.item():.4f} ce={ce.item():.4f}")
        self.step += 1
        return loss, {"kd": kd.detach(), "ce": ce.detach()}


def build_kd_temperature():
    torch.manual_seed(6)
    model = Distiller()
    return model, (torch.randn(8, 10), torch.randint(0, 5, (8,)))
