"""Programs that select with a boolean mask and only reduce what they select, in the shapes
real repositories write them, for ``dynscope.fix``: a regression loss over the finite targets,
a language-model loss over the tokens that are not padding, a box loss over the positive
anchors, a robust loss whose targets carry NaN gaps, a logit penalty applied in place through a
mask, a copy of one tensor's entries into another where a mask holds; and two that must keep
their selection (the selected values are returned; a loss per selected token is returned).

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class FiniteTargetRegression(nn.Module):
    """Sensor regression whose targets are inf where a sensor saturated: a smooth L1 over the rest."""

    def __init__(self, dim: int = 6, outputs: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 12), nn.GELU(), nn.Linear(12, outputs))

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pred = self.net(x)
        ok = torch.isfinite(target)
        loss = F.smooth_l1_loss(pred[ok], target[ok], beta=0.5)  # SITE: masked loss instead of select
        return pred, loss


def finite_target_regression() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    target = _x(5, 3, seed=1)
    target[1, 2] = float("inf")
    target[3, 0] = float("-inf")
    return FiniteTargetRegression(), (_x(5, 6), target)


class PaddedTokenLoss(nn.Module):
    """A causal LM head whose loss is taken over the target tokens that are not padding."""

    def __init__(self, vocab: int = 13, dim: int = 8, pad_id: int = 1) -> None:
        super().__init__()
        self.pad_id = pad_id
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(torch.tanh(self.embed(tokens[:, :-1])))
        labels = tokens[:, 1:]
        real = labels != self.pad_id
        loss = F.cross_entropy(logits[real], labels[real], label_smoothing=0.1)  # SITE: ignore_index instead of select
        return logits, loss


def padded_token_loss() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    return PaddedTokenLoss(), torch.tensor([[2, 5, 7, 9, 1, 1], [3, 4, 8, 10, 11, 1]])


class PositiveAnchorBoxLoss(nn.Module):
    """A detector's box regression averaged over the anchors matched to an object."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.box = nn.Linear(dim, 4)

    def forward(self, feats: torch.Tensor, target_boxes: torch.Tensor, iou: torch.Tensor) -> torch.Tensor:
        pred = self.box(feats)  # (batch, anchors, 4)
        positive = iou > 0.5  # (batch, anchors)
        per_anchor = (pred - target_boxes).abs().sum(-1)
        return per_anchor[positive].mean()  # SITE: masked reduction inline


def positive_anchor_box_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(2)
    iou = torch.tensor([[0.7, 0.2, 0.9, 0.1], [0.3, 0.8, 0.4, 0.6]])
    return PositiveAnchorBoxLoss(), (_x(2, 4, 6), _x(2, 4, 4, seed=3), iou)


class GappyLogCoshLoss(nn.Module):
    """A log-cosh forecast loss over the observed entries; the gaps in the targets are NaN."""

    def __init__(self, dim: int = 5) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pred = self.proj(x)
        seen = ~torch.isnan(y)
        return torch.log(torch.cosh(pred[seen] - y[seen])).mean()  # SITE: masked reduction inline


def gappy_log_cosh_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(4)
    y = _x(4, 5, seed=5)
    y[0, 1] = y[2, 3] = y[3, 0] = float("nan")
    return GappyLogCoshLoss(), (_x(4, 5), y)


class BannedTokenPenalty(nn.Module):
    """Generation logits lowered in place for the tokens a block list bans at each position."""

    def __init__(self, vocab: int = 9, dim: int = 6) -> None:
        super().__init__()
        self.head = nn.Linear(dim, vocab)

    def forward(self, h: torch.Tensor, banned: torch.Tensor) -> torch.Tensor:
        logits = self.head(h)
        logits[banned] -= 50.0  # SITE: where instead of masked assignment
        return logits.log_softmax(-1)


def banned_token_penalty() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(6)
    banned = torch.zeros(3, 9, dtype=torch.bool)
    banned[0, 2] = banned[1, 5] = banned[2, 0] = banned[2, 8] = True
    return BannedTokenPenalty(), (_x(3, 6), banned)


def teacher_forced_inputs(sampled: torch.Tensor, gold: torch.Tensor, coin: torch.Tensor) -> torch.Tensor:
    """The next inputs of a decoder: the gold token where the coin says so, the sampled one elsewhere."""
    nxt = sampled.clone()
    use_gold = coin < 0.5
    nxt[use_gold] = gold[use_gold]  # SITE: where instead of masked assignment
    return nxt * 2


def teacher_forced() -> tuple[Any, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    return teacher_forced_inputs, (torch.randint(0, 9, (3, 5), generator=g), torch.randint(0, 9, (3, 5), generator=g),
                                   torch.rand(3, 5, generator=g))


class SelectedFeatures(nn.Module):
    """Returns the features of the tokens a gate keeps: the selection is the output."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        keep = self.gate(x).squeeze(-1) > 0
        return torch.tanh(x[keep])  # SITE: none


def selected_features() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(8)
    return SelectedFeatures(), _x(6, 4)


class PerTokenLosses(nn.Module):
    """Returns one loss per real token (for a curriculum to sort): its length is the data's."""

    def __init__(self, vocab: int = 7, dim: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.embed(tokens))
        real = labels != 0
        return F.cross_entropy(logits[real], labels[real], reduction="none")  # SITE: none


def per_token_losses() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(9)
    return PerTokenLosses(), (torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.tensor([[2, 0, 3], [1, 4, 0]]))


class LogRatioLoss(nn.Module):
    """A log-ratio regression loss (variance of the log error) over the pixels with a valid depth."""

    def __init__(self, lo: float = 0.5, hi: float = 8.0) -> None:
        super().__init__()
        self.head = nn.Linear(4, 1)
        self.lo, self.hi = lo, hi

    def forward(self, feats: torch.Tensor, depth: torch.Tensor) -> torch.Tensor:
        pred = F.softplus(self.head(feats)).squeeze(-1) + 0.01
        ok = (depth > self.lo) & (depth < self.hi)
        err = torch.log(pred[ok]) - torch.log(depth[ok])  # SITE: masked reductions of a selection bound to a name
        return (err ** 2).mean() - 0.5 * err.mean() ** 2


def log_ratio_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(10)
    depth = torch.rand(3, 5) * 10
    depth[0, :2] = 0.0  # no return: log(0) where the mask leaves it out
    return LogRatioLoss(), (_x(3, 5, 4), depth)


class ClassBalancedWeights(nn.Module):
    """Effective-number class weights (Cui et al. 2019) from the batch's class counts."""

    def __init__(self, dim: int = 5, classes: int = 4, beta: float = 0.9) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, classes)
        self.classes, self.beta = classes, beta

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.fc(x)
        counts = F.one_hot(y, self.classes).sum(0)
        w = [(1.0 - self.beta) / (1.0 - self.beta ** max(c, 1)) for c in counts.tolist()]  # SITE: per-element list as tensor ops
        w = torch.tensor(w, dtype=logits.dtype)
        return F.cross_entropy(logits, y, weight=w / w.sum() * self.classes)


