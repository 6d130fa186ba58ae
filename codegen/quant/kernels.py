"""Numpy mirrors of the int8 kernels, bit-exact with the C (nnref / upstream CMSIS-NN
portable path and firmware/runtime/cisl_kernels.c).

These are the oracle the generated C is tested against and the arithmetic of the
reference executor, so they are vectorised over any number of leading batch
dimensions. Inputs are int8 arrays; outputs are int8 (int32 for
:func:`fc_s8_s32`). Arithmetic: shared CMSIS-NN notes §4 and docs/design/kernels.md.

Matrix products are summed by BLAS on the offset-adjusted values: every term is an
integer of magnitude ≤ 255·255, so every partial sum is an integer bounded by
depth·255·255 and the float sums are exact whatever order BLAS adds in — in float32
while that bound is below 2^24 (depth ≤ 255 for any legal offsets, ≤ 511 with a zero
weight offset), else in float64 (bound asserted below 2^53). The rest is int64 arithmetic on int32 values, in
cache-sized chunks; softmax and add use tables over the 256 possible int8 inputs.
For tens of thousands of samples this is well under a second per kernel.
"""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

from .arith import (
    INT32_MAX,
    INT32_MIN,
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
_EXACT_FLOAT32_SUM = 1 << 24
# Elements per chunk of the matmul/softmax pipelines: the int64 temporaries then stay in
# cache, which is several times faster than whole-array passes on large batches.
_CHUNK = 1 << 16


def _as_i8(x: npt.ArrayLike, name: str) -> I8:
    a = np.asarray(x)
    if a.dtype != np.int8:
        raise TypeError(f"{name} must be an int8 array, got {a.dtype}")
    return a


def _sum_dtype(depth: int, off_a: int, off_b: int) -> type[np.floating]:
    """float32 if every partial sum is an integer below 2^24, else float64 (asserting < 2^53).

    Each term is an integer with |term| <= (128 + |off_a|)(128 + |off_b|), so all partial
    sums, in whatever order BLAS adds them, are integers bounded by depth times that:
    exactly representable, hence every addition is exact.
    """
    bound = depth * (128 + abs(int(off_a))) * (128 + abs(int(off_b)))
    assert bound < _EXACT_FLOAT_SUM, f"float64 matmul not exact for depth {depth}"
    return np.float32 if bound < _EXACT_FLOAT32_SUM else np.float64


def _requant_out(
    acc: I64,
    mult: IntOrArray,
    shift: IntOrArray,
    out_offset: int,
    act_min: int,
    act_max: int,
    may_wrap: bool = True,
) -> I8:
    """wrap32 the accumulator, requantize, add the output offset in wrapping int32 (as the C
    does), clamp, cast. ``may_wrap=False`` when |acc| < 2^31 is known."""
    if may_wrap:
        acc = wrap32(acc)
    y = requantize(acc, mult, shift)
    y += int(out_offset)
    if out_offset > 0:
        y[y > INT32_MAX] -= 1 << 32
    elif out_offset < 0:
        y[y < INT32_MIN] += 1 << 32
    np.clip(y, int(act_min), int(act_max), out=y)
    return y.astype(np.int8)


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
    depth, n = wa.shape[1], wa.shape[0]
    ft = _sum_dtype(depth, in_offset, w_offset)
    w_t = np.ascontiguousarray((wa.astype(ft) + ft(w_offset)).T)
    b = None if bias is None else np.asarray(bias, dtype=np.int64)
    bias_max = 0 if b is None else int(np.abs(b).max(initial=0))
    may_wrap = depth * (128 + abs(int(in_offset))) * (128 + abs(int(w_offset))) + bias_max > INT32_MAX
    m64, s64 = np.asarray(mult, dtype=np.int64), np.asarray(shift, dtype=np.int64)

    x2 = xa.reshape(-1, depth)
    out = np.empty((x2.shape[0], n), dtype=np.int8)
    step = max(1, _CHUNK // max(n, 1))
    for i in range(0, x2.shape[0], step):
        acc = ((x2[i : i + step].astype(ft) + ft(in_offset)) @ w_t).astype(np.int64)
        if b is not None:
            acc += b
        out[i : i + step] = _requant_out(acc, m64, s64, out_offset, act_min, act_max, may_wrap)
    return out.reshape(xa.shape[:-1] + (n,))


def fc_strided_s8(x: npt.ArrayLike, w: npt.ArrayLike, k: int, bias: npt.ArrayLike | None, in_offset: int,
                  out_offset: int, mult: IntOrArray, shift: IntOrArray, act_min: int = -128, act_max: int = 127) -> I8:
    """cisl_fc_strided_s8: the first ``k`` columns of every row of ``w`` [N, stride] applied to
    x [..., k] — arm_fully_connected_per_channel_s8 on w[:, :k]."""
    return fully_connected_s8(x, np.asarray(w)[:, :k], bias, in_offset, 0, out_offset, mult, shift, act_min, act_max)


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
    (m, depth), n = la.shape[-2:], ra.shape[-2]
    batch = np.broadcast_shapes(la.shape[:-2], ra.shape[:-2])
    ft = _sum_dtype(depth, lhs_offset, rhs_offset)
    may_wrap = depth * (128 + abs(int(lhs_offset))) * (128 + abs(int(rhs_offset))) > INT32_MAX
    l3 = np.broadcast_to(la, batch + (m, depth)).reshape(-1, m, depth)
    r3 = np.broadcast_to(ra, batch + (n, depth)).reshape(-1, n, depth)

    out = np.empty((l3.shape[0], m, n), dtype=np.int8)
    step = max(1, _CHUNK // max(m * n, 1))
    for i in range(0, l3.shape[0], step):
        a = l3[i : i + step].astype(ft) + ft(lhs_offset)
        b = r3[i : i + step].astype(ft) + ft(rhs_offset)
        acc = (a @ np.swapaxes(b, -1, -2)).astype(np.int64)
        out[i : i + step] = _requant_out(acc, mult, shift, out_offset, act_min, act_max, may_wrap)
    return out.reshape(batch + (m, n))


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
    size = xa.shape[-1]
    # Everything per element depends only on diff = x - max in [-255, 0]: tabulate it.
    # Entries below diff_min get e = 0 (no contribution to the sum, output exactly -128).
    d_all = np.arange(-255, 1, dtype=np.int64)
    exp_lut = exp_on_negative_values(srdhm(wrap32(d_all * (1 << int(shift))), int(mult)))
    exp_lut = np.where(d_all >= int(diff_min), exp_lut, 0)
    term_lut = rdbpot(exp_lut, SOFTMAX_ACCUM_BITS)

    x2 = xa.reshape(-1, size)
    out = np.empty(x2.shape, dtype=np.int8)
    step = max(1, _CHUNK // max(size, 1))
    for i in range(0, x2.shape[0], step):
        xc = x2[i : i + step].astype(np.int64)
        idx = xc - xc.max(axis=-1, keepdims=True) + 255
        total = wrap32(term_lut[idx].sum(axis=-1, keepdims=True))
        headroom = clz32(total)
        normalised = np.where(total > 0, (total << np.minimum(headroom, 31)) & 0xFFFFFFFF, 0)
        scale = one_over_one_plus_x(wrap32(normalised - (1 << 31)))
        exponent = SOFTMAX_ACCUM_BITS + 23 - headroom
        res = rdbpot(srdhm(scale, exp_lut[idx]), exponent)
        res -= 128
        np.clip(res, -128, 127, out=res)
        out[i : i + step] = res
    return out.reshape(xa.shape)


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
    # The output depends only on the pair of int8 values: tabulate all 256 x 256 pairs,
    # indexed by the raw bytes (uint8 view), then one gather does the whole tensor.
    values = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
    term1 = requantize(wrap32((values + int(in1_offset)) << int(left_shift)), int(in1_mult), int(in1_shift))
    term2 = requantize(wrap32((values + int(in2_offset)) << int(left_shift)), int(in2_mult), int(in2_shift))
    total = wrap32(term1[:, None] + term2[None, :])
    table = _requant_out(total, int(out_mult), int(out_shift), out_offset, act_min, act_max, may_wrap=False)
    return table[aa.view(np.uint8), ba.view(np.uint8)]


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
    rows = xa.shape[-2]
    batch = np.broadcast_shapes(xa.shape[:-2], vm.shape[:-1])
    x3 = np.broadcast_to(xa, batch + (rows, cols)).reshape(-1, rows, cols)
    v2 = np.broadcast_to(vm, batch + (cols,)).reshape(-1, 1, cols)
    g = np.asarray(gamma_q, dtype=np.int64)
    b4096 = np.asarray(beta_q, dtype=np.int64) * 4096
    out = np.empty(x3.shape, dtype=np.int8)
    step = max(1, _CHUNK // max(rows * cols, 1))
    for i in range(0, x3.shape[0], step):
        out[i : i + step] = _layernorm_chunk(x3[i : i + step], v2[i : i + step], zp_in, zp_out, eps_q, g, b4096)
    return out.reshape(batch + (rows, cols))


def _layernorm_chunk(
    x: I8, vm: npt.NDArray[np.bool_], zp_in: int, zp_out: int, eps_q: int, g: I64, b4096: I64
) -> I8:
    """cisl_layernorm_s8 on x [B, rows, cols] with masks vm [B, 1, cols] (kernels.md, step by step)."""
    xi = x.astype(np.int64)
    xi -= int(zp_in)
    xs = np.where(vm, xi, 0)
    n = vm.sum(axis=-1, keepdims=True, dtype=np.int64)
    total = xs.sum(axis=-1, keepdims=True)
    xs *= xs
    sumsq = xs.sum(axis=-1, keepdims=True)
    var_n = n * sumsq - total * total + ((n * n * int(eps_q) + (1 << 15)) >> 16)
    sd = np.maximum(isqrt_u64(var_n << 16), 1)
    shift = _bitlen(sd) + 9
    inv = ((np.uint64(1) << (20 + shift).astype(np.uint64)) // sd.astype(np.uint64)).astype(np.int64)
    t = xi  # reuse: d = n·(x − zp_in) − sum, then t = (d·inv + 2^(S−1)) >> S
    t *= n
    t -= total
    t *= inv
    t += np.int64(1) << (shift - 1)
    t >>= shift
    t *= g  # acc = t·gamma_q + beta_q·2^12
    t += b4096
    t += 1 << 27
    t >>= 28
    t += int(zp_out)
    np.clip(t, -128, 127, out=t)
    return np.where(vm, t, int(zp_out)).astype(np.int8)


def fc_s8_s32(x: npt.ArrayLike, w: npt.ArrayLike, in_offset: int) -> I32:
    """cisl_fc_s8_s32: wrap32(Σ_i (x[..., i] + in_offset)·w[o, i]) -> int32 [..., N]."""
    xa, wa = _as_i8(x, "x"), _as_i8(w, "w")
    if wa.ndim != 2 or xa.shape[-1] != wa.shape[1]:
        raise ValueError(f"shape mismatch: x {xa.shape}, w {wa.shape}")
    ft = _sum_dtype(wa.shape[1], in_offset, 0)
    acc = ((xa.astype(ft) + ft(in_offset)) @ wa.astype(ft).T).astype(np.int64)
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


def rescale_delivered(valid: np.ndarray, own_lo: int, own_hi: int) -> np.ndarray:
    """[batch]: received columns that arrived (valid outside the own range)."""
    v = np.asarray(valid, dtype=bool)
    return v[..., :own_lo].sum(axis=-1) + v[..., own_hi:].sum(axis=-1)


def rescale_s8(x: np.ndarray, valid: np.ndarray, own_lo: int, own_hi: int, zero_point: int) -> np.ndarray:
    """cisl_rescale_s8 on x [batch, rows, cols] with valid [batch, cols] (bool)."""
    x = np.asarray(x)
    cols = x.shape[-1]
    expected = cols - (own_hi - own_lo)
    got = rescale_delivered(valid, own_lo, own_hi).astype(np.int64)  # [batch]
    scale = (got > 0) & (got < expected)
    out = x.copy()
    if not scale.any() or expected == 0:
        return out
    cross = np.ones(cols, dtype=bool)
    cross[own_lo:own_hi] = False
    sel = scale[:, None] & np.asarray(valid, dtype=bool) & cross[None, :]  # [batch, cols]
    num = (x.astype(np.int64) - zero_point) * expected
    r = np.where(got > 0, got, 1)[:, None, None]
    q = np.sign(num) * ((np.abs(num) + r // 2) // r)
    y = np.clip(zero_point + q, -128, 127).astype(np.int8)
    return np.where(sel[:, None, :], y, out).astype(np.int8)
