"""Programs whose breaks are counts and optional masks, in the shapes real repositories write
them, for ``dynscope.fix``: node degrees by ``bincount``, a loss averaged over the tokens it
counts (``int(...)`` then ``max(n, 1)``), an attention mask that may be None and is applied
only when it masks something, a check that warns and then fixes a value, a mask applied one
row at a time in a loop.

As in tests/corpus/fix_programs.py: each program is a (model, inputs) builder; each break
site carries ``# SITE: <rewrite>`` (the rewrite expected to remove it) or ``# SITE: none``
(no patch may be verified). Imports only torch and the standard library: ``fix`` imports
patched copies of it.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class MeanAggregation(nn.Module):
    """A graph layer averaging each node's incoming messages, degrees counted by bincount."""

    def __init__(self, dim: int = 6) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        messages = self.lin(x)[src]
        summed = torch.zeros_like(x).index_add(0, dst, messages)
        degree = torch.bincount(dst, minlength=x.size(0)).clamp(min=1)  # SITE: scatter instead of bincount
        return summed / degree[:, None].to(x.dtype)


def mean_aggregation() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    edges = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 0, 0, 2, 3]])
    return MeanAggregation(), (_x(6, 6), edges)


class TokenAveragedLoss(nn.Module):
    """A sequence loss summed over tokens and divided by how many are not padding."""

    def __init__(self, vocab: int = 11, dim: int = 8, pad: int = 0) -> None:
        super().__init__()
        self.pad = pad
        self.embed = nn.Embedding(vocab, dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self.out(torch.tanh(self.embed(tokens)))
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=self.pad, reduction="sum")
        n_tokens = int((targets != self.pad).sum())  # SITE: count kept a tensor
        return losses / max(n_tokens, 1)


def token_averaged_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(1)
    tokens = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0]])
    return TokenAveragedLoss(), (tokens, torch.tensor([[4, 5, 6, 0], [7, 8, 0, 0]]))


class OptionalMaskAttention(nn.Module):
    """Attention whose key mask may be None, applied only when it hides a key."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2)
        if key_mask is not None and not key_mask.all():  # SITE: branch to torch.where
            scores = scores.masked_fill(~key_mask[:, None, :], float("-inf"))
        return scores.softmax(-1) @ v


def optional_mask_attention() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(2)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    return OptionalMaskAttention(), (_x(2, 4, 8), mask)


class CountedRange(nn.Module):
    """A count that sizes a range: it must stay a Python int."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = int((x > 0).sum())  # SITE: none
        return x[: max(n, 1)].sum() + torch.arange(max(n, 1)).sum()


def counted_range() -> tuple[nn.Module, torch.Tensor]:
    return CountedRange(), _x(8)


class ScaledFeatures(nn.Module):
    """A feature scaler that warns about constant features and floors their scale."""

    def __init__(self, dim: int = 5) -> None:
        super().__init__()
        self.head = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.std(0)
        if (scale < 1e-2).any():  # SITE: guard a check that reports
            warnings.warn("a feature is constant in this batch: its scale is floored", stacklevel=2)  # SITE: guard side effect
            scale = scale.clamp(min=1e-2)
        return self.head((x - x.mean(0)) / scale)


def scaled_features() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(3)
    x = _x(6, 5)
    x[:, 2] = 1.5  # a constant column: the warning and the floor both happen
    return ScaledFeatures(), x