def class_balanced_weights() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(11)
    return ClassBalancedWeights(), (_x(7, 5), torch.tensor([0, 0, 1, 3, 3, 3, 0]))


class NegativeQueue(nn.Module):
    """A contrastive head that keeps a queue of past keys, written at a pointer kept in a buffer."""

    def __init__(self, dim: int = 4, size: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("queue", torch.zeros(size, dim))
        self.register_buffer("head", torch.zeros((), dtype=torch.long))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        q = F.normalize(self.proj(q), dim=-1)
        logits = q @ torch.cat([k, self.queue.clone()]).T
        self._push(k.detach())
        return logits

    @torch.no_grad()
    def _push(self, keys: torch.Tensor) -> None:
        at = int(self.head)  # SITE: pointer kept a tensor
        self.queue[at : at + keys.shape[0]] = keys
        self.head.fill_((at + keys.shape[0]) % self.queue.shape[0])


def negative_queue() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(12)
    return NegativeQueue(), (_x(2, 4), _x(2, 4, seed=1))


#: Every program of this corpus: name -> builder.
class DurationLoss(nn.Module):
    """FastSpeech 2's duration loss: predictions and targets masked_select-ed by the source mask,
    each rebinding its own name, then the loss module the class binds."""

    def __init__(self) -> None:
        super().__init__()
        self.mse_loss = nn.MSELoss()
        self.proj = nn.Linear(4, 1)

    def forward(self, h: torch.Tensor, durations: torch.Tensor, src_masks: torch.Tensor) -> torch.Tensor:
        log_pred = self.proj(h).squeeze(-1)
        log_target = torch.log(durations.float() + 1)
        log_pred = log_pred.masked_select(src_masks)  # SITE: masked reductions of a selection bound to a name
        log_target = log_target.masked_select(src_masks)  # SITE: gone with the verified patches
        return self.mse_loss(log_pred, log_target)


def duration_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(816)
    masks = torch.tensor([[True, True, True, False], [True, True, True, True], [True, False, False, False]])
    return DurationLoss(), (torch.randn(3, 4, 4), torch.randint(0, 5, (3, 4)), masks)


def make_pad_mask(lengths: Any, xs: torch.Tensor | None = None, maxlen: int | None = None) -> torch.Tensor:
    """espnet's helper: True at the padded positions of each row."""
    if not isinstance(lengths, list):
        lengths = lengths.long().tolist()  # SITE: list of numbers kept a tensor
    bs = int(len(lengths))
    if maxlen is None:
        maxlen = xs.size(1) if xs is not None else int(max(lengths))
    else:
        assert maxlen >= int(max(lengths))
    seq_range = torch.arange(0, maxlen, dtype=torch.int64).unsqueeze(0).expand(bs, maxlen)
    return seq_range >= seq_range.new(lengths).unsqueeze(-1)


class PaddedEncoder(nn.Module):
    """An espnet-style encoder step: frames past each utterance's length are zeroed."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, xs_pad: torch.Tensor, ilens: torch.Tensor) -> torch.Tensor:
        pad = make_pad_mask(ilens, xs_pad)
        return self.lin(xs_pad).masked_fill(pad.unsqueeze(-1), 0.0)


def padded_encoder() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(817)
    return PaddedEncoder(), (torch.randn(3, 6, 4), torch.tensor([6, 4, 2]))


class ReturnsCritic(nn.Module):
    """An actor-critic's value loss against discounted returns computed the way the first
    version of many RL repositories did: a Python loop over the rewards' numbers."""

    def __init__(self, gamma: float = 0.9) -> None:
        super().__init__()
        self.value = nn.Linear(3, 1)
        self.gamma = gamma

    def forward(self, states: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
        returns = []
        running = 0.0
        for r in reversed(rewards.tolist()):  # SITE: loop over the tensor's elements
            running = r + self.gamma * running
            returns.append(running)
        returns.reverse()
        targets = torch.tensor(returns, dtype=rewards.dtype)
        return F.mse_loss(self.value(states).squeeze(-1), targets)


def returns_critic() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(820)
    return ReturnsCritic(), (torch.randn(6, 3), torch.tensor([0.0, 1.0, 0.0, 0.5, 0.0, 1.0]))


class TrimmedPool(nn.Module):
    """A protein-sequence encoder that trims the padded batch to its longest sequence before
    embedding: padding embeds to zero (padding_idx) and is masked out of the mean."""

    def __init__(self, vocab: int = 8, dim: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim, padding_idx=0)
        self.conv = nn.Conv1d(dim, dim, 3, padding=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        lengths = (tokens != 0).sum(1)
        max_len = int(lengths.max())  # SITE: trim to the longest row dropped
        tokens = tokens[:, :max_len]
        pad = (tokens != 0).unsqueeze(1).float()
        h = (self.conv(self.embed(tokens).transpose(1, 2)) * pad).sum(-1)
        return h / lengths[:, None].clamp(min=1)


def trimmed_pool() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(821)
    return TrimmedPool(), (torch.tensor([[3, 1, 4, 0, 0, 0], [2, 7, 0, 0, 0, 0], [5, 5, 6, 1, 0, 0]]),)


class CtcHead(nn.Module):
    """A Hugging Face-style CTC head: labels padded with -100, the targets masked_select-ed into
    one flat tensor for ctc_loss."""

    def __init__(self, dim: int = 6, vocab: int = 5) -> None:
        super().__init__()
        self.lm_head = nn.Linear(dim, vocab)

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)
        input_lengths = attention_mask.sum(-1).to(torch.long)
        labels_mask = labels >= 0
        target_lengths = labels_mask.sum(-1)
        flattened_targets = labels.masked_select(labels_mask)  # SITE: padded targets to ctc_loss
        log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
        # ctc_loss breaks on its own too, whatever its targets (aten._ctc_loss.Tensor: an output shape from data)
        return F.ctc_loss(log_probs, flattened_targets, input_lengths, target_lengths, blank=0,  # SITE: none
                          reduction="mean", zero_infinity=True)


def ctc_head() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(822)
    mask = torch.tensor([[1] * 12, [1] * 9 + [0] * 3])
    labels = torch.tensor([[1, 2, 3, 2], [4, 1, -100, -100]])
    return CtcHead(), (torch.randn(2, 12, 6), mask, labels)


class SeparationMask(nn.Module):
    """A speech-separation loss over padded sources: each source's frames past its length masked,
    the mask built row by row over the batch (as SepFormer's recipe does)."""

    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, source: torch.Tensor, source_lengths: torch.Tensor) -> torch.Tensor:
        mask = source.new_ones(source.shape[:-1]).transpose(0, 1)  # (T, B)
        for i in range(source.size(0)):
            mask[source_lengths[i]:, i] = 0  # SITE: length mask instead of a loop over rows
        est = self.proj(source)
        return ((est - source) ** 2 * mask.transpose(0, 1)[..., None]).sum() / mask.sum()


def separation_mask() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(823)
    return SeparationMask(), (torch.randn(3, 7, 4), torch.tensor([7, 4, 5]))


class PromptMaskedLoss(nn.Module):
    """A supervised fine-tuning loss that leaves each example's prompt out: the loss mask's rows
    zipped with the prompts' lengths, each row's prompt positions cleared (OpenRLHF's SFT and DPO
    losses build it so)."""

    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
        logp = self.head(self.embed(ids[:, :-1])).log_softmax(-1)
        loss_mask = attention_mask.clone().bool()
        for row, prompt_len in zip(loss_mask, prompt_lens, strict=True):
            row[:prompt_len] = False  # SITE: length mask instead of a loop over lengths
        loss_mask = loss_mask[:, 1:]
        token_logp = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
        return -(token_logp * loss_mask).sum() / loss_mask.sum()


def prompt_masked_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(829)
    ids = torch.randint(0, 11, (3, 8))
    attention_mask = torch.ones(3, 8, dtype=torch.long)
    attention_mask[1, 6:] = 0
    return PromptMaskedLoss(), (ids, attention_mask, torch.tensor([2, 4, 3]))


class CaptionLoss(nn.Module):
    """A vision-language captioner's loss (LLaVA's shape): logits and labels shifted, selected
    where the attention mask is set (each moved to its tensor's device), then the cross-entropy
    module bound in ``forward``, after the ``if`` that selects."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.head = nn.Linear(8, 11)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor,
                attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        logits = self.head(torch.tanh(self.embed(input_ids)))
        if attention_mask is not None:
            shift_attention_mask = attention_mask[:, -(logits.shape[1] - 1):].to(logits.device)
            shift_logits = logits[..., :-1, :][shift_attention_mask.to(logits.device) != 0].contiguous()  # SITE: ignored targets instead of select
            shift_labels = labels[..., 1:][shift_attention_mask.to(labels.device) != 0].contiguous()  # SITE: gone with the verified patches
        else:
            shift_logits = logits[..., :-1, :].contiguous()
            shift_labels = labels[..., 1:].contiguous()
        loss_fct = nn.CrossEntropyLoss()
        return loss_fct(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1).to(shift_logits.device))


def caption_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(817)
    ids = torch.randint(0, 11, (3, 6))
    labels = ids.clone()
    labels[0, 1] = -100  # an image position: ignored by the loss already
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    return CaptionLoss(), (ids, labels, mask)


class DensifyStats(nn.Module):
    """Gaussian splatting's densification statistics: the largest screen radius each visible
    point reached, kept in a buffer, from radii the parameters make (they need a gradient)."""

    def __init__(self, points: int = 6) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, points))
        self.register_buffer("max_radii2D", torch.zeros(points))

    def forward(self, depth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        radii = self.scale * 3.0 / depth.clamp(min=0.2)
        visibility_filter = depth > 0.2
        self.max_radii2D[visibility_filter] = torch.max(self.max_radii2D[visibility_filter], radii[visibility_filter])  # SITE: where instead of masked assignment
        return radii.sum(), self.max_radii2D.clone()


def densify_stats() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(826)
    return DensifyStats(), (torch.tensor([1.0, 0.1, 2.0, 0.5, 0.05, 3.0]),)



class PositiveNegatives(nn.Module):
    """A masked-prediction contrastive head (HuBERT's shape): negatives that equal the positive
    get a logit of -inf, written only when some do."""

    def __init__(self, d: int = 6, temp: float = 0.1) -> None:
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.temp = temp

    def forward(self, x: torch.Tensor, pos: torch.Tensor, negs: torch.Tensor) -> torch.Tensor:
        neg_is_pos = (pos == negs).all(-1)
        targets = torch.cat([pos[None], negs], dim=0)
        logits = torch.cosine_similarity(self.proj(x)[None], targets, dim=-1) / self.temp
        if neg_is_pos.any():  # SITE: masked_fill for a write its test only guards
            logits[1:][neg_is_pos] = float("-inf")
        return F.cross_entropy(logits.T, torch.zeros(x.shape[0], dtype=torch.long))


def positive_negatives() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(833)
    x, pos = torch.randn(5, 6), torch.randn(5, 6)
    negs = torch.randn(3, 5, 6)
    negs[1, 2] = pos[2]  # a negative drawn from the positive's own frame
    return PositiveNegatives(), (x, pos, negs)


class RandomSegments(nn.Module):
    """A vocoder's training crop (VITS' and HiFi-GAN's shape): a random window of each utterance's
    frames, cut row by row from its own start."""

    def __init__(self, channels: int = 3, segment: int = 4) -> None:
        super().__init__()
        self.conv = nn.Conv1d(channels, channels, 3, padding=1)
        self.segment = segment

    def forward(self, x: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
        ret = torch.zeros_like(x[:, :, : self.segment])
        for i in range(x.size(0)):
            start = starts[i]
            end = start + self.segment
            ret[i] = x[i, :, start:end]  # SITE: gather of windows instead of a loop over rows
        return self.conv(ret).tanh().sum()


def random_segments() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(839)
    return RandomSegments(), (torch.randn(3, 3, 10, requires_grad=True), torch.tensor([0, 5, 2]))


class DelayAggregation(nn.Module):
    """A forecaster's auto-correlation block (Autoformer's shape): the series rolled back by each
    of the top delays, the delays read back as numbers, the rolls weighted."""

    def __init__(self, top_k: int = 2) -> None:
        super().__init__()
        self.top_k = top_k
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, values: torch.Tensor, corr: torch.Tensor) -> torch.Tensor:
        weights, index = torch.topk(corr.mean(0), self.top_k)
        out = torch.zeros_like(values)
        for i in range(self.top_k):
            pattern = torch.roll(values, -int(index[i]), -1)  # SITE: gather instead of a roll by a tensor
            out = out + pattern * weights[i] * self.scale
        return out


def delay_aggregation() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(841)
    return DelayAggregation(), (torch.randn(2, 3, 8), torch.randn(2, 8))


class DelayWeights(nn.Module):
    """The weights of a forecaster's top delays (Autoformer's shape): each delay's column of the
    batch's correlations picked one index at a time and stacked."""

    def __init__(self, top_k: int = 3) -> None:
        super().__init__()
        self.top_k = top_k
        self.temp = nn.Parameter(torch.ones(1))

    def forward(self, corr: torch.Tensor) -> torch.Tensor:
        mean_value = corr.mean(1)
        index = torch.topk(mean_value.mean(0), self.top_k, dim=-1)[1]
        weights = torch.stack([mean_value[:, index[i]] for i in range(self.top_k)], dim=-1)  # SITE: one index instead of picks stacked
        return torch.softmax(weights / self.temp, dim=-1)


