"""RevIN on the host: normalise each window by its own statistics, de-normalise the forecast.

PatchTST defaults (revin=1, affine=0, subtract_last=0): mean over the window and
std = sqrt(var(unbiased=False) + eps), eps = 1e-5, as in PatchTST's layers/RevIN.py. The torch
training code uses the same formula (codegen/train/revin.py).
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5


def revin_normalize(x: np.ndarray, eps: float = EPS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Windows x [..., L] -> (normalised x, mean [..., 1], std [..., 1])."""
    x = np.asarray(x, dtype=np.float32)
    mean = x.mean(axis=-1, keepdims=True)
    std = np.sqrt(x.var(axis=-1, keepdims=True) + np.float32(eps))
    return ((x - mean) / std).astype(np.float32), mean, std


def revin_denormalize(y: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Forecast in normalised units [..., horizon] -> forecast on the data's scale."""
    return (np.asarray(y, dtype=np.float32) * std + mean).astype(np.float32)
