"""The int8 quantisation scheme (TFLite/CMSIS-NN): parameters and rounding.

Weights: per-channel symmetric int8 in [-127, 127]. Activations: per-tensor asymmetric int8.
Biases: int32 at scale s_in·s_w. Used by the quantiser (codegen/plan/quantize.py) and the op
kinds (codegen/ops/), which derive their integer attributes with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SOFTMAX_SCALE, SOFTMAX_ZP = 1.0 / 256.0, -128


@dataclass(frozen=True)
class QParams:
    scale: float
    zero_point: int


def round_half_away(x):
    """Round half away from zero (std::round), as TFLite's quantiser does."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def qparams_from_range(lo: float, hi: float) -> QParams:
    """Asymmetric int8 parameters covering [lo, hi] widened to include 0."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-8:
        hi = lo + 1e-8
    scale = (hi - lo) / 255.0
    zp = int(np.clip(round_half_away(-128.0 - lo / scale), -128, 127))
    return QParams(scale, zp)


def quantize_weight_rows(w: np.ndarray, scale: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: returns (int8 weights, float scales). All-zero rows get scale 1.
    ``scale``: use these row scales (an elastic mode's rows are part of a larger mode's)."""
    if scale is None:
        amax = np.abs(w).max(axis=1)
        scale = np.where(amax > 0, amax / 127.0, 1.0)
    q = np.clip(round_half_away(w / scale[:, None]), -127, 127).astype(np.int8)
    return q, scale


def to_int32(x) -> np.ndarray:
    """Round half away and saturate to int32 (biases)."""
    return np.clip(round_half_away(np.asarray(x, dtype=np.float64)), -2**31, 2**31 - 1).astype(np.int32)


def quantize_const_s8(x: np.ndarray, q: QParams) -> np.ndarray:
    """A float constant in an activation's int8 parameters (e.g. the position embedding)."""
    return np.clip(round_half_away(x / q.scale) + q.zero_point, -128, 127).astype(np.int8)
