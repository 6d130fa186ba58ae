"""Numpy mirrors of the int8 kernels, bit-exact with the C (nnref / upstream CMSIS-NN
portable path and firmware/runtime/cisl_kernels.c).

These are the oracle the generated C is tested against and the arithmetic of the
reference executor, so they are vectorised over any number of leading batch
dimensions. Inputs are int8 arrays; outputs are int8 (int32 for
:func:`fc_s8_s32`). Arithmetic: shared CMSIS-NN notes §4 and docs/design/kernels.md.

Matrix products are summed in float64 BLAS on the offset-adjusted values: every
term is an integer of magnitude ≤ 255·255 and every partial sum stays far below
2^53, so the float sums are exact whatever order BLAS adds in (the bound is
asserted). The rest is int64 arithmetic on int32 values.
"""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

from .arith import (
    INT32_MAX,
    SOFTMAX_ACCUM_BITS,
    clz32,
    rdbpot,
    requantize,
    sat_shl,
    srdhm,
    wrap32,
)

I8 = npt.NDArray[np.int8]
I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]
IntOrArray = int | npt.ArrayLike

_EXACT_FLOAT_SUM = 1 << 53


def _as_i8(x: npt.ArrayLike, name: str) -> I8:
    a = np.asarray(x)
    if a.dtype != np.int8:
        raise TypeError(f"{name} must be an int8 array, got {a.dtype}")
    return a


def _check_exact(depth: int, off_a: int, off_b: int) -> None:
    # |x + off| <= 128 + |off| for int8 x; the sum of `depth` such products must be exact in float64.
    bound = depth * (128 + abs(int(off_a))) * (128 + abs(int(off_b)))
    assert bound < _EXACT_FLOAT_SUM, f"float64 matmul not exact for depth {depth}"


def _offset_f64(x: I8, off: int) -> npt.NDArray[np.float64]:
    return x.astype(np.float64) + float(off)


def _to_int64(v: npt.NDArray[np.float64]) -> I64:
    # rint guards against nothing in exact arithmetic, but makes the conversion robust to -0.0.
    return np.rint(v).astype(np.int64)


def _requant_out(
    acc: I64, mult: IntOrArray, shift: IntOrArray, out_offset: int, act_min: int, act_max: int
) -> I8:
    """requantize, add the output offset in wrapping int32 (as the C does), clamp, cast."""
    out = wrap32(requantize(acc, mult, shift) + int(out_offset))
    return np.clip(out, int(act_min), int(act_max)).astype(np.int8)


# ---------------------------------------------------------------------------
# CMSIS-NN kernels
# ---------------------------------------------------------------------------


def fully_connected_s8(
    x: npt.ArrayLike,
    w: npt.ArrayLike,
    bias: npt.ArrayLike | None,
    in_offset: int,
    w_offset: int,
    out_offset: int,
    mult: IntOrArray,
    shift: IntOrArray,
    act_min: int = -128,
    act_max: int = 127,
) -> I8:
    """arm_fully_connected_s8 / arm_fully_connected_per_channel_s8.

    x [..., K], w [N, K], bias [N] int32 or None; mult/shift are scalars
    (per-tensor) or arrays [N] (per-channel). Returns int8 [..., N]:
    clamp(wrap32(requant(wrap32(bias + Σ(x+in_off)(w+w_off))) + out_off)).
    """
    xa, wa = _as_i8(x, "x"), _as_i8(w, "w")
    if wa.ndim != 2 or xa.shape[-1] != wa.shape[1]:
        raise ValueError(f"shape mismatch: x {xa.shape}, w {wa.shape}")
    _check_exact(wa.shape[1], in_offset, w_offset)
    acc = _to_int64(_offset_f64(xa, in_offset) @ _offset_f64(wa, w_offset).T)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return _requant_out(wrap32(acc), mult, shift, out_offset, act_min, act_max)


