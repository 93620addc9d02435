"""Training / evaluation steps: nanoGPT's loop body, an eval pass, WGAN-GP, a DINO-style teacher."""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F
from torch import nn

logger = logging.getLogger(__name__)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = nn.MultiheadAttention(n_embd, n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        T = x.size(1)
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int = 32, block_size: int = 16, n_embd: int = 16, n_head: int = 2, n_layer: int = 2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss


class TrainStep(nn.Module):
    """One iteration of nanoGPT's train.py loop, wrapped so it can be compiled whole."""

    def __init__(self, grad_clip: float = 1.0, log_interval: int = 1):
        super().__init__()
        self.model = GPT()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
        self.grad_clip = grad_clip
        self.log_interval = log_interval
        self.iter_num = 0

    def forward(self, X, Y):
        _, loss = self.model(X, Y)
        loss.backward()  # BREAK must-not: the backward pass itself, inside the compiled step
        if self.grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)  # BREAK: zero_grad is skipped by Dynamo (grads set to None by hand trace)
        if self.iter_num % self.log_interval == 0:
            lossf = loss.item()  # BREAK: the loss read as a float only for the log line
            if not torch.compiler.is_compiling():
                print(f"iter {self.iter_num}: loss {lossf:.4f}")  # BREAK: the log print
        self.iter_num += 1
        return loss.detach()


def build_nanogpt_train_step():
    torch.manual_seed(0)
    step = TrainStep()
    g = torch.Generator().manual_seed(7)
    data = torch.randint(0, 32, (2, 9), generator=g)
    return step, (data[..., :-1].contiguous(), data[..., 1:].contiguous())


class Evaluator(nn.Module):
    """``evaluate()`` from a classification repo: loss and accuracy summed over batches."""

    def __init__(self, in_dim: int = 10, num_classes: int = 5):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, num_classes))

    @torch.no_grad()
    def forward(self, batches_x, batches_y):
        total_loss, correct, seen = 0.0, 0, 0
        for x, y in zip(batches_x.unbind(0), batches_y.unbind(0), strict=True):
            logits = self.net(x)
            total_loss += F.cross_entropy(logits, y, reduction="sum")
            correct += (logits.argmax(dim=-1) == y).sum()
            seen += y.numel()
        print(f"evaluated {seen} examples")  # BREAK: a progress print
        avg_loss = total_loss.item() / seen  # BREAK must-not: the metric is returned as a Python float
        accuracy = correct.item() / seen  # BREAK must-not: the metric is returned as a Python float
        return {"loss": avg_loss, "acc": accuracy}


def build_eval_metrics():
    torch.manual_seed(0)
    model = Evaluator().eval()
    g = torch.Generator().manual_seed(8)
    return model, (torch.randn(3, 4, 10, generator=g), torch.randint(0, 5, (3, 4), generator=g))


class Critic(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)


class WGANGPLoss(nn.Module):
    def __init__(self, lambda_gp: float = 10.0):
        super().__init__()
        self.critic = Critic()
        self.lambda_gp = lambda_gp

    def gradient_penalty(self, real, fake, alpha):
        interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)  # BREAK: requires_grad_ on the interpolates (torch.func.grad over the critic needs neither line)
        d_interpolates = self.critic(interpolates)
        gradients = torch.autograd.grad(d_interpolates, interpolates, torch.ones_like(d_interpolates), create_graph=True)[0]  # BREAK: autograd.grad (vmap(torch.func.grad(critic)) keeps the penalty and its gradients)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    def forward(self, real, fake, alpha):
        d_real = self.critic(real).mean()
        d_fake = self.critic(fake).mean()
        gp = self.gradient_penalty(real, fake, alpha)
        if not torch.isfinite(gp):  # BREAK: a finiteness check that never fires on good data
            raise FloatingPointError("gradient penalty is not finite")
        return d_fake - d_real + self.lambda_gp * gp


def build_wgan_gp():
    torch.manual_seed(0)
    model = WGANGPLoss()
    g = torch.Generator().manual_seed(9)
    real = torch.randn(6, 8, generator=g)
    fake = torch.randn(6, 8, generator=g)
    alpha = torch.rand(6, 1, generator=g)
    return model, (real, fake, alpha)


class DINOHead(nn.Module):
    def __init__(self, in_dim: int = 12, out_dim: int = 8):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, 16), nn.GELU(), nn.Linear(16, out_dim))

    def forward(self, x):
        return self.mlp(x)


class StudentTeacher(nn.Module):
    """DINO: a student, an EMA teacher and a centred, sharpened teacher target."""

    def __init__(self, momentum: float = 0.996, student_temp: float = 0.1, teacher_temp: float = 0.04):
        super().__init__()
        self.student = DINOHead()
        self.teacher = copy.deepcopy(self.student)
        for p in self.teacher.parameters():
            p.requires_grad = False
        self.register_buffer("center", torch.zeros(1, 8))
        self.momentum = momentum
        self.student_temp = student_temp
        self.teacher_temp = teacher_temp

    def forward(self, x1, x2):
        student_out = self.student(x1) / self.student_temp
        with torch.no_grad():
            teacher_out = self.teacher(x2)
        targets = copy.deepcopy(teacher_out)  # BREAK: a deep copy of a tensor (a clone)
        t = F.softmax((targets - self.center) / self.teacher_temp, dim=-1)
        loss = torch.sum(-t * F.log_softmax(student_out, dim=-1), dim=-1).mean()
        with torch.no_grad():
            self.center.mul_(0.9).add_(teacher_out.mean(dim=0, keepdim=True), alpha=0.1)
            for ps, pt in zip(self.student.parameters(), self.teacher.parameters(), strict=True):
                pt.data.mul_(self.momentum).add_((1 - self.momentum) * ps.detach().data)
        logger.info("ema momentum %.4f", self.momentum)  # BREAK: a logging call
        return loss


def build_ema_teacher():
    torch.manual_seed(0)
    model = StudentTeacher()
    g = torch.Generator().manual_seed(10)
    return model, (torch.randn(4, 12, generator=g), torch.randn(4, 12, generator=g))
