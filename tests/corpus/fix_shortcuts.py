"""Programs with shortcuts on a tensor test, rows computed for an index and written back, and
breaks that hide each other in one loop, in the shapes real repositories write them, for
``dynscope.fix``: a chunked scan that stops once every sequence has ended, an encoder whose
extended mask is skipped when it is all ones, FPN boxes pooled per level, a diffusion scheduler
(a plain object the model holds) whose step reads its tables by 0-dim tensors; and three that
must keep their branch: the all-ones shortcut never taken by the inputs (nothing shows the
general path agrees), a micro-batch skipped when its loss is not finite (the skip changes the
result), and a loop that stops at a tolerance (a ``while``: the stop is its only exit).

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

logger = logging.getLogger(__name__)


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class ChunkedScan(nn.Module):
    """A linear recurrence scanned chunk by chunk over padded sequences: the chunks after every
    sequence has ended are skipped (their outputs are masked anyway)."""

    def __init__(self, dim: int = 4, chunk: int = 3) -> None:
        super().__init__()
        self.decay = nn.Parameter(torch.full((dim,), 0.8))
        self.proj = nn.Linear(dim, dim)
        self.chunk = chunk

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        u = self.proj(x)
        h = torch.zeros_like(u[:, 0])
        y = torch.zeros_like(u)
        T = x.shape[1]
        for start in range(0, T, self.chunk):
            if (lengths <= start).all():  # SITE: shortcut dropped
                break
            for t in range(start, min(start + self.chunk, T)):
                h = self.decay * h + u[:, t]
                y[:, t] = h
        valid = torch.arange(T)[None, :] < lengths[:, None]
        return y * valid[..., None]


def chunked_scan() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(801)
    return ChunkedScan(), (_x(2, 12, 4, seed=1), torch.tensor([5, 4]))


class MaskedEncoder(nn.Module):
    """A Hugging Face-style encoder layer: the additive mask is built only when some position is
    padded (an all-ones mask takes the unmasked path); it logs through the module's logger."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def extended_mask(self, attention_mask: torch.Tensor) -> torch.Tensor | None:
        if (attention_mask == 1).all():  # SITE: shortcut dropped
            return None
        return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        logger.warning("encoding %d tokens", x.shape[1])  # SITE: none
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        mask = self.extended_mask(attention_mask)
        if mask is not None:
            scores = scores + mask
        return self.out((scores.softmax(-1) @ v).squeeze(1))


def all_ones_mask() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(802)
    return MaskedEncoder(), (_x(2, 5, 8, seed=2), torch.ones(2, 5, dtype=torch.long))


class PaddedEncoder(MaskedEncoder):
    """The same encoder on a padded batch: the all-ones shortcut is never taken."""

    def extended_mask(self, attention_mask: torch.Tensor) -> torch.Tensor | None:
        if (attention_mask == 1).all():  # SITE: none
            return None
        return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def never_taken() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(803)
    return PaddedEncoder(), (_x(2, 5, 8, seed=3), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))


class AccumulatedLoss(nn.Module):
    """Gradient accumulation that skips a micro-batch whose loss is not finite: the skip is the
    point (the bad batch must not count)."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.net = nn.Linear(dim, 1)

    def forward(self, batches: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        total = torch.zeros(())
        for xb, yb in zip(batches, targets, strict=True):
            loss = F.mse_loss(self.net(xb).squeeze(-1), yb)
            if not torch.isfinite(loss):  # SITE: none
                continue
            total = total + loss
        return total


def skip_non_finite_batch() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(804)
    targets = _x(3, 5, seed=4)
    targets[1, 2] = float("inf")
    return AccumulatedLoss(), (_x(3, 5, 4, seed=5), targets)


class FixedPoint(nn.Module):
    """Iterate a contraction until it moves less than a tolerance: the ``while`` stops only there."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.zeros_like(x)
        while True:
            nxt = 0.5 * torch.tanh(self.lin(z)) + x
            if (nxt - z).abs().max() < 1e-3:  # SITE: none
                break
            z = nxt
        return nxt