class BootstrappedTargets(nn.Module):
    """One-step returns that zero the bootstrap value of finished episodes, one row at a time."""

    def __init__(self, dim: int = 4, actions: int = 3, gamma: float = 0.9) -> None:
        super().__init__()
        self.value = nn.Linear(dim, actions)
        self.gamma = gamma

    def forward(self, next_obs: torch.Tensor, rewards: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # targets, as DQN makes them: no gradient through the bootstrap
            bootstrap = self.value(next_obs).amax(-1)
            for row in range(len(finished)):
                if finished[row]:  # SITE: per-element if to torch.where
                    bootstrap[row] = 0.0
        return rewards + self.gamma * bootstrap


def bootstrapped_targets() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    torch.manual_seed(4)
    return BootstrappedTargets(), (_x(5, 4), _x(5, seed=1), torch.tensor([False, True, False, True, False]))


#: Every program of this corpus: name -> builder.

class MaskCountLoss(nn.Module):
    """A set-prediction loss normalised by the number of target masks, counted on the host, made
    a one-element tensor (to be all-reduced across ranks), clamped and read back (Mask2Former's
    ``num_masks``)."""

    def __init__(self, d: int = 6) -> None:
        super().__init__()
        self.head = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        num_masks = torch.as_tensor([targets.shape[0]], dtype=torch.float, device=x.device)
        num_masks = torch.clamp(num_masks, min=1).item()  # SITE: keep it a 0-dim tensor
        return F.binary_cross_entropy_with_logits(self.head(x), targets, reduction="sum") / num_masks


def mask_count_loss() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(835)
    return MaskCountLoss(), (_x(4, 6, seed=3), torch.rand(4, 6).round())


class AcceptedStep(nn.Module):
    """An adaptive integrator's step accepted where its error estimate allows (the state unpacked
    from a tuple in one branch)."""

    def __init__(self, d: int = 4) -> None:
        super().__init__()
        self.f = nn.Linear(d, d)

    def forward(self, t: torch.Tensor, y: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        y1 = y + dt * torch.tanh(self.f(y))
        err = (y1 - y).abs().max() / (1 + y.abs().max())
        if err <= 0.5:  # SITE: branch to torch.where
            t, y = t + dt, y1
        return y * t


def accepted_step() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(837)
    return AcceptedStep(), (torch.tensor(0.0), _x(3, 4, seed=5), torch.tensor(0.1))

class NodeClassWeights(nn.Module):
    """Node classification on graphs with class-balanced weights, the way GNN benchmark code
    computes them (in our words): the sizes of the classes present, placed back at their classes,
    each class weighted by the share of nodes outside it."""

    def __init__(self, d: int = 8, n_classes: int = 5) -> None:
        super().__init__()
        self.n_classes = n_classes
        self.mp = nn.Linear(d, d)
        self.head = nn.Linear(d, n_classes)

    def forward(self, h: torch.Tensor, adj: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.mp(adj @ h)) + h
        scores = self.head(h)
        n = label.size(0)
        sizes = torch.bincount(label)  # SITE: the counts scattered at their values instead of the present ones placed back
        sizes = sizes[sizes.nonzero()].squeeze()  # SITE: gone with the verified patches
        class_sizes = torch.zeros(self.n_classes, dtype=torch.long, device=label.device)
        class_sizes[torch.unique(label)] = sizes  # SITE: gone with the verified patches
        weight = (n - class_sizes).float() / n
        weight = weight * (class_sizes > 0).float()
        return F.cross_entropy(scores, label, weight=weight)


def node_class_weights() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(895)
    n = 12
    adj = (torch.rand(n, n) < 0.3).float()
    label = torch.tensor([0, 0, 1, 3, 3, 3, 0, 1, 1, 3, 0, 0])  # class 2 and 4 absent from this graph
    return NodeClassWeights(), (torch.randn(n, 8), adj / adj.sum(1, keepdim=True).clamp(min=1), label)


class StyleMixing(nn.Module):
    """A style-based generator's mixing regularisation (in our words): a cutoff layer drawn on
    the device with ``random_``, and the styles from that layer on taken from a second latent by
    a slice at the drawn tensor."""

    def __init__(self, z: int = 6, w: int = 8, layers: int = 5) -> None:
        super().__init__()
        self.layers = layers
        self.mapping = nn.Sequential(nn.Linear(z, w), nn.LeakyReLU(0.2), nn.Linear(w, w))
        self.synthesis = nn.Linear(w, 3)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        ws = self.mapping(z).unsqueeze(1).repeat(1, self.layers, 1)
        cutoff = torch.empty([], dtype=torch.int64, device=ws.device).random_(1, ws.shape[1])  # SITE: randint instead of random_
        other = self.mapping(torch.randn_like(z)).unsqueeze(1).repeat(1, self.layers, 1)
        ws[:, cutoff:] = other[:, cutoff:]  # SITE: where over the positions instead of a slice at a tensor
        return self.synthesis(ws).sum(1)


def style_mixing() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(897)
    return StyleMixing(), (torch.randn(4, 6),)


def pit_loss(pred: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A permutation-invariant loss over speakers (in our words): the loss of every order of the
    label's speaker columns, the least of them, and the labels in that order."""
    perms = [label[..., list(p)] for p in itertools.permutations(range(label.shape[-1]))]
    losses = torch.stack([F.binary_cross_entropy_with_logits(pred, p) for p in perms])
    best = losses.argmin().detach()
    return losses.min(), perms[best]  # SITE: index by a one-element tensor


def pit_labels() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(905)
    return pit_loss, (torch.randn(10, 3, requires_grad=True), (torch.rand(10, 3) > 0.5).float())


def ndcg_at(scores: torch.Tensor, labels: torch.Tensor, k: int = 4) -> tuple[torch.Tensor, float]:
    """NDCG at k of a ranking, as recommender evaluation code computes it (in our words): the
    ideal DCG of each row sums the discounts of its first min(relevant, k) ranks; the hit rate is
    read as a Python float for the log first."""
    hits = labels.gather(1, scores.argsort(dim=1, descending=True)[:, :k])
    discounts = 1 / torch.log2(torch.arange(2, 2 + k).float())
    dcg = (hits * discounts).sum(1)
    relevant = labels.sum(1)
    hit_rate = (hits.sum(1) > 0).float().mean().item()  # SITE: none
    idcg = torch.stack([discounts[: min(int(n), k)].sum() for n in relevant])  # SITE: prefix sums gathered instead of a sum per element
    return (dcg / idcg.clamp(min=1e-6)).mean(), hit_rate


def ideal_dcg() -> tuple[Any, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(907)
    labels = (torch.rand(5, 9) < 0.3).float()
    labels[0] = 0  # a user with nothing relevant: an ideal DCG of 0
    labels[1] = 1  # more relevant items than k
    return ndcg_at, (torch.randn(5, 9), labels)


class HardNegativeLoss(nn.Module):
    """A balanced loss over a score map, as text and object detectors write it (in our words):
    every positive pixel and only the hardest negatives, at most ``ratio`` times as many as the
    positives, the counts read with ``int()`` and the negatives picked by ``topk``."""

    def __init__(self, ratio: float = 3.0) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, 1, 1)
        self.ratio = ratio

    def forward(self, image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        prob = torch.sigmoid(self.head(image))[:, 0]
        loss = F.binary_cross_entropy(prob, target, reduction="none")
        positive = target > 0.5
        n_pos = int(positive.sum())  # SITE: keep it a tensor
        n_neg = min(int((~positive).sum()), int(n_pos * self.ratio))  # SITE: top-k by a count as a zeroed sort
        # the hardest negatives: their losses, largest first
        hardest, _ = (loss * ~positive).flatten().topk(n_neg)
        return ((loss * positive).sum() + hardest.sum()) / (n_pos + n_neg + 1e-6)


def hard_negative_loss() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(911)
    target = (torch.rand(2, 8, 8) < 0.1).float()  # few positives: the ratio bounds the negatives
    return HardNegativeLoss(), (torch.randn(2, 3, 8, 8), target)


class SpatialDice(nn.Module):
    """A soft Dice loss over the spatial axes of any rank, as medical segmentation losses write
    it (in our words): the axes reduced listed by ``torch.arange`` over the input's rank."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Conv2d(3, 2, 1)

    def forward(self, image: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        prob = torch.softmax(self.head(image), dim=1)
        axes: list[int] = torch.arange(2, len(prob.shape)).tolist()  # SITE: range instead of torch.arange over sizes
        overlap = torch.sum(prob * target, dim=axes)
        total = torch.sum(prob, dim=axes) + torch.sum(target, dim=axes)
        return (1 - (2 * overlap + 1e-5) / (total + 1e-5)).mean()


def spatial_dice() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(913)
    target = F.one_hot(torch.randint(0, 2, (2, 6, 6)), 2).permute(0, 3, 1, 2).float()
    return SpatialDice(), (torch.randn(2, 3, 6, 6), target)


class MultiCrop(nn.Module):
    """A self-supervised wrapper running its backbone once per crop resolution (in our words):
    the crops grouped by consecutive equal sizes with ``unique_consecutive`` over their widths."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())

    def forward(self, crops: list[torch.Tensor]) -> torch.Tensor:
        ends = torch.cumsum(torch.unique_consecutive(torch.tensor([c.shape[-1] for c in crops]), return_counts=True)[1], 0)  # SITE: run ends of equal sizes in Python
        start, outs = 0, []
        for end in ends:
            outs.append(self.backbone(torch.cat(crops[start:end])))  # SITE: gone with the verified patches
            start = end
        return torch.cat(outs)


def multi_crop() -> tuple[nn.Module, tuple[list[torch.Tensor]]]:
    torch.manual_seed(917)
    return MultiCrop(), ([torch.randn(2, 3, 8, 8) for _ in range(2)] + [torch.randn(2, 3, 4, 4) for _ in range(3)],)


class SampledNegatives(nn.Module):
    """A retrieval head's matching loss over hard negatives (in our words): for each query a
    negative document drawn by ``torch.multinomial`` over the similarity and read back with
    ``.item()``, then for each document a negative query the same way. Under torch.compile the
    first loop's break hides the second (nothing after it in the frame is compiled): fixing
    the first reveals the second, and only the two fixed together break less."""

    def __init__(self) -> None:
        super().__init__()
        self.query = nn.Linear(6, 4)
        self.doc = nn.Linear(6, 4)
        self.match = nn.Linear(8, 1)

    def forward(self, queries: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        q, d = F.normalize(self.query(queries), dim=-1), F.normalize(self.doc(docs), dim=-1)
        with torch.no_grad():
            weights = torch.softmax(q @ d.t(), dim=1).fill_diagonal_(0)
        doc_neg = []
        for b in range(q.size(0)):
            pick = torch.multinomial(weights[b], 1).item()  # SITE: keep it a 0-dim tensor, then index by a one-element tensor
            doc_neg.append(d[pick])
        query_neg = []
        for b in range(d.size(0)):
            pick = torch.multinomial(weights[:, b], 1).item()
            query_neg.append(q[pick])
        pos = self.match(torch.cat([q, d], dim=1))
        neg = self.match(torch.cat([torch.cat([q, torch.stack(query_neg)]), torch.cat([torch.stack(doc_neg), d])], dim=1))
        labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
        return F.binary_cross_entropy_with_logits(torch.cat([pos, neg]), labels)


def sampled_negatives() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(919)
    return SampledNegatives(), (torch.randn(4, 6), torch.randn(4, 6))


PROGRAMS: dict[str, Any] = {
    "mask_count_loss": mask_count_loss,
    "accepted_step": accepted_step,
    "mean_aggregation": mean_aggregation,
    "token_averaged_loss": token_averaged_loss,
    "optional_mask_attention": optional_mask_attention,
    "counted_range": counted_range,
    "scaled_features": scaled_features,
    "bootstrapped_targets": bootstrapped_targets,
    "node_class_weights": node_class_weights,
    "style_mixing": style_mixing,
    "pit_labels": pit_labels,
    "ideal_dcg": ideal_dcg,
    "hard_negative_loss": hard_negative_loss,
    "spatial_dice": spatial_dice,
    "multi_crop": multi_crop,
    "sampled_negatives": sampled_negatives,
}
