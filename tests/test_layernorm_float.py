"""The integer LayerNorm (docs/design/kernels.md) approximates float LayerNorm: not only
self-consistent between C and numpy, but right."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from codegen.quant import arith, kernels

pytestmark = pytest.mark.unit

EPS = 1e-5


def quant_params(lo: float, hi: float) -> tuple[float, int]:
    """Asymmetric int8 (scale, zero point) for a range widened to include 0 (decisions.md §5)."""
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = (hi - lo) / 255.0
    return scale, int(np.clip(np.round(-128 - lo / scale), -128, 127))


def float_layernorm(
    x: npt.NDArray[np.float64], valid: npt.NDArray[np.bool_], gamma: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:  # fmt: skip
    """Population-variance LayerNorm over the valid columns only; 0 in the others."""
    xv = np.where(valid, x, np.nan)
    mean = np.nanmean(xv, axis=-1, keepdims=True)
    var = np.nanmean((xv - mean) ** 2, axis=-1, keepdims=True)
    return np.where(valid, (x - mean) / np.sqrt(var + EPS) * gamma + beta, 0.0)


@pytest.mark.parametrize("seed", range(12))
def test_layernorm_matches_float_within_1_5_lsb(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(4, 40)), int(rng.integers(8, 160))
    x = rng.normal(rng.uniform(-2, 2), rng.uniform(0.1, 3.0), (rows, cols))
    x[:, rng.integers(cols)] += rng.uniform(-8, 8)  # an outlier feature, as transformers have
    s_in, zp_in = quant_params(float(x.min()), float(x.max()))
    xq = np.clip(np.round(x / s_in) + zp_in, -128, 127).astype(np.int8)
    x_dq = (xq.astype(np.float64) - zp_in) * s_in  # measure the kernel, not the input quantisation

    gamma = rng.uniform(0.3, 1.7, cols) * rng.choice([-1.0, 1.0], cols)
    beta = rng.uniform(-0.5, 0.5, cols)
    valid = rng.random(cols) < (1.0 if seed % 3 == 0 else 0.7)
    valid[0] = True
    ref = float_layernorm(x_dq, valid, gamma, beta)
    s_out, zp_out = quant_params(float(ref.min()), float(ref.max()))

    eps_q, gamma_q, beta_q = arith.layernorm_params(s_in, s_out, gamma, beta, EPS)
    y = kernels.layernorm_s8(xq, valid, zp_in, zp_out, eps_q, gamma_q, beta_q)
    err = (y.astype(np.float64) - zp_out) * s_out - ref
    assert np.max(np.abs(err)) <= 1.5 * s_out
    assert np.mean(np.abs(err)) <= 0.35 * s_out  # mostly the unavoidable output rounding (1/4 LSB on average)
    assert np.all(y[:, ~valid] == zp_out)


def test_layernorm_constant_row_gives_beta() -> None:
    # Zero variance: the normalised value is 0, the output is beta (quantised).
    x = np.full((2, 10), 37, dtype=np.int8)
    beta = np.linspace(-1, 1, 10)
    eps_q, gamma_q, beta_q = arith.layernorm_params(0.02, 0.01, np.ones(10), beta, EPS)
    y = kernels.layernorm_s8(x, None, -5, 3, eps_q, gamma_q, beta_q)
    np.testing.assert_array_equal(y, np.broadcast_to(np.round(beta / 0.01) + 3, (2, 10)).astype(np.int8))