def batch_matmul_s8(
    lhs: npt.ArrayLike,
    rhs: npt.ArrayLike,
    lhs_offset: int,
    rhs_offset: int,
    out_offset: int,
    mult: int,
    shift: int,
    act_min: int = -128,
    act_max: int = 127,
) -> I8:
    """arm_batch_matmul_s8: lhs [..., M, K] times rhs [..., N, K] transposed -> [..., M, N].

    No bias; batch dimensions broadcast (numpy rules; CMSIS-NN supports a 1 on
    either side). lhs_offset = fc_params.input_offset, rhs_offset =
    fc_params.filter_offset.
    """
    la, ra = _as_i8(lhs, "lhs"), _as_i8(rhs, "rhs")
    if la.ndim < 2 or ra.ndim < 2 or la.shape[-1] != ra.shape[-1]:
        raise ValueError(f"shape mismatch: lhs {la.shape}, rhs {ra.shape}")
    _check_exact(la.shape[-1], lhs_offset, rhs_offset)
    acc = _to_int64(_offset_f64(la, lhs_offset) @ np.swapaxes(_offset_f64(ra, rhs_offset), -1, -2))
    return _requant_out(wrap32(acc), mult, shift, out_offset, act_min, act_max)


_EXP_FACTORS = (1672461947, 1302514674, 790015084, 290630308, 39332535, 720401, 242)


def exp_on_negative_values(a: IntOrArray) -> I64:
    """CMSIS-NN arm_nn_exp_on_negative_values: exp(a) for a ≤ 0 in Q5.26 -> Q0.31."""
    a64 = np.asarray(a, dtype=np.int64)
    quarter = 1 << 24
    r = (a64 & (quarter - 1)) - quarter  # a modulo 1/4, in [-1/4, 0)
    rest = wrap32(r - a64)
    x = wrap32(r * 32 + (1 << 28))  # r + 1/8 in Q0.31
    x2 = srdhm(x, x)
    x3 = srdhm(x2, x)
    x4 = srdhm(x2, x2)
    poly = rdbpot(wrap32(srdhm(wrap32(rdbpot(x4, 2) + x3), 715827883) + x2), 1)
    y = wrap32(1895147668 + srdhm(1895147668, wrap32(x + poly)))
    for j, factor in enumerate(_EXP_FACTORS):
        y = np.where((rest & (1 << (24 + j))) != 0, srdhm(y, factor), y)
    return np.where(a64 == 0, INT32_MAX, y)