def fixed_point() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(805)
    return FixedPoint(), (_x(3, 4, seed=6),)


class LevelPooler(nn.Module):
    """FPN RoI pooling: each box pooled from the level its size maps to, written back in place."""

    def __init__(self, channels: int = 4, levels: int = 3) -> None:
        super().__init__()
        self.lateral = nn.ModuleList(nn.Conv2d(3, channels, 1) for _ in range(levels))
        self.strides = [1, 2, 4][:levels]
        self.head = nn.Linear(channels, 2)

    def forward(self, images: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        # Compiled as a frame of its own after the loop's break (a zip Dynamo cannot step there);
        # inlined, and no break, once forward compiles whole.
        feats = [conv(F.avg_pool2d(images, s)) for conv, s in zip(self.lateral, self.strides, strict=True)]  # SITE: gone with the verified patches
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        levels = (area.sqrt() / 4).floor().clamp(0, len(self.lateral) - 1).long()
        pooled = boxes.new_zeros(boxes.shape[0], self.head.in_features)
        for lvl, feat in enumerate(feats):
            idx = torch.nonzero(levels == lvl).squeeze(1)  # SITE: every row computed, the indexed ones kept
            pooled[idx] = feat.mean((2, 3))[0] * boxes[idx, :1]
        return self.head(pooled)


def level_pooler() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(806)
    boxes = torch.tensor([[0.0, 0.0, 3.0, 3.0], [0.0, 0.0, 9.0, 9.0], [1.0, 1.0, 20.0, 20.0], [2.0, 2.0, 4.0, 5.0]])
    return LevelPooler(), (_x(1, 3, 16, 16, seed=7), boxes)


class Scheduler:
    """A diffusers-style scheduler: a plain object, not a module, with its tables as tensors."""

    def __init__(self, steps: int = 50, inference: int = 5) -> None:
        self.alphas_cumprod = torch.cumprod(1.0 - torch.linspace(1e-4, 0.02, steps), 0)
        self.final = torch.tensor(1.0)
        self.ratio = steps // inference
        self.timesteps = (torch.arange(inference) * self.ratio).flip(0)

    def clip(self, x0: torch.Tensor) -> torch.Tensor:
        """Dynamic thresholding, sample by sample: clip to the 90% quantile of |x0| (at least 1)."""
        s = torch.quantile(x0.abs(), 0.9, dim=1)
        out = []
        for i in range(x0.shape[0]):
            s_i = max(float(s[i]), 1.0)  # SITE: torch math instead of math
            out.append(x0[i].clamp(-s_i, s_i) / s_i)
        return torch.stack(out)

    def step(self, eps: torch.Tensor, t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        a_t = self.alphas_cumprod[t]  # SITE: index by a one-element tensor
        prev = t - self.ratio
        a_prev = self.alphas_cumprod[prev] if prev >= 0 else self.final  # SITE: conditional expression to torch.where
        x0 = self.clip((x - (1 - a_t) ** 0.5 * eps) / a_t**0.5)
        return a_prev**0.5 * x0 + (1 - a_prev) ** 0.5 * eps


class Sampler(nn.Module):
    """Denoise with a small network over the scheduler's timesteps."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.net = nn.Linear(dim + 1, dim)
        self.scheduler = Scheduler()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for t in self.scheduler.timesteps:
            eps = self.net(torch.cat([x, (t.float() / 50).expand(x.shape[0], 1)], -1))
            x = self.scheduler.step(eps, t, x)
        return x


def scheduler_loop() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(807)
    return Sampler(), (_x(3, 4, seed=8),)


class HalfPrecisionBlock(nn.Module):
    """T5's fp16 guard: clamp infinities after a block, only in half precision and only when
    there are any (the clamp is a no-op on finite values)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.ff = nn.Linear(dim, dim)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.ff(hidden_states) * 3e4
        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():  # SITE: branch to torch.where
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        hidden_states = hidden_states * 0.5
        if hidden_states.dtype == torch.float16 and torch.isinf(hidden_states).any():  # SITE: branch to torch.where
            clamp_value = torch.finfo(hidden_states.dtype).max - 1000
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)
        return hidden_states


def fp16_clamp() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(809)
    return HalfPrecisionBlock().half(), (_x(2, 8, seed=10).half(),)


class Rollout(nn.Module):
    """A batched environment stepped by a policy; environments that are done are reset, the
    reset a per-environment torch.where (a no-op where none is done)."""

    def __init__(self, horizon: int = 6, limit: int = 3) -> None:
        super().__init__()
        self.policy = nn.Linear(2, 1)
        self.horizon, self.limit = horizon, limit

    def reset_done(self, pos: torch.Tensor, steps: torch.Tensor, done: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.where(done, torch.zeros_like(pos), pos), torch.where(done, torch.zeros_like(steps), steps)

    def forward(self, pos: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(pos)
        for _ in range(self.horizon):
            action = torch.tanh(self.policy(torch.stack([pos, steps.float()], -1))).squeeze(-1)
            pos, steps = pos + action, steps + 1
            total = total + pos.square()
            done = steps >= self.limit
            if done.any():  # SITE: test dropped, the body always run
                pos, steps = self.reset_done(pos, steps, done)
        return total


def done_reset() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(810)
    return Rollout(), (_x(4, seed=11), torch.tensor([0, 0, 1, 0]))


class EveryStepReset(Rollout):
    """The same rollout with a limit of one step: every environment is done every step, so the
    body never was skipped and nothing shows it is a no-op when none is done."""

    def forward(self, pos: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
        total = torch.zeros_like(pos)
        for _ in range(self.horizon):
            action = torch.tanh(self.policy(torch.stack([pos, steps.float()], -1))).squeeze(-1)
            pos, steps = pos + action, steps + 1
            total = total + pos.square()
            done = steps >= self.limit
            if done.any():  # SITE: none
                pos, steps = self.reset_done(pos, steps, done)
        return total


def every_step_reset() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(811)
    model = EveryStepReset(limit=1)
    return model, (_x(4, seed=12), torch.zeros(4, dtype=torch.long))


class DepthRouter(nn.Module):
    """Mixture-of-depths: the tokens a router picks go through the block, weighted by the
    router, and are written back; the others skip it."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.router = nn.Linear(dim, 1)
        self.block = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x).squeeze(-1)
        picked = logits > 0
        tokens = x[picked]  # SITE: every row computed, the indexed ones kept
        weights = logits[picked]  # SITE: gone with the verified patches
        out = x.clone()
        out[picked] = tokens + torch.sigmoid(weights).unsqueeze(-1) * self.block(tokens)
        return out


def depth_router() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(812)
    return DepthRouter(), (_x(2, 5, 6, seed=13),)


class LastTokenReward(nn.Module):
    """TRL's reward: a KL penalty per token, the score added at each sequence's last real token."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.head = nn.Linear(dim, 1)

    def forward(self, h: torch.Tensor, masks: torch.Tensor, kl: torch.Tensor) -> torch.Tensor:
        scores = self.head(h[:, -1]).squeeze(-1)
        rewards = []
        for score, mask, k in zip(scores, masks, kl, strict=True):
            reward = -0.1 * k
            last = mask.nonzero()[-1]  # SITE: first or last nonzero as argmax
            reward[last] += score
            rewards.append(reward)
        return torch.stack(rewards)


def last_token_reward() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(813)
    masks = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    return LastTokenReward(), (_x(3, 5, 4, seed=14), masks, _x(3, 5, seed=15))


class NucleusHead(nn.Module):
    """A language-model head with nucleus (top-p) filtering of its next-token logits, as
    run_generation.py wrote it for one sequence."""

    def __init__(self, dim: int = 6, vocab: int = 12, top_p: float = 0.8) -> None:
        super().__init__()
        self.out = nn.Linear(dim, vocab)
        self.top_p = top_p

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        logits = self.out(h)
        sorted_logits, sorted_indices = torch.sort(logits, descending=True)
        cumulative = torch.cumsum(F.softmax(sorted_logits, dim=-1), dim=-1)
        sorted_remove = cumulative > self.top_p
        sorted_remove[1:] = sorted_remove[:-1].clone()
        sorted_remove[0] = False
        remove = sorted_indices[sorted_remove]  # SITE: sorted mask scattered back
        logits[remove] = -float("inf")
        return F.softmax(logits, dim=-1)


def nucleus_head() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(814)
    return NucleusHead(), (_x(6, seed=16) * 3,)


class ValidCountLoss(nn.Module):
    """A summed loss over the count of labels not ignored, the count taken by compacting them
    (a segmentation criterion's shape, in our words)."""

    def __init__(self, ignore: int = -1) -> None:
        super().__init__()
        self.ignore = ignore

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        n = labels[labels != self.ignore].numel()  # SITE: masked reduction inline
        return F.cross_entropy(logits, labels, ignore_index=self.ignore, reduction="sum") / (n + 1)


class ListedCriteria(nn.Module):
    """Heads each scored by its own criterion, the criteria held in a plain list (no
    ``nn.ModuleList``: not registered, yet called in forward), as segmentation training scripts
    keep their auxiliary losses: fix swaps their classes for the patched copies too."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 3) for _ in range(2))
        self.criteria = [ValidCountLoss() for _ in range(2)]

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        total = x.new_zeros(())
        for crit, head in zip(self.criteria, self.heads, strict=True):
            total = total + crit(head(x), labels)
        return total


def listed_criteria() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(815)
    return ListedCriteria(), (_x(6, 4, seed=17), torch.tensor([0, 2, -1, 1, -1, 2]))


class SaidLoss(nn.Module):
    """A loss that prints a line each call (the user reads it: its guard would silence it)."""

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = F.mse_loss(pred, target)
        print("head loss computed")  # SITE: none
        return loss


class HeadLosses(nn.Module):
    """Each head's loss in a list comprehension over a zip (a multi-head model's training
    forward, in our words): the print in the loss breaks inside the comprehension, which Python
    3.11 runs as a frame of its own, and Dynamo cannot step the zip handed to that frame."""

    def __init__(self) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.losses = [SaidLoss() for _ in range(2)]  # a plain list: Dynamo steps no zip of it in that frame

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        outs = [head(x) for head in self.heads]
        losses = [crit(o, y) for crit, o in zip(self.losses, outs, strict=True)]  # SITE: comprehension as a loop
        return torch.stack(losses).sum()


def head_losses() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(816)
    return HeadLosses(), (_x(3, 4, seed=18), _x(3, 4, seed=19))


class Table:
    """A lookup the caller builds and passes in (a tokenizer, a scheduler handed to forward)."""

    def __init__(self) -> None:
        self.values = torch.linspace(0.5, 1.5, 10)

    def at(self, t: torch.Tensor) -> torch.Tensor:
        return self.values[:3] * t.item()  # SITE: keep it a tensor


class PassedTable(nn.Module):
    """Scales by a table the caller passes in: fix swaps the classes of the objects among its
    inputs for their patched copies too (on copies of the inputs), so a patch of Table's code
    runs and verifies."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor, table: Table, t: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * table.at(t)


def passed_table() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(808)
    return PassedTable(), (_x(2, 3, seed=9), Table(), torch.tensor(4))


class MaxIoUAssigner:
    """mmdet's assigner shape: a plain object (no module) whose ``assign`` is what runs. The
    best candidate per anchor is kept by an index a mask picks; labels are written for the
    anchors nonzero names, under the ``numel() > 0`` test mmdet writes."""

    def __init__(self, pos_thr: float = 0.4) -> None:
        self.pos_thr = pos_thr

    def assign(self, overlaps: torch.Tensor, cand: torch.Tensor, gt_labels: torch.Tensor) -> tuple[torch.Tensor, ...]:
        num_gt, num_anchors = overlaps.shape
        is_pos = overlaps.gather(1, cand) >= self.pos_thr
        flat_cand = (cand + torch.arange(num_gt)[:, None] * num_anchors).view(-1)
        best = torch.full_like(overlaps, -1.0).view(-1)
        index = flat_cand[is_pos.view(-1)]  # SITE: every row computed, the indexed ones kept
        best[index] = overlaps.view(-1)[index]
        max_overlaps, argmax = best.view(num_gt, -1).max(dim=0)
        assigned = torch.where(max_overlaps > 0, argmax + 1, torch.zeros_like(argmax))
        labels = assigned.new_full((num_anchors,), -1)
        pos_inds = torch.nonzero(assigned > 0, as_tuple=False).squeeze()  # SITE: every row computed, the indexed ones kept
        if pos_inds.numel() > 0:
            labels[pos_inds] = gt_labels[assigned[pos_inds] - 1]
        return max_overlaps, assigned, labels


def max_iou_assigner() -> tuple[Any, tuple[torch.Tensor, ...]]:
    torch.manual_seed(815)
    overlaps = torch.rand(3, 10)
    cand = overlaps.topk(4, dim=1).indices
    return MaxIoUAssigner().assign, (overlaps, cand, torch.tensor([2, 0, 5]))


class DeadLatents(nn.Module):
    """A sparse autoencoder that re-initialises latents that have not fired for a while: their
    encoder columns, bias entries and counters, written through one nonzero index."""

    def __init__(self, d: int = 6, n: int = 8) -> None:
        super().__init__()
        self.W_enc = nn.Parameter(torch.randn(d, n) * 0.1)
        self.W_dec = nn.Parameter(torch.randn(n, d) * 0.1)
        self.b_enc = nn.Parameter(torch.zeros(n))
        self.register_buffer("since_fired", torch.tensor([0, 9, 1, 12, 0, 3, 20, 0]))

    @torch.no_grad()
    def resample(self, dead: torch.Tensor) -> None:
        idx = dead.nonzero().squeeze(1)  # SITE: every row computed, the indexed ones kept
        direction = F.normalize(self.W_dec.mean(0), dim=0) * 0.2
        self.W_enc[:, idx] = direction[:, None]
        self.b_enc[idx] = 0.0
        self.since_fired[idx] = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.resample(self.since_fired > 5)
        acts = F.relu(x @ self.W_enc + self.b_enc)
        self.since_fired.add_(1).masked_fill_(acts.sum(0) > 0, 0)
        return acts @ self.W_dec


def dead_latents() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(818)
    return DeadLatents(), (_x(4, 6, seed=17),)



class OptionalPadding(nn.Module):
    """A protein-LM style encoder that drops its key-padding mask when no position is padding,
    then lets attention apply it (an all-False mask changes nothing)."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 2, batch_first=True)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        if not padding_mask.any():  # SITE: shortcut dropped
            padding_mask = None
        out, _ = self.attn(x, x, x, key_padding_mask=padding_mask)
        return out


def optional_padding() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(831)
    return OptionalPadding(), (_x(2, 5, 8, seed=19), torch.zeros(2, 5, dtype=torch.bool))

PROGRAMS: dict[str, Any] = {
    "chunked_scan": chunked_scan,
    "all_ones_mask": all_ones_mask,
    "never_taken": never_taken,
    "skip_non_finite_batch": skip_non_finite_batch,
    "fixed_point": fixed_point,
    "level_pooler": level_pooler,
    "scheduler_loop": scheduler_loop,
    "passed_table": passed_table,
    "fp16_clamp": fp16_clamp,
    "done_reset": done_reset,
    "every_step_reset": every_step_reset,
    "depth_router": depth_router,
    "last_token_reward": last_token_reward,
    "nucleus_head": nucleus_head,
    "max_iou_assigner": max_iou_assigner,
    "dead_latents": dead_latents,
    "optional_padding": optional_padding,
    "listed_criteria": listed_criteria,
    "head_losses": head_losses,
}
