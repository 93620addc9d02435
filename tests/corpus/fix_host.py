"""Host round trips and data-dependent selections, in the shapes real code has them, for
``dynscope.fix`` (dynscope/_capture/fix/host.py).

Numpy in a model's head and in metric code, ``.tolist()`` lengths of a ragged pooling,
selections that are only reduced (a masked token loss, confidence statistics), detection
post-processing with ``nonzero``, mixture-of-experts loops that gather each expert's tokens,
``math.*`` of ``.item()``, and schedules numpy computes from plain numbers (in a module's
forward, and in a closure a factory made that the module holds). Each break site carries ``# SITE: <rewrite>``, or
``# SITE: none`` where no patch may be verified (a rewrite that would change outputs, a
filtered tensor that is returned). Imports only torch, numpy and the standard library: fix
imports patched copies of this file from hidden files beside it.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- numpy round trips ---------------------------------------------------------------------------


class NumpyScaledHead(nn.Module):
    """A head whose features are scaled by an RMS computed in numpy (ported preprocessing)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        a = h.detach().cpu().numpy()
        scale = float(np.sqrt(np.mean(np.square(a))) + 1e-6)  # SITE: torch ops instead of numpy
        clipped = np.clip(a / scale, -2.0, 2.0)
        return h / scale + torch.from_numpy(clipped)


def numpy_head() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return NumpyScaledHead(), _x(4, 8)


class RetrievalScores(nn.Module):
    """Cosine similarities thresholded in numpy (retrieval evaluation code moved into forward)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        emb = self.proj(x)
        a = emb.detach().cpu().numpy()
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        sims = a @ a.T
        sims[sims < 0.2] = 0.0
        top = float(sims.sum(axis=1).max())  # SITE: torch ops instead of numpy
        return emb * torch.from_numpy(sims).sum(1, keepdim=True) / top


def retrieval() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return RetrievalScores(), _x(5, 8)


def row_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Metric code: a per-row error ignoring outliers (nanmean: not in torch._numpy)."""
    err = (pred - target).abs().detach().cpu().numpy()
    err = np.where(err > 4.0, np.nan, err)
    per_row = np.nanmean(err, axis=1)  # SITE: torch ops instead of numpy
    spread = np.std(per_row, ddof=1)
    return pred.mean(1) * torch.tensor(per_row) + torch.as_tensor(spread)


def numpy_metric() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return row_error, (_x(4, 6), _x(4, 6, seed=1))


def median_centred(x: torch.Tensor) -> torch.Tensor:
    """numpy's median of an even count averages the two middle values; torch.median takes
    the lower one: a translation to torch would change it, numpy's own value kept does not."""
    a = x.detach().cpu().numpy()
    mid = float(np.median(a))  # SITE: numpy value kept an array
    return x - mid


def numpy_median() -> tuple[Any, torch.Tensor]:
    return median_centred, _x(4, 6)


# -- ragged pooling over .tolist() lengths -------------------------------------------------------


class MeanPooler(nn.Module):
    """Sentence-embedding mean pooling over each sequence's real tokens (right padding)."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(1).tolist()  # SITE: masked segment reduction
        pooled = torch.stack([h[i, :n].mean(0) for i, n in enumerate(lengths)])
        return self.dense(pooled).tanh()


def mean_pooling() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]])
    return MeanPooler(), (_x(3, 5, 8), mask)


def packed_max(flat: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Max pooling over a packed batch (graph nodes, variable-length sequences)."""
    sizes = lengths.tolist()  # SITE: masked segment reduction
    parts = torch.split(flat, sizes)
    return torch.stack([p.amax(0) for p in parts])


def packed_pooling() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return packed_max, (_x(9, 4), torch.tensor([3, 5, 1]))