def delay_weights() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(843)
    return DelayWeights(), (torch.randn(2, 4, 9),)


class DistinctItemTower(nn.Module):
    """An in-batch-negatives retrieval loss whose item tower embeds each distinct item once and
    spreads the embeddings back to the batch by the inverse of ``torch.unique``."""

    def __init__(self, items: int = 12, d: int = 6) -> None:
        super().__init__()
        self.user = nn.Linear(d, d)
        self.item = nn.Embedding(items, d)
        self.proj = nn.Linear(d, d)

    def forward(self, users: torch.Tensor, item_ids: torch.Tensor) -> torch.Tensor:
        unique_items, inverse = torch.unique(item_ids, return_inverse=True)  # SITE: every row instead of the distinct ones
        items = self.proj(self.item(unique_items)).tanh()[inverse]
        scores = self.user(users) @ items.T
        return F.cross_entropy(scores, torch.arange(users.shape[0]))


def distinct_item_tower() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(845)
    return DistinctItemTower(), (torch.randn(5, 6), torch.tensor([3, 7, 3, 1, 7]))


DEBUG = False


class CheckedRenderer(nn.Module):
    """A volume renderer's outputs checked for NaN and inf behind a module-level debug flag, the
    flag tested last (NeRF's reference code)."""

    def __init__(self, d: int = 4) -> None:
        super().__init__()
        self.rgb = nn.Linear(d, 3)

    def forward(self, feats: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        rgb = (weights[..., None] * torch.sigmoid(self.rgb(feats))).sum(-2)
        if (torch.isnan(rgb).any() or torch.isinf(rgb).any()) and DEBUG:  # SITE: flag tested first
            print("! [Numerical Error] rgb contains nan or inf.")
        return rgb


def checked_renderer() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(847)
    return CheckedRenderer(), (torch.randn(3, 5, 4), torch.rand(3, 5))


def _paired_giou(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-7) -> torch.Tensor:
    """Generalised IoU of boxes paired row by row, (x1, y1, x2, y2) each: one value a row, (..., 1)."""
    lo, hi = torch.max(a[..., :2], b[..., :2]), torch.min(a[..., 2:], b[..., 2:])
    inter = (hi - lo).clamp(min=0).prod(-1, keepdim=True)
    union = (a[..., 2:] - a[..., :2]).prod(-1, keepdim=True) + (b[..., 2:] - b[..., :2]).prod(-1, keepdim=True) - inter
    hull = (torch.max(a[..., 2:], b[..., 2:]) - torch.min(a[..., :2], b[..., :2])).prod(-1, keepdim=True)
    return inter / (union + eps) - (hull - union) / (hull + eps)


class ForegroundBoxLoss(nn.Module):
    """An anchor-based detector's box and side-distribution losses over its foreground anchors,
    each weighted by the anchor's assigned score (a task-aligned detector's loss, in our words):
    the selections go through a helper and a submodule before they are summed."""

    def __init__(self, dim: int = 8, bins: int = 6) -> None:
        super().__init__()
        self.bins = bins
        self.box = nn.Linear(dim, 4)
        self.sides = nn.Linear(dim, 4 * bins) if bins > 1 else None

    def _side_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # a distribution over bins per side: the two bins around the target, linearly weighted
        left = target.long()
        w_right = target - left
        ce = F.cross_entropy(logits, left.view(-1), reduction="none").view(left.shape) * (1 - w_right)
        ce = ce + F.cross_entropy(logits, (left + 1).view(-1), reduction="none").view(left.shape) * w_right
        return ce.mean(-1, keepdim=True)

    def forward(self, feats: torch.Tensor, anchors: torch.Tensor, target_boxes: torch.Tensor,
                target_scores: torch.Tensor, fg_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = self.box(feats).exp()
        pred_boxes = torch.cat([anchors - offsets[..., :2], anchors + offsets[..., 2:]], -1)
        total = target_scores.sum().clamp(min=1)
        weight = target_scores.sum(-1)[fg_mask].unsqueeze(-1)  # SITE: masked reductions of a selection bound to a name
        giou = _paired_giou(pred_boxes[fg_mask], target_boxes[fg_mask])  # SITE: gone with the verified patches
        pred_fg = pred_boxes[fg_mask]  # SITE: gone with the verified patches
        target_fg = target_boxes[fg_mask]  # SITE: gone with the verified patches
        shift = (pred_fg[..., :2] + pred_fg[..., 2:] - target_fg[..., :2] - target_fg[..., 2:]) / 2
        loss_box = ((1.0 - giou) * weight).sum() / total + ((shift ** 2).sum(-1, keepdim=True) * weight).sum() / total
        if self.sides is not None:
            sides = torch.cat([anchors - target_boxes[..., :2], target_boxes[..., 2:] - anchors], -1)
            sides = sides.clamp(0, self.bins - 1.01)
            loss_sides = self._side_loss(self.sides(feats)[fg_mask].view(-1, self.bins), sides[fg_mask]) * weight  # SITE: gone with the verified patches
            loss_sides = loss_sides.sum() / total
        else:
            loss_sides = total * 0
        return loss_box, loss_sides


def foreground_box_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(849)
    g = torch.Generator().manual_seed(850)
    anchors = torch.rand(2, 10, 2, generator=g) * 4 + 1
    half = torch.rand(2, 10, 2, generator=g) + 0.5
    target_boxes = torch.cat([anchors - half, anchors + half], -1)
    fg = torch.rand(2, 10, generator=g) > 0.5
    scores = torch.rand(2, 10, 3, generator=g) * fg[..., None]
    return ForegroundBoxLoss(), (torch.randn(2, 10, 8, generator=g), anchors, target_boxes, scores, fg)


class PartSegmentLoss(nn.Module):
    """A point-cloud part segmenter's loss over the labelled points only (-1 where a point was not
    annotated): cross-entropy plus a soft Jaccard per part, from the selected points' probabilities
    and one-hot labels."""

    def __init__(self, dim: int = 5, parts: int = 3) -> None:
        super().__init__()
        self.parts = parts
        self.head = nn.Sequential(nn.Linear(dim, 8), nn.ReLU(), nn.Linear(8, parts))

    def forward(self, points: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        scores = self.head(points)
        known = labels >= 0
        scores_known = scores[known]  # SITE: masked reductions of a selection bound to a name
        labels_known = labels[known]  # SITE: gone with the verified patches
        ce = F.cross_entropy(scores_known, labels_known)
        probs = scores_known.softmax(-1)
        truth = F.one_hot(labels_known, self.parts).to(probs.dtype)
        overlap = (probs * truth).sum(0)
        either = (probs + truth).sum(0) - overlap
        return ce + (1.0 - (overlap + 1.0) / (either + 1.0)).mean()


def part_segment_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(851)
    g = torch.Generator().manual_seed(852)
    labels = torch.randint(0, 3, (2, 16), generator=g)
    labels[torch.rand(2, 16, generator=g) < 0.3] = -1
    return PartSegmentLoss(), (torch.randn(2, 16, 5, generator=g), labels)


class UnsureTokenRefiner(nn.Module):
    """A decoder step that refines only the tokens it is unsure of: their states pass an extra MLP,
    scaled by a gate, and are written back (a mixture-of-depths or early-exit step, in our words)."""

    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.score, self.gate = nn.Linear(d, 1), nn.Linear(d, 1)
        self.refine = nn.Sequential(nn.Linear(d, 16), nn.GELU(), nn.Linear(16, d))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        unsure = torch.sigmoid(self.score(h.detach())).squeeze(-1) < 0.5
        hard = h[unsure]  # SITE: selections bound to names, every row computed and written back through the mask
        gate = self.gate(h).squeeze(-1)[unsure]  # SITE: gone with the verified patches
        out = h.clone()
        out[unsure] = hard + torch.tanh(gate).unsqueeze(-1) * self.refine(hard)
        return out


def unsure_token_refiner() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(853)
    return UnsureTokenRefiner(), (torch.randn(2, 6, 8, generator=torch.Generator().manual_seed(854)),)


class ReplacedTokenHead(nn.Module):
    """A replaced-token detector's loss and metrics (ELECTRA-style, in our words): a per-token
    binary loss over the positions that are not padding, found as a nonzero index tuple, and the
    detector's accuracy over the corrupted and the kept tokens, each a mean of comparisons."""

    def __init__(self, vocab: int = 12, d: int = 8, pad: int = 0) -> None:
        super().__init__()
        self.embed, self.head, self.pad = nn.Embedding(vocab, d), nn.Linear(d, 1), pad

    def forward(self, tokens: torch.Tensor, corrupted: torch.Tensor) -> tuple[torch.Tensor, ...]:
        logits = self.head(self.embed(tokens)).squeeze(-1)
        replaced = (corrupted > 0.5).float()
        real = torch.nonzero(tokens != self.pad, as_tuple=True)  # SITE: boolean mask instead of a nonzero index tuple
        loss = F.binary_cross_entropy_with_logits(logits[real], replaced[real])
        guess = (logits > 0).float()
        hit_rate = (guess[corrupted > 0.5] == replaced[corrupted > 0.5]).float().mean()  # SITE: masked reduction inline
        return loss, hit_rate


def replaced_token_head() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(861)
    g = torch.Generator().manual_seed(862)
    tokens = torch.randint(1, 12, (3, 7), generator=g)
    tokens[0, 5:] = 0
    tokens[2, 3:] = 0
    return ReplacedTokenHead(), (tokens, torch.rand(3, 7, generator=g))



class ConfidentLabelBank(nn.Module):
    """Semi-supervised pseudo-labels kept per example (FlexMatch-style bookkeeping, in our words): the
    labels of the confident examples of a batch are written into a bank by their dataset indices, and
    the bank's class shares weight the unlabelled loss."""

    def __init__(self, n_examples: int = 20, classes: int = 4) -> None:
        super().__init__()
        self.head = nn.Linear(6, classes)
        self.register_buffer("bank", torch.full((n_examples,), classes, dtype=torch.long))
        self.classes = classes

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        logits = self.head(x)
        probs, labels = logits.detach().softmax(-1).max(-1)
        confident = probs > 0.3
        if idx[confident].numel() > 0:  # SITE: every indexed row written, the old value kept where the mask is false
            self.bank[idx[confident]] = labels[confident]  # SITE: gone with the verified patches
        seen = F.one_hot(self.bank, self.classes + 1)[:, : self.classes].float().sum(0)
        weight = 1.0 + seen / (seen.sum() + 1.0)
        return (F.cross_entropy(logits, labels, reduction="none") * weight[labels]).mean()


def confident_label_bank() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(871)
    g = torch.Generator().manual_seed(872)
    return ConfidentLabelBank(), (torch.randn(8, 6, generator=g) * 2, torch.randperm(20, generator=g)[:8])


class OneHotTargets(nn.Module):
    """A dense detector's classification targets (FCOS- and RetinaNet-style, in our words): each
    foreground anchor's class set to 1 in a zero target map, background anchors (class -1) left
    at 0, then a summed focal-style BCE normalised by the foreground count."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.cls = nn.Linear(8, classes)

    def forward(self, feats: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        logits = self.cls(feats)
        fg = classes >= 0
        targets = torch.zeros_like(logits)
        targets[fg, classes[fg]] = 1.0  # SITE: where instead of masked assignment
        return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / fg.sum().clamp(min=1)


def one_hot_targets() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(881)
    g = torch.Generator().manual_seed(882)
    classes = torch.randint(-1, 5, (2, 6), generator=g)
    return OneHotTargets(), (torch.randn(2, 6, 8, generator=g), classes)


def _box_l1(pred: torch.Tensor, target: torch.Tensor, reduction: str = "none") -> torch.Tensor:
    """One L1 distance per box, summed over its four sides; reduced as asked (torchvision's
    box losses take ``reduction`` the same way)."""
    loss = (pred - target).abs().sum(-1)
    if reduction == "sum":
        return loss.sum()
    return loss.mean() if reduction == "mean" else loss


class SummedBoxLoss(nn.Module):
    """The foreground anchors' box regression through a box loss of the project's own that
    takes ``reduction=`` (a detector's loss head, in our words)."""

    def __init__(self) -> None:
        super().__init__()
        self.reg = nn.Linear(8, 4)

    def forward(self, feats: torch.Tensor, classes: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        pred = self.reg(feats)
        fg = classes >= 0
        return _box_l1(pred[fg], boxes[fg], reduction="sum")  # SITE: masked loss instead of select


def summed_box_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(883)
    g = torch.Generator().manual_seed(884)
    return SummedBoxLoss(), (torch.randn(2, 6, 8, generator=g), torch.randint(-1, 3, (2, 6), generator=g),
                             torch.rand(2, 6, 4, generator=g))


class CompletionLogits(nn.Module):
    """A preference step's logged statistics (TRL-style, in our words): the mean logit over the
    completion tokens of the chosen half of the batch, kept in a dict of outputs."""

    def __init__(self, vocab: int = 11) -> None:
        super().__init__()
        self.lm = nn.Linear(6, vocab)

    def forward(self, h: torch.Tensor, completion: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.lm(h)
        n = h.shape[0] // 2
        loss_mask = completion.bool()
        output = {"logps": logits.log_softmax(-1).amax(-1).sum(-1)}
        output["mean_chosen_logits"] = logits[:n][loss_mask[:n]].mean()  # SITE: masked reduction inline
        return output


def completion_logits() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(885)
    g = torch.Generator().manual_seed(886)
    completion = (torch.arange(5)[None] >= torch.tensor([[1], [2], [0], [3]])).long()
    return CompletionLogits(), (torch.randn(4, 5, 6, generator=g), completion)


class SampledAttention(nn.Module):
    """ProbSparse-style attention (Informer's, in our words): how many queries to keep is
    ``c * ceil(ln L)``, computed with numpy on the sequence length."""

    def __init__(self, factor: int = 2) -> None:
        super().__init__()
        self.factor = factor
        self.q = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, length, _ = x.shape
        u = self.factor * np.ceil(np.log(length)).astype("int").item()  # SITE: int() of a numpy number instead of its item
        u = min(u, length)
        scores = self.q(x).norm(dim=-1)
        return scores.topk(u, dim=-1).values.sum()


def sampled_attention() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(887)
    return SampledAttention(), (torch.randn(2, 9, 6),)


class RoutedExperts(nn.Module):
    """Top-1 routing over a list of experts (Switch-style, in our words): each expert runs on the
    tokens routed to it, written back in place; an expert no token chose is skipped."""

    def __init__(self, d: int = 6, n: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Linear(d, d) for _ in range(n))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        probs = self.router(h).softmax(-1)
        route = F.one_hot(probs.argmax(-1), probs.shape[-1]).bool()
        out = h.clone()
        hit = torch.nonzero(route.flatten(0, -2).sum(0), as_tuple=True)[0].tolist()  # SITE: every index visited instead of the nonzero ones
        for e in hit:
            out[route[..., e]] = self.experts[e](h[route[..., e]])  # SITE: where instead of masked assignment
        return out * probs.amax(-1, keepdim=True)


def routed_experts() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(889)
    return RoutedExperts(), (torch.randn(2, 5, 6),)


class NamedExperts(nn.Module):
    """Routed experts kept by name (Hugging Face Switch Transformers' ``expert_{i}`` keys, in
    our words): the expert is found with an f-string of the index, which breaks first while the
    index comes from a list; visited every one, the masked write behind it breaks instead."""

    def __init__(self, d: int = 6, n: int = 3) -> None:
        super().__init__()
        self.router = nn.Linear(d, n)
        self.experts = nn.ModuleDict({f"expert_{i}": nn.Linear(d, d) for i in range(n)})

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        route = F.one_hot(self.router(h).argmax(-1), len(self.experts)).bool()
        out = h.clone()
        hit = torch.nonzero(route.flatten(0, -2).sum(0), as_tuple=True)[0].tolist()  # SITE: every index visited instead of the nonzero ones, then where instead of masked assignment
        for e in hit:
            out[route[..., e]] = getattr(self.experts, f"expert_{e}")(h[route[..., e]])  # SITE: gone with the verified patches
        return out


def named_experts() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(891)
    return NamedExperts(), (torch.randn(2, 5, 6),)


class MaskedActionLoss(nn.Module):
    """A trajectory model's train step in the shape sequence-modelling RL trainers have (in our
    words): the criterion is a lambda the trainer keeps, the padded steps are dropped by a
    flattened mask before it, and the action error is measured again under ``no_grad`` with
    torch's function form of the mean."""

    def __init__(self, d: int = 5, act: int = 2) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 16), nn.Tanh(), nn.Linear(16, act))
        self.loss_fn = lambda a_hat, a, weight: torch.mean((a_hat - a) ** 2) * weight

    def forward(self, states: torch.Tensor, actions: torch.Tensor, pad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        preds = self.net(states)
        act = preds.shape[-1]
        preds = preds.reshape(-1, act)[pad.reshape(-1) > 0]  # SITE: masked reductions of a selection bound to a name
        target = actions.reshape(-1, act)[pad.reshape(-1) > 0]  # SITE: gone with the verified patches
        loss = self.loss_fn(preds, target, 0.5)
        with torch.no_grad():
            error = torch.mean((preds - target) ** 2).detach()
        return loss, error


def masked_action_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(893)
    pad = torch.ones(3, 6)
    pad[0, :2] = 0  # left padding, as the batch sampler writes it
    pad[2, :4] = 0
    return MaskedActionLoss(), (torch.randn(3, 6, 5), torch.randn(3, 6, 2), pad)


class CountedTokenLoss(nn.Module):
    """A sequence model's criterion that also reports how many tokens it got right (translation
    toolkits' label-smoothed loss, in our words): the hits counted over the non-padding targets
    with ``masked_select`` and the ``.eq`` method."""

    def __init__(self, vocab: int = 10, d: int = 8, pad: int = 0) -> None:
        super().__init__()
        self.embed, self.out, self.pad = nn.Embedding(vocab, d), nn.Linear(d, vocab), pad

    def forward(self, tokens: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
        lprobs = F.log_softmax(self.out(self.embed(tokens)), dim=-1).view(-1, self.out.out_features)
        target = target.view(-1)
        loss = F.nll_loss(lprobs, target, ignore_index=self.pad, reduction="sum")
        mask = target.ne(self.pad)
        n_correct = torch.sum(lprobs.argmax(1).masked_select(mask).eq(target.masked_select(mask)))  # SITE: masked reduction inline
        total = torch.sum(mask)
        return loss, n_correct, total


def counted_token_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(871)
    g = torch.Generator().manual_seed(872)
    target = torch.randint(1, 10, (3, 6), generator=g)
    target[1, 4:] = 0
    return CountedTokenLoss(), (torch.randint(1, 10, (3, 6), generator=g), target)


class QualityMatcher(nn.Module):
    """Anchor labels from box overlaps, as two-stage detectors match them (in our words): each
    anchor positive above a threshold, and every anchor holding some box's best overlap made
    positive too (the low-quality matches), found by ``torch.nonzero`` of the ties."""

    def __init__(self, threshold: float = 0.6) -> None:
        super().__init__()
        self.score = nn.Linear(4, 1)
        self.threshold = threshold

    def forward(self, quality: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        labels = (quality.max(dim=0).values >= self.threshold).long()
        best_per_box, _ = quality.max(dim=1)
        ties = torch.nonzero(quality == best_per_box[:, None])  # SITE: the rows a nonzero column names as a mask
        # the anchors of those pairs
        anchor_ids = ties[:, 1]
        labels[anchor_ids] = 1
        return F.binary_cross_entropy_with_logits(self.score(anchors).squeeze(-1), labels.float())


def quality_matcher() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(877)
    quality = torch.rand(3, 10)
    quality[1, 4] = quality[1].max()  # a tie: one box's best overlap at two anchors
    quality[1, 7] = quality[1, 4]
    return QualityMatcher(), (quality, torch.randn(10, 4))


class MultiBox(nn.Module):
    """A single-shot detector's loss (in our words, as SSD implementations write it): the
    confidences of the mined priors selected and viewed as rows of classes for a summed cross
    entropy, the box offsets of the positives selected and viewed as rows of four for a summed
    smooth L1, both divided by how many positives there are (the selection's row count)."""

    def __init__(self) -> None:
        super().__init__()
        self.conf = nn.Linear(6, 3)
        self.loc = nn.Linear(6, 4)

    def forward(self, feats: torch.Tensor, labels: torch.Tensor, boxes: torch.Tensor,
                mined: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        confidence, locations = self.conf(feats), self.loc(feats)
        num_classes = confidence.size(2)
        confidence = confidence[mined, :]  # SITE: masked reductions of a selection bound to a name
        class_loss = F.cross_entropy(confidence.view(-1, num_classes), labels[mined], reduction="sum")  # SITE: gone with the verified patches
        positive = labels > 0
        locations = locations[positive, :].view(-1, 4)  # SITE: masked reductions of a selection bound to a name
        boxes = boxes[positive, :].view(-1, 4)  # SITE: gone with the verified patches
        box_loss = F.smooth_l1_loss(locations, boxes, reduction="sum")
        num_pos = boxes.size(0)
        return box_loss / num_pos, class_loss / num_pos


def multibox() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(941)
    labels = torch.randint(0, 3, (2, 10))
    labels[:, 0] = 1  # a positive in every image
    mined = (labels > 0) | (torch.rand(2, 10) < 0.3)
    return MultiBox(), (torch.randn(2, 10, 6), labels, torch.randn(2, 10, 4), mined)



class FocalMatchLoss(nn.Module):
    """A feature matcher's coarse focal loss (LoFTR's shape): one term over the ground truth's
    matches and one over its non-matches, each weighted by the same selection of the padding
    weights when there are any, then averaged. The two selections sit on consecutive lines: the
    first's rewrite carries the second's lines over as they were, so both are one patch."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.alpha, self.gamma = 0.25, 2.0

    def forward(self, f0: torch.Tensor, f1: torch.Tensor, gt: torch.Tensor,
                weight: torch.Tensor | None) -> torch.Tensor:
        sim = torch.einsum("nlc,nsc->nls", self.proj(f0), self.proj(f1))
        conf = torch.clamp(sim.softmax(1) * sim.softmax(2), 1e-6, 1 - 1e-6)
        pos_mask, neg_mask = gt == 1, gt == 0
        alpha, gamma = self.alpha, self.gamma
        loss_pos = -alpha * torch.pow(1 - conf[pos_mask], gamma) * conf[pos_mask].log()  # SITE: masked reductions of a selection bound to a name
        loss_neg = -alpha * torch.pow(conf[neg_mask], gamma) * (1 - conf[neg_mask]).log()  # SITE: gone with the verified patches
        if weight is not None:
            loss_pos = loss_pos * weight[pos_mask]  # SITE: gone with the verified patches
            loss_neg = loss_neg * weight[neg_mask]  # SITE: gone with the verified patches
        return loss_pos.mean() + loss_neg.mean()


def focal_match_loss() -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(952)
    gt = torch.zeros(2, 6, 6)
    gt[0, torch.arange(5), torch.arange(5) + 1] = 1.0
    gt[1, torch.arange(0, 6, 2), torch.arange(0, 6, 2)] = 1.0
    weight = (torch.rand(2, 6, 6) > 0.1).float()
    return FocalMatchLoss(), (torch.randn(2, 6, 8), torch.randn(2, 6, 8), gt, weight)



class BatchHardTriplet(nn.Module):
    """A re-identification triplet loss with batch-hard mining (in our words, as the ReID
    baselines write it): each anchor's farthest positive and nearest negative, the selections
    regrouped into rows of the same count, then a margin ranking loss whose target is made by the
    old ``Tensor.new`` idiom."""

    def __init__(self, dim: int = 6, margin: float = 0.3) -> None:
        super().__init__()
        self.embed = nn.Linear(dim, 4)
        self.margin = margin

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        feats = self.embed(x)
        dist_mat = torch.cdist(feats, feats)
        n = dist_mat.size(0)
        is_pos = labels.expand(n, n).eq(labels.expand(n, n).t())
        is_neg = labels.expand(n, n).ne(labels.expand(n, n).t())
        dist_ap, relative_p_inds = torch.max(dist_mat[is_pos].contiguous().view(n, -1), 1, keepdim=True)  # SITE: masked max or min over rows instead of select
        dist_an, relative_n_inds = torch.min(dist_mat[is_neg].contiguous().view(n, -1), 1, keepdim=True)  # SITE: masked max or min over rows instead of select
        dist_ap, dist_an = dist_ap.squeeze(1), dist_an.squeeze(1)
        y = dist_an.new().resize_as_(dist_an).fill_(1)  # SITE: new_zeros / full_like instead of Tensor.new
        return F.margin_ranking_loss(dist_an, dist_ap, y, margin=self.margin)


def batch_hard_triplet() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(966)
    return BatchHardTriplet(), (_x(6, 6), torch.tensor([0, 0, 1, 1, 2, 2]))

PROGRAMS: dict[str, Any] = {
    "quality_matcher": quality_matcher,
    "counted_token_loss": counted_token_loss,
    "finite_target_regression": finite_target_regression,
    "padded_token_loss": padded_token_loss,
    "positive_anchor_box_loss": positive_anchor_box_loss,
    "gappy_log_cosh_loss": gappy_log_cosh_loss,
    "banned_token_penalty": banned_token_penalty,
    "teacher_forced": teacher_forced,
    "selected_features": selected_features,
    "per_token_losses": per_token_losses,
    "log_ratio_loss": log_ratio_loss,
    "class_balanced_weights": class_balanced_weights,
    "negative_queue": negative_queue,
    "duration_loss": duration_loss,
    "caption_loss": caption_loss,
    "densify_stats": densify_stats,
    "padded_encoder": padded_encoder,
    "returns_critic": returns_critic,
    "trimmed_pool": trimmed_pool,
    "ctc_head": ctc_head,
    "separation_mask": separation_mask,
    "prompt_masked_loss": prompt_masked_loss,
    "positive_negatives": positive_negatives,
    "random_segments": random_segments,
    "delay_aggregation": delay_aggregation,
    "delay_weights": delay_weights,
    "distinct_item_tower": distinct_item_tower,
    "checked_renderer": checked_renderer,
    "foreground_box_loss": foreground_box_loss,
    "part_segment_loss": part_segment_loss,
    "unsure_token_refiner": unsure_token_refiner,
    "replaced_token_head": replaced_token_head,
    "confident_label_bank": confident_label_bank,
    "one_hot_targets": one_hot_targets,
    "summed_box_loss": summed_box_loss,
    "completion_logits": completion_logits,
    "sampled_attention": sampled_attention,
    "routed_experts": routed_experts,
    "named_experts": named_experts,
    "masked_action_loss": masked_action_loss,
    "multibox": multibox,
    "focal_match_loss": focal_match_loss,
    "batch_hard_triplet": batch_hard_triplet,
}
