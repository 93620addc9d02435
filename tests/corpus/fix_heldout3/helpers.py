"""Shared utilities, the way a repository keeps a ``utils.py`` beside its models."""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

logger = logging.getLogger("fix_heldout3")


def report(name: str, value: object) -> None:
    """Training-loop style progress logging."""
    logger.info("%s: %s", name, value)  # BREAK: logging only; dropping the call keeps every output


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1).to(x.dtype)
    return (x * m).sum(1) / m.sum(1).clamp(min=1.0)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def viterbi_backtrace(score: torch.Tensor, history: list[torch.Tensor], lengths: torch.Tensor) -> list[list[int]]:
    """Follow the back-pointers of each sequence; the tag paths as Python lists."""
    best_paths = []
    for b in range(score.shape[0]):
        best_last = score[b].argmax().item()  # BREAK must-not: the paths are returned as Python lists of per-sequence length
        path = [best_last]
        for hist in reversed(history[: int(lengths[b]) - 1]):
            best_last = hist[b][path[-1]].item()
            path.append(best_last)
        path.reverse()
        best_paths.append(path)
    return best_paths


def power_iteration(W: torch.Tensor, u: torch.Tensor, max_iters: int = 60, tol: float = 1e-4):
    """Leading singular vectors of W, stopping once u stops moving."""
    v = torch.zeros(W.shape[1])
    for _ in range(max_iters):
        v = F.normalize(W.t() @ u, dim=0)
        u_next = F.normalize(W @ v, dim=0)
        if torch.norm(u_next - u) < tol:  # BREAK: iterate max_iters times, freezing u and v once converged
            u = u_next
            break
        u = u_next
    return u, v


def index_points(points: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """points (B, N, C), idx (B, S[, K]) -> (B, S[, K], C)."""
    B = points.shape[0]
    view_shape = [B] + [1] * (idx.dim() - 1)
    batch = torch.arange(B, dtype=torch.long).view(view_shape).expand_as(idx)
    return points[batch, idx, :]


def spec_augment(x: torch.Tensor, lengths: torch.Tensor, rng, freq_mask: int, time_mask: int) -> torch.Tensor:
    """SpecAugment with host-side numpy draws, time masks kept inside each utterance."""
    x = x.clone()
    n_freq = x.shape[1]
    for b in range(x.shape[0]):
        length = int(lengths[b])  # BREAK must-not: the host-side numpy draws below are bounded by each length
        f = int(rng.integers(0, freq_mask + 1))
        f0 = int(rng.integers(0, n_freq - f + 1))
        t = int(rng.integers(0, min(time_mask, length // 4) + 1))
        t0 = int(rng.integers(0, length - t + 1))
        x[b, f0 : f0 + f, :] = 0.0
        x[b, :, t0 : t0 + t] = 0.0
    return x
