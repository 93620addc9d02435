"""A helper module in another file: breaks inside it are sited here, not at the caller."""

import torch


def noisy_scale(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("scaling")  # BREAK: logging/print side effect x2
    return y + 1
