"""Small utilities the programs share, the way a repository's ``utils.py`` collects them."""

from __future__ import annotations

import math

import torch

HASH_MULTIPLIER = 2654435761  # Knuth's multiplicative hash
NUM_HASH_BUCKETS = 97


def timestep_embedding(timesteps: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embeddings of (possibly fractional) diffusion timesteps, as in guided-diffusion."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = timesteps[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool = True,
                             num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """T5's bucketing: exact buckets for small offsets, log-spaced ones up to max_distance."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def make_pad_mask(lengths: torch.Tensor, maxlen: int | None = None) -> torch.Tensor:
    """True on padded frames (ESPnet's helper): shape (batch, maxlen)."""
    if maxlen is None:
        maxlen = int(lengths.max())  # BREAK: the caller masks a batch padded to its longest utterance, so its time axis (x.shape[1]) is this same int
    seq_range = torch.arange(maxlen, device=lengths.device)
    return seq_range[None, :] >= lengths[:, None]


def utterance_confidence(log_probs: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean over the real frames of the best token's log-probability, one score per utterance."""
    scores = []
    for lp, n in zip(log_probs, lengths, strict=True):
        scores.append(lp[:n].max(dim=-1).values.mean())  # BREAK: a length mask and a masked mean give the same score without reading n
    return torch.stack(scores)


def ctc_collapse(best_path: torch.Tensor, lengths: torch.Tensor, blank: int = 0) -> list[list[int]]:
    """Greedy CTC: merge repeats, drop blanks, stop at each utterance's length."""
    hyps = []
    for path, n in zip(best_path.tolist(), lengths.tolist(), strict=True):  # BREAK must-not: the transcripts are Python lists whose lengths depend on the argmax path
        out, prev = [], blank
        for tok in path[:n]:
            if tok != prev and tok != blank:
                out.append(tok)
            prev = tok
        hyps.append(out)
    return hyps


def hash_feature(value: int, salt: int) -> int:
    """Map a raw categorical id into the embedding table (the hashing trick)."""
    return (value * HASH_MULTIPLIER + salt) % NUM_HASH_BUCKETS


def pooled_lookup(table: torch.nn.Embedding, ids: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Sum-pooled bags like nn.EmbeddingBag: bag b is ids[offsets[b]:offsets[b + 1]]."""
    bounds = offsets.tolist() + [ids.numel()]  # BREAK: a segment id per position (searchsorted on offsets) and index_add_ give the same sums
    bags = []
    for b in range(len(bounds) - 1):
        bags.append(table(ids[bounds[b]:bounds[b + 1]]).sum(dim=0))
    return torch.stack(bags)


def build_adjacency(edge_index: torch.Tensor, num_nodes: int) -> list[list[int]]:
    """In-neighbour lists: adjacency[i] holds the sources of the edges into node i."""
    adjacency: list[list[int]] = [[] for _ in range(num_nodes)]
    for src, dst in edge_index.t().tolist():  # BREAK: the lists only feed a mean over neighbours, which index_add_ and a degree count compute as well
        adjacency[dst].append(src)
    return adjacency
