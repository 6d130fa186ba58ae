"""Integer building blocks of the int8 kernels, vectorised in numpy int64.

Bit-exact with CMSIS-NN's portable C path (double rounding) and with cisl's own
kernels; the definitions are those of the shared CMSIS-NN notes §4 and
docs/design/kernels.md. Every function takes and returns int64 arrays (or
Python ints for scalars) holding int32 values; products of two int32 values
are formed exactly in int64, and int32 wrap-around is applied explicitly.

Also the parameter derivations (TFLite ``QuantizeMultiplier`` and what TFLM
computes in Prepare for FC, softmax and add) and the LayerNorm constants.
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np
import numpy.typing as npt

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1

I64 = npt.NDArray[np.int64]
IntLike = int | npt.ArrayLike


def _i64(x: IntLike) -> I64:
    return np.asarray(x, dtype=np.int64)


def wrap32(x: IntLike) -> I64:
    """Two's complement reduction to int32 (what an int32 add or multiply does)."""
    v = _i64(x)
    return ((v & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000


def srdhm(a: IntLike, b: IntLike, saturate: bool = True) -> I64:
    """Rounding doubling high multiply: floor((a·b + 2^30) / 2^31).

    ``a = b = INT32_MIN`` gives INT32_MAX when ``saturate`` (CMSIS-NN
    ``arm_nn_doubling_high_mult``); otherwise the result wraps, as the
    ``_no_sat`` variant used by requantisation does.
    """
    a64, b64 = _i64(a), _i64(b)
    r = (a64 * b64 + (1 << 30)) >> 31
    if saturate:
        return np.where((a64 == INT32_MIN) & (b64 == INT32_MIN), INT32_MAX, r)
    return wrap32(r)


def rdbpot(x: IntLike, e: IntLike) -> I64:
    """Rounding divide by 2^e with midpoints away from zero (gemmlowp RoundingDivideByPOT).

    Defined by CMSIS-NN for e in [0, 31]; for larger e (up to 62) this is the
    exact extension, which nnref uses for softmax rows whose sum reaches 2^28.
    """
    x64, e64 = _i64(x), _i64(e)
    # Same as CMSIS-NN's remainder/threshold form: add half (minus one for negatives), then floor.
    return (x64 + ((np.int64(1) << e64) >> 1) - ((x64 < 0) & (e64 > 0))) >> e64


def sat_shl(v: IntLike, e: IntLike) -> I64:
    """Saturating multiply by 2^e (CMSIS-NN ``arm_nn_mult_by_power_of_two``), e in [0, 30]."""
    v64, e64 = _i64(v), _i64(e)
    limit = (np.int64(1) << (31 - e64)) - 1
    return np.where(v64 > limit, INT32_MAX, np.where(v64 < -limit, INT32_MIN, v64 << e64))


def requantize(v: IntLike, mult: IntLike, shift: IntLike) -> I64:
    """CMSIS-NN ``arm_nn_requantize`` (double rounding): scale mult·2^(shift−31).

    1. t = wrap32(v·2^max(shift, 0))   (a wrapping int32 multiply, not saturating)
    2. p = SRDHM(t, mult)               (non-saturating variant)
    3. RDBPOT(p, max(−shift, 0))
    """
    s, m = _i64(shift), _i64(mult)
    t = _i64(v)
    if np.any(s > 0):
        t = wrap32(t << np.maximum(s, 0))
    # SRDHM, in place on one buffer (this is the hot path of every matmul mirror)
    p = t * m
    shape = np.broadcast_shapes(p.shape, s.shape)
    if p.shape != shape:  # in-place updates below need the full shape
        p = np.broadcast_to(p, shape).copy()
    p += 1 << 30
    p >>= 31
    if np.any(m == INT32_MIN):  # only INT32_MIN·INT32_MIN leaves the int32 range
        p = wrap32(p)
    right = np.maximum(-s, 0)
    if np.any(right > 0):
        neg = (p < 0) & (right > 0)
        p += (np.int64(1) << right) >> 1
        p -= neg
        p >>= right
    return p


def clz32(v: IntLike) -> I64:
    """Leading zeros of the 32-bit pattern of v (an int32 value); 32 for 0."""
    u = _i64(v) & 0xFFFFFFFF
    # frexp is exact for integers < 2^53: u = m·2^e with m in [0.5, 1) -> bit length e.
    _, e = np.frexp(u.astype(np.float64))
    return np.where(u == 0, 32, 32 - e.astype(np.int64))


# ---------------------------------------------------------------------------
# Parameter derivation
# ---------------------------------------------------------------------------


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite ``QuantizeMultiplier``: real = M·2^(shift−31), M in [2^30, 2^31).

    0 gives (0, 0); a mantissa that rounds to 2^31 is halved with shift + 1;
    shift < −31 (the value would shift out entirely) gives (0, 0).
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"multiplier must be finite and >= 0, got {real!r}")
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    m = math.floor(q * (1 << 31) + 0.5)  # round half away from zero (q > 0), exact in float64
    if m == 1 << 31:
        m //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return int(m), int(shift)


def quantize_multiplier_array(real: npt.ArrayLike) -> tuple[I64, I64]:
    """Element-wise :func:`quantize_multiplier`; returns (M, shift) int64 arrays."""
    r = np.asarray(real, dtype=np.float64)
    if not np.all(np.isfinite(r)) or np.any(r < 0):
        raise ValueError("multipliers must be finite and >= 0")
    q, e = np.frexp(r)
    m = np.floor(q * float(1 << 31) + 0.5).astype(np.int64)
    e = e.astype(np.int64)
    top = m == (1 << 31)
    m = np.where(top, m // 2, m)
    e = np.where(top, e + 1, e)
    tiny = (e < -31) | (r == 0.0)
    return np.where(tiny, 0, m), np.where(tiny, 0, e)


def _check_shift_range(shift: IntLike, what: str) -> None:
    s = _i64(shift)
    if np.any(s > 30):
        raise ValueError(f"{what}: real multiplier >= 2^30 is out of range for requantisation")


@overload
def fc_params(s_in: float, s_w: float, s_out: float) -> tuple[int, int]: ...
@overload
def fc_params(s_in: float, s_w: npt.NDArray[np.floating], s_out: float) -> tuple[I64, I64]: ...


def fc_params(
    s_in: float, s_w: float | npt.NDArray[np.floating], s_out: float
) -> tuple[int, int] | tuple[I64, I64]:
    """FC / batch-matmul requantisation (M, shift) for real = s_in·s_w / s_out.

    A scalar ``s_w`` gives per-tensor ints, an array gives per-channel arrays.
    The product is formed as TFLite does: (s_in·s_w) / s_out in float64.
    """
    if np.ndim(s_w) == 0:
        m, s = quantize_multiplier(float(s_in) * float(s_w) / float(s_out))
        _check_shift_range(s, "fc_params")
        return m, s
    real = (float(s_in) * np.asarray(s_w, dtype=np.float64)) / float(s_out)
    m_arr, s_arr = quantize_multiplier_array(real)
    _check_shift_range(s_arr, "fc_params")
    return m_arr, s_arr


SOFTMAX_SCALED_DIFF_BITS = 5
SOFTMAX_ACCUM_BITS = 12


def softmax_params(input_scale: float, beta: float = 1.0) -> tuple[int, int, int]:
    """TFLM int8 softmax parameters (mult, shift, diff_min); shift is a left shift >= 0.

    real = min(β·s_in·2^26, 2^31 − 1); (mult, shift) = QuantizeMultiplier(real);
    diff_min = −floor(31·2^26 / 2^shift).
    """
    real = min(float(beta) * float(input_scale) * float(1 << (31 - SOFTMAX_SCALED_DIFF_BITS)), float((1 << 31) - 1))
    if not real > 1.0:
        raise ValueError(f"softmax input scale too small: beta*scale*2^26 = {real} must be > 1")
    mult, shift = quantize_multiplier(real)
    if shift < 0:
        raise ValueError("softmax multiplier must have a left shift >= 0")
    radius = (
        ((1 << SOFTMAX_SCALED_DIFF_BITS) - 1) * float(1 << (31 - SOFTMAX_SCALED_DIFF_BITS)) / float(1 << shift)
    )
    return mult, shift, -int(math.floor(radius))


ADD_LEFT_SHIFT = 20


def add_params(s1: float, s2: float, s_out: float) -> dict[str, int]:
    """TFLM int8 add parameters for arm_elementwise_add_s8 (left_shift 20).

    twice_max = 2·max(s1, s2); real1 = s1/twice_max, real2 = s2/twice_max,
    real_out = twice_max / (2^20·s_out); all three must be in (0, 1).
    """
    twice_max = 2.0 * max(float(s1), float(s2))
    reals = {
        "in1": float(s1) / twice_max,
        "in2": float(s2) / twice_max,
        "out": twice_max / (float(1 << ADD_LEFT_SHIFT) * float(s_out)),
    }
    out: dict[str, int] = {"left_shift": ADD_LEFT_SHIFT}
    for name, real in reals.items():
        if not 0.0 < real < 1.0:
            raise ValueError(f"add_params: {name} multiplier {real} must be in (0, 1)")
        m, s = quantize_multiplier(real)
        out[f"{name}_mult"], out[f"{name}_shift"] = m, s
    return out


def round_half_away(x: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Round to nearest, ties away from zero (TFLite's TfLiteRound / C round())."""
    v = np.asarray(x, dtype=np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _clip_i32(v: npt.NDArray[np.float64]) -> I64:
    return np.clip(v, INT32_MIN, INT32_MAX).astype(np.int64)


def layernorm_params(
    s_in: float, s_out: float, gamma: npt.ArrayLike, beta: npt.ArrayLike, eps: float
) -> tuple[int, I64, I64]:
    """Constants of cisl_layernorm_s8 (docs/design/kernels.md), clipped to int32.

    eps_q = round(eps / s_in² · 2^16), gamma_q = round(γ / s_out · 2^16),
    beta_q = round(β / s_out · 2^16); rounding is half away from zero.
    """
    if eps < 0 or s_in <= 0 or s_out <= 0:
        raise ValueError("layernorm_params: need eps >= 0 and positive scales")
    eps_q = int(_clip_i32(round_half_away(float(eps) / (float(s_in) * float(s_in)) * 65536.0)))
    gamma_q = _clip_i32(round_half_away(np.asarray(gamma, dtype=np.float64) / float(s_out) * 65536.0))
    beta_q = _clip_i32(round_half_away(np.asarray(beta, dtype=np.float64) / float(s_out) * 65536.0))
    return eps_q, gamma_q, beta_q
