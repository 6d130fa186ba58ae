"""RevIN in torch: the training twin of the host's codegen/data/revin.py (same formula, same EPS).

The training loop (`loop.predict`) and message-dropout evaluation (`dropout.evaluate_with_loss`)
normalise each window with it before the model and de-normalise the forecast after it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from codegen.data.revin import EPS


def revin_torch(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The torch twin of codegen.data.revin.revin_normalize (statistics carry no gradient)."""
    mean = x.mean(dim=-1, keepdim=True)
    std = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + EPS)
    return (x - mean) / std, mean, std