def one_over_one_plus_x(v: IntOrArray) -> I64:
    """CMSIS-NN arm_nn_one_over_one_plus_x_for_x_in_0_1 (three Newton-Raphson steps)."""
    s = np.asarray(v, dtype=np.int64) + INT32_MAX
    num = s + np.where(s >= 0, 1, -1)
    half = np.where(num >= 0, num // 2, -((-num) // 2))  # C division truncates toward zero
    z = wrap32(1515870810 + srdhm(half, -1010580540))
    for _ in range(3):
        err = wrap32((1 << 29) - srdhm(half, z))
        z = wrap32(z + sat_shl(srdhm(z, err), 2))
    return sat_shl(z, 1)


def softmax_s8(x: npt.ArrayLike, mult: int, shift: int, diff_min: int) -> I8:
    """arm_softmax_s8 over the last axis; output scale 1/256, zero point −128.

    Rows whose exponent sum reaches 2^28 (row length ≥ 512 with many values
    near the maximum) need a division by 2^32 or more, which upstream leaves
    undefined; here and in nnref it is the exact rounded quotient.
    """
    xa = _as_i8(x, "x")
    x64 = xa.astype(np.int64)
    diff = x64 - x64.max(axis=-1, keepdims=True)  # in [-255, 0]
    # The scaled exponential depends only on diff: evaluate it once per possible diff.
    d_all = np.arange(-255, 1, dtype=np.int64)
    exp_lut = exp_on_negative_values(srdhm(wrap32(d_all * (1 << int(shift))), int(mult)))
    e = exp_lut[diff + 255]
    keep = diff >= int(diff_min)
    total = wrap32(np.where(keep, rdbpot(e, SOFTMAX_ACCUM_BITS), 0).sum(axis=-1, keepdims=True))
    headroom = clz32(total)
    normalised = np.where(total > 0, (total << np.minimum(headroom, 31)) & 0xFFFFFFFF, 0)
    scale = one_over_one_plus_x(wrap32(normalised - (1 << 31)))
    exponent = SOFTMAX_ACCUM_BITS + 23 - headroom
    res = rdbpot(srdhm(scale, e), exponent) - 128
    return np.where(keep, np.clip(res, -128, 127), -128).astype(np.int8)


def elementwise_add_s8(
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    in1_offset: int,
    in1_mult: int,
    in1_shift: int,
    in2_offset: int,
    in2_mult: int,
    in2_shift: int,
    left_shift: int,
    out_offset: int,
    out_mult: int,
    out_shift: int,
    act_min: int = -128,
    act_max: int = 127,
) -> I8:
    """arm_elementwise_add_s8, parameters in the C order (keys of :func:`arith.add_params`).

    out = clamp(requant(requant((a+off1)·2^ls, M1, s1) + requant((b+off2)·2^ls, M2, s2),
    Mo, so) + out_off); all int32 operations wrap. a and b broadcast.
    """
    aa, ba = _as_i8(a, "a"), _as_i8(b, "b")
    values = np.arange(-128, 128, dtype=np.int64)
    # Each input term depends on one int8 value only: tabulate it.
    lut1 = requantize(wrap32((values + int(in1_offset)) << int(left_shift)), int(in1_mult), int(in1_shift))
    lut2 = requantize(wrap32((values + int(in2_offset)) << int(left_shift)), int(in2_mult), int(in2_shift))
    total = wrap32(lut1[aa.astype(np.int64) + 128] + lut2[ba.astype(np.int64) + 128])
    return _requant_out(total, int(out_mult), int(out_shift), out_offset, act_min, act_max)


# ---------------------------------------------------------------------------
# cisl kernels
# ---------------------------------------------------------------------------


def isqrt_u64(v: npt.ArrayLike) -> I64:
    """Exact floor square root of non-negative int64 values (< 2^63), element-wise."""
    arr = np.asarray(v, dtype=np.int64)
    u = arr.reshape(-1)  # 1-d so that the uint64 wrap in unselected np.where branches never warns
    if np.any(u < 0):
        raise ValueError("isqrt of a negative value")
    uu = u.astype(np.uint64)
    s = np.floor(np.sqrt(u.astype(np.float64))).astype(np.uint64)
    # float sqrt is within one of the answer; correct both ways (uint64: (s+1)^2 < 2^64 here).
    for _ in range(2):
        s = np.where(s * s > uu, s - np.uint64(1), s)
    for _ in range(2):
        s = np.where((s + np.uint64(1)) * (s + np.uint64(1)) <= uu, s + np.uint64(1), s)
    return s.astype(np.int64).reshape(arr.shape)


def _bitlen(v: I64) -> I64:
    _, e = np.frexp(v.astype(np.float64))  # exact for v < 2^53
    return np.where(v == 0, 0, e.astype(np.int64))


def layernorm_s8(
    x: npt.ArrayLike,
    valid: npt.ArrayLike | None,
    zp_in: int,
    zp_out: int,
    eps_q: int,
    gamma_q: npt.ArrayLike,
    beta_q: npt.ArrayLike,
) -> I8:
    """cisl_layernorm_s8 over the last axis of x [..., rows, cols].

    ``valid``: None (all columns present), bool [cols], or bool [..., cols] with
    the leading dims broadcasting against x's leading (per-sample) dims; the
    same mask applies to every row of a sample. Absent columns output zp_out.
    """
    xa = _as_i8(x, "x")
    if xa.ndim < 2:
        raise ValueError("x must be [..., rows, cols]")
    if eps_q < 0:
        raise ValueError("eps_q must be >= 0")
    cols = xa.shape[-1]
    if cols > 32767:
        raise ValueError("cols must be <= 32767")
    if valid is None:
        vm = np.ones(cols, dtype=bool)
    else:
        vm = np.asarray(valid, dtype=bool)
        if vm.shape[-1] != cols:
            raise ValueError(f"valid has {vm.shape[-1]} columns, x has {cols}")
    vm = vm[..., None, :]  # the rows axis
    xi = xa.astype(np.int64) - int(zp_in)
    xs = np.where(vm, xi, 0)
    n = vm.sum(axis=-1, keepdims=True, dtype=np.int64)
    total = xs.sum(axis=-1, keepdims=True)
    sumsq = (xs * xs).sum(axis=-1, keepdims=True)
    var_n = n * sumsq - total * total + ((n * n * int(eps_q) + (1 << 15)) >> 16)
    sd = np.maximum(isqrt_u64(var_n << 16), 1)
    shift = _bitlen(sd) + 9
    inv = ((np.uint64(1) << (20 + shift).astype(np.uint64)) // sd.astype(np.uint64)).astype(np.int64)
    d = n * xi - total
    t = (d * inv + (np.int64(1) << (shift - 1))) >> shift
    acc = t * np.asarray(gamma_q, dtype=np.int64) + np.asarray(beta_q, dtype=np.int64) * 4096
    y = np.clip(int(zp_out) + ((acc + (1 << 27)) >> 28), -128, 127)
    return np.where(vm, y, int(zp_out)).astype(np.int8)


def fc_s8_s32(x: npt.ArrayLike, w: npt.ArrayLike, in_offset: int) -> I32:
    """cisl_fc_s8_s32: wrap32(Σ_i (x[..., i] + in_offset)·w[o, i]) -> int32 [..., N]."""
    xa, wa = _as_i8(x, "x"), _as_i8(w, "w")
    if wa.ndim != 2 or xa.shape[-1] != wa.shape[1]:
        raise ValueError(f"shape mismatch: x {xa.shape}, w {wa.shape}")
    _check_exact(wa.shape[1], in_offset, 0)
    acc = _to_int64(_offset_f64(xa, in_offset) @ wa.astype(np.float64).T)
    return wrap32(acc).astype(np.int32)


def reduce_requant_s32_s8(
    parts: npt.ArrayLike | list[npt.ArrayLike],
    delivered: npt.ArrayLike | None,
    bias: npt.ArrayLike | None,
    mult: IntOrArray,
    shift: IntOrArray,
    out_zp: int,
) -> I8:
    """cisl_reduce_requant_s32_s8: parts [P, ..., N] (or a list of P arrays [..., N]).

    acc = wrap32(bias + Σ delivered parts); y = clamp(requant(acc, mult, shift) + out_zp).
    ``delivered``: None (all) or bool [P] / [P, ...] (per-sample), broadcast over
    the trailing dims. mult/shift: scalars or [N].
    """
    p = np.asarray(np.stack([np.asarray(q) for q in parts]) if isinstance(parts, list) else parts)
    if p.dtype != np.int32:
        raise TypeError(f"parts must be int32, got {p.dtype}")
    p64 = p.astype(np.int64)
    if delivered is not None:
        dm = np.asarray(delivered, dtype=bool)
        dm = dm.reshape(dm.shape + (1,) * (p64.ndim - dm.ndim))
        p64 = np.where(dm, p64, 0)
    acc = p64.sum(axis=0)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    y = requantize(wrap32(acc), mult, shift) + int(out_zp)  # exact add, as the C does in 64 bits
    return np.clip(y, -128, 127).astype(np.int8)


def crc32(data: bytes | bytearray | memoryview | npt.NDArray[np.generic]) -> int:
    """cisl_crc32: CRC-32 of the bytes (of a C-contiguous array's memory) = zlib.crc32."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).tobytes()
    return zlib.crc32(data) & 0xFFFFFFFF