def summed_prefixes(h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    counts = lengths.tolist()  # SITE: masked segment reduction
    return torch.stack([t[:n].sum(0) for t, n in zip(h, counts, strict=True)])


def sum_pooling() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return summed_prefixes, (_x(3, 4, 2), torch.tensor([2, 4, 1]))


class LoopPooler(nn.Module):
    """The same pooling written as a loop that appends to a list, the lengths read on the CPU."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.out = nn.Linear(dim, 2)

    def forward(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(-1).cpu().tolist()  # SITE: masked segment reduction
        pooled = []
        for i, n in enumerate(lengths):
            pooled.append(h[i, :n].mean(dim=0))
        return self.out(torch.stack(pooled, dim=0))


def loop_pooling() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    return LoopPooler(), (_x(3, 4, 8), mask)


# -- select, then reduce ---------------------------------------------------------------------------


class TokenLoss(nn.Module):
    """A masked language-model loss: the loss of the labelled tokens only (-100 ignored)."""

    def __init__(self, dim: int = 8, vocab: int = 6) -> None:
        super().__init__()
        self.head = nn.Linear(dim, vocab)

    def forward(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.head(hidden)
        losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten().clamp(min=0), reduction="none")
        active = labels.flatten() != -100
        picked = losses[active]  # SITE: masked reduction instead of select
        return picked.sum() / picked.numel()


def token_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    labels = torch.tensor([[1, 2, -100, 0], [5, -100, -100, 3]])
    return TokenLoss(), (_x(2, 4, 8), labels)


def confident_stats(probs: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Calibration statistics over the confident predictions."""
    top = probs.softmax(-1).amax(-1)
    sure = top[top > threshold]  # SITE: masked reduction instead of select
    return sure.mean() + sure.max() * len(sure) / top.numel()


def confidence() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return confident_stats, (_x(6, 3), torch.tensor(0.45))


def class_range(labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Integer labels: max fills with -inf, a float: the masked max is not the selection's dtype."""
    seen = labels[valid]  # SITE: none
    return seen.max() - seen.min()


def label_range() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return class_range, (torch.tensor([3, 1, 4, 1, 5]), torch.tensor([True, False, True, True, False]))


# -- detection post-processing ---------------------------------------------------------------------


class ScoreFilter(nn.Module):
    """Detection head statistics over the boxes that pass the score threshold."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.cls = nn.Linear(dim, 1)
        self.reg = nn.Linear(dim, 4)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        scores = self.cls(feats).squeeze(-1).sigmoid()
        boxes = self.reg(feats)
        keep = (scores > 0.5).nonzero().squeeze(1)  # SITE: mask instead of nonzero
        kept = boxes[keep]
        mean_box = kept.sum(0) / len(keep)
        return mean_box * scores[keep].amax()


def score_filter() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return ScoreFilter(), _x(7, 8)


def postprocess(scores: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept boxes are the output: their number is the data's."""
    keep = torch.where(scores > 0.5)[0]  # SITE: none
    return boxes[keep], scores[keep]


def detections() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return postprocess, (torch.rand(6, generator=torch.Generator().manual_seed(0)), _x(6, 4))


# -- mixture of experts ----------------------------------------------------------------------------


class SparseMoE(nn.Module):
    """Top-2 routing as Mixtral's sparse block writes it: each expert on the tokens routed to it."""

    def __init__(self, dim: int = 8, experts: int = 3, top_k: int = 2) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, 16), nn.SiLU(), nn.Linear(16, dim))
                                     for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        routing = self.gate(x).softmax(-1)
        weights, selected = routing.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        expert_mask = F.one_hot(selected, num_classes=len(self.experts)).permute(2, 1, 0)
        for e, expert in enumerate(self.experts):
            slot, token = torch.where(expert_mask[e])  # SITE: dense expert routing
            current = expert(x[None, token].reshape(-1, x.shape[-1])) * weights[token, slot, None]
            out.index_add_(0, token, current.to(x.dtype))
        return out


def sparse_moe() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SparseMoE(), _x(6, 8)


class WeightedExpert(nn.Module):
    """An expert that scales its output by the routing weight it is handed (Mixtral's MLP before 4.40)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, 12, bias=False), nn.Linear(12, dim, bias=False)

    def forward(self, hidden: torch.Tensor, routing_weights: torch.Tensor) -> torch.Tensor:
        return routing_weights * self.w2(F.silu(self.w1(hidden)))


class ListedMoE(nn.Module):
    """Mixtral's sparse block as HF wrote it before 4.40: the token indices made lists ("faster
    to index using lists"), an expert skipped when no token is routed to it."""

    def __init__(self, dim: int = 8, experts: int = 4, top_k: int = 2) -> None:
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(dim, experts, bias=False)
        self.experts = nn.ModuleList(WeightedExpert(dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        routing = F.softmax(self.gate(x), dim=1, dtype=torch.float)
        weights, selected = torch.topk(routing, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        expert_mask = F.one_hot(selected, num_classes=len(self.experts)).permute(2, 1, 0)
        for e in range(len(self.experts)):
            expert_layer = self.experts[e]
            idx, top_x = torch.where(expert_mask[e])  # SITE: dense expert routing
            if top_x.shape[0] == 0:
                continue
            top_x_list = top_x.tolist()
            idx_list = idx.tolist()
            current_state = x[None, top_x_list].reshape(-1, x.shape[-1])
            current = expert_layer(current_state, weights[top_x_list, idx_list, None])
            out.index_add_(0, top_x, current.to(x.dtype))
        return out


def listed_moe() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(1)
    return ListedMoE(), _x(7, 8)


class SwitchMoE(nn.Module):
    """Top-1 (Switch) routing with the gate value scaling each expert's output."""

    def __init__(self, dim: int = 8, experts: int = 3) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, choice = self.gate(x).softmax(-1).max(-1)
        out = torch.zeros_like(x)
        for e in range(len(self.experts)):
            idx = (choice == e).nonzero().squeeze(1)  # SITE: dense expert routing
            out[idx] += gate[idx, None] * self.experts[e](x[idx])
        return out


def switch_moe() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return SwitchMoE(), _x(6, 8)


class MaskedMoE(nn.Module):
    """Top-1 routing as many repositories write it: a boolean mask of each expert's tokens."""

    def __init__(self, dim: int = 8, experts: int = 3) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(dim, dim), nn.GELU()) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, choice = self.gate(x).softmax(-1).max(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            routed = choice == e
            out[routed] += gate[routed, None] * expert(x[routed])  # SITE: dense expert routing
        return out


def masked_moe() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return MaskedMoE(), _x(6, 8)


class CentredExperts(nn.Module):
    """Each expert centres the tokens it is given: run on every token, the mean is another."""

    def __init__(self, dim: int = 8, experts: int = 2) -> None:
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, choice = self.gate(x).softmax(-1).max(-1)
        out = torch.zeros_like(x)
        for e in range(len(self.experts)):
            token = torch.where(choice == e)[0]  # SITE: none
            h = self.experts[e](x[token])
            h = h - h.mean(0)
            out.index_add_(0, token, gate[token, None] * h)
        return out


def centred_experts() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return CentredExperts(), _x(6, 8)


# -- math of .item() -------------------------------------------------------------------------------


class VarianceScaled(nn.Module):
    """Attention logits scaled by their own spread, read as a Python number."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.q(x) @ x.T
        var = scores.var().item()  # SITE: torch math instead of math
        scale = 1.0 / math.sqrt(var + 1e-6)
        return (scores * scale).softmax(-1)


def variance_scaled() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return VarianceScaled(), _x(5, 8)


def log_bits(x: torch.Tensor) -> torch.Tensor:
    total = float(x.abs().sum())  # SITE: torch math instead of math
    bits = math.log(total + 1.0, 2)
    return x * bits


def bits() -> tuple[Any, torch.Tensor]:
    return log_bits, _x(4, 3)


def top_fraction(x: torch.Tensor) -> torch.Tensor:
    """math.ceil makes a Python int for a slice: torch.ceil's float tensor cannot slice."""
    frac = x.sigmoid().mean().item()  # SITE: none
    k = math.ceil(frac * x.shape[0])
    return x.sort(descending=True).values[:k].sum()


def fraction() -> tuple[Any, torch.Tensor]:
    return top_fraction, _x(8)


def precision(scores: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Metric code: counts read as Python floats."""
    hits = float(((scores > 0.5) & (labels > 0)).sum())  # SITE: float() kept a tensor
    return scores.mean() * hits / (scores.numel() + 1.0)


def precision_metric() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return precision, (torch.rand(8, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 0, 1, 1, 0, 0, 1, 0]))


def first_valid(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A count read as a float and then used as a slice bound: a tensor cannot stand in."""
    total = float(mask.sum())  # SITE: none
    return x[: int(total)].sum()


def slice_bound() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    return first_valid, (_x(6), torch.tensor([True, True, False, True, False, False]))


def value_fit(returns: torch.Tensor, values: torch.Tensor) -> Any:
    """How much of the returns' variance a critic explains, in numpy as RL libraries compute it
    for their logs (in our words): nan where the returns do not vary."""
    y, v = returns.numpy(), values.numpy()
    var_y = np.var(y)
    return np.nan if var_y == 0 else 1 - np.var(y - v) / var_y  # SITE: conditional expression to torch.where


def explained() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(899)
    returns = torch.randn(16)
    return value_fit, (returns, returns + 0.1 * torch.randn(16))


def peak_normalised(audio: torch.Tensor) -> torch.Tensor:
    """Audio scaled to its peak on the host, as data-loading code writes it (in our words): the
    peak read as a Python float first."""
    a = audio.numpy()
    peak = float(np.abs(a).max())  # SITE: numpy value kept an array
    return torch.from_numpy(a / (peak + 1e-6))


def normalised() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(901)
    return peak_normalised, (torch.randn(2, 32),)


class PeakNormaliser:
    """The same scaling as a callable object of the program's own (a transform): fix verifies a
    copy of it whose class is the patched file's."""

    def __init__(self, eps: float = 1e-6) -> None:
        self.eps = eps

    def __call__(self, audio: torch.Tensor) -> torch.Tensor:
        a = audio.numpy()
        peak = float(np.abs(a).max())  # SITE: numpy value kept an array
        return torch.from_numpy(a / (peak + self.eps))


def normaliser_object() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(903)
    return PeakNormaliser(), (torch.randn(2, 32),)


class NoiseCurriculum(nn.Module):
    """A noise level that grows with the training step, computed with numpy from Python numbers
    as diffusion and RL schedules often are (in our words): the integer cast makes Dynamo trace
    numpy's values as tensors, and float() reads the last one back."""

    def __init__(self, step: int = 300, total: int = 1000) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.step, self.total = step, total

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, float, int]:
        levels = np.floor(np.sqrt(self.step / self.total) * 16).astype(np.int64)
        levels = np.maximum(levels, 2)
        width = np.exp(-levels / 8.0)
        return self.lin(x) * width, float(width), int(levels)  # SITE: math instead of numpy over plain numbers


def noise_curriculum() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(907)
    return NoiseCurriculum(), (torch.randn(2, 4),)


def make_width_schedule(total: int, levels: int) -> Any:
    """A schedule factory whose closure a training step keeps as an attribute (consistency-model
    code's shape, in our words): numpy over the step and the factory's numbers."""

    def width_at(step: int) -> tuple[float, int]:
        n = np.ceil(np.sqrt(step / total) * levels).astype(np.int64)
        n = np.maximum(n, 1)
        return float(np.exp(-n / levels)), int(n)  # SITE: math instead of numpy over plain numbers

    return width_at


class ScheduledNoise(nn.Module):
    """Holds the schedule the factory made (a function of this file, made inside another): fix
    runs the patched file's copy of it in the model it verifies."""

    def __init__(self, step: int = 300) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.schedule = make_width_schedule(1000, 16)
        self.step = step

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        width, n = self.schedule(self.step)
        return self.lin(x) * width, n


def scheduled_noise() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(908)
    return ScheduledNoise(), (torch.randn(2, 4),)


def host_top_p(logits: torch.Tensor) -> torch.Tensor:
    """Nucleus filtering done on the host with numpy, as small character-level samplers do (in
    our words): the cutoff is the sorted probability where the running sum first passes p,
    indexed by numpy's argmax."""
    probs = F.softmax(logits, dim=-1).numpy()
    ordered = np.sort(probs)[::-1]
    running = np.cumsum(ordered)
    cutoff = float(ordered[np.argmax(running > 0.7)])  # SITE: numpy value kept an array
    kept = np.where(probs < cutoff, 0.0, probs)
    return torch.from_numpy(kept / np.sum(kept))


def nucleus_on_host() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(909)
    return host_top_p, (torch.randn(12) * 2,)


class NormedHead(nn.Module):
    """A convolution under ``torch.nn.utils.weight_norm`` (as vocoders write it, in our words),
    its output scaled by its peak read as a float. The norm's hook keeps the weight it computed
    on the module, a tensor with a history that ``copy.deepcopy`` refuses: fix copies it detached
    (the hook computes it again before each forward)."""

    def __init__(self) -> None:
        super().__init__()
        with warnings.catch_warnings():  # torch deprecates the old form; code written for it still runs
            warnings.simplefilter("ignore", FutureWarning)
            self.conv = nn.utils.weight_norm(nn.Conv1d(2, 2, 3, padding=1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        peak = float(y.abs().max())  # SITE: float() kept a tensor
        return y / (peak + 1e-6)


def normed_head() -> tuple[Any, tuple[torch.Tensor]]:
    torch.manual_seed(910)
    return NormedHead(), (torch.randn(1, 2, 8),)


class ColumnRanges(nn.Module):
    """A click-through model's embedding lookup (in our words): each sparse feature's columns in
    the packed input are a ``(start, end)`` pair, made a numpy array before its ends slice the
    input. Dynamo traces the array as a tensor, so the slice reads its elements back."""

    def __init__(self) -> None:
        super().__init__()
        self.columns = {"user": (0, 1), "item": (1, 2), "history": (2, 6)}
        self.embed = nn.ModuleDict({k: nn.Embedding(10, 4) for k in self.columns})
        self.out = nn.Linear(12, 1)

    def forward(self, packed: torch.Tensor) -> torch.Tensor:
        pooled = []
        for name, emb in self.embed.items():
            span = np.array(self.columns[name])
            ids = packed[:, span[0]:span[1]].long()  # SITE: elements of the sequence, not of an array
            pooled.append(emb(ids).mean(dim=1))
        return torch.sigmoid(self.out(torch.cat(pooled, dim=-1)))


def column_ranges() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(923)
    return ColumnRanges(), (torch.randint(0, 10, (3, 6)).float(),)


class PackedDetections(nn.Module):
    """A face detector's post-processing head on the host (in our words): boxes and scores packed
    into one float32 array with ``astype(np.float32, copy=False)``, which torch's numpy layer,
    the one Dynamo traces numpy with, does not implement."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(6, 5)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        out = self.head(feats).detach().numpy()
        boxes, scores = out[:, :4], out[:, 4]
        dets = np.hstack((boxes, scores[:, np.newaxis])).astype(np.float32, copy=False)  # SITE: astype without copy=False
        return torch.from_numpy(dets).sum(dim=1)


def packed_detections() -> tuple[nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(947)
    return PackedDetections(), (torch.randn(5, 6),)


#: Every program of this corpus: name -> builder.
PROGRAMS = {
    "numpy_head": numpy_head,
    "numpy_metric": numpy_metric,
    "retrieval": retrieval,
    "numpy_median": numpy_median,
    "mean_pooling": mean_pooling,
    "packed_pooling": packed_pooling,
    "sum_pooling": sum_pooling,
    "loop_pooling": loop_pooling,
    "token_loss": token_loss,
    "confidence": confidence,
    "label_range": label_range,
    "score_filter": score_filter,
    "detections": detections,
    "sparse_moe": sparse_moe,
    "listed_moe": listed_moe,
    "switch_moe": switch_moe,
    "masked_moe": masked_moe,
    "centred_experts": centred_experts,
    "variance_scaled": variance_scaled,
    "bits": bits,
    "fraction": fraction,
    "precision_metric": precision_metric,
    "slice_bound": slice_bound,
    "explained": explained,
    "normalised": normalised,
    "normaliser_object": normaliser_object,
    "noise_curriculum": noise_curriculum,
    "scheduled_noise": scheduled_noise,
    "nucleus_on_host": nucleus_on_host,
    "normed_head": normed_head,
    "column_ranges": column_ranges,
    "packed_detections": packed_detections,
}
